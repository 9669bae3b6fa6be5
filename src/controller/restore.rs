//! Restoring a run from the record in git: a ClusterOperation the pass created for an entry whose outcome
//! the notes or a forge already hold (annotation `kok.dev/recorded`, see [`crate::report::record`]) takes
//! that outcome instead of running, so a lost or rebuilt meta-cluster, a new namespace or a deleted
//! object runs nothing twice.
//!
//! - A recorded success is Succeeded, a recorded failure Failed (and holds its cluster's queue, as before
//!   the loss), with the times, message and run summary the record holds. Its commit status is already on
//!   the commit: it is recorded as delivered, so nothing is sent again.
//! - A recorded `pending` or `running` status is a run that was queued or running when the record ends:
//!   it may have run, in part. It is not run: it fails with [`STATE_LOST`], which holds its queue until
//!   someone checks the cluster and bumps `rerun` or removes the entry; that status goes to the commit.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::queue::format_duration;
use crate::api::{
    ClusterOperation, CommitStatus, OperationRecord, Phase, Recorded, RunRecord, StatusState,
    ANNOTATION_RECORDED,
};

/// Message of a run whose last record is pending or running: it was queued or running when kok's state
/// was lost.
pub const STATE_LOST: &str = "was queued or running when kok's state was lost, so it may have run in part; \
                              check the cluster, then bump its rerun to run it again or remove the entry";

/// Start of the message of a run restored from the record, followed by the recorded description.
pub const RESTORED_PREFIX: &str = "restored from the record in ";

/// Event reason of a run restored from the record as it ended.
pub const RESTORED_EVENT: &str = "Restored";

/// Event reason of a run held because it was queued or running when the record ends.
pub const STATE_LOST_EVENT: &str = "StateLost";

/// The record an operation was created with, if any: `Err` when the annotation cannot be read (it is
/// kok's own: something changed it).
pub fn recorded_of(op: &ClusterOperation) -> Option<Result<Recorded, String>> {
    let text = op.metadata.annotations.as_ref()?.get(ANNOTATION_RECORDED)?;
    Some(serde_json::from_str(text).map_err(|e| format!("annotation kok.dev/recorded cannot be read: {e}")))
}

/// What restoring `op` from `recorded` writes: the status merge patch, the Event reason, and whether the
/// Event is a warning.
pub fn restored_status(
    op: &ClusterOperation,
    recorded: &Recorded,
) -> (serde_json::Value, &'static str, bool) {
    let identity = recorded.status.run.as_ref().and_then(|r| r.operation.as_ref());
    let finished = match recorded.status.state {
        StatusState::Success => Some(Phase::Succeeded),
        StatusState::Failure | StatusState::Error => Some(Phase::Failed),
        StatusState::Pending | StatusState::Running => None,
    };
    let time = |t: Option<&str>| t.and_then(|t| t.parse::<Timestamp>().ok());
    let recorded_at = time(Some(recorded.time.as_str()));
    let Some(phase) = finished.map(|p| identity.and_then(|i| i.phase).unwrap_or(p)) else {
        return lost(op, recorded, recorded_at);
    };
    let start = time(identity.and_then(|i| i.start_time.as_deref()));
    let end = time(identity.and_then(|i| i.end_time.as_deref())).or(recorded_at);
    let run = recorded.status.run.as_ref();
    let message = format!(
        "{RESTORED_PREFIX}{} of commit {}: {}",
        recorded.from, op.spec.source.commit, recorded.status.description
    );
    let patch = json!({
        "status": {
            "phase": phase,
            "message": message,
            "startTime": start.map(Time),
            "endTime": end.map(Time),
            "duration": duration(start, end),
            "summary": run.and_then(|r| r.summary.as_ref()),
            "failure": run.and_then(|r| r.failure.as_ref()),
            "result": recorded.status.description,
            // The status is on the commit already: delivered, never sent again.
            "desiredStatus": recorded.status,
            "reportedDigest": recorded.status.digest(),
        }
    });
    let warning = phase != Phase::Succeeded;
    (patch, RESTORED_EVENT, warning)
}

/// The patch of a run whose last record is pending or running: Failed with [`STATE_LOST`], its failure
/// status to be delivered over the recorded one.
fn lost(
    op: &ClusterOperation,
    recorded: &Recorded,
    recorded_at: Option<Timestamp>,
) -> (serde_json::Value, &'static str, bool) {
    let now = Timestamp::now();
    let message = format!(
        "{STATE_LOST} (its last status, {}: {})",
        recorded.from, recorded.status.description
    );
    let desired = CommitStatus {
        context: recorded.status.context.clone(),
        state: StatusState::Failure,
        description: crate::report::status::cut(&message, crate::report::status::MAX_STORED_DESCRIPTION),
        target_url: recorded.status.target_url.clone(),
        run: Some(RunRecord {
            operation: Some(OperationRecord {
                name: op.metadata.name.clone().unwrap_or_default(),
                digest: op.spec.digest.clone(),
                phase: Some(Phase::Failed),
                start_time: recorded_at.map(|t| t.to_string()),
                end_time: Some(now.to_string()),
                message: Some(message.clone()),
            }),
            ..RunRecord::default()
        }),
    };
    let patch = json!({
        "status": {
            "phase": Phase::Failed,
            "message": message,
            "startTime": recorded_at.map(Time),
            "endTime": Time(now),
            "duration": duration(recorded_at, Some(now)),
            "result": desired.description,
            "desiredStatus": desired,
            "reportedDigest": recorded.status.digest(),
        }
    });
    (patch, STATE_LOST_EVENT, true)
}

fn duration(start: Option<Timestamp>, end: Option<Timestamp>) -> Option<String> {
    let (start, end) = (start?, end?);
    Some(format_duration(end.duration_since(start).as_secs()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ClusterOperationSpec, OperationSource};

    fn op() -> ClusterOperation {
        let mut op = ClusterOperation::new(
            "c-install-abcdef12",
            ClusterOperationSpec {
                cluster: "c".into(),
                id: "install".into(),
                digest: "abcdef12".repeat(8),
                source: OperationSource {
                    commit: "1".repeat(40),
                    ..OperationSource::default()
                },
                ..ClusterOperationSpec::default()
            },
        );
        op.metadata.namespace = Some("kok-system".into());
        op
    }

    fn recorded(state: StatusState, identity: Option<OperationRecord>) -> Recorded {
        Recorded {
            from: "git-notes".into(),
            time: "2026-11-22T00:03:12Z".into(),
            status: CommitStatus {
                context: "kok/c/install".into(),
                state,
                description: "succeeded in 3m12s".into(),
                target_url: Some("https://logs.example/x".into()),
                run: identity.map(|operation| RunRecord {
                    operation: Some(operation),
                    ..RunRecord::default()
                }),
            },
        }
    }

    #[test]
    fn a_recorded_success_is_succeeded_with_its_times_and_is_not_sent_again() {
        let identity = OperationRecord {
            name: "c-install-abcdef12".into(),
            digest: "abcdef12".repeat(8),
            phase: Some(Phase::Succeeded),
            start_time: Some("2026-11-22T00:00:00Z".into()),
            end_time: Some("2026-11-22T00:03:12Z".into()),
            message: None,
        };
        let r = recorded(StatusState::Success, Some(identity));
        let (patch, event, warning) = restored_status(&op(), &r);
        let s = &patch["status"];
        assert_eq!(s["phase"], "Succeeded");
        assert_eq!(s["startTime"], "2026-11-22T00:00:00Z");
        assert_eq!(s["endTime"], "2026-11-22T00:03:12Z");
        assert_eq!(s["duration"], "3m12s");
        let status: crate::api::ClusterOperationStatus = serde_json::from_value(s.clone()).unwrap();
        let desired = status.desired_status.as_deref().expect("the recorded status");
        assert!(status.has_reported(desired), "delivered already: {s}");
        assert!(s["message"].as_str().unwrap().starts_with(RESTORED_PREFIX), "{s}");
        assert_eq!((event, warning), (RESTORED_EVENT, false));
    }

    #[test]
    fn a_recorded_failure_is_failed_and_a_forge_status_without_identity_too() {
        let (patch, event, warning) = restored_status(&op(), &recorded(StatusState::Failure, None));
        assert_eq!(patch["status"]["phase"], "Failed");
        assert_eq!(patch["status"]["endTime"], "2026-11-22T00:03:12Z");
        assert_eq!((event, warning), (RESTORED_EVENT, true));
    }

    #[test]
    fn a_recorded_pending_run_fails_held_with_what_to_do_and_tells_the_commit() {
        for state in [StatusState::Pending, StatusState::Running] {
            let r = recorded(state, None);
            let (patch, event, _) = restored_status(&op(), &r);
            let s = &patch["status"];
            assert_eq!(s["phase"], "Failed");
            assert!(s["message"].as_str().unwrap().starts_with(STATE_LOST), "{s}");
            assert_eq!(s["desiredStatus"]["state"], "failure");
            let status: crate::api::ClusterOperationStatus = serde_json::from_value(s.clone()).unwrap();
            assert!(
                !status.has_reported(status.desired_status.as_deref().unwrap()),
                "the failure goes to the commit: {s}"
            );
            assert!(
                status.has_reported(&r.status),
                "the recorded status is on the commit: {s}"
            );
            assert_eq!(event, STATE_LOST_EVENT);
        }
    }

    #[test]
    fn an_unreadable_annotation_is_an_error_not_a_run() {
        let mut o = op();
        o.metadata.annotations = Some([(ANNOTATION_RECORDED.to_string(), "{".to_string())].into());
        assert!(recorded_of(&o).unwrap().is_err());
        assert!(recorded_of(&op()).is_none());
    }
}
