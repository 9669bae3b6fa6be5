//! Unknown fields of built-in kinds, found as the apiserver finds them: by reading the object into
//! its typed form (the k8s-openapi type) and comparing what that type writes back. A field the type
//! does not have is unknown; a null is dropped silently.

use k8s_openapi::api::{apps::v1 as apps, batch::v1 as batch, coordination::v1 as coordination};
use k8s_openapi::api::{core::v1 as core, events::v1 as events, rbac::v1 as rbac};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use serde_json::Value;

/// The object as its typed form writes it, or None for a kind without one (or an object that does
/// not read as one: its other checks report that).
fn typed(api_version: &str, kind: &str, obj: &Value) -> Option<Value> {
    fn via<T: serde::de::DeserializeOwned + serde::Serialize>(obj: &Value) -> Option<Value> {
        let t: T = serde_json::from_value(obj.clone()).ok()?;
        serde_json::to_value(t).ok()
    }
    // The type checks apiVersion and kind; a body may leave them to the path.
    let mut obj = obj.clone();
    obj["apiVersion"] = Value::String(api_version.into());
    obj["kind"] = Value::String(kind.into());
    let obj = &obj;
    match (api_version, kind) {
        ("v1", "Namespace") => via::<core::Namespace>(obj),
        ("v1", "ConfigMap") => via::<core::ConfigMap>(obj),
        ("v1", "Secret") => via::<core::Secret>(obj),
        ("v1", "ServiceAccount") => via::<core::ServiceAccount>(obj),
        ("v1", "Pod") => via::<core::Pod>(obj),
        ("v1", "Node") => via::<core::Node>(obj),
        ("v1", "Service") => via::<core::Service>(obj),
        ("v1", "Event") => via::<core::Event>(obj),
        ("events.k8s.io/v1", "Event") => via::<events::Event>(obj),
        ("batch/v1", "Job") => via::<batch::Job>(obj),
        ("apps/v1", "Deployment") => via::<apps::Deployment>(obj),
        ("apps/v1", "DaemonSet") => via::<apps::DaemonSet>(obj),
        ("coordination.k8s.io/v1", "Lease") => via::<coordination::Lease>(obj),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
            via::<apiextensions::CustomResourceDefinition>(obj)
        }
        ("rbac.authorization.k8s.io/v1", "Role") => via::<rbac::Role>(obj),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => via::<rbac::ClusterRole>(obj),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => via::<rbac::RoleBinding>(obj),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => via::<rbac::ClusterRoleBinding>(obj),
        _ => None,
    }
}

/// Removes from `obj` what `typed` does not have: nulls silently, other values as unknown fields.
fn prune(obj: &mut Value, typed: &Value, path: &str, unknown: &mut Vec<String>) {
    match (obj, typed) {
        (Value::Object(map), Value::Object(known)) => {
            map.retain(|key, value| {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match known.get(key) {
                    Some(t) => {
                        prune(value, t, &child, unknown);
                        true
                    }
                    None if value.is_null() => false,
                    None => {
                        unknown.push(child);
                        false
                    }
                }
            });
        }
        (Value::Array(items), Value::Array(known)) => {
            for (i, (item, t)) in items.iter_mut().zip(known).enumerate() {
                prune(item, t, &format!("{path}[{i}]"), unknown);
            }
        }
        _ => {}
    }
}

/// Drops the fields of a built-in object that its kind does not have; returns their paths
/// (`spec.template.spec.containers[0].imagePullPolicyy`). Kinds without a typed form are untouched.
pub fn prune_unknown(api_version: &str, kind: &str, obj: &mut Value) -> Vec<String> {
    let mut unknown = Vec::new();
    if let Some(t) = typed(api_version, kind, obj) {
        prune(obj, &t, "", &mut unknown);
    }
    unknown
}

#[cfg(test)]
mod tests {
    use super::prune_unknown;
    use serde_json::json;

    #[test]
    fn fields_the_kind_does_not_have_are_dropped_and_named() {
        let mut cm = json!({"metadata": {"name": "c", "creationTimestamp": null, "labelz": {"a": "b"}},
            "data": {"k": "v"}, "dat": {"k": "v"}});
        assert_eq!(
            prune_unknown("v1", "ConfigMap", &mut cm),
            ["dat", "metadata.labelz"]
        );
        assert_eq!(cm, json!({"metadata": {"name": "c"}, "data": {"k": "v"}}));
        let mut job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i", "imagee": "x"}]}}}});
        assert_eq!(
            prune_unknown("batch/v1", "Job", &mut job),
            ["spec.template.spec.containers[0].imagee"]
        );
    }
}
