//! A pinned inventory directory read as ansible reads it: its hosts and groups, and the effective value of a
//! variable kok itself uses (`kube_version`).

use super::{read_inventory, Inventory, InventoryDir, HOSTS_YML};

/// The inventory of `dir`, when its inventory file is valid (a pinned one always is: validation came first).
pub fn inventory_of(dir: &InventoryDir) -> Option<Inventory> {
    match dir.inventory_file.as_str() {
        HOSTS_YML | super::HOSTS_YAML => read_inventory(&dir.hosts_yml),
        _ => None,
    }
}

/// The value of `kube_version` ansible gives the hosts of `k8s_cluster` in `dir`, as written; `None` when
/// unset, not a string, or not known before the run (a template, a vaulted value).
pub fn kube_version_of(dir: &InventoryDir) -> Option<String> {
    let vars: serde_yaml::Value = serde_yaml::from_str(dir.vars_yml.as_deref()?).ok()?;
    let version = vars.get("kube_version")?.as_str()?.trim();
    (!version.is_empty() && !version.contains("{{")).then(|| version.to_string())
}
