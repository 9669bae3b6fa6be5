//! Rules 11 and 12: what a commit changes in a cluster's inventory against the base commit's (a plan's
//! start): hosts added that no pending operation reaches, hosts dropped before `remove-node.yml` removed them,
//! and settings kubespray cannot change on a running cluster.

use super::rules::{limit_names, playbook_name};
use super::{
    is_kubespray_inventory, Cites, ClusterFacts, Finding, Releases, Rule, Setting, Version, FIXED_SETTINGS,
};
use crate::api::ActionType;
use crate::layout::Severity;

/// The release whose documents rules 11 and 12 cite.
const DOCS_AT: Version = Version {
    major: 2,
    minor: 27,
    patch: 0,
};

/// kubespray's node documentation at [`DOCS_AT`].
const NODES_MD: &str = "docs/operations/nodes.md";

/// The groups whose new hosts an operation must reach, with the playbooks that reach them (by normalised
/// name), the line of kubespray's node documentation that says so, and the entry to add (`{host}` is the
/// host).
const JOINS: [(&str, &[&str], usize, &str); 3] = [
    (
        "kube_control_plane",
        &["cluster", "recover_control_plane"],
        84,
        "{id: add-{host}, action: cluster.yml}",
    ),
    (
        "etcd",
        &["cluster", "recover_control_plane"],
        148,
        "{id: add-{host}, action: cluster.yml, extraArgs: [--limit=etcd,kube_control_plane, -e, \
         ignore_assert_errors=yes]}",
    ),
    (
        "kube_node",
        &["cluster", "scale"],
        63,
        "{id: add-{host}, action: scale.yml, extraArgs: [--limit={host}]}",
    ),
];

/// The groups a dropped host must have been removed from first.
const MEMBER_GROUPS: [&str; 5] = [
    "kube_control_plane",
    "etcd",
    "kube_node",
    "k8s_cluster",
    "calico_rr",
];

/// Why kubespray cannot change each of [`FIXED_SETTINGS`] on a running cluster, and where (at
/// [`DOCS_AT`]) it writes what the reason rests on.
const FIXED_WHY: [(&str, &str, &str, usize); 5] = [
    (
        "kube_network_plugin",
        "kubespray installs one network plugin and has no migration to another (the old plugin's pods, \
         interfaces and routes stay on every node)",
        "docs/ansible/vars.md",
        72,
    ),
    (
        "kube_service_addresses",
        "kubeadm fixes the Service range when the cluster is made, and its first address is the API \
         server's Service IP, signed into its certificate",
        "roles/kubespray-defaults/defaults/main/main.yml",
        255,
    ),
    (
        "kube_pods_subnet",
        "kubeadm fixes the Pod range when the cluster is made, and calico's check stops the run whose pool no \
         longer matches it (\"Your inventory doesn't match the current cluster configuration\")",
        "roles/network_plugin/calico/tasks/check.yml",
        162,
    ),
    (
        "etcd_deployment_type",
        "kubespray deploys etcd one of three ways and has no migration between them",
        "docs/operations/etcd.md",
        5,
    ),
    (
        "container_manager",
        "kubespray says migrating container engines is not officially supported",
        "docs/upgrades/migrate_docker2containerd.md",
        5,
    ),
];

/// kubespray's defaults (at [`DOCS_AT`], roles/kubespray-defaults/defaults/main/main.yml:208 and 213) for the
/// fixed settings the release data does not enumerate.
const SUBNET_DEFAULTS: [(&str, &str); 2] = [
    ("kube_service_addresses", "10.233.0.0/18"),
    ("kube_pods_subnet", "10.233.64.0/18"),
];

fn cite(path: &str, line: usize) -> Option<Cites> {
    Some(Cites::Kubespray {
        release: DOCS_AT,
        path: path.to_string(),
        line,
    })
}

/// Rules 11 and 12 for `facts`, when the caller gave the base commit's inventory.
pub(super) fn check(facts: &ClusterFacts<'_>, data: &Releases) -> Vec<Finding> {
    let Some(before) = &facts.before else {
        return Vec::new();
    };
    if !is_kubespray_inventory(&before.inventory) {
        return Vec::new();
    }
    let mut out = added(facts);
    if facts.installed {
        out.extend(dropped(facts));
        out.extend(fixed(facts, data));
    }
    out
}

fn finding(
    rule: Rule,
    severity: Severity,
    at: (&str, usize),
    message: String,
    cites: Option<Cites>,
) -> Finding {
    Finding {
        rule,
        severity,
        path: at.0.to_string(),
        line: at.1,
        operation: None,
        message,
        cites,
        upgrade_path: None,
    }
}

/// True when a pending playbook operation running one of `playbooks` reaches `host`: without `--limit`, or
/// with one that names the host or a group holding it.
fn reached(facts: &ClusterFacts<'_>, host: &str, playbooks: &[&str]) -> bool {
    facts
        .operations
        .iter()
        .filter(|o| o.pending && o.operation.action_type == ActionType::Playbook)
        .filter(|o| playbooks.contains(&playbook_name(&o.operation.action).as_str()))
        .any(|o| {
            let limits = limit_names(&o.operation.extra_args);
            limits.is_empty()
                || limits.iter().any(|name| {
                    name == host
                        || name == "all"
                        || facts
                            .inventory
                            .hosts_of(name)
                            .is_some_and(|hosts| hosts.iter().any(|h| h == host))
                })
        })
}

/// Rule 11, added hosts: a host new in `kube_control_plane`, `etcd` or `kube_node` that no pending
/// `cluster.yml` (or, for a worker, `scale.yml`) reaches is a warning naming the entry to add.
fn added(facts: &ClusterFacts<'_>) -> Vec<Finding> {
    let before = facts.before.as_ref().map(|b| &b.inventory);
    let mut out = Vec::new();
    let mut named = std::collections::BTreeSet::new();
    for (group, playbooks, doc_line, entry) in JOINS {
        let old = before.and_then(|b| b.hosts_of(group)).unwrap_or_default();
        for host in facts.inventory.hosts_of(group).unwrap_or_default() {
            if old.contains(host) || named.contains(host) || reached(facts, host, playbooks) {
                continue;
            }
            named.insert(host.clone());
            let how = match group {
                "kube_node" => String::new(),
                _ => format!(" (kubespray adds a {group} host with cluster.yml, not scale.yml)"),
            };
            out.push(finding(
                Rule::HostNotReached,
                Severity::Warning,
                (&facts.inventory.path, facts.inventory.line_of(group)),
                format!(
                    "{host} is new in {group} and no pending operation reaches it: add - {} to operations.yml, \
                     or nothing joins {host} to the cluster{how}",
                    entry.replace("{host}", host)
                ),
                cite(NODES_MD, doc_line),
            ));
        }
    }
    out
}

/// Rule 11, dropped hosts: a host of the base commit's Kubernetes groups that the inventory no longer has,
/// which no succeeded `remove-node.yml -e node=<host>` removed, is an error naming the two commits.
fn dropped(facts: &ClusterFacts<'_>) -> Vec<Finding> {
    let Some(before) = &facts.before else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for group in MEMBER_GROUPS {
        for host in before.inventory.hosts_of(group).unwrap_or_default() {
            if facts.inventory.hosts.contains(host) || facts.removed.contains(host) || !seen.insert(host) {
                continue;
            }
            let line = facts.inventory.line_of(group);
            out.push(finding(
                Rule::HostDropped,
                Severity::Error,
                (&facts.inventory.path, line),
                format!(
                    "{host} is dropped from {} ({group}), and no remove-node.yml -e node={host} has succeeded: \
                     its Node, and its etcd member where it has one, stay in the cluster. Take two commits: first, \
                     with {host} still in the inventory, add - {{id: remove-{host}, action: remove-node.yml, \
                     extraArgs: [-e, node={host}, -e, skip_confirmation=true]}}; once it has succeeded, drop \
                     {host} from the inventory",
                    facts.inventory.path
                ),
                cite(NODES_MD, 71),
            ));
        }
    }
    out
}

/// The value of a fixed setting: written, else the release's default (from the data, or kubespray's default
/// subnets); `None` when kok cannot tell.
fn effective(setting: Option<&Setting>, name: &str, release: Option<&super::Release>) -> Option<String> {
    match setting {
        Some(Setting::Known(w)) => match &w.value {
            serde_json::Value::String(s) if s.contains("{{") => None,
            serde_json::Value::String(s) => Some(s.trim().to_string()),
            other => Some(other.to_string()),
        },
        Some(Setting::NotKnown { .. }) => None,
        None => SUBNET_DEFAULTS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_string())
            .or_else(|| release?.settings.get(name).map(|a| a.default.value.clone())),
    }
}

/// Rule 12: a change of one of [`FIXED_SETTINGS`] on an installed cluster is an error, unless this commit
/// queues `reset.yml` and then `cluster.yml`.
fn fixed(facts: &ClusterFacts<'_>, data: &Releases) -> Vec<Finding> {
    let Some(before) = &facts.before else {
        return Vec::new();
    };
    let pending: Vec<String> = facts
        .operations
        .iter()
        .filter(|o| o.pending && o.operation.action_type == ActionType::Playbook)
        .map(|o| playbook_name(&o.operation.action))
        .collect();
    let rebuilt = pending
        .iter()
        .position(|p| p == "reset")
        .is_some_and(|reset| pending[reset..].iter().any(|p| p == "cluster"));
    if rebuilt {
        return Vec::new();
    }
    let release = match super::rules::cluster_release(&facts.release) {
        super::rules::Resolved::Known(r) => data.get(r.value),
        super::rules::Resolved::Unknown(_) => None,
    };
    let base_release = facts
        .previous
        .as_ref()
        .and_then(|p| p.release)
        .and_then(|r| data.get(r))
        .or(release);
    let said = before.base.map_or(String::new(), |b| format!(" ({b})"));
    let mut out = Vec::new();
    for name in FIXED_SETTINGS {
        let old = effective(before.settings.get(name), name, base_release);
        let new = effective(facts.settings.get(name), name, release);
        let (Some(old), Some(new)) = (old, new) else {
            continue;
        };
        if old == new {
            continue;
        }
        let at = match facts.settings.get(name) {
            Some(Setting::Known(w)) => (w.path.clone(), w.line),
            _ => (facts.inventory.path.clone(), 0),
        };
        let (why, path, line) = FIXED_WHY
            .iter()
            .find(|(n, ..)| *n == name)
            .map_or(("", "", 0), |(_, why, path, line)| (*why, *path, *line));
        out.push(finding(
            Rule::SettingFixed,
            Severity::Error,
            (&at.0, at.1),
            format!(
                "{name}: {old}{said} → {new} on a running cluster: {why}; keep {name}: {old}, or rebuild the \
                 cluster in this commit: - {{id: reset, action: reset.yml, extraArgs: [-e, \
                 reset_confirmation=yes]}} then - {{id: reinstall, action: cluster.yml}} (every workload is lost)"
            ),
            cite(path, line),
        ));
    }
    out
}
