//! Custom resources against their CRD's structural schema, as the real API server checks them:
//! unknown fields pruned (and reported or refused per `fieldValidation`), then types, required
//! fields, enums, patterns, lengths, bounds and item counts, then the `x-kubernetes-validations`
//! CEL rules. Errors carry the real server's wording (see `tests/integration/realapi.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{json, Map, Value};

use crate::errors::{cause, ApiError, Cause};

/// `fieldValidation`: what an unknown field does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FieldValidation {
    /// Pruned silently.
    Ignore,
    /// Pruned with a `Warning` header (the default).
    #[default]
    Warn,
    /// The request is refused (400).
    Strict,
}

impl FieldValidation {
    /// The query parameter's value; anything else is a 400.
    pub fn parse(value: Option<&str>) -> Result<FieldValidation, ApiError> {
        match value {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation must be one of Ignore, Warn or Strict, not {other:?}"
            ))),
        }
    }
}

/// What one custom resource kind is checked against.
pub struct Target<'a> {
    /// The CRD's `openAPIV3Schema` for the version written.
    pub schema: &'a Value,
    /// API group.
    pub group: &'a str,
    /// Version written.
    pub version: &'a str,
    /// Kind.
    pub kind: &'a str,
}

/// Fields every object has, outside the schema's say.
const OBJECT_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Removes fields the schema does not know; returns their paths.
fn prune(schema: &Value, value: &mut Value, path: &str, top: bool, unknown: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let preserve = schema["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true);
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                if top && OBJECT_FIELDS.contains(&key.as_str()) {
                    continue;
                }
                let child = child_path(path, &key);
                if let Some(s) = props.and_then(|p| p.get(&key)).or(additional) {
                    // A null the schema does not allow is dropped, as the apiserver does before
                    // defaulting.
                    if map[&key].is_null() && s["nullable"] != Value::Bool(true) {
                        map.remove(&key);
                    } else if let Some(v) = map.get_mut(&key) {
                        prune(s, v, &child, false, unknown);
                    }
                } else if !preserve && (props.is_some() || schema.get("type").is_some()) {
                    map.remove(&key);
                    unknown.push(child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune(s, item, &format!("{path}[{i}]"), false, unknown);
                }
            }
        }
        _ => {}
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(expected: &str, actual: &str) -> bool {
    expected == actual || (expected == "number" && actual == "integer")
}

fn regex(pattern: &str) -> Option<regex::Regex> {
    static CACHE: OnceLock<Mutex<HashMap<String, Option<regex::Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    cache
        .entry(pattern.to_string())
        .or_insert_with(|| regex::Regex::new(pattern).ok())
        .clone()
}

fn invalid(path: &str, value: &Value, why: String) -> Cause {
    cause(
        "FieldValueInvalid",
        path,
        format!("Invalid value: {value}: {path} in body {why}"),
    )
}

/// Checks a value against its schema, collecting causes.
fn check(schema: &Value, value: &Value, path: &str, top: bool, out: &mut Vec<Cause>) {
    composition(schema, value, path, out);
    if !check_type(schema, value, path, out) {
        return;
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        if !options.contains(value) {
            let listed: Vec<String> = options.iter().map(Value::to_string).collect();
            out.push(cause(
                "FieldValueNotSupported",
                path,
                format!(
                    "Unsupported value: {value}: supported values: {}",
                    listed.join(", ")
                ),
            ));
        }
    }
    match value {
        Value::String(s) => check_string(schema, value, s, path, out),
        Value::Number(n) => check_number(schema, value, n.as_f64().unwrap_or(0.0), path, out),
        Value::Array(items) => check_array(schema, items, path, out),
        Value::Object(map) => {
            check_object(schema, map, path, top, out);
            check_fields(schema, map, path, top, out);
        }
        _ => {}
    }
}

/// Checks a value's type (`type`, `nullable`, `x-kubernetes-int-or-string`); whether the checks of its
/// value go on.
fn check_type(schema: &Value, value: &Value, path: &str, out: &mut Vec<Cause>) -> bool {
    if value.is_null() {
        // Null fields were pruned; what is left is a list item or an allowed null.
        if let Some(expected) = schema.get("type").and_then(Value::as_str) {
            if schema["nullable"] != Value::Bool(true) {
                out.push(type_error(path, "null", expected));
            }
        }
        return false;
    }
    let actual = type_name(value);
    if schema["x-kubernetes-int-or-string"] == Value::Bool(true) {
        if !matches!(actual, "integer" | "string") {
            out.push(type_error(path, actual, "integer,string"));
        }
        return false;
    }
    if let Some(expected) = schema.get("type").and_then(Value::as_str) {
        if !type_matches(expected, actual) {
            out.push(type_error(path, actual, expected));
            return false;
        }
    }
    true
}

/// The number the schema gives under `key` (a length, a count, a bound).
fn bound(schema: &Value, key: &str) -> Option<f64> {
    schema.get(key).and_then(Value::as_f64)
}

/// A string's length, pattern and format.
fn check_string(schema: &Value, value: &Value, s: &str, path: &str, out: &mut Vec<Cause>) {
    let len = s.chars().count() as f64;
    if bound(schema, "maxLength").is_some_and(|m| len > m) {
        out.push(cause(
            "FieldValueTooLong",
            path,
            format!(
                "Too long: may not be more than {} bytes",
                number(&schema["maxLength"])
            ),
        ));
    }
    if bound(schema, "minLength").is_some_and(|m| len < m) {
        out.push(invalid(
            path,
            value,
            format!("should be at least {} chars long", number(&schema["minLength"])),
        ));
    }
    if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
        if regex(p).is_some_and(|r| !r.is_match(s)) {
            out.push(invalid(path, value, format!("should match '{p}'")));
        }
    }
    if let Some(format) = schema.get("format").and_then(Value::as_str) {
        if !crate::formats::conforms(format, s) {
            out.push(cause(
                "FieldValueTypeInvalid",
                path,
                format!("Invalid value: {value}: {path} in body must be of type {format}: {value}"),
            ));
        }
    }
}

/// A number's bounds (inclusive or exclusive) and the number it is a multiple of.
fn check_number(schema: &Value, value: &Value, n: f64, path: &str, out: &mut Vec<Cause>) {
    let exclusive = |key: &str| schema[key] == Value::Bool(true);
    if let Some(m) = bound(schema, "minimum") {
        let min = number(&schema["minimum"]);
        if exclusive("exclusiveMinimum") && n <= m {
            out.push(invalid(path, value, format!("should be greater than {min}")));
        } else if n < m {
            out.push(invalid(
                path,
                value,
                format!("should be greater than or equal to {min}"),
            ));
        }
    }
    if let Some(m) = bound(schema, "maximum") {
        let max = number(&schema["maximum"]);
        if exclusive("exclusiveMaximum") && n >= m {
            out.push(invalid(path, value, format!("should be less than {max}")));
        } else if n > m {
            out.push(invalid(
                path,
                value,
                format!("should be less than or equal to {max}"),
            ));
        }
    }
    if let Some(factor) = bound(schema, "multipleOf").filter(|f| *f > 0.0) {
        let q = n / factor;
        if (q - q.round()).abs() > 1e-9 {
            out.push(invalid(
                path,
                value,
                format!("should be a multiple of {}", number(&schema["multipleOf"])),
            ));
        }
    }
}

/// An array's item count, and each item against `items`.
fn check_array(schema: &Value, items: &[Value], path: &str, out: &mut Vec<Cause>) {
    if bound(schema, "maxItems").is_some_and(|m| items.len() as f64 > m) {
        out.push(cause(
            "FieldValueTooMany",
            path,
            format!(
                "Too many: {}: must have at most {} items",
                items.len(),
                number(&schema["maxItems"])
            ),
        ));
    }
    if bound(schema, "minItems").is_some_and(|m| (items.len() as f64) < m) {
        out.push(invalid(
            path,
            &json!(items.len()),
            format!("should have at least {} items", number(&schema["minItems"])),
        ));
    }
    if let Some(s) = schema.get("items") {
        for (i, item) in items.iter().enumerate() {
            check(s, item, &format!("{path}[{i}]"), false, out);
        }
    }
}

/// An object's property count (the object's own fields not counted at the top) and required fields.
fn check_object(schema: &Value, map: &Map<String, Value>, path: &str, top: bool, out: &mut Vec<Cause>) {
    let count = map.len()
        - if top {
            OBJECT_FIELDS.iter().filter(|f| map.contains_key(**f)).count()
        } else {
            0
        };
    if bound(schema, "maxProperties").is_some_and(|m| count as f64 > m) {
        out.push(cause(
            "FieldValueTooMany",
            path,
            format!(
                "Too many: {count}: must have at most {} items",
                number(&schema["maxProperties"])
            ),
        ));
    }
    if bound(schema, "minProperties").is_some_and(|m| (count as f64) < m) {
        out.push(invalid(
            path,
            &json!(""),
            format!(
                "should have at least {} properties",
                number(&schema["minProperties"])
            ),
        ));
    }
    for required in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = required.as_str().unwrap_or("");
        if map.get(name).is_none_or(Value::is_null) {
            out.push(cause(
                "FieldValueRequired",
                &child_path(path, name),
                "Required value",
            ));
        }
    }
}

/// Each field of an object against its property's schema, else `additionalProperties`.
fn check_fields(schema: &Value, map: &Map<String, Value>, path: &str, top: bool, out: &mut Vec<Cause>) {
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    for (key, v) in map {
        if top && OBJECT_FIELDS.contains(&key.as_str()) {
            continue;
        }
        if let Some(s) = props.and_then(|p| p.get(key)).or(additional) {
            check(s, v, &child_path(path, key), false, out);
        }
    }
}

/// The path of the field `name` of the object at `path`.
fn child_path(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// `allOf`, `anyOf`, `oneOf` and `not`: in a structural schema they hold value validations only,
/// checked against the same value.
fn composition(schema: &Value, value: &Value, path: &str, out: &mut Vec<Cause>) {
    let results = |key: &str| -> Vec<Vec<Cause>> {
        schema[key]
            .as_array()
            .into_iter()
            .flatten()
            .map(|sub| {
                let mut causes = Vec::new();
                check(sub, value, path, false, &mut causes);
                causes
            })
            .collect()
    };
    let composite = |message: String| invalid_composite(path, message);
    let all = results("allOf");
    if all.iter().any(|r| !r.is_empty()) {
        let none = if all.iter().all(|r| !r.is_empty()) {
            ". None validated"
        } else {
            ""
        };
        out.push(composite(format!("must validate all the schemas (allOf){none}")));
        out.extend(all.into_iter().flatten());
    }
    let any = results("anyOf");
    if !any.is_empty() && any.iter().all(|r| !r.is_empty()) {
        out.push(composite("must validate at least one schema (anyOf)".into()));
        out.extend(any.into_iter().flatten());
    }
    let one = results("oneOf");
    let valid = one.iter().filter(|r| r.is_empty()).count();
    if !one.is_empty() && valid != 1 {
        let detail = if valid == 0 {
            ""
        } else {
            " Found 2 valid alternatives"
        };
        out.push(composite(format!(
            "must validate one and only one schema (oneOf).{detail}"
        )));
        if valid == 0 {
            out.extend(one.into_iter().flatten());
        }
    }
    if let Some(not) = schema.get("not") {
        let mut causes = Vec::new();
        check(not, value, path, false, &mut causes);
        if causes.is_empty() {
            out.push(composite("must not validate the schema (not)".into()));
        }
    }
}

/// A composite error carries no value; the apiserver prints it as `""`.
fn invalid_composite(path: &str, message: String) -> Cause {
    cause(
        "FieldValueInvalid",
        path,
        format!("Invalid value: \"\": {path} {message}"),
    )
}

/// A schema number as Go prints it: `1`, not `1.0`.
fn number(v: &Value) -> String {
    match v.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        _ => v.to_string(),
    }
}

fn type_error(path: &str, actual: &str, expected: &str) -> Cause {
    cause(
        "FieldValueTypeInvalid",
        path,
        format!("Invalid value: \"{actual}\": {path} in body must be of type {expected}: \"{actual}\""),
    )
}

/// Whether a schema has CEL rules anywhere.
fn has_rules(schema: &Value) -> bool {
    match schema {
        Value::Object(m) => m.contains_key("x-kubernetes-validations") || m.values().any(has_rules),
        Value::Array(a) => a.iter().any(has_rules),
        _ => false,
    }
}

/// A CEL expression compiled once per process, as the API server compiles a CRD's rules once when it
/// is stored rather than on each request (None: it does not compile).
fn program(expression: &str) -> Option<Arc<cel::Program>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Option<Arc<cel::Program>>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(program) = cache.get(expression) {
        return program.clone();
    }
    let program = cel::Program::compile(expression).ok().map(Arc::new);
    cache.insert(expression.to_string(), program.clone());
    program
}

/// CEL's standard environment, built once: building it registers every standard function and type.
fn stdlib() -> Arc<cel::Env> {
    static ENV: OnceLock<Arc<cel::Env>> = OnceLock::new();
    ENV.get_or_init(|| Arc::new(cel::Env::stdlib())).clone()
}

fn cel_value(v: &Value) -> Option<cel::Value> {
    cel::to_value(v).ok()
}

/// The message a rule's `messageExpression` computes: used when it evaluates to a non-empty string
/// of one line, as the apiserver does; None otherwise (the static `message` applies).
fn message_expression(rule: &Value, ctx: &cel::Context) -> Option<String> {
    let expression = rule["messageExpression"].as_str()?;
    let program = program(expression)?;
    match program.execute(ctx) {
        Ok(cel::Value::String(s)) if !s.trim().is_empty() && !s.contains('\n') => Some(s.to_string()),
        _ => None,
    }
}

/// Evaluates the `x-kubernetes-validations` rules of `schema` and below. Rules naming `oldSelf` run
/// only on updates where the old value exists.
fn rules(schema: &Value, new: &Value, old: Option<&Value>, path: &str, out: &mut Vec<Cause>) {
    for rule in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let text = rule["rule"].as_str().unwrap_or("");
        let transition = text.contains("oldSelf");
        if transition && old.is_none() {
            continue;
        }
        let Some(program) = program(text) else {
            out.push(cause(
                "FieldValueInvalid",
                path,
                format!("Invalid value: rule {text:?} does not compile"),
            ));
            continue;
        };
        let mut ctx = cel::Context::with_env(stdlib());
        if let Some(v) = cel_value(new) {
            ctx.add_variable_from_value("self", v);
        }
        if let Some(v) = old.and_then(cel_value) {
            ctx.add_variable_from_value("oldSelf", v);
        }
        if !matches!(program.execute(&ctx), Ok(cel::Value::Bool(true))) {
            let message = message_expression(rule, &ctx)
                .or_else(|| rule["message"].as_str().map(str::to_string))
                .unwrap_or_else(|| format!("failed rule: {text}"));
            let field = match rule["fieldPath"].as_str() {
                Some(f) if path.is_empty() => f.trim_start_matches('.').to_string(),
                Some(f) => format!("{path}{f}"),
                None => path.to_string(),
            };
            let (reason, text) = match rule["reason"].as_str() {
                Some("FieldValueForbidden") => ("FieldValueForbidden", format!("Forbidden: {message}")),
                Some("FieldValueRequired") => ("FieldValueRequired", format!("Required value: {message}")),
                Some("FieldValueDuplicate") => ("FieldValueDuplicate", format!("Duplicate value: {message}")),
                _ => ("FieldValueInvalid", format!("Invalid value: {message}")),
            };
            out.push(cause(reason, &field, text));
        }
    }
    if let (Some(props), Value::Object(map)) = (schema.get("properties").and_then(Value::as_object), new) {
        for (key, s) in props {
            if let Some(v) = map.get(key) {
                let child = child_path(path, key);
                rules(s, v, old.and_then(|o| o.get(key)), &child, out);
            }
        }
    }
}

/// What pruned unknown fields do under `mode`: a 400 under `Strict`, a warning each under `Warn`
/// (returned), nothing under `Ignore`; worded as the apiserver words them.
pub fn unknown_fields(
    kind: &str,
    version: &str,
    unknown: &[String],
    mode: FieldValidation,
) -> Result<Vec<String>, ApiError> {
    let listed = unknown.iter().map(|u| format!("unknown field \"{u}\""));
    match mode {
        FieldValidation::Strict if !unknown.is_empty() => Err(ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
            listed.collect::<Vec<_>>().join(", "),
        ))),
        FieldValidation::Warn => Ok(listed.collect()),
        _ => Ok(Vec::new()),
    }
}

/// Prunes `obj` and validates it (and, on updates, its transition from `old`). Returns the
/// warnings to send; refuses with the real server's Status on unknown fields under `Strict` and on
/// invalid values.
pub fn validate(
    target: &Target,
    name: &str,
    old: Option<&Value>,
    obj: &mut Value,
    mode: FieldValidation,
) -> Result<Vec<String>, ApiError> {
    let mut unknown = Vec::new();
    prune(target.schema, obj, "", true, &mut unknown);
    let warnings = unknown_fields(target.kind, target.version, &unknown, mode)?;
    let mut causes = Vec::new();
    check(target.schema, obj, "", true, &mut causes);
    causes.sort_by(|a, b| a.field.cmp(&b.field));
    let skipped_rules = causes.iter().any(|c| {
        matches!(
            c.reason.as_str(),
            "FieldValueTypeInvalid"
                | "FieldValueRequired"
                | "FieldValueNotSupported"
                | "FieldValueTooLong"
                | "FieldValueTooMany"
        )
    });
    if skipped_rules && has_rules(target.schema) {
        causes.push(cause(
            "FieldValueInvalid",
            "<nil>",
            "Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
        ));
    }
    if causes.is_empty() {
        rules(target.schema, obj, old, "", &mut causes);
    }
    if causes.is_empty() {
        return Ok(warnings);
    }
    let mut e = ApiError::invalid(
        target.group,
        &format!("{}.{}", target.kind, target.group),
        name,
        causes,
    );
    e.details.kind = target.kind.to_string();
    Err(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(schema: &Value) -> Target<'_> {
        Target {
            schema,
            group: "example.test",
            version: "v1",
            kind: "Widget",
        }
    }

    /// The causes (field, message) of validating `spec` against `spec_schema`.
    fn causes(spec_schema: Value, spec: Value) -> Vec<(String, String)> {
        let schema = json!({"type": "object", "properties": {"spec": spec_schema}});
        let mut obj = json!({"apiVersion": "example.test/v1", "kind": "Widget",
            "metadata": {"name": "w"}, "spec": spec});
        match validate(&target(&schema), "w", None, &mut obj, FieldValidation::Strict) {
            Ok(_) => Vec::new(),
            Err(e) => e
                .details
                .causes
                .into_iter()
                .map(|c| (c.field, c.message))
                .collect(),
        }
    }

    fn one(field: &str, message: &str) -> Vec<(String, String)> {
        vec![(field.to_string(), message.to_string())]
    }

    #[test]
    fn formats_are_type_errors_worded_as_the_apiserver_words_them() {
        let schema = json!({"type": "object", "properties": {"when": {"type": "string", "format": "date-time"},
            "size": {"type": "integer", "format": "int32"}}});
        assert_eq!(
            causes(schema.clone(), json!({"when": "soon", "size": 5_000_000_000u64})),
            one(
                "spec.when",
                "Invalid value: \"soon\": spec.when in body must be of type date-time: \"soon\""
            )
        );
        assert!(causes(schema, json!({"when": "2026-11-23T21:00:00Z"})).is_empty());
    }

    #[test]
    fn nulls_are_dropped_unless_nullable_and_refused_in_lists() {
        let schema = json!({"type": "object", "properties": {
            "gone": {"type": "string"}, "kept": {"type": "string", "nullable": true},
            "list": {"type": "array", "items": {"type": "string"}}}});
        let full = json!({"type": "object", "properties": {"spec": schema.clone()}});
        let mut obj = json!({"metadata": {"name": "w"}, "spec": {"gone": null, "kept": null}});
        validate(&target(&full), "w", None, &mut obj, FieldValidation::Strict).unwrap();
        assert_eq!(obj["spec"], json!({"kept": null}));
        assert_eq!(
            causes(schema, json!({"list": ["a", null]})),
            one(
                "spec.list[1]",
                "Invalid value: \"null\": spec.list[1] in body must be of type string: \"null\""
            )
        );
    }

    #[test]
    fn exclusive_bounds_and_multiples() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1,
            "exclusiveMinimum": true, "maximum": 10, "exclusiveMaximum": true, "multipleOf": 3}}});
        assert_eq!(
            causes(schema.clone(), json!({"n": 1})),
            vec![
                (
                    "spec.n".into(),
                    "Invalid value: 1: spec.n in body should be greater than 1".into()
                ),
                (
                    "spec.n".into(),
                    "Invalid value: 1: spec.n in body should be a multiple of 3".into()
                ),
            ]
        );
        assert_eq!(
            causes(schema.clone(), json!({"n": 12}))
                .first()
                .map(|c| c.1.clone()),
            Some("Invalid value: 12: spec.n in body should be less than 10".into())
        );
        assert!(causes(schema, json!({"n": 9})).is_empty());
    }

    #[test]
    fn compositions_check_value_validations_against_the_same_value() {
        let schema = json!({"type": "object", "properties": {"port": {"type": "string",
            "anyOf": [{"pattern": "^[0-9]+$"}, {"enum": ["http", "https"]}], "not": {"enum": ["0"]}}}});
        assert!(causes(schema.clone(), json!({"port": "8080"})).is_empty());
        assert!(causes(schema.clone(), json!({"port": "https"})).is_empty());
        let got = causes(schema.clone(), json!({"port": "ftp"}));
        assert_eq!(
            got[0],
            (
                "spec.port".to_string(),
                "Invalid value: \"\": spec.port must validate at least one schema (anyOf)".to_string()
            )
        );
        assert_eq!(
            causes(schema, json!({"port": "0"})),
            one(
                "spec.port",
                "Invalid value: \"\": spec.port must not validate the schema (not)"
            )
        );
    }

    #[test]
    fn cel_message_expression_reason_and_field_path_shape_the_cause() {
        let schema = json!({"type": "object", "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}},
            "x-kubernetes-validations": [{"rule": "self.min <= self.max", "fieldPath": ".max",
                "reason": "FieldValueForbidden", "message": "static",
                "messageExpression": "'max ' + string(self.max) + ' is below min ' + string(self.min)"}]});
        assert_eq!(
            causes(schema, json!({"min": 5, "max": 2})),
            one("spec.max", "Forbidden: max 2 is below min 5")
        );
    }
}
