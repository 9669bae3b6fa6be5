//! `rollouts/<name>.yml` beside kok.yml: one operation for many clusters, in waves; parsed, validated
//! against the clusters of the repository, and each cluster placed in its wave.
//!
//! A broken rollout file is refused alone (it lands in no [`Rollout`]); clusters and other rollouts go on.

use std::collections::{BTreeMap, BTreeSet};

use jiff::SignedDuration;

use super::diag::{get, keyed_map, parse_yaml, read_text, FileDiags};
use super::labels::{label_key_problem, label_value_problem};
use super::maintenance::parse_duration;
use super::names::dns1123_label_problem;
use super::operations::parse_operation;
use super::reader::{EntryKind, TreeReader};
use super::yaml::{Kind, Node};
use super::{ClusterDir, Diagnostic, Operation};

/// Directory of the rollout files, beside kok.yml.
pub const ROLLOUTS_DIR: &str = "rollouts";
/// Keys of a rollout file.
pub const ROLLOUT_KEYS: &[&str] = &[
    "operation",
    "clusters",
    "waves",
    "bake",
    "maxFailures",
    "stopAfter",
    "rerun",
];
/// Keys of `clusters`.
const SELECTION_KEYS: &[&str] = &["names", "selector"];
/// Keys of a wave.
const WAVE_KEYS: &[&str] = &["name", "clusters", "selector", "maxParallel"];
/// Longest rollout name (it prefixes object names and status contexts).
pub const MAX_ROLLOUT_NAME: usize = 40;

/// How many clusters of a wave may run at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxParallel {
    /// At most this many (at least 1).
    Count(u32),
    /// At most this percentage of the wave's clusters, rounded up, at least 1 (1 to 100).
    Percent(u32),
}

impl MaxParallel {
    /// The limit for a wave of `size` clusters.
    pub fn limit(self, size: usize) -> usize {
        match self {
            MaxParallel::Count(n) => n as usize,
            MaxParallel::Percent(p) => (size * p as usize).div_ceil(100).max(1),
        }
    }
}

/// One wave of a rollout, with the clusters it took.
#[derive(Clone, Debug, PartialEq)]
pub struct Wave {
    /// Name (DNS-1123 label), unique in the rollout.
    pub name: String,
    /// The clusters of the wave, sorted: those it picked that no earlier wave took.
    pub clusters: Vec<String>,
    /// At most this many of them run at once; `None`: no limit of the wave's own.
    pub max_parallel: Option<MaxParallel>,
    /// 1-based line of the wave in the file.
    pub line: usize,
}

/// A validated rollout file.
#[derive(Clone, Debug, PartialEq)]
pub struct Rollout {
    /// File name without `.yml`: the rollout's identity.
    pub name: String,
    /// Path of the file relative to the repository root.
    pub path: String,
    /// The operation every participating cluster runs.
    pub operation: Operation,
    /// The waves, in order, each with its clusters.
    pub waves: Vec<Wave>,
    /// Wait after a wave succeeded before the next opens.
    pub bake: SignedDuration,
    /// Failed or canceled runs tolerated before the rollout halts.
    pub max_failures: u32,
    /// Index of the last wave that may open, from `stopAfter`.
    pub stop_after: Option<usize>,
    /// Counter; bumping it runs again the clusters whose run failed or was canceled.
    pub rerun: u64,
}

impl Rollout {
    /// The rollout `name` of the playbook `action` (operation id `name`) over `waves` given as
    /// `(name, clusters, maxParallel)`, without bake, tolerated failures, stopAfter or rerun.
    pub fn of_waves(name: &str, action: &str, waves: &[(&str, &[&str], Option<MaxParallel>)]) -> Rollout {
        Rollout {
            name: name.into(),
            path: format!("{ROLLOUTS_DIR}/{name}.yml"),
            operation: Operation::playbook(name, action, 0),
            waves: waves
                .iter()
                .map(|(wave, clusters, max_parallel)| Wave {
                    name: wave.to_string(),
                    clusters: clusters.iter().map(|c| c.to_string()).collect(),
                    max_parallel: *max_parallel,
                    line: 1,
                })
                .collect(),
            bake: SignedDuration::ZERO,
            max_failures: 0,
            stop_after: None,
            rerun: 0,
        }
    }
}

/// Where the rollout files are for the cluster root `root`: `rollouts/` beside kok.yml.
pub fn rollouts_dir(root: &str) -> String {
    let root = root.trim_matches('/');
    match root.rsplit_once('/') {
        Some((parent, _)) => format!("{parent}/{ROLLOUTS_DIR}"),
        None => ROLLOUTS_DIR.to_string(),
    }
}

/// What the rollout files may refer to: every cluster directory (valid or not) and the labels of the
/// valid ones.
pub struct Fleet<'a> {
    /// Names of every cluster directory.
    pub names: BTreeSet<&'a str>,
    /// Labels of the valid clusters.
    pub labels: BTreeMap<&'a str, &'a BTreeMap<String, String>>,
}

impl<'a> Fleet<'a> {
    /// The fleet of `clusters` (valid) and `invalid` (names only).
    pub fn new(clusters: &'a [ClusterDir], invalid: &'a [String]) -> Fleet<'a> {
        Fleet {
            names: clusters
                .iter()
                .map(|c| c.name.as_str())
                .chain(invalid.iter().map(String::as_str))
                .collect(),
            labels: clusters
                .iter()
                .map(|c| (c.name.as_str(), &c.settings.labels))
                .collect(),
        }
    }

    /// The valid clusters whose labels hold every pair of `selector`.
    fn matching(&self, selector: &BTreeMap<String, String>) -> BTreeSet<&'a str> {
        self.labels
            .iter()
            .filter(|(_, labels)| selector.iter().all(|(k, v)| labels.get(k) == Some(v)))
            .map(|(name, _)| *name)
            .collect()
    }
}

/// Reads every `rollouts/*.yml` beside the cluster root `root`; valid ones are returned, problems go
/// to `out` (belonging to no cluster).
pub fn parse_rollouts(
    reader: &dyn TreeReader,
    root: &str,
    fleet: &Fleet<'_>,
    out: &mut Vec<Diagnostic>,
) -> Vec<Rollout> {
    let dir = rollouts_dir(root);
    let Ok(Some(EntryKind::Dir)) = reader.kind(&dir) else {
        return Vec::new();
    };
    let entries = match reader.list(&dir) {
        Ok(entries) => entries,
        Err(err) => {
            FileDiags::new(&dir, None, out).error_at(0, 0, format!("could not list the rollouts: {err}"));
            return Vec::new();
        }
    };
    let mut rollouts = Vec::new();
    for entry in entries.into_iter().filter(|e| !e.name.starts_with('.')) {
        let path = format!("{dir}/{}", entry.name);
        let mut d = FileDiags::new(&path, None, out);
        let Some(name) = entry.name.strip_suffix(".yml") else {
            if entry.name.ends_with(".yaml") {
                d.error_at(0, 0, "kok reads rollouts/<name>.yml: rename the file to .yml");
            }
            continue;
        };
        if entry.kind != EntryKind::File {
            d.error_at(0, 0, "a rollout must be a regular file, not a link or directory");
            continue;
        }
        if let Some(problem) = dns1123_label_problem(name, MAX_ROLLOUT_NAME) {
            d.error_at(
                0,
                0,
                format!("rollout name \"{name}\" (the file name) is not valid: {problem}"),
            );
            continue;
        }
        let before = d.error_count();
        let Some(text) = read_text(reader, &mut d) else {
            continue;
        };
        let rollout = parse_rollout(name, &path, &text, fleet, &mut d);
        if d.error_count() == before {
            rollouts.extend(rollout);
        }
    }
    rollouts
}

/// Parses one rollout file; `None` (with errors reported) when it is not usable.
pub(crate) fn parse_rollout(
    name: &str,
    path: &str,
    text: &str,
    fleet: &Fleet<'_>,
    d: &mut FileDiags<'_>,
) -> Option<Rollout> {
    let root = parse_yaml(text, d).ok()??;
    let expected = || format!("a rollout must be a mapping ({})", ROLLOUT_KEYS.join(", "));
    let map = keyed_map(&root, ROLLOUT_KEYS, "rollout", expected, d)?;
    let operation = match get(map, "operation") {
        Some(node) => parse_operation(0, node, None, d),
        None => {
            d.error(
                &root,
                "operation is missing: add the one operations.yml entry every cluster runs",
            );
            None
        }
    };
    let members = match get(map, "clusters") {
        Some(node) => selection(node, fleet, d),
        None => {
            d.error(&root, "clusters is missing: name the clusters (names: [...]) and/or select them (selector: {env: prod})");
            None
        }
    };
    let waves = match get(map, "waves") {
        Some(node) => waves(node, members.as_ref(), fleet, d),
        None => {
            d.error(
                &root,
                "waves is missing: list at least one wave, e.g. [{name: all}]",
            );
            None
        }
    };
    let bake = get(map, "bake").map_or(Some(SignedDuration::ZERO), |node| {
        match node.as_str().and_then(parse_duration) {
            Some(b) => Some(b),
            None => {
                d.error(node, "bake must be a duration such as 30m, 2h or 0s");
                None
            }
        }
    });
    let max_failures =
        counter(get(map, "maxFailures"), "maxFailures", d).map(|n| n.min(u32::MAX as u64) as u32);
    let rerun = counter(get(map, "rerun"), "rerun", d);
    // Checked against the names as written, so a stopAfter typo shows beside the waves' own problems.
    let wave_names: Vec<String> = get(map, "waves")
        .and_then(Node::as_seq)
        .unwrap_or_default()
        .iter()
        .filter_map(|w| {
            w.as_map()
                .and_then(|m| get(m, "name"))
                .and_then(Node::scalar_text)
        })
        .collect();
    let stop_after = match get(map, "stopAfter") {
        None => Some(None),
        Some(node) => match wave_names.iter().position(|w| Some(w.as_str()) == node.as_str()) {
            Some(i) => Some(Some(i)),
            None => {
                d.error(
                    node,
                    format!(
                        "stopAfter \"{}\" names no wave of this rollout (waves: {})",
                        node.scalar_text().unwrap_or_default(),
                        wave_names.join(", ")
                    ),
                );
                None
            }
        },
    };
    Some(Rollout {
        name: name.to_string(),
        path: path.to_string(),
        operation: operation?,
        waves: waves?,
        bake: bake?,
        max_failures: max_failures?,
        stop_after: stop_after?,
        rerun: rerun?,
    })
}

/// A non-negative integer (0 when absent).
fn counter(node: Option<&Node>, key: &str, d: &mut FileDiags<'_>) -> Option<u64> {
    match node.map(|n| (n, &n.kind)) {
        None => Some(0),
        Some((_, Kind::Int(n))) if *n >= 0 => Some(*n as u64),
        Some((n, _)) => {
            d.error(n, format!("{key} must be an integer of at least 0"));
            None
        }
    }
}

/// A label selector: a mapping of label keys to values, all of which a cluster's labels must hold.
fn selector(node: &Node, d: &mut FileDiags<'_>) -> Option<BTreeMap<String, String>> {
    let Some(map) = node.as_map() else {
        d.error(
            node,
            format!(
                "selector must be a mapping of labels, e.g. {{env: prod}}, not {}",
                node.type_name()
            ),
        );
        return None;
    };
    let before = d.error_count();
    let mut out = BTreeMap::new();
    for (k, v) in map {
        let key = k.scalar_text().unwrap_or_default();
        let value = match &v.kind {
            Kind::Str(s) => s.clone(),
            Kind::Int(i) => i.to_string(),
            _ => String::new(),
        };
        if let Some(problem) = label_key_problem(&key) {
            d.error(k, problem);
        } else if let Some(problem) = label_value_problem(&value).or_else(|| {
            (!matches!(v.kind, Kind::Str(_) | Kind::Int(_)))
                .then(|| "label values are strings: quote it".to_string())
        }) {
            d.error(v, problem);
        }
        out.insert(key, value);
    }
    (d.error_count() == before).then_some(out)
}

/// Cluster names listed at `node`, each checked to exist.
fn names(node: &Node, what: &str, fleet: &Fleet<'_>, d: &mut FileDiags<'_>) -> Option<Vec<(String, usize)>> {
    let Some(items) = node.as_seq() else {
        d.error(
            node,
            format!(
                "{what} must be a list of cluster names, e.g. [prod-sh-1], not {}",
                node.type_name()
            ),
        );
        return None;
    };
    let before = d.error_count();
    let mut out = Vec::new();
    for item in items {
        let name = item.scalar_text().unwrap_or_default();
        if !fleet.names.contains(name.as_str()) {
            d.error(
                item,
                format!(
                    "cluster \"{name}\" does not exist: no directory of that name under the cluster root"
                ),
            );
        } else {
            out.push((name, item.line));
        }
    }
    (d.error_count() == before).then_some(out)
}

/// The participating clusters: named and/or selected.
fn selection(node: &Node, fleet: &Fleet<'_>, d: &mut FileDiags<'_>) -> Option<BTreeSet<String>> {
    let expected = || "clusters must be a mapping with names and/or selector".to_string();
    let map = keyed_map(node, SELECTION_KEYS, "clusters", expected, d)?;
    let named = get(map, "names").map(|n| names(n, "clusters.names", fleet, d));
    let selected = get(map, "selector").map(|n| selector(n, d));
    if named.is_none() && selected.is_none() {
        d.error(
            node,
            "clusters needs names and/or a selector: which clusters take part?",
        );
        return None;
    }
    let mut members: BTreeSet<String> = named
        .unwrap_or(Some(Vec::new()))?
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    if let Some(selector) = selected {
        members.extend(fleet.matching(&selector?).into_iter().map(str::to_string));
    }
    Some(members)
}

/// The waves, each taking the participating clusters it picks that no earlier wave took.
fn waves(
    node: &Node,
    members: Option<&BTreeSet<String>>,
    fleet: &Fleet<'_>,
    d: &mut FileDiags<'_>,
) -> Option<Vec<Wave>> {
    let items = match node.as_seq() {
        Some(items) if !items.is_empty() => items,
        _ => {
            d.error(node, "waves must be a non-empty list of waves, e.g. [{name: canary, clusters: [c1]}, {name: rest}]");
            return None;
        }
    };
    let before = d.error_count();
    let mut left: BTreeSet<String> = members.cloned().unwrap_or_default();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for item in items {
        let expected = || format!("a wave must be a mapping ({})", WAVE_KEYS.join(", "));
        let Some(map) = keyed_map(item, WAVE_KEYS, "wave", expected, d) else {
            continue;
        };
        let name = match get(map, "name").map(|n| (n, n.scalar_text().unwrap_or_default())) {
            None => {
                d.error(item, "a wave needs a name: add `name: <wave>`");
                continue;
            }
            Some((n, name)) => {
                if let Some(problem) = dns1123_label_problem(&name, 63) {
                    d.error(n, format!("wave name \"{name}\" is not valid: {problem}"));
                } else if let Some(first) = seen.insert(name.clone(), n.line) {
                    d.error(
                        n,
                        format!("wave \"{name}\" is already named on line {first}: wave names are unique"),
                    );
                }
                name
            }
        };
        let max_parallel = get(map, "maxParallel").and_then(|n| max_parallel(n, d));
        let named =
            get(map, "clusters").and_then(|n| names(n, &format!("clusters of wave {name}"), fleet, d));
        let selected = get(map, "selector").and_then(|n| selector(n, d));
        let mut picked: BTreeSet<String> = BTreeSet::new();
        if let Some(named) = &named {
            for (cluster, _) in named {
                if members.is_some_and(|m| !m.contains(cluster)) {
                    let at = get(map, "clusters").unwrap_or(item);
                    d.error(at, format!("wave {name} names cluster {cluster}, which does not take part in the rollout (see clusters)"));
                }
                picked.insert(cluster.clone());
            }
        }
        if let Some(selector) = &selected {
            picked.extend(fleet.matching(selector).into_iter().map(str::to_string));
        }
        let takes_rest = get(map, "clusters").is_none() && get(map, "selector").is_none();
        let clusters: Vec<String> = if takes_rest {
            std::mem::take(&mut left).into_iter().collect()
        } else {
            picked.iter().filter(|c| left.remove(*c)).cloned().collect()
        };
        if clusters.is_empty() && members.is_some() {
            d.warn(item, format!("wave {name} picks no cluster: every cluster it names or selects is in an earlier wave or takes no part"));
        }
        out.push(Wave {
            name,
            clusters,
            max_parallel,
            line: item.line,
        });
    }
    if members.is_some() && !left.is_empty() {
        let left: Vec<String> = left.into_iter().collect();
        d.error(
            node,
            format!(
                "cluster(s) {} take part but no wave picks them: add them to a wave, or end with a wave without clusters or selector (it takes everyone left)",
                left.join(", ")
            ),
        );
    }
    (d.error_count() == before && members.is_some()).then_some(out)
}

/// `maxParallel`: a positive integer or a percentage `1%` to `100%`.
fn max_parallel(node: &Node, d: &mut FileDiags<'_>) -> Option<MaxParallel> {
    let parsed = match &node.kind {
        Kind::Int(n) if *n >= 1 && *n <= u32::MAX as i64 => Some(MaxParallel::Count(*n as u32)),
        Kind::Str(s) => s
            .strip_suffix('%')
            .and_then(|p| p.parse::<u32>().ok())
            .filter(|p| (1..=100).contains(p))
            .map(MaxParallel::Percent),
        _ => None,
    };
    if parsed.is_none() {
        d.error(
            node,
            format!(
                "maxParallel \"{}\" must be a number of clusters (at least 1) or a percentage of the wave (1% to 100%), e.g. 2 or 25%",
                node.scalar_text().unwrap_or_default()
            ),
        );
    }
    parsed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Inventory, Settings, Severity};

    fn dir(name: &str, labels: &[(&str, &str)]) -> ClusterDir {
        ClusterDir {
            name: name.into(),
            path: format!("clusters/{name}"),
            inventory_dir: crate::InventoryDir {
                inventory_file: "hosts.yml".into(),
                hosts_yml: String::new(),
                vars_yml: Some(String::new()),
                vars_files: vec![],
            },
            inventory: Inventory::default(),
            operations: vec![],
            settings: Settings {
                labels: labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Settings::default()
            },
            kubespray: None,
            repository_files: Default::default(),
        }
    }

    fn fleet_dirs() -> Vec<ClusterDir> {
        vec![
            dir("prod-sh-1", &[("env", "prod"), ("region", "sh")]),
            dir("prod-sh-2", &[("env", "prod"), ("region", "sh")]),
            dir("prod-bj-1", &[("env", "prod"), ("region", "bj")]),
            dir("prod-bj-2", &[("env", "prod"), ("region", "bj")]),
            dir("dev-1", &[("env", "dev")]),
        ]
    }

    const EXAMPLE: &str = "operation:
  id: upgrade-1-31
  action: upgrade-cluster.yml
  extraArgs: [-e, kube_version=v1.31.4]
clusters:
  selector: {env: prod}
waves:
  - name: canary
    clusters: [prod-sh-1]
  - name: beijing
    selector: {region: bj}
    maxParallel: 2
  - name: rest
    maxParallel: 25%
bake: 30m
maxFailures: 0
stopAfter: canary
rerun: 0
";

    fn check(text: &str) -> (Option<Rollout>, Vec<String>) {
        let dirs = fleet_dirs();
        let invalid = vec!["broken".to_string()];
        let fleet = Fleet::new(&dirs, &invalid);
        let mut out = Vec::new();
        let path = "rollouts/upgrade.yml";
        let r = parse_rollout(
            "upgrade",
            path,
            text,
            &fleet,
            &mut FileDiags::new(path, None, &mut out),
        );
        let lines = out
            .iter()
            .map(|d| {
                let warn = if d.severity == Severity::Warning {
                    "warning: "
                } else {
                    ""
                };
                format!("{}:{}: {warn}{}", d.line, d.column, d.message)
            })
            .collect();
        let errors = out.iter().any(|d| d.severity == Severity::Error);
        (r.filter(|_| !errors), lines)
    }

    #[test]
    fn the_example_puts_each_cluster_in_the_first_wave_that_picks_it() {
        let (r, d) = check(EXAMPLE);
        assert_eq!(d, Vec::<String>::new());
        let r = r.unwrap();
        assert_eq!(r.operation.id, "upgrade-1-31");
        assert_eq!(r.operation.extra_args, vec!["-e", "kube_version=v1.31.4"]);
        let waves: Vec<(&str, Vec<&str>)> = r
            .waves
            .iter()
            .map(|w| (w.name.as_str(), w.clusters.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(
            waves,
            vec![
                ("canary", vec!["prod-sh-1"]),
                ("beijing", vec!["prod-bj-1", "prod-bj-2"]),
                ("rest", vec!["prod-sh-2"]),
            ]
        );
        assert_eq!(r.waves[1].max_parallel, Some(MaxParallel::Count(2)));
        assert_eq!(r.waves[2].max_parallel, Some(MaxParallel::Percent(25)));
        assert_eq!(r.bake, SignedDuration::from_mins(30));
        assert_eq!((r.max_failures, r.stop_after, r.rerun), (0, Some(0), 0));
    }

    #[test]
    fn unknown_keys_missing_clusters_and_a_bad_stop_after_are_errors_with_lines() {
        let text = EXAMPLE
            .replace("rerun: 0", "rerun: 0\nparallel: 3")
            .replace("stopAfter: canary", "stopAfter: canry");
        let (r, d) = check(&text);
        assert!(r.is_none());
        assert_eq!(
            d,
            vec![
                "19:1: unknown key \"parallel\" in rollout; allowed keys: operation, clusters, waves, bake, maxFailures, stopAfter, rerun".to_string(),
                "17:12: stopAfter \"canry\" names no wave of this rollout (waves: canary, beijing, rest)".to_string(),
            ],
            "{d:#?}"
        );
    }

    #[test]
    fn a_named_cluster_must_exist_and_take_part() {
        let text = EXAMPLE.replace("clusters: [prod-sh-1]", "clusters: [prod-sh-9, dev-1]");
        let (r, d) = check(&text);
        assert!(r.is_none());
        assert!(
            d[0].starts_with("9:16: cluster \"prod-sh-9\" does not exist"),
            "{d:#?}"
        );
        let text = EXAMPLE.replace("clusters: [prod-sh-1]", "clusters: [dev-1]");
        let (_, d) = check(&text);
        assert!(
            d.iter()
                .any(|l| l.starts_with("9:15: wave canary names cluster dev-1, which does not take part")),
            "{d:#?}"
        );
    }

    #[test]
    fn every_cluster_needs_a_wave_and_an_empty_wave_is_a_warning() {
        let text = EXAMPLE.replace("  - name: rest\n    maxParallel: 25%\n", "");
        let (r, d) = check(&text);
        assert!(r.is_none());
        assert!(
            d[0].starts_with("8:3: cluster(s) prod-sh-2 take part but no wave picks them"),
            "{d:#?}"
        );
        let text = EXAMPLE.replace("selector: {region: bj}", "selector: {region: gz}");
        let (r, d) = check(&text);
        assert!(r.is_some(), "a warning only");
        assert_eq!(d.len(), 1);
        assert!(
            d[0].starts_with("10:5: warning: wave beijing picks no cluster"),
            "{d:#?}"
        );
    }

    #[test]
    fn bad_durations_percentages_and_operations_are_errors() {
        let (_, d) = check(&EXAMPLE.replace("bake: 30m", "bake: half an hour"));
        assert_eq!(
            d,
            vec!["15:7: bake must be a duration such as 30m, 2h or 0s".to_string()]
        );
        let (_, d) = check(&EXAMPLE.replace("maxParallel: 25%", "maxParallel: 150%"));
        assert!(
            d[0].starts_with("14:18: maxParallel \"150%\" must be a number of clusters"),
            "{d:#?}"
        );
        let (_, d) = check(&EXAMPLE.replace("maxParallel: 2\n", "maxParallel: 0\n"));
        assert!(d[0].starts_with("12:18: maxParallel \"0\""), "{d:#?}");
        let (r, d) = check(&EXAMPLE.replace("  action: upgrade-cluster.yml\n", ""));
        assert!(r.is_none());
        assert!(
            d[0].starts_with("2:3: operation \"upgrade-1-31\" has no action"),
            "{d:#?}"
        );
        let (_, d) = check(&EXAMPLE.replace("maxFailures: 0", "maxFailures: -1"));
        assert_eq!(
            d,
            vec!["16:14: maxFailures must be an integer of at least 0".to_string()]
        );
    }

    #[test]
    fn names_and_selector_join_and_a_wave_without_either_takes_the_rest() {
        let text = "operation: {id: ping, action: ping.yml}\nclusters:\n  names: [dev-1]\n  selector: {region: bj}\nwaves:\n  - name: all\n";
        let (r, d) = check(text);
        assert_eq!(d, Vec::<String>::new());
        assert_eq!(
            r.unwrap().waves[0].clusters,
            vec!["dev-1", "prod-bj-1", "prod-bj-2"]
        );
    }

    #[test]
    fn max_parallel_percentages_round_up_and_never_reach_zero() {
        assert_eq!(MaxParallel::Percent(25).limit(10), 3);
        assert_eq!(MaxParallel::Percent(1).limit(10), 1);
        assert_eq!(MaxParallel::Percent(100).limit(7), 7);
        assert_eq!(MaxParallel::Count(50).limit(10), 50);
    }

    #[test]
    fn the_rollouts_directory_is_beside_kok_yml() {
        assert_eq!(rollouts_dir("clusters"), "rollouts");
        assert_eq!(rollouts_dir("infra/clusters"), "infra/rollouts");
    }
}
