//! After an operation's Job succeeded, before its success is reported: the verification of the workload
//! cluster ([`crate::health`]), retried until every check holds or `verifyTimeout` passes.
//!
//! Level-based, like the rest of the reconciler. The operation stays Running while it is verified; each
//! pass makes one attempt. A first attempt that passes ends the operation at once (Succeeded, no write in
//! between). One that fails records `status.verification` (state `Verifying`, `startedAt`, each check's
//! result), and the pass is repeated every `verify_retry`; only a changed result is written again. As the
//! start is in the status, a kok that restarts resumes the verification with the time it has left. Then:
//!
//! - every check holds: Succeeded, the status text gains `; verified: 5/5 nodes Ready, v1.31.4`;
//! - no kubeconfig yet: Succeeded with `; not verified: no kubeconfig`;
//! - `verifyTimeout` passed, or the kubeconfig is refused (exec plugin, a file, a missing named Secret):
//!   Failed with `playbook succeeded, verification failed: <what>`, holding its cluster as any failure does.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;
use tracing::info;

use super::operation::{now, op_error, run_report, transition, Transition};
use super::{Action, Context, ControllerError};
use crate::api::{
    kubeconfig_secret, ClusterOperation, Phase, Verification, VerificationState, DEFAULT_VERIFY_TIMEOUT,
    HOSTS_KEY, KUBECONFIG_KEY, VARS_KEY,
};
use crate::health::{observe::observe, verify, Access, AccessError, Expected};

/// Status message of an operation whose Job succeeded and whose cluster is being verified.
pub const VERIFYING: &str = "playbook succeeded, verifying the cluster";
/// Start of the message of an operation whose verification failed.
pub const VERIFICATION_FAILED: &str = "playbook succeeded, verification failed: ";
/// What an operation without a kubeconfig to verify with says.
pub const NO_KUBECONFIG: &str = "not verified: no kubeconfig";

/// One verification pass of `op`, whose Job `job` succeeded; `note` is what the Job's completion adds to
/// a success (local mode: which directory ran an unmapped image).
pub(super) async fn after_job(
    ctx: &Context,
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
    let client = match access(ctx, &op.spec.cluster).await {
        Ok(Access::Client(client)) => client,
        Ok(Access::NoKubeconfig) => {
            let skipped = verification(
                VerificationState::Skipped,
                started,
                NO_KUBECONFIG.to_string(),
                vec![],
            );
            return finish(ctx, op, &done, Phase::Succeeded, skipped).await;
        }
        Err(AccessError::ReadSecret { name, source, .. }) => {
            return Err(op_error(op, format!("reading the kubeconfig Secret {name}"))(
                source,
            ));
        }
        Err(refused) => {
            let failed = verification(VerificationState::Failed, started, refused.to_string(), vec![]);
            return finish(ctx, op, &done, Phase::Failed, failed).await;
        }
    };
    let spec = &op.spec;
    let pinned = (&spec.hosts_conf_ref.name, &spec.vars_conf_ref.name);
    let expected = expected(ctx, pinned, &spec.action, &spec.extra_args)
        .await
        .map_err(|(name, source)| op_error(op, format!("reading its pinned ConfigMap {name}"))(source))?;
    let verdict = verify(op.spec.verify, &expected, &observe(&client).await);
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
    let wait = Duration::try_from(left).unwrap_or_default();
    Ok(Action::requeue(ctx.config.verify_retry.min(wait)))
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
    ctx.clients
        .access(&ctx.client, ns, cluster, named.as_deref())
        .await
}

/// What the cluster should be after running `action` with `args` on the inventory and vars of the
/// ConfigMaps `(hosts, vars)`; on failure, the ConfigMap that could not be read.
pub(super) async fn expected(
    ctx: &Context,
    (hosts, vars): (&String, &String),
    action: &str,
    args: &[String],
) -> Result<Expected, (String, kube::Error)> {
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let mut texts = Vec::new();
    for (name, key) in [(hosts, HOSTS_KEY), (vars, VARS_KEY)] {
        let cm = api.get(name).await.map_err(|e| (name.clone(), e))?;
        texts.push(cm.data.and_then(|mut d| d.remove(key)).unwrap_or_default());
    }
    // A pinned hosts.yml passed validation; should it not read, the inventory check names every node.
    Ok(Expected::from_inputs(&texts[0], &texts[1], action, args).unwrap_or_default())
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
