//! Every host's effective variables, merged as ansible's `VariableManager` merges an inventory's sources
//! (`hash_behaviour=replace`, default `precedence`), lowest first:
//!
//! 1. the inventory file's variables of `all`;
//! 2. its variables of each of the host's groups, sorted by depth, `ansible_group_priority`, then name;
//! 3. `group_vars/all`;
//! 4. `group_vars/<group>` for the same sorted groups;
//! 5. the inventory file's variables of the host;
//! 6. `host_vars/<host>`.
//!
//! Within a `group_vars/<name>/` directory, later files (sorted by path) win.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::Value;

use super::graph::{Graph, ALL};
use super::kubespray::add_boilerplate_groups;
use super::value::{Known, Origin, Setting, Unknown, VarMap};
use super::vars::VarsFile;
use crate::Inventory;

/// The variables that give a host's address, in the order kubespray prefers them.
const ADDRESS_VARS: [&str; 3] = ["ip", "access_ip", "ansible_host"];

/// One vars file ansible reads for a group or host.
#[derive(Debug)]
pub(crate) struct Layer {
    /// Path relative to the cluster directory.
    pub path: String,
    pub file: VarsFile,
}

/// The vars files of a cluster directory, by group and by host, each list in ansible's reading order.
#[derive(Debug, Default)]
pub(crate) struct VarsFiles {
    pub groups: HashMap<String, Vec<Layer>>,
    pub hosts: HashMap<String, Vec<Layer>>,
}

/// An inventory directory as ansible reads it: its hosts and groups, and every host's variables.
///
/// Made by [`super::read_inventory_dir`]. [`AnsibleInventory::with_kubespray_groups`] gives the view after
/// kubespray's boilerplate play (with `k8s_cluster`), which is what kubespray's roles see.
#[derive(Clone, Debug)]
pub struct AnsibleInventory {
    graph: Graph,
    inventory: Inventory,
    inventory_path: String,
    files: Arc<VarsFiles>,
    /// Each host's groups but `all`, sorted as ansible merges their variables.
    sorted_groups: Vec<Vec<usize>>,
}

/// One source of a host's variables, lowest precedence first.
enum Source<'a> {
    Vars { vars: &'a VarMap, path: &'a str },
    Vault { path: &'a str },
}

/// Where a variable of a host is set, borrowed from the inventory (see [`AnsibleInventory::find_all`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Found<'s> {
    /// Set by a vars file or the inventory: the value, the file and the line.
    Var {
        /// The value.
        value: &'s Known,
        /// The file, relative to the cluster directory.
        path: &'s str,
        /// The line, when known.
        line: Option<usize>,
    },
    /// A whole-file vault among the host's sources may set it.
    Vault {
        /// The vaulted file.
        path: &'s str,
    },
}

impl Found<'_> {
    /// The setting, copied out.
    pub fn setting(&self) -> Setting {
        match *self {
            Found::Var { value, path, line } => Setting {
                value: value.clone(),
                origin: Origin {
                    path: path.to_string(),
                    line,
                },
            },
            Found::Vault { path } => vault_setting(path),
        }
    }
}

/// What the hosts of a group have for one variable.
#[derive(Clone, Debug, PartialEq)]
pub enum GroupVar {
    /// The group has no host (or does not exist).
    NoHosts,
    /// Every host has the same value: it and where the first host got it; `None` when no host sets it.
    Same(Option<Setting>),
    /// The hosts disagree: each distinct value (`None`: not set) with its hosts, in the group's host order.
    Differ(Vec<(Option<Known>, Vec<String>)>),
}

impl AnsibleInventory {
    pub(crate) fn new(graph: Graph, inventory_path: String, files: Arc<VarsFiles>) -> AnsibleInventory {
        let sorted_groups = graph
            .host_groups()
            .iter()
            .map(|groups| graph.sorted_groups(groups))
            .collect();
        let mut resolved = AnsibleInventory {
            inventory: graph.inventory(),
            graph,
            inventory_path,
            files,
            sorted_groups,
        };
        let addresses = resolved
            .graph
            .hosts
            .iter()
            .filter_map(|host| {
                let found = resolved.addresses_of(&host.name);
                (!found.is_empty()).then(|| (host.name.clone(), found))
            })
            .collect();
        resolved.inventory.addresses = addresses;
        resolved
    }

    /// The hosts, groups, members, children and addresses, as the rest of kok reads an inventory
    /// (`ungrouped` included, as ansible has it).
    pub fn inventory(&self) -> &Inventory {
        &self.inventory
    }

    /// The inventory file's path relative to the cluster directory (`inventory.ini`, `hosts.yml`).
    pub fn inventory_path(&self) -> &str {
        &self.inventory_path
    }

    /// The view of the inventory after kubespray's `playbooks/boilerplate.yml` added its groups
    /// (`k8s_cluster`, current names for legacy ones, `_all`): what kubespray's roles see, and so where
    /// `group_vars/k8s_cluster/` applies. See [`super::kubespray::GROUP_MAPPINGS`].
    pub fn with_kubespray_groups(&self) -> AnsibleInventory {
        AnsibleInventory::new(
            add_boilerplate_groups(&self.graph),
            self.inventory_path.clone(),
            Arc::clone(&self.files),
        )
    }

    /// The inventory as `ansible-inventory --list` prints it: each group with its own hosts and child
    /// groups in ansible's order (a group with neither is left out, `all` lists no hosts), and under
    /// `_meta.hostvars` every host's variables in ansible's precedence, templates as written. A value kok
    /// cannot know (vaulted, or set by a vaulted file) is left out, with the host and name in the second
    /// part, so that nothing printed is a guess.
    pub fn list(&self) -> (serde_json::Value, Vec<(String, String)>) {
        use serde_json::Map;
        let names = |items: Vec<&str>| Value::Array(items.into_iter().map(Value::from).collect());
        let mut list = Map::new();
        for group in self.groups() {
            let hosts = match group {
                "all" => Vec::new(),
                _ => self.direct_hosts(group).unwrap_or_default(),
            };
            let children = self.children(group).unwrap_or_default();
            let mut body = Map::new();
            if !children.is_empty() {
                body.insert("children".into(), names(children));
            }
            if !hosts.is_empty() {
                body.insert("hosts".into(), names(hosts));
            }
            if !body.is_empty() {
                list.insert(group.to_string(), Value::Object(body));
            }
        }
        let mut hostvars = Map::new();
        let mut unknown = Vec::new();
        for host in self.hosts() {
            let mut vars = Map::new();
            for (name, setting) in self.settings(host) {
                match setting.value {
                    Known::Value(value) | Known::Unknown(Unknown::Templated(value)) => {
                        vars.insert(name, value);
                    }
                    Known::Unknown(_) => unknown.push((host.to_string(), name)),
                }
            }
            if !vars.is_empty() {
                hostvars.insert(host.to_string(), Value::Object(vars));
            }
        }
        let mut meta = Map::new();
        meta.insert("hostvars".into(), Value::Object(hostvars));
        list.insert("_meta".into(), Value::Object(meta));
        (Value::Object(list), unknown)
    }

    /// Every host, in the order of ansible's `groups['all']`.
    pub fn hosts(&self) -> Vec<&str> {
        self.names(self.graph.group_hosts(ALL))
    }

    /// Every group, in the order ansible added them (`all` and `ungrouped` first).
    pub fn groups(&self) -> Vec<&str> {
        self.graph.groups.iter().map(|g| g.name.as_str()).collect()
    }

    /// The hosts of `group` in the order of ansible's `groups[group]` (so `[0]` is ansible's first), child
    /// groups included; `None` when there is no such group. Below the group's children, ansible's order
    /// follows a Python set and is not promised: kok uses the order the groups were found in.
    pub fn group_hosts(&self, group: &str) -> Option<Vec<&str>> {
        let g = self.graph.group(group)?;
        Some(self.names(self.graph.group_hosts(g)))
    }

    /// The 1-based line of the inventory file where `group` is first defined; 0 when it is not (a group
    /// made at run time, `all`, one only given variables) or there is no such group.
    pub fn group_line(&self, group: &str) -> usize {
        self.graph.group(group).map_or(0, |g| self.graph.groups[g].line)
    }

    /// The hosts listed directly in `group`, in the order they were added.
    pub fn direct_hosts(&self, group: &str) -> Option<Vec<&str>> {
        let g = self.graph.group(group)?;
        Some(self.names(self.graph.groups[g].hosts.clone()))
    }

    /// The child groups of `group`, in the order they were added.
    pub fn children(&self, group: &str) -> Option<Vec<&str>> {
        let g = self.graph.group(group)?;
        Some(
            self.graph.groups[g]
                .children
                .iter()
                .map(|c| self.graph.groups[*c].name.as_str())
                .collect(),
        )
    }

    /// ansible's `group_names` of `host`: its groups but `all`, sorted by name.
    pub fn group_names(&self, host: &str) -> Option<Vec<&str>> {
        let h = self.graph.host(host)?;
        let mut names: Vec<&str> = self.sorted_groups[h]
            .iter()
            .map(|g| self.graph.groups[*g].name.as_str())
            .collect();
        names.sort_unstable();
        Some(names)
    }

    /// Every variable the inventory and vars files set for `host`, with where the winning value was set;
    /// empty for an unknown host. ansible's magic variables (`inventory_hostname`, `groups`...) are not
    /// included.
    pub fn settings(&self, host: &str) -> BTreeMap<String, Setting> {
        let mut out: BTreeMap<String, Setting> = BTreeMap::new();
        for source in self.sources(host) {
            match source {
                Source::Vars { vars, path } => {
                    for (name, var) in vars {
                        out.insert(
                            name.clone(),
                            Setting {
                                value: var.value.clone(),
                                origin: Origin {
                                    path: path.to_string(),
                                    line: var.line,
                                },
                            },
                        );
                    }
                }
                Source::Vault { path } => {
                    for setting in out.values_mut() {
                        *setting = vault_setting(path);
                    }
                }
            }
        }
        out
    }

    /// [`AnsibleInventory::settings`] without the origins.
    pub fn host_vars(&self, host: &str) -> BTreeMap<String, Known> {
        self.settings(host)
            .into_iter()
            .map(|(name, setting)| (name, setting.value))
            .collect()
    }

    /// Variable `name` of `host` and where it was set; `None` when nothing sets it (or no such host). A
    /// whole-file vault among the host's sources makes an unset variable unknown too: it may set it.
    pub fn setting(&self, host: &str, name: &str) -> Option<Setting> {
        let sources = self.sources(host);
        for source in sources.iter().rev() {
            match source {
                Source::Vault { path } => return Some(vault_setting(path)),
                Source::Vars { vars, path } => {
                    if let Some(var) = vars.get(name) {
                        return Some(Setting {
                            value: var.value.clone(),
                            origin: Origin {
                                path: path.to_string(),
                                line: var.line,
                            },
                        });
                    }
                }
            }
        }
        None
    }

    /// Where each of `names` is set for `host` (see [`AnsibleInventory::setting`]), in their order, its
    /// sources walked once and nothing copied: [`Found::setting`] makes the [`Setting`].
    pub fn find_all<'s>(&'s self, host: &str, names: &[&str]) -> Vec<Option<Found<'s>>> {
        let sources = self.sources(host);
        names
            .iter()
            .map(|name| {
                sources.iter().rev().find_map(|source| match source {
                    Source::Vault { path } => Some(Found::Vault { path }),
                    Source::Vars { vars, path } => vars.get(*name).map(|var| Found::Var {
                        value: &var.value,
                        path,
                        line: var.line,
                    }),
                })
            })
            .collect()
    }

    /// [`AnsibleInventory::find_all`] for each of `hosts`, in their order. Hosts in the same groups whose own
    /// variables (in the inventory and `host_vars/`) set none of `names` get them from the same sources: one
    /// walk serves them all.
    pub fn find_for_hosts<'s>(&'s self, hosts: &[String], names: &[&str]) -> Vec<Vec<Option<Found<'s>>>> {
        let mut shared: BTreeMap<&[usize], Vec<Option<Found<'s>>>> = BTreeMap::new();
        hosts
            .iter()
            .map(|host| {
                let Some(h) = self.graph.host(host) else {
                    return vec![None; names.len()];
                };
                let sets_own = |vars: &VarMap| names.iter().any(|n| vars.contains_key(*n));
                let own = sets_own(&self.graph.hosts[h].vars)
                    || self
                        .files
                        .hosts
                        .get(host)
                        .into_iter()
                        .flatten()
                        .any(|layer| match &layer.file {
                            VarsFile::Vars(vars) => sets_own(vars),
                            VarsFile::Vault => true,
                        });
                if own {
                    return self.find_all(host, names);
                }
                shared
                    .entry(&self.sorted_groups[h])
                    .or_insert_with(|| self.find_all(host, names))
                    .clone()
            })
            .collect()
    }

    /// Variable `name` of `host`: see [`AnsibleInventory::setting`].
    pub fn var(&self, host: &str, name: &str) -> Option<Known> {
        self.setting(host, name).map(|s| s.value)
    }

    /// Variable `name` across the hosts of `group` (e.g. `kube_version` over `k8s_cluster` in the
    /// [`AnsibleInventory::with_kubespray_groups`] view): one value when they agree, else who has what.
    pub fn group_var(&self, group: &str, name: &str) -> GroupVar {
        let hosts = self.group_hosts(group).unwrap_or_default();
        let Some(first) = hosts.first() else {
            return GroupVar::NoHosts;
        };
        let first_setting = self.setting(first, name);
        let mut values: Vec<(Option<Known>, Vec<String>)> = Vec::new();
        for host in &hosts {
            let value = self.var(host, name);
            match values.iter_mut().find(|(v, _)| *v == value) {
                Some((_, hosts)) => hosts.push(host.to_string()),
                None => values.push((value, vec![host.to_string()])),
            }
        }
        if values.len() == 1 {
            GroupVar::Same(first_setting)
        } else {
            GroupVar::Differ(values)
        }
    }

    fn names(&self, hosts: Vec<usize>) -> Vec<&str> {
        hosts
            .into_iter()
            .map(|h| self.graph.hosts[h].name.as_str())
            .collect()
    }

    /// The sources of `host`'s variables, lowest precedence first (see the module documentation).
    fn sources(&self, host: &str) -> Vec<Source<'_>> {
        let Some(h) = self.graph.host(host) else {
            return Vec::new();
        };
        let path = self.inventory_path.as_str();
        let groups = &self.sorted_groups[h];
        let mut out = Vec::with_capacity(4 + 2 * groups.len());
        let inline = |vars| Source::Vars { vars, path };
        out.push(inline(&self.graph.groups[ALL].vars));
        out.extend(groups.iter().map(|g| inline(&self.graph.groups[*g].vars)));
        out.extend(file_sources(self.files.groups.get("all")));
        for g in groups {
            out.extend(file_sources(self.files.groups.get(&self.graph.groups[*g].name)));
        }
        out.push(inline(&self.graph.hosts[h].vars));
        out.extend(file_sources(self.files.hosts.get(host)));
        out
    }

    /// The addresses `host`'s variables give it, from [`ADDRESS_VARS`], known ones only, without repeats.
    fn addresses_of(&self, host: &str) -> Vec<String> {
        let mut found: Vec<String> = Vec::new();
        for name in ADDRESS_VARS {
            let address = match self.var(host, name) {
                Some(Known::Value(Value::String(s))) => s,
                Some(Known::Value(Value::Number(n))) => n.to_string(),
                _ => continue,
            };
            if !address.is_empty() && !found.contains(&address) {
                found.push(address);
            }
        }
        found
    }
}

/// The sources the vars files `layers` (of one group or host) give, in order.
fn file_sources(layers: Option<&Vec<Layer>>) -> impl Iterator<Item = Source<'_>> {
    layers.into_iter().flatten().map(|layer| match &layer.file {
        VarsFile::Vars(vars) => Source::Vars {
            vars,
            path: layer.path.as_str(),
        },
        VarsFile::Vault => Source::Vault {
            path: layer.path.as_str(),
        },
    })
}

fn vault_setting(path: &str) -> Setting {
    Setting {
        value: Known::Unknown(Unknown::VaultFile(path.to_string())),
        origin: Origin {
            path: path.to_string(),
            line: None,
        },
    }
}
