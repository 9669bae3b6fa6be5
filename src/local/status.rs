//! Job status patches written by the local runner, in the Job controller's own words (pure).
//!
//! A finished Job carries the same counters and conditions a real cluster gives it, so the controller reading
//! it cannot tell the local runner from the Job controller: success sets `succeeded: 1`, `completionTime` and
//! the conditions `SuccessCriteriaMet` then `Complete`; failure sets `failed: 1` and `FailureTarget` then
//! `Failed`, with the reason of the failure on both.

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

/// Reason of a successful Job's conditions.
pub const REASON_COMPLETIONS_REACHED: &str = "CompletionsReached";
/// Message of a successful Job's conditions.
pub const MESSAGE_COMPLETIONS_REACHED: &str = crate::controller::queue::JOB_COMPLETE_MESSAGE;
/// Reason of a Job whose process exited non-zero (`backoffLimit: 0`, so the first failure is the last).
pub const REASON_BACKOFF_LIMIT_EXCEEDED: &str = "BackoffLimitExceeded";
/// Message of a Job whose process exited non-zero.
pub const MESSAGE_BACKOFF_LIMIT_EXCEEDED: &str = "Job has reached the specified backoff limit";
/// Reason of a Job that ran longer than its `activeDeadlineSeconds`.
pub const REASON_DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
/// Message of a Job that ran longer than its `activeDeadlineSeconds`.
pub const MESSAGE_DEADLINE_EXCEEDED: &str = "Job was active longer than specified deadline";
/// Reason of a Job found started but unfinished by a runner that did not start it: its host process was lost.
pub const REASON_RUNNER_RESTARTED: &str = "RunnerRestarted";
/// Message of a Job whose host process was lost when kok stopped.
pub const MESSAGE_RUNNER_RESTARTED: &str = "The host process running this Job was lost when kok stopped; \
     kok runs an operation at most once, so it was not started again. Bump `rerun` on the operation to run it again.";
/// Reason of a Job the runner could not start: a volume, its working directory or its command was unusable.
pub const REASON_RUNNER_SETUP_FAILED: &str = "RunnerSetupFailed";

/// Condition type set first on success.
pub const CONDITION_SUCCESS_CRITERIA_MET: &str = "SuccessCriteriaMet";
/// Condition type of a completed Job.
pub const CONDITION_COMPLETE: &str = "Complete";
/// Condition type set first on failure.
pub const CONDITION_FAILURE_TARGET: &str = "FailureTarget";
/// Condition type of a failed Job.
pub const CONDITION_FAILED: &str = "Failed";

/// The message the Job controller (or the runner) writes with `reason`.
pub fn message_for(reason: &str) -> &'static str {
    match reason {
        REASON_BACKOFF_LIMIT_EXCEEDED => MESSAGE_BACKOFF_LIMIT_EXCEEDED,
        REASON_DEADLINE_EXCEEDED => MESSAGE_DEADLINE_EXCEEDED,
        REASON_RUNNER_RESTARTED => MESSAGE_RUNNER_RESTARTED,
        _ => "The local runner could not start the Job; its log says why.",
    }
}

/// How a Job ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The process exited with status 0.
    Succeeded,
    /// The Job failed; `reason` is a PascalCase word, `message` a sentence for people.
    Failed {
        /// PascalCase reason, e.g. [`REASON_BACKOFF_LIMIT_EXCEEDED`].
        reason: String,
        /// Human-readable message.
        message: String,
    },
}

impl Outcome {
    /// A failure with one of the reason/message pairs above.
    pub fn failed(reason: &str, message: impl Into<String>) -> Self {
        Outcome::Failed {
            reason: reason.to_string(),
            message: message.into(),
        }
    }
}

/// The status patch marking a Job started at `now`: `startTime` and one active pod.
pub fn started(now: jiff::Timestamp) -> serde_json::Value {
    json!({ "status": { "startTime": Time(now), "active": 1, "ready": 0, "terminating": 0 } })
}

fn condition(type_: &str, reason: &str, message: &str, now: jiff::Timestamp) -> JobCondition {
    JobCondition {
        type_: type_.to_string(),
        status: "True".to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// The status patch marking a Job finished at `now` with `outcome`. `start` is kept (or set, when the Job never
/// started) because a finished Job always has a `startTime`.
pub fn finished(outcome: &Outcome, start: jiff::Timestamp, now: jiff::Timestamp) -> serde_json::Value {
    finished_with(outcome, None, start, now)
}

/// [`finished`], its condition messages followed by `note` in parentheses when there is one (local mode says
/// there which directory ran an image `--image-workdir` does not map).
pub fn finished_with(
    outcome: &Outcome,
    note: Option<&str>,
    start: jiff::Timestamp,
    now: jiff::Timestamp,
) -> serde_json::Value {
    let noted = |message: &str| match note {
        Some(note) => format!("{message} ({note})"),
        None => message.to_string(),
    };
    let mut status = JobStatus {
        start_time: Some(Time(start)),
        active: Some(0),
        ready: Some(0),
        terminating: Some(0),
        ..JobStatus::default()
    };
    match outcome {
        Outcome::Succeeded => {
            status.succeeded = Some(1);
            status.completion_time = Some(Time(now));
            status.conditions = Some(vec![
                condition(
                    CONDITION_SUCCESS_CRITERIA_MET,
                    REASON_COMPLETIONS_REACHED,
                    &noted(MESSAGE_COMPLETIONS_REACHED),
                    now,
                ),
                condition(
                    CONDITION_COMPLETE,
                    REASON_COMPLETIONS_REACHED,
                    &noted(MESSAGE_COMPLETIONS_REACHED),
                    now,
                ),
            ]);
        }
        Outcome::Failed { reason, message } => {
            status.failed = Some(1);
            status.conditions = Some(vec![
                condition(CONDITION_FAILURE_TARGET, reason, &noted(message), now),
                condition(CONDITION_FAILED, reason, &noted(message), now),
            ]);
        }
    }
    json!({ "status": status })
}

/// True when the Job has a `Complete` or `Failed` condition that is `True`.
pub fn is_finished(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conds| {
            conds
                .iter()
                .any(|c| (c.type_ == CONDITION_COMPLETE || c.type_ == CONDITION_FAILED) && c.status == "True")
        })
}

/// The Job's `startTime`, when it has been started.
pub fn start_time(job: &Job) -> Option<jiff::Timestamp> {
    job.status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| t.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn success_reads_like_the_job_controller_wrote_it() {
        let patch = finished(
            &Outcome::Succeeded,
            ts("2026-01-01T00:00:00Z"),
            ts("2026-01-01T00:01:00Z"),
        );
        let status: JobStatus = serde_json::from_value(patch["status"].clone()).unwrap();
        assert_eq!(status.succeeded, Some(1));
        assert_eq!(status.active, Some(0));
        assert_eq!(status.completion_time, Some(Time(ts("2026-01-01T00:01:00Z"))));
        let types: Vec<_> = status
            .conditions
            .unwrap()
            .iter()
            .map(|c| c.type_.clone())
            .collect();
        assert_eq!(types, vec!["SuccessCriteriaMet", "Complete"]);
    }

    #[test]
    fn failure_carries_its_reason_on_both_conditions_and_no_completion_time() {
        let outcome = Outcome::failed(REASON_DEADLINE_EXCEEDED, MESSAGE_DEADLINE_EXCEEDED);
        let patch = finished(&outcome, ts("2026-01-01T00:00:00Z"), ts("2026-01-01T00:01:00Z"));
        let job = Job {
            status: serde_json::from_value(patch["status"].clone()).unwrap(),
            ..Job::default()
        };
        assert!(is_finished(&job));
        let status = job.status.unwrap();
        assert_eq!(status.failed, Some(1));
        assert_eq!(status.completion_time, None);
        for c in status.conditions.unwrap() {
            assert_eq!(c.reason.as_deref(), Some("DeadlineExceeded"));
            assert_eq!(c.status, "True");
        }
    }

    #[test]
    fn a_started_job_is_not_finished() {
        let patch = started(ts("2026-01-01T00:00:00Z"));
        let job = Job {
            status: serde_json::from_value(patch["status"].clone()).unwrap(),
            ..Job::default()
        };
        assert!(!is_finished(&job));
        assert_eq!(start_time(&job), Some(ts("2026-01-01T00:00:00Z")));
    }
}
