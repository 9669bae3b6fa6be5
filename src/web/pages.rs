//! What each page shows, as plain values built from the view's snapshots (pure; the templates lay them out).

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use kube::ResourceExt;
use serde::Serialize;

use super::rollouts::{parts, rollout_rows, Part, RolloutRow};
use super::view::{CommitMeta, View};
use crate::api::{
    Cluster, ClusterOperation, ClusterStatus, NodeCounts, OperationLine, Phase, StatusState,
    CONDITION_RECONCILING, CONDITION_STALLED,
};
use crate::controller::queue::{
    format_duration, last_finished, operation_line, phase, queue_order, running_or_next, Wait,
};
use crate::controller::window::maintenance_wait;
use crate::health::certificates;
use crate::health::conditions::{HEALTHY, HEALTH_CONDITIONS};
use crate::plan::PLAN_CONTEXT;
use crate::report::status::{failure_words, operation_context, operation_status};

/// A cluster's state on the fleet page, most troubled first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Its directory failed validation, or its last run failed.
    Failed,
    /// Operations wait and none runs.
    Waiting,
    /// An operation runs.
    Running,
    /// Its last run succeeded and nothing waits.
    Succeeded,
    /// It never ran anything.
    Idle,
}

impl State {
    /// Every state, in the order the fleet page counts them.
    pub const ALL: [State; 5] = [
        State::Failed,
        State::Waiting,
        State::Running,
        State::Succeeded,
        State::Idle,
    ];

    /// The word in URLs and CSS classes.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Failed => "failed",
            State::Waiting => "waiting",
            State::Running => "running",
            State::Succeeded => "succeeded",
            State::Idle => "idle",
        }
    }
}

/// A cluster's health as its last check left it: from the Cluster's health conditions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthWord {
    /// A check failed.
    Unhealthy,
    /// Not checked yet (no kubeconfig, or health checks are off).
    Unknown,
    /// Every check held.
    Healthy,
}

impl HealthWord {
    /// Every word, in the order the fleet page counts them.
    pub const ALL: [HealthWord; 3] = [HealthWord::Unhealthy, HealthWord::Unknown, HealthWord::Healthy];

    /// The word in URLs and CSS classes.
    pub fn as_str(self) -> &'static str {
        match self {
            HealthWord::Unhealthy => "unhealthy",
            HealthWord::Unknown => "unknown",
            HealthWord::Healthy => "healthy",
        }
    }
}

/// What the health checks last said of a cluster.
#[derive(Clone, Debug, Serialize)]
pub struct Health {
    /// In one word.
    pub word: HealthWord,
    /// The checks that did not hold, as `condition: reason in words`.
    pub problems: Vec<String>,
    /// The API server's version.
    pub version: Option<String>,
    /// Nodes Ready and in all.
    pub nodes: Option<NodeCounts>,
    /// Fewer Nodes are Ready than there are.
    pub nodes_short: bool,
    /// The first of its certificates to expire, once a check read one.
    pub certificates: Option<CertificateDays>,
}

/// The first of a cluster's certificates to expire, in days.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CertificateDays {
    /// Whole days left until it expires (negative once it has expired).
    pub days_left: i64,
    /// `312d`, or `expired` once it has.
    pub short: String,
    /// `the API server's certificate "kube-apiserver"`.
    pub certificate: String,
    /// Its `notAfter`, RFC 3339.
    pub not_after: String,
    /// `CertificatesValid`'s status: `True`, `False` (inside the window, or expired: renew) or `Unknown`.
    pub valid: String,
    /// `CertificatesValid`'s message.
    pub message: String,
}

impl CertificateDays {
    /// Whether the cluster's certificates need renewing (`CertificatesValid` is False).
    pub fn renew(&self) -> bool {
        self.valid == "False"
    }
}

/// The first of the certificates in `status` to expire, at `now`.
fn certificate_days(status: &ClusterStatus, now: Timestamp) -> Option<CertificateDays> {
    let first = status.certificates.first()?;
    let days_left = certificates::days_left(first.not_after.0, now);
    let condition = status
        .conditions
        .iter()
        .find(|c| c.type_ == certificates::CERTIFICATES_VALID);
    Some(CertificateDays {
        days_left,
        short: if first.not_after.0 <= now {
            "expired".to_string()
        } else {
            format!("{days_left}d")
        },
        certificate: certificates::describe(first),
        not_after: first.not_after.0.to_string(),
        valid: condition.map_or_else(|| "Unknown".to_string(), |c| c.status.clone()),
        message: condition.map(|c| c.message.clone()).unwrap_or_default(),
    })
}

/// `NodesNotReady` as `nodes not ready`; the reasons people meet most get a sentence of their own.
pub fn reason_words(reason: &str) -> String {
    match reason {
        "NoSecret" => return "no ssh Secret named (none needed)".to_string(),
        "SecretFound" => return "ssh Secret found".to_string(),
        _ => {}
    }
    let mut words = String::new();
    for (i, c) in reason.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            words.push(' ');
        }
        words.push(c.to_ascii_lowercase());
    }
    words
}

/// The health of `cluster` from its status, at `now`.
pub fn health(cluster: Option<&Cluster>, now: Timestamp) -> Health {
    let status = cluster.and_then(|c| c.status.as_ref());
    let conditions = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let healthy = conditions.iter().find(|c| c.type_ == HEALTHY);
    let word = match healthy.map(|c| c.status.as_str()) {
        Some("True") => HealthWord::Healthy,
        Some("False") => HealthWord::Unhealthy,
        _ => HealthWord::Unknown,
    };
    let problems = conditions
        .iter()
        .filter(|c| HEALTH_CONDITIONS.contains(&c.type_.as_str()) && c.type_ != HEALTHY && c.status != "True")
        .map(|c| format!("{}: {}", c.type_, reason_words(&c.reason)))
        .collect();
    let nodes = status.and_then(|s| s.nodes.as_ref());
    Health {
        word,
        problems,
        version: status.and_then(|s| s.kubernetes_version.clone()),
        nodes: nodes.cloned(),
        nodes_short: nodes.is_some_and(|n| n.ready < n.total),
        certificates: status.and_then(|s| certificate_days(s, now)),
    }
}

/// The fleet page's filter (`?name=&state=&health=&label=key=value`).
#[derive(Clone, Debug, Default, serde::Deserialize, Serialize)]
pub struct Filter {
    /// Part of the cluster's name.
    pub name: Option<String>,
    /// One [`State`] word.
    pub state: Option<String>,
    /// One [`HealthWord`].
    pub health: Option<String>,
    /// `key=value` (or just `key`) of the cluster's labels.
    pub label: Option<String>,
    /// Which page of [`FLEET_PAGE_ROWS`] rows, from 1 (a word that is not a number is page 1).
    pub page: Option<String>,
}

/// Rows on one fleet page: 500 rows are about 250 KB of HTML, so a page stays small at any fleet size.
pub const FLEET_PAGE_ROWS: usize = 500;

impl Filter {
    /// The page asked for, from 1.
    fn page_number(&self) -> usize {
        self.page
            .as_deref()
            .and_then(|p| p.trim().parse::<usize>().ok())
            .unwrap_or(1)
            .max(1)
    }

    /// The query of page `page` under this filter: the filter's words that are set, and `page`.
    fn query(&self, page: usize) -> BTreeMap<&'static str, String> {
        let set = [
            ("name", &self.name),
            ("state", &self.state),
            ("health", &self.health),
            ("label", &self.label),
        ];
        let mut query: BTreeMap<&'static str, String> = set
            .into_iter()
            .filter_map(|(k, v)| {
                Some((
                    k,
                    v.as_deref().map(str::trim).filter(|v| !v.is_empty())?.to_string(),
                ))
            })
            .collect();
        query.insert("page", page.to_string());
        query
    }

    fn keeps(&self, row: &ClusterRow) -> bool {
        let given = |v: &Option<String>| {
            v.as_deref()
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        if given(&self.name).is_some_and(|n| !row.name.contains(&n)) {
            return false;
        }
        if given(&self.state).is_some_and(|s| s != row.state.as_str()) {
            return false;
        }
        if given(&self.health).is_some_and(|h| h != row.health.word.as_str()) {
            return false;
        }
        if let Some(label) = given(&self.label) {
            let (key, value) = match label.split_once('=') {
                Some((k, v)) => (k.trim().to_string(), Some(v.trim().to_string())),
                None => (label, None),
            };
            let found = row.labels.get(&key);
            if found.is_none() || value.is_some_and(|v| found != Some(&v)) {
                return false;
            }
        }
        true
    }
}

/// One operation in a list.
#[derive(Clone, Debug, Serialize)]
pub struct OpLine {
    /// Object name (the page's address).
    pub name: String,
    /// Operation id.
    pub id: String,
    /// Phase word.
    pub phase: String,
    /// Commit it came from.
    pub commit: String,
    /// The commit's first 8 characters.
    pub short: String,
    /// The commit's author and subject, when the repository has it.
    pub meta: Option<CommitMeta>,
    /// Why it waits, or what its run did.
    pub outcome: String,
    /// Started (RFC 3339), if it did.
    pub start: Option<String>,
    /// The same in seconds since 1970 (what the script counts the elapsed time from).
    pub start_second: Option<i64>,
    /// How long it ran, or runs so far.
    pub duration: Option<String>,
    /// The same in seconds.
    pub seconds: Option<i64>,
}

/// One cluster on the fleet page.
#[derive(Clone, Debug, Serialize)]
pub struct ClusterRow {
    /// Cluster name.
    pub name: String,
    /// Its state.
    pub state: State,
    /// What its health checks said.
    pub health: Health,
    /// What its queue does, in a sentence (without the elapsed time of a running operation).
    pub activity: String,
    /// The running or next operation.
    pub current: Option<OpLine>,
    /// The running operation's start in seconds since 1970, for the elapsed time the page shows after
    /// `activity` (and the script counts on).
    pub running_since: Option<i64>,
    /// The last finished operation.
    pub last: Option<OpLine>,
    /// Its labels (the user's, from cluster.yml).
    pub labels: BTreeMap<String, String>,
}

impl ClusterRow {
    /// What its queue does with the running operation's time so far: `running upgrade for 10m0s`.
    pub fn queue_words(&self) -> String {
        match (
            &self.running_since,
            self.current.as_ref().and_then(|c| c.duration.as_ref()),
        ) {
            (Some(_), Some(elapsed)) => format!("{} for {elapsed}", self.activity),
            _ => self.activity.clone(),
        }
    }

    /// How troubled, for the fleet's order: a failure first, then an unhealthy cluster, then by state.
    pub fn trouble(&self) -> (u8, State, HealthWord) {
        let rank = match (self.state, self.health.word) {
            (State::Failed, _) => 0,
            (_, HealthWord::Unhealthy) => 1,
            _ => 2,
        };
        (rank, self.state, self.health.word)
    }
}

/// A state's share of the fleet, for the counts and the state bar.
#[derive(Clone, Debug, Serialize)]
pub struct Count {
    /// State word.
    pub state: &'static str,
    /// Clusters in it.
    pub count: usize,
    /// Where its segment of the bar starts and how wide it is, in percent.
    pub x: f64,
    /// Width in percent.
    pub width: f64,
}

/// `/`: the fleet.
#[derive(Clone, Debug, Serialize)]
pub struct FleetPage {
    /// Clusters in each state (all clusters, before the filter).
    pub counts: Vec<Count>,
    /// Clusters by health word (all clusters, before the filter).
    pub health: Vec<Count>,
    /// Every cluster.
    pub total: usize,
    /// The rows of this page of those the filter keeps, trouble first.
    pub rows: Vec<ClusterRow>,
    /// How many rows the filter keeps, on every page.
    pub matching: usize,
    /// The first row of this page, from 1 (0 when no row matches).
    pub first_row: usize,
    /// This page, from 1, and how many there are.
    pub page: usize,
    pub pages: usize,
    /// The queries of the page before and after this one, when there are such pages.
    pub previous: Option<BTreeMap<&'static str, String>>,
    pub next: Option<BTreeMap<&'static str, String>>,
    /// The filter.
    pub filter: Filter,
    /// The rollouts, by name.
    pub rollouts: Vec<RolloutRow>,
}

fn start_of(op: &ClusterOperation) -> Option<Timestamp> {
    op.status.as_ref()?.start_time.as_ref().map(|t| t.0)
}

fn end_of(op: &ClusterOperation) -> Option<Timestamp> {
    op.status.as_ref()?.end_time.as_ref().map(|t| t.0)
}

fn op_line(op: &ClusterOperation, now: Timestamp) -> OpLine {
    line_of(operation_line(op), now)
}

/// `line` (a run, or what a Cluster's status says of one) as a list shows it at `now`.
fn line_of(line: OperationLine, now: Timestamp) -> OpLine {
    let start = line.start_time.as_ref().map(|t| t.0);
    let seconds = match (start, line.end_time.as_ref().map(|t| t.0)) {
        (Some(start), Some(end)) => Some(end.as_second() - start.as_second()),
        (Some(start), None) if line.phase == Phase::Running => Some(now.as_second() - start.as_second()),
        _ => None,
    };
    OpLine {
        name: line.name,
        id: line.id,
        phase: line.phase.as_str().to_string(),
        short: line.commit.chars().take(8).collect(),
        commit: line.commit,
        meta: None,
        outcome: line.outcome,
        start: start.map(|t| t.to_string()),
        start_second: start.map(|t| t.as_second()),
        duration: seconds.map(format_duration),
        seconds,
    }
}

/// `op_line` with the commit's author and subject from `view`.
fn op_line_with_commit(view: &dyn View, op: &ClusterOperation, now: Timestamp) -> OpLine {
    let mut line = op_line(op, now);
    line.meta = view.commit_meta(&line.commit);
    line
}

fn stalled(cluster: &Cluster) -> Option<String> {
    let conditions = &cluster.status.as_ref()?.conditions;
    conditions
        .iter()
        .find(|c| c.type_ == CONDITION_STALLED && c.status == "True")
        .map(|c| c.message.clone())
}

/// The waiting operations of a cluster, in queue order.
fn waiting(ops: &[ClusterOperation]) -> Vec<&ClusterOperation> {
    let mut waiting: Vec<_> = ops
        .iter()
        .filter(|op| matches!(phase(op), Phase::Pending | Phase::Queued))
        .collect();
    waiting.sort_by(|a, b| queue_order(a, b));
    waiting
}

/// The row of cluster `name` (its object, if it exists, and its operations) at `now`.
pub fn cluster_row(
    name: &str,
    cluster: Option<&Cluster>,
    ops: &[ClusterOperation],
    now: Timestamp,
) -> ClusterRow {
    let current = running_or_next(ops).map(operation_line);
    let last = last_finished(ops).map(operation_line);
    row_of(name, cluster, current, last, now)
}

/// The row of `cluster` from what its status says of its queue (`currentOperation`, `lastFinished`),
/// without its runs: what the controller wrote at its last reconcile, at most a second behind the runs.
pub fn cluster_row_from_status(cluster: &Cluster, now: Timestamp) -> ClusterRow {
    let status = cluster.status.as_ref();
    let current = status.and_then(|s| s.current_operation.clone());
    let last = status.and_then(|s| s.last_finished.clone());
    row_of(&cluster.name_any(), Some(cluster), current, last, now)
}

/// The row of cluster `name` with its running or next operation and the one that finished last.
fn row_of(
    name: &str,
    cluster: Option<&Cluster>,
    current: Option<OperationLine>,
    last: Option<OperationLine>,
    now: Timestamp,
) -> ClusterRow {
    let running = current.as_ref().filter(|op| op.phase == Phase::Running);
    let problem = cluster.and_then(stalled);
    let state = if problem.is_some()
        || (running.is_none() && last.as_ref().is_some_and(|op| op.phase == Phase::Failed))
    {
        State::Failed
    } else if running.is_some() {
        State::Running
    } else if current.is_some() {
        State::Waiting
    } else if last.is_some() {
        State::Succeeded
    } else {
        State::Idle
    };
    let activity = match (&problem, &current) {
        (Some(problem), _) => format!("refused: {problem}"),
        (None, Some(op)) if op.phase == Phase::Running => format!("running {}", op.id),
        (None, Some(op)) if op.outcome.is_empty() => format!("next: {}, not considered yet", op.id),
        (None, Some(op)) => format!("next: {}, {}", op.id, op.outcome),
        (None, None) => "nothing to run".to_string(),
    };
    let running_since = running
        .and_then(|op| op.start_time.as_ref())
        .map(|t| t.0.as_second());
    ClusterRow {
        name: name.to_string(),
        state,
        health: health(cluster, now),
        activity,
        running_since,
        current: current.map(|op| line_of(op, now)),
        last: last.map(|op| line_of(op, now)),
        labels: cluster
            .and_then(|c| c.metadata.labels.clone())
            .unwrap_or_default(),
    }
}

/// Counts and bar segments of `words` among `total` rows.
fn shares<T: Copy + PartialEq>(
    all: &[T],
    word: impl Fn(T) -> &'static str,
    of: impl Fn(&ClusterRow) -> T,
    rows: &[ClusterRow],
) -> Vec<Count> {
    let parts: Vec<_> = all
        .iter()
        .map(|s| (word(*s), rows.iter().filter(|r| of(r) == *s).count()))
        .collect();
    segments(&parts)
}

/// The bar segments of `parts` (a word and its count each), in their order, widths in percent of all.
pub(crate) fn segments(parts: &[(&'static str, usize)]) -> Vec<Count> {
    let total: usize = parts.iter().map(|(_, n)| n).sum();
    let mut x = 0.0;
    parts
        .iter()
        .map(|&(state, count)| {
            let width = if total == 0 {
                0.0
            } else {
                // Two decimals: the bar needs no more, and 1,000 clusters' page stays small.
                (10_000.0 * count as f64 / total as f64).round() / 100.0
            };
            let c = Count {
                state,
                count,
                x,
                width,
            };
            x = ((x + width) * 100.0).round() / 100.0;
            c
        })
        .collect()
}

/// Most characters of an outcome or a queue's sentence on the fleet page (the cluster's page has all).
const OUTCOME_CHARS: usize = 60;

/// `text` cut to `max` characters, with `…` when it was longer.
fn shorten(text: &mut String, max: usize) {
    if let Some((cut, _)) = text.char_indices().nth(max) {
        text.truncate(cut);
        text.push('…');
    }
}

/// The fleet page of `view` at `now`, filtered by `filter`.
pub fn fleet(view: &dyn View, filter: Filter, now: Timestamp) -> FleetPage {
    let mut rows: Vec<ClusterRow> = view
        .clusters()
        .iter()
        .map(|c| {
            let name = c.name_any();
            let ops = view.operations_of(&name);
            cluster_row(&name, Some(c), &ops, now)
        })
        .collect();
    rows.sort_by(|a, b| a.trouble().cmp(&b.trouble()).then_with(|| a.name.cmp(&b.name)));
    let counts = shares(&State::ALL, State::as_str, |r| r.state, &rows);
    let health = shares(&HealthWord::ALL, HealthWord::as_str, |r| r.health.word, &rows);
    let total = rows.len();
    rows.retain(|r| filter.keeps(r));
    let matching = rows.len();
    let pages = matching.div_ceil(FLEET_PAGE_ROWS).max(1);
    let page = filter.page_number().min(pages);
    let start = (page - 1) * FLEET_PAGE_ROWS;
    rows.truncate(start + FLEET_PAGE_ROWS);
    rows.drain(..start);
    for row in &mut rows {
        if let Some(last) = row.last.as_mut() {
            shorten(&mut last.outcome, OUTCOME_CHARS);
        }
        if let Some(current) = row.current.as_mut() {
            shorten(&mut current.outcome, OUTCOME_CHARS);
        }
        shorten(&mut row.activity, OUTCOME_CHARS);
    }
    FleetPage {
        counts,
        health,
        total,
        first_row: if rows.is_empty() { 0 } else { start + 1 },
        rows,
        matching,
        page,
        pages,
        previous: (page > 1).then(|| filter.query(page - 1)),
        next: (page < pages).then(|| filter.query(page + 1)),
        filter,
        rollouts: rollout_rows(view),
    }
}

/// A name and a value, for settings lists.
#[derive(Clone, Debug, Serialize)]
pub struct Setting {
    /// What it is.
    pub name: String,
    /// Its value.
    pub value: String,
}

/// One condition of a Cluster.
#[derive(Clone, Debug, Serialize)]
pub struct ConditionLine {
    /// Its type.
    pub name: String,
    /// True, False or Unknown.
    pub status: String,
    /// The reason in words.
    pub reason: String,
    /// The message.
    pub message: String,
    /// When it last changed (RFC 3339).
    pub since: String,
    /// Whether this status is good news (`Ready` or a check True, `Stalled` False), `None` when it is
    /// neither (`Reconciling`).
    pub good: Option<bool>,
}

/// One host of the current inventory.
#[derive(Clone, Debug, Serialize)]
pub struct HostEntry {
    /// Inventory name.
    pub name: String,
    /// The addresses its variables give it.
    pub addresses: String,
    /// The groups it is in (child groups resolved), `all` left out.
    pub groups: String,
}

/// One bar of the recent run durations.
#[derive(Clone, Debug, Serialize)]
pub struct Bar {
    /// Left edge, in the picture's units.
    pub x: u32,
    /// Top edge.
    pub y: u32,
    /// Height.
    pub height: u32,
    /// Phase word (its colour).
    pub phase: String,
    /// `install: 3m12s, Succeeded`.
    pub label: String,
}

/// Width and height of the run-duration picture, and the width of one bar.
const CHART: (u32, u32, u32) = (200, 40, 10);

/// The durations of the last runs of `history` (newest first) as bars, oldest on the left.
fn duration_bars(history: &[OpLine]) -> Vec<Bar> {
    let (_, height, bar) = CHART;
    let recent: Vec<&OpLine> = history
        .iter()
        .filter(|l| l.seconds.is_some())
        .take((CHART.0 / bar) as usize)
        .collect();
    let longest = recent.iter().filter_map(|l| l.seconds).max().unwrap_or(1).max(1);
    recent
        .iter()
        .rev()
        .enumerate()
        .map(|(i, l)| {
            let secs = l.seconds.unwrap_or(0).max(0);
            // At least 1 unit high, so a run of a second still shows.
            let h = ((secs * i64::from(height - 2) / longest) as u32).max(1);
            Bar {
                x: i as u32 * bar,
                y: height - h,
                height: h,
                phase: l.phase.to_ascii_lowercase(),
                label: format!(
                    "{}: {}, {}",
                    l.id,
                    l.duration.as_deref().unwrap_or_default(),
                    l.phase
                ),
            }
        })
        .collect()
}

/// When the cluster's operations may next start, in a sentence.
fn next_window(cluster: &Cluster, now: Timestamp) -> String {
    let Some(m) = cluster.spec.maintenance.as_ref() else {
        return "any time: no maintenance windows".to_string();
    };
    match maintenance_wait(m, now) {
        Ok(()) if m.windows.is_empty() => "any time: no windows, and no freeze now".to_string(),
        Ok(()) => "a window is open now".to_string(),
        Err(Wait::Window { at, within, .. }) => format!("next window opens {at} (in {within})"),
        Err(wait) => wait.to_string(),
    }
}

/// `/clusters/<name>`: one cluster.
#[derive(Clone, Debug, Serialize)]
pub struct ClusterPage {
    /// Its row as the fleet page shows it.
    pub row: ClusterRow,
    /// The running operation and the waiting ones, in queue order, each with its reason.
    pub queue: Vec<OpLine>,
    /// Finished operations, newest first: the changelog.
    pub history: Vec<OpLine>,
    /// The recent runs' durations, oldest first.
    pub bars: Vec<Bar>,
    /// The picture's width: as many bars as there are, at least a few bars wide.
    pub chart_width: u32,
    /// The longest of them.
    pub longest: Option<String>,
    /// When its operations may next start.
    pub window: Option<String>,
    /// Settings and references (names only, never Secret content).
    pub settings: Vec<Setting>,
    /// Its conditions.
    pub conditions: Vec<ConditionLine>,
    /// The hosts of the inventory at the cluster's current revision.
    pub hosts: Vec<HostEntry>,
    /// The commit `hosts` are read at.
    pub hosts_at: Option<String>,
    /// The rollouts it takes part in.
    pub rollouts: Vec<Part>,
}

/// The hosts of the inventory of `cluster`'s current revision.
fn current_hosts(view: &dyn View, cluster: &Cluster) -> (Vec<HostEntry>, Option<String>) {
    let source = &cluster.spec.source;
    let Some((_, sha)) = source.revision.split_once("@sha1:") else {
        return (Vec::new(), None);
    };
    let Some(inventory) = view.inventory(sha, &source.path) else {
        return (Vec::new(), None);
    };
    let groups: Vec<(&String, BTreeSet<String>)> = inventory
        .groups
        .iter()
        .filter(|g| *g != "all")
        .map(|g| (g, inventory.hosts_of(g)))
        .collect();
    let hosts = inventory
        .hosts
        .iter()
        .map(|h| HostEntry {
            name: h.clone(),
            addresses: inventory
                .addresses
                .get(h)
                .map(|a| a.join(", "))
                .unwrap_or_default(),
            groups: groups
                .iter()
                .filter(|(_, members)| members.contains(h))
                .map(|(g, _)| g.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
        .collect();
    (hosts, Some(sha.to_string()))
}

fn settings_of(cluster: &Cluster) -> Vec<Setting> {
    let s = &cluster.spec;
    let mut settings = Vec::new();
    let mut add = |name: &str, value: Option<String>| {
        if let Some(value) = value {
            settings.push(Setting {
                name: name.to_string(),
                value,
            });
        }
    };
    add(
        "Source",
        Some(format!("{} at {}", s.source.path, s.source.revision)),
    );
    add("Inventory ConfigMap", Some(s.hosts_conf_ref.name.clone()));
    add("Vars ConfigMap", s.vars_conf_ref.as_ref().map(|r| r.name.clone()));
    if !s.vars_files.is_empty() {
        add(
            "Variables files",
            Some(format!("{} in group_vars/ and host_vars/", s.vars_files.len())),
        );
    }
    add(
        "Variables files",
        s.vars_files_ref
            .as_ref()
            .map(|r| format!("group_vars/ and host_vars/, listed in ConfigMap {}", r.name)),
    );
    add(
        "Vault password Secret",
        s.vault_password_ref.as_ref().map(|r| r.name.clone()),
    );
    add("ssh Secret", s.ssh_auth_ref.as_ref().map(|r| r.name.clone()));
    add(
        "Kubeconfig Secret",
        s.kubeconfig_secret_ref.as_ref().map(|r| r.name.clone()),
    );
    add("Image", s.defaults.image.clone());
    add("Service account", s.defaults.service_account.clone());
    add(
        "Deadline",
        s.defaults.active_deadline_seconds.map(format_duration),
    );
    add("Start timeout", s.defaults.start_timeout.map(format_duration));
    add("History limit", s.defaults.history_limit.map(|d| d.to_string()));
    add("Facts playbook", s.defaults.facts_playbook.clone());
    settings
}

fn conditions_of(cluster: &Cluster) -> Vec<ConditionLine> {
    let mut lines: Vec<ConditionLine> = cluster
        .status
        .iter()
        .flat_map(|s| &s.conditions)
        .map(|c| ConditionLine {
            name: c.type_.clone(),
            status: c.status.clone(),
            reason: reason_words(&c.reason),
            message: c.message.clone(),
            since: c.last_transition_time.0.to_string(),
            good: match c.type_.as_str() {
                CONDITION_RECONCILING => None,
                CONDITION_STALLED => Some(c.status == "False"),
                _ => Some(c.status == "True"),
            },
        })
        .collect();
    // Health first, as the checks list them; then the reconciler's.
    let rank = |l: &ConditionLine| {
        HEALTH_CONDITIONS
            .iter()
            .position(|h| *h == l.name)
            .unwrap_or(HEALTH_CONDITIONS.len())
    };
    lines.sort_by_key(rank);
    lines
}

/// The page of cluster `name`, `None` when kok knows neither the cluster nor operations of it.
pub fn cluster(view: &dyn View, name: &str, now: Timestamp) -> Option<ClusterPage> {
    let cluster = view.clusters().into_iter().find(|c| c.name_any() == name);
    let ops = view.operations_of(name);
    if cluster.is_none() && ops.is_empty() {
        return None;
    }
    let row = cluster_row(name, cluster.as_ref(), &ops, now);
    let mut queue: Vec<_> = ops.iter().filter(|op| phase(op) == Phase::Running).collect();
    queue.extend(waiting(&ops));
    let mut finished: Vec<_> = ops.iter().filter(|op| phase(op).is_terminal()).collect();
    finished.sort_by(|a, b| end_of(b).cmp(&end_of(a)).then_with(|| queue_order(b, a)));
    let history: Vec<OpLine> = finished
        .iter()
        .map(|op| op_line_with_commit(view, op, now))
        .collect();
    let bars = duration_bars(&history);
    let longest = history
        .iter()
        .take(bars.len())
        .filter_map(|l| l.seconds)
        .max()
        .map(format_duration);
    let (hosts, hosts_at) = cluster
        .as_ref()
        .map(|c| current_hosts(view, c))
        .unwrap_or_default();
    Some(ClusterPage {
        row,
        queue: queue
            .into_iter()
            .map(|op| op_line_with_commit(view, op, now))
            .collect(),
        history,
        chart_width: (bars.len() as u32).max(6) * CHART.2,
        bars,
        longest,
        window: cluster.as_ref().map(|c| next_window(c, now)),
        settings: cluster.as_ref().map(settings_of).unwrap_or_default(),
        conditions: cluster.as_ref().map(conditions_of).unwrap_or_default(),
        hosts,
        hosts_at,
        rollouts: parts(view, &ops),
    })
}

/// One host's counts in a run.
#[derive(Clone, Debug, Serialize)]
pub struct HostLine {
    /// Inventory name.
    pub host: String,
    /// Tasks ok.
    pub ok: u32,
    /// Tasks changed.
    pub changed: u32,
    /// Tasks failed.
    pub failed: u32,
    /// Unreachable.
    pub unreachable: u32,
    /// Tasks skipped.
    pub skipped: u32,
}

/// A moment of a run: what happened, when, and how long after the moment before.
#[derive(Clone, Debug, Serialize)]
pub struct Moment {
    /// `Created`, `Started`, `Ended`.
    pub name: String,
    /// When (RFC 3339).
    pub at: String,
    /// `waited 5s`, `ran 3m12s`.
    pub after: Option<String>,
}

/// A commit status as the pages show it.
#[derive(Clone, Debug, Serialize)]
pub struct StatusLine {
    /// `kok/<cluster>/<id>`.
    pub context: String,
    /// pending, running, success, failure, error.
    pub state: String,
    /// What it says.
    pub description: String,
}

/// `/operations/<name>`: one run.
#[derive(Clone, Debug, Serialize)]
pub struct OperationPage {
    /// Its line as lists show it (with its commit's author and subject).
    pub line: OpLine,
    /// The cluster.
    pub cluster: String,
    /// Created, started, ended, each with the time since the one before.
    pub times: Vec<Moment>,
    /// The entry script's steps in order.
    pub steps: Vec<String>,
    /// Per-host counts from the run's summary.
    pub hosts: Vec<HostLine>,
    /// The first failure: step, task, host, message.
    pub failure: Option<Setting>,
    /// The status kok gives the commit for it.
    pub status: StatusLine,
    /// The Job, once created.
    pub job: Option<String>,
    /// The run has finished (the log is whole).
    pub finished: bool,
    /// The log so far, when there is one.
    pub log: Option<String>,
    /// Where the live log continues (bytes of `log`).
    pub log_offset: usize,
}

fn command(action: &str, args: &[String]) -> String {
    std::iter::once(action)
        .chain(args.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The entry script's steps of `op`, in the order it runs them.
fn steps_of(op: &ClusterOperation) -> Vec<String> {
    let spec = &op.spec;
    let hook = |kind: &str, hooks: &[crate::api::Hook]| -> Vec<String> {
        hooks
            .iter()
            .enumerate()
            .map(|(i, h)| {
                format!(
                    "{kind} {}/{}: {}",
                    i + 1,
                    hooks.len(),
                    command(&h.action, &h.extra_args)
                )
            })
            .collect()
    };
    let mut steps = hook("pre-hook", &spec.pre_hooks);
    if let Some(facts) = spec.facts_playbook.as_ref() {
        steps.push(format!("facts: {}", facts.path));
    }
    steps.push(format!(
        "{}: {}",
        spec.action_type.as_str(),
        command(&spec.action, &spec.extra_args)
    ));
    steps.extend(hook("post-hook", &spec.post_hooks));
    steps
}

/// Created, started and ended, each with how long after the one before.
fn moments(op: &ClusterOperation) -> Vec<Moment> {
    let created = op.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let mut times = Vec::new();
    let mut before: Option<Timestamp> = None;
    for (name, verb, t) in [
        ("Created", "", created),
        ("Started", "waited", start_of(op)),
        ("Ended", "ran", end_of(op)),
    ] {
        let Some(t) = t else { continue };
        times.push(Moment {
            name: name.to_string(),
            at: t.to_string(),
            after: before.map(|b| format!("{verb} {}", format_duration(t.as_second() - b.as_second()))),
        });
        before = Some(t);
    }
    times
}

/// The page of operation `op` with its `log` so far; `view` gives its commit's author and subject.
pub fn operation(
    view: &dyn View,
    op: &ClusterOperation,
    log: Option<String>,
    now: Timestamp,
) -> OperationPage {
    let status = op.status.as_ref();
    let hosts = status
        .and_then(|s| s.summary.as_ref())
        .map(|s| {
            s.hosts
                .iter()
                .map(|(host, c)| HostLine {
                    host: host.clone(),
                    ok: c.ok,
                    changed: c.changed,
                    failed: c.failed,
                    unreachable: c.unreachable,
                    skipped: c.skipped,
                })
                .collect()
        })
        .unwrap_or_default();
    let failure = status.and_then(|s| s.failure.as_deref()).map(|f| Setting {
        name: [f.step.as_deref(), f.task.as_deref(), f.host.as_deref()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(" · "),
        value: failure_words(f),
    });
    let p = phase(op);
    let message = status.and_then(|s| s.message.as_deref());
    let reported = operation_status(
        op,
        p,
        message,
        None,
        op.namespace().as_deref().unwrap_or_default(),
    );
    OperationPage {
        line: op_line_with_commit(view, op, now),
        cluster: op.spec.cluster.clone(),
        times: moments(op),
        steps: steps_of(op),
        hosts,
        failure,
        status: StatusLine {
            context: reported.context,
            state: state_word(reported.state),
            description: reported.description,
        },
        job: status.and_then(|s| s.job_ref.clone()),
        finished: p.is_terminal(),
        log_offset: log.as_ref().map(String::len).unwrap_or(0),
        log,
    }
}

/// `/commits/<sha>`: what kok did with one commit.
#[derive(Clone, Debug, Serialize)]
pub struct CommitPage {
    /// The commit as asked for.
    pub sha: String,
    /// Its author, subject and time, when the repository has it.
    pub meta: Option<CommitMeta>,
    /// Every status kok gave it: its operations' (from the caches, linked to their pages) and what it
    /// noted besides (`kok/sync`, `kok/plan`, operations gone from history).
    pub statuses: Vec<CommitLine>,
    /// The `kok/plan` status kok gave it as a pull request's head, when it was one.
    pub plan: Option<CommitLine>,
    /// That plan in full, while kok keeps it (the service keeps the plans of its latest heads).
    pub plan_text: Option<String>,
}

/// One status on a commit.
#[derive(Clone, Debug, Serialize)]
pub struct CommitLine {
    /// The status.
    pub status: StatusLine,
    /// When it was noted (RFC 3339), for a noted status.
    pub time: Option<String>,
    /// The operation's page, while the operation is in history.
    pub operation: Option<String>,
}

/// The page of commit `sha` (a prefix of at least 7 characters matches the operations; the notes and
/// the author need the whole sha).
pub fn commit(view: &dyn View, sha: &str) -> CommitPage {
    let matches = |commit: &str| sha.len() >= 7 && commit.starts_with(sha);
    let ops: Vec<ClusterOperation> = view
        .clusters()
        .iter()
        .flat_map(|c| view.operations_of(&c.name_any()))
        .filter(|op| matches(&op.spec.source.commit))
        .collect();
    let full = ops
        .first()
        .map(|op| op.spec.source.commit.clone())
        .unwrap_or_else(|| sha.to_string());
    let mut statuses: Vec<CommitLine> = ops
        .iter()
        .map(|op| {
            let p = phase(op);
            let message = op.status.as_ref().and_then(|s| s.message.clone());
            let s = operation_status(op, p, message.as_deref(), None, "");
            CommitLine {
                status: StatusLine {
                    context: operation_context(&op.spec.cluster, &op.spec.id),
                    state: state_word(s.state),
                    description: s.description,
                },
                time: None,
                operation: Some(op.name_any()),
            }
        })
        .collect();
    let mut plan = None;
    for note in view.notes(&full) {
        let noted = CommitLine {
            status: StatusLine {
                context: note.context.clone(),
                state: state_word(note.state),
                description: note.description.clone(),
            },
            time: Some(note.time.clone()),
            operation: None,
        };
        if note.context == PLAN_CONTEXT {
            plan = Some(noted.clone());
        }
        match statuses.iter_mut().find(|l| l.status.context == note.context) {
            Some(line) => line.time = Some(note.time),
            None => statuses.push(noted),
        }
    }
    statuses.sort_by(|a, b| a.status.context.cmp(&b.status.context));
    CommitPage {
        meta: view.commit_meta(&full),
        plan_text: view.plan(&full),
        sha: full,
        statuses,
        plan,
    }
}

/// A commit status state as forges and notes spell it.
fn state_word(state: StatusState) -> String {
    format!("{state:?}").to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_s_reason_reads_as_words() {
        assert_eq!(reason_words("NodesNotReady"), "nodes not ready");
        assert_eq!(reason_words("ApiServerAnswers"), "api server answers");
        assert_eq!(reason_words("NoSecret"), "no ssh Secret named (none needed)");
    }

    #[test]
    fn a_long_outcome_is_cut_at_a_character() {
        let mut text = "ééé".repeat(10);
        shorten(&mut text, 4);
        assert_eq!(text, "éééé…");
        let mut short = "ok".to_string();
        shorten(&mut short, 4);
        assert_eq!(short, "ok");
    }
}
