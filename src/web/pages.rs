//! What each page shows, as plain values built from the view's snapshots (pure; the templates lay them out).

use std::collections::BTreeMap;

use jiff::Timestamp;
use kube::ResourceExt;
use serde::Serialize;

use super::view::View;
use crate::api::{Cluster, ClusterOperation, Phase, StatusState};
use crate::controller::queue::{format_duration, phase, queue_order};
use crate::report::status::{failure_words, operation_context, operation_status, summary_words};

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

/// The fleet page's filter (`?name=&state=&label=key=value`).
#[derive(Clone, Debug, Default, serde::Deserialize, Serialize)]
pub struct Filter {
    /// Part of the cluster's name.
    pub name: Option<String>,
    /// One [`State`] word.
    pub state: Option<String>,
    /// `key=value` (or just `key`) of the cluster's labels.
    pub label: Option<String>,
}

impl Filter {
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
        if let Some(label) = given(&self.label) {
            let (key, value) = match label.split_once('=') {
                Some((k, v)) => (k.to_string(), Some(v.to_string())),
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
    /// Why it waits, or what its run did.
    pub outcome: String,
    /// Started (RFC 3339), if it did.
    pub start: Option<String>,
    /// How long it ran, or runs so far.
    pub duration: Option<String>,
}

/// One cluster on the fleet page.
#[derive(Clone, Debug, Serialize)]
pub struct ClusterRow {
    /// Cluster name.
    pub name: String,
    /// Its state.
    pub state: State,
    /// What its queue does, in a sentence.
    pub activity: String,
    /// The running or next operation.
    pub current: Option<OpLine>,
    /// The last finished operation.
    pub last: Option<OpLine>,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
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
    /// Every cluster.
    pub total: usize,
    /// The rows the filter keeps, trouble first.
    pub rows: Vec<ClusterRow>,
    /// The filter.
    pub filter: Filter,
}

fn start_of(op: &ClusterOperation) -> Option<Timestamp> {
    op.status.as_ref()?.start_time.as_ref().map(|t| t.0)
}

fn end_of(op: &ClusterOperation) -> Option<Timestamp> {
    op.status.as_ref()?.end_time.as_ref().map(|t| t.0)
}

fn op_line(op: &ClusterOperation, now: Timestamp) -> OpLine {
    let status = op.status.as_ref();
    let p = phase(op);
    let message = status.and_then(|s| s.message.clone()).unwrap_or_default();
    let outcome = match (p, status) {
        (Phase::Failed, Some(s)) if s.failure.is_some() => {
            s.failure.as_deref().map(failure_words).unwrap_or_default()
        }
        (Phase::Succeeded, Some(s)) if s.summary.is_some() => {
            s.summary.as_deref().map(summary_words).unwrap_or_default()
        }
        _ => message,
    };
    let duration = match (start_of(op), end_of(op)) {
        (Some(start), Some(end)) => Some(format_duration(end.as_second() - start.as_second())),
        (Some(start), None) if p == Phase::Running => {
            Some(format_duration(now.as_second() - start.as_second()))
        }
        _ => None,
    };
    let commit = op.spec.source.commit.clone();
    OpLine {
        name: op.name_any(),
        id: op.spec.id.clone(),
        phase: p.as_str().to_string(),
        short: commit.chars().take(8).collect(),
        commit,
        outcome,
        start: start_of(op).map(|t| t.to_string()),
        duration,
    }
}

fn stalled(cluster: &Cluster) -> Option<String> {
    let conditions = &cluster.status.as_ref()?.conditions;
    conditions
        .iter()
        .find(|c| c.type_ == "Stalled" && c.status == "True")
        .map(|c| c.message.clone())
}

fn last_finished(ops: &[ClusterOperation]) -> Option<&ClusterOperation> {
    ops.iter()
        .filter(|op| phase(op).is_terminal())
        .max_by(|a, b| end_of(a).cmp(&end_of(b)).then_with(|| queue_order(a, b)))
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
    let running = ops.iter().find(|op| phase(op) == Phase::Running);
    let next = waiting(ops).into_iter().next();
    let last = last_finished(ops);
    let problem = cluster.and_then(stalled);
    let state =
        if problem.is_some() || (running.is_none() && last.is_some_and(|op| phase(op) == Phase::Failed)) {
            State::Failed
        } else if running.is_some() {
            State::Running
        } else if next.is_some() {
            State::Waiting
        } else if last.is_some() {
            State::Succeeded
        } else {
            State::Idle
        };
    let current = running.or(next).map(|op| op_line(op, now));
    let activity = match (&problem, running, next) {
        (Some(problem), _, _) => format!("refused: {problem}"),
        (None, Some(op), _) => format!(
            "running {} for {}",
            op.spec.id,
            current
                .as_ref()
                .and_then(|c| c.duration.clone())
                .unwrap_or_default()
        ),
        (None, None, Some(op)) => {
            let why = op
                .status
                .as_ref()
                .and_then(|s| s.message.as_deref())
                .unwrap_or("not considered yet");
            format!("next: {}, {why}", op.spec.id)
        }
        (None, None, None) => "nothing to run".to_string(),
    };
    ClusterRow {
        name: name.to_string(),
        state,
        activity,
        current,
        last: last.map(|op| op_line(op, now)),
        labels: cluster
            .and_then(|c| c.metadata.labels.clone())
            .unwrap_or_default(),
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
    rows.sort_by(|a, b| a.state.cmp(&b.state).then_with(|| a.name.cmp(&b.name)));
    let total = rows.len();
    let mut x = 0.0;
    let counts = State::ALL
        .iter()
        .map(|s| {
            let count = rows.iter().filter(|r| r.state == *s).count();
            let width = if total == 0 {
                0.0
            } else {
                100.0 * count as f64 / total as f64
            };
            let c = Count {
                state: s.as_str(),
                count,
                x,
                width,
            };
            x += width;
            c
        })
        .collect();
    rows.retain(|r| filter.keeps(r));
    FleetPage {
        counts,
        total,
        rows,
        filter,
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

/// `/clusters/<name>`: one cluster.
#[derive(Clone, Debug, Serialize)]
pub struct ClusterPage {
    /// Its row as the fleet page shows it.
    pub row: ClusterRow,
    /// The running operation and the waiting ones, in queue order, each with its reason.
    pub queue: Vec<OpLine>,
    /// Finished operations, newest first: the changelog.
    pub history: Vec<OpLine>,
    /// Settings and references (names only, never Secret content).
    pub settings: Vec<Setting>,
    /// Conditions as `type: status reason message`.
    pub conditions: Vec<Setting>,
    /// Hosts of the last run that reported any, with its operation.
    pub hosts: Vec<String>,
    /// Whose run `hosts` come from.
    pub hosts_from: Option<String>,
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
    let reported = finished.iter().find(|op| {
        op.status
            .as_ref()
            .and_then(|s| s.summary.as_ref())
            .is_some_and(|s| !s.hosts.is_empty())
    });
    let mut settings = Vec::new();
    let mut conditions = Vec::new();
    if let Some(c) = &cluster {
        let s = &c.spec;
        let mut add = |name: &str, value: Option<String>| {
            if let Some(value) = value {
                settings.push(Setting {
                    name: name.to_string(),
                    value,
                });
            }
        };
        add(
            "source",
            Some(format!("{} at {}", s.source.path, s.source.revision)),
        );
        add("inventory", Some(s.hosts_conf_ref.name.clone()));
        add("vars", Some(s.vars_conf_ref.name.clone()));
        add("sshAuthSecret", s.ssh_auth_ref.as_ref().map(|r| r.name.clone()));
        add("image", s.defaults.image.clone());
        add("serviceAccount", s.defaults.service_account.clone());
        add(
            "activeDeadlineSeconds",
            s.defaults.active_deadline_seconds.map(|d| d.to_string()),
        );
        add("historyLimit", s.defaults.history_limit.map(|d| d.to_string()));
        add("factsPlaybook", s.defaults.facts_playbook.clone());
        for cond in c.status.iter().flat_map(|s| &s.conditions) {
            conditions.push(Setting {
                name: cond.type_.clone(),
                value: format!("{} {}: {}", cond.status, cond.reason, cond.message),
            });
        }
    }
    Some(ClusterPage {
        row,
        queue: queue.into_iter().map(|op| op_line(op, now)).collect(),
        history: finished.iter().map(|op| op_line(op, now)).collect(),
        settings,
        conditions,
        hosts: reported
            .and_then(|op| op.status.as_ref()?.summary.as_ref())
            .map(|s| s.hosts.keys().cloned().collect())
            .unwrap_or_default(),
        hosts_from: reported.map(|op| op.name_any()),
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

/// `/operations/<name>`: one run.
#[derive(Clone, Debug, Serialize)]
pub struct OperationPage {
    /// Its line as lists show it.
    pub line: OpLine,
    /// The cluster.
    pub cluster: String,
    /// Created, started, ended.
    pub times: Vec<Setting>,
    /// The entry script's steps in order.
    pub steps: Vec<String>,
    /// Per-host counts from the run's summary.
    pub hosts: Vec<HostLine>,
    /// The first failure: step, task, host, message.
    pub failure: Option<Setting>,
    /// The status kok gives the commit for it.
    pub context: String,
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

/// The page of operation `op` with its `log` so far.
pub fn operation(op: &ClusterOperation, log: Option<String>, now: Timestamp) -> OperationPage {
    let spec = &op.spec;
    let status = op.status.as_ref();
    let mut steps: Vec<String> = spec
        .pre_hooks
        .iter()
        .enumerate()
        .map(|(i, h)| {
            format!(
                "pre-hook {}/{}: {}",
                i + 1,
                spec.pre_hooks.len(),
                command(&h.action, &h.extra_args)
            )
        })
        .collect();
    if let Some(facts) = spec.facts_playbook.as_ref() {
        steps.push(format!("facts: {}", facts.path));
    }
    steps.push(format!(
        "{}: {}",
        spec.action_type.as_str(),
        command(&spec.action, &spec.extra_args)
    ));
    steps.extend(spec.post_hooks.iter().enumerate().map(|(i, h)| {
        format!(
            "post-hook {}/{}: {}",
            i + 1,
            spec.post_hooks.len(),
            command(&h.action, &h.extra_args)
        )
    }));
    let mut times = Vec::new();
    let mut time = |name: &str, t: Option<Timestamp>| {
        if let Some(t) = t {
            times.push(Setting {
                name: name.to_string(),
                value: t.to_string(),
            });
        }
    };
    time("created", op.metadata.creation_timestamp.as_ref().map(|t| t.0));
    time("started", start_of(op));
    time("ended", end_of(op));
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
        line: op_line(op, now),
        cluster: spec.cluster.clone(),
        times,
        steps,
        hosts,
        failure,
        context: format!(
            "{}: {} {}",
            reported.context,
            state_word(reported.state),
            reported.description
        ),
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
    /// Each operation it created, with the status kok gives it.
    pub statuses: Vec<CommitLine>,
}

/// One status on a commit.
#[derive(Clone, Debug, Serialize)]
pub struct CommitLine {
    /// `kok/<cluster>/<id>`.
    pub context: String,
    /// pending, running, success, failure, error.
    pub state: String,
    /// What it says.
    pub description: String,
    /// The operation's page.
    pub operation: String,
    /// The cluster.
    pub cluster: String,
}

/// The page of commit `sha` (a prefix of at least 7 characters matches).
pub fn commit(view: &dyn View, sha: &str) -> CommitPage {
    let matches = |commit: &str| sha.len() >= 7 && commit.starts_with(sha);
    let mut statuses: Vec<CommitLine> = view
        .clusters()
        .iter()
        .flat_map(|c| view.operations_of(&c.name_any()))
        .filter(|op| matches(&op.spec.source.commit))
        .map(|op| {
            let p = phase(&op);
            let message = op.status.as_ref().and_then(|s| s.message.clone());
            let s = operation_status(&op, p, message.as_deref(), None, "");
            CommitLine {
                context: operation_context(&op.spec.cluster, &op.spec.id),
                state: state_word(s.state),
                description: s.description,
                operation: op.name_any(),
                cluster: op.spec.cluster.clone(),
            }
        })
        .collect();
    statuses.sort_by(|a, b| a.context.cmp(&b.context));
    CommitPage {
        sha: sha.to_string(),
        statuses,
    }
}

/// A commit status state as forges and notes spell it.
fn state_word(state: StatusState) -> String {
    format!("{state:?}").to_ascii_lowercase()
}
