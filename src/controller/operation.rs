//! The ClusterOperation reconciler: Pending → Queued → Running → Succeeded/Failed, one Job per operation.
//!
//! A Job that succeeded is followed by the verification of the workload cluster ([`super::verify`]) before
//! the operation is Succeeded. An operation whose spec carries pre-flight findings (kubespray's rules, see
//! [`crate::preflight`]) gets no Job: when its turn comes it fails with the first rule broken and, like any
//! failure, holds its cluster's queue.
//!
//! Level-based: each pass looks at the operation, its Job (by its deterministic name) and its siblings in
//! the store, and makes at most one transition. A Job that exists is always adopted, so a crash between
//! creating a Job and recording it never makes a second one. Every transition is one status merge patch
//! (phase, times, message and the desired commit status together) and one Event.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, Patch, PostParams};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{info, instrument, warn};

use super::credentials;
use super::job::{build_job, job_name, CONTAINER_NAME, JOB_NAME_LABEL};
use super::queue::{
    completion_note, decide, format_duration, job_outcome, phase, released_by_removal, JobOutcome, Wait,
};
use super::secret::{check_cached, check_vault_cached};
use super::start::{failure_message, verdict, Verdict};
use super::summary::{read_termination_message, RunReport};
use super::window::with_maintenance;
use super::{verify, Action, Context, ControllerError};
use crate::api::{ClusterOperation, ClusterOperationStatus, Phase, Verification, Verify};
use crate::report::status::operation_status;

/// Start of the message of an operation that started despite its cluster's maintenance windows or freezes
/// (`ignoreMaintenance: true`), followed by what it would have waited for.
pub const IGNORED_MAINTENANCE: &str = "started despite maintenance (ignoreMaintenance): ";

/// Message of an operation whose Job disappeared before it finished.
pub const JOB_DELETED: &str = "Job was deleted while running";

/// Start of the message of an operation refused by pre-flight, followed by `<rule-id>: <message>`.
pub const PREFLIGHT_REFUSED: &str = "pre-flight: ";

/// Event reason of an operation refused by pre-flight.
pub const PREFLIGHT_FAILED_EVENT: &str = "PreflightFailed";

/// Event reason of an operation refused because its `serviceAccount` is kok's own.
pub const SERVICE_ACCOUNT_REFUSED_EVENT: &str = "ServiceAccountRefused";

/// Why `op` may not run as the `serviceAccount` it names: kok's own (`own`), whose rights (every Secret of
/// kok's namespace, its Jobs and objects) a run must never get.
pub fn service_account_refusal(op: &ClusterOperation, own: Option<&str>) -> Option<String> {
    let account = op.spec.service_account.as_deref()?;
    (Some(account) == own).then(|| {
        format!(
            "serviceAccount {account} is kok's own ServiceAccount: a run may not get kok's rights; \
             name another one in cluster.yml or kok.yml, or leave serviceAccount out"
        )
    })
}

/// Why pre-flight refuses `op`: `pre-flight: <rule-id>: <message> (<path>:<line>)`, and how many other
/// rules its inputs break; `None` when its spec carries no finding.
pub fn preflight_refusal(op: &ClusterOperation) -> Option<String> {
    let findings = &op.spec.preflight.as_ref()?.findings;
    let first = findings.first()?;
    let at = match first.line {
        0 => first.path.clone(),
        line => format!("{}:{line}", first.path),
    };
    let more = match findings.len() {
        1 => String::new(),
        2 => "; and 1 more rule".to_string(),
        n => format!("; and {} more rules", n - 1),
    };
    Some(format!(
        "{PREFLIGHT_REFUSED}{}: {} ({at}){more}",
        first.rule, first.message
    ))
}

/// A transition to write: the new phase and what goes with it.
#[derive(Clone, Debug, Default)]
pub struct Transition {
    /// The new phase.
    pub phase: Phase,
    /// Why (Queued: what it waits for; Failed: `<reason>: <message>`).
    pub message: Option<String>,
    /// The Job, for Running.
    pub job_ref: Option<String>,
    /// Start time, for Running.
    pub start_time: Option<Timestamp>,
    /// End time, for terminal phases.
    pub end_time: Option<Timestamp>,
    /// Event reason (PascalCase) and whether it is a warning.
    pub event: Option<(&'static str, bool)>,
    /// What the run's pod reported, for terminal phases.
    pub report: Option<RunReport>,
    /// Where the verification of the workload cluster stands, once the Job succeeded.
    pub verification: Option<Verification>,
}

impl Transition {
    /// The transition with every secret kok knows scrubbed from the texts a run or the API server put in it
    /// (its message and its run's report), before they reach the status, the Event and the commit status.
    pub fn scrubbed(mut self) -> Transition {
        self.message = self.message.map(|m| crate::redact::scrub(&m));
        self.report = self.report.map(|r| r.scrubbed(crate::redact::scrub));
        self
    }
}

/// The status an operation has after `t`: its current status with the transition's fields set.
pub fn next_status(op: &ClusterOperation, t: &Transition) -> ClusterOperationStatus {
    let mut s = op.status.clone().unwrap_or_default();
    s.phase = t.phase;
    s.message = t.message.clone();
    if let Some(j) = &t.job_ref {
        s.job_ref = Some(j.clone());
    }
    if let Some(st) = t.start_time {
        s.start_time = Some(Time(st));
    }
    if let Some(end) = t.end_time {
        s.end_time = Some(Time(end));
        if let Some(start) = &s.start_time {
            s.duration = Some(format_duration(end.duration_since(start.0).as_secs()));
        }
    }
    if let Some(report) = &t.report {
        s.summary = report.summary.clone().map(Box::new);
        s.failure = report.failure.clone().map(Box::new);
        s.kubeconfig = report.kubeconfig.clone();
    }
    if let Some(v) = &t.verification {
        s.verification = Some(Box::new(v.clone()));
    }
    s
}

/// The status merge patch of a transition: only the fields kok's controller owns, never the reporter's.
/// The commit status is not stored: the reporter computes it from these fields
/// ([`crate::report::status::desired_status`]); one stored earlier is removed.
pub fn status_patch(
    op: &ClusterOperation,
    t: &Transition,
    url: Option<&str>,
    namespace: &str,
) -> serde_json::Value {
    let s = next_status(op, t);
    // A finished run's result is the description of its commit status; a run not finished has none,
    // and its copy is not made.
    let result = t.phase.is_terminal().then(|| {
        let mut after = op.clone();
        after.status = Some(s.clone());
        operation_status(&after, t.phase, t.message.as_deref(), url, namespace).description
    });
    json!({
        "status": {
            "phase": s.phase,
            "message": s.message,
            "jobRef": s.job_ref,
            "startTime": s.start_time,
            "endTime": s.end_time,
            "duration": s.duration,
            "summary": s.summary,
            "failure": s.failure,
            "kubeconfig": s.kubeconfig,
            "verification": s.verification,
            "result": result,
            "desiredStatus": null,
        }
    })
}

pub(super) fn op_error(op: &ClusterOperation, action: String) -> impl FnOnce(kube::Error) -> ControllerError {
    let (name, namespace) = (op.name_any(), op.namespace().unwrap_or_default());
    move |source| ControllerError::Operation {
        action,
        name,
        namespace,
        source,
    }
}

/// Writes a transition, guarded by the resourceVersion the operation was read at (so a concurrent cancel
/// or status write wins and the next pass looks again), and publishes its Event.
pub(super) async fn transition(
    ctx: &Context,
    op: &ClusterOperation,
    t: Transition,
) -> Result<(), ControllerError> {
    let t = t.scrubbed();
    let ns = ctx.config.namespace.as_str();
    let api: Api<ClusterOperation> = Api::namespaced(ctx.client.clone(), ns);
    let mut patch = status_patch(op, &t, ctx.config.status_url.as_deref(), ns);
    patch["metadata"] = json!({"resourceVersion": op.resource_version()});
    let result = patch["status"]["result"].as_str().map(str::to_string);
    // The answer (the whole run with its managed fields) is not read: the watch brings the run back.
    let _: serde::de::IgnoredAny = crate::api::watched::patch_answered(
        &ctx.client,
        &api,
        &op.name_any(),
        true,
        &crate::api::kok_params(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(op_error(op, format!("recording phase {}", t.phase)))?;
    info!(operation = %op.name_any(), cluster = %op.spec.cluster, phase = %t.phase, message = t.message.as_deref().unwrap_or(""), "transition");
    observe_run(ctx, op, &t);
    if let Some((reason, warning)) = t.event {
        let note = match (&result, &t.message) {
            (Some(r), _) => r.clone(),
            (None, Some(m)) => format!("{}: {m}", t.phase),
            (None, None) => t.phase.to_string(),
        };
        publish(ctx, op, reason, warning, note).await;
    }
    if t.phase.is_terminal() {
        // The operations waiting behind it are woken once the cache shows it finished.
        release(ctx, op);
    }
    Ok(())
}

/// Publishes one Event on `op` (reason and action `reason`, a warning or normal); a failure to publish is
/// logged, never fatal.
async fn publish(ctx: &Context, op: &ClusterOperation, reason: &str, warning: bool, note: String) {
    let ev = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.to_string(),
        note: Some(note),
        action: reason.to_string(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &op.object_ref(&())).await {
        warn!(operation = %op.name_any(), error = %e, "event not published");
    }
}

/// A run that ends (Running to Succeeded or Failed) counts in `kok_job_duration_seconds`, from its Job's
/// start to its end, once: only the transition out of Running observes it.
fn observe_run(ctx: &Context, op: &ClusterOperation, t: &Transition) {
    let result = match t.phase {
        Phase::Succeeded => "succeeded",
        Phase::Failed => "failed",
        _ => return,
    };
    if phase(op) != Phase::Running {
        return;
    }
    let start = op.status.as_ref().and_then(|s| s.start_time.as_ref());
    let (Some(start), Some(end)) = (start, t.end_time.as_ref()) else {
        return;
    };
    let took = end.duration_since(start.0).as_secs_f64().max(0.0);
    ctx.config
        .metrics
        .observe_job(&op.spec.action, result, Duration::from_secs_f64(took));
}

fn release(ctx: &Context, op: &ClusterOperation) {
    if let Ok(mut claims) = ctx.claims.lock() {
        claims.remove(&op.name_any());
    }
}

/// Schedules a reconcile of the operations an operation of `cluster` may have held back, now that the
/// cache shows it finished or its hold released: the waiting operations of its cluster, and those
/// waiting for a Job slot.
pub(super) fn let_waiting_go(ctx: &Context, cluster: &str) {
    let waiting = [Phase::Pending, Phase::Queued];
    for name in ctx.operations.names_in_phase(cluster, &waiting) {
        ctx.queue.trigger(&name);
    }
    let slot_waiters = match ctx.slot_waiters.lock() {
        Ok(mut w) => std::mem::take(&mut *w),
        Err(_) => return,
    };
    for name in slot_waiters {
        ctx.queue.trigger(&name);
    }
}

fn leave_slot_waiters(ctx: &Context, op: &ClusterOperation) {
    if let Ok(mut w) = ctx.slot_waiters.lock() {
        w.remove(&op.name_any());
    }
}

/// The operations of `cluster`, from the cache (with their cluster and current labels).
fn siblings_of(ctx: &Context, cluster: &str) -> Vec<ClusterOperation> {
    ctx.operations.operations_in(cluster)
}

pub(super) fn now() -> Timestamp {
    Timestamp::now()
}

/// Reconciles one ClusterOperation; a write that lost a race (409) is looked at again shortly.
#[instrument(skip_all, fields(operation = %op.name_any()))]
pub async fn reconcile(op: Arc<ClusterOperation>, ctx: Arc<Context>) -> Result<Action, ControllerError> {
    match reconcile_once(op, ctx).await {
        Err(e) if is_conflict(&e) => Ok(Action::requeue(Duration::from_millis(200))),
        other => other,
    }
}

/// One look at `op`, by phase: a finished operation lets go of its slot, a running one follows its Job, a
/// waiting one starts (or restores the run git records) when it may.
async fn reconcile_once(op: Arc<ClusterOperation>, ctx: Arc<Context>) -> Result<Action, ControllerError> {
    let ns = ctx.config.namespace.clone();
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    let name = job_name(&op.name_any());
    match phase(&op) {
        Phase::Succeeded => {
            release(&ctx, &op);
            Ok(Action::await_change())
        }
        Phase::Failed => {
            release(&ctx, &op);
            stop_job(&ctx, &op, &jobs, &name).await?;
            acknowledge_removal(&ctx, &op).await?;
            Ok(Action::await_change())
        }
        Phase::Canceled => {
            release(&ctx, &op);
            stop_canceled_job(&op, &jobs, &name).await?;
            Ok(Action::await_change())
        }
        Phase::Running => follow_job(&ctx, &op, &jobs, &name).await,
        Phase::Pending | Phase::Queued => match super::restore::recorded_of(&op) {
            Some(recorded) if op.status.as_ref().is_none_or(|s| s.job_ref.is_none()) => {
                restore(&ctx, &op, recorded).await
            }
            _ => start_or_wait(&op, &ctx, &jobs, &name).await,
        },
    }
}

/// Deletes the Job of the canceled `op` if it is still running: canceled while its Job was being created,
/// the Job must not run.
async fn stop_canceled_job(
    op: &ClusterOperation,
    jobs: &Api<Job>,
    name: &str,
) -> Result<(), ControllerError> {
    if let Some(job) = jobs
        .get_opt(name)
        .await
        .map_err(op_error(op, format!("reading Job {name}")))?
    {
        if job_outcome(&job) == JobOutcome::Running && owned_by(&job, op) {
            jobs.delete(name, &DeleteParams::background())
                .await
                .map_err(op_error(op, format!("deleting Job {name}")))?;
        }
    }
    Ok(())
}

/// A running operation: reads its Job and moves the operation on when the Job ended (through verification
/// when it asks for one) or is gone.
async fn follow_job(
    ctx: &Arc<Context>,
    op: &ClusterOperation,
    jobs: &Api<Job>,
    name: &str,
) -> Result<Action, ControllerError> {
    let job = jobs
        .get_opt(name)
        .await
        .map_err(op_error(op, format!("reading Job {name}")))?;
    if job.as_ref().map(job_outcome) == Some(JobOutcome::Succeeded) && op.spec.verify != Verify::None {
        return verify::after_job(ctx, op, name, job.as_ref().and_then(completion_note)).await;
    }
    let report = match job.as_ref().map(job_outcome) {
        Some(JobOutcome::Succeeded | JobOutcome::Failed { .. }) => Some(run_report(ctx, name).await),
        _ => None,
    };
    let t = match job.as_ref().map(job_outcome) {
        None => Transition {
            phase: Phase::Failed,
            message: Some(JOB_DELETED.to_string()),
            end_time: Some(now()),
            event: Some(("Failed", true)),
            ..Transition::default()
        },
        // The Job controller is ending the Job (and deleting its pods): its outcome says why.
        Some(JobOutcome::Running) if job.as_ref().is_some_and(ending) => return Ok(Action::await_change()),
        Some(JobOutcome::Running) => return watch_start(ctx, op, jobs, name).await,
        Some(JobOutcome::Succeeded) => Transition {
            phase: Phase::Succeeded,
            message: job.as_ref().and_then(completion_note),
            end_time: Some(finished_at(job.as_ref()).unwrap_or_else(now)),
            event: Some(("Succeeded", false)),
            report,
            ..Transition::default()
        },
        Some(JobOutcome::Failed { reason, message }) => Transition {
            phase: Phase::Failed,
            message: Some(failure_message(
                &reason,
                &message,
                op.spec.deadline_seconds(),
                Some(&ctx.pods.of(name)),
            )),
            end_time: Some(finished_at(job.as_ref()).unwrap_or_else(now)),
            event: Some(("Failed", true)),
            report,
            ..Transition::default()
        },
    };
    transition(ctx, op, t).await?;
    Ok(Action::await_change())
}

/// An operation whose Job still runs, judged by its pods ([`super::start`]): fine, looked at again while a
/// pod that cannot start is within its start timeout, or failed.
async fn watch_start(
    ctx: &Context,
    op: &ClusterOperation,
    jobs: &Api<Job>,
    name: &str,
) -> Result<Action, ControllerError> {
    let pods = ctx.pods.of(name);
    let started = op
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| t.0);
    match verdict(name, &pods, started, op.spec.start_timeout_seconds(), now()) {
        Verdict::Fine => Ok(Action::await_change()),
        Verdict::Stuck(left) => Ok(Action::requeue(left)),
        Verdict::Fails { message, event } => fail_running(ctx, op, jobs, name, message, event).await,
    }
}

/// Gives an operation created for a run the record in git holds the outcome recorded there, instead of
/// running it ([`super::restore`]); an unreadable record holds the queue as a failure.
async fn restore(
    ctx: &Context,
    op: &ClusterOperation,
    recorded: Result<crate::api::Recorded, String>,
) -> Result<Action, ControllerError> {
    let (mut patch, reason, warning) = match &recorded {
        Ok(recorded) => super::restore::restored_status(op, recorded),
        Err(why) => {
            let t = Transition {
                phase: Phase::Failed,
                message: Some(format!("{why}; bump its rerun to run the entry, or remove it")),
                end_time: Some(now()),
                event: Some(("RecordUnreadable", true)),
                ..Transition::default()
            };
            transition(ctx, op, t).await?;
            return Ok(Action::await_change());
        }
    };
    let ns = ctx.config.namespace.as_str();
    let api: Api<ClusterOperation> = Api::namespaced(ctx.client.clone(), ns);
    patch["metadata"] = json!({"resourceVersion": op.resource_version()});
    api.patch_status(&op.name_any(), &crate::api::kok_params(), &Patch::Merge(&patch))
        .await
        .map_err(op_error(op, "restoring the recorded outcome".to_string()))?;
    let phase = patch["status"]["phase"].as_str().unwrap_or_default().to_string();
    let message = patch["status"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    info!(operation = %op.name_any(), cluster = %op.spec.cluster, %phase, %message, "restored from the record, not run");
    publish(ctx, op, reason, warning, format!("{phase}: {message}")).await;
    release(ctx, op);
    Ok(Action::await_change())
}

/// Ends a running operation whose pod cannot start or was lost ([`super::start`]): Failed with `message` and
/// Event `event`, like any failure, then its Job deleted (its pods with it) so it never starts late. A delete
/// that fails is retried by the Failed phase's reconcile ([`stop_job`]).
async fn fail_running(
    ctx: &Context,
    op: &ClusterOperation,
    jobs: &Api<Job>,
    name: &str,
    message: String,
    event: &'static str,
) -> Result<Action, ControllerError> {
    warn!(operation = %op.name_any(), job = %name, %message, "run failed before its Job did");
    let t = Transition {
        phase: Phase::Failed,
        message: Some(message),
        end_time: Some(now()),
        event: Some((event, true)),
        ..Transition::default()
    };
    transition(ctx, op, t).await?;
    delete_job(op, jobs, name).await?;
    Ok(Action::await_change())
}

/// Deletes the Job of the failed `op` when the cache shows it still running: the run failed before its Job
/// did (it could not start, or its pod was lost) and its Job must not start late.
async fn stop_job(
    ctx: &Context,
    op: &ClusterOperation,
    jobs: &Api<Job>,
    name: &str,
) -> Result<(), ControllerError> {
    let key = ObjectRef::<Job>::new(name).within(&ctx.config.namespace);
    match ctx.jobs.get(&key) {
        Some(job) if job_outcome(&job) == JobOutcome::Running && owned_by(&job, op) => {
            delete_job(op, jobs, name).await
        }
        _ => Ok(()),
    }
}

/// Deletes Job `name` and, in the background, its pods; a Job already gone is fine.
async fn delete_job(op: &ClusterOperation, jobs: &Api<Job>, name: &str) -> Result<(), ControllerError> {
    match jobs.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(op_error(op, format!("deleting Job {name}"))(e)),
    }
}

/// What the finished pod of Job `job` reported in its termination message; nothing when there is no such pod
/// (deleted, or never scheduled) or it cannot be read (the reason is logged, the transition goes on).
///
/// The report is scrubbed as every transition is ([`Transition::scrubbed`]), of the Secrets the Job
/// mounts too: the Secret watch registered them ([`super::secret::register_values`]).
pub(super) async fn run_report(ctx: &Context, job: &str) -> RunReport {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let params = ListParams::default().labels(&format!("{JOB_NAME_LABEL}={job}"));
    match pods.list(&params).await {
        Ok(list) => list
            .items
            .iter()
            .filter_map(termination_message_of)
            .next_back()
            .map(|m| read_termination_message(&m))
            .unwrap_or_default(),
        Err(e) => {
            warn!(job, error = %e, "could not read the Job's pod; the status says only how the Job ended");
            RunReport::default()
        }
    }
}

/// The termination message of the runner container of a terminated pod.
pub fn termination_message_of(pod: &Pod) -> Option<String> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    let status = statuses
        .iter()
        .find(|c| c.name == CONTAINER_NAME)
        .or(statuses.first())?;
    status.state.as_ref()?.terminated.as_ref()?.message.clone()
}

/// Publishes, once, that the hold of the failed `op` on its cluster's queue was lifted because its entry left
/// operations.yml (an explicit acknowledgement), and lets the cluster's waiting operations look again.
async fn acknowledge_removal(ctx: &Context, op: &ClusterOperation) -> Result<(), ControllerError> {
    if op.status.as_ref().is_some_and(|s| s.hold_released.is_some()) {
        return Ok(());
    }
    let all = siblings_of(ctx, &op.spec.cluster);
    let siblings: Vec<&ClusterOperation> = all.iter().collect();
    if !released_by_removal(op, &siblings) {
        return Ok(());
    }
    let note = format!(
        "{}/{} removed from operations.yml: its failure no longer holds the cluster's later operations",
        op.spec.cluster, op.spec.id
    );
    let api: Api<ClusterOperation> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let patch =
        json!({"metadata": {"resourceVersion": op.resource_version()}, "status": {"holdReleased": note}});
    api.patch_status(&op.name_any(), &crate::api::kok_params(), &Patch::Merge(&patch))
        .await
        .map_err(op_error(op, "recording that its hold was released".to_string()))?;
    info!(operation = %op.name_any(), cluster = %op.spec.cluster, "hold released: entry removed");
    publish(ctx, op, "HoldReleased", false, note).await;
    Ok(())
}

/// Whether the Job controller has decided how `job` ends (`FailureTarget` or `SuccessCriteriaMet`) and is
/// ending its pods before it says so in `Failed` or `Complete`.
fn ending(job: &Job) -> bool {
    let conditions = job.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions
        .into_iter()
        .flatten()
        .any(|c| c.status == "True" && matches!(c.type_.as_str(), "FailureTarget" | "SuccessCriteriaMet"))
}

fn owned_by(job: &Job, op: &ClusterOperation) -> bool {
    let uid = op.uid();
    job.owner_references()
        .iter()
        .any(|r| Some(&r.uid) == uid.as_ref())
}

fn finished_at(job: Option<&Job>) -> Option<Timestamp> {
    let status = job?.status.as_ref()?;
    if let Some(t) = &status.completion_time {
        return Some(t.0);
    }
    status
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Failed" && c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref().map(|t| t.0))
}

fn running(job: &Job, name: &str, adopted: bool) -> Transition {
    let start = job
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .or(job.metadata.creation_timestamp.as_ref())
        .map(|t| t.0)
        .unwrap_or_else(now);
    Transition {
        phase: Phase::Running,
        message: adopted.then(|| format!("adopted existing Job {name}")),
        job_ref: Some(name.to_string()),
        start_time: Some(start),
        event: Some(("Started", false)),
        ..Transition::default()
    }
}

/// Starts `op`'s Job `name` when its turn has come, adopts the Job when it exists already, or records
/// what `op` waits for.
async fn start_or_wait(
    op: &ClusterOperation,
    ctx: &Context,
    jobs: &Api<Job>,
    name: &str,
) -> Result<Action, ControllerError> {
    // The Secret and Job stores have listed before any reconcile starts (see `controller::run`).
    ctx.operations.wait_until_listed().await;
    if adopt_existing_job(op, ctx, jobs, name).await? {
        return Ok(Action::await_change());
    }
    // An operation pre-flight refuses, or that names kok's own ServiceAccount, needs no Secret: it waits
    // for its turn, then fails without a Job.
    let refusal = service_account_refusal(op, ctx.config.own_service_account.as_deref())
        .map(|m| (m, SERVICE_ACCOUNT_REFUSED_EVENT))
        .or_else(|| preflight_refusal(op).map(|m| (m, PREFLIGHT_FAILED_EVENT)));
    if refusal.is_none() && wait_for_secrets(op, ctx).await? {
        // The Secret watch wakes this operation when the Secret appears or changes.
        return Ok(Action::await_change());
    }
    match take_turn(op, ctx, refusal).await {
        Turn::Refused { message, reason, now } => {
            warn!(operation = %op.name_any(), cluster = %op.spec.cluster, %message, %reason, "refused without a Job");
            let t = Transition {
                phase: Phase::Failed,
                message: Some(message),
                end_time: Some(now),
                event: Some((reason, true)),
                ..Transition::default()
            };
            transition(ctx, op, t).await?;
            Ok(Action::await_change())
        }
        Turn::Waits { why, now } => {
            // A window opening or a freeze ending wakes it by a timer at that instant; the rest by triggers.
            let next = why.wake_at().map_or(ctx.config.queue_resync, |t| {
                Duration::try_from(now.duration_until(t)).unwrap_or_default()
            });
            let message = why.to_string();
            let said = op.status.as_ref().and_then(|s| s.message.as_deref());
            if !(phase(op) == Phase::Queued && super::rollout::only_counts_moved(&why, said, &message)) {
                wait(ctx, op, message).await?;
            }
            Ok(Action::requeue(next))
        }
        Turn::Starts { note } => create_job(op, ctx, jobs, name, note).await,
    }
}

/// Records `op` as running its Job `name` when that Job exists and is `op`'s; whether it did.
///
/// A Job with this name is this operation's: adopt it whatever the queue says. The cache answers; a Job
/// it does not show yet is found by the create (409) and adopted there. A Job this process created (its
/// claim) whose start was not recorded, because the write lost a race, is started, not adopted, and
/// read when the cache does not show it yet.
async fn adopt_existing_job(
    op: &ClusterOperation,
    ctx: &Context,
    jobs: &Api<Job>,
    name: &str,
) -> Result<bool, ControllerError> {
    let claim = ctx
        .claims
        .lock()
        .ok()
        .and_then(|c| c.get(&op.name_any()).cloned());
    let key = ObjectRef::<Job>::new(name).within(&ctx.config.namespace);
    let job = match (ctx.jobs.get(&key), &claim) {
        (Some(job), _) => Some(job),
        (None, Some(_)) => jobs
            .get_opt(name)
            .await
            .map_err(op_error(op, format!("reading Job {name}")))?
            .map(Arc::new),
        (None, None) => None,
    };
    let Some(job) = job else { return Ok(false) };
    if !owned_by(&job, op) {
        warn!(operation = %op.name_any(), job = %name, "a Job with this operation's name belongs to something else");
        return Ok(false);
    }
    let mut started = running(&job, name, claim.is_none());
    if let Some(note) = claim.flatten() {
        started.message = Some(note);
    }
    transition(ctx, op, started).await?;
    Ok(true)
}

/// Records that `op` waits for its ssh or vault Secret when the cache shows one missing or unusable;
/// whether it does.
async fn wait_for_secrets(op: &ClusterOperation, ctx: &Context) -> Result<bool, ControllerError> {
    let ns = ctx.config.namespace.as_str();
    if let Some(secret) = &op.spec.ssh_auth_ref {
        if let Err(problem) = check_cached(&ctx.secrets, ns, &secret.name) {
            let message = format!(
                "{}{}",
                super::queue::SECRET_WAIT_PREFIX,
                problem.message(&secret.name, ns)
            );
            wait(ctx, op, message).await?;
            return Ok(true);
        }
    }
    if let Some(secret) = &op.spec.vault_password_ref {
        if let Err(problem) = check_vault_cached(&ctx.secrets, ns, &secret.name) {
            wait(ctx, op, format!("{}{problem}", super::queue::SECRET_WAIT_PREFIX)).await?;
            return Ok(true);
        }
    }
    Ok(false)
}

/// What the queue decided for an operation, under the start lock.
enum Turn {
    /// Its turn has come and something refuses it: it fails without a Job.
    Refused {
        message: String,
        reason: &'static str,
        now: Timestamp,
    },
    /// It waits for `why`.
    Waits { why: Wait, now: Timestamp },
    /// It starts, claimed, with the note its start records.
    Starts { note: Option<String> },
}

/// Decides under the start lock whether `op`'s turn has come: its cluster's queue, the Job slots, its
/// rollout's wave and its maintenance windows. A start is claimed before the lock is let go.
async fn take_turn(op: &ClusterOperation, ctx: &Context, refusal: Option<(String, &'static str)>) -> Turn {
    let _guard = ctx.start_lock.lock().await;
    // Joins the slot waiters before reading what runs: an operation that finishes after the read wakes it,
    // one that finished before is not in the running set.
    if let Ok(mut w) = ctx.slot_waiters.lock() {
        w.insert(op.name_any());
    }
    let busy = busy_operations(op, ctx);
    let all = siblings_of(ctx, &op.spec.cluster);
    let siblings: Vec<&ClusterOperation> = all.iter().collect();
    // An operation whose cluster is being verified keeps its cluster busy, but its Job is done.
    let with_jobs = busy.iter().filter(|n| !ctx.verifications.verifying(n)).count();
    let now = ctx.config.clock.now();
    let mut queue = decide(op, &siblings, &busy, with_jobs, ctx.config.max_concurrent_jobs);
    // Its turn in the cluster's queue has come (a Job slot is not needed to be refused).
    if let Some((message, reason)) = refusal.filter(|_| matches!(queue, Ok(()) | Err(Wait::NoJobSlot { .. })))
    {
        leave_slot_waiters(ctx, op);
        return Turn::Refused { message, reason, now };
    }
    // A run that its rollout's wave holds says so rather than waiting for a Job slot, and is no slot
    // waiter: the end of every other Job does not wake it, only what may open or free its wave does
    // (see `rollout::wake_rollout`).
    if matches!(queue, Ok(()) | Err(Wait::NoJobSlot { .. })) {
        queue = super::rollout::wave_decision(ctx, op, now).and(queue);
    }
    let spec = &op.spec;
    let ignored = match with_maintenance(queue, spec.maintenance.as_ref(), spec.ignore_maintenance, now) {
        Ok(ignored) => ignored,
        Err(why) => {
            if !matches!(why, Wait::NoJobSlot { .. }) {
                leave_slot_waiters(ctx, op);
            }
            return Turn::Waits { why, now };
        }
    };
    leave_slot_waiters(ctx, op);
    let note = ignored.map(|ignored| {
        info!(operation = %op.name_any(), reason = %ignored, "started outside maintenance: ignoreMaintenance");
        format!("{IGNORED_MAINTENANCE}{ignored}")
    });
    // Claimed under the lock, created outside it: Job creates of different clusters run in parallel.
    if let Ok(mut claims) = ctx.claims.lock() {
        claims.insert(op.name_any(), note.clone());
    }
    Turn::Starts { note }
}

/// The operations other than `op` that hold a cluster or a Job slot: those running and those claimed
/// (a claim whose operation has finished is dropped).
fn busy_operations(op: &ClusterOperation, ctx: &Context) -> BTreeSet<String> {
    let mut busy: BTreeSet<String> = ctx.operations.running();
    if let Ok(mut claims) = ctx.claims.lock() {
        let alive = |n: &String| ctx.operations.phase(n).is_some_and(|p| !p.is_terminal());
        claims.retain(|n, _| alive(n));
        busy.extend(claims.keys().cloned());
    }
    busy.remove(&op.name_any());
    busy
}

/// Creates the claimed `op`'s Job `name` (adopting it on a conflict) after its credentials Secrets, and
/// records it running with `note`; a failed create lets the claim go.
async fn create_job(
    op: &ClusterOperation,
    ctx: &Context,
    jobs: &Api<Job>,
    name: &str,
    note: Option<String>,
) -> Result<Action, ControllerError> {
    let ns = ctx.config.namespace.as_str();
    let cluster = op.spec.cluster.as_str();
    if let Err(e) = credentials::ensure(&ctx.client, ns, cluster, op.spec.service_account.as_deref()).await {
        release(ctx, op);
        return Err(op_error(
            op,
            format!("preparing the credentials Secrets and their Role for cluster {cluster}"),
        )(e));
    }
    let laid_out = match super::cache::with_vars_files(ctx, op).await {
        Ok(op) => op,
        Err((list, e)) => {
            release(ctx, op);
            return Err(op_error(op, format!("reading the file list ConfigMap {list}"))(e));
        }
    };
    let job = build_job(&laid_out, &ctx.config.job);
    let created = match jobs.create(&PostParams::default(), &job).await {
        Ok(j) => j,
        Err(kube::Error::Api(s)) if s.code == 409 => jobs
            .get(name)
            .await
            .map_err(op_error(op, format!("reading Job {name}")))?,
        Err(e) => {
            release(ctx, op);
            return Err(op_error(op, format!("creating Job {name}"))(e));
        }
    };
    info!(operation = %op.name_any(), job = %name, "job created");
    let mut started = running(&created, name, false);
    if note.is_some() {
        started.message = note;
    }
    // A start that loses a race (most often with the reporter recording a delivery) is looked at
    // again on the operation the cache shows next, where the claim makes it a start, not an adoption.
    transition(ctx, op, started).await?;
    Ok(Action::await_change())
}

fn is_conflict(e: &ControllerError) -> bool {
    matches!(e, ControllerError::Operation { source: kube::Error::Api(s), .. } if s.code == 409)
}

/// Records that `op` waits (Queued with `message`), unless that is already what it says.
async fn wait(ctx: &Context, op: &ClusterOperation, message: String) -> Result<(), ControllerError> {
    let current = op.status.as_ref();
    if current.map(|s| s.phase) == Some(Phase::Queued)
        && current.and_then(|s| s.message.as_deref()) == Some(&message)
    {
        return Ok(());
    }
    // No Event: every new run waits first, so an Event each was one more write for every run a pass
    // creates; the status says why it waits, and the Events mark the transitions that start and end it.
    let t = Transition {
        phase: Phase::Queued,
        message: Some(message),
        ..Transition::default()
    };
    transition(ctx, op, t).await
}

/// Retries a failed reconcile after a second.
pub fn error_policy(op: Arc<ClusterOperation>, err: &ControllerError, _ctx: Arc<Context>) -> Action {
    warn!(operation = %op.name_any(), error = %err, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(1))
}
