//! `kubectl get` tables (meta.k8s.io/v1 Table): printer columns evaluated with simple JSONPaths.

use serde_json::{json, Value};

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

/// Kubernetes' human-readable duration (`45s`, `5m3s`, `3h`, `2d4h`).
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let secs = secs.max(0);
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86400);
    if secs < 120 {
        format!("{secs}s")
    } else if m < 10 {
        if secs % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", secs % 60)
        }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 192 {
        if h % 24 == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{}h", h % 24)
        }
    } else if d < 730 {
        format!("{d}d")
    } else {
        format!("{}y{}d", d / 365, d % 365)
    }
}

fn age(ts: &str) -> Value {
    match ts.parse::<jiff::Timestamp>() {
        Ok(t) => Value::String(human_duration(jiff::Timestamp::now().as_second() - t.as_second())),
        Err(_) => Value::String("<unknown>".into()),
    }
}

fn cell(obj: &Value, type_: &str, path: &str) -> Value {
    let found = jsonpath(obj, path);
    if found.is_empty() {
        return Value::Null;
    }
    if type_ == "date" {
        return found[0].as_str().map(age).unwrap_or(Value::Null);
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

/// Column definitions for a resource: Name first, then its printer columns (or Age).
pub fn column_definitions(info: &ResourceInfo) -> Value {
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

/// One table row for an object; `include` is the `includeObject` parameter.
pub fn row(info: &ResourceInfo, obj: &Value, include: &str) -> Value {
    let mut cells = vec![obj.pointer("/metadata/name").cloned().unwrap_or(Value::Null)];
    if info.columns.is_empty() {
        cells.push(
            obj.pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .map(age)
                .unwrap_or(Value::Null),
        );
    } else {
        for c in &info.columns {
            cells.push(cell(obj, &c.type_, &c.json_path));
        }
    }
    let mut r = json!({"cells": cells});
    match include {
        "None" => {}
        "Object" => r["object"] = obj.clone(),
        _ => {
            r["object"] = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))})
        }
    }
    r
}

/// A Table of objects.
pub fn table(info: &ResourceInfo, objects: &[&Value], include: &str, rv: &str, cont: Option<&str>) -> Value {
    let rows: Vec<Value> = objects.iter().map(|o| row(info, o, include)).collect();
    let mut meta = json!({"resourceVersion": rv});
    if let Some(c) = cont {
        meta["continue"] = json!(c);
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
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
    fn durations_read_like_kubectl() {
        assert_eq!(human_duration(45), "45s");
        assert_eq!(human_duration(303), "5m3s");
        assert_eq!(human_duration(3 * 3600), "3h");
        assert_eq!(human_duration(52 * 3600), "2d4h");
    }
}
