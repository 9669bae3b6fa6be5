//! The groups kubespray's `playbooks/boilerplate.yml` makes at run time with `group_by`: `k8s_cluster`
//! from its member groups, the current names from legacy ones (`kube-master`...), and `_all` for the rest.

use super::graph::{Graph, ALL, UNGROUPED};

/// boilerplate.yml's `group_mappings` (kubespray v2.27.0), in its order: a host in any of the listed groups
/// joins the first; a host in none joins `_all`.
pub const GROUP_MAPPINGS: [(&str, &[&str]); 5] = [
    ("kube_control_plane", &["kube-master"]),
    ("kube_node", &["kube-node"]),
    ("calico_rr", &["calico-rr"]),
    ("no_floating", &["no-floating"]),
    ("k8s_cluster", &["kube_node", "kube_control_plane", "calico_rr"]),
];

/// The group a host joins when it matches no mapping.
pub const UNMATCHED_GROUP: &str = "_all";

/// Every group the boilerplate may add.
pub(crate) fn added_groups() -> impl Iterator<Item = &'static str> {
    GROUP_MAPPINGS
        .iter()
        .map(|(name, _)| *name)
        .chain([UNMATCHED_GROUP])
}

/// `graph` after the boilerplate's `group_by` task ran on every host. Each host's `group_names` is taken
/// before any of its loop items is applied (ansible templates the whole loop first), so a host only in
/// `kube-master` joins `kube_control_plane` but not `k8s_cluster` in the same run. A new group becomes a
/// child of `all`; an existing one becomes one too (keeping its depth if deeper). ansible adds hosts in the
/// order their results come back; kok assumes play order (the order of `groups['all']`).
pub(crate) fn add_boilerplate_groups(graph: &Graph) -> Graph {
    let mut graph = graph.clone();
    let play_hosts = graph.group_hosts(ALL);
    let memberships = graph.host_groups();
    for h in play_hosts {
        let names: Vec<&str> = memberships[h]
            .iter()
            .filter(|g| **g != ALL)
            .map(|g| graph.groups[*g].name.as_str())
            .collect();
        let targets: Vec<&str> = GROUP_MAPPINGS
            .iter()
            .map(|(key, members)| {
                if names.iter().any(|n| members.contains(n)) {
                    *key
                } else {
                    UNMATCHED_GROUP
                }
            })
            .collect();
        for target in targets {
            add_dynamic_group(&mut graph, h, target);
        }
    }
    graph
}

/// ansible's `add_dynamic_group` with the default parent `all`. ansible then reconciles the whole
/// inventory; the only thing that can change is `h` leaving `ungrouped`, done here directly.
fn add_dynamic_group(graph: &mut Graph, h: usize, name: &str) {
    let g = graph.add_group(name);
    // Cannot fail: `all` is nobody's child.
    let _ = graph.add_child(ALL, g);
    if !graph.group_hosts(g).contains(&h) && graph.add_member(g, h) && g != UNGROUPED {
        graph.groups[UNGROUPED].hosts.retain(|x| *x != h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(g: &Graph, group: &str) -> Vec<String> {
        let group = g.group(group).unwrap();
        g.group_hosts(group)
            .into_iter()
            .map(|h| g.hosts[h].name.clone())
            .collect()
    }

    #[test]
    fn k8s_cluster_gathers_control_plane_nodes_and_workers() {
        let mut g = Graph::new();
        let (cp, etcd, node) = (
            g.add_group("kube_control_plane"),
            g.add_group("etcd"),
            g.add_group("kube_node"),
        );
        g.add_host("n1", Some(cp), None);
        g.add_host("n2", Some(node), None);
        g.add_host("e1", Some(etcd), None);
        g.add_child(etcd, cp).unwrap();
        g.reconcile();
        let after = add_boilerplate_groups(&g);
        assert_eq!(
            hosts(&after, "k8s_cluster"),
            ["n2", "n1"],
            "play order is groups['all']"
        );
        // A host in kube_node matches no legacy name of the kube_node mapping: that item sends it to `_all`.
        assert_eq!(hosts(&after, "_all"), ["e1", "n2", "n1"]);
        let k8s = after.group("k8s_cluster").unwrap();
        assert_eq!(after.groups[k8s].depth, 1);
        assert_eq!(after.groups[after.group("kube_control_plane").unwrap()].depth, 2);
    }

    #[test]
    fn legacy_names_map_but_k8s_cluster_sees_only_the_names_before_the_task() {
        let mut g = Graph::new();
        let legacy = g.add_group("kube-master");
        g.add_host("m1", Some(legacy), None);
        g.reconcile();
        let after = add_boilerplate_groups(&g);
        assert_eq!(hosts(&after, "kube_control_plane"), ["m1"]);
        assert!(after.groups[ALL]
            .children
            .contains(&after.group("kube_control_plane").unwrap()));
        assert_eq!(
            after.group("k8s_cluster"),
            None,
            "no host matched k8s_cluster's members"
        );
    }

    #[test]
    fn an_ungrouped_host_leaves_ungrouped_once_it_joins_a_group() {
        let mut g = Graph::new();
        g.add_host("lone", Some(UNGROUPED), None);
        g.reconcile();
        let after = add_boilerplate_groups(&g);
        assert!(after.groups[UNGROUPED].hosts.is_empty());
        assert_eq!(hosts(&after, "_all"), ["lone"]);
    }
}
