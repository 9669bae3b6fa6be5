//! PATCH bodies: JSON merge patch, JSON patch, and an approximation of strategic merge patch.

use serde_json::{Map, Value};

use crate::errors::ApiError;

/// The patch flavours the server accepts, by content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/strategic-merge-patch+json` (approximated).
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

impl PatchKind {
    /// The patch kind for a Content-Type header, or 415.
    pub fn from_content_type(ct: &str) -> Result<PatchKind, ApiError> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/merge-patch+json" => Ok(PatchKind::Merge),
            "application/json-patch+json" => Ok(PatchKind::Json),
            "application/strategic-merge-patch+json" => Ok(PatchKind::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(PatchKind::Apply),
            other => Err(ApiError::new(
                415,
                format!(
                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {other:?})"
                ),
            )),
        }
    }
}

/// Key field of list items merged by key (strategic merge and server-side apply), by list field name.
pub fn list_merge_key(field: &str) -> Option<&'static str> {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "readinessGates" => Some("name"),
        "conditions" => Some("type"),
        "ownerReferences" => Some("uid"),
        "volumeMounts" => Some("mountPath"),
        "ports" => Some("containerPort"),
        _ => None,
    }
}

/// Whether every item of a list is an object carrying the merge key.
pub fn keyed(field: Option<&str>, items: &[Value]) -> Option<&'static str> {
    let key = list_merge_key(field?)?;
    items.iter().all(|i| i.get(key).is_some()).then_some(key)
}

/// Applies a non-apply patch to a copy of `current`.
pub fn apply_patch(kind: PatchKind, current: &Value, body: &[u8]) -> Result<Value, ApiError> {
    let mut doc = current.clone();
    match kind {
        PatchKind::Merge => {
            let p: Value = parse_json(body)?;
            json_patch::merge(&mut doc, &p);
        }
        PatchKind::Json => {
            let p: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            json_patch::patch(&mut doc, &p.0).map_err(|e| {
                let mut err = ApiError::new(
                    422,
                    format!("the server rejected our request due to an error in our request: {e}"),
                );
                err.reason = "Invalid".into();
                err
            })?;
        }
        PatchKind::Strategic => {
            let p: Value = parse_json(body)?;
            strategic_merge(&mut doc, &p, None);
        }
        PatchKind::Apply => {
            return Err(ApiError::bad_request(
                "apply patches are handled by server-side apply",
            ))
        }
    }
    Ok(doc)
}

fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))
}

/// Strategic merge, approximated: a merge patch where lists with a known merge key merge item by item,
/// `$patch: delete` items are removed and `$`-directives are otherwise ignored.
pub fn strategic_merge(doc: &mut Value, patch: &Value, field: Option<&str>) {
    match (doc, patch) {
        (Value::Object(d), Value::Object(p)) => {
            if p.get("$patch").and_then(Value::as_str) == Some("replace") {
                let mut clean = p.clone();
                clean.remove("$patch");
                *d = clean;
                return;
            }
            for (k, v) in p {
                if k.starts_with('$') {
                    continue;
                }
                if v.is_null() {
                    d.remove(k);
                    continue;
                }
                let entry = d.entry(k.clone()).or_insert(Value::Null);
                if entry.is_null() {
                    *entry = strip_directives(v);
                } else {
                    strategic_merge(entry, v, Some(k));
                }
            }
        }
        (Value::Array(d), Value::Array(p)) => {
            let Some(key) = keyed(field, p) else {
                *d = p
                    .iter()
                    .filter(|i| i.get("$patch").is_none())
                    .map(strip_directives)
                    .collect();
                return;
            };
            for item in p {
                let pos = d.iter().position(|x| x.get(key) == item.get(key));
                let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                match (pos, delete) {
                    (Some(i), true) => {
                        d.remove(i);
                    }
                    (Some(i), false) => strategic_merge(&mut d[i], item, None),
                    (None, false) => d.push(strip_directives(item)),
                    (None, true) => {}
                }
            }
        }
        (d, p) => *d = strip_directives(p),
    }
}

fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let out: Map<String, Value> = m
                .iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect();
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_merge_merges_containers_by_name_and_honours_delete() {
        let mut doc =
            json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]}});
        let p = json!({"spec": {"$setElementOrder/containers": [{"name": "a"}],
            "containers": [{"name": "a", "image": "2"}, {"name": "b", "$patch": "delete"}, {"name": "c", "image": "3"}]}});
        strategic_merge(&mut doc, &p, None);
        assert_eq!(
            doc,
            json!({"spec": {"containers": [{"name": "a", "image": "2"}, {"name": "c", "image": "3"}]}})
        );
    }

    #[test]
    fn json_patch_failure_is_invalid() {
        let err = apply_patch(
            PatchKind::Json,
            &json!({}),
            br#"[{"op":"test","path":"/a","value":1}]"#,
        )
        .unwrap_err();
        assert_eq!(err.code, 422);
    }
}
