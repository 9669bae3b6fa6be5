//! Scheduled operations: each cron firing of a current operation with `schedule` creates one run.
//!
//! A run is named `<operation>-<yyyymmddhhmm>` (UTC) after its firing time and created with an idempotent
//! create, so the same firing never makes two runs, and the firing is recorded in the base operation's
//! `kok.dev/last-fired` annotation. Firings missed while kok was down run at most once: when one or more
//! firings passed since the last recorded one (or since the operation was created), exactly one run is
//! created, for the most recent of them; the older ones are skipped.
//!
//! Expressions are parsed by croner (the parser tokio-cron-scheduler is built on) with seconds
//! first; the loop itself is kok's own, because a firing must be decided from the recorded
//! annotation in the meta-cluster, not from a job list kept in memory that a restart forgets.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use croner::parser::{CronParser, Seconds};
use croner::Cron;
use jiff::Timestamp;
use kube::api::{Api, Patch, PostParams};
use kube::{Client, ResourceExt};
use tracing::{info, warn};

use super::op_cache::OpCache;
use super::queue::is_current;
use crate::api::{ClusterOperation, ANNOTATION_CONTENT_HASH, ANNOTATION_LAST_FIRED, LABEL_CURRENT};
use crate::materialize::scheduled_operation_name;

/// Longest sleep of the scheduler loop, so that new or edited schedules are picked up.
pub const MAX_SLEEP: Duration = Duration::from_secs(30);

/// Failures of the scheduler.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// The cron expression does not parse.
    #[error("schedule \"{schedule}\" of operation {operation} is not a 6-field cron expression: {source}")]
    Parse {
        /// The expression.
        schedule: String,
        /// The ClusterOperation it belongs to.
        operation: String,
        /// What the parser said.
        #[source]
        source: croner::errors::CronError,
    },
    /// Creating a run or recording its firing failed.
    #[error("creating the run {run} of scheduled operation {operation} failed: {source}")]
    CreateRun {
        /// The base ClusterOperation.
        operation: String,
        /// The run's name.
        run: String,
        /// What the API server said.
        #[source]
        source: kube::Error,
    },
}

/// Parses a 6-field (seconds first) cron expression, as operations.yml's `schedule`.
pub fn parse_schedule(schedule: &str, operation: &str) -> Result<Cron, ScheduleError> {
    CronParser::builder()
        .seconds(Seconds::Required)
        .build()
        .parse(schedule)
        .map_err(|source| ScheduleError::Parse {
            schedule: schedule.to_string(),
            operation: operation.to_string(),
            source,
        })
}

fn to_chrono(t: Timestamp) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::from_timestamp(t.as_second(), t.subsec_nanosecond().max(0) as u32)
}

fn from_chrono(t: chrono::DateTime<chrono::Utc>) -> Option<Timestamp> {
    Timestamp::new(t.timestamp(), t.timestamp_subsec_nanos() as i32).ok()
}

/// The first firing strictly after `t`.
pub fn next_firing(cron: &Cron, t: Timestamp) -> Option<Timestamp> {
    cron.find_next_occurrence(&to_chrono(t)?, false)
        .ok()
        .and_then(from_chrono)
}

/// The firing to run now: the most recent firing `f` with `since < f <= now`, or `None` when no firing
/// happened in that interval. Older missed firings in the interval are skipped on purpose (at most once).
pub fn due_firing(cron: &Cron, since: Timestamp, now: Timestamp) -> Option<Timestamp> {
    let f = cron
        .find_previous_occurrence(&to_chrono(now)?, true)
        .ok()
        .and_then(from_chrono)?;
    (f > since).then_some(f)
}

/// Where the firing history of a base operation starts: its last recorded firing, else its creation time.
pub fn fired_since(base: &ClusterOperation) -> Option<Timestamp> {
    let last = base
        .annotations()
        .get(ANNOTATION_LAST_FIRED)
        .and_then(|s| s.parse::<Timestamp>().ok());
    let created = base.metadata.creation_timestamp.as_ref().map(|t| t.0);
    match (last, created) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// True for an operation whose `schedule` makes runs: a current operations.yml entry, not itself a run.
pub fn is_schedule_base(op: &ClusterOperation) -> bool {
    op.spec.schedule.is_some() && op.spec.scheduled_time.is_none() && is_current(op)
}

/// The run of `base` for the firing at `time`: the same spec with `scheduledTime` set and no schedule of its
/// own, queued right after its base, labelled like it but not as a current entry.
pub fn scheduled_run(base: &ClusterOperation, time: Timestamp) -> ClusterOperation {
    let name = scheduled_operation_name(&base.name_any(), time);
    let stamp = time.strftime("%Y%m%d%H%M%S").to_string();
    let mut spec = base.spec.clone();
    spec.schedule = None;
    spec.scheduled_time = Some(time.to_string());
    spec.queue_position = format!("{}.{stamp}", base.spec.queue_position);
    let mut run = ClusterOperation::new(&name, spec);
    let mut labels = base.labels().clone();
    labels.remove(LABEL_CURRENT);
    let annotations: BTreeMap<String, String> = base
        .annotations()
        .iter()
        .filter(|(k, _)| k.as_str() != ANNOTATION_LAST_FIRED && k.as_str() != ANNOTATION_CONTENT_HASH)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    run.metadata.namespace = base.namespace();
    run.metadata.labels = Some(labels);
    run.metadata.annotations = Some(annotations);
    run
}

/// What one pass of the scheduler decides at `now`: the runs to create (base name, firing) and when to look
/// again (the earliest next firing, at most [`MAX_SLEEP`] away).
pub fn plan(ops: &[&ClusterOperation], now: Timestamp) -> (Vec<(String, Timestamp)>, Duration) {
    let mut due = Vec::new();
    let mut wake = MAX_SLEEP;
    for base in ops.iter().filter(|o| is_schedule_base(o)) {
        let Some(schedule) = base.spec.schedule.as_deref() else {
            continue;
        };
        let cron = match parse_schedule(schedule, &base.name_any()) {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "skipping schedule");
                continue;
            }
        };
        if let Some(since) = fired_since(base) {
            if let Some(f) = due_firing(&cron, since, now) {
                due.push((base.name_any(), f));
            }
        }
        if let Some(next) = next_firing(&cron, now) {
            let until = next.duration_since(now).unsigned_abs();
            wake = wake.min(until);
        }
    }
    (due, wake)
}

/// Creates the run of `base` for `firing` (AlreadyExists is fine) and records the firing on `base`.
pub async fn fire(
    api: &Api<ClusterOperation>,
    base: &ClusterOperation,
    firing: Timestamp,
) -> Result<String, ScheduleError> {
    let run = scheduled_run(base, firing);
    let run_name = run.name_any();
    let err = |source| ScheduleError::CreateRun {
        operation: base.name_any(),
        run: run_name.clone(),
        source,
    };
    match api.create(&PostParams::default(), &run).await {
        Ok(_) => info!(operation = %base.name_any(), run = %run_name, %firing, "scheduled run created"),
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(err(e)),
    }
    let patch = serde_json::json!({"metadata": {"annotations": {ANNOTATION_LAST_FIRED: firing.to_string()}}});
    api.patch(&base.name_any(), &crate::api::kok_params(), &Patch::Merge(&patch))
        .await
        .map_err(err)?;
    Ok(run_name)
}

/// Runs the scheduler until `shutdown` resolves, reading operations from the controller's cache.
pub async fn run_scheduler(
    client: Client,
    namespace: String,
    operations: Arc<OpCache>,
    shutdown: impl Future,
) {
    let api: Api<ClusterOperation> = Api::namespaced(client, &namespace);
    tokio::pin!(shutdown);
    tokio::select! {
        _ = &mut shutdown => return,
        () = operations.wait_until_listed() => {}
    }
    loop {
        let ops = operations.scheduled();
        let refs: Vec<&ClusterOperation> = ops.iter().collect();
        let (due, wake) = plan(&refs, Timestamp::now());
        for (name, firing) in due {
            if let Some(base) = refs.iter().find(|o| o.name_any() == name) {
                if let Err(e) = fire(&api, base, firing).await {
                    warn!(error = %e, "scheduled run not created; retrying at the next pass");
                }
            }
        }
        // Wake a little after the firing so that it is due when looked at.
        let sleep = (wake + Duration::from_millis(5)).min(MAX_SLEEP);
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(sleep) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ClusterOperationSpec, ConfigMapRef};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn base(schedule: &str, created: &str, last: Option<&str>) -> ClusterOperation {
        let mut o = ClusterOperation::new(
            "prod-backup-0123abcd",
            ClusterOperationSpec {
                cluster: "prod".into(),
                id: "backup".into(),
                digest: "0123abcd".into(),
                action: "backup.yml".into(),
                image: "i".into(),
                hosts_conf_ref: ConfigMapRef { name: "h".into() },
                vars_conf_ref: Some(ConfigMapRef { name: "v".into() }),
                queue_position: "0.000000.0001".into(),
                schedule: Some(schedule.into()),
                ..Default::default()
            },
        );
        o.metadata.creation_timestamp = Some(Time(ts(created)));
        o.metadata.labels = Some([(LABEL_CURRENT.to_string(), "true".to_string())].into());
        if let Some(l) = last {
            o.metadata.annotations = Some([(ANNOTATION_LAST_FIRED.to_string(), l.to_string())].into());
        }
        o
    }

    #[test]
    fn nothing_is_due_before_the_first_firing() {
        let cron = parse_schedule("0 0 3 * * *", "x").unwrap();
        assert_eq!(
            due_firing(&cron, ts("2026-01-01T04:00:00Z"), ts("2026-01-02T02:59:59Z")),
            None
        );
    }

    #[test]
    fn a_firing_is_due_once_and_not_again_after_it_was_recorded() {
        let cron = parse_schedule("0 0 3 * * *", "x").unwrap();
        let f = due_firing(&cron, ts("2026-01-01T04:00:00Z"), ts("2026-01-02T03:00:10Z"));
        assert_eq!(f, Some(ts("2026-01-02T03:00:00Z")));
        assert_eq!(due_firing(&cron, f.unwrap(), ts("2026-01-02T03:00:20Z")), None);
    }

    #[test]
    fn missed_firings_run_once_for_the_most_recent_one() {
        let op = base(
            "0 0 3 * * *",
            "2026-01-01T00:00:00Z",
            Some("2026-01-02T03:00:00Z"),
        );
        let (due, _) = plan(&[&op], ts("2026-01-06T12:00:00Z"));
        assert_eq!(due, vec![(op.name_any(), ts("2026-01-06T03:00:00Z"))]);
    }

    #[test]
    fn the_scheduler_sleeps_until_the_next_firing_at_most_thirty_seconds() {
        let op = base(
            "*/10 * * * * *",
            "2026-01-01T00:00:00Z",
            Some("2026-01-01T00:00:00Z"),
        );
        let (due, wake) = plan(&[&op], ts("2026-01-01T00:00:05Z"));
        assert!(due.is_empty());
        assert_eq!(wake, Duration::from_secs(5));
        let daily = base("0 0 3 * * *", "2026-01-01T00:00:00Z", None);
        assert_eq!(plan(&[&daily], ts("2026-01-01T00:00:05Z")).1, MAX_SLEEP);
    }

    #[test]
    fn operations_removed_from_the_file_and_runs_do_not_fire() {
        let mut removed = base("0 * * * * *", "2026-01-01T00:00:00Z", None);
        removed.metadata.labels = None;
        let mut run = base("0 * * * * *", "2026-01-01T00:00:00Z", None);
        run.spec.scheduled_time = Some("2026-01-01T00:01:00Z".into());
        assert!(plan(&[&removed, &run], ts("2026-01-01T01:00:00Z")).0.is_empty());
    }

    #[test]
    fn a_run_is_named_after_its_firing_and_has_no_schedule_of_its_own() {
        let op = base("0 0 3 * * *", "2026-01-01T00:00:00Z", None);
        let run = scheduled_run(&op, ts("2026-01-02T03:00:00Z"));
        assert_eq!(run.name_any(), "prod-backup-0123abcd-202601020300");
        assert_eq!(run.spec.schedule, None);
        assert_eq!(run.spec.scheduled_time.as_deref(), Some("2026-01-02T03:00:00Z"));
        assert!(run.spec.queue_position > op.spec.queue_position);
        assert!(!run.labels().contains_key(LABEL_CURRENT));
    }

    #[test]
    fn a_run_that_fires_outside_its_maintenance_window_waits_for_it() {
        let mut op = base("0 0 12 * * *", "2026-01-01T00:00:00Z", None);
        op.spec.maintenance = Some(crate::api::Maintenance {
            windows: vec![crate::api::MaintenanceWindow {
                days: vec![],
                start: "02:00".into(),
                duration: "2h".into(),
                time_zone: "UTC".into(),
            }],
            freezes: vec![],
        });
        let fired = ts("2026-01-02T12:00:00Z");
        let run = scheduled_run(&op, fired);
        assert_eq!(run.spec.maintenance, op.spec.maintenance);
        let wait = super::super::window::maintenance_wait(run.spec.maintenance.as_ref().unwrap(), fired)
            .unwrap_err();
        assert_eq!(wait.wake_at(), Some(ts("2026-01-03T02:00:00Z")));
    }
}
