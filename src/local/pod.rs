//! The pod of a local run, as the Job controller and a kubelet would show it: made when the run starts, bound
//! to this machine's node ([`NODE_NAME`]), `Running` (ready, its container running) once the process runs,
//! and terminated as the process ended: its exit code, `Completed` or `Error`, the termination message. So
//! `kubectl get pods` reads a run's state, and `kubectl logs job/<job>` finds the pod whose log is the run's
//! (served by [`super::kubelet`]). The status patches are pure; [`set_status`] and [`create`] write them.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde_json::{json, Value};
use tracing::warn;

use crate::controller::job::{CONTAINER_NAME, JOB_NAME_LABEL};

/// The node every local run's pod is bound to: this machine (also what `spec.nodeName` reads in a Job's env).
pub const NODE_NAME: &str = "localhost";
/// The address of the node and of its pods (`status.hostIP`, `status.podIP`).
pub const HOST_IP: &str = "127.0.0.1";
/// Exit code of a process the runner killed (its deadline passed) or lost (SIGKILL's 128 + 9).
pub const EXIT_KILLED: i32 = 137;
/// Exit code of a container that could not start, as the kubelet reports it.
pub const EXIT_START_ERROR: i32 = 128;

/// How the run's container ended, as a kubelet would write its terminated state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exit {
    /// The exit code.
    pub code: i32,
    /// `Completed`, `Error`, `StartError` or `ContainerStatusUnknown`.
    pub reason: &'static str,
    /// The termination message.
    pub message: Option<String>,
}

impl Exit {
    /// A process that exited by itself with `code`.
    pub fn exited(code: i32, message: Option<String>) -> Exit {
        Exit {
            code,
            reason: if code == 0 { "Completed" } else { "Error" },
            message,
        }
    }

    /// A process the runner killed: its deadline passed.
    pub fn killed(message: Option<String>) -> Exit {
        Exit {
            code: EXIT_KILLED,
            reason: "Error",
            message,
        }
    }

    /// A run whose process could not be started.
    pub fn start_error(message: &str) -> Exit {
        Exit {
            code: EXIT_START_ERROR,
            reason: "StartError",
            message: Some(message.to_string()),
        }
    }

    /// A run whose process was lost while kok was stopped, in the kubelet's words for a lost container.
    pub fn lost() -> Exit {
        Exit {
            code: EXIT_KILLED,
            reason: "ContainerStatusUnknown",
            message: Some("The container could not be located when the pod was terminated".to_string()),
        }
    }
}

/// The name of the pod of Job `job`.
pub fn name(job: &Job) -> String {
    format!("{}-local", job.name_any())
}

/// The container a run runs: the one named like kok's, else the first.
pub fn container(job: &Job) -> Option<&Container> {
    let containers = &job.spec.as_ref()?.template.spec.as_ref()?.containers;
    containers
        .iter()
        .find(|c| c.name == CONTAINER_NAME)
        .or_else(|| containers.first())
}

/// The pod of Job `job` as the Job controller makes it: the template's labels and spec, the Job's name labels,
/// owned by the Job, bound to [`NODE_NAME`].
pub fn object(job: &Job) -> Pod {
    let template = job.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default();
    let mut labels = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(JOB_NAME_LABEL.to_string(), job.name_any());
    labels.insert(format!("batch.kubernetes.io/{JOB_NAME_LABEL}"), job.name_any());
    let mut spec = template.spec.unwrap_or_default();
    spec.node_name = Some(NODE_NAME.to_string());
    Pod {
        metadata: ObjectMeta {
            name: Some(name(job)),
            namespace: job.namespace(),
            labels: Some(labels),
            owner_references: job.controller_owner_ref(&()).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

fn condition(type_: &str, status: bool, reason: Option<&str>, at: jiff::Timestamp) -> Value {
    let mut c = json!({"type": type_, "status": if status { "True" } else { "False" },
        "lastProbeTime": null, "lastTransitionTime": Time(at)});
    if let Some(reason) = reason {
        c["reason"] = json!(reason);
    }
    c
}

fn addresses(status: &mut Value, start: jiff::Timestamp) {
    status["hostIP"] = json!(HOST_IP);
    status["hostIPs"] = json!([{"ip": HOST_IP}]);
    status["podIP"] = json!(HOST_IP);
    status["podIPs"] = json!([{"ip": HOST_IP}]);
    status["startTime"] = json!(Time(start));
}

/// The status patch of a pod whose process runs since `start`: `Running`, ready, its container running.
pub fn running(container: Option<&Container>, start: jiff::Timestamp) -> Value {
    let conditions = [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ]
    .map(|t| condition(t, true, None, start));
    let mut status = json!({
        "phase": "Running",
        "conditions": conditions,
        "containerStatuses": [{
            "name": container.map(|c| c.name.clone()).unwrap_or_default(),
            "image": container.and_then(|c| c.image.clone()).unwrap_or_default(),
            "imageID": "",
            "ready": true,
            "started": true,
            "restartCount": 0,
            "state": {"running": {"startedAt": Time(start)}},
        }],
    });
    addresses(&mut status, start);
    json!({ "status": status })
}

/// The status patch of a pod whose process ran from `start` to `end` and ended with `exit`: `Succeeded` for
/// exit code 0, else `Failed`, no longer ready, its container terminated.
pub fn terminated(
    container: Option<&Container>,
    start: jiff::Timestamp,
    end: jiff::Timestamp,
    exit: &Exit,
) -> Value {
    let succeeded = exit.code == 0;
    let why = if succeeded { "PodCompleted" } else { "PodFailed" };
    let mut state = json!({"exitCode": exit.code, "reason": exit.reason,
        "startedAt": Time(start), "finishedAt": Time(end)});
    if let Some(message) = &exit.message {
        state["message"] = json!(message);
    }
    let mut status = json!({
        "phase": if succeeded { "Succeeded" } else { "Failed" },
        "conditions": [
            condition("PodReadyToStartContainers", true, None, start),
            condition("Initialized", true, None, start),
            condition("Ready", false, Some(why), end),
            condition("ContainersReady", false, Some(why), end),
            condition("PodScheduled", true, None, start),
        ],
        "containerStatuses": [{
            "name": container.map(|c| c.name.clone()).unwrap_or_default(),
            "image": container.and_then(|c| c.image.clone()).unwrap_or_default(),
            "imageID": "",
            "ready": false,
            "started": false,
            "restartCount": 0,
            "state": {"terminated": state},
        }],
    });
    addresses(&mut status, start);
    json!({ "status": status })
}

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(super::runner::FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

/// Makes the pod of `job` (an existing one is kept). Failures are logged: the Job's own status still says
/// how the run goes.
pub async fn create(client: &Client, job: &Job) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &job.namespace().unwrap_or_default());
    let post = PostParams {
        field_manager: params().field_manager,
        ..PostParams::default()
    };
    match pods.create(&post, &object(job)).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(err) => warn!(job = %job.name_any(), %err, "could not make the Job's pod"),
    }
}

/// Writes `patch` (from [`running`] or [`terminated`]) as the status of the pod of `job`, making the pod first
/// when it is missing (a run an earlier kok started before pods were made at the start). Failures are logged.
pub async fn set_status(client: &Client, job: &Job, patch: &Value) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &job.namespace().unwrap_or_default());
    let name = name(job);
    let written = match pods.patch_status(&name, &params(), &Patch::Merge(patch)).await {
        Err(kube::Error::Api(s)) if s.code == 404 => {
            create(client, job).await;
            pods.patch_status(&name, &params(), &Patch::Merge(patch)).await
        }
        other => other,
    };
    if let Err(err) = written {
        warn!(job = %job.name_any(), %err, "could not write the status of the Job's pod");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    fn container() -> Container {
        Container {
            name: CONTAINER_NAME.to_string(),
            image: Some("quay.io/kubespray/kubespray:v2.27.0".into()),
            ..Container::default()
        }
    }

    #[test]
    fn a_running_pod_is_ready_with_its_container_running_on_this_machine() {
        let patch = running(Some(&container()), at("2026-01-01T00:00:00Z"));
        let status: k8s_openapi::api::core::v1::PodStatus =
            serde_json::from_value(patch["status"].clone()).unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.pod_ip.as_deref(), Some(HOST_IP));
        let c = &status.container_statuses.unwrap()[0];
        assert!(c.ready && c.started == Some(true) && c.restart_count == 0);
        assert!(c.state.as_ref().unwrap().running.is_some());
        let ready = status
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True");
    }

    #[test]
    fn a_terminated_pod_says_how_its_process_ended() {
        let (start, end) = (at("2026-01-01T00:00:00Z"), at("2026-01-01T00:05:00Z"));
        let failed = terminated(
            Some(&container()),
            start,
            end,
            &Exit::exited(2, Some("TASK [x] failed".into())),
        );
        assert_eq!(failed["status"]["phase"], "Failed");
        let state = &failed["status"]["containerStatuses"][0]["state"]["terminated"];
        assert_eq!(
            (state["exitCode"].clone(), state["reason"].clone()),
            (json!(2), json!("Error"))
        );
        assert_eq!(state["message"], "TASK [x] failed");
        assert_eq!(failed["status"]["conditions"][2]["reason"], "PodFailed");
        let done = terminated(Some(&container()), start, end, &Exit::exited(0, None));
        assert_eq!(done["status"]["phase"], "Succeeded");
        assert_eq!(
            done["status"]["containerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
        assert_eq!(done["status"]["conditions"][2]["reason"], "PodCompleted");
    }
}
