//! A pinned inventory directory read as ansible reads it: its hosts and groups, and the effective value of a
//! variable kok itself uses (`kube_version`, the settings pre-flight checks).

use std::collections::{BTreeMap, BTreeSet};

use super::ansible::resolve::Found;
use super::ansible::{read_inventory_dir, AnsibleInventory, GroupVar, InventorySource, Known, Setting};
use super::{Inventory, InventoryDir, VARS_YML};
use crate::spec::VARS_INVENTORY_PATH;

/// The variables kok reads of a kubespray cluster's inventory for its pre-flight: `kube_version`, the
/// settings whose values kubespray's assertions enumerate, the subnets a running cluster keeps, and the
/// switches that make a run wait for an answer on a terminal.
pub const KUBESPRAY_VARS: [&str; 12] = [
    "kube_version",
    "kube_network_plugin",
    "container_manager",
    "etcd_deployment_type",
    "kube_proxy_mode",
    "dns_mode",
    "kube_service_addresses",
    "kube_pods_subnet",
    "upgrade_node_confirm",
    "upgrade_node_post_upgrade_confirm",
    "skip_confirmation",
    "reset_confirmation",
];

/// What kubespray's roles see of an inventory directory: the groups after kubespray's boilerplate play and
/// the values of [`KUBESPRAY_VARS`] on the Kubernetes hosts. Validation resolves it once per directory.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KubesprayView {
    /// Every host.
    pub hosts: BTreeSet<String>,
    /// Every group, with those kubespray's boilerplate adds (`k8s_cluster`); not `all` and `ungrouped`, nor
    /// the boilerplate's catch-all `_all`.
    pub groups: BTreeMap<String, InventoryGroup>,
    /// Each of [`KUBESPRAY_VARS`] some host sets: its value and where it is set (a path relative to the
    /// cluster directory, `vars.yml` by its own name), or `Err` saying how the hosts disagree.
    pub vars: BTreeMap<String, Result<Setting, String>>,
}

/// One group of a [`KubesprayView`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InventoryGroup {
    /// Its hosts in ansible's order (`groups['etcd'][0]` is the first), child groups' included.
    pub hosts: Vec<String>,
    /// 1-based line of the inventory file where it is first defined; 0 when made at run time or unknown.
    pub line: usize,
}

/// What validation keeps of `resolved` (as read, without kubespray's groups): the inventory kok's readers use
/// ([`InventoryDir::inventory`]) and what kubespray's roles see ([`InventoryDir::kubespray_view`]),
/// kubespray's groups made once for both. `vars_yml` when the directory's `group_vars/all.yml` is kok's
/// `vars.yml`.
pub(crate) fn inventory_and_view(resolved: &AnsibleInventory, vars_yml: bool) -> (Inventory, KubesprayView) {
    let kubespray = resolved.with_kubespray_groups();
    let inventory = kok_inventory_of(&kubespray);
    let hosts = inventory.hosts.clone();
    (inventory, view_of(&kubespray, hosts, vars_yml))
}

/// [`kubespray_view`] of the view `kubespray` already made by [`AnsibleInventory::with_kubespray_groups`].
/// `hosts` is every host (as the inventory kok reads has them). Each Kubernetes host's sources are walked
/// once for all of [`KUBESPRAY_VARS`].
fn view_of(kubespray: &AnsibleInventory, hosts: BTreeSet<String>, vars_yml: bool) -> KubesprayView {
    let unmatched = super::ansible::kubespray::UNMATCHED_GROUP;
    let groups: BTreeMap<String, InventoryGroup> = kubespray
        .groups()
        .into_iter()
        .filter(|g| !["all", "ungrouped", unmatched].contains(g))
        .map(|g| {
            // A group without children has its own hosts, in their order.
            let hosts = match kubespray.children(g) {
                Some(children) if children.is_empty() => kubespray.direct_hosts(g),
                _ => kubespray.group_hosts(g),
            };
            let hosts = hosts.unwrap_or_default();
            let group = InventoryGroup {
                hosts: hosts.into_iter().map(str::to_string).collect(),
                line: kubespray.group_line(g),
            };
            (g.to_string(), group)
        })
        .collect();
    let all;
    let targets: &[String] = match groups.get("k8s_cluster").filter(|g| !g.hosts.is_empty()) {
        Some(group) => &group.hosts,
        None => {
            all = kubespray
                .hosts()
                .into_iter()
                .map(str::to_string)
                .collect::<Vec<_>>();
            &all
        }
    };
    // Per variable, each distinct value with its hosts, in host order (as GroupVar gives them).
    let mut found: Vec<Vec<(Option<Found<'_>>, Vec<&str>)>> =
        KUBESPRAY_VARS.iter().map(|_| Vec::new()).collect();
    for (host, settings) in targets
        .iter()
        .zip(kubespray.find_for_hosts(targets, &KUBESPRAY_VARS))
    {
        for (values, setting) in found.iter_mut().zip(settings) {
            match values.iter_mut().find(|(v, _)| same_value(v, &setting)) {
                Some((_, hosts)) => hosts.push(host),
                None => values.push((setting, vec![host])),
            }
        }
    }
    let vars = KUBESPRAY_VARS
        .iter()
        .zip(found)
        .filter_map(|(name, values)| {
            let found = match values.as_slice() {
                [] | [(None, _)] => return None,
                [(Some(first), _)] => {
                    let mut setting = first.setting();
                    if vars_yml && setting.origin.path == VARS_INVENTORY_PATH {
                        setting.origin.path = VARS_YML.to_string();
                    }
                    Ok(setting)
                }
                _ => {
                    let values: Vec<(Option<Known>, Vec<String>)> = values
                        .iter()
                        .map(|(v, hosts)| {
                            let hosts = hosts.iter().map(|h| h.to_string()).collect();
                            (v.map(|v| v.setting().value), hosts)
                        })
                        .collect();
                    Err(disagreement(&values))
                }
            };
            Some((name.to_string(), found))
        })
        .collect();
    KubesprayView { hosts, groups, vars }
}

/// True when two hosts get the same value (wherever it is set); a vaulted file is the same value as itself.
fn same_value(a: &Option<Found<'_>>, b: &Option<Found<'_>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(Found::Var { value: a, .. }), Some(Found::Var { value: b, .. })) => a == b,
        (Some(Found::Vault { path: a }), Some(Found::Vault { path: b })) => a == b,
        _ => false,
    }
}

/// `the hosts disagree: v1.31.4 on n1; (unset) on n2`.
fn disagreement(values: &[(Option<Known>, Vec<String>)]) -> String {
    let hosts: Vec<String> = values
        .iter()
        .map(|(value, hosts)| {
            let value = match value {
                Some(Known::Value(v)) => v.to_string(),
                Some(Known::Unknown(why)) => format!("(not known: {why})"),
                None => "(unset)".to_string(),
            };
            format!("{value} on {}", hosts.join(", "))
        })
        .collect();
    format!("the hosts disagree: {}", hosts.join("; "))
}

impl InventoryDir {
    /// The directory read as ansible reads it; `None` when ansible would refuse it (a pinned directory
    /// passed validation, so it reads).
    pub fn resolve(&self) -> Option<AnsibleInventory> {
        let files = self.ansible_files();
        let source = InventorySource {
            dir: "",
            cluster: None,
            inventory_name: &self.inventory_file,
            inventory_text: &self.hosts_yml,
            files: &files,
        };
        read_inventory_dir(&source, &mut Vec::new())
    }

    /// The inventory kok's own readers use (`--limit` and scale-down checks, health, the web view): the
    /// hosts, groups and addresses as ansible resolves them, with the groups kubespray's boilerplate makes
    /// at run time (`k8s_cluster`), so that naming them is no mistake, but without the catch-all group it
    /// puts every other host in.
    pub fn inventory(&self) -> Option<Inventory> {
        self.resolve()
            .map(|resolved| kok_inventory_of(&resolved.with_kubespray_groups()))
    }

    /// What kubespray's roles see of the directory; `None` when ansible would refuse it.
    pub fn kubespray_view(&self) -> Option<KubesprayView> {
        self.resolve().map(|resolved| {
            let kubespray = resolved.with_kubespray_groups();
            view_of(
                &kubespray,
                kubespray.inventory().hosts.clone(),
                self.vars_yml.is_some(),
            )
        })
    }

    /// The value of `kube_version` ansible gives the cluster's Kubernetes hosts, as written; `None` when
    /// unset, not a string, not known before the run (a template, a vaulted value) or not the same on every
    /// host.
    pub fn kube_version(&self) -> Option<String> {
        let resolved = self.resolve()?;
        match cluster_var(&resolved, "kube_version")? {
            Ok(Known::Value(serde_json::Value::String(v))) if !v.trim().is_empty() => {
                Some(v.trim().to_string())
            }
            _ => None,
        }
    }

    /// The directory's files ansible reads besides the inventory file, by path inside it: `vars.yml` as
    /// `group_vars/all.yml`, then group_vars/ and host_vars/.
    pub fn ansible_files(&self) -> Vec<(String, String)> {
        let mut files = Vec::with_capacity(self.vars_files.len() + 1);
        if let Some(vars) = &self.vars_yml {
            files.push((VARS_INVENTORY_PATH.to_string(), vars.clone()));
        }
        files.extend(self.vars_files.iter().cloned());
        files
    }
}

/// The inventory of the view `kubespray` already made by [`AnsibleInventory::with_kubespray_groups`],
/// without kubespray's catch-all group (see [`InventoryDir::inventory`]).
fn kok_inventory_of(kubespray: &AnsibleInventory) -> Inventory {
    let mut inventory = kubespray.inventory().clone();
    let unmatched = super::ansible::kubespray::UNMATCHED_GROUP;
    inventory.groups.remove(unmatched);
    inventory.members.remove(unmatched);
    inventory.children.remove(unmatched);
    for children in inventory.children.values_mut() {
        children.remove(unmatched);
    }
    inventory
}

/// The value of `name` ansible gives the Kubernetes hosts of `resolved`: those of `k8s_cluster` as
/// kubespray's boilerplate makes it, else (an inventory without them) every host. `None` when no host sets
/// it; `Some(Err(why))` when it is not known before the run or the hosts disagree.
pub fn cluster_var(resolved: &AnsibleInventory, name: &str) -> Option<Result<Known, String>> {
    cluster_setting(&resolved.with_kubespray_groups(), name).map(|found| found.map(|setting| setting.value))
}

/// [`cluster_var`] with where the value is set, on the view `kubespray` already made by
/// [`AnsibleInventory::with_kubespray_groups`].
fn cluster_setting(kubespray: &AnsibleInventory, name: &str) -> Option<Result<Setting, String>> {
    let group_var = match kubespray.group_var("k8s_cluster", name) {
        GroupVar::NoHosts => kubespray.group_var("all", name),
        found => found,
    };
    match group_var {
        GroupVar::NoHosts | GroupVar::Same(None) => None,
        GroupVar::Same(Some(setting)) => Some(Ok(setting)),
        GroupVar::Differ(values) => Some(Err(disagreement(&values))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(inventory_file: &str, hosts: &str, vars: Option<&str>, files: &[(&str, &str)]) -> InventoryDir {
        InventoryDir {
            inventory_file: inventory_file.into(),
            hosts_yml: hosts.into(),
            vars_yml: vars.map(str::to_string),
            vars_files: files
                .iter()
                .map(|(p, t)| (p.to_string(), t.to_string()))
                .collect(),
        }
    }

    #[test]
    fn kube_version_comes_from_group_vars_of_k8s_cluster_which_kubespray_makes_at_run_time() {
        let d = dir(
            "inventory.ini",
            "[kube_control_plane]\nn1\n\n[etcd:children]\nkube_control_plane\n\n[kube_node]\nn2\n",
            None,
            &[
                ("group_vars/all/all.yml", "kube_version: v1.29.0\n"),
                (
                    "group_vars/k8s_cluster/k8s-cluster.yml",
                    "kube_version: v1.31.4\n",
                ),
            ],
        );
        assert_eq!(d.kube_version().as_deref(), Some("v1.31.4"));
        let inventory = d.inventory().unwrap();
        assert!(inventory.hosts.contains("n1") && inventory.hosts.contains("n2"));
        assert_eq!(
            inventory.hosts_of("k8s_cluster"),
            ["n1".to_string(), "n2".to_string()].into(),
            "the group kubespray makes is there for kok's readers"
        );
        assert!(!inventory.groups.contains("_all"));
    }

    #[test]
    fn in_kok_s_short_layout_vars_yml_gives_every_hosts_kube_version() {
        let d = dir(
            "hosts.yml",
            "all:\n  hosts:\n    n1: {}\n",
            Some("kube_version: v1.30.2\n"),
            &[],
        );
        assert_eq!(d.kube_version().as_deref(), Some("v1.30.2"));
    }

    #[test]
    fn a_templated_or_disagreeing_kube_version_is_not_known() {
        let templated = dir(
            "hosts.yml",
            "all:\n  hosts:\n    n1: {}\n",
            Some("kube_version: \"{{ v }}\"\n"),
            &[],
        );
        assert_eq!(templated.kube_version(), None);
        let differ = dir(
            "inventory.ini",
            "[kube_node]\nn1 kube_version=v1.31.1\nn2\n",
            Some("kube_version: v1.31.4\n"),
            &[],
        );
        assert_eq!(differ.kube_version(), None);
        let resolved = differ.resolve().unwrap();
        let why = cluster_var(&resolved, "kube_version").unwrap().unwrap_err();
        assert!(why.contains("the hosts disagree"), "{why}");
        let view = differ.kubespray_view().unwrap();
        assert_eq!(
            view.vars["kube_version"],
            Err(why),
            "the view says what cluster_var says"
        );
    }

    #[test]
    fn the_kubespray_view_has_the_groups_with_their_lines_and_where_each_variable_is_set() {
        let d = dir(
            "inventory.ini",
            "# prod\n[kube_control_plane]\nn1\n\n[etcd:children]\nkube_control_plane\n\n[kube_node]\nn2\n\n\
             [kube_node:vars]\nkube_network_plugin=cilium\n",
            Some("kube_version: v1.30.2\nkube_network_plugin: calico\n"),
            &[],
        );
        let view = d.kubespray_view().unwrap();
        let lines: Vec<(&str, usize)> = view.groups.iter().map(|(g, v)| (g.as_str(), v.line)).collect();
        assert_eq!(
            lines,
            [
                ("etcd", 5),
                ("k8s_cluster", 0),
                ("kube_control_plane", 2),
                ("kube_node", 8)
            ]
        );
        assert_eq!(view.groups["k8s_cluster"].hosts, ["n2", "n1"]);
        let kube = view.vars["kube_version"].as_ref().unwrap();
        assert_eq!(
            (kube.origin.path.as_str(), kube.origin.line),
            ("vars.yml", Some(1))
        );
        // vars.yml (group_vars/all) outranks [kube_node:vars]: the hosts agree on calico.
        let plugin = view.vars["kube_network_plugin"].as_ref().unwrap();
        assert_eq!(plugin.value, Known::Value(serde_json::json!("calico")));
        assert!(!view.vars.contains_key("dns_mode"));
    }
}
