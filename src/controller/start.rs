//! Why a run's pod cannot start, or stopped before its end, from what its pod and its Job's Events say (pure).
//!
//! A pod that waits on its image (`ErrImagePull`, `ImagePullBackOff`, `InvalidImageName`), on its
//! container's configuration (`CreateContainerConfigError`, `CreateContainerError`) or on the scheduler
//! (`PodScheduled=False`, `Unschedulable`), and a Job that cannot create its pod at all (the Job controller's
//! `FailedCreate` Event: a missing ServiceAccount, a quota, an admission webhook), fail their operation once
//! the operation's start timeout has passed since the pod was made (since the Job was, when there is no pod).
//! A pod still pulling or creating its container without such a reason is left alone: the Job's deadline
//! bounds it. A pod evicted or deleted before it finished fails its operation at once, saying by what.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

use super::job::DISRUPTION_CONDITION;
use super::queue::format_duration;

/// Event reason of an operation whose pod could not start within its start timeout.
pub const START_FAILED_EVENT: &str = "StartFailed";
/// Event reason of an operation whose pod was evicted or deleted before it finished.
pub const POD_LOST_EVENT: &str = "PodLost";
/// Reason the Job controller gives the Event of a pod it could not create.
pub const FAILED_CREATE: &str = "FailedCreate";
/// The container waiting reasons that mean the pod will not start by itself.
pub const WAITING_FAILURES: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
];
/// Reason of a pod condition `PodScheduled=False` that the scheduler found no node for.
pub const UNSCHEDULABLE: &str = "Unschedulable";
/// `status.reason` of a pod the kubelet evicted (node pressure).
pub const EVICTED: &str = "Evicted";

/// What kok keeps of one pod of one of its Jobs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodSeen {
    /// The pod's name.
    pub name: String,
    /// When it was made.
    pub created: Option<Timestamp>,
    /// Why it cannot start, while it has not: `<reason>: <detail>`.
    pub stuck: Option<String>,
    /// Why it was evicted: the kubelet's message, or the `DisruptionTarget` condition's reason and message.
    pub evicted: Option<String>,
    /// Whether it has ended (`Succeeded` or `Failed`).
    pub ended: bool,
    /// Whether it was deleted before it ended (its deletion seen while it ran, or it went unended).
    pub deleted: bool,
    /// Whether it is gone (the watch saw it go, or no longer lists it).
    pub gone: bool,
}

impl PodSeen {
    /// Takes what `now` says of the same pod, keeping what only an earlier look could tell: that it was
    /// deleted before it ended, and why it was evicted.
    pub fn update(&mut self, now: PodSeen) {
        let (deleted, evicted) = (self.deleted, self.evicted.take());
        *self = now;
        self.deleted |= deleted;
        self.evicted = evicted.or(self.evicted.take());
    }

    /// The pod went: deleted before it ended unless it had ended.
    pub fn went(&mut self) {
        self.deleted |= !self.ended;
        self.gone = true;
    }
}

/// What kok reads of a pod: why it cannot start, whether it was evicted, whether it ended.
pub fn seen(pod: &Pod) -> PodSeen {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    let pending = phase == "Pending";
    let stuck = pending.then(|| why_stuck(pod)).flatten();
    let conditions = status.and_then(|s| s.conditions.as_ref()).into_iter().flatten();
    let disruption = conditions
        .clone()
        .find(|c| c.type_ == DISRUPTION_CONDITION && c.status == "True")
        .map(|c| {
            let reason = c.reason.as_deref().unwrap_or(DISRUPTION_CONDITION);
            match c.message.as_deref().filter(|m| !m.is_empty()) {
                Some(m) => format!("{reason}: {m}"),
                None => reason.to_string(),
            }
        });
    let evicted = status
        .filter(|s| s.reason.as_deref() == Some(EVICTED))
        .map(|s| match s.message.as_deref().filter(|m| !m.is_empty()) {
            Some(m) => format!("by the kubelet: {m}"),
            None => "by the kubelet".to_string(),
        })
        .or(disruption);
    let ended = matches!(phase, "Succeeded" | "Failed");
    PodSeen {
        name,
        created: pod.metadata.creation_timestamp.as_ref().map(|t| t.0),
        stuck,
        evicted,
        ended,
        deleted: pod.metadata.deletion_timestamp.is_some() && !ended,
        gone: false,
    }
}

/// Why a pending pod cannot start: a container (or init container) waiting for one of
/// [`WAITING_FAILURES`], with its image, or the scheduler's message.
fn why_stuck(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let containers = status.init_container_statuses.iter().flatten();
    let waiting = containers
        .chain(status.container_statuses.iter().flatten())
        .find_map(waiting_failure);
    if waiting.is_some() {
        return waiting;
    }
    let unschedulable = status.conditions.iter().flatten().find(|c| {
        c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some(UNSCHEDULABLE)
    })?;
    Some(match unschedulable.message.as_deref().filter(|m| !m.is_empty()) {
        Some(m) => format!("{UNSCHEDULABLE}: {m}"),
        None => format!("{UNSCHEDULABLE}: the scheduler found no node for it"),
    })
}

fn waiting_failure(c: &ContainerStatus) -> Option<String> {
    let waiting = c.state.as_ref()?.waiting.as_ref()?;
    let reason = waiting
        .reason
        .as_deref()
        .filter(|r| WAITING_FAILURES.contains(r))?;
    let image = if c.image.is_empty() {
        String::new()
    } else {
        format!(" (image {})", c.image)
    };
    Some(match waiting.message.as_deref().filter(|m| !m.is_empty()) {
        Some(m) => format!("{reason}: container {}{image}: {m}", c.name),
        None => format!("{reason}: container {}{image}", c.name),
    })
}

/// What the pods of one Job, and the Job controller's Events about it, say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobPods {
    /// Its pods, in the order they were first seen.
    pub pods: Vec<PodSeen>,
    /// The message of the Job controller's last `FailedCreate` Event about the Job.
    pub failed_create: Option<String>,
}

/// What a running operation's pods say of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing wrong (or nothing known): the Job's own status says the rest.
    Fine,
    /// Its pod cannot start, and the start timeout has not passed yet: look again after this long.
    Stuck(Duration),
    /// The run fails: its status message and its Event's reason.
    Fails {
        /// The operation's message.
        message: String,
        /// The Event's reason.
        event: &'static str,
    },
}

/// What `pods` say of an operation whose Job `job` runs, started (its Job made) at `started`, with a start
/// timeout of `timeout_seconds`, at `now`.
pub fn verdict(
    job: &str,
    pods: &JobPods,
    started: Option<Timestamp>,
    timeout_seconds: i64,
    now: Timestamp,
) -> Verdict {
    if let Some(message) = lost(pods) {
        return Verdict::Fails {
            message,
            event: POD_LOST_EVENT,
        };
    }
    let (since, why) = match pods.pods.iter().rev().find(|p| !p.gone) {
        Some(pod) => match &pod.stuck {
            Some(why) => (pod.created.or(started), format!("{why} (pod {})", pod.name)),
            None => return Verdict::Fine,
        },
        None => match &pods.failed_create {
            Some(m) => (
                started,
                format!("{FAILED_CREATE}: Job {job} cannot create its pod: {m}"),
            ),
            None => return Verdict::Fine,
        },
    };
    let timeout = Duration::from_secs(timeout_seconds.max(1).unsigned_abs());
    let waited = since.map_or(Duration::ZERO, |t| {
        Duration::try_from(now.duration_since(t)).unwrap_or_default()
    });
    if waited < timeout {
        return Verdict::Stuck(timeout - waited);
    }
    Verdict::Fails {
        message: format!(
            "StartFailed: {why}; not started within {} (startTimeout {timeout_seconds})",
            format_duration(timeout_seconds)
        ),
        event: START_FAILED_EVENT,
    }
}

/// Why the run's pod is gone before it finished: evicted (by what), or deleted; `None` while it is there or
/// ended by itself.
pub fn lost(pods: &JobPods) -> Option<String> {
    let pod = pods
        .pods
        .iter()
        .rev()
        .find(|p| p.evicted.is_some() || p.deleted)?;
    Some(match &pod.evicted {
        Some(by) => format!("PodLost: pod {} was evicted before it finished ({by})", pod.name),
        None => format!(
            "PodLost: pod {} was deleted before it finished (not evicted: deleted by a user or a controller)",
            pod.name
        ),
    })
}

/// The message of an operation whose Job failed with `reason` and `message`: a deadline says which
/// (`exceeded its deadline of 12h0m`), an evicted or deleted pod says so, the rest is `<reason>: <message>`.
pub fn failure_message(reason: &str, message: &str, deadline_seconds: i64, pods: Option<&JobPods>) -> String {
    if reason == DEADLINE_EXCEEDED {
        return format!(
            "DeadlineExceeded: the Job exceeded its deadline of {} (activeDeadlineSeconds {deadline_seconds})",
            format_duration(deadline_seconds)
        );
    }
    if let Some(lost) = pods.and_then(lost) {
        return lost;
    }
    if message.is_empty() {
        reason.to_string()
    } else {
        format!("{reason}: {message}")
    }
}

/// The reason of a Job that ran past its `activeDeadlineSeconds`.
pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": status,
        }))
        .unwrap()
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn each_waiting_reason_says_the_container_its_image_and_the_message() {
        for reason in WAITING_FAILURES {
            for key in ["containerStatuses", "initContainerStatuses"] {
                let p = pod(json!({"phase": "Pending", key: [{
                    "name": "ansible", "image": "nope:1", "imageID": "", "ready": false, "restartCount": 0,
                    "state": {"waiting": {"reason": reason, "message": "it failed"}},
                }]}));
                assert_eq!(
                    seen(&p).stuck.as_deref(),
                    Some(format!("{reason}: container ansible (image nope:1): it failed").as_str())
                );
            }
        }
    }

    #[test]
    fn a_pod_creating_its_container_or_running_is_not_stuck() {
        let creating = pod(json!({"phase": "Pending", "containerStatuses": [{
            "name": "ansible", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ContainerCreating"}},
        }]}));
        assert_eq!(seen(&creating).stuck, None);
        let running = pod(json!({"phase": "Running"}));
        assert_eq!(
            seen(&running),
            PodSeen {
                name: "p".into(),
                created: Some(at("2026-01-01T00:00:00Z")),
                ..PodSeen::default()
            }
        );
    }

    #[test]
    fn an_unschedulable_pod_says_the_schedulers_message() {
        let p = pod(
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient cpu."}]}),
        );
        assert_eq!(
            seen(&p).stuck.as_deref(),
            Some("Unschedulable: 0/3 nodes are available: 3 Insufficient cpu.")
        );
    }

    #[test]
    fn eviction_says_by_what() {
        let kubelet = pod(
            json!({"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}),
        );
        assert_eq!(
            seen(&kubelet).evicted.as_deref(),
            Some("by the kubelet: The node was low on resource: memory.")
        );
        let api = pod(
            json!({"phase": "Running", "conditions": [{"type": "DisruptionTarget", "status": "True",
            "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"}]}),
        );
        assert_eq!(
            seen(&api).evicted.as_deref(),
            Some("EvictionByEvictionAPI: Eviction API: evicting")
        );
    }

    #[test]
    fn a_stuck_pod_fails_only_after_the_start_timeout() {
        let pods = JobPods {
            pods: vec![PodSeen {
                name: "p".into(),
                created: Some(at("2026-01-01T00:00:00Z")),
                stuck: Some("ImagePullBackOff: container ansible (image nope:1): back-off".into()),
                ..PodSeen::default()
            }],
            failed_create: None,
        };
        assert_eq!(
            verdict("j", &pods, None, 600, at("2026-01-01T00:09:00Z")),
            Verdict::Stuck(Duration::from_secs(60))
        );
        assert_eq!(
            verdict("j", &pods, None, 600, at("2026-01-01T00:10:00Z")),
            Verdict::Fails {
                message:
                    "StartFailed: ImagePullBackOff: container ansible (image nope:1): back-off (pod p); \
                          not started within 10m0s (startTimeout 600)"
                        .into(),
                event: START_FAILED_EVENT,
            }
        );
    }

    #[test]
    fn a_job_without_a_pod_fails_with_the_failed_create_message_after_the_start_timeout() {
        let pods = JobPods {
            pods: vec![],
            failed_create: Some("Error creating: serviceaccount \"x\" not found".into()),
        };
        let started = Some(at("2026-01-01T00:00:00Z"));
        assert!(matches!(
            verdict("j", &pods, started, 60, at("2026-01-01T00:00:30Z")),
            Verdict::Stuck(_)
        ));
        let Verdict::Fails { message, .. } = verdict("j", &pods, started, 60, at("2026-01-01T00:01:00Z"))
        else {
            panic!("fails");
        };
        assert!(
            message.contains("FailedCreate: Job j cannot create its pod: Error creating"),
            "{message}"
        );
    }

    #[test]
    fn a_pod_deleted_before_it_ended_fails_at_once_and_one_that_ended_does_not() {
        let mut running = PodSeen {
            name: "p".into(),
            ..PodSeen::default()
        };
        let mut ended = PodSeen {
            name: "p".into(),
            ended: true,
            ..PodSeen::default()
        };
        // Its deletion seen while it ran, then the kubelet's end of it: still deleted before it ended.
        running.update(PodSeen {
            name: "p".into(),
            deleted: true,
            ..PodSeen::default()
        });
        running.update(PodSeen {
            name: "p".into(),
            ended: true,
            ..PodSeen::default()
        });
        running.went();
        ended.went();
        let pods = JobPods {
            pods: vec![running],
            failed_create: None,
        };
        let Verdict::Fails {
            message,
            event: POD_LOST_EVENT,
        } = verdict("j", &pods, None, 600, Timestamp::now())
        else {
            panic!("fails");
        };
        assert!(
            message.contains("pod p was deleted before it finished"),
            "{message}"
        );
        let pods = JobPods {
            pods: vec![ended],
            failed_create: None,
        };
        assert_eq!(verdict("j", &pods, None, 600, Timestamp::now()), Verdict::Fine);
    }

    #[test]
    fn a_deadline_says_how_long_it_was() {
        assert_eq!(
            failure_message(
                "DeadlineExceeded",
                "Job was active longer than specified deadline",
                43200,
                None
            ),
            "DeadlineExceeded: the Job exceeded its deadline of 12h0m (activeDeadlineSeconds 43200)"
        );
        assert_eq!(
            failure_message("BackoffLimitExceeded", "", 60, None),
            "BackoffLimitExceeded"
        );
    }
}
