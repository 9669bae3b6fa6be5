//! The registry of served resources: the built-in kinds and those defined by CustomResourceDefinitions.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

/// A printer column for `kubectl get` tables.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    /// Header, e.g. `Ready`.
    pub name: String,
    /// OpenAPI type: string, integer, number, boolean, date.
    pub type_: String,
    /// Optional OpenAPI format.
    pub format: String,
    /// Column description.
    pub description: String,
    /// 0 for the default view, higher for `-o wide`.
    pub priority: i64,
    /// Simple JSONPath evaluated on the object.
    pub json_path: String,
}

/// Everything the server needs to know about one served group/version/resource.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceInfo {
    /// API group, empty for the core group.
    pub group: String,
    /// Version, e.g. `v1`.
    pub version: String,
    /// Plural resource name, e.g. `configmaps`.
    pub resource: String,
    /// Singular name, e.g. `configmap`.
    pub singular: String,
    /// Kind, e.g. `ConfigMap`.
    pub kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Short names, e.g. `cm`.
    pub short_names: Vec<String>,
    /// Categories, e.g. `all`.
    pub categories: Vec<String>,
    /// Whether a `/status` subresource is served (main writes then ignore status).
    pub status: bool,
    /// Whether `metadata.generation` is tracked.
    pub generation: bool,
    /// Printer columns beyond Name (empty means Name and Age).
    pub columns: Vec<Column>,
    /// Whether this resource comes from a CRD.
    pub custom: bool,
    /// The CRD's `openAPIV3Schema` for this version (custom resources that have one).
    pub schema: Option<Arc<Value>>,
    /// The group whose storage this resource shares, when it is another group's (`events.k8s.io`
    /// Events are stored as `v1` Events and converted, see [`crate::events`]).
    pub storage_group: Option<String>,
}

impl ResourceInfo {
    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The storage key shared by every version of this resource (and by a resource of another group
    /// that shares its storage).
    pub fn key(&self) -> ResourceKey {
        ResourceKey {
            group: self.storage_group.clone().unwrap_or_else(|| self.group.clone()),
            resource: self.resource.clone(),
        }
    }
}

/// Group and plural resource: the unit of storage (versions share storage; only Events are converted).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceKey {
    /// API group.
    pub group: String,
    /// Plural resource name.
    pub resource: String,
}

/// All served resources by group, version and plural.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    by_gvr: BTreeMap<(String, String, String), Arc<ResourceInfo>>,
    /// Group order for `/apis` (insertion order; built-ins first).
    groups: Vec<String>,
    /// Preferred (storage or first) version per group.
    preferred: BTreeMap<String, String>,
}

struct Builtin(
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    &'static [&'static str],
    bool,
    bool,
);

const BUILTINS: &[Builtin] = &[
    // group, version, plural, kind, namespaced, short names, status, generation
    Builtin("", "v1", "namespaces", "Namespace", false, &["ns"], true, false),
    Builtin("", "v1", "configmaps", "ConfigMap", true, &["cm"], false, false),
    Builtin("", "v1", "secrets", "Secret", true, &[], false, false),
    Builtin(
        "",
        "v1",
        "serviceaccounts",
        "ServiceAccount",
        true,
        &["sa"],
        false,
        false,
    ),
    Builtin("", "v1", "pods", "Pod", true, &["po"], true, false),
    Builtin("", "v1", "nodes", "Node", false, &["no"], true, false),
    Builtin("", "v1", "services", "Service", true, &["svc"], true, false),
    Builtin("", "v1", "events", "Event", true, &["ev"], false, false),
    Builtin(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        true,
        &["deploy"],
        true,
        true,
    ),
    Builtin("apps", "v1", "daemonsets", "DaemonSet", true, &["ds"], true, true),
    Builtin(
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        true,
        &["ev"],
        false,
        false,
    ),
    Builtin("batch", "v1", "jobs", "Job", true, &[], true, true),
    Builtin(
        "coordination.k8s.io",
        "v1",
        "leases",
        "Lease",
        true,
        &[],
        false,
        false,
    ),
    Builtin(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        false,
        &["crd", "crds"],
        true,
        true,
    ),
    Builtin(
        "rbac.authorization.k8s.io",
        "v1",
        "roles",
        "Role",
        true,
        &[],
        false,
        false,
    ),
    Builtin(
        "rbac.authorization.k8s.io",
        "v1",
        "rolebindings",
        "RoleBinding",
        true,
        &[],
        false,
        false,
    ),
    Builtin(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterroles",
        "ClusterRole",
        false,
        &[],
        false,
        false,
    ),
    Builtin(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        false,
        &[],
        false,
        false,
    ),
];

impl Registry {
    /// The registry with every built-in kind.
    pub fn builtin() -> Registry {
        let mut r = Registry::default();
        for b in BUILTINS {
            let categories = match b.2 {
                "pods" | "services" | "jobs" | "deployments" | "daemonsets" => vec!["all".to_string()],
                _ => vec![],
            };
            r.add(ResourceInfo {
                group: b.0.into(),
                version: b.1.into(),
                resource: b.2.into(),
                singular: b.3.to_lowercase(),
                kind: b.3.into(),
                namespaced: b.4,
                short_names: b.5.iter().map(|s| s.to_string()).collect(),
                categories,
                status: b.6,
                generation: b.7,
                columns: Vec::new(),
                custom: false,
                schema: None,
                storage_group: (b.0 == crate::events::GROUP).then(String::new),
            });
        }
        r
    }

    fn add(&mut self, info: ResourceInfo) {
        if !self.groups.contains(&info.group) {
            self.groups.push(info.group.clone());
        }
        self.preferred
            .entry(info.group.clone())
            .or_insert_with(|| info.version.clone());
        self.by_gvr.insert(
            (info.group.clone(), info.version.clone(), info.resource.clone()),
            Arc::new(info),
        );
    }

    /// Looks up a served resource.
    pub fn get(&self, group: &str, version: &str, resource: &str) -> Option<Arc<ResourceInfo>> {
        self.by_gvr
            .get(&(group.to_string(), version.to_string(), resource.to_string()))
            .cloned()
    }

    /// Looks up a served resource by kind.
    pub fn by_kind(&self, group: &str, version: &str, kind: &str) -> Option<Arc<ResourceInfo>> {
        self.by_gvr
            .range((group.to_string(), version.to_string(), String::new())..)
            .take_while(|((g, v, _), _)| g == group && v == version)
            .map(|(_, i)| i)
            .find(|i| i.kind == kind)
            .cloned()
    }

    /// Every version served for a storage key (used to find a CRD's resources), those of the key's own
    /// group first.
    pub fn versions_of(&self, key: &ResourceKey) -> Vec<Arc<ResourceInfo>> {
        let (own, shared): (Vec<_>, Vec<_>) = self
            .by_gvr
            .values()
            .filter(|i| i.key() == *key)
            .cloned()
            .partition(|i| i.group == key.group);
        own.into_iter().chain(shared).collect()
    }

    /// Resources of one group/version.
    pub fn resources(&self, group: &str, version: &str) -> Vec<Arc<ResourceInfo>> {
        self.by_gvr
            .values()
            .filter(|i| i.group == group && i.version == version)
            .cloned()
            .collect()
    }

    /// Groups in discovery order (the core group is `""`).
    pub fn groups(&self) -> Vec<String> {
        self.groups
            .iter()
            .filter(|g| self.by_gvr.values().any(|i| &i.group == *g))
            .cloned()
            .collect()
    }

    /// Versions of a group, preferred first.
    pub fn versions(&self, group: &str) -> Vec<String> {
        let mut vs: Vec<String> = Vec::new();
        if let Some(p) = self.preferred.get(group) {
            vs.push(p.clone());
        }
        for i in self.by_gvr.values().filter(|i| i.group == group) {
            if !vs.contains(&i.version) {
                vs.push(i.version.clone());
            }
        }
        vs.retain(|v| self.by_gvr.values().any(|i| i.group == group && &i.version == v));
        vs
    }

    /// Serves a CRD's versions, replacing what it served before.
    pub fn install_crd(&mut self, crd: &Value) {
        let infos = infos_from_crd(crd);
        if let Some(first) = infos.first() {
            let key = first.key();
            self.remove_key(&key);
            let storage = crd
                .pointer("/spec/versions")
                .and_then(Value::as_array)
                .and_then(|vs| vs.iter().find(|v| v["storage"] == Value::Bool(true)))
                .and_then(|v| v["name"].as_str())
                .unwrap_or(&first.version)
                .to_string();
            self.preferred.insert(first.group.clone(), storage);
            for i in infos {
                self.add(i);
            }
        }
    }

    /// Stops serving a resource in every version.
    pub fn remove_key(&mut self, key: &ResourceKey) {
        self.by_gvr
            .retain(|(g, _, r), _| !(g == &key.group && r == &key.resource));
        if !self.by_gvr.values().any(|i| i.group == key.group) {
            self.preferred.remove(&key.group);
        }
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// The resources a CRD object asks to serve (served versions only).
pub fn infos_from_crd(crd: &Value) -> Vec<ResourceInfo> {
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or("").to_string();
    let names = &spec["names"];
    let plural = names["plural"].as_str().unwrap_or("").to_string();
    let kind = names["kind"].as_str().unwrap_or("").to_string();
    let singular = names["singular"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let namespaced = spec["scope"].as_str() != Some("Cluster");
    let mut out = Vec::new();
    for v in spec["versions"].as_array().into_iter().flatten() {
        if v["served"] == Value::Bool(false) {
            continue;
        }
        let columns = v["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| Column {
                name: c["name"].as_str().unwrap_or("").into(),
                type_: c["type"].as_str().unwrap_or("string").into(),
                format: c["format"].as_str().unwrap_or("").into(),
                description: c["description"].as_str().unwrap_or("").into(),
                priority: c["priority"].as_i64().unwrap_or(0),
                json_path: c["jsonPath"].as_str().unwrap_or("").into(),
            })
            .collect();
        out.push(ResourceInfo {
            group: group.clone(),
            version: v["name"].as_str().unwrap_or("").into(),
            resource: plural.clone(),
            singular: singular.clone(),
            kind: kind.clone(),
            namespaced,
            short_names: strings(names.get("shortNames")),
            categories: strings(names.get("categories")),
            status: v.pointer("/subresources/status").is_some(),
            generation: true,
            columns,
            custom: true,
            schema: v.pointer("/schema/openAPIV3Schema").cloned().map(Arc::new),
            storage_group: None,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn crd_serves_each_served_version_with_its_columns() {
        let crd = json!({"spec": {"group": "ex.io", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [
                {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                 "additionalPrinterColumns": [{"name": "Ready", "type": "string", "jsonPath": ".status.ready"}]},
                {"name": "v0", "served": false, "storage": false}]}});
        let mut r = Registry::builtin();
        r.install_crd(&crd);
        let w = r.get("ex.io", "v1", "widgets").unwrap();
        assert!(w.status && w.namespaced && w.custom);
        assert_eq!(w.columns[0].json_path, ".status.ready");
        assert!(r.get("ex.io", "v0", "widgets").is_none());
        assert_eq!(r.versions("ex.io"), vec!["v1".to_string()]);
    }
}
