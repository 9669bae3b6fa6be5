//! operations.yml: the operations list, their hooks, and the cron schedules the scheduler will accept.

use std::collections::HashMap;

use super::diag::{get, keyed_map, parse_yaml, unknown_key, FileDiags};
use super::names::dns1123_label_problem;
use super::scaledown::unknown_hosts;
use super::yaml::{Kind, Node};
use super::{Inventory, Operation};
use crate::spec::{ActionType, Hook, OnFailure, Verify};

/// Keys an operation entry may hold.
pub const OPERATION_KEYS: &[&str] = &[
    "id",
    "action",
    "type",
    "extraArgs",
    "image",
    "preHooks",
    "postHooks",
    "activeDeadlineSeconds",
    "startTimeout",
    "schedule",
    "rerun",
    "onFailure",
    "verify",
    "verifyTimeout",
    "ignoreMaintenance",
    "preflight",
    "allowReleaseSkip",
];

/// Keys a hook may hold.
pub const HOOK_KEYS: &[&str] = &["action", "type", "extraArgs"];

/// Longest operation id.
pub const MAX_OPERATION_ID: usize = 30;

/// Longest `verifyTimeout` accepted.
pub const MAX_VERIFY_TIMEOUT_SECONDS: u64 = 24 * 3600;

/// The seconds of a duration written with units, e.g. `90s`, `10m`, `1h30m`; `None` when it is not one.
pub fn duration_seconds(text: &str) -> Option<u64> {
    let mut total: u64 = 0;
    let mut number = String::new();
    for c in text.trim().chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let unit = match c {
            'h' => 3600,
            'm' => 60,
            's' => 1,
            _ => return None,
        };
        let n: u64 = std::mem::take(&mut number).parse().ok()?;
        total = total.checked_add(n.checked_mul(unit)?)?;
    }
    (number.is_empty() && total > 0).then_some(total)
}

/// Why `schedule` is not a cron expression the scheduler accepts (6 fields, seconds first; parsed as
/// `controller::schedule` parses it); `None` when valid.
pub fn schedule_problem(schedule: &str) -> Option<String> {
    let parsed = croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Required)
        .build()
        .parse(schedule);
    match parsed {
        Ok(_) => None,
        Err(err) => {
            let fields = schedule.split_whitespace().count();
            let err = err.to_string();
            let err = err.trim_end_matches('.');
            Some(if fields == 5 {
                format!(
                    "schedule \"{schedule}\" has 5 fields; kok's cron has 6, seconds first: write \"0 {schedule}\""
                )
            } else {
                format!(
                    "schedule \"{schedule}\" is not a valid cron expression ({err}): use 6 fields, seconds first, \
                     e.g. \"0 0 3 * * *\" for 03:00 every day"
                )
            })
        }
    }
}

/// Parses and validates operations.yml. Returns the operations that could be read (only meaningful when no
/// error was reported). With `inventory`, warns about hosts named in extraArgs that it lacks.
pub(crate) fn parse_operations(
    text: &str,
    inventory: Option<&Inventory>,
    diags: &mut FileDiags<'_>,
) -> Vec<Operation> {
    let Ok(root) = parse_yaml(text, diags) else {
        return Vec::new();
    };
    let Some(root) = root else {
        return Vec::new();
    };
    let Some(items) = root.as_seq() else {
        diags.error(
            &root,
            format!(
                "operations.yml must be a list of operations (`- id: install` ...), not {}",
                root.type_name()
            ),
        );
        return Vec::new();
    };
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut ops = Vec::new();
    for (index, item) in items.iter().enumerate() {
        if let Some(op) = parse_operation(index, item, inventory, diags) {
            if let Some(first) = seen.get(&op.id) {
                let id_node = item.as_map().and_then(|m| get(m, "id")).unwrap_or(item);
                diags.error(
                    id_node,
                    format!(
                        "operation id \"{}\" is already used on line {first}: ids are unique in a file; \
                         bump `rerun` on the first entry to run it again",
                        op.id
                    ),
                );
            } else {
                seen.insert(op.id.clone(), op.line);
            }
            ops.push(op);
        }
    }
    ops
}

/// Reads and checks the operation at `index` of operations.yml; `None` when it cannot be run (each
/// problem is reported, and the whole entry is read so that all of them are).
pub(crate) fn parse_operation(
    index: usize,
    item: &Node,
    inventory: Option<&Inventory>,
    diags: &mut FileDiags<'_>,
) -> Option<Operation> {
    let expected = || format!("operation #{} must be a mapping (`- id: ...`)", index + 1);
    let map = keyed_map(item, OPERATION_KEYS, "operation", expected, diags)?;
    let id = operation_id(index, item, map, diags);
    let what = id.as_ref().map_or_else(
        || format!("operation #{}", index + 1),
        |id| format!("operation \"{id}\""),
    );
    let step = parse_step(item, map, &what, inventory, diags);
    let image = get(map, "image").and_then(|node| non_empty_string(node, "image", &what, diags));
    let pre_hooks = get(map, "preHooks")
        .map(|n| parse_hooks(n, "preHooks", &what, inventory, diags))
        .unwrap_or_default();
    let post_hooks = get(map, "postHooks")
        .map(|n| parse_hooks(n, "postHooks", &what, inventory, diags))
        .unwrap_or_default();
    let active_deadline_seconds = positive_seconds(map, "activeDeadlineSeconds", 7200, &what, diags);
    let start_timeout = positive_seconds(map, "startTimeout", 600, &what, diags);
    let rerun = parse_rerun(map, &what, diags);
    let schedule = parse_schedule(map, &what, diags);
    let on_failure = parse_on_failure(map, &what, diags);
    let verify = parse_verify(map, &what, diags);
    let verify_timeout = parse_verify_timeout(map, &what, diags);
    let switches = Switches::parse(map, &what, diags);
    let step = step?;
    Some(Operation {
        id: id?,
        action: step.action,
        action_type: step.action_type,
        extra_args: step.extra_args,
        image,
        pre_hooks,
        post_hooks,
        active_deadline_seconds,
        start_timeout,
        schedule,
        rerun,
        on_failure,
        verify,
        verify_timeout,
        ignore_maintenance: switches.ignore_maintenance,
        preflight: switches.preflight,
        allow_release_skip: switches.allow_release_skip,
        entry: item.to_json(),
        line: item.line,
        index,
    })
}

/// The operation's `id`: a DNS-1123 label of at most [`MAX_OPERATION_ID`] characters.
fn operation_id(
    index: usize,
    item: &Node,
    map: &[(Node, Node)],
    diags: &mut FileDiags<'_>,
) -> Option<String> {
    let Some(node) = get(map, "id") else {
        diags.error(
            item,
            format!(
                "operation #{} has no id: add `id: <name>` (unique in this file)",
                index + 1
            ),
        );
        return None;
    };
    let Some(id) = node.as_str() else {
        diags.error(
            node,
            format!(
                "operation id must be a string, not {}: quote it",
                node.type_name()
            ),
        );
        return None;
    };
    if let Some(problem) = dns1123_label_problem(id, MAX_OPERATION_ID) {
        diags.error(
            node,
            format!(
                "operation id \"{id}\" is not a DNS-1123 label of at most {MAX_OPERATION_ID} characters: \
                 {problem}"
            ),
        );
        return None;
    }
    Some(id.to_string())
}

/// The seconds under `key` (`activeDeadlineSeconds`, `startTimeout`): an integer greater than 0, of
/// which `example` is one.
fn positive_seconds(
    map: &[(Node, Node)],
    key: &str,
    example: i64,
    what: &str,
    diags: &mut FileDiags<'_>,
) -> Option<i64> {
    get(map, key).and_then(|node| match node.kind {
        Kind::Int(n) if n > 0 => Some(n),
        _ => {
            diags.error(
                node,
                format!("{key} of {what} must be an integer greater than 0 (seconds), e.g. {example}"),
            );
            None
        }
    })
}

/// `rerun`: a non-negative integer, bumped to run the operation again.
fn parse_rerun(map: &[(Node, Node)], what: &str, diags: &mut FileDiags<'_>) -> Option<u64> {
    get(map, "rerun").and_then(|node| match node.kind {
        Kind::Int(n) if n >= 0 => u64::try_from(n).ok(),
        _ => {
            diags.error(
                node,
                format!("rerun of {what} must be a non-negative integer: bump it to run again"),
            );
            None
        }
    })
}

/// `schedule`: a cron expression the scheduler accepts ([`schedule_problem`]).
fn parse_schedule(map: &[(Node, Node)], what: &str, diags: &mut FileDiags<'_>) -> Option<String> {
    get(map, "schedule").and_then(|node| match node.as_str() {
        Some(s) => match schedule_problem(s) {
            Some(problem) => {
                diags.error(node, problem);
                None
            }
            None => Some(s.to_string()),
        },
        None => {
            diags.error(
                node,
                format!("schedule of {what} must be a cron expression in quotes, e.g. \"0 0 3 * * *\""),
            );
            None
        }
    })
}

/// `onFailure`: `hold` (the default) or `continue`.
fn parse_on_failure(map: &[(Node, Node)], what: &str, diags: &mut FileDiags<'_>) -> OnFailure {
    let Some(node) = get(map, "onFailure") else {
        return OnFailure::Hold;
    };
    match node.as_str() {
        Some("hold") => OnFailure::Hold,
        Some("continue") => OnFailure::Continue,
        _ => {
            diags.error(
                node,
                format!(
                    "onFailure of {what} must be `hold` (later operations wait until a rerun succeeds) \
                     or `continue` (they go on)"
                ),
            );
            OnFailure::Hold
        }
    }
}

/// `verify`: `full` (the default), `reachable` or `none`.
fn parse_verify(map: &[(Node, Node)], what: &str, diags: &mut FileDiags<'_>) -> Verify {
    let Some(node) = get(map, "verify") else {
        return Verify::Full;
    };
    match node.as_str() {
        Some("full") => Verify::Full,
        Some("reachable") => Verify::Reachable,
        Some("none") => Verify::None,
        _ => {
            let given = node.scalar_text().unwrap_or_default();
            diags.error(
                node,
                format!(
                    "verify \"{given}\" of {what} is not known: use `full` (the default: every check), \
                     `reachable` (the API server answers) or `none`"
                ),
            );
            Verify::Full
        }
    }
}

/// `verifyTimeout`: a duration with units of at most [`MAX_VERIFY_TIMEOUT_SECONDS`], kept as written.
fn parse_verify_timeout(map: &[(Node, Node)], what: &str, diags: &mut FileDiags<'_>) -> Option<String> {
    get(map, "verifyTimeout").and_then(|node| {
        let text = node.as_str().unwrap_or_default();
        match duration_seconds(text) {
            Some(s) if s <= MAX_VERIFY_TIMEOUT_SECONDS => Some(text.to_string()),
            _ => {
                let given = node.scalar_text().unwrap_or_default();
                diags.error(
                    node,
                    format!(
                        "verifyTimeout \"{given}\" of {what} is not a duration of at most 24h: write it with \
                         units, e.g. 10m (the default), 90s or 1h30m"
                    ),
                );
                None
            }
        }
    })
}

/// An operation's boolean switches.
struct Switches {
    ignore_maintenance: bool,
    preflight: bool,
    allow_release_skip: bool,
}

impl Switches {
    /// Reads `ignoreMaintenance`, `preflight` and `allowReleaseSkip`, each reported when not a boolean.
    fn parse(map: &[(Node, Node)], what: &str, diags: &mut FileDiags<'_>) -> Switches {
        let ignore_maintenance = flag(
            map,
            "ignoreMaintenance",
            false,
            &format!(
                "ignoreMaintenance of {what} must be true (start outside the maintenance windows and in \
                 freezes, for an emergency) or false"
            ),
            diags,
        );
        let preflight = flag(
            map,
            "preflight",
            true,
            &format!(
                "preflight of {what} must be false (skip kubespray's pre-flight rules for this operation, when \
                 you know better) or true (the default)"
            ),
            diags,
        );
        let allow_release_skip = flag(
            map,
            "allowReleaseSkip",
            false,
            &format!(
                "allowReleaseSkip of {what} must be true (let this operation move the cluster over a kubespray \
                 minor release) or false (the default)"
            ),
            diags,
        );
        Switches {
            ignore_maintenance,
            preflight,
            allow_release_skip,
        }
    }
}

/// The boolean `key` of an entry, `default` when absent; anything but a boolean is reported with `message`.
fn flag(map: &[(Node, Node)], key: &str, default: bool, message: &str, diags: &mut FileDiags<'_>) -> bool {
    match get(map, key) {
        None => default,
        Some(node) => match node.kind {
            Kind::Bool(b) => b,
            _ => {
                diags.error(node, message);
                default
            }
        },
    }
}

/// Reads action, type and extraArgs, shared by operations and hooks.
fn parse_step(
    item: &Node,
    map: &[(Node, Node)],
    what: &str,
    inventory: Option<&Inventory>,
    diags: &mut FileDiags<'_>,
) -> Option<Hook> {
    let action_type = match get(map, "type") {
        None => Some(ActionType::Playbook),
        Some(node) => {
            match node.as_str() {
                Some("playbook") => Some(ActionType::Playbook),
                Some("shell") => Some(ActionType::Shell),
                _ => {
                    let given = node.scalar_text().unwrap_or_default();
                    diags.error(
                    node,
                    format!("type \"{given}\" of {what} is not known: use `playbook` (the default) or `shell`"),
                );
                    None
                }
            }
        }
    };
    let action = match get(map, "action") {
        None => {
            diags.error(
                item,
                format!("{what} has no action: add `action: <playbook.yml>`"),
            );
            None
        }
        Some(node) => non_empty_string(node, "action", what, diags),
    };
    if let (Some(action), Some(ActionType::Playbook), Some(node)) = (&action, action_type, get(map, "action"))
    {
        if action.starts_with('/') || action.split('/').any(|part| part == "..") {
            diags.error(
                node,
                format!(
                    "playbook action \"{action}\" of {what} must be a relative path inside the runner image \
                     without `..` (e.g. `cluster.yml`); use `type: shell` to run a script by absolute path"
                ),
            );
        }
    }
    let extra_args = match get(map, "extraArgs") {
        None => Some(Vec::new()),
        Some(node) => string_list(node, what, diags),
    };
    if let (Some(inventory), Some(args), Some(items)) = (
        inventory,
        &extra_args,
        get(map, "extraArgs").and_then(Node::as_seq),
    ) {
        for host in unknown_hosts(args, inventory) {
            if let Some(at) = items.get(host.arg) {
                diags.warn(
                    at,
                    format!(
                        "{what} names host \"{}\" (\"{}\") that hosts.yml does not define: check the name, or keep \
                         the host in hosts.yml until the operation has run and remove it in a later commit",
                        host.name, args[host.arg]
                    ),
                );
            }
        }
    }
    Some(Hook {
        action: action?,
        action_type: action_type?,
        extra_args: extra_args?,
    })
}

fn string_list(node: &Node, what: &str, diags: &mut FileDiags<'_>) -> Option<Vec<String>> {
    if node.is_null() {
        return Some(Vec::new());
    }
    let Some(items) = node.as_seq() else {
        let example = node.as_str().map_or_else(
            || "[\"--limit=node7\"]".to_string(),
            |s| {
                format!(
                    "[{}]",
                    s.split_whitespace()
                        .map(|a| format!("\"{a}\""))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            },
        );
        diags.error(
            node,
            format!(
                "extraArgs of {what} must be a list (an argv list, never split by a shell), not {}: \
                 write extraArgs: {example}",
                node.type_name()
            ),
        );
        return None;
    };
    let mut args = Vec::with_capacity(items.len());
    let mut ok = true;
    for arg in items {
        match arg.as_str() {
            Some(s) => args.push(s.to_string()),
            None => {
                ok = false;
                diags.error(
                    arg,
                    format!(
                        "extraArgs of {what} must hold strings, not {}: quote the value",
                        arg.type_name()
                    ),
                );
            }
        }
    }
    ok.then_some(args)
}

fn non_empty_string(node: &Node, key: &str, what: &str, diags: &mut FileDiags<'_>) -> Option<String> {
    match node.as_str() {
        Some(s) if !s.trim().is_empty() => Some(s.to_string()),
        _ => {
            diags.error(node, format!("{key} of {what} must be a non-empty string"));
            None
        }
    }
}

fn parse_hooks(
    node: &Node,
    key: &str,
    what: &str,
    inventory: Option<&Inventory>,
    diags: &mut FileDiags<'_>,
) -> Vec<Hook> {
    if node.is_null() {
        return Vec::new();
    }
    let Some(items) = node.as_seq() else {
        diags.error(
            node,
            format!(
                "{key} of {what} must be a list of hooks (`- action: ping.yml`), not {}",
                node.type_name()
            ),
        );
        return Vec::new();
    };
    let mut hooks = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let hook_what = format!("{key}[{i}] of {what}");
        let Some(map) = item.as_map() else {
            diags.error(
                item,
                format!(
                    "{hook_what} must be a mapping (`- action: ping.yml`), not {}",
                    item.type_name()
                ),
            );
            continue;
        };
        for (k, _) in map {
            match k.as_str() {
                Some("action" | "type" | "extraArgs") => {}
                Some(name @ ("image" | "activeDeadlineSeconds" | "startTimeout")) => diags.error(
                    k,
                    format!("{name} is not allowed in a hook: hooks run in the operation's pod; set {name} on the operation"),
                ),
                Some(name @ ("id" | "schedule" | "rerun" | "onFailure" | "preHooks" | "postHooks")) => {
                    diags.error(k, format!("{name} is not allowed in a hook: only action, type and extraArgs are"))
                }
                _ => unknown_key(k, HOOK_KEYS, "hook", diags),
            }
        }
        if let Some(hook) = parse_step(item, map, &hook_what, inventory, diags) {
            hooks.push(hook);
        }
    }
    hooks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Diagnostic;

    fn check(text: &str) -> (Vec<Operation>, Vec<Diagnostic>) {
        let mut out = Vec::new();
        let ops = parse_operations(text, None, &mut FileDiags::new("operations.yml", None, &mut out));
        (ops, out)
    }

    fn errors(text: &str) -> Vec<String> {
        check(text).1.iter().map(Diagnostic::at).collect()
    }

    #[test]
    fn a_full_operation_is_read_with_its_entry_as_json() {
        let text = "- id: scale\n  action: scale.yml\n  extraArgs: [\"--limit=node7\"]\n  image: img:1\n  \
                    preHooks: [{action: ping.yml}]\n  postHooks:\n    - {action: info.sh, type: shell, extraArgs: [-v]}\n  \
                    activeDeadlineSeconds: 7200\n  schedule: \"0 0 3 * * *\"\n  rerun: 2\n";
        let (ops, diags) = check(text);
        assert_eq!(diags, vec![]);
        let op = &ops[0];
        assert_eq!(op.id, "scale");
        assert_eq!(op.extra_args, ["--limit=node7"]);
        assert_eq!(op.pre_hooks[0].action, "ping.yml");
        assert_eq!(op.post_hooks[0].action_type, ActionType::Shell);
        assert_eq!(
            (op.active_deadline_seconds, op.rerun, op.line, op.index),
            (Some(7200), Some(2), 1, 0)
        );
        assert_eq!(op.entry["activeDeadlineSeconds"], serde_json::json!(7200));
        assert_eq!(op.entry["preHooks"], serde_json::json!([{"action": "ping.yml"}]));
    }

    #[test]
    fn verify_and_verify_timeout_are_read_and_checked_with_their_line() {
        let (ops, diags) = check("- id: reset\n  action: reset.yml\n  verify: none\n- id: up\n  action: upgrade-cluster.yml\n  verify: reachable\n  verifyTimeout: 1h30m\n");
        assert_eq!(diags, vec![]);
        assert_eq!(
            (ops[0].verify, ops[0].verify_timeout.as_deref()),
            (Verify::None, None)
        );
        assert_eq!(
            (ops[1].verify, ops[1].verify_timeout.as_deref()),
            (Verify::Reachable, Some("1h30m"))
        );
        assert_eq!(
            errors("- id: a\n  action: a.yml\n  verify: true\n"),
            ["3:11: verify \"true\" of operation \"a\" is not known: use `full` (the default: every check), `reachable` (the API server answers) or `none`"]
        );
        for bad in ["600", "10 minutes", "0s", "25h", "m"] {
            let errs = errors(&format!("- id: a\n  action: a.yml\n  verifyTimeout: {bad}\n"));
            assert_eq!(errs.len(), 1, "{bad}");
            assert!(errs[0].starts_with("3:18: verifyTimeout"), "{}", errs[0]);
        }
    }

    #[test]
    fn entries_without_verify_fields_keep_their_entry_and_so_their_digest() {
        let (ops, _) = check("- id: install\n  action: cluster.yml\n");
        assert_eq!(
            ops[0].entry,
            serde_json::json!({"id": "install", "action": "cluster.yml"})
        );
        let (with, _) = check("- id: install\n  action: cluster.yml\n  verify: full\n");
        assert_ne!(with[0].entry, ops[0].entry);
    }

    #[test]
    fn durations_are_written_with_units() {
        assert_eq!(duration_seconds("10m"), Some(600));
        assert_eq!(duration_seconds("1h30m"), Some(5400));
        assert_eq!(duration_seconds("90s"), Some(90));
        for bad in ["", "10", "1.5h", "-1m", "0m", "10x"] {
            assert_eq!(duration_seconds(bad), None, "{bad}");
        }
    }

    #[test]
    fn operations_yml_must_be_a_list_and_may_be_empty() {
        assert!(errors("id: x\n")[0].contains("must be a list of operations"));
        assert_eq!(check("").0, vec![]);
        assert_eq!(check("[]\n").1, vec![]);
    }

    #[test]
    fn an_operation_without_id_is_refused() {
        assert_eq!(
            errors("- action: a.yml\n"),
            ["1:3: operation #1 has no id: add `id: <name>` (unique in this file)"]
        );
    }

    #[test]
    fn a_repeated_id_names_the_line_of_the_first() {
        let errs = errors("- id: a\n  action: a.yml\n- id: a\n  action: b.yml\n");
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].starts_with("3:7: operation id \"a\" is already used on line 1"),
            "{}",
            errs[0]
        );
    }

    #[test]
    fn ids_must_be_short_dns_labels() {
        assert!(errors("- id: Install\n  action: a.yml\n")[0].contains("uppercase"));
        let long = format!("- id: {}\n  action: a.yml\n", "a".repeat(31));
        assert!(errors(&long)[0].contains("31 characters"));
    }

    #[test]
    fn type_must_be_playbook_or_shell() {
        assert!(errors("- id: a\n  action: a.yml\n  type: bash\n")[0].starts_with("3:9: type \"bash\""));
    }

    #[test]
    fn actions_must_be_non_empty_and_playbooks_relative_without_dotdot() {
        assert!(errors("- id: a\n  action: ''\n")[0].contains("non-empty"));
        assert!(errors("- id: a\n")[0].contains("has no action"));
        assert!(errors("- id: a\n  action: /etc/x.yml\n")[0].contains("relative path"));
        assert!(errors("- id: a\n  action: ../x.yml\n")[0].contains("without `..`"));
        assert_eq!(
            errors("- id: a\n  action: /bin/run.sh\n  type: shell\n"),
            Vec::<String>::new()
        );
    }

    #[test]
    fn extra_args_as_a_string_gets_an_argv_hint() {
        let errs = errors("- id: a\n  action: a.yml\n  extraArgs: --limit=node7 -v\n");
        assert!(errs[0].contains("argv list"), "{}", errs[0]);
        assert!(errs[0].contains("[\"--limit=node7\", \"-v\"]"), "{}", errs[0]);
        assert!(errors("- id: a\n  action: a.yml\n  extraArgs: [5]\n")[0].contains("must hold strings"));
    }

    #[test]
    fn hooks_have_the_operation_shape_minus_id_schedule_rerun_and_hooks() {
        let errs = errors("- id: a\n  action: a.yml\n  preHooks:\n    - {id: x, action: p.yml}\n    - {}\n");
        assert!(
            errs[0].starts_with("4:8: id is not allowed in a hook"),
            "{errs:?}"
        );
        assert!(
            errs[1].contains("preHooks[1] of operation \"a\" has no action"),
            "{errs:?}"
        );
        assert!(errors("- id: a\n  action: a.yml\n  postHooks: {action: x}\n")[0]
            .contains("must be a list of hooks"));
        assert!(
            errors("- id: a\n  action: a.yml\n  postHooks: [{action: x, extra: 1}]\n")[0]
                .contains("unknown key \"extra\" in hook")
        );
    }

    #[test]
    fn schedules_use_six_field_cron_with_seconds() {
        assert_eq!(schedule_problem("0 0 3 * * *"), None);
        assert!(schedule_problem("0 3 * * *")
            .unwrap()
            .contains("write \"0 0 3 * * *\""));
        assert!(schedule_problem("every day")
            .unwrap()
            .contains("not a valid cron expression"));
        assert!(schedule_problem("0 0 25 * * *").is_some());
        assert!(errors("- id: a\n  action: a.yml\n  schedule: 5\n")[0].contains("in quotes"));
    }

    #[test]
    fn deadline_and_rerun_are_checked() {
        assert!(
            errors("- id: a\n  action: a.yml\n  activeDeadlineSeconds: 0\n")[0].contains("greater than 0")
        );
        assert!(
            errors("- id: a\n  action: a.yml\n  activeDeadlineSeconds: '60'\n")[0].contains("greater than 0")
        );
        assert_eq!(
            errors("- id: a\n  action: a.yml\n  startTimeout: -1\n")[0],
            "3:17: startTimeout of operation \"a\" must be an integer greater than 0 (seconds), e.g. 600"
        );
        assert!(errors("- id: a\n  action: a.yml\n  startTimeout: '60'\n")[0].contains("greater than 0"));
        assert_eq!(
            check("- id: a\n  action: a.yml\n  startTimeout: 90\n").0[0].start_timeout,
            Some(90)
        );
        assert!(
            errors("- id: a\n  action: a.yml\n  preHooks: [{action: p.yml, startTimeout: 5}]\n")[0]
                .contains("startTimeout is not allowed in a hook")
        );
        assert!(errors("- id: a\n  action: a.yml\n  rerun: -1\n")[0].contains("non-negative"));
        assert!(errors("- id: a\n  action: a.yml\n  image: ''\n")[0]
            .contains("image of operation \"a\" must be a non-empty"));
    }

    #[test]
    fn on_failure_is_hold_by_default_continue_when_asked_and_nothing_else() {
        let (ops, _) = check("- id: a\n  action: a.yml\n- id: b\n  action: b.yml\n  onFailure: continue\n");
        assert_eq!(ops[0].on_failure, OnFailure::Hold);
        assert_eq!(ops[1].on_failure, OnFailure::Continue);
        let errs = errors("- id: a\n  action: a.yml\n  onFailure: retry\n");
        assert_eq!(
            errs,
            ["3:14: onFailure of operation \"a\" must be `hold` (later operations wait until a rerun succeeds) \
              or `continue` (they go on)"]
        );
        assert!(
            errors("- id: a\n  action: a.yml\n  preHooks: [{action: p.yml, onFailure: continue}]\n")[0]
                .contains("onFailure is not allowed in a hook")
        );
    }

    #[test]
    fn preflight_and_allow_release_skip_are_booleans_with_their_defaults() {
        let (ops, d) = check(
            "- {id: a, action: a.yml}\n- {id: b, action: b.yml, preflight: false, allowReleaseSkip: true}\n",
        );
        assert!(d.is_empty(), "{d:?}");
        assert!(ops[0].preflight && !ops[0].allow_release_skip);
        assert!(!ops[1].preflight && ops[1].allow_release_skip);
        assert!(errors("- {id: a, action: a.yml, preflight: no}\n")[0].contains("preflight of"));
        assert!(errors("- {id: a, action: a.yml, allowReleaseSkip: 1}\n")[0].contains("allowReleaseSkip of"));
    }

    #[test]
    fn ignore_maintenance_is_a_boolean_that_leaves_other_entries_digests_alone() {
        let (ops, d) = check("- {id: a, action: a.yml}\n- {id: b, action: b.yml, ignoreMaintenance: true}\n");
        assert_eq!(d, vec![]);
        assert!(!ops[0].ignore_maintenance);
        assert!(ops[1].ignore_maintenance);
        assert_eq!(
            ops[0].entry,
            serde_json::json!({"id": "a", "action": "a.yml"}),
            "nothing added"
        );
        assert!(errors("- {id: a, action: a.yml, ignoreMaintenance: yes}\n")[0]
            .contains("must be true (start outside the maintenance windows"));
    }

    #[test]
    fn unknown_operation_keys_are_denied_with_a_hint() {
        let errs = errors("- id: a\n  action: a.yml\n  extra_args: []\n");
        assert_eq!(
            errs,
            ["3:3: unknown key \"extra_args\" in operation; did you mean \"extraArgs\"?"]
        );
    }

    #[test]
    fn hosts_missing_from_the_inventory_are_warned_about() {
        let inventory = Inventory {
            hosts: ["node1".to_string()].into(),
            groups: ["all".to_string()].into(),
            ..Inventory::default()
        };
        let text = "- id: rm\n  action: remove-node.yml\n  extraArgs: [-e, node=node7]\n  \
                    postHooks: [{action: x.yml, extraArgs: [--limit=node1]}]\n";
        let mut out = Vec::new();
        let ops = parse_operations(
            text,
            Some(&inventory),
            &mut FileDiags::new("operations.yml", None, &mut out),
        );
        assert_eq!(ops.len(), 1);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].severity, crate::Severity::Warning);
        assert_eq!((out[0].line, out[0].column), (3, 19));
        assert!(
            out[0]
                .message
                .starts_with("operation \"rm\" names host \"node7\" (\"node=node7\")"),
            "{}",
            out[0].message
        );
    }
}
