//! API errors and their wire form, the Kubernetes `Status` object.

use serde_json::{json, Value};

/// One field-level cause of an `Invalid` or `Conflict` error.
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    /// Machine-readable reason, e.g. `FieldValueInvalid`.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// Field path, e.g. `metadata.name`.
    pub field: String,
}

/// An API failure, rendered as a `Status` object with the matching HTTP code.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `Status.reason`, e.g. `NotFound`.
    pub reason: String,
    /// `Status.message`.
    pub message: String,
    /// `Status.details`.
    pub details: Box<Details>,
}

/// `Status.details`: what object the error is about, and field causes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Details {
    /// `name`.
    pub name: String,
    /// `group`.
    pub group: String,
    /// `kind`: the resource (plural) for most reasons, as the real server does.
    pub kind: String,
    /// `causes`.
    pub causes: Vec<Cause>,
}

/// Reason used by the real server for a given code when nothing more specific applies.
pub fn reason_for_code(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Expired",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    }
}

impl ApiError {
    /// A bare error with a code and message.
    pub fn new(code: u16, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason_for_code(code).to_string(),
            message: message.into(),
            details: Box::default(),
        }
    }

    /// Sets the details that name the object.
    pub fn on(mut self, group: &str, kind: &str, name: &str) -> Self {
        self.details.group = group.to_string();
        self.details.kind = kind.to_string();
        self.details.name = name.to_string();
        self
    }

    /// `404 NotFound`: `configmaps "x" not found`.
    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        ApiError::new(
            404,
            format!("{} \"{name}\" not found", qualified(group, resource)),
        )
        .on(group, resource, name)
    }

    /// `409 AlreadyExists`.
    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        let mut e = ApiError::new(
            409,
            format!("{} \"{name}\" already exists", qualified(group, resource)),
        )
        .on(group, resource, name);
        e.reason = "AlreadyExists".into();
        e
    }

    /// `409 Conflict` for a stale resourceVersion or failed precondition.
    pub fn conflict(group: &str, resource: &str, name: &str, why: &str) -> Self {
        ApiError::new(
            409,
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(group, resource)
            ),
        )
        .on(group, resource, name)
    }

    /// `409 Conflict` for a stale resourceVersion.
    pub fn stale(group: &str, resource: &str, name: &str) -> Self {
        ApiError::conflict(
            group,
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// `422 Invalid`: `Kind "name" is invalid: field: Reason: detail` with one cause per field; the
    /// message names a repeated cause once, as the server's aggregate of errors does.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let mut parts: Vec<String> = Vec::new();
        for c in &causes {
            let part = format!("{}: {}", c.field, c.message);
            if !parts.contains(&part) {
                parts.push(part);
            }
        }
        let joined = if parts.len() == 1 {
            parts[0].clone()
        } else {
            format!("[{}]", parts.join(", "))
        };
        let mut e =
            ApiError::new(422, format!("{kind} \"{name}\" is invalid: {joined}")).on(group, kind, name);
        e.details.causes = causes;
        e
    }

    /// `400 BadRequest`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(400, message)
    }

    /// `405 MethodNotAllowed`.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        ApiError::new(405, message)
    }

    /// `410 Expired` for a resourceVersion older than the kept event window.
    pub fn gone(message: impl Into<String>) -> Self {
        let mut e = ApiError::new(410, message);
        e.reason = "Expired".into();
        e
    }

    /// The `Status` object for this error.
    pub fn status(&self) -> Value {
        let mut details = serde_json::Map::new();
        if !self.details.name.is_empty() {
            details.insert("name".into(), json!(self.details.name));
        }
        if !self.details.group.is_empty() {
            details.insert("group".into(), json!(self.details.group));
        }
        if !self.details.kind.is_empty() {
            details.insert("kind".into(), json!(self.details.kind));
        }
        if !self.details.causes.is_empty() {
            let causes: Vec<Value> = self
                .details
                .causes
                .iter()
                .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                .collect();
            details.insert("causes".into(), Value::Array(causes));
        }
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "code": self.code,
        });
        // Some answers carry no reason at all (a failure reaching a node's kubelet).
        if !self.reason.is_empty() {
            status["reason"] = json!(self.reason);
        }
        if !details.is_empty() {
            status["details"] = Value::Object(details);
        }
        status
    }
}

/// A field cause with the wording of the real validators.
pub fn cause(reason: &str, field: &str, message: impl Into<String>) -> Cause {
    Cause {
        reason: reason.into(),
        message: message.into(),
        field: field.into(),
    }
}

/// `configmaps` for the core group, `jobs.batch` otherwise.
pub fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_status_names_the_object_and_resource() {
        let s = ApiError::not_found("batch", "jobs", "j1").status();
        assert_eq!(s["message"], "jobs.batch \"j1\" not found");
        assert_eq!(s["code"], 404);
        assert_eq!(s["details"]["kind"], "jobs");
    }

    #[test]
    fn invalid_with_two_causes_lists_them_in_brackets() {
        let e = ApiError::invalid(
            "",
            "ConfigMap",
            "x",
            vec![
                cause("FieldValueInvalid", "a", "bad"),
                cause("FieldValueInvalid", "b", "worse"),
            ],
        );
        assert_eq!(e.message, "ConfigMap \"x\" is invalid: [a: bad, b: worse]");
    }
}
