//! The Cluster reconciler: conditions, last operation, counts per phase, the running or next operation
//! and the last finished one (what `kok status` reads), and the history limit.
//!
//! Conditions:
//! - `Ready`: False with `SecretNotFound`, `SecretWrongType` or `SecretKeyMissing` when the ssh Secret
//!   cannot be used (its operations wait without a Job); True (`SecretFound`, or `NoSecret` when the
//!   cluster names none) otherwise.
//! - `Reconciling`: True while an operation is Pending, Queued or Running.
//! - `Stalled`: True with reason `LastOperationFailed` when the most recently finished operation failed
//!   (or was canceled) and nothing else is waiting or running: kok cannot make progress on its own, a new
//!   commit (for instance a bumped `rerun`) is needed.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, DeleteParams, Patch};
use kube::ResourceExt;
use serde_json::json;
use tracing::{info, instrument, warn};

use super::queue::{history_to_delete, last_finished, operation_line, phase, queue_order, running_or_next};
use super::secret::check_cached;
use super::{Action, Context, ControllerError};
use crate::api::{
    Cluster, ClusterOperation, ClusterStatus, OperationCounts, OperationSummary, Phase, SecretRef,
    CONDITION_READY, CONDITION_RECONCILING, CONDITION_STALLED, DEFAULT_HISTORY_LIMIT,
};
use crate::report::status::{cut, MAX_STORED_DESCRIPTION};

fn condition(type_: &str, ok: bool, reason: &str, message: String, generation: Option<i64>) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: if ok { "True" } else { "False" }.to_string(),
        reason: reason.to_string(),
        message,
        observed_generation: generation,
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
    }
}

/// The status of `cluster` given its operations and the result of its Secret check
/// (`Err((reason, message))` when the Secret cannot be used). Transition times are left at the epoch;
/// [`keep_transition_times`] fills them.
pub fn cluster_status(
    cluster: &Cluster,
    ops: &[&ClusterOperation],
    secret: Result<&'static str, (&'static str, String)>,
) -> ClusterStatus {
    let generation = cluster.metadata.generation;
    let mut counts = OperationCounts::default();
    for o in ops {
        match phase(o) {
            Phase::Pending | Phase::Queued => counts.pending += 1,
            Phase::Running => counts.running += 1,
            Phase::Succeeded => counts.succeeded += 1,
            Phase::Failed | Phase::Canceled => counts.failed += 1,
        }
    }
    let start = |o: &ClusterOperation| o.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0);
    let last = ops
        .iter()
        .filter(|o| start(o).is_some())
        .max_by(|a, b| start(a).cmp(&start(b)).then_with(|| queue_order(a, b)))
        .or_else(|| {
            ops.iter()
                .filter(|o| !phase(o).is_terminal())
                .min_by(|a, b| queue_order(a, b))
        });
    let last_operation = last.map(|o| OperationSummary {
        name: o.name_any(),
        id: o.spec.id.clone(),
        phase: phase(o),
        summary: format!("{}: {}", o.spec.id, phase(o)),
    });
    let active = counts.pending + counts.running;
    let last_finished = last_finished(ops.iter().copied());
    // What `kok status` shows of the queue, so that it reads Clusters and not every run.
    let line = |o: &ClusterOperation| {
        let mut line = operation_line(o);
        line.outcome = cut(&line.outcome, MAX_STORED_DESCRIPTION);
        line
    };

    let ready = match &secret {
        Ok(reason) => condition(
            CONDITION_READY,
            true,
            reason,
            "the cluster's inputs are usable".into(),
            generation,
        ),
        Err((reason, message)) => condition(CONDITION_READY, false, reason, message.clone(), generation),
    };
    let reconciling = if active > 0 {
        condition(
            CONDITION_RECONCILING,
            true,
            if counts.running > 0 {
                "OperationRunning"
            } else {
                "OperationsQueued"
            },
            format!("{} running, {} waiting", counts.running, counts.pending),
            generation,
        )
    } else {
        condition(
            CONDITION_RECONCILING,
            false,
            "Idle",
            "no operation is waiting or running".into(),
            generation,
        )
    };
    let stalled = match last_finished {
        Some(o) if active == 0 && matches!(phase(o), Phase::Failed | Phase::Canceled) => {
            let why = o
                .status
                .as_ref()
                .and_then(|s| s.message.clone())
                .unwrap_or_default();
            condition(
                CONDITION_STALLED,
                true,
                "LastOperationFailed",
                format!(
                    "operation {} {}: {why}; push a commit to run it again",
                    o.spec.id,
                    phase(o)
                ),
                generation,
            )
        }
        _ => condition(
            CONDITION_STALLED,
            false,
            "Progressing",
            "the last operation did not fail".into(),
            generation,
        ),
    };
    ClusterStatus {
        conditions: vec![ready, reconciling, stalled],
        observed_revision: Some(cluster.spec.source.revision.clone()),
        observed_generation: generation,
        last_operation,
        operations: Some(counts),
        current_operation: running_or_next(ops.iter().copied()).map(line),
        last_finished: last_finished.map(line),
        kubeconfig_ref: kubeconfig_ref(cluster, ops),
        ..ClusterStatus::default()
    }
}

/// The Secret holding the cluster's admin kubeconfig, once a run saved one (kept when that run's record is
/// gone with the history limit).
fn kubeconfig_ref(cluster: &Cluster, ops: &[&ClusterOperation]) -> Option<SecretRef> {
    ops.iter()
        .find_map(|o| o.status.as_ref().and_then(|s| s.kubeconfig.clone()))
        .map(|name| SecretRef { name })
        .or_else(|| cluster.status.as_ref().and_then(|s| s.kubeconfig_ref.clone()))
}

/// Keeps the transition time of every condition whose status did not change; sets `now` on the others.
pub fn keep_transition_times(new: &mut ClusterStatus, old: Option<&ClusterStatus>, now: Timestamp) {
    for c in &mut new.conditions {
        let before = old.and_then(|o| o.conditions.iter().find(|p| p.type_ == c.type_));
        c.last_transition_time = match before {
            Some(p) if p.status == c.status => p.last_transition_time.clone(),
            _ => Time(now),
        };
    }
}

/// The merge patch that makes `old` into `new`: `new` with a `null` for each field `old` has and `new` leaves
/// out (a merge patch keeps a field it does not name), such as the queue's lines once it is empty.
fn status_patch(new: &ClusterStatus, old: Option<&ClusterStatus>) -> serde_json::Value {
    let mut patch = json!(new);
    if let (Some(fields), Some(serde_json::Value::Object(before))) =
        (patch.as_object_mut(), old.map(|o| json!(o)))
    {
        for key in before.keys() {
            fields.entry(key.clone()).or_insert(serde_json::Value::Null);
        }
    }
    patch
}

fn cluster_error(cluster: &Cluster, action: String) -> impl FnOnce(kube::Error) -> ControllerError {
    let (name, namespace) = (cluster.name_any(), cluster.namespace().unwrap_or_default());
    move |source| ControllerError::Cluster {
        action,
        name,
        namespace,
        source,
    }
}

/// Reconciles one Cluster: its status (written only when it changed) and its history limit.
#[instrument(skip_all, fields(cluster = %cluster.name_any()))]
pub async fn reconcile(cluster: Arc<Cluster>, ctx: Arc<Context>) -> Result<Action, ControllerError> {
    let ns = ctx.config.namespace.as_str();
    let name = cluster.name_any();
    // The Secret store has listed before any reconcile starts (see `controller::run`).
    ctx.operations.wait_until_listed().await;
    let all = ctx.operations.operations_in(&name);
    let ops: Vec<&ClusterOperation> = all.iter().collect();

    let secret = match &cluster.spec.ssh_auth_ref {
        None => Ok("NoSecret"),
        Some(s) => match check_cached(&ctx.secrets, ns, &s.name) {
            Ok(()) => Ok("SecretFound"),
            Err(problem) => Err((problem.reason(), problem.message(&s.name, ns))),
        },
    };
    let mut status = cluster_status(&cluster, &ops, secret);
    let limit = cluster
        .spec
        .defaults
        .history_limit
        .unwrap_or(DEFAULT_HISTORY_LIMIT);
    let to_delete = history_to_delete(&ops, limit);
    // Not held across the writes below: in a fleet's first pass the Clusters' reconciles wait on the
    // API server together, and their operations' copies (about 12 KiB a cluster of 20) added up to
    // 24 MB of the heap's peak at 2,000 clusters.
    drop(ops);
    drop(all);
    super::health::carry(&mut status, cluster.status.as_ref());
    keep_transition_times(&mut status, cluster.status.as_ref(), Timestamp::now());
    if cluster.status.as_ref() != Some(&status) {
        let api: Api<Cluster> = Api::namespaced(ctx.client.clone(), ns);
        let patch = json!({"status": status_patch(&status, cluster.status.as_ref())});
        api.patch_status(&name, &crate::api::kok_params(), &Patch::Merge(&patch))
            .await
            .map_err(cluster_error(&cluster, "writing status".into()))?;
    }

    let ops_api: Api<ClusterOperation> = Api::namespaced(ctx.client.clone(), ns);
    for old in to_delete {
        match ops_api.delete(&old, &DeleteParams::background()).await {
            Ok(_) => {
                info!(cluster = %name, operation = %old, limit, "operation deleted by the history limit")
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                return Err(cluster_error(
                    &cluster,
                    format!("deleting ClusterOperation {old}"),
                )(e))
            }
        }
    }
    // A Secret that appears or changes wakes this Cluster (see super::watch_secrets).
    Ok(Action::await_change())
}

/// Retries a failed reconcile after five seconds.
pub fn error_policy(cluster: Arc<Cluster>, err: &ControllerError, _ctx: Arc<Context>) -> Action {
    warn!(cluster = %cluster.name_any(), error = %err, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}
