//! ansible's in-memory inventory: groups and hosts in the order they were added, group depth and
//! priority, `all`/`ungrouped`, and the host order of `groups[...]`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::Value;

use super::value::{Known, Var, VarMap};
use crate::Inventory;

/// The variable that sets a group's priority among groups of equal depth instead of being a variable.
pub(crate) const GROUP_PRIORITY: &str = "ansible_group_priority";

/// One group, as ansible's `Group` keeps it.
#[derive(Clone, Debug)]
pub(crate) struct Group {
    pub name: String,
    /// Longest distance from `all` (ansible raises it as children are added).
    pub depth: usize,
    /// `ansible_group_priority` (1 unless set in the inventory source).
    pub priority: i64,
    /// Variables the inventory source sets on the group.
    pub vars: VarMap,
    /// Hosts listed directly, in the order added.
    pub hosts: Vec<usize>,
    /// Child groups, in the order added.
    pub children: Vec<usize>,
    pub parents: Vec<usize>,
    /// 1-based line of the inventory source where the group is first defined; 0 when it is not (a group made
    /// at run time, `all`, or one only given variables).
    pub line: usize,
}

/// One host.
#[derive(Clone, Debug)]
pub(crate) struct Host {
    pub name: String,
    /// Variables the inventory source sets on the host (`ansible_port` from `host:port` included).
    pub vars: VarMap,
}

/// An inventory as ansible holds it after reading its source.
#[derive(Clone, Debug)]
pub(crate) struct Graph {
    pub groups: Vec<Group>,
    group_index: HashMap<String, usize>,
    pub hosts: Vec<Host>,
    host_index: HashMap<String, usize>,
}

/// Index of `all`.
pub(crate) const ALL: usize = 0;
/// Index of `ungrouped`.
pub(crate) const UNGROUPED: usize = 1;

impl Graph {
    /// An empty inventory: `all` with its child `ungrouped`, as ansible starts.
    pub fn new() -> Graph {
        let mut graph = Graph {
            groups: Vec::new(),
            group_index: HashMap::new(),
            hosts: Vec::new(),
            host_index: HashMap::new(),
        };
        graph.add_group("all");
        graph.add_group("ungrouped");
        // Cannot fail: a new group has no children.
        let _ = graph.add_child(ALL, UNGROUPED);
        graph
    }

    pub fn group(&self, name: &str) -> Option<usize> {
        self.group_index.get(name).copied()
    }

    pub fn host(&self, name: &str) -> Option<usize> {
        self.host_index.get(name).copied()
    }

    /// The group named `name`, added when new.
    pub fn add_group(&mut self, name: &str) -> usize {
        if let Some(g) = self.group(name) {
            return g;
        }
        self.groups.push(Group {
            name: name.to_string(),
            depth: 0,
            priority: 1,
            vars: VarMap::new(),
            hosts: Vec::new(),
            children: Vec::new(),
            parents: Vec::new(),
            line: 0,
        });
        self.group_index.insert(name.to_string(), self.groups.len() - 1);
        self.groups.len() - 1
    }

    /// Records that group `g` is defined on `line` of the inventory source, unless it was defined before.
    pub fn defined_at(&mut self, g: usize, line: usize) {
        if self.groups[g].line == 0 {
            self.groups[g].line = line;
        }
    }

    /// The host named `name`, added when new (with `port` as `ansible_port`, which only a host's first
    /// definition sets), and listed in `group`.
    pub fn add_host(
        &mut self,
        name: &str,
        group: Option<usize>,
        port: Option<(u64, Option<usize>)>,
    ) -> usize {
        let h = match self.host(name) {
            Some(h) => h,
            None => {
                let mut vars = VarMap::new();
                if let Some((port, line)) = port {
                    vars.insert(
                        "ansible_port".into(),
                        Var {
                            value: Known::Value(Value::from(port)),
                            line,
                        },
                    );
                }
                self.hosts.push(Host {
                    name: name.to_string(),
                    vars,
                });
                self.host_index.insert(name.to_string(), self.hosts.len() - 1);
                self.hosts.len() - 1
            }
        };
        if let Some(g) = group {
            self.add_member(g, h);
        }
        h
    }

    /// Lists host `h` directly in group `g` (once).
    pub fn add_member(&mut self, g: usize, h: usize) -> bool {
        let hosts = &mut self.groups[g].hosts;
        if hosts.contains(&h) {
            return false;
        }
        hosts.push(h);
        true
    }

    /// Makes `child` a child of `parent`, raising depths below it. Refuses a cycle with ansible's words.
    pub fn add_child(&mut self, parent: usize, child: usize) -> Result<bool, String> {
        if parent == child {
            return Err(format!(
                "group \"{}\" cannot be a child of itself",
                self.groups[child].name
            ));
        }
        if self.groups[parent].children.contains(&child) {
            return Ok(false);
        }
        if self.reaches(child, parent) {
            return Err(format!(
                "adding group \"{}\" as child to \"{}\" creates a recursive dependency loop",
                self.groups[child].name, self.groups[parent].name
            ));
        }
        self.groups[parent].children.push(child);
        if !self.groups[child].parents.contains(&parent) {
            self.groups[child].parents.push(parent);
        }
        let depth = self.groups[parent].depth + 1;
        self.raise_depth(child, depth);
        Ok(true)
    }

    fn raise_depth(&mut self, group: usize, depth: usize) {
        let mut todo = vec![(group, depth)];
        while let Some((g, depth)) = todo.pop() {
            if self.groups[g].depth >= depth && g != group {
                continue;
            }
            self.groups[g].depth = self.groups[g].depth.max(depth);
            let next = self.groups[g].depth + 1;
            todo.extend(self.groups[g].children.iter().map(|c| (*c, next)));
        }
    }

    /// True when `to` is below `from` (following children). Cheaper than the ancestors of `to` while an
    /// inventory is being built: new groups have few descendants.
    fn reaches(&self, from: usize, to: usize) -> bool {
        let mut seen = vec![false; self.groups.len()];
        let mut todo = vec![from];
        while let Some(g) = todo.pop() {
            if g == to {
                return true;
            }
            if !std::mem::replace(&mut seen[g], true) {
                todo.extend(self.groups[g].children.iter().copied());
            }
        }
        false
    }

    /// Every group above `g`.
    pub fn ancestors(&self, g: usize) -> BTreeSet<usize> {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<usize> = self.groups[g].parents.clone();
        while let Some(p) = todo.pop() {
            if seen.insert(p) {
                todo.extend(self.groups[p].parents.iter().copied());
            }
        }
        seen
    }

    /// Sets variable `name` of group `g`; `ansible_group_priority` sets its priority instead, and must
    /// then be a whole number.
    pub fn set_group_var(&mut self, g: usize, name: &str, var: Var) -> Result<(), String> {
        if name != GROUP_PRIORITY {
            self.groups[g].vars.insert(name.to_string(), var);
            return Ok(());
        }
        let priority = match &var.value {
            Known::Value(Value::Number(n)) => n.as_i64().or_else(|| n.as_f64().map(|f| f.trunc() as i64)),
            Known::Value(Value::Bool(b)) => Some(i64::from(*b)),
            Known::Value(Value::String(s)) => s.trim().replace('_', "").parse().ok(),
            _ => None,
        };
        match priority {
            Some(p) => {
                self.groups[g].priority = p;
                Ok(())
            }
            None => Err(format!(
                "{GROUP_PRIORITY} of group \"{}\" must be a whole number (ansible converts it with int())",
                self.groups[g].name
            )),
        }
    }

    /// What ansible does once a source is read: groups without a parent become children of `all`, hosts
    /// in no group go to `ungrouped`, and hosts in another group leave it.
    pub fn reconcile(&mut self) {
        for g in 1..self.groups.len() {
            if self.groups[g].parents.is_empty() {
                // Cannot fail: `g` has no parent, so `all` is not below it.
                let _ = self.add_child(ALL, g);
            }
        }
        for (h, groups) in self.host_groups().into_iter().enumerate() {
            let others = groups.iter().any(|g| *g != ALL && *g != UNGROUPED);
            if groups.contains(&UNGROUPED) {
                if others {
                    self.groups[UNGROUPED].hosts.retain(|x| *x != h);
                }
            } else if !others {
                self.add_member(UNGROUPED, h);
            }
        }
    }

    /// Every group each host belongs to, directly or through a child group (`all` included once the
    /// inventory is reconciled), by host index.
    pub fn host_groups(&self) -> Vec<BTreeSet<usize>> {
        let mut out = vec![BTreeSet::new(); self.hosts.len()];
        for (g, group) in self.groups.iter().enumerate() {
            if group.hosts.is_empty() {
                continue;
            }
            let ancestors = self.ancestors(g);
            for &h in &group.hosts {
                out[h].insert(g);
                out[h].extend(ancestors.iter().copied());
            }
        }
        out
    }

    /// The groups of host `h` but `all`, in the order ansible merges their variables: by depth, then
    /// priority, then name.
    pub fn sorted_groups(&self, groups: &BTreeSet<usize>) -> Vec<usize> {
        let mut sorted: Vec<usize> = groups.iter().copied().filter(|g| *g != ALL).collect();
        sorted.sort_by(|a, b| {
            let (a, b) = (&self.groups[*a], &self.groups[*b]);
            (a.depth, a.priority, &a.name).cmp(&(b.depth, b.priority, &b.name))
        });
        sorted
    }

    /// The hosts of group `g` in the order of ansible's `groups[name]`: its own hosts, then those of its
    /// children in order, then of groups further down. ansible walks groups two or more levels down in
    /// the order of a Python set of objects, which no run promises; kok uses the order the groups were
    /// found in.
    pub fn group_hosts(&self, g: usize) -> Vec<usize> {
        let mut ordered = vec![g];
        ordered.extend(self.groups[g].children.iter().copied());
        let mut seen: BTreeSet<usize> = ordered.iter().copied().collect();
        let mut level: Vec<usize> = ordered.clone();
        while !level.is_empty() {
            let mut next = Vec::new();
            for parent in level {
                for &child in &self.groups[parent].children {
                    if seen.insert(child) {
                        ordered.push(child);
                        next.push(child);
                    }
                }
            }
            level = next;
        }
        let mut hosts = Vec::new();
        let mut found = BTreeSet::new();
        for kid in ordered {
            for &h in &self.groups[kid].hosts {
                if found.insert(h) {
                    hosts.push(h);
                }
            }
        }
        hosts
    }

    /// The inventory as the rest of kok reads it (without addresses, which come from resolved variables).
    pub fn inventory(&self) -> Inventory {
        let name = |h: &usize| self.hosts[*h].name.clone();
        let mut members: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut children: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for group in &self.groups {
            if !group.hosts.is_empty() {
                members.insert(group.name.clone(), group.hosts.iter().map(name).collect());
            }
            if !group.children.is_empty() {
                let kids = group
                    .children
                    .iter()
                    .map(|c| self.groups[*c].name.clone())
                    .collect();
                children.insert(group.name.clone(), kids);
            }
        }
        Inventory {
            hosts: self.hosts.iter().map(|h| h.name.clone()).collect(),
            groups: self.groups.iter().map(|g| g.name.clone()).collect(),
            members,
            children,
            addresses: BTreeMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(v: Value) -> Var {
        Var {
            value: Known::Value(v),
            line: None,
        }
    }

    #[test]
    fn depth_is_the_longest_distance_from_all() {
        let mut g = Graph::new();
        let (a, b, c) = (g.add_group("a"), g.add_group("b"), g.add_group("c"));
        g.add_child(a, b).unwrap();
        g.add_child(b, c).unwrap();
        g.reconcile();
        g.add_child(a, c).unwrap();
        assert_eq!(
            (g.groups[a].depth, g.groups[b].depth, g.groups[c].depth),
            (1, 2, 3)
        );
        let d = g.add_group("d");
        g.add_child(d, a).unwrap();
        assert_eq!(g.groups[c].depth, 3, "depth never goes down");
        assert_eq!(g.groups[a].depth, 1);
    }

    #[test]
    fn cycles_are_refused() {
        let mut g = Graph::new();
        let (a, b) = (g.add_group("a"), g.add_group("b"));
        g.add_child(a, b).unwrap();
        assert!(g
            .add_child(b, a)
            .unwrap_err()
            .contains("recursive dependency loop"));
        assert!(g.add_child(a, a).is_err());
    }

    #[test]
    fn hosts_in_no_group_are_ungrouped_and_leave_it_once_grouped() {
        let mut g = Graph::new();
        let h1 = g.add_host("h1", Some(UNGROUPED), None);
        let h2 = g.add_host("h2", Some(ALL), None);
        let a = g.add_group("a");
        g.add_host("h1", Some(a), None);
        g.reconcile();
        assert_eq!(g.groups[UNGROUPED].hosts, [h2]);
        assert_eq!(g.groups[ALL].children, [UNGROUPED, a]);
        assert_eq!(g.host_groups()[h1].iter().copied().collect::<Vec<_>>(), [ALL, a]);
    }

    #[test]
    fn group_hosts_follow_own_hosts_then_children_then_grandchildren() {
        let mut g = Graph::new();
        let (p, c1, c2, gc) = (
            g.add_group("p"),
            g.add_group("c1"),
            g.add_group("c2"),
            g.add_group("gc"),
        );
        let deep = g.add_host("deep", Some(gc), None);
        let second = g.add_host("second", Some(c2), None);
        let first = g.add_host("first", Some(c1), None);
        let own = g.add_host("own", Some(p), None);
        g.add_child(p, c1).unwrap();
        g.add_child(p, c2).unwrap();
        g.add_child(c1, gc).unwrap();
        g.add_host("second", Some(gc), None);
        assert_eq!(g.group_hosts(p), [own, first, second, deep]);
    }

    #[test]
    fn groups_sort_by_depth_priority_then_name() {
        let mut g = Graph::new();
        let (b, a, z) = (g.add_group("b"), g.add_group("a"), g.add_group("z"));
        g.add_child(b, z).unwrap();
        g.set_group_var(b, GROUP_PRIORITY, var(Value::from("0"))).unwrap();
        g.reconcile();
        let groups = [ALL, a, b, z].into_iter().collect();
        assert_eq!(g.sorted_groups(&groups), [b, a, z]);
        assert!(g.groups[b].vars.is_empty(), "the priority is not a variable");
        assert!(g
            .set_group_var(a, GROUP_PRIORITY, var(Value::from("high")))
            .is_err());
    }
}
