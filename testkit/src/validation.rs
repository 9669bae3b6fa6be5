//! Validation with the real server's rules and wording: names, labels, immutable ConfigMaps/Secrets.

use serde_json::Value;

use crate::errors::{cause, ApiError, Cause};
use crate::resources::ResourceInfo;

/// The real server's message for a name that is not a DNS subdomain.
pub(crate) const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const IMMUTABLE_MSG: &str = "Forbidden: field is immutable when `immutable` is set";

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// DNS-1123 subdomain: dot-separated labels, at most 253 characters.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label_chars)
}

fn is_dns_label_chars(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_label_value(s: &str) -> bool {
    s.is_empty()
        || (s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
            && s.as_bytes()[0].is_ascii_alphanumeric()
            && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric())
}

fn label_key_causes(key: &str, field: &str, out: &mut Vec<Cause>) {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if !is_dns_subdomain(p) {
            out.push(cause(
                "FieldValueInvalid",
                field,
                format!("Invalid value: \"{key}\": prefix part {SUBDOMAIN_MSG}"),
            ));
        }
    }
    if name.is_empty() || name.len() > 63 || !is_label_value(name) {
        out.push(cause(
            "FieldValueInvalid",
            field,
            format!(
                "Invalid value: \"{key}\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character, and be no more than 63 characters"
            ),
        ));
    }
}

/// Validates object metadata (name and labels) for the resource; returns 422 on failure.
pub fn validate_meta(info: &ResourceInfo, obj: &Value) -> Result<(), ApiError> {
    let meta = &obj["metadata"];
    let name = meta["name"].as_str().unwrap_or("");
    let mut causes = Vec::new();
    if name.is_empty() {
        causes.push(cause(
            "FieldValueRequired",
            "metadata.name",
            "Required value: name or generateName is required",
        ));
    } else if info.group == "rbac.authorization.k8s.io" {
        if name == "." || name == ".." || name.contains('/') || name.contains('%') {
            causes.push(cause(
                "FieldValueInvalid",
                "metadata.name",
                format!("Invalid value: \"{name}\": may not contain '/' or '%' and may not be '.' or '..'"),
            ));
        }
    } else if info.resource == "namespaces" {
        if !is_dns_label(name) {
            causes.push(cause(
                "FieldValueInvalid",
                "metadata.name",
                format!("Invalid value: \"{name}\": {LABEL_MSG}"),
            ));
        }
    } else if !is_dns_subdomain(name) {
        causes.push(cause(
            "FieldValueInvalid",
            "metadata.name",
            format!("Invalid value: \"{name}\": {SUBDOMAIN_MSG}"),
        ));
    }
    if info.resource == "customresourcedefinitions" && !name.is_empty() {
        let want = format!(
            "{}.{}",
            obj.pointer("/spec/names/plural")
                .and_then(Value::as_str)
                .unwrap_or(""),
            obj.pointer("/spec/group").and_then(Value::as_str).unwrap_or("")
        );
        if name != want {
            causes.push(cause(
                "FieldValueInvalid",
                "metadata.name",
                format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
            ));
        }
        let versions = obj.pointer("/spec/versions").and_then(Value::as_array);
        for (i, v) in versions.into_iter().flatten().enumerate() {
            if let Some(schema) = v.pointer("/schema/openAPIV3Schema") {
                let path = format!("spec.versions[{i}].schema.openAPIV3Schema");
                unique_items_causes(schema, &path, &mut causes);
            }
        }
    }
    if let Some(labels) = meta["labels"].as_object() {
        for (k, v) in labels {
            label_key_causes(k, "metadata.labels", &mut causes);
            match v.as_str() {
                Some(s) if is_label_value(s) => {}
                Some(s) if s.len() > 63 => causes.push(cause(
                    "FieldValueInvalid",
                    "metadata.labels",
                    format!("Invalid value: \"{s}\": must be no more than 63 characters"),
                )),
                _ => causes.push(cause(
                    "FieldValueInvalid",
                    "metadata.labels",
                    format!("Invalid value: {v}: {VALUE_MSG}"),
                )),
            }
        }
    }
    if let Some(ann) = meta["annotations"].as_object() {
        for k in ann.keys() {
            label_key_causes(k, "metadata.annotations", &mut causes);
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(&info.group, &info.kind, name, causes))
    }
}

/// `uniqueItems: true` anywhere in a CRD schema, which a structural schema forbids.
fn unique_items_causes(schema: &Value, path: &str, out: &mut Vec<Cause>) {
    if schema["uniqueItems"] == Value::Bool(true) {
        out.push(cause(
            "FieldValueForbidden",
            &format!("{path}.uniqueItems"),
            "Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    for (key, sub) in schema["properties"].as_object().into_iter().flatten() {
        unique_items_causes(sub, &format!("{path}.properties[{key}]"), out);
    }
    for key in ["items", "additionalProperties", "not"] {
        if schema[key].is_object() {
            unique_items_causes(&schema[key], &format!("{path}.{key}"), out);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        for (i, sub) in schema[key].as_array().into_iter().flatten().enumerate() {
            unique_items_causes(sub, &format!("{path}.{key}[{i}]"), out);
        }
    }
}

/// Refuses data changes to an immutable ConfigMap or Secret, and un-setting `immutable`.
pub fn validate_immutable(info: &ResourceInfo, old: &Value, new: &Value) -> Result<(), ApiError> {
    if !info.group.is_empty() || (info.resource != "configmaps" && info.resource != "secrets") {
        return Ok(());
    }
    if old["immutable"] != Value::Bool(true) {
        return Ok(());
    }
    let mut causes = Vec::new();
    let fields: &[&str] = if info.resource == "configmaps" {
        &["data", "binaryData"]
    } else {
        &["data", "stringData", "type"]
    };
    for f in fields {
        if old[*f] != new[*f] {
            causes.push(cause("FieldValueForbidden", f, IMMUTABLE_MSG));
        }
    }
    if new["immutable"] != Value::Bool(true) {
        causes.push(cause("FieldValueForbidden", "immutable", IMMUTABLE_MSG));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        let name = new
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        Err(ApiError::invalid("", &info.kind, name, causes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Registry;
    use serde_json::json;

    #[test]
    fn subdomain_rules_accept_dots_and_refuse_capitals() {
        assert!(is_dns_subdomain("a.b-c.d"));
        assert!(!is_dns_subdomain("Bad"));
        assert!(!is_dns_subdomain("-a"));
        assert!(!is_dns_subdomain("a..b"));
    }

    #[test]
    fn long_label_values_are_invalid_with_the_real_wording() {
        let cm = Registry::builtin().get("", "v1", "configmaps").unwrap();
        let long = "x".repeat(64);
        let err = validate_meta(&cm, &json!({"metadata": {"name": "a", "labels": {"k": long}}})).unwrap_err();
        assert_eq!(err.code, 422);
        assert!(
            err.message.contains("must be no more than 63 characters"),
            "{}",
            err.message
        );
    }

    #[test]
    fn crd_schemas_with_unique_items_are_forbidden() {
        let info = crate::resources::Registry::builtin()
            .get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
            .unwrap();
        let crd = serde_json::json!({"metadata": {"name": "widgets.example.test"},
            "spec": {"group": "example.test", "names": {"plural": "widgets"}, "versions": [{"name": "v1",
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object",
                    "properties": {"tags": {"type": "array", "uniqueItems": true, "items": {"type": "string"}}}}}}}}]}});
        let e = validate_meta(&info, &crd).unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(
            e.details.causes[0].field,
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[tags].uniqueItems"
        );
        assert!(
            e.message.contains("Forbidden: uniqueItems cannot be set to true"),
            "{}",
            e.message
        );
    }

    #[test]
    fn immutable_configmap_refuses_data_changes() {
        let cm = Registry::builtin().get("", "v1", "configmaps").unwrap();
        let old = json!({"metadata": {"name": "a"}, "immutable": true, "data": {"k": "1"}});
        let new = json!({"metadata": {"name": "a"}, "immutable": true, "data": {"k": "2"}});
        let err = validate_immutable(&cm, &old, &new).unwrap_err();
        assert_eq!(
            err.message,
            "ConfigMap \"a\" is invalid: data: Forbidden: field is immutable when `immutable` is set"
        );
    }
}
