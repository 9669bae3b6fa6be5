//! hosts.yml: the ansible inventory's shape (`all` → groups of hosts/children/vars), host names, group cycles.

use std::collections::BTreeMap;

use super::ansible::graph::Graph;
use super::ansible::value::Var;
use super::ansible::yaml11::{key_text, typed};
use super::diag::{get, parse_yaml, FileDiags};
use super::names::{hint, is_group_name, is_host_name};
use super::yaml::Node;
use super::Inventory;

/// What a group may hold.
const GROUP_KEYS: &[&str] = &["hosts", "children", "vars"];

/// Host variables that give a host's address, in the order kubespray prefers them.
const ADDRESS_VARS: [&str; 3] = ["ip", "access_ip", "ansible_host"];

/// Parses and validates hosts.yml. Returns the hosts and groups it defines (possibly partial when errors
/// were reported), or `None` when it could not be read as YAML at all.
/// The inventory `text` defines, when it is valid (a pinned hosts.yml always is: validation came first).
pub fn read_inventory(text: &str) -> Option<Inventory> {
    let mut out = Vec::new();
    let inventory = parse_inventory(text, &mut FileDiags::new(super::HOSTS_YML, None, &mut out))?;
    out.iter()
        .all(|d| d.severity != super::Severity::Error)
        .then_some(inventory)
}

pub(crate) fn parse_inventory(text: &str, diags: &mut FileDiags<'_>) -> Option<Inventory> {
    parse_inventory_graph(text, diags).map(|(inventory, _)| inventory)
}

/// [`parse_inventory`], also giving the inventory as ansible's YAML plugin builds it: groups and hosts in
/// file order, with their variables typed as ansible types them.
pub(crate) fn parse_inventory_graph(text: &str, diags: &mut FileDiags<'_>) -> Option<(Inventory, Graph)> {
    let root = parse_yaml(text, diags).ok()?;
    let mut walk = Walk::default();
    let Some(root) = root else {
        diags.error_at(
            1,
            1,
            "hosts.yml is empty: write an inventory starting with `all:` and at least one host",
        );
        return Some(walk.finish());
    };
    let Some(top) = root.as_map() else {
        diags.error(
            &root,
            format!(
                "hosts.yml must be a mapping starting with `all:`, not {}",
                root.type_name()
            ),
        );
        return Some(walk.finish());
    };
    let mut all = None;
    for (key, value) in top {
        match key.as_str() {
            Some("all") => all = Some((key, value)),
            _ => {
                let name = key.scalar_text().unwrap_or_default();
                let msg = if name.eq_ignore_ascii_case("all") || hint(&name, &["all"]).contains("all") {
                    format!("unknown top-level key \"{name}\": did you mean \"all\"?")
                } else {
                    format!(
                        "unknown top-level key \"{name}\": hosts.yml holds only `all:`; \
                         move group \"{name}\" under all.children"
                    )
                };
                diags.error(key, msg);
            }
        }
    }
    let Some((all_key, all_value)) = all else {
        if top.is_empty() {
            diags.error(
                &root,
                "hosts.yml has no `all:` group: put every host and group under `all:`",
            );
        }
        return Some(walk.finish());
    };
    let errors_before = diags.error_count();
    walk.inventory.groups.insert("all".to_string());
    walk.group("all", all_value, diags);
    walk.report_cycles(diags);
    // Without other errors only: a malformed host list already explains why no host was found.
    if walk.inventory.hosts.is_empty() && diags.error_count() == errors_before {
        diags.error(
            all_key,
            "the inventory defines no host: add at least one under all.hosts or under a group's hosts",
        );
    }
    Some(walk.finish())
}

/// One parent → child edge of the group graph, with the position of the child's key.
struct Edge {
    child: String,
    line: usize,
    col: usize,
}

struct Walk {
    inventory: Inventory,
    edges: BTreeMap<String, Vec<Edge>>,
    /// The inventory as ansible builds it, in file order.
    graph: Graph,
}

impl Default for Walk {
    fn default() -> Self {
        Walk {
            inventory: Inventory::default(),
            edges: BTreeMap::new(),
            graph: Graph::new(),
        }
    }
}

impl Walk {
    fn finish(self) -> (Inventory, Graph) {
        let mut graph = self.graph;
        graph.reconcile();
        (self.inventory, graph)
    }

    fn group(&mut self, name: &str, node: &Node, diags: &mut FileDiags<'_>) {
        let g = self.graph.add_group(name);
        if node.is_null() {
            return;
        }
        let Some(entries) = node.as_map() else {
            diags.error(
                node,
                format!(
                    "group \"{name}\" must be a mapping of hosts, children and vars, not {}",
                    node.type_name()
                ),
            );
            return;
        };
        for (key, value) in entries {
            match key.as_str() {
                Some("hosts") => self.hosts(name, value, diags),
                Some("children") => self.children(name, value, diags),
                Some("vars") => {
                    if !value.is_null() && value.as_map().is_none() {
                        diags.error(
                            value,
                            format!(
                                "vars of group \"{name}\" must be a mapping, not {}",
                                value.type_name()
                            ),
                        );
                    }
                    for (var, v) in value.as_map().unwrap_or_default() {
                        let set = Var {
                            value: typed(v),
                            line: Some(var.line),
                        };
                        if let Err(message) = self.graph.set_group_var(g, &key_text(var), set) {
                            diags.error(v, message);
                        }
                    }
                }
                _ => {
                    let given = key.scalar_text().unwrap_or_default();
                    let mut msg = format!(
                        "group \"{name}\" may only hold hosts, children and vars, not \"{given}\"{}",
                        hint(&given, GROUP_KEYS)
                    );
                    if !msg.ends_with('?') {
                        msg.push_str(&format!(
                            "; put a host under {name}.hosts, a group under {name}.children, a variable under {name}.vars"
                        ));
                    }
                    diags.error(key, msg);
                }
            }
        }
    }

    fn hosts(&mut self, group: &str, node: &Node, diags: &mut FileDiags<'_>) {
        if node.is_null() {
            return;
        }
        let Some(entries) = node.as_map() else {
            diags.error(
                node,
                format!(
                    "hosts of group \"{group}\" must be a mapping with one host name per key (`node1:`), not {}",
                    node.type_name()
                ),
            );
            return;
        };
        for (key, value) in entries {
            let host = key.scalar_text().unwrap_or_default();
            if !is_host_name(&host) {
                let msg = if host.contains('[') && host.contains(':') {
                    format!(
                        "host \"{host}\" is a host range, which kok does not expand: list each host by name"
                    )
                } else {
                    format!("host \"{host}\" is not a valid host name: use letters, digits, '-', '.', '_'")
                };
                diags.error(key, msg);
                continue;
            }
            if !value.is_null() && value.as_map().is_none() {
                diags.error(
                    value,
                    format!(
                        "variables of host \"{host}\" must be a mapping, not {}",
                        value.type_name()
                    ),
                );
            }
            self.note_addresses(&host, value);
            let g = self.graph.add_group(group);
            let h = self.graph.add_host(&host, Some(g), None);
            for (var, v) in value.as_map().unwrap_or_default() {
                let set = Var {
                    value: typed(v),
                    line: Some(var.line),
                };
                self.graph.hosts[h].vars.insert(key_text(var), set);
            }
            self.inventory
                .members
                .entry(group.to_string())
                .or_default()
                .insert(host.clone());
            self.inventory.hosts.insert(host);
        }
    }

    /// Remembers the addresses the variables `vars` of `host` give it (see [`Inventory::addresses`]).
    fn note_addresses(&mut self, host: &str, vars: &Node) {
        let Some(vars) = vars.as_map() else {
            return;
        };
        for key in ADDRESS_VARS {
            let Some(address) = get(vars, key).and_then(Node::scalar_text) else {
                continue;
            };
            let known = self.inventory.addresses.entry(host.to_string()).or_default();
            if !address.is_empty() && !known.contains(&address) {
                known.push(address);
            }
        }
    }

    fn children(&mut self, parent: &str, node: &Node, diags: &mut FileDiags<'_>) {
        if node.is_null() {
            return;
        }
        let Some(entries) = node.as_map() else {
            diags.error(
                node,
                format!(
                    "children of group \"{parent}\" must be a mapping with one group name per key, not {}",
                    node.type_name()
                ),
            );
            return;
        };
        for (key, value) in entries {
            let child = key.scalar_text().unwrap_or_default();
            if !is_group_name(&child) {
                diags.error(
                    key,
                    format!(
                        "group \"{child}\" is not a valid group name: use letters, digits, '-', '.', '_'"
                    ),
                );
                continue;
            }
            self.inventory.groups.insert(child.clone());
            self.inventory
                .children
                .entry(parent.to_string())
                .or_default()
                .insert(child.clone());
            self.edges.entry(parent.to_string()).or_default().push(Edge {
                child: child.clone(),
                line: key.line,
                col: key.col,
            });
            self.group(&child, value, diags);
            let (p, c) = (self.graph.add_group(parent), self.graph.add_group(&child));
            self.graph.defined_at(c, key.line);
            // A cycle is reported once, by `report_cycles`.
            let _ = self.graph.add_child(p, c);
        }
    }

    /// Reports every group cycle once, at the entry that closes it. Iterative depth-first search: a long
    /// chain of groups must not exhaust the stack.
    fn report_cycles(&self, diags: &mut FileDiags<'_>) {
        use std::collections::{BTreeSet, HashMap};
        let mut done: BTreeSet<&str> = BTreeSet::new();
        let mut reported: BTreeSet<Vec<&str>> = BTreeSet::new();
        for start in self.edges.keys() {
            if done.contains(start.as_str()) {
                continue;
            }
            // The current path: (group, index of its next edge to follow); `on_path` maps group → position.
            let mut path: Vec<(&str, usize)> = vec![(start.as_str(), 0)];
            let mut on_path: HashMap<&str, usize> = HashMap::from([(start.as_str(), 0)]);
            while let Some(&(group, next)) = path.last() {
                let edges = self.edges.get(group).map(Vec::as_slice).unwrap_or_default();
                let Some(edge) = edges.get(next) else {
                    path.pop();
                    on_path.remove(group);
                    done.insert(group);
                    continue;
                };
                if let Some(top) = path.last_mut() {
                    top.1 += 1;
                }
                let child = edge.child.as_str();
                if let Some(&pos) = on_path.get(child) {
                    let members: Vec<&str> = path[pos..].iter().map(|(g, _)| *g).collect();
                    let mut key = members.clone();
                    key.sort_unstable();
                    if reported.insert(key) {
                        let mut shown: Vec<&str> = members.iter().chain([&child]).copied().collect();
                        if shown.len() > 8 {
                            // Keep the message readable: the first groups, then the closing ones.
                            shown.splice(4..shown.len() - 2, ["..."]);
                        }
                        let cycle = shown.join(" -> ");
                        diags.error_at(
                            edge.line,
                            edge.col,
                            format!(
                                "group cycle {cycle}: a group cannot contain itself; remove \"{child}\" from the \
                                 children of \"{group}\""
                            ),
                        );
                    }
                } else if !done.contains(child) {
                    on_path.insert(child, path.len());
                    path.push((child, 0));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Diagnostic;

    fn check(text: &str) -> (Option<Inventory>, Vec<Diagnostic>) {
        let mut out = Vec::new();
        let inv = parse_inventory(text, &mut FileDiags::new("hosts.yml", None, &mut out));
        (inv, out)
    }

    fn errors(text: &str) -> Vec<String> {
        check(text).1.iter().map(Diagnostic::at).collect()
    }

    #[test]
    fn a_kubespray_inventory_yields_its_hosts_and_groups() {
        let text = "all:\n  hosts:\n    node1:\n      ansible_host: 10.0.0.1\n    node2:\n  children:\n    \
                    kube_control_plane:\n      hosts:\n        node1:\n    kube_node:\n      hosts:\n        node2:\n    \
                    k8s_cluster:\n      children:\n        kube_control_plane:\n        kube_node:\n";
        let (inv, diags) = check(text);
        assert_eq!(diags, vec![]);
        let inv = inv.unwrap();
        assert_eq!(inv.hosts.iter().collect::<Vec<_>>(), ["node1", "node2"]);
        assert_eq!(
            inv.groups.iter().collect::<Vec<_>>(),
            ["all", "k8s_cluster", "kube_control_plane", "kube_node"]
        );
    }

    #[test]
    fn groups_resolve_their_children_and_hosts_keep_their_addresses() {
        let text = "all:\n  hosts:\n    node1: {ansible_host: 10.0.0.1, ip: 192.168.0.1}\n    node2:\n      \
                    access_ip: 10.0.0.2\n    node3:\n  children:\n    kube_control_plane:\n      hosts:\n        \
                    node1:\n    kube_node:\n      children:\n        workers:\n          hosts:\n            \
                    node2: {ip: 192.168.0.2}\n    etcd:\n      hosts:\n        node3:\n";
        let inv = read_inventory(text).unwrap();
        let workers: Vec<_> = inv.hosts_of("kube_node").into_iter().collect();
        assert_eq!(workers, ["node2"]);
        assert_eq!(inv.hosts_of("all").len(), 3);
        assert_eq!(inv.addresses["node1"], ["192.168.0.1", "10.0.0.1"]);
        assert_eq!(inv.addresses["node2"], ["10.0.0.2", "192.168.0.2"]);
        assert!(!inv.addresses.contains_key("node3"));
        assert_eq!(read_inventory("all:\n  hosts:\n    node 7:\n"), None);
    }

    #[test]
    fn the_inventory_must_start_with_all() {
        assert_eq!(errors("nodes:\n  hosts:\n    a:\n")[0], "1:1: unknown top-level key \"nodes\": hosts.yml holds only `all:`; move group \"nodes\" under all.children");
        assert!(errors("{}\n")[0].contains("has no `all:` group"));
        assert_eq!(
            errors("al:\n  hosts:\n    a:\n")[0],
            "1:1: unknown top-level key \"al\": did you mean \"all\"?"
        );
        assert!(errors("- a\n")[0].contains("must be a mapping starting with `all:`, not a list"));
    }

    #[test]
    fn groups_hold_only_hosts_children_and_vars() {
        let errs = errors("all:\n  hosts:\n    a:\n  host:\n    b:\n");
        assert_eq!(errs, ["4:3: group \"all\" may only hold hosts, children and vars, not \"host\"; did you mean \"hosts\"?"]);
    }

    #[test]
    fn host_names_with_spaces_are_refused() {
        let errs = errors("all:\n  hosts:\n    a:\n    node 7:\n");
        assert_eq!(
            errs,
            ["4:5: host \"node 7\" is not a valid host name: use letters, digits, '-', '.', '_'"]
        );
    }

    #[test]
    fn host_ranges_are_refused_with_a_hint() {
        let errs = errors("all:\n  hosts:\n    node[1:3]:\n");
        assert_eq!(
            errs,
            ["3:5: host \"node[1:3]\" is a host range, which kok does not expand: list each host by name"]
        );
    }

    #[test]
    fn group_cycles_are_refused_and_named() {
        let errs = errors("all:\n  hosts:\n    a:\n  children:\n    x:\n      children:\n        y:\n          children:\n            x:\n");
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].starts_with("9:13: group cycle x -> y -> x"),
            "{}",
            errs[0]
        );
    }

    #[test]
    fn an_inventory_without_hosts_is_refused() {
        let errs = errors("all:\n  children:\n    g:\n");
        assert_eq!(errs, ["1:1: the inventory defines no host: add at least one under all.hosts or under a group's hosts"]);
    }

    #[test]
    fn hosts_as_a_list_are_refused_with_the_expected_shape() {
        let errs = errors("all:\n  hosts:\n    - a\n");
        assert!(
            errs[0].starts_with("3:5: hosts of group \"all\" must be a mapping"),
            "{errs:?}"
        );
    }

    #[test]
    fn a_long_chain_of_groups_does_not_exhaust_the_stack() {
        let mut text = String::from("all:\n  hosts:\n    a:\n  children:\n");
        for i in 0..20_000 {
            text.push_str(&format!("    g{i}:\n      children:\n        g{}:\n", i + 1));
        }
        text.push_str("    g20000:\n      children:\n        g0:\n");
        let errs = std::thread::spawn(move || errors(&text)).join().unwrap();
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].contains("group cycle g0 -> g1 -> g2"),
            "{}",
            &errs[0][..80]
        );
    }
}
