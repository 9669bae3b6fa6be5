//! After an operation's Job succeeded, before its success is reported: the verification of the workload
//! cluster ([`crate::health`]), retried until every check holds or `verifyTimeout` passes.
//!
//! Level-based, like the rest of the reconciler. The operation stays Running while it is verified. Each
//! attempt (the kubeconfig Secret, a client, the cluster's answers) runs in a task of its own, outside the
//! reconcile slots: a pass starts one and returns, and the attempt's end wakes the operation, whose next
//! pass decides. So a cluster that never answers holds no reconcile slot while it is tried and retried,
//! and other clusters' operations go on. Nor does the operation hold a `--max-concurrent-jobs` slot while
//! it is verified (its Job is done); it keeps its own cluster's later operations waiting. What the cluster should be (the pinned inventory and vars) is
//! read once per verification ([`Verifications`]), each pinned ConfigMap from the API server only the first
//! time any verification, health check or Job needs it ([`super::cache::PinnedData`]).
//!
//! An attempt that passes first ends the operation at once (Succeeded, no write in between). One that
//! fails records `status.verification` (state `Verifying`, `startedAt`, each check's result), and the
//! next attempt starts `verify_retry` later; only a changed result is written again. As the start is in
//! the status, a kok that restarts resumes the verification with the time it has left. Then:
//!
//! - every check holds: Succeeded, the status text gains `; verified: 5/5 nodes Ready, v1.31.4`;
//! - no kubeconfig yet: Succeeded with `; not verified: no kubeconfig`;
//! - `verifyTimeout` passed, or the kubeconfig is refused (exec plugin, a file, a missing named Secret):
//!   Failed with `playbook succeeded, verification failed: <what>`, holding its cluster as any failure does.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;
use tokio::time::Instant;
use tracing::info;

use super::operation::{let_waiting_go, now, op_error, run_report, transition, Transition};
use super::{Action, Context, ControllerError};
use crate::api::{
    kubeconfig_secret, ClusterOperation, Phase, PinnedInventory, Verification, VerificationState,
    DEFAULT_VERIFY_TIMEOUT, KUBECONFIG_KEY,
};
use crate::health::observe::{observe, OBSERVE_TIMEOUT};
use crate::health::{verify, Access, AccessError, Expected, Observed};
use crate::materialize::pinned::inventory_dir;

/// Status message of an operation whose Job succeeded and whose cluster is being verified.
pub const VERIFYING: &str = "playbook succeeded, verifying the cluster";
/// Start of the message of an operation whose verification failed.
pub const VERIFICATION_FAILED: &str = "playbook succeeded, verification failed: ";
/// What an operation without a kubeconfig to verify with says.
pub const NO_KUBECONFIG: &str = "not verified: no kubeconfig";
/// How long a pass waits for an attempt under way before it looks again anyway (an attempt ends sooner:
/// it wakes its operation when it does).
const ATTEMPT_LOOK_AGAIN: Duration = Duration::from_secs(OBSERVE_TIMEOUT.as_secs() + 30);

/// The verifications under way in this process, by operation: what each cluster should be (read once
/// per verification), and each one's attempt under way or its outcome not yet decided on.
#[derive(Default)]
pub struct Verifications {
    by_operation: Mutex<HashMap<String, Entry>>,
}

#[derive(Default)]
struct Entry {
    /// What the cluster should be, from the operation's pinned ConfigMaps, once read.
    expected: Option<Arc<Expected>>,
    /// The attempt under way, or the outcome of the last one.
    attempt: Option<Attempt>,
    /// When the next attempt may start (`verify_retry` after a failed one).
    not_before: Option<Instant>,
}

enum Attempt {
    Running,
    Done(Outcome),
}

/// What one attempt found.
enum Outcome {
    NoKubeconfig,
    /// The kubeconfig cannot be used (never [`AccessError::ReadSecret`]).
    Refused(AccessError),
    /// Reading the kubeconfig Secret or a pinned ConfigMap failed: the error policy retries.
    ReadFailed(ControllerError),
    Observed(Arc<Expected>, Observed),
}

/// What a pass finds of its operation's attempt.
enum Found {
    /// None under way: one may start now (the inputs, when read before, given)...
    Start(Option<Arc<Expected>>),
    /// ...or after this long.
    Wait(Duration),
    /// One is under way.
    Running,
    Done(Outcome),
}

impl Verifications {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.by_operation
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether this process verifies `op`'s cluster: its Job is done and holds no Job slot.
    pub fn verifying(&self, op: &str) -> bool {
        self.lock().contains_key(op)
    }

    /// Takes the outcome of `op`'s last attempt, or marks a new attempt started when one may start.
    fn take_or_start(&self, op: &str) -> Found {
        let mut all = self.lock();
        let entry = all.entry(op.to_string()).or_default();
        match entry.attempt.take() {
            Some(Attempt::Done(outcome)) => return Found::Done(outcome),
            Some(Attempt::Running) => {
                entry.attempt = Some(Attempt::Running);
                return Found::Running;
            }
            None => {}
        }
        let now = Instant::now();
        if let Some(wait) = entry.not_before.filter(|t| *t > now).map(|t| t - now) {
            return Found::Wait(wait);
        }
        entry.attempt = Some(Attempt::Running);
        Found::Start(entry.expected.clone())
    }

    /// Records the outcome of `op`'s attempt.
    fn done(&self, op: &str, outcome: Outcome) {
        if let Some(entry) = self.lock().get_mut(op) {
            if let Outcome::Observed(expected, _) = &outcome {
                entry.expected = Some(expected.clone());
            }
            entry.attempt = Some(Attempt::Done(outcome));
        }
    }

    /// Lets `op`'s next attempt start no sooner than `after` from now.
    fn retry_after(&self, op: &str, after: Duration) {
        if let Some(entry) = self.lock().get_mut(op) {
            entry.not_before = Some(Instant::now() + after);
        }
    }

    /// Forgets `op`'s verification, and those of operations no longer Running (canceled or deleted meanwhile).
    fn forget(&self, op: &str, running: impl Fn(&str) -> bool) {
        self.lock().retain(|name, _| name != op && running(name));
    }
}

/// One verification pass of `op`, whose Job `job` succeeded; `note` is what the Job's completion adds to
/// a success (local mode: which directory ran an unmapped image).
pub(super) async fn after_job(
    ctx: &Arc<Context>,
    op: &ClusterOperation,
    job: &str,
    note: Option<String>,
) -> Result<Action, ControllerError> {
    let done = Done { job, note };
    let verifying = op
        .status
        .as_ref()
        .and_then(|s| s.verification.as_deref())
        .filter(|v| v.state == VerificationState::Verifying);
    let started = verifying.and_then(|v| v.started_at.as_ref()).map(|t| t.0);
    let name = op.name_any();
    let (expected, observed) = match ctx.verifications.take_or_start(&name) {
        Found::Running => return Ok(Action::requeue(ATTEMPT_LOOK_AGAIN)),
        Found::Wait(wait) => return Ok(Action::requeue(wait)),
        Found::Start(expected) => {
            if expected.is_none() {
                // The verification begins: its Job slot is free for operations waiting on one.
                let_waiting_go(ctx, &op.spec.cluster);
            }
            start_attempt(ctx, op, expected);
            return Ok(Action::requeue(ATTEMPT_LOOK_AGAIN));
        }
        Found::Done(Outcome::ReadFailed(e)) => return Err(e),
        Found::Done(Outcome::NoKubeconfig) => {
            let skipped = verification(
                VerificationState::Skipped,
                started,
                NO_KUBECONFIG.to_string(),
                vec![],
            );
            return finish(ctx, op, &done, Phase::Succeeded, skipped).await;
        }
        Found::Done(Outcome::Refused(refused)) => {
            let failed = verification(VerificationState::Failed, started, refused.to_string(), vec![]);
            return finish(ctx, op, &done, Phase::Failed, failed).await;
        }
        Found::Done(Outcome::Observed(expected, observed)) => (expected, observed),
    };
    let verdict = verify(op.spec.verify, &expected, &observed);
    if verdict.passed {
        let passed = verification(
            VerificationState::Passed,
            started,
            verdict.message,
            verdict.checks,
        );
        return finish(ctx, op, &done, Phase::Succeeded, passed).await;
    }
    let now = now();
    let started = started.unwrap_or(now);
    let left = deadline(op, started).duration_since(now);
    if left <= SignedDuration::ZERO {
        let failed = verification(
            VerificationState::Failed,
            Some(started),
            verdict.message,
            verdict.checks,
        );
        return finish(ctx, op, &done, Phase::Failed, failed).await;
    }
    let wait = ctx
        .config
        .verify_retry
        .min(Duration::try_from(left).unwrap_or_default());
    ctx.verifications.retry_after(&name, wait);
    let latest = verification(
        VerificationState::Verifying,
        Some(started),
        verdict.message,
        verdict.checks,
    );
    if verifying != Some(&latest) {
        let message = format!("{VERIFYING}: {}", latest.message.as_deref().unwrap_or_default());
        let t = Transition {
            phase: Phase::Running,
            message: Some(message),
            event: verifying.is_none().then_some(("Verifying", false)),
            verification: Some(latest),
            ..Transition::default()
        };
        transition(ctx, op, t).await?;
    }
    Ok(Action::requeue(wait))
}

/// Starts an attempt at verifying `op`'s cluster in a task of its own, which wakes `op` when it ends.
fn start_attempt(ctx: &Arc<Context>, op: &ClusterOperation, expected: Option<Arc<Expected>>) {
    let (ctx, op) = (ctx.clone(), op.clone());
    tokio::spawn(async move {
        let outcome = attempt(&ctx, &op, expected).await;
        let name = op.name_any();
        ctx.verifications.done(&name, outcome);
        ctx.queue.trigger(&name);
    });
}

/// One look at `op`'s cluster: its kubeconfig, then (the inputs read unless `expected` is given) its answers.
async fn attempt(ctx: &Context, op: &ClusterOperation, expected: Option<Arc<Expected>>) -> Outcome {
    let client = match access(ctx, &op.spec.cluster).await {
        Ok(Access::Client(client, _)) => client,
        Ok(Access::NoKubeconfig) => return Outcome::NoKubeconfig,
        Err(AccessError::ReadSecret { name, source, .. }) => {
            let action = format!("reading the kubeconfig Secret {name}");
            return Outcome::ReadFailed(op_error(op, action)(source));
        }
        Err(refused) => return Outcome::Refused(refused),
    };
    let expected = match expected {
        Some(expected) => expected,
        None => {
            let spec = &op.spec;
            match self::expected(ctx, spec, &spec.action, &spec.extra_args).await {
                Ok(expected) => Arc::new(expected),
                Err((name, source)) => {
                    let action = format!("reading its pinned ConfigMap {name}");
                    return Outcome::ReadFailed(op_error(op, action)(source));
                }
            }
        }
    };
    Outcome::Observed(expected, observe(&client).await)
}

fn verification(
    state: VerificationState,
    started: Option<Timestamp>,
    message: String,
    checks: Vec<crate::api::CheckResult>,
) -> Verification {
    Verification {
        state,
        started_at: started.map(Time),
        message: Some(message),
        checks,
    }
}

/// When the verification of `op`, begun at `started`, gives up: `verifyTimeout` (default 10m) later.
fn deadline(op: &ClusterOperation, started: Timestamp) -> Timestamp {
    let timeout = op
        .spec
        .verify_timeout
        .as_deref()
        .unwrap_or(DEFAULT_VERIFY_TIMEOUT);
    let seconds = crate::layout::duration_seconds(timeout)
        .or_else(|| crate::layout::duration_seconds(DEFAULT_VERIFY_TIMEOUT))
        .unwrap_or_default();
    let timeout = SignedDuration::from_secs(i64::try_from(seconds).unwrap_or(i64::MAX));
    started.saturating_add(timeout).unwrap_or(Timestamp::MAX)
}

/// How kok reaches `cluster`: through its `kubeconfigSecret`, else its own `<cluster>-kubeconfig`.
pub(super) async fn access(ctx: &Context, cluster: &str) -> Result<Access, AccessError> {
    let ns = ctx.config.namespace.as_str();
    let named = ctx
        .clusters
        .get(&ObjectRef::new(cluster).within(ns))
        .and_then(|c| c.spec.kubeconfig_secret_ref.clone())
        .map(|r| r.name);
    // The Secret cache keeps key names: kok's own Secret without `value` holds no kubeconfig yet, and a
    // run's pod saves its kubeconfig before it exits, so before its Job completes.
    let own = ObjectRef::new(&kubeconfig_secret(cluster)).within(ns);
    let has_value = |s: &Secret| s.data.as_ref().is_some_and(|d| d.contains_key(KUBECONFIG_KEY));
    if named.is_none() && !ctx.secrets.get(&own).is_some_and(|s| has_value(&s)) {
        return Ok(Access::NoKubeconfig);
    }
    crate::health::access(&ctx.client, ns, cluster, named.as_deref()).await
}

/// What the cluster should be after running `action` with `args` on the inventory directory `pinned` names;
/// on failure, the ConfigMap that could not be read.
pub(super) async fn expected(
    ctx: &Context,
    pinned: &dyn PinnedInventory,
    action: &str,
    args: &[String],
) -> Result<Expected, (String, kube::Error)> {
    let mut config_maps = BTreeMap::new();
    for name in pinned.inventory_config_maps() {
        let cm = super::cache::pinned_config_map(ctx, name).await?;
        config_maps.insert(name.to_string(), ConfigMap::clone(&cm));
    }
    // The files a file list names, once the list is read.
    let listed = crate::materialize::pinned::vars_files(pinned, &config_maps).unwrap_or_default();
    for f in listed {
        if let std::collections::btree_map::Entry::Vacant(slot) = config_maps.entry(f.config_map) {
            let cm = super::cache::pinned_config_map(ctx, slot.key()).await?;
            slot.insert(ConfigMap::clone(&cm));
        }
    }
    // A pinned inventory passed validation; should it not read, the inventory check names every node.
    Ok(inventory_dir(pinned, &config_maps)
        .ok()
        .and_then(|dir| Expected::from_dir(&dir, action, args).ok())
        .unwrap_or_default())
}

/// The succeeded Job of an operation being verified: its name and its completion note.
struct Done<'a> {
    job: &'a str,
    note: Option<String>,
}

/// Ends `op` in `phase` with its verification `v` and what its pod reported.
async fn finish(
    ctx: &Context,
    op: &ClusterOperation,
    done: &Done<'_>,
    phase: Phase,
    v: Verification,
) -> Result<Action, ControllerError> {
    let failed = phase == Phase::Failed;
    let message = if failed {
        Some(format!(
            "{VERIFICATION_FAILED}{}",
            v.message.as_deref().unwrap_or_default()
        ))
    } else {
        done.note.clone()
    };
    info!(operation = %op.name_any(), cluster = %op.spec.cluster, state = ?v.state, "verification finished");
    let operations = &ctx.operations;
    ctx.verifications.forget(&op.name_any(), |other| {
        operations.phase(other) == Some(Phase::Running)
    });
    let t = Transition {
        phase,
        message,
        end_time: Some(now()),
        event: Some(if failed {
            ("VerificationFailed", true)
        } else {
            ("Succeeded", false)
        }),
        report: Some(run_report(ctx, done.job).await),
        verification: Some(v),
        ..Transition::default()
    };
    transition(ctx, op, t).await?;
    Ok(Action::await_change())
}
