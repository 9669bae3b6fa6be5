//! `kubectl get` Tables (`meta.k8s.io` `Table`): the built-in kinds' own columns ([`crate::printers`]),
//! a custom resource's printer columns evaluated with simple JSONPaths, or Name and Age; what each row
//! carries (`includeObject`) and the Table's version, as the client asked.

use serde_json::{json, Value};

use crate::errors::ApiError;
use crate::printers;
use crate::resources::ResourceInfo;

/// One step of a parsed JSONPath.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    Index(usize),
    All,
    Filter(Vec<Step>, bool, Value),
}

fn parse_path(expr: &str) -> Vec<Step> {
    let expr = expr.trim();
    let expr = expr
        .strip_prefix('{')
        .and_then(|e| e.strip_suffix('}'))
        .unwrap_or(expr);
    let expr = expr.strip_prefix('$').unwrap_or(expr);
    let chars: Vec<char> = expr.chars().collect();
    let mut steps = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '.' => {
                let start = i + 1;
                let mut j = start;
                while j < chars.len() && chars[j] != '.' && chars[j] != '[' {
                    j += 1;
                }
                let name: String = chars[start..j].iter().collect();
                if !name.is_empty() {
                    steps.push(Step::Field(name));
                }
                i = j;
            }
            '[' => {
                let mut depth = 0;
                let mut j = i;
                while j < chars.len() {
                    match chars[j] {
                        '[' => depth += 1,
                        ']' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
                let inner: String = chars[i + 1..j.min(chars.len())].iter().collect();
                steps.push(parse_bracket(inner.trim()));
                i = j + 1;
            }
            _ => {
                let start = i;
                let mut j = i;
                while j < chars.len() && chars[j] != '.' && chars[j] != '[' {
                    j += 1;
                }
                steps.push(Step::Field(chars[start..j].iter().collect()));
                i = j;
            }
        }
    }
    steps
}

fn parse_bracket(inner: &str) -> Step {
    if inner == "*" {
        return Step::All;
    }
    if let Ok(n) = inner.parse::<usize>() {
        return Step::Index(n);
    }
    if let Some(f) = inner.strip_prefix("?(").and_then(|f| f.strip_suffix(')')) {
        let (lhs, eq, rhs) = match (f.find("=="), f.find("!=")) {
            (Some(p), _) => (&f[..p], true, &f[p + 2..]),
            (None, Some(p)) => (&f[..p], false, &f[p + 2..]),
            _ => (f, true, "true"),
        };
        let lhs = lhs.trim().strip_prefix('@').unwrap_or(lhs.trim());
        let rhs = rhs.trim();
        let literal = if (rhs.starts_with('"') && rhs.ends_with('"')
            || rhs.starts_with('\'') && rhs.ends_with('\''))
            && rhs.len() >= 2
        {
            Value::String(rhs[1..rhs.len() - 1].to_string())
        } else {
            serde_json::from_str(rhs).unwrap_or_else(|_| Value::String(rhs.to_string()))
        };
        return Step::Filter(parse_path(lhs), eq, literal);
    }
    let quoted = inner.trim_matches(|c| c == '\'' || c == '"');
    Step::Field(quoted.to_string())
}

fn eval_steps<'a>(roots: Vec<&'a Value>, steps: &[Step]) -> Vec<&'a Value> {
    let mut cur = roots;
    for step in steps {
        let mut next = Vec::new();
        for v in cur {
            match step {
                Step::Field(f) => {
                    if let Some(x) = v.get(f.as_str()) {
                        next.push(x);
                    }
                }
                Step::Index(n) => {
                    if let Some(x) = v.as_array().and_then(|a| a.get(*n)) {
                        next.push(x);
                    }
                }
                Step::All => match v {
                    Value::Array(a) => next.extend(a.iter()),
                    Value::Object(m) => next.extend(m.values()),
                    _ => {}
                },
                Step::Filter(path, eq, lit) => {
                    for item in v.as_array().into_iter().flatten() {
                        let got = eval_steps(vec![item], path);
                        let hit = got.first().is_some_and(|g| *g == lit);
                        if hit == *eq {
                            next.push(item);
                        }
                    }
                }
            }
        }
        cur = next;
    }
    cur
}

/// Evaluates a simple JSONPath (`.a.b`, `[0]`, `[*]`, `[?(@.type=="Ready")]`) against an object.
pub fn jsonpath<'a>(obj: &'a Value, expr: &str) -> Vec<&'a Value> {
    eval_steps(vec![obj], &parse_path(expr))
}

/// What each row of a Table carries (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Include {
    /// `None`: `"object": null`.
    None,
    /// `Metadata` (the default): the object's `PartialObjectMetadata`.
    Metadata,
    /// `Object`: the whole object.
    Object,
}

impl Include {
    /// Reads `includeObject`; another value is refused in the server's words.
    pub fn parse(value: Option<&str>) -> Result<Include, ApiError> {
        match value.unwrap_or("") {
            "" | "Metadata" => Ok(Include::Metadata),
            "None" => Ok(Include::None),
            "Object" => Ok(Include::Object),
            other => Err(ApiError::bad_request(format!(
                "Unable to convert to Table as requested: includeObject: Invalid value: {}: must be 'Metadata', 'Object', 'None', or empty",
                json!(other)
            ))),
        }
    }
}

/// A client's request for Tables: the `meta.k8s.io` version and what rows carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableRequest {
    /// `v1` or `v1beta1`.
    pub version: &'static str,
    /// `includeObject`.
    pub include: Include,
}

impl TableRequest {
    fn api_version(&self) -> String {
        format!("meta.k8s.io/{}", self.version)
    }
}

fn age(ts: &str, now: jiff::Timestamp) -> Value {
    Value::String(printers::since(ts.parse().ok(), now))
}

fn cell(obj: &Value, type_: &str, path: &str, now: jiff::Timestamp) -> Value {
    let found = jsonpath(obj, path);
    if found.is_empty() {
        return Value::Null;
    }
    if type_ == "date" {
        return found[0].as_str().map(|t| age(t, now)).unwrap_or(Value::Null);
    }
    if found.len() == 1 {
        return match found[0] {
            Value::Object(_) | Value::Array(_) => Value::String(found[0].to_string()),
            other => other.clone(),
        };
    }
    let parts: Vec<String> = found
        .iter()
        .map(|v| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string()))
        .collect();
    Value::String(parts.join(","))
}

/// Column definitions for a resource: a built-in kind's own, else Name then its printer columns (or Age).
pub fn column_definitions(info: &ResourceInfo) -> Value {
    if let Some(columns) = printers::columns(&info.group, &info.resource) {
        return columns
            .iter()
            .map(|c| {
                json!({"name": c.name, "type": c.type_, "format": c.format,
                "description": c.description, "priority": c.priority})
            })
            .collect();
    }
    let mut cols = vec![json!({"name": "Name", "type": "string", "format": "name",
        "description": "Name must be unique within a namespace.", "priority": 0})];
    if info.columns.is_empty() {
        cols.push(json!({"name": "Age", "type": "string", "format": "",
            "description": "CreationTimestamp is a timestamp representing the server time when this object was created.",
            "priority": 0}));
    } else {
        for c in &info.columns {
            cols.push(
                json!({"name": c.name, "type": if c.type_ == "date" { "string" } else { c.type_.as_str() },
                "format": c.format, "description": c.description, "priority": c.priority}),
            );
        }
    }
    Value::Array(cols)
}

/// One table row for an object (as served), at `now`.
pub fn row(info: &ResourceInfo, obj: &Value, request: &TableRequest, now: jiff::Timestamp) -> Value {
    let mut r = match printers::row(&info.group, &info.resource, obj, now) {
        Some(printed) => {
            let mut r = json!({"cells": printed.cells});
            if let Some(conditions) = printed.conditions {
                r["conditions"] = conditions;
            }
            r
        }
        None => {
            let mut cells = vec![obj.pointer("/metadata/name").cloned().unwrap_or(Value::Null)];
            if info.columns.is_empty() {
                cells.push(
                    obj.pointer("/metadata/creationTimestamp")
                        .and_then(Value::as_str)
                        .map(|t| age(t, now))
                        .unwrap_or(Value::Null),
                );
            } else {
                for c in &info.columns {
                    cells.push(cell(obj, &c.type_, &c.json_path, now));
                }
            }
            json!({"cells": cells})
        }
    };
    r["object"] = match request.include {
        Include::None => Value::Null,
        Include::Object => obj.clone(),
        Include::Metadata => json!({"kind": "PartialObjectMetadata", "apiVersion": request.api_version(),
            "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))}),
    };
    r
}

/// A Table of objects (as served) at `now`; `metadata` is the Table's list metadata (its
/// `resourceVersion`, and `continue` and `remainingItemCount` under a limit).
pub fn table(
    info: &ResourceInfo,
    objects: &[&Value],
    request: &TableRequest,
    metadata: Value,
    now: jiff::Timestamp,
) -> Value {
    let rows: Vec<Value> = objects.iter().map(|o| row(info, o, request, now)).collect();
    json!({"kind": "Table", "apiVersion": request.api_version(), "metadata": metadata,
        "columnDefinitions": column_definitions(info), "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn condition_filter_selects_the_ready_status() {
        let o = json!({"status": {"conditions": [{"type": "Other", "status": "False"}, {"type": "Ready", "status": "True"}]}});
        assert_eq!(
            jsonpath(&o, ".status.conditions[?(@.type==\"Ready\")].status"),
            vec![&json!("True")]
        );
        assert_eq!(jsonpath(&o, ".status.conditions[*].type").len(), 2);
        assert_eq!(jsonpath(&o, ".status.conditions[0].type"), vec![&json!("Other")]);
        assert!(jsonpath(&o, ".spec.x").is_empty());
    }

    #[test]
    fn include_object_takes_the_documented_values_only() {
        assert_eq!(Include::parse(None).unwrap(), Include::Metadata);
        assert_eq!(Include::parse(Some("None")).unwrap(), Include::None);
        let e = Include::parse(Some("Bogus")).unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "Unable to convert to Table as requested: includeObject: Invalid value: \"Bogus\": must be 'Metadata', 'Object', 'None', or empty"
        );
    }
}
