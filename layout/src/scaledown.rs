//! Hosts an operation's ansible arguments name: the scale-down check (`--limit`, `-e node=` must name hosts still
//! in hosts.yml), and whether a playbook run limits its hosts at all ([`limits_hosts`]).

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

/// Short options of `ansible-playbook` other than `-l` that take a value: the rest of the word, or the next
/// argument.
const SHORT_WITH_VALUE: &[char] = &['i', 'e', 't', 'u', 'c', 'T', 'M', 'f'];

/// Long options of `ansible-playbook` that take a value, as the next argument when not written with `=`.
const LONG_WITH_VALUE: &[&str] = &[
    "--inventory",
    "--inventory-file",
    "--extra-vars",
    "--tags",
    "--skip-tags",
    "--user",
    "--connection",
    "--timeout",
    "--module-path",
    "--forks",
    "--vault-id",
    "--vault-password-file",
    "--private-key",
    "--key-file",
    "--ssh-common-args",
    "--sftp-extra-args",
    "--scp-extra-args",
    "--ssh-extra-args",
    "--become-method",
    "--become-user",
    "--become-password-file",
    "--connection-password-file",
    "--start-at-task",
];

/// True when `args` (of `ansible-playbook`) limit the hosts it runs on: `--limit X`, `--limit=X`, the
/// abbreviations python's argparse accepts (`--lim`, `--limi`), `-l X`, `-lX`, or `-l` after other flags in
/// one word (`-vl X`). The values of other options (`-e '--limit'`) are skipped.
pub fn limits_hosts(args: &[String]) -> bool {
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        if let Some(long) = arg.strip_prefix("--") {
            let name = long.split('=').next().unwrap_or_default();
            if name.len() >= 3 && "limit".starts_with(name) {
                return true;
            }
            if !long.contains('=') && LONG_WITH_VALUE.contains(&arg) {
                i += 1;
            }
        } else if let Some(flags) = arg.strip_prefix('-') {
            for (at, c) in flags.char_indices() {
                if c == 'l' {
                    return true;
                }
                if SHORT_WITH_VALUE.contains(&c) {
                    if at + c.len_utf8() == flags.len() {
                        i += 1;
                    }
                    break;
                }
            }
        }
        i += 1;
    }
    false
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

    fn limited(args: &[&str]) -> bool {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        limits_hosts(&args)
    }

    #[test]
    fn every_way_of_writing_a_limit_limits_the_hosts() {
        for args in [
            &["--limit=node7"][..],
            &["--limit", "node7"],
            &["-l", "node7"],
            &["-lnode7"],
            &["-vvl", "node7"],
            &["-b", "--lim=node7"],
            &["-e", "x=1", "--limi", "node7"],
        ] {
            assert!(limited(args), "{args:?}");
        }
    }

    #[test]
    fn option_values_and_other_flags_do_not_limit_the_hosts() {
        for args in [
            &[][..],
            &["-e", "node=node4", "-e", "skip_confirmation=true"],
            &["-e", "--limit=x"],
            &["--extra-vars", "-l"],
            &["-el"],
            &["--tags", "asserts", "-vvv"],
            &["--list-hosts"],
            &["-i", "-l"],
        ] {
            assert!(!limited(args), "{args:?}");
        }
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
