//! The scale-down check: hosts named in an operation's arguments (`--limit`, `-e node=`) must still be in hosts.yml.

use super::Inventory;

/// A host an argument vector names, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostRef {
    /// Index in the argument vector of the argument holding the name.
    pub arg: usize,
    /// The host (or group) name.
    pub name: String,
}

/// Plain names the arguments give to `--limit`/`-l` (comma or colon lists, `!`/`&` prefixes removed) and to
/// `node=` in `-e`/`--extra-vars`. Patterns with wildcards, regexes (`~`) and files (`@`) are skipped.
pub fn host_references(args: &[String]) -> Vec<HostRef> {
    let mut refs = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        let next = args.get(i + 1).map(String::as_str);
        let (value, at, limit) = if let Some(v) = arg.strip_prefix("--limit=") {
            (Some(v), i, true)
        } else if arg == "--limit" || arg == "-l" {
            i += 1;
            (next, i, true)
        } else if let Some(v) = arg.strip_prefix("--extra-vars=") {
            (Some(v), i, false)
        } else if arg == "--extra-vars" || arg == "-e" {
            i += 1;
            (next, i, false)
        } else if let Some(v) = arg.strip_prefix("-l").filter(|_| !arg.starts_with("--")) {
            (Some(v), i, true)
        } else if let Some(v) = arg.strip_prefix("-e").filter(|_| !arg.starts_with("--")) {
            (Some(v), i, false)
        } else {
            (None, i, false)
        };
        if let Some(value) = value {
            let names = if limit {
                limit_names(value)
            } else {
                extra_var_names(value)
            };
            refs.extend(names.into_iter().map(|name| HostRef { arg: at, name }));
        }
        i += 1;
    }
    refs
}

fn limit_names(pattern: &str) -> Vec<String> {
    if pattern.starts_with('@') {
        return Vec::new();
    }
    pattern
        .split([',', ':'])
        .map(|p| p.trim().trim_start_matches(['!', '&']))
        .filter(|p| !p.is_empty() && !p.starts_with('~') && !p.contains(['*', '?', '[', ']', '@']))
        .map(str::to_string)
        .collect()
}

fn extra_var_names(vars: &str) -> Vec<String> {
    let vars = vars.trim();
    if vars.starts_with(['@', '{', '[']) {
        return Vec::new();
    }
    vars.split_whitespace()
        .filter_map(|kv| kv.strip_prefix("node="))
        .flat_map(|v| v.trim_matches(['"', '\'']).split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty() && !p.contains(['*', '?', '[', ']', '{', '}']))
        .map(str::to_string)
        .collect()
}

/// The references in `args` to names that are neither a host nor a group of `inventory`.
pub fn unknown_hosts(args: &[String], inventory: &Inventory) -> Vec<HostRef> {
    host_references(args)
        .into_iter()
        .filter(|r| {
            !inventory.hosts.contains(&r.name) && !inventory.groups.contains(&r.name) && r.name != "ungrouped"
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(args: &[&str]) -> Vec<(usize, String)> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        host_references(&args)
            .into_iter()
            .map(|r| (r.arg, r.name))
            .collect()
    }

    #[test]
    fn limit_forms_are_all_understood() {
        assert_eq!(names(&["--limit=node7"]), [(0, "node7".to_string())]);
        assert_eq!(names(&["-v", "--limit", "node7"]), [(2, "node7".to_string())]);
        assert_eq!(names(&["-l", "node7"]), [(1, "node7".to_string())]);
        assert_eq!(names(&["-lnode7"]), [(0, "node7".to_string())]);
        assert_eq!(names(&["--limit=a,b:!c:&d"]).len(), 4);
    }

    #[test]
    fn node_extra_vars_are_understood() {
        assert_eq!(names(&["-e", "node=node7"]), [(1, "node7".to_string())]);
        assert_eq!(
            names(&["--extra-vars", "reset_confirmation=yes node=n1,n2"]).len(),
            2
        );
        assert_eq!(names(&["--extra-vars=node=n1"]), [(0, "n1".to_string())]);
        assert_eq!(names(&["-e", "other=n1"]), []);
        assert_eq!(names(&["-e", "{\"node\": \"n1\"}"]), []);
    }

    #[test]
    fn patterns_with_wildcards_regexes_and_files_are_skipped() {
        assert_eq!(
            names(&["--limit=node*", "-l", "~node[0-9]", "--limit=@retry"]),
            []
        );
    }

    #[test]
    fn only_names_that_are_neither_host_nor_group_are_unknown() {
        let inventory = Inventory {
            hosts: ["node1".to_string()].into(),
            groups: ["all".to_string(), "kube_node".to_string()].into(),
            ..Inventory::default()
        };
        let args: Vec<String> = ["--limit=node1,kube_node,node7"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let unknown: Vec<_> = unknown_hosts(&args, &inventory)
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(unknown, ["node7"]);
    }
}
