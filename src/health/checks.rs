//! The verification checks (pure): pinned inventory and vars, and what the cluster shows, in; each check's
//! result and the one line a commit status says, out.
//!
//! 1. `Reachable`: the API server answers.
//! 2. `NodesReady`: every Node is Ready.
//! 3. `InventoryMatches`: the Nodes are exactly the inventory's Kubernetes hosts (`kube_control_plane` ∪
//!    `kube_node`, children resolved), matched by name, else by a Node's InternalIP against the host's
//!    `ip` / `access_ip` / `ansible_host`.
//! 4. `VersionMatches`: when the inventory gives the Kubernetes hosts one `kube_version` (from vars.yml,
//!    group_vars/, host_vars/ or the inventory file), every kubelet reports it (`v1.31.4` = `1.31.4`).
//! 5. `WorkloadsAvailable`: the kube-system Deployments and DaemonSets are available.
//!
//! A remove-node operation runs while its node is still in the inventory of its commit (DESIGN §1.7): the
//! hosts it names with `-e node=` are taken out of the expected set, and check 3 asserts they are gone.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::Node;

use crate::api::{CheckResult, Verify};
use crate::layout::{host_references, InventoryDir};

/// The inventory groups whose hosts are the cluster's Nodes.
pub const KUBERNETES_GROUPS: [&str; 2] = ["kube_control_plane", "kube_node"];
/// Check 1: the API server answers.
pub const REACHABLE: &str = "Reachable";
/// Check 2: every Node is Ready.
pub const NODES_READY: &str = "NodesReady";
/// Check 3: the Nodes are the inventory's Kubernetes hosts.
pub const INVENTORY_MATCHES: &str = "InventoryMatches";
/// Check 4: every kubelet is at `kube_version`.
pub const VERSION_MATCHES: &str = "VersionMatches";
/// Check 5: the kube-system Deployments and DaemonSets are available.
pub const WORKLOADS_AVAILABLE: &str = "WorkloadsAvailable";
/// The playbook whose `-e node=` hosts must be gone afterwards.
pub const REMOVE_NODE_PLAYBOOK: &str = "remove-node.yml";

/// What the cluster should be after an operation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expected {
    /// The Kubernetes hosts of the inventory, each with the addresses its variables give it.
    pub hosts: BTreeMap<String, Vec<String>>,
    /// `kube_version` as the inventory gives it to the Kubernetes hosts, without a leading `v`; `None` when
    /// unset (or a template).
    pub kube_version: Option<String>,
    /// Hosts the operation removes (remove-node's `-e node=`), with their addresses: they must be gone.
    pub removed: BTreeMap<String, Vec<String>>,
}

impl Expected {
    /// What an operation running `action` with `extra_args` on the pinned inventory directory `dir` should
    /// leave; `Err` when its inventory file does not read as an inventory.
    pub fn from_dir(dir: &InventoryDir, action: &str, extra_args: &[String]) -> Result<Expected, String> {
        let inventory = dir
            .inventory()
            .ok_or_else(|| format!("the pinned {} is not a valid inventory", dir.inventory_file))?;
        let removing: BTreeSet<String> = if action.rsplit('/').next() == Some(REMOVE_NODE_PLAYBOOK) {
            host_references(extra_args)
                .into_iter()
                .filter(|r| extra_args[r.arg].contains("node="))
                .map(|r| r.name)
                .collect()
        } else {
            BTreeSet::new()
        };
        let mut expected = Expected {
            kube_version: kube_version_of(dir),
            ..Expected::default()
        };
        for group in KUBERNETES_GROUPS {
            for host in inventory.hosts_of(group) {
                let addresses = inventory.addresses.get(&host).cloned().unwrap_or_default();
                if removing.contains(&host) {
                    expected.removed.insert(host, addresses);
                } else {
                    expected.hosts.insert(host, addresses);
                }
            }
        }
        for host in removing {
            expected.removed.entry(host).or_default();
        }
        Ok(expected)
    }
}

/// `kube_version` as ansible gives it to the cluster's hosts, without a leading `v`; `None` when unset or not
/// known before the run.
pub fn kube_version_of(dir: &InventoryDir) -> Option<String> {
    dir.kube_version().map(|v| bare_version(&v).to_string())
}

/// A version without its leading `v`: kubespray writes `v1.31.4` up to 2.27 and `1.31.4` after.
fn bare_version(version: &str) -> &str {
    version.strip_prefix('v').unwrap_or(version)
}

/// What kok needs of a Node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeView {
    /// Node name.
    pub name: String,
    /// `None` when Ready is `True`; else why not (the condition's reason, or `no status yet`).
    pub not_ready: Option<String>,
    /// Its InternalIP addresses.
    pub internal_ips: Vec<String>,
    /// `status.nodeInfo.kubeletVersion` (empty until the kubelet posted status).
    pub kubelet_version: String,
}

impl NodeView {
    /// The view of `node`.
    pub fn of(node: &Node) -> NodeView {
        let status = node.status.as_ref();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
        let not_ready = match ready {
            Some(c) if c.status == "True" => None,
            Some(c) => Some(
                c.reason
                    .clone()
                    .unwrap_or_else(|| format!("Ready is {}", c.status)),
            ),
            None => Some("no status yet".to_string()),
        };
        NodeView {
            name: node.metadata.name.clone().unwrap_or_default(),
            not_ready,
            internal_ips: status
                .and_then(|s| s.addresses.as_ref())
                .into_iter()
                .flatten()
                .filter(|a| a.type_ == "InternalIP")
                .map(|a| a.address.clone())
                .collect(),
            kubelet_version: status
                .and_then(|s| s.node_info.as_ref())
                .map(|i| i.kubelet_version.clone())
                .unwrap_or_default(),
        }
    }
}

/// What kok needs of a kube-system Deployment or DaemonSet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkloadView {
    /// `Deployment` or `DaemonSet`.
    pub kind: &'static str,
    /// Its name.
    pub name: String,
    /// Available replicas (or pods).
    pub available: i32,
    /// Replicas (or pods) wanted.
    pub wanted: i32,
    /// Replicas (or pods) the controller counts as unavailable.
    pub unavailable: i32,
}

impl WorkloadView {
    /// The view of a Deployment: `spec.replicas` (default 1) wanted, `status.availableReplicas` available.
    pub fn of_deployment(d: &Deployment) -> WorkloadView {
        let status = d.status.as_ref();
        WorkloadView {
            kind: "Deployment",
            name: d.metadata.name.clone().unwrap_or_default(),
            available: status.and_then(|s| s.available_replicas).unwrap_or(0),
            wanted: d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
            unavailable: status.and_then(|s| s.unavailable_replicas).unwrap_or(0),
        }
    }

    /// The view of a DaemonSet: `desiredNumberScheduled` wanted, `numberAvailable` available.
    pub fn of_daemon_set(d: &DaemonSet) -> WorkloadView {
        let status = d.status.as_ref();
        WorkloadView {
            kind: "DaemonSet",
            name: d.metadata.name.clone().unwrap_or_default(),
            available: status.and_then(|s| s.number_available).unwrap_or(0),
            wanted: status.map(|s| s.desired_number_scheduled).unwrap_or(0),
            unavailable: status.and_then(|s| s.number_unavailable).unwrap_or(0),
        }
    }

    fn is_available(&self) -> bool {
        self.available >= self.wanted && self.unavailable == 0
    }
}

/// What kok saw of a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// `Err` with why when the API server did not answer (e.g. `unreachable: connection refused`);
    /// then nothing else was read.
    pub api: Result<(), String>,
    /// Its Nodes.
    pub nodes: Vec<NodeView>,
    /// Its kube-system Deployments and DaemonSets.
    pub workloads: Vec<WorkloadView>,
    /// The API server's `gitVersion` (`/version`), when it said it.
    pub version: Option<String>,
}

impl Default for Observed {
    /// An API server that answered and showed nothing.
    fn default() -> Self {
        Observed {
            api: Ok(()),
            nodes: Vec::new(),
            workloads: Vec::new(),
            version: None,
        }
    }
}

/// The outcome of one verification attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Whether every check held.
    pub passed: bool,
    /// Each check's result, in check order.
    pub checks: Vec<CheckResult>,
    /// `verified: 5/5 nodes Ready, v1.31.4`, or the failed checks' messages joined by `; `.
    pub message: String,
}

/// Runs the checks `level` asks for on what was `observed`.
pub fn verify(level: Verify, expected: &Expected, observed: &Observed) -> Verdict {
    let mut checks = vec![match &observed.api {
        Ok(()) => pass(REACHABLE, "API server answers".to_string()),
        Err(why) => fail(REACHABLE, format!("API server {why}")),
    }];
    if level == Verify::Full && observed.api.is_ok() {
        checks.push(nodes_ready(&observed.nodes));
        checks.push(inventory_matches(expected, &observed.nodes));
        if let Some(want) = &expected.kube_version {
            checks.push(version_matches(want, &observed.nodes));
        }
        checks.push(workloads_available(&observed.workloads));
    }
    let passed = checks.iter().all(|c| c.passed);
    let message = if !passed {
        let failed: Vec<&str> = checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| c.message.as_str())
            .collect();
        failed.join("; ")
    } else if level == Verify::Full {
        let ready = observed.nodes.len();
        let mut text = format!("verified: {ready}/{ready} nodes Ready");
        if let Some(want) = &expected.kube_version {
            text.push_str(&format!(", v{want}"));
        }
        text
    } else {
        "verified: API server answers".to_string()
    };
    Verdict {
        passed,
        checks,
        message,
    }
}

fn pass(name: &str, message: String) -> CheckResult {
    CheckResult {
        name: name.to_string(),
        passed: true,
        message,
    }
}

fn fail(name: &str, message: String) -> CheckResult {
    CheckResult {
        name: name.to_string(),
        passed: false,
        message,
    }
}

fn nodes_ready(nodes: &[NodeView]) -> CheckResult {
    if nodes.is_empty() {
        return fail(NODES_READY, "the cluster has no nodes".to_string());
    }
    let not_ready: Vec<String> = nodes
        .iter()
        .filter_map(|n| Some(format!("{} ({})", n.name, n.not_ready.as_ref()?)))
        .collect();
    if not_ready.is_empty() {
        pass(NODES_READY, format!("{0}/{0} nodes Ready", nodes.len()))
    } else {
        fail(
            NODES_READY,
            format!(
                "{}/{} nodes not Ready: {}",
                not_ready.len(),
                nodes.len(),
                not_ready.join(", ")
            ),
        )
    }
}

/// The node a host is: the one of its name, else one whose InternalIP is one of its addresses.
fn node_of<'n>(host: &str, addresses: &[String], nodes: &'n [NodeView]) -> Option<&'n NodeView> {
    nodes
        .iter()
        .find(|n| n.name.eq_ignore_ascii_case(host))
        .or_else(|| {
            nodes
                .iter()
                .find(|n| n.internal_ips.iter().any(|ip| addresses.contains(ip)))
        })
}

fn inventory_matches(expected: &Expected, nodes: &[NodeView]) -> CheckResult {
    let mut matched: BTreeSet<&str> = BTreeSet::new();
    let mut missing = Vec::new();
    for (host, addresses) in &expected.hosts {
        match node_of(host, addresses, nodes) {
            Some(node) => {
                matched.insert(&node.name);
            }
            None => missing.push(host.as_str()),
        }
    }
    let mut still_there = Vec::new();
    for (host, addresses) in &expected.removed {
        if let Some(node) = node_of(host, addresses, nodes).filter(|n| !matched.contains(n.name.as_str())) {
            matched.insert(&node.name);
            still_there.push(host.as_str());
        }
    }
    let extra: Vec<&str> = nodes
        .iter()
        .map(|n| n.name.as_str())
        .filter(|n| !matched.contains(n))
        .collect();
    let mut problems = Vec::new();
    if !missing.is_empty() {
        problems.push(names_are(
            &missing,
            "in hosts.yml but not a node of the cluster",
            "in hosts.yml but not nodes of the cluster",
        ));
    }
    if !extra.is_empty() {
        problems.push(names_are(
            &extra,
            "a node of the cluster but not in hosts.yml",
            "nodes of the cluster but not in hosts.yml",
        ));
    }
    if !still_there.is_empty() {
        problems.push(names_are(
            &still_there,
            "still a node of the cluster after remove-node",
            "still nodes of the cluster after remove-node",
        ));
    }
    if problems.is_empty() {
        let removed = if expected.removed.is_empty() {
            String::new()
        } else {
            let names: Vec<&str> = expected.removed.keys().map(String::as_str).collect();
            format!(", {} removed", names.join(", "))
        };
        pass(
            INVENTORY_MATCHES,
            format!("{} nodes, as hosts.yml lists{removed}", nodes.len()),
        )
    } else {
        fail(INVENTORY_MATCHES, problems.join("; "))
    }
}

/// `node7 is <one>` or `node7, node8 are <many>`.
fn names_are(names: &[&str], one: &str, many: &str) -> String {
    match names {
        [name] => format!("{name} is {one}"),
        _ => format!("{} are {many}", names.join(", ")),
    }
}

fn version_matches(want: &str, nodes: &[NodeView]) -> CheckResult {
    let mut behind: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for node in nodes {
        let have = bare_version(&node.kubelet_version);
        if have != want {
            behind.entry(have).or_default().push(&node.name);
        }
    }
    if behind.is_empty() {
        return pass(VERSION_MATCHES, format!("every kubelet at v{want}"));
    }
    let groups: Vec<String> = behind
        .iter()
        .enumerate()
        .map(|(i, (have, names))| {
            let at = if have.is_empty() {
                "without a version".to_string()
            } else {
                format!("at v{have}")
            };
            let count = match (i, names.len()) {
                (0, 1) => "1 kubelet still".to_string(),
                (0, n) => format!("{n} kubelets still"),
                (_, n) => n.to_string(),
            };
            format!("{count} {at} ({})", names.join(", "))
        })
        .collect();
    fail(VERSION_MATCHES, format!("{}, want v{want}", groups.join(", ")))
}

fn workloads_available(workloads: &[WorkloadView]) -> CheckResult {
    let short: Vec<String> = workloads
        .iter()
        .filter(|w| !w.is_available())
        .map(|w| format!("{} {} ({}/{})", w.kind, w.name, w.available, w.wanted))
        .collect();
    if short.is_empty() {
        pass(
            WORKLOADS_AVAILABLE,
            format!("{} kube-system workloads available", workloads.len()),
        )
    } else {
        fail(
            WORKLOADS_AVAILABLE,
            format!("not available in kube-system: {}", short.join(", ")),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTS: &str = "all:\n  hosts:\n    node1: {ip: 10.0.0.1}\n    node2: {ip: 10.0.0.2}\n    \
                         node3: {ansible_host: 10.0.0.3}\n    bastion:\n  children:\n    kube_control_plane:\n      \
                         hosts:\n        node1:\n    kube_node:\n      children:\n        workers:\n          hosts:\n            \
                         node2:\n            node3:\n    k8s_cluster:\n      children:\n        kube_control_plane:\n        \
                         kube_node:\n";

    fn expected(vars: &str) -> Expected {
        Expected::from_dir(
            &crate::layout::InventoryDir::short(HOSTS, vars),
            "cluster.yml",
            &[],
        )
        .unwrap()
    }

    fn node(name: &str, ip: &str, version: &str) -> NodeView {
        NodeView {
            name: name.to_string(),
            not_ready: None,
            internal_ips: vec![ip.to_string()],
            kubelet_version: version.to_string(),
        }
    }

    fn healthy() -> Observed {
        Observed {
            api: Ok(()),
            nodes: vec![
                node("node1", "10.0.0.1", "v1.31.4"),
                node("node2", "10.0.0.2", "v1.31.4"),
                node("node3", "10.0.0.3", "v1.31.4"),
            ],
            workloads: vec![WorkloadView {
                kind: "Deployment",
                name: "coredns".into(),
                available: 2,
                wanted: 2,
                unavailable: 0,
            }],
            version: Some("v1.31.4".into()),
        }
    }

    fn message(vars: &str, observed: &Observed) -> String {
        let verdict = verify(Verify::Full, &expected(vars), observed);
        assert_eq!(verdict.passed, verdict.checks.iter().all(|c| c.passed));
        verdict.message
    }

    #[test]
    fn the_expected_hosts_are_the_kubernetes_groups_with_children_resolved() {
        let e = expected("kube_version: v1.31.4\n");
        assert_eq!(e.hosts.keys().collect::<Vec<_>>(), ["node1", "node2", "node3"]);
        assert_eq!(e.hosts["node3"], ["10.0.0.3"]);
        assert_eq!(e.kube_version.as_deref(), Some("1.31.4"));
    }

    #[test]
    fn a_healthy_cluster_is_verified_with_its_node_count_and_version() {
        let verdict = verify(Verify::Full, &expected("kube_version: v1.31.4\n"), &healthy());
        assert!(verdict.passed);
        assert_eq!(verdict.message, "verified: 3/3 nodes Ready, v1.31.4");
        let names: Vec<&str> = verdict.checks.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                REACHABLE,
                NODES_READY,
                INVENTORY_MATCHES,
                VERSION_MATCHES,
                WORKLOADS_AVAILABLE
            ]
        );
    }

    #[test]
    fn a_version_with_or_without_v_means_the_same() {
        assert_eq!(
            message("kube_version: 1.31.4\n", &healthy()),
            "verified: 3/3 nodes Ready, v1.31.4"
        );
        let mut bare = healthy();
        bare.nodes[0].kubelet_version = "1.31.4".into();
        assert!(verify(Verify::Full, &expected("kube_version: v1.31.4\n"), &bare).passed);
    }

    #[test]
    fn without_kube_version_the_version_check_is_left_out() {
        for vars in ["{}\n", "kube_version: \"{{ kube_default }}\"\n", "other: 1\n"] {
            let verdict = verify(Verify::Full, &expected(vars), &healthy());
            assert!(verdict.checks.iter().all(|c| c.name != VERSION_MATCHES), "{vars}");
            assert_eq!(verdict.message, "verified: 3/3 nodes Ready");
        }
    }

    #[test]
    fn a_node_not_ready_is_named_with_its_reason() {
        let mut o = healthy();
        o.nodes[2].not_ready = Some("NodeStatusUnknown".into());
        assert_eq!(
            message("{}\n", &o),
            "1/3 nodes not Ready: node3 (NodeStatusUnknown)"
        );
    }

    #[test]
    fn a_host_missing_from_the_cluster_is_named() {
        let mut o = healthy();
        o.nodes.pop();
        assert_eq!(
            message("{}\n", &o),
            "node3 is in hosts.yml but not a node of the cluster"
        );
    }

    #[test]
    fn a_node_missing_from_the_inventory_is_named() {
        let mut o = healthy();
        o.nodes.push(node("node9", "10.0.0.9", "v1.31.4"));
        assert_eq!(
            message("{}\n", &o),
            "node9 is a node of the cluster but not in hosts.yml"
        );
        o.nodes.push(node("node8", "10.0.0.8", "v1.31.4"));
        assert_eq!(
            message("{}\n", &o),
            "node9, node8 are nodes of the cluster but not in hosts.yml"
        );
    }

    #[test]
    fn a_node_named_otherwise_matches_its_host_by_internal_ip() {
        let mut o = healthy();
        o.nodes[1].name = "ip-10-0-0-2".into();
        assert_eq!(message("{}\n", &o), "verified: 3/3 nodes Ready");
        o.nodes[1].internal_ips = vec!["10.9.9.9".into()];
        assert_eq!(
            message("{}\n", &o),
            "node2 is in hosts.yml but not a node of the cluster; ip-10-0-0-2 is a node of the cluster but not in hosts.yml"
        );
    }

    #[test]
    fn kubelets_at_another_version_are_counted_and_named() {
        let mut o = healthy();
        o.nodes[0].kubelet_version = "v1.30.6".into();
        o.nodes[1].kubelet_version = "v1.30.6".into();
        assert_eq!(
            message("kube_version: v1.31.4\n", &o),
            "2 kubelets still at v1.30.6 (node1, node2), want v1.31.4"
        );
        o.nodes[2].kubelet_version = String::new();
        assert_eq!(
            message("kube_version: v1.31.4\n", &o),
            "1 kubelet still without a version (node3), 2 at v1.30.6 (node1, node2), want v1.31.4"
        );
    }

    #[test]
    fn an_unreachable_api_server_is_the_only_check_and_says_why() {
        let o = Observed {
            api: Err("unreachable: connection refused".into()),
            ..Observed::default()
        };
        let verdict = verify(Verify::Full, &expected("kube_version: v1.31.4\n"), &o);
        assert_eq!(verdict.checks.len(), 1);
        assert_eq!(verdict.message, "API server unreachable: connection refused");
    }

    #[test]
    fn reachable_checks_only_the_api_server() {
        let mut o = healthy();
        o.nodes.clear();
        let verdict = verify(Verify::Reachable, &expected("{}\n"), &o);
        assert!(verdict.passed);
        assert_eq!(verdict.message, "verified: API server answers");
    }

    #[test]
    fn kube_system_workloads_short_of_replicas_are_named() {
        let mut o = healthy();
        o.workloads[0].available = 0;
        o.workloads.push(WorkloadView {
            kind: "DaemonSet",
            name: "calico-node".into(),
            available: 2,
            wanted: 3,
            unavailable: 1,
        });
        assert_eq!(
            message("{}\n", &o),
            "not available in kube-system: Deployment coredns (0/2), DaemonSet calico-node (2/3)"
        );
    }

    #[test]
    fn a_cluster_without_nodes_is_not_ready() {
        let mut o = healthy();
        o.nodes.clear();
        assert!(
            message("{}\n", &o).starts_with("the cluster has no nodes; node1, node2, node3 are in hosts.yml")
        );
    }

    #[test]
    fn remove_node_expects_its_node_gone_though_the_inventory_still_lists_it() {
        let args = vec!["-e".to_string(), "node=node3".to_string()];
        let e = Expected::from_dir(
            &crate::layout::InventoryDir::short(HOSTS, "{}\n"),
            "remove-node.yml",
            &args,
        )
        .unwrap();
        assert_eq!(e.hosts.keys().collect::<Vec<_>>(), ["node1", "node2"]);
        let mut o = healthy();
        let verdict = verify(Verify::Full, &e, &o);
        assert_eq!(
            verdict.message,
            "node3 is still a node of the cluster after remove-node"
        );
        o.nodes.pop();
        let verdict = verify(Verify::Full, &e, &o);
        assert_eq!(verdict.message, "verified: 2/2 nodes Ready");
        assert_eq!(
            verdict.checks[2].message,
            "2 nodes, as hosts.yml lists, node3 removed"
        );
        // `--limit` alone names no node to remove, and another playbook removes nothing.
        let limit = vec!["--limit=node3".to_string()];
        let e = Expected::from_dir(
            &crate::layout::InventoryDir::short(HOSTS, "{}\n"),
            "remove-node.yml",
            &limit,
        )
        .unwrap();
        assert!(e.removed.is_empty());
        let e = Expected::from_dir(
            &crate::layout::InventoryDir::short(HOSTS, "{}\n"),
            "scale.yml",
            &args,
        )
        .unwrap();
        assert!(e.removed.is_empty());
    }

    #[test]
    fn views_read_the_nodes_and_workloads_a_real_api_server_returned() {
        let recorded: serde_json::Value =
            serde_json::from_str(include_str!("../../testkit/tests/fixtures/realapi/nodes.json")).unwrap();
        let read = |v: &serde_json::Value| -> Node { serde_json::from_value(v.clone()).unwrap() };
        let b = NodeView::of(&read(&recorded["still_heartbeating_b"]["node"]));
        assert_eq!(
            (b.not_ready.as_deref(), b.kubelet_version.as_str()),
            (None, "v1.31.4")
        );
        assert_eq!(b.internal_ips, ["127.0.0.12"]);
        let a = NodeView::of(&read(&recorded["heartbeats_stopped_a"]["node_at_end"]));
        assert_eq!(a.not_ready.as_deref(), Some("NodeStatusUnknown"));
        let c = NodeView::of(&read(&recorded["never_posted_status_c"]["node_at_end"]));
        assert_eq!(c.not_ready.as_deref(), Some("NodeStatusNeverUpdated"));
        let created = NodeView::of(&read(&recorded["create"]["a"]["response"]["body"]));
        assert_eq!(created.not_ready.as_deref(), Some("no status yet"));
        let workloads = &recorded["workloads"];
        let d: Deployment = serde_json::from_value(workloads["deployment"]["object"].clone()).unwrap();
        assert!(!WorkloadView::of_deployment(&d).is_available());
        let ds =
            |name: &str| -> DaemonSet { serde_json::from_value(workloads[name]["object"].clone()).unwrap() };
        assert!(WorkloadView::of_daemon_set(&ds("daemonset-no-matching-node")).is_available());
        assert!(!WorkloadView::of_daemon_set(&ds("daemonset-one-ready-node")).is_available());
    }
}
