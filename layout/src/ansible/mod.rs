//! A kubespray inventory directory read the way ansible reads it (pure): the inventory (INI or YAML),
//! `group_vars/` and `host_vars/`, and every host's effective variables, without running ansible.
//!
//! [`read_inventory_dir`] takes the inventory file and the directory's other files as text and gives an
//! [`AnsibleInventory`]: hosts and groups in ansible's order, each host's variables merged in ansible's
//! precedence (see [`resolve`]), each value [`Known`] or not with the reason, and the file and line that
//! set it. [`AnsibleInventory::with_kubespray_groups`] adds the groups kubespray's boilerplate play makes
//! at run time (`k8s_cluster`). Rules assume ansible's defaults (and kubespray's `ansible.cfg`):
//! `hash_behaviour=replace`, the default variable precedence, group names kept as written.

pub(crate) mod graph;
mod hostpattern;
mod ini;
pub mod kubespray;
mod pyliteral;
pub mod resolve;
pub(crate) mod value;
pub(crate) mod vars;
pub(crate) mod yaml11;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

pub use resolve::{AnsibleInventory, GroupVar};
pub use value::{Known, Origin, Setting, Unknown};

use super::diag::{error_count, join, FileDiags};
use super::yaml::{Kind, Node};
use super::Diagnostic;
use resolve::{Layer, VarsFiles};
use vars::{parse_vars_file, Tree};

/// The files of one cluster directory that ansible reads as an inventory.
#[derive(Clone, Copy, Debug)]
pub struct InventorySource<'a> {
    /// The directory's path relative to the repository root (`clusters/prod-bj`), put before file paths in
    /// diagnostics; empty for none.
    pub dir: &'a str,
    /// The cluster the diagnostics belong to.
    pub cluster: Option<&'a str>,
    /// The inventory file's name in the directory: `inventory.ini` (read as INI), `hosts.yml` or
    /// `hosts.yaml` (read as YAML).
    pub inventory_name: &'a str,
    /// The inventory file's text.
    pub inventory_text: &'a str,
    /// The directory's other files as (path relative to the directory, text). Those under `group_vars/`
    /// and `host_vars/` are read; kok's `vars.yml` belongs here as `group_vars/all.yml`.
    pub files: &'a [(String, String)],
}

/// Reads an inventory directory as ansible does. Problems go to `out` (paths are `dir/…`); `None` when any
/// is an error (ansible would refuse the directory). Warnings: a vars file ansible passes over because
/// another form of the same name wins (`group_vars/all/` hides `group_vars/all.yml`), one naming no group
/// or host of the inventory, a duplicate key (ansible keeps the last).
pub fn read_inventory_dir(
    source: &InventorySource<'_>,
    out: &mut Vec<Diagnostic>,
) -> Option<AnsibleInventory> {
    read_parsed_inventory_dir(source, BTreeMap::new(), out)
}

/// [`read_inventory_dir`], with the YAML documents of some of `source.files` already parsed (by path, their
/// duplicate keys reported): validation hands vars.yml's on, so that it is parsed once.
pub(crate) fn read_parsed_inventory_dir(
    source: &InventorySource<'_>,
    parsed: BTreeMap<&str, Node>,
    out: &mut Vec<Diagnostic>,
) -> Option<AnsibleInventory> {
    let errors_before = error_count(out);
    let full = |rel: &str| join(source.dir, rel);
    let mut diags = FileDiags::new(full(source.inventory_name), source.cluster, out);
    let is_yaml = [".yml", ".yaml", ".json"]
        .iter()
        .any(|ext| source.inventory_name.ends_with(ext));
    let graph = if is_yaml {
        super::inventory::parse_inventory_graph(source.inventory_text, &mut diags).map(|(_, graph)| graph)
    } else {
        ini::parse_ini(source.inventory_text, &mut diags).map(|mut graph| {
            graph.reconcile();
            graph
        })
    };
    let graph = graph.filter(|_| error_count(out) == errors_before);
    let files = read_vars_files(source, graph.as_ref(), parsed, out);
    let graph = graph?;
    (error_count(out) == errors_before)
        .then(|| AnsibleInventory::new(graph, source.inventory_name.to_string(), Arc::new(files)))
}

/// Reads the vars files ansible would read for the inventory's groups and hosts (and the groups kubespray's
/// boilerplate adds), reporting their problems and the files it would pass over; those in `parsed` from
/// their document.
fn read_vars_files(
    source: &InventorySource<'_>,
    graph: Option<&graph::Graph>,
    mut parsed: BTreeMap<&str, Node>,
    out: &mut Vec<Diagnostic>,
) -> VarsFiles {
    let full = |rel: &str| join(source.dir, rel);
    let texts: std::collections::HashMap<&str, &str> = source
        .files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let mut files = VarsFiles::default();
    for (subdir, what) in [("group_vars", "group"), ("host_vars", "host")] {
        let tree = Tree::new(subdir, texts.keys().copied());
        let names: BTreeSet<String> = match (graph, what) {
            (None, _) => tree.names().map(|(_, name)| name.to_string()).collect(),
            (Some(g), "group") => g
                .groups
                .iter()
                .map(|g| g.name.clone())
                .chain(kubespray::added_groups().map(str::to_string))
                .collect(),
            (Some(g), _) => g.hosts.iter().map(|h| h.name.clone()).collect(),
        };
        for (entry, name) in tree.names() {
            if graph.is_some() && !names.contains(name) {
                let path = format!("{subdir}/{entry}");
                let mut diags = FileDiags::new(full(&path), source.cluster, out);
                warn_file(
                    &mut diags,
                    format!(
                        "no {what} \"{name}\" in the inventory: ansible never reads this; rename it after a {what}, \
                         or remove it"
                    ),
                );
            }
        }
        for name in &names {
            let (found, hidden) = tree.files_for(name);
            let winner = found
                .first()
                .map(|f| f.split('/').next().unwrap_or_default().to_string());
            for h in hidden {
                let mut diags = FileDiags::new(full(&format!("{subdir}/{h}")), source.cluster, out);
                warn_file(
                    &mut diags,
                    format!(
                        "ansible reads {subdir}/{} for {what} \"{name}\" and passes over this file: move its \
                         variables there",
                        winner.clone().unwrap_or_default()
                    ),
                );
            }
            let mut layers = Vec::new();
            for rel in found {
                let path = format!("{subdir}/{rel}");
                let text = texts.get(path.as_str()).copied().unwrap_or_default();
                let mut diags = FileDiags::new(full(&path), source.cluster, out);
                if let Some(file) = parse_vars_file(text, parsed.remove(path.as_str()), &mut diags) {
                    layers.push(Layer { path, file });
                }
            }
            if !layers.is_empty() {
                let by = if what == "group" {
                    &mut files.groups
                } else {
                    &mut files.hosts
                };
                by.insert(name.clone(), layers);
            }
        }
    }
    files
}

fn warn_file(diags: &mut FileDiags<'_>, message: String) {
    let whole = Node {
        line: 0,
        col: 0,
        kind: Kind::Null,
        written: None,
    };
    diags.warn(&whole, message);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn files(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(p, t)| (p.to_string(), t.to_string())).collect()
    }

    fn read(name: &str, text: &str, others: &[(&str, &str)]) -> (Option<AnsibleInventory>, Vec<String>) {
        let others = files(others);
        let source = InventorySource {
            dir: "clusters/c",
            cluster: Some("c"),
            inventory_name: name,
            inventory_text: text,
            files: &others,
        };
        let mut out = Vec::new();
        let inv = read_inventory_dir(&source, &mut out);
        (inv, out.iter().map(Diagnostic::to_string).collect())
    }

    fn ok(name: &str, text: &str, others: &[(&str, &str)]) -> AnsibleInventory {
        let (inv, diags) = read(name, text, others);
        assert_eq!(diags, Vec::<String>::new());
        inv.unwrap()
    }

    fn value(inv: &AnsibleInventory, host: &str, name: &str) -> serde_json::Value {
        match inv.var(host, name) {
            Some(Known::Value(v)) => v,
            other => panic!("{host}.{name}: {other:?}"),
        }
    }

    const INI: &str = "[kube_control_plane]\nnode1 ansible_host=10.0.0.1 v=host\nnode2\n[etcd:children]\n\
                       kube_control_plane\n[kube_node]\nnode3\n[kube_node:vars]\nv=kube_node\n[all:vars]\nv=all\n";

    #[test]
    fn inventory_vars_lose_to_group_vars_files_which_lose_to_host_vars() {
        let inv = ok(
            "inventory.ini",
            INI,
            &[
                ("group_vars/all.yml", "v: all_file\nw: all_file\n"),
                ("group_vars/etcd.yml", "v: etcd_file\n"),
                ("host_vars/node1.yml", "w: node1_file\n"),
            ],
        );
        // node1: the inline host variable beats every group source; host_vars beats it.
        assert_eq!(value(&inv, "node1", "v"), json!("host"));
        assert_eq!(value(&inv, "node1", "w"), json!("node1_file"));
        // node2: group_vars files beat inventory group vars; etcd's file beats all's.
        assert_eq!(value(&inv, "node2", "v"), json!("etcd_file"));
        // node3: kube_node's inventory vars lose to group_vars/all.yml.
        assert_eq!(value(&inv, "node3", "v"), json!("all_file"));
        let setting = inv.setting("node2", "v").unwrap();
        assert_eq!(setting.origin.to_string(), "group_vars/etcd.yml:1");
        assert_eq!(
            inv.setting("node1", "v").unwrap().origin.to_string(),
            "inventory.ini:2"
        );
    }

    #[test]
    fn deeper_groups_win_and_priority_orders_groups_of_equal_depth() {
        let text = "[a]\nh\n[b]\nh\n[parent:children]\nchild\n[child]\nh\n[a:vars]\nx=a\nansible_group_priority=10\n\
                    [b:vars]\nx=b\n[parent:vars]\ny=parent\n[child:vars]\ny=child\n";
        let inv = ok("inventory.ini", text, &[]);
        assert_eq!(value(&inv, "h", "x"), json!("a"), "priority 10 sorts a after b");
        assert_eq!(value(&inv, "h", "y"), json!("child"));
        assert_eq!(inv.group_names("h").unwrap(), ["a", "b", "child", "parent"]);
    }

    #[test]
    fn group_vars_directories_are_read_in_sorted_order() {
        let inv = ok(
            "inventory.ini",
            "[g]\nh\n",
            &[
                ("group_vars/g/b.yml", "x: b\n"),
                ("group_vars/g/a.yml", "x: a\ny: a\n"),
            ],
        );
        assert_eq!(value(&inv, "h", "x"), json!("b"));
        assert_eq!(inv.setting("h", "y").unwrap().origin.path, "group_vars/g/a.yml");
        let (inv, diags) = read(
            "inventory.ini",
            "[g]\nh\n",
            &[
                ("group_vars/g/a.yml", "x: a\n"),
                ("group_vars/g.yml", "x: hidden\n"),
            ],
        );
        assert_eq!(value(&inv.unwrap(), "h", "x"), json!("a"));
        assert_eq!(
            diags,
            ["clusters/c/group_vars/g.yml:0:0: warning: ansible reads group_vars/g for group \"g\" and passes over \
              this file: move its variables there"]
        );
    }

    #[test]
    fn vault_files_make_what_they_could_override_unknown() {
        let vault = "$ANSIBLE_VAULT;1.1;AES256\n3132\n";
        let inv = ok(
            "inventory.ini",
            "[g]\nh secret=inline\n",
            &[
                ("group_vars/all/a.yml", "x: 1\nsecret: low\n"),
                ("group_vars/all/vault.yml", vault),
                ("group_vars/g.yml", "y: 2\n"),
                ("group_vars/all/z.yml", "z: 3\n"),
            ],
        );
        let unknown = Known::Unknown(Unknown::VaultFile("group_vars/all/vault.yml".into()));
        assert_eq!(inv.var("h", "x"), Some(unknown.clone()));
        assert_eq!(inv.var("h", "never_set"), Some(unknown.clone()));
        assert_eq!(value(&inv, "h", "y"), json!(2));
        assert_eq!(value(&inv, "h", "z"), json!(3));
        assert_eq!(value(&inv, "h", "secret"), json!("inline"));
        let vars = inv.host_vars("h");
        assert_eq!(vars["x"], unknown);
        assert!(!vars.contains_key("never_set"));
    }

    #[test]
    fn yaml_inventories_keep_their_vars_and_addresses_come_from_resolved_vars() {
        let text = "all:\n  vars:\n    v: all\n  hosts:\n    n1:\n      ansible_host: 10.0.0.1\n    n2:\n  children:\n    \
                    kube_node:\n      vars:\n        v: kube_node\n      hosts:\n        n2:\n          on: yes\n";
        let inv = ok("hosts.yml", text, &[("host_vars/n2.yml", "ip: 192.168.0.2\n")]);
        assert_eq!(value(&inv, "n1", "v"), json!("all"));
        assert_eq!(value(&inv, "n2", "v"), json!("kube_node"));
        assert_eq!(value(&inv, "n2", "true"), json!(true));
        assert_eq!(inv.inventory().addresses["n1"], ["10.0.0.1"]);
        assert_eq!(inv.inventory().addresses["n2"], ["192.168.0.2"]);
        assert_eq!(inv.hosts(), ["n1", "n2"]);
        assert_eq!(inv.direct_hosts("ungrouped").unwrap(), ["n1"]);
    }

    #[test]
    fn the_kubespray_view_applies_k8s_cluster_group_vars() {
        let inv = ok(
            "inventory.ini",
            INI,
            &[(
                "group_vars/k8s_cluster/k8s-cluster.yml",
                "kube_version: v1.31.4\n",
            )],
        );
        assert_eq!(inv.var("node1", "kube_version"), None);
        assert_eq!(inv.group_var("k8s_cluster", "kube_version"), GroupVar::NoHosts);
        let kubespray = inv.with_kubespray_groups();
        assert_eq!(
            kubespray.group_hosts("k8s_cluster").unwrap(),
            ["node3", "node1", "node2"]
        );
        let GroupVar::Same(Some(setting)) = kubespray.group_var("k8s_cluster", "kube_version") else {
            panic!("{:?}", kubespray.group_var("k8s_cluster", "kube_version"));
        };
        assert_eq!(setting.value, Known::Value(json!("v1.31.4")));
        assert_eq!(
            setting.origin.to_string(),
            "group_vars/k8s_cluster/k8s-cluster.yml:1"
        );
        let differ = ok(
            "inventory.ini",
            INI,
            &[
                ("group_vars/k8s_cluster.yml", "kube_version: v1.31.4\n"),
                ("host_vars/node2.yml", "kube_version: v1.30.0\n"),
            ],
        )
        .with_kubespray_groups()
        .group_var("k8s_cluster", "kube_version");
        let GroupVar::Differ(values) = differ else {
            panic!("{differ:?}")
        };
        assert_eq!(
            values[1],
            (Some(Known::Value(json!("v1.30.0"))), vec!["node2".to_string()])
        );
    }

    #[test]
    fn problems_in_every_file_are_reported_together() {
        let (inv, diags) = read(
            "inventory.ini",
            "[a]\nh\n",
            &[
                ("group_vars/all.yml", "- not a mapping\n"),
                ("host_vars/ghost.yml", "a: 1\n"),
            ],
        );
        assert!(inv.is_none());
        assert_eq!(diags.len(), 2, "{diags:?}");
        assert!(diags[0].starts_with("clusters/c/group_vars/all.yml:1:1: a vars file must be a mapping"));
        assert!(diags[1].starts_with("clusters/c/host_vars/ghost.yml:0:0: warning: no host \"ghost\""));
        let (inv, diags) = read("inventory.ini", "[a:vars]\nx=1\n", &[("group_vars/x.yml", "[1")]);
        assert!(inv.is_none());
        assert!(
            diags[0].starts_with("clusters/c/inventory.ini:1:1: section [a:vars]"),
            "{diags:?}"
        );
        assert!(
            diags[1].starts_with("clusters/c/group_vars/x.yml:2:1: YAML syntax error"),
            "{diags:?}"
        );
    }
}
