//! Discovery documents: /version, /api, /apis, resource lists, and the OpenAPI stubs kubectl reads.

use serde_json::{json, Value};

use crate::resources::Registry;

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "1", "minor": "33", "gitVersion": "v1.33.0-testkit", "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.24.0",
        "compiler": "gc", "platform": "linux/amd64"
    })
}

/// `/api`.
pub fn core_versions(addr: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}]})
}

fn group(reg: &Registry, g: &str) -> Value {
    let versions: Vec<Value> = reg
        .versions(g)
        .iter()
        .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
        .collect();
    let preferred = versions.first().cloned().unwrap_or(Value::Null);
    json!({"name": g, "versions": versions, "preferredVersion": preferred})
}

/// `/apis`.
pub fn groups(reg: &Registry) -> Value {
    let gs: Vec<Value> = reg
        .groups()
        .iter()
        .filter(|g| !g.is_empty())
        .map(|g| group(reg, g))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": gs})
}

/// `/apis/{group}`, or None when the group is not served.
pub fn api_group(reg: &Registry, g: &str) -> Option<Value> {
    if reg.versions(g).is_empty() {
        return None;
    }
    let mut v = group(reg, g);
    v["kind"] = json!("APIGroup");
    v["apiVersion"] = json!("v1");
    Some(v)
}

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// `/api/v1` or `/apis/{group}/{version}`, or None when not served.
pub fn resource_list(reg: &Registry, g: &str, v: &str) -> Option<Value> {
    let infos = reg.resources(g, v);
    if infos.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for i in infos {
        let mut r = json!({"name": i.resource, "singularName": i.singular, "namespaced": i.namespaced,
            "kind": i.kind, "verbs": VERBS});
        if !i.short_names.is_empty() {
            r["shortNames"] = json!(i.short_names);
        }
        if !i.categories.is_empty() {
            r["categories"] = json!(i.categories);
        }
        resources.push(r);
        if i.status {
            resources.push(
                json!({"name": format!("{}/status", i.resource), "singularName": "",
                "namespaced": i.namespaced, "kind": i.kind, "verbs": ["get", "patch", "update"]}),
            );
        }
    }
    let gv = if g.is_empty() {
        v.to_string()
    } else {
        format!("{g}/{v}")
    };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
}

/// Content type of aggregated discovery responses.
pub const AGGREGATED_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Aggregated discovery (`apidiscovery.k8s.io/v2` APIGroupDiscoveryList) for `/api` (core) or `/apis`.
pub fn aggregated(reg: &Registry, core: bool) -> Value {
    let groups: Vec<String> = if core {
        vec![String::new()]
    } else {
        reg.groups().into_iter().filter(|g| !g.is_empty()).collect()
    };
    let items: Vec<Value> = groups
        .iter()
        .map(|g| {
            let versions: Vec<Value> = reg
                .versions(g)
                .iter()
                .map(|v| {
                    let resources: Vec<Value> = reg
                        .resources(g, v)
                        .iter()
                        .map(|i| {
                            let kind = json!({"group": g, "version": v, "kind": i.kind});
                            let mut r = json!({
                                "resource": i.resource,
                                "responseKind": kind,
                                "scope": if i.namespaced { "Namespaced" } else { "Cluster" },
                                "singularResource": i.singular,
                                "verbs": VERBS,
                            });
                            if !i.short_names.is_empty() {
                                r["shortNames"] = json!(i.short_names);
                            }
                            if !i.categories.is_empty() {
                                r["categories"] = json!(i.categories);
                            }
                            if i.status {
                                r["subresources"] = json!([{"subresource": "status", "responseKind": kind,
                                    "verbs": ["get", "patch", "update"]}]);
                            }
                            r
                        })
                        .collect();
                    json!({"version": v, "resources": resources, "freshness": "Current"})
                })
                .collect();
            let meta = if g.is_empty() {
                json!({})
            } else {
                json!({"name": g})
            };
            json!({"metadata": meta, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregated_core_discovery_has_one_unnamed_group_with_status_subresources() {
        let reg = Registry::builtin();
        let core = aggregated(&reg, true);
        assert_eq!(core["items"].as_array().unwrap().len(), 1);
        let pods = core["items"][0]["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "pods")
            .unwrap()
            .clone();
        assert_eq!(pods["subresources"][0]["subresource"], "status");
        let apis = aggregated(&reg, false);
        assert!(apis["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["metadata"]["name"] == "batch"));
    }
}
