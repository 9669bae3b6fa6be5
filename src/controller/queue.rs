//! The per-cluster queue, failure holds, Job outcomes and the history limit, as pure functions over
//! ClusterOperations.
//!
//! A failed operation (or one canceled while running) holds every later operation of its cluster as Queued,
//! unless it opted out with `onFailure: continue`. The hold lifts when a later run of the same entry (a
//! `rerun` bump or an edit: same id) succeeds, or when the failed entry is removed from operations.yml. Runs
//! of the failed entry's id are never held by it, and operations that are held never keep them waiting, so
//! the rerun can start.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;

use crate::api::{ClusterOperation, OnFailure, OperationLine, Phase, HELD_PREFIX, LABEL_CURRENT};
use crate::report::status::{failure_words, summary_words};

/// The phase recorded on a ClusterOperation (Pending when it has no status yet).
pub fn phase(op: &ClusterOperation) -> Phase {
    op.status.as_ref().map(|s| s.phase).unwrap_or_default()
}

/// The running operation among `ops` (a cluster's), else the first waiting one in queue order.
pub fn running_or_next<'a>(
    ops: impl IntoIterator<Item = &'a ClusterOperation>,
) -> Option<&'a ClusterOperation> {
    let mut next: Option<&ClusterOperation> = None;
    for op in ops {
        match phase(op) {
            Phase::Running => return Some(op),
            Phase::Pending | Phase::Queued if next.is_none_or(|n| queue_order(op, n) == Ordering::Less) => {
                next = Some(op)
            }
            _ => {}
        }
    }
    next
}

/// The operation among `ops` (a cluster's) that finished last: by end time, then queue order.
pub fn last_finished<'a>(
    ops: impl IntoIterator<Item = &'a ClusterOperation>,
) -> Option<&'a ClusterOperation> {
    let end = |o: &ClusterOperation| o.status.as_ref().and_then(|s| s.end_time.as_ref()).map(|t| t.0);
    ops.into_iter()
        .filter(|op| phase(op).is_terminal())
        .max_by(|a, b| end(a).cmp(&end(b)).then_with(|| queue_order(a, b)))
}

/// `op` in a line: its id, phase, commit, times, and why it waits or what its run did (a failure's first
/// words, a success's task summary, else the status message).
pub fn operation_line(op: &ClusterOperation) -> OperationLine {
    let status = op.status.as_ref();
    let p = phase(op);
    let outcome = match (p, status) {
        (Phase::Failed, Some(s)) if s.failure.is_some() => {
            s.failure.as_deref().map(failure_words).unwrap_or_default()
        }
        (Phase::Succeeded, Some(s)) if s.summary.is_some() => {
            s.summary.as_deref().map(summary_words).unwrap_or_default()
        }
        _ => status.and_then(|s| s.message.clone()).unwrap_or_default(),
    };
    OperationLine {
        name: op.name_any(),
        id: op.spec.id.clone(),
        phase: p,
        commit: op.spec.source.commit.clone(),
        outcome,
        start_time: status.and_then(|s| s.start_time.clone()),
        end_time: status.and_then(|s| s.end_time.clone()),
    }
}

/// Queue order of a cluster's operations: `queuePosition` (commit order, then file order), then name.
pub fn queue_order(a: &ClusterOperation, b: &ClusterOperation) -> Ordering {
    a.spec
        .queue_position
        .cmp(&b.spec.queue_position)
        .then_with(|| a.name_any().cmp(&b.name_any()))
}

/// Why an operation may not start yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Another operation of the same cluster is running.
    ClusterBusy(String),
    /// An earlier operation of the same cluster has not finished.
    Behind(String),
    /// An earlier operation of the same cluster failed and holds the queue.
    Held {
        /// Cluster name.
        cluster: String,
        /// Id of the failed operation.
        id: String,
        /// Commit of the failed run.
        commit: String,
    },
    /// `--max-concurrent-jobs` Jobs are running already.
    NoJobSlot {
        /// Jobs running now.
        running: usize,
        /// The limit.
        max: usize,
    },
    /// Outside every maintenance window of the cluster (see [`super::window`]).
    Window {
        /// When the next window opens (past any freeze): the reconciler looks again then.
        opens: jiff::Timestamp,
        /// That instant in the window's zone: `Sat 2026-11-28 02:00 Europe/Berlin`.
        at: String,
        /// How long until then: `1d 5h`.
        within: String,
    },
    /// Inside a maintenance freeze of the cluster.
    Frozen {
        /// The freeze's `to`, as written: the day operations may start again.
        until: String,
        /// The freeze's reason.
        reason: Option<String>,
        /// When the freeze ends: the reconciler looks again then.
        ends: jiff::Timestamp,
    },
    /// The operation's maintenance settings cannot be read (a spec kok did not write).
    MaintenanceUnreadable(String),
    /// The cluster's wave of a rollout has not opened, is full, or the rollout halted (see
    /// [`super::wave`]).
    Wave {
        /// Rollout name.
        rollout: String,
        /// The cluster's wave.
        wave: String,
        /// Why it waits.
        why: super::wave::WaveWait,
    },
}

impl Wait {
    /// Why it waits, as the `reason` label of `kok_queue_oldest_waiting_seconds`: one of [`WAIT_REASONS`].
    pub fn reason(&self) -> &'static str {
        match self {
            Wait::ClusterBusy(_) => "busy",
            Wait::Behind(_) => "behind",
            Wait::Held { .. } => "held",
            Wait::NoJobSlot { .. } => "job_slot",
            Wait::Window { .. } => "window",
            Wait::Frozen { .. } => "frozen",
            Wait::MaintenanceUnreadable(_) => "maintenance",
            Wait::Wave { .. } => "wave",
        }
    }

    /// The instant the reason ends by itself (a window opens, a freeze ends), when it does.
    pub fn wake_at(&self) -> Option<jiff::Timestamp> {
        match self {
            Wait::Window { opens, .. } => Some(*opens),
            Wait::Frozen { ends, .. } => Some(*ends),
            Wait::Wave {
                why: super::wave::WaveWait::Closed { opens, .. },
                ..
            } => *opens,
            _ => None,
        }
    }
}

impl std::fmt::Display for Wait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Wait::ClusterBusy(name) => write!(f, "waiting for running operation {name} of the same cluster"),
            Wait::Behind(name) => write!(f, "waiting for earlier operation {name} of the same cluster"),
            Wait::Held { cluster, id, commit } => write!(
                f,
                "{HELD_PREFIX}{cluster}/{id} failed at {}; bump its rerun or remove it from operations.yml to go on",
                &commit[..commit.len().min(7)]
            ),
            Wait::NoJobSlot { running, max } => {
                write!(
                    f,
                    "waiting for a Job slot: {running} of --max-concurrent-jobs={max} running"
                )
            }
            Wait::Window { at, within, .. } => {
                write!(f, "waiting for the maintenance window: {at} (in {within})")
            }
            Wait::Frozen { until, reason, .. } => {
                write!(f, "frozen until {until}")?;
                match reason {
                    Some(reason) => write!(f, " ({reason})"),
                    None => Ok(()),
                }
            }
            Wait::Wave { rollout, wave, why } => match why {
                super::wave::WaveWait::Closed { detail, .. } => {
                    write!(f, "waiting for wave {wave} of rollout {rollout} ({detail})")
                }
                super::wave::WaveWait::Full { running, max } => write!(
                    f,
                    "waiting for wave {wave} of rollout {rollout} (maxParallel: {running} of {max} running)"
                ),
                super::wave::WaveWait::Halted(message) => write!(f, "rollout {rollout} {message}"),
            },
            Wait::MaintenanceUnreadable(what) => write!(
                f,
                "waiting: the maintenance settings cannot be read ({what}); fix maintenance in cluster.yml or kok.yml"
            ),
        }
    }
}

/// Every reason an operation may wait for: [`Wait::reason`]'s, `secret` (its ssh Secret is missing or
/// wrong), `pending` (not looked at yet) and `other`.
pub const WAIT_REASONS: [&str; 11] = [
    "busy",
    "behind",
    "held",
    "job_slot",
    "window",
    "frozen",
    "maintenance",
    "wave",
    "secret",
    "pending",
    "other",
];

/// Prefix of the message of an operation waiting for its ssh Secret.
pub const SECRET_WAIT_PREFIX: &str = "waiting for its Secret: ";

/// Why a Queued operation waits, read back from the status message its wait wrote ([`Wait`]'s `Display`,
/// or [`SECRET_WAIT_PREFIX`]): the reason [`Wait::reason`] gives, `secret`, or `other`.
pub fn wait_reason(message: &str) -> &'static str {
    let prefixes: [(&str, &str); 10] = [
        ("waiting for running operation ", "busy"),
        ("waiting for earlier operation ", "behind"),
        (HELD_PREFIX, "held"),
        ("waiting for a Job slot", "job_slot"),
        ("waiting for the maintenance window", "window"),
        ("frozen until ", "frozen"),
        ("waiting: the maintenance settings", "maintenance"),
        ("waiting for wave ", "wave"),
        ("rollout ", "wave"),
        (SECRET_WAIT_PREFIX, "secret"),
    ];
    prefixes
        .iter()
        .find(|(prefix, _)| message.starts_with(prefix))
        .map_or("other", |(_, reason)| reason)
}

/// Whether `op` may start now.
///
/// `siblings` are the operations of the same cluster (with or without `op`); `busy` names the operations
/// that hold a Job (Running, or started and not yet recorded); `running_total` counts them across clusters.
pub fn decide(
    op: &ClusterOperation,
    siblings: &[&ClusterOperation],
    busy: &BTreeSet<String>,
    running_total: usize,
    max_concurrent: usize,
) -> Result<(), Wait> {
    let name = op.name_any();
    if let Some(other) = siblings
        .iter()
        .map(|s| s.name_any())
        .find(|n| *n != name && busy.contains(n))
    {
        return Err(Wait::ClusterBusy(other));
    }
    if let Some(holder) = holder(op, siblings) {
        return Err(Wait::Held {
            cluster: holder.spec.cluster.clone(),
            id: holder.spec.id.clone(),
            commit: holder.spec.source.commit.clone(),
        });
    }
    let head = siblings
        .iter()
        .filter(|s| !phase(s).is_terminal() && s.name_any() != name)
        .filter(|s| queue_order(s, op) == Ordering::Less)
        .filter(|s| holder(s, siblings).is_none())
        .min_by(|a, b| queue_order(a, b));
    if let Some(head) = head {
        return Err(Wait::Behind(head.name_any()));
    }
    if running_total >= max_concurrent {
        return Err(Wait::NoJobSlot {
            running: running_total,
            max: max_concurrent,
        });
    }
    Ok(())
}

/// True when `op` stopped on a failure: Failed, or Canceled after its Job was created.
pub fn stopped_on_failure(op: &ClusterOperation) -> bool {
    match phase(op) {
        Phase::Failed => true,
        Phase::Canceled => op.status.as_ref().is_some_and(|s| s.job_ref.is_some()),
        _ => false,
    }
}

/// Whether the failed `op` holds its cluster's later operations, given its cluster's operations `siblings`:
/// it stopped on a failure, did not opt out, no later run of the same id succeeded, and its entry (or a run
/// of the same id) is still in operations.yml.
pub fn holds(op: &ClusterOperation, siblings: &[&ClusterOperation]) -> bool {
    if !stopped_on_failure(op) || op.spec.on_failure == OnFailure::Continue {
        return false;
    }
    let name = op.name_any();
    let mut same_id = siblings
        .iter()
        .filter(|s| s.spec.id == op.spec.id && s.name_any() != name);
    let rerun_succeeded = same_id
        .clone()
        .any(|s| phase(s) == Phase::Succeeded && queue_order(op, s) == Ordering::Less);
    !rerun_succeeded && (is_current(op) || same_id.any(|s| is_current(s)))
}

/// True when the failed `op`'s hold was lifted by removing its entry: it stopped on a failure and would hold,
/// but neither it nor any run of its id is in operations.yml any more, and no later run of its id succeeded.
pub fn released_by_removal(op: &ClusterOperation, siblings: &[&ClusterOperation]) -> bool {
    stopped_on_failure(op)
        && op.spec.on_failure == OnFailure::Hold
        && !holds(op, siblings)
        && !siblings.iter().any(|s| {
            s.spec.id == op.spec.id && phase(s) == Phase::Succeeded && queue_order(op, s) == Ordering::Less
        })
}

/// The earliest failed operation that holds `op`: before it in queue order, of another id, and holding.
pub fn holder<'a>(op: &ClusterOperation, siblings: &[&'a ClusterOperation]) -> Option<&'a ClusterOperation> {
    siblings
        .iter()
        .copied()
        .filter(|s| s.spec.id != op.spec.id && queue_order(s, op) == Ordering::Less)
        .filter(|s| holds(s, siblings))
        .min_by(|a, b| queue_order(a, b))
}

/// What a Job says about its operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobOutcome {
    /// Not finished.
    Running,
    /// Condition Complete is True.
    Succeeded,
    /// Condition Failed is True, with the Job's reason (e.g. `DeadlineExceeded`) and message.
    Failed {
        /// The condition's reason, `Failed` when empty.
        reason: String,
        /// The condition's message, possibly empty.
        message: String,
    },
}

/// The message the Job controller gives a Job's `Complete` condition.
pub const JOB_COMPLETE_MESSAGE: &str = "Reached expected number of succeeded pods";

/// What a completed Job's `Complete` condition says beyond [`JOB_COMPLETE_MESSAGE`] (local mode's runner adds
/// there which directory ran an image it was not told about), without the parentheses around it.
pub fn completion_note(job: &Job) -> Option<String> {
    let conditions = job.status.as_ref()?.conditions.as_ref()?;
    let message = conditions
        .iter()
        .find(|c| c.type_ == "Complete" && c.status == "True")?
        .message
        .as_deref()?;
    let note = message
        .strip_prefix(JOB_COMPLETE_MESSAGE)?
        .trim()
        .strip_prefix('(')?
        .strip_suffix(')')?
        .trim();
    (!note.is_empty()).then(|| note.to_string())
}

/// Reads the outcome of a Job from its conditions.
pub fn job_outcome(job: &Job) -> JobOutcome {
    let conditions = job.status.as_ref().and_then(|s| s.conditions.as_ref());
    for c in conditions.into_iter().flatten() {
        if c.status != "True" {
            continue;
        }
        match c.type_.as_str() {
            "Complete" => return JobOutcome::Succeeded,
            "Failed" => {
                return JobOutcome::Failed {
                    reason: c
                        .reason
                        .clone()
                        .filter(|r| !r.is_empty())
                        .unwrap_or_else(|| "Failed".to_string()),
                    message: c.message.clone().unwrap_or_default(),
                }
            }
            _ => {}
        }
    }
    JobOutcome::Running
}

/// A duration the way kubectl prints ages: `45s`, `3m12s`, `2h5m`, `1d3h`.
pub fn format_duration(seconds: i64) -> String {
    let s = seconds.max(0);
    let (d, h, m, sec) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60, s % 60);
    if d > 0 {
        format!("{d}d{h}h")
    } else if h > 0 {
        format!("{h}h{m}m")
    } else if m > 0 {
        format!("{m}m{sec}s")
    } else {
        format!("{sec}s")
    }
}

/// True when the operation is still an entry of its cluster's operations.yml (labelled current by apply).
pub fn is_current(op: &ClusterOperation) -> bool {
    op.labels().get(LABEL_CURRENT).map(String::as_str) == Some("true")
}

/// Names of the finished operations to delete so that at most `limit` finished ones remain.
///
/// Only terminal operations that are no longer entries of operations.yml are candidates (deleting a current
/// one would let the next resync create and run it again), and never one that holds its cluster's queue;
/// the oldest by end time, then queue order, go first.
pub fn history_to_delete(ops: &[&ClusterOperation], limit: u32) -> Vec<String> {
    let mut finished: Vec<&ClusterOperation> =
        ops.iter().copied().filter(|o| phase(o).is_terminal()).collect();
    let excess = finished.len().saturating_sub(limit as usize);
    if excess == 0 {
        return Vec::new();
    }
    let end = |o: &ClusterOperation| {
        o.status
            .as_ref()
            .and_then(|s| s.end_time.as_ref())
            .map(|t| t.0)
            .or_else(|| o.metadata.creation_timestamp.as_ref().map(|t| t.0))
    };
    finished.sort_by(|a, b| end(a).cmp(&end(b)).then_with(|| queue_order(a, b)));
    finished
        .into_iter()
        .filter(|o| !is_current(o) && !holds(o, ops))
        .take(excess)
        .map(|o| o.name_any())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_read_back_from_a_wait_message_is_the_waits_own() {
        let opens: jiff::Timestamp = "2026-11-28T02:00:00Z".parse().unwrap();
        let waits = [
            Wait::ClusterBusy("prod-a".into()),
            Wait::Behind("prod-b".into()),
            Wait::Held {
                cluster: "prod".into(),
                id: "install".into(),
                commit: "0123456789".into(),
            },
            Wait::NoJobSlot { running: 4, max: 4 },
            Wait::Window {
                opens,
                at: "Sat 2026-11-28 02:00 UTC".into(),
                within: "1h".into(),
            },
            Wait::Frozen {
                until: "2026-12-01".into(),
                reason: Some("release".into()),
                ends: opens,
            },
            Wait::MaintenanceUnreadable("bad".into()),
            Wait::Wave {
                rollout: "r".into(),
                wave: "canary".into(),
                why: super::super::wave::WaveWait::Full { running: 1, max: 1 },
            },
            Wait::Wave {
                rollout: "r".into(),
                wave: "canary".into(),
                why: super::super::wave::WaveWait::Halted("halted at wave canary".into()),
            },
        ];
        for wait in waits {
            assert_eq!(wait_reason(&wait.to_string()), wait.reason(), "{wait}");
            assert!(WAIT_REASONS.contains(&wait.reason()));
        }
        assert_eq!(
            wait_reason(&format!("{SECRET_WAIT_PREFIX}Secret ssh is missing")),
            "secret"
        );
        assert_eq!(wait_reason("something else"), "other");
    }
    use crate::api::{ClusterOperationSpec, ClusterOperationStatus, ConfigMapRef};
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn op(name: &str, pos: &str, phase: Phase) -> ClusterOperation {
        let mut o = ClusterOperation::new(
            name,
            ClusterOperationSpec {
                cluster: "c".into(),
                id: name.into(),
                digest: "d".into(),
                action: "a.yml".into(),
                image: "i".into(),
                hosts_conf_ref: ConfigMapRef { name: "h".into() },
                vars_conf_ref: Some(ConfigMapRef { name: "v".into() }),
                queue_position: pos.into(),
                ..Default::default()
            },
        );
        o.status = Some(ClusterOperationStatus {
            phase,
            ..Default::default()
        });
        o
    }

    #[test]
    fn the_head_of_the_queue_starts_when_nothing_runs() {
        let a = op("a", "1", Phase::Pending);
        let b = op("b", "2", Phase::Pending);
        assert_eq!(decide(&a, &[&a, &b], &BTreeSet::new(), 0, 4), Ok(()));
        assert_eq!(
            decide(&b, &[&a, &b], &BTreeSet::new(), 0, 4),
            Err(Wait::Behind("a".into()))
        );
    }

    #[test]
    fn a_running_sibling_blocks_even_an_earlier_operation() {
        let a = op("a", "1", Phase::Queued);
        let b = op("b", "2", Phase::Running);
        let busy = BTreeSet::from(["b".to_string()]);
        assert_eq!(
            decide(&a, &[&a, &b], &busy, 1, 4),
            Err(Wait::ClusterBusy("b".into()))
        );
    }

    #[test]
    fn finished_operations_do_not_block_and_the_job_limit_does() {
        let a = op("a", "1", Phase::Failed);
        let b = op("b", "2", Phase::Queued);
        assert_eq!(decide(&b, &[&a, &b], &BTreeSet::new(), 0, 1), Ok(()));
        assert_eq!(
            decide(&b, &[&a, &b], &BTreeSet::new(), 1, 1),
            Err(Wait::NoJobSlot { running: 1, max: 1 })
        );
    }

    fn current(mut o: ClusterOperation, id: &str) -> ClusterOperation {
        o.spec.id = id.into();
        o.metadata.labels = Some([(LABEL_CURRENT.to_string(), "true".to_string())].into());
        o
    }

    #[test]
    fn a_failure_holds_later_operations_but_not_a_rerun_of_itself() {
        let failed = current(op("up-1", "1", Phase::Failed), "up");
        let add = current(op("add", "2", Phase::Queued), "add");
        let rerun = current(op("up-2", "3", Phase::Pending), "up");
        let all = [&failed, &add, &rerun];
        assert!(holds(&failed, &all));
        assert!(matches!(
            decide(&add, &all, &BTreeSet::new(), 0, 4),
            Err(Wait::Held { ref id, .. }) if id == "up"
        ));
        assert_eq!(
            decide(&rerun, &all, &BTreeSet::new(), 0, 4),
            Ok(()),
            "held ones do not block it"
        );

        let mut done = rerun.clone();
        done.status.as_mut().unwrap().phase = Phase::Succeeded;
        let all = [&failed, &add, &done];
        assert!(
            !holds(&failed, &all),
            "a later success of the same id lifts the hold"
        );
        assert_eq!(decide(&add, &all, &BTreeSet::new(), 0, 4), Ok(()));
    }

    #[test]
    fn removing_the_failed_entry_or_opting_out_lifts_the_hold() {
        let mut removed = op("up-1", "1", Phase::Failed);
        removed.spec.id = "up".into();
        let add = current(op("add", "2", Phase::Queued), "add");
        assert!(!holds(&removed, &[&removed, &add]));
        assert!(released_by_removal(&removed, &[&removed, &add]));
        assert_eq!(decide(&add, &[&removed, &add], &BTreeSet::new(), 0, 4), Ok(()));

        let mut opted = current(op("report", "1", Phase::Failed), "report");
        opted.spec.on_failure = OnFailure::Continue;
        assert!(!holds(&opted, &[&opted, &add]));
        assert!(!released_by_removal(&opted, &[&opted, &add]));

        let canceled_before_start = current(op("c", "1", Phase::Canceled), "c");
        assert!(!holds(&canceled_before_start, &[&canceled_before_start, &add]));
    }

    #[test]
    fn equal_positions_fall_back_to_name_order() {
        let a = op("x-b", "1", Phase::Pending);
        let b = op("x-a", "1", Phase::Pending);
        assert_eq!(
            decide(&a, &[&a, &b], &BTreeSet::new(), 0, 4),
            Err(Wait::Behind("x-a".into()))
        );
    }

    fn job_with(type_: &str, reason: Option<&str>) -> Job {
        Job {
            status: Some(JobStatus {
                conditions: Some(vec![JobCondition {
                    type_: type_.into(),
                    status: "True".into(),
                    reason: reason.map(Into::into),
                    message: Some("Job was active longer than specified deadline".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn job_conditions_map_to_outcomes() {
        assert_eq!(job_outcome(&Job::default()), JobOutcome::Running);
        assert_eq!(job_outcome(&job_with("Complete", None)), JobOutcome::Succeeded);
        assert_eq!(
            job_outcome(&job_with("Failed", Some("DeadlineExceeded"))),
            JobOutcome::Failed {
                reason: "DeadlineExceeded".into(),
                message: "Job was active longer than specified deadline".into()
            }
        );
        assert_eq!(job_outcome(&job_with("Suspended", None)), JobOutcome::Running);
    }

    #[test]
    fn durations_read_like_kubectl_ages() {
        assert_eq!(format_duration(45), "45s");
        assert_eq!(format_duration(192), "3m12s");
        assert_eq!(format_duration(7500), "2h5m");
        assert_eq!(format_duration(97_200), "1d3h");
    }

    #[test]
    fn history_keeps_the_newest_finished_and_every_running_or_current_operation() {
        let mut ops = Vec::new();
        for i in 0..5 {
            let mut o = op(&format!("op{i}"), &format!("{i}"), Phase::Succeeded);
            o.status.as_mut().unwrap().end_time = Some(Time(jiff::Timestamp::from_second(1000 + i).unwrap()));
            ops.push(o);
        }
        ops.push(op("running", "9", Phase::Running));
        ops[1].metadata.labels = Some([(LABEL_CURRENT.to_string(), "true".to_string())].into());
        let refs: Vec<&ClusterOperation> = ops.iter().collect();
        assert_eq!(
            history_to_delete(&refs, 2),
            vec!["op0".to_string(), "op2".to_string(), "op3".to_string()]
        );
        assert!(history_to_delete(&refs, 5).is_empty());
    }
}
