//! What a notification says (pure): the event a commit status or a health transition stands for, with a
//! deterministic id, so that the same transition seen twice (a resync, a restart) is one event.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::api::{split_run_context, CommitStatus, StatusState, CONTEXT_PREFIX, HELD_PREFIX};
use crate::layout::notifications::EventKind;
use crate::report::status::{SUMMARY_CONTEXT, SYNC_CONTEXT};

/// The first failure of a run, as ansible reported it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// The task that failed (`role : task`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// The host it failed on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// ansible's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// One event, as every receiver type renders it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notification {
    /// Deterministic: the same transition always has the same id (CloudEvents `id`).
    pub id: String,
    /// What happened.
    #[serde(with = "kind_name")]
    pub kind: EventKind,
    /// When kok saw it (RFC 3339).
    pub time: String,
    /// The cluster, for operation and health events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The operation id, for operation events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    /// The rollout, for rollout events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<String>,
    /// The commit (full sha), when the event is about one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The outcome in one line, as the commit status says it.
    pub outcome: String,
    /// The run's first failure, when it failed in a task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// The run's page (`--web-url`) or the status link, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

mod kind_name {
    use super::EventKind;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(kind: &EventKind, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(kind.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<EventKind, D::Error> {
        let name = String::deserialize(d)?;
        EventKind::parse(&name).ok_or_else(|| serde::de::Error::custom(format!("unknown event {name}")))
    }
}

/// 16 hex digits of the sha256 of `parts`, joined by NUL.
pub fn event_id(parts: &[&str]) -> String {
    let mut hash = Sha256::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            hash.update([0]);
        }
        hash.update(part.as_bytes());
    }
    hex::encode(&hash.finalize()[..8])
}

impl Notification {
    /// The headline every receiver shows: `prod-bj/upgrade failed`.
    pub fn title(&self) -> String {
        let what = match self.kind {
            EventKind::OperationFailed => "failed",
            EventKind::OperationSucceeded => "succeeded",
            EventKind::OperationHeld => "is held",
            EventKind::HealthDegraded => "is unhealthy",
            EventKind::HealthRecovered => "is healthy again",
            EventKind::RolloutHalted => "halted",
            EventKind::RolloutFinished => "finished",
            EventKind::CommitRefused => "refused",
        };
        let subject = match (&self.cluster, &self.operation, &self.rollout, &self.commit) {
            (Some(c), Some(o), _, _) => format!("{c}/{o}"),
            (Some(c), None, _, _) => format!("cluster {c}"),
            (None, _, Some(r), _) => format!("rollout {r}"),
            (None, _, None, Some(sha)) => format!("commit {}", &sha[..sha.len().min(12)]),
            _ => "kok".to_string(),
        };
        format!("{subject} {what}")
    }

    /// The first failure in words: `TASK [x] on node1: message`.
    pub fn failure_line(&self) -> Option<String> {
        let f = self.failure.as_ref()?;
        let mut line = String::new();
        if let Some(task) = &f.task {
            line.push_str(&format!("TASK [{task}]"));
        }
        if let Some(host) = &f.host {
            line.push_str(&format!(" on {host}"));
        }
        if let Some(message) = &f.message {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(message);
        }
        (!line.trim().is_empty()).then(|| line.trim().to_string())
    }
}

/// The event a commit status on `commit` stands for, if any: an operation's success, failure or hold, a
/// rollout's halt or end, a refused commit. Pending, running and summary statuses are none.
pub fn from_status(commit: &str, status: &CommitStatus, now: &str) -> Option<Notification> {
    let context = status.context.as_str();
    if context == SUMMARY_CONTEXT || context == "kok/plan" {
        return None;
    }
    let base = |kind: EventKind| Notification {
        id: event_id(&[kind.as_str(), commit, context]),
        kind,
        time: now.to_string(),
        cluster: None,
        operation: None,
        rollout: None,
        commit: Some(commit.to_string()),
        outcome: status.description.clone(),
        failure: None,
        url: status.target_url.clone(),
    };
    if context == SYNC_CONTEXT {
        return (status.state == StatusState::Error).then(|| base(EventKind::CommitRefused));
    }
    let rest = context.strip_prefix(CONTEXT_PREFIX)?;
    if let Some(rollout) = rest.strip_prefix("rollout/").filter(|r| !r.contains('/')) {
        let kind = match status.state {
            StatusState::Failure | StatusState::Error => EventKind::RolloutHalted,
            StatusState::Success => EventKind::RolloutFinished,
            _ => return None,
        };
        return Some(Notification {
            rollout: Some(rollout.to_string()),
            ..base(kind)
        });
    }
    let (operation_context, _firing) = split_run_context(rest);
    let (cluster, operation) = operation_context.split_once('/')?;
    let kind = match status.state {
        StatusState::Success => EventKind::OperationSucceeded,
        // A run canceled before it started failed nothing.
        StatusState::Failure if status.description.starts_with("canceled") => return None,
        StatusState::Failure | StatusState::Error => EventKind::OperationFailed,
        StatusState::Pending if status.description.starts_with(HELD_PREFIX) => EventKind::OperationHeld,
        _ => return None,
    };
    let failure = status
        .run
        .as_ref()
        .and_then(|r| r.failure.as_ref())
        .map(|f| Failure {
            task: f.task.clone(),
            host: f.host.clone(),
            message: Some(f.message.trim().to_string()).filter(|m| !m.is_empty()),
        });
    Some(Notification {
        cluster: Some(cluster.to_string()),
        operation: Some(operation.to_string()),
        failure: failure.filter(|_| kind == EventKind::OperationFailed),
        ..base(kind)
    })
}

/// The event of a cluster's health turning `healthy` (true) or not, at `since` (the condition's
/// transition time): one id per transition.
pub fn health(cluster: &str, healthy: bool, since: &str, message: &str, now: &str) -> Notification {
    let kind = if healthy {
        EventKind::HealthRecovered
    } else {
        EventKind::HealthDegraded
    };
    Notification {
        id: event_id(&[kind.as_str(), cluster, since]),
        kind,
        time: now.to_string(),
        cluster: Some(cluster.to_string()),
        operation: None,
        rollout: None,
        commit: None,
        outcome: message.to_string(),
        failure: None,
        url: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{RunFailure, RunRecord};

    fn status(context: &str, state: StatusState, description: &str) -> CommitStatus {
        CommitStatus {
            context: context.into(),
            state,
            description: description.into(),
            target_url: Some("https://kok.example/operations/prod-upgrade-1".into()),
            run: None,
        }
    }

    #[test]
    fn an_operation_failure_names_cluster_operation_commit_and_first_failure() {
        let mut failed = status(
            "kok/prod/upgrade",
            StatusState::Failure,
            "TASK [x] failed on node1: boom",
        );
        failed.run = Some(RunRecord {
            operation: None,
            summary: None,
            failure: Some(RunFailure {
                task: Some("kubernetes/preinstall : Stop if swap enabled".into()),
                host: Some("node1".into()),
                message: "swap is on".into(),
                ..RunFailure::default()
            }),
        });
        let n = from_status("a".repeat(40).as_str(), &failed, "2026-11-28T03:00:00Z").unwrap();
        assert_eq!(n.kind, EventKind::OperationFailed);
        assert_eq!(
            (n.cluster.as_deref(), n.operation.as_deref()),
            (Some("prod"), Some("upgrade"))
        );
        assert_eq!(n.title(), "prod/upgrade failed");
        assert_eq!(
            n.failure_line().as_deref(),
            Some("TASK [kubernetes/preinstall : Stop if swap enabled] on node1: swap is on")
        );
        assert_eq!(
            n.url.as_deref(),
            Some("https://kok.example/operations/prod-upgrade-1")
        );
        let again = from_status("a".repeat(40).as_str(), &failed, "2026-11-28T04:00:00Z").unwrap();
        assert_eq!(again.id, n.id, "the same transition seen later is the same event");
        let rerun = from_status("b".repeat(40).as_str(), &failed, "2026-11-28T04:00:00Z").unwrap();
        assert_ne!(
            rerun.id, n.id,
            "a rerun's failure at another commit is another event"
        );
    }

    #[test]
    fn statuses_map_to_the_events_receivers_subscribe_to() {
        let sha = "c".repeat(40);
        let kind = |context: &str, state, description: &str| {
            from_status(&sha, &status(context, state, description), "t").map(|n| n.kind)
        };
        assert_eq!(
            kind("kok/p/i", StatusState::Success, "succeeded in 3s"),
            Some(EventKind::OperationSucceeded)
        );
        assert_eq!(
            kind(
                "kok/p/i",
                StatusState::Pending,
                "held: p/x failed at 1a2b3c4; bump its rerun"
            ),
            Some(EventKind::OperationHeld)
        );
        assert_eq!(kind("kok/p/i", StatusState::Pending, "queued"), None);
        assert_eq!(kind("kok/p/i", StatusState::Running, "running: x.yml"), None);
        assert_eq!(kind("kok/p/i", StatusState::Failure, "canceled: removed"), None);
        assert_eq!(
            kind("kok/p/i@2026-11-28T03:00:00Z", StatusState::Failure, "failed"),
            Some(EventKind::OperationFailed)
        );
        assert_eq!(
            kind("kok/rollout/r", StatusState::Failure, "halted"),
            Some(EventKind::RolloutHalted)
        );
        assert_eq!(
            kind("kok/rollout/r", StatusState::Success, "done"),
            Some(EventKind::RolloutFinished)
        );
        assert_eq!(
            kind("kok/sync", StatusState::Error, "unsigned"),
            Some(EventKind::CommitRefused)
        );
        assert_eq!(
            kind("kok/sync", StatusState::Success, "materialized 3 clusters"),
            None
        );
        assert_eq!(kind("kok/summary", StatusState::Failure, "1 failed"), None);
    }

    #[test]
    fn a_health_transition_is_one_event_per_transition_time() {
        let a = health("prod", false, "2026-11-28T03:00:00Z", "node3 is not Ready", "t1");
        let b = health("prod", false, "2026-11-28T03:00:00Z", "node3 is not Ready", "t2");
        let c = health("prod", false, "2026-11-28T03:20:00Z", "node3 is not Ready", "t2");
        assert_eq!(a.id, b.id);
        assert_ne!(a.id, c.id);
        assert_eq!(a.title(), "cluster prod is unhealthy");
    }
}
