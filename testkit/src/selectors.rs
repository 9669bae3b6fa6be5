//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, exists, `!`exists) and field selectors.

use serde_json::Value;

use crate::errors::ApiError;

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; all requirements must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    reqs: Vec<Requirement>,
}

/// Splits on commas outside parentheses.
fn split_terms(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut cur = String::new();
    for ch in s.chars() {
        match ch {
            '(' => {
                depth += 1;
                cur.push(ch)
            }
            ')' => {
                depth = depth.saturating_sub(1);
                cur.push(ch)
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur)),
            _ => cur.push(ch),
        }
    }
    out.push(cur);
    out.into_iter()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

fn parse_set(s: &str, term: &str) -> Result<Vec<String>, ApiError> {
    let s = s.trim();
    let inner = s
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::bad_request(format!("unable to parse requirement: {term}: expected ( ... )"))
        })?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses the `labelSelector` query parameter.
    pub fn parse(s: &str) -> Result<LabelSelector, ApiError> {
        let mut reqs = Vec::new();
        for term in split_terms(s) {
            let bad = || ApiError::bad_request(format!("unable to parse requirement: {term}"));
            let req = if let Some(key) = term.strip_prefix('!') {
                Requirement::NotExists(key.trim().to_string())
            } else if let Some(pos) = term.find(" notin ") {
                Requirement::NotIn(term[..pos].trim().into(), parse_set(&term[pos + 7..], &term)?)
            } else if let Some(pos) = term.find(" in ") {
                Requirement::In(term[..pos].trim().into(), parse_set(&term[pos + 4..], &term)?)
            } else if let Some(pos) = term.find("!=") {
                Requirement::NotEq(term[..pos].trim().into(), term[pos + 2..].trim().into())
            } else if let Some(pos) = term.find("==") {
                Requirement::Eq(term[..pos].trim().into(), term[pos + 2..].trim().into())
            } else if let Some(pos) = term.find('=') {
                Requirement::Eq(term[..pos].trim().into(), term[pos + 1..].trim().into())
            } else {
                Requirement::Exists(term.trim().to_string())
            };
            let key = match &req {
                Requirement::Eq(k, _)
                | Requirement::NotEq(k, _)
                | Requirement::In(k, _)
                | Requirement::NotIn(k, _)
                | Requirement::Exists(k)
                | Requirement::NotExists(k) => k,
            };
            if key.is_empty() || key.contains(' ') {
                return Err(bad());
            }
            reqs.push(req);
        }
        Ok(LabelSelector { reqs })
    }

    /// Whether the selector is empty (matches everything).
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        self.matches_with(|k| labels.and_then(|l| l.get(k)).and_then(Value::as_str))
    }

    /// Whether labels read through `get` (key to value) satisfy every requirement.
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.reqs.iter().all(|r| match r {
            Requirement::Eq(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEq(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector: `metadata.name` and `metadata.namespace` of any object, and the fields a
/// resource adds (Events: [`crate::events::field_label`]), each term translated to the stored field.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector {
    reqs: Vec<(String, bool, String)>,
    /// Whether a term reads a field beyond the name and namespace (the object must be read).
    reads_object: bool,
}

impl FieldSelector {
    /// Parses the `fieldSelector` query parameter of a request on `resource` of `group`; a label the
    /// resource does not support is refused as the real server does.
    pub fn parse(s: &str, group: &str, resource: &str) -> Result<FieldSelector, ApiError> {
        let events = crate::events::Api::of(group, resource);
        let mut selector = FieldSelector::default();
        for term in split_terms(s) {
            let (field, eq, value) = if let Some(pos) = term.find("!=") {
                (&term[..pos], false, &term[pos + 2..])
            } else if let Some(pos) = term.find("==") {
                (&term[..pos], true, &term[pos + 2..])
            } else if let Some(pos) = term.find('=') {
                (&term[..pos], true, &term[pos + 1..])
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{term}'; can't understand '{term}'"
                )));
            };
            let field = field.trim();
            let stored = match events {
                Some(api) => crate::events::field_label(api, field)
                    .ok_or_else(|| ApiError::bad_request(format!("field label not supported: {field}")))?,
                None if field == "metadata.name" || field == "metadata.namespace" => field,
                None => {
                    return Err(ApiError::bad_request(format!(
                        "field label not supported: {field} (testkit supports metadata.name and metadata.namespace)"
                    )))
                }
            };
            selector.reads_object |= !stored.starts_with("metadata.");
            selector
                .reqs
                .push((stored.to_string(), eq, value.trim().to_string()));
        }
        Ok(selector)
    }

    /// The name this selector pins with `metadata.name=`, if any.
    pub fn pinned_name(&self) -> Option<&str> {
        self.reqs
            .iter()
            .find(|(f, eq, _)| f == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }

    /// Whether the selector is empty (matches everything).
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Whether matching needs the object itself, not only its namespace and name.
    pub fn reads_object(&self) -> bool {
        self.reads_object
    }

    /// Whether an object (as stored) satisfies every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        self.reqs.iter().all(|(field, eq, value)| {
            let actual = match field.as_str() {
                "metadata.name" | "metadata.namespace" => obj["metadata"][&field["metadata.".len()..]]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                other => crate::events::selectable(obj, other),
            };
            (actual == *value) == *eq
        })
    }

    /// Whether an object with this namespace ("" for none) and name satisfies every requirement on
    /// them (the other terms are checked by [`FieldSelector::matches`]).
    pub fn matches_meta(&self, namespace: &str, name: &str) -> bool {
        self.reqs.iter().all(|(field, eq, value)| match field.as_str() {
            "metadata.name" => (name == value) == *eq,
            "metadata.namespace" => (namespace == value) == *eq,
            _ => true,
        })
    }

    /// Whether a stored object satisfies every requirement, reading it only when a term needs it.
    pub fn matches_stored(
        &self,
        (namespace, name): &crate::store::ObjectKey,
        obj: &crate::store::Stored,
    ) -> bool {
        self.matches_meta(namespace, name) && (!self.reads_object || self.matches(&obj.value()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}})
    }

    #[test]
    fn every_label_operator_matches_as_documented() {
        let o = obj(json!({"app": "web", "tier": "front"}));
        for (sel, want) in [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app in (web, db)", true),
            ("app notin (web,db)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("missing notin (x)", true),
            ("app=web,tier in (front)", true),
            ("app=web,tier=back", false),
        ] {
            assert_eq!(LabelSelector::parse(sel).unwrap().matches(&o), want, "{sel}");
        }
    }

    #[test]
    fn field_selector_on_other_fields_is_refused() {
        assert!(FieldSelector::parse("status.phase=Running", "", "pods").is_err());
        let f = FieldSelector::parse("metadata.name=a,metadata.namespace!=x", "", "pods").unwrap();
        assert!(f.matches(&obj(json!({}))));
        assert!(!f.reads_object());
        assert_eq!(f.pinned_name(), Some("a"));
    }

    #[test]
    fn event_selectors_use_each_apis_labels_on_the_stored_fields() {
        let ev = json!({"metadata": {"name": "e", "namespace": "ns"},
            "involvedObject": {"kind": "Pod", "name": "p", "uid": "u"}, "type": "Warning"});
        let core = FieldSelector::parse("involvedObject.name=p,involvedObject.uid=u", "", "events").unwrap();
        assert!(core.reads_object() && core.matches(&ev));
        let new = FieldSelector::parse("regarding.name=p,type=Warning", "events.k8s.io", "events").unwrap();
        assert!(new.matches(&ev));
        let e = FieldSelector::parse("involvedObject.name=p", "events.k8s.io", "events").unwrap_err();
        assert_eq!(e.message, "field label not supported: involvedObject.name");
        assert!(!FieldSelector::parse("involvedObject.kind!=Pod", "", "events")
            .unwrap()
            .matches(&ev));
    }
}
