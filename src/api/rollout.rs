//! The `FleetRollout` custom resource: one operation for many clusters, in waves, from `rollouts/<name>.yml`.
//! (Argo Rollouts owns the plural `rollouts`; `fleetrollouts` collides with no well-known CRD.)

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Kind of the rollout resource, as errors name it.
pub const FLEET_ROLLOUT_KIND: &str = "FleetRollout";

/// Label carrying the rollout name, on its `FleetRollout` and on each cluster's run of it (a
/// ClusterOperation whose `spec.rollout` names the rollout): `kubectl get clusterops -l kok.dev/rollout=<name>`.
pub const LABEL_ROLLOUT: &str = "kok.dev/rollout";
/// Label carrying the wave of a rollout a cluster's run belongs to, on that run's ClusterOperation; kept
/// current when a commit moves the cluster to another wave.
pub const LABEL_WAVE: &str = "kok.dev/wave";

/// Which rollout an operation is a cluster's run of, and for which `rerun` of it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationRollout {
    /// Name of the rollout (its file's name, and its `FleetRollout`'s).
    pub name: String,
    /// The rollout's `rerun` this run was created at: a bump makes a new run only where the latest one
    /// failed or was canceled.
    #[serde(default)]
    pub rerun: u64,
}

/// One wave of a rollout, with the clusters it took.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutWave {
    /// Wave name, unique in the rollout.
    pub name: String,
    /// The clusters of the wave: those it names or selects that no earlier wave took.
    #[serde(default)]
    pub clusters: Vec<String>,
    /// At most this many of them run at once: a number (`2`) or a percentage of the wave (`25%`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel: Option<String>,
}

/// Where a rollout came from in git.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSource {
    /// Path of the rollout file inside the repository, e.g. `rollouts/upgrade-1-31.yml`.
    pub path: String,
    /// Revision the spec was rendered from, in the form `<branch>@sha1:<sha>`.
    pub revision: String,
}

/// What a rollout runs and in which waves (from one `rollouts/<name>.yml`).
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "kok.dev",
    version = "v1alpha1",
    kind = "FleetRollout",
    plural = "fleetrollouts",
    doc = "One operation run on many clusters in waves, from rollouts/<name>.yml: canary first, bake, halt on failures.",
    namespaced,
    status = "FleetRolloutStatus",
    derive = "PartialEq",
    shortname = "fleetrollout",
    category = "kok",
    printcolumn = r#"{"name":"Operation","type":"string","jsonPath":".spec.operationId"}"#,
    printcolumn = r#"{"name":"Wave","type":"string","jsonPath":".status.currentWave"}"#,
    printcolumn = r#"{"name":"Progress","type":"string","jsonPath":".status.progress"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct FleetRolloutSpec {
    /// Id of the operation every participating cluster runs.
    pub operation_id: String,
    /// sha256 (hex) of the canonical JSON of the operation entry: editing it is a new run everywhere.
    pub digest: String,
    /// Playbook path inside the runner image, or a script for `type: shell`.
    pub action: String,
    /// The waves, in order.
    pub waves: Vec<RolloutWave>,
    /// Seconds to wait after a wave succeeded before the next opens.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub bake_seconds: i64,
    /// Failed or canceled runs tolerated, across the rollout, before it halts.
    #[serde(default)]
    pub max_failures: u32,
    /// The last wave that may open until a commit changes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_after: Option<String>,
    /// Counter; bumping it runs again the clusters whose run failed or was canceled.
    #[serde(default)]
    pub rerun: u64,
    /// Repository path and revision this spec was rendered from.
    pub source: RolloutSource,
}

/// Where a rollout stands.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RolloutPhase {
    /// An open wave has clusters to run or running.
    #[default]
    Progressing,
    /// The next wave waits for `bake` to pass.
    Baking,
    /// The next wave waits for a commit that moves `stopAfter`.
    WaitingForPromotion,
    /// More runs failed than `maxFailures` allows: nothing of it starts, running ones finish.
    Halted,
    /// Every cluster finished.
    Completed,
}

/// Counts of one wave's clusters by the state of their latest run.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaveStatus {
    /// Wave name.
    pub name: String,
    /// Clusters not started.
    pub pending: u32,
    /// Clusters running.
    pub running: u32,
    /// Clusters succeeded.
    pub succeeded: u32,
    /// Clusters failed or canceled.
    pub failed: u32,
}

/// Observed state of a rollout.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FleetRolloutStatus {
    /// Progressing, Baking, WaitingForPromotion, Halted or Completed.
    #[serde(default)]
    pub phase: RolloutPhase,
    /// Counts per wave, in order.
    #[serde(default)]
    pub waves: Vec<WaveStatus>,
    /// The furthest open wave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_wave: Option<String>,
    /// Clusters succeeded of all, e.g. `12/40`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// When the next wave may open (the end of a bake).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_wave_time: Option<Time>,
    /// Why the next wave has not opened, or why the rollout halted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The rollout in one line, as its commit status says it: `wave 2/3 beijing: 5/8 succeeded, 0 failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Full sha of the commit that introduced or last changed the rollout: its status goes there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The `kok/rollout/<name>` status that commit should show (written by the controller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_status: Option<super::CommitStatus>,
    /// The `kok/rollout/<name>` status last delivered (written by the reporter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported: Option<super::CommitStatus>,
}
