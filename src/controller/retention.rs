//! How long a succeeded run's Job stays: `--keep-succeeded-jobs` after it completed, then kok deletes it.
//!
//! A finished Job is most of what a run leaves in the meta-cluster's etcd: its pod template carries the
//! entry script and kok's two ansible plugins, about 27 KB, where the run's ClusterOperation is 6 KB, and a
//! fleet keeps 20 runs a cluster. What a run says stays on its ClusterOperation (phase, times, report,
//! commit status) and in git; its Job adds only its pod's log. So once a run's ClusterOperation shows
//! Succeeded (kok recorded the outcome), its Job, and in the background its pod, is deleted when it has been
//! complete for `--keep-succeeded-jobs` (1 hour by default; 0 deletes it as soon as the outcome is
//! recorded). A failed run's Job stays, for its log, until the run leaves the history (its owner
//! reference takes it then). A Job kok is not sure of stays: not complete, no completion time, its run
//! not in the cache or not Succeeded, or owned by another object of the same name.
//!
//! The controller looks at its Job cache once a minute (or every `--keep-succeeded-jobs`, when shorter);
//! at rest, with nothing to delete, that makes no request.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::ResourceExt;
use tracing::{info, warn};

use super::queue::{job_outcome, JobOutcome};
use super::Context;
use crate::api::Phase;

/// How long a succeeded run's Job is kept by default (1 hour).
pub const KEEP_SUCCEEDED_JOBS: Duration = Duration::from_secs(3600);
/// How often the Job cache is looked at, at most.
const LOOK_EVERY: Duration = Duration::from_secs(60);
/// How often the Job cache is looked at, at least.
const LOOK_EVERY_MIN: Duration = Duration::from_secs(1);

/// Deletes expired Jobs of succeeded runs until `stopped`; never when `keep` is `None`.
pub(super) async fn run(ctx: Arc<Context>, stopped: impl Future<Output = ()>) {
    let Some(keep) = ctx.config.keep_succeeded_jobs else {
        return;
    };
    let every = keep.clamp(LOOK_EVERY_MIN, LOOK_EVERY);
    let work = async {
        loop {
            tokio::time::sleep(every).await;
            delete_expired(&ctx, keep).await;
        }
    };
    tokio::select! {
        _ = stopped => {}
        _ = work => {}
    }
}

/// One look: deletes every Job [`expired`] says may go.
async fn delete_expired(ctx: &Context, keep: Duration) {
    let now = Timestamp::now();
    let doomed: Vec<(String, Option<String>)> = ctx
        .jobs
        .state()
        .iter()
        .filter(|job| {
            let run = run_of(job);
            let phase = run.as_deref().and_then(|name| ctx.operations.phase(name));
            expired(job, phase, now, keep)
        })
        .filter(|job| owner_is_cached_run(ctx, job))
        .map(|job| (job.name_any(), job.uid()))
        .collect();
    if doomed.is_empty() {
        return;
    }
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let mut deleted = 0usize;
    for (name, uid) in doomed {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid,
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match jobs.delete(&name, &params).await {
            Ok(_) => deleted += 1,
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => {
                warn!(job = %name, error = %e, "could not delete a succeeded run's Job; it is looked at again")
            }
        }
    }
    if deleted > 0 {
        info!(
            deleted,
            keep_secs = keep.as_secs(),
            "deleted succeeded runs' Jobs past --keep-succeeded-jobs"
        );
    }
}

/// The ClusterOperation that owns `job` (its controller owner reference), by name.
fn run_of(job: &Job) -> Option<String> {
    job.owner_references()
        .iter()
        .find(|r| r.kind == "ClusterOperation")
        .map(|r| r.name.clone())
}

/// Whether `job`'s ClusterOperation owner is the one in the cache (same uid), not an older one of its name.
fn owner_is_cached_run(ctx: &Context, job: &Job) -> bool {
    let Some(owner) = job
        .owner_references()
        .iter()
        .find(|r| r.kind == "ClusterOperation")
    else {
        return false;
    };
    ctx.operations
        .get(&owner.name)
        .is_some_and(|op| op.uid().as_deref() == Some(owner.uid.as_str()))
}

/// Whether `job` may be deleted at `now`: it completed (its Job says so) at least `keep` ago, and its run,
/// in phase `run_phase` in the cache, is recorded Succeeded.
pub fn expired(job: &Job, run_phase: Option<Phase>, now: Timestamp, keep: Duration) -> bool {
    if run_phase != Some(Phase::Succeeded) || job_outcome(job) != JobOutcome::Succeeded {
        return false;
    }
    let Some(done) = job.status.as_ref().and_then(|s| s.completion_time.as_ref()) else {
        return false;
    };
    let age = now.duration_since(done.0);
    age.is_positive() && age.unsigned_abs() >= keep || keep.is_zero()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn job(condition: &str, completed: Option<&str>) -> Job {
        Job {
            status: Some(JobStatus {
                conditions: Some(vec![JobCondition {
                    type_: condition.to_string(),
                    status: "True".to_string(),
                    ..JobCondition::default()
                }]),
                completion_time: completed.map(|t| Time(t.parse().unwrap())),
                ..JobStatus::default()
            }),
            ..Job::default()
        }
    }

    #[test]
    fn only_a_succeeded_runs_complete_job_past_the_time_kept_goes() {
        let now: Timestamp = "2026-12-02T12:00:00Z".parse().unwrap();
        let hour = Duration::from_secs(3600);
        let old = job("Complete", Some("2026-12-02T10:59:59Z"));
        let recent = job("Complete", Some("2026-12-02T11:30:00Z"));
        assert!(expired(&old, Some(Phase::Succeeded), now, hour));
        assert!(!expired(&recent, Some(Phase::Succeeded), now, hour));
        // The outcome is not recorded yet, or the run failed, or is not known: the Job stays.
        assert!(!expired(&old, Some(Phase::Running), now, hour));
        assert!(!expired(&old, Some(Phase::Failed), now, hour));
        assert!(!expired(&old, None, now, hour));
        // A failed Job, or one without a completion time, stays.
        assert!(!expired(
            &job("Failed", Some("2026-12-02T10:00:00Z")),
            Some(Phase::Succeeded),
            now,
            hour
        ));
        assert!(!expired(
            &job("Complete", None),
            Some(Phase::Succeeded),
            now,
            hour
        ));
        // 0: as soon as the outcome is recorded, whatever the clocks say.
        assert!(expired(&recent, Some(Phase::Succeeded), now, Duration::ZERO));
        let future = job("Complete", Some("2026-12-02T12:00:05Z"));
        assert!(expired(&future, Some(Phase::Succeeded), now, Duration::ZERO));
        assert!(!expired(&future, Some(Phase::Succeeded), now, hour));
    }
}
