//! Durable, exact delivery: a watch loop that sends each ClusterOperation's `status.desiredStatus` to
//! the sinks until it equals `status.reported`, and the same for `kok/sync` statuses kept in a ConfigMap.
//!
//! - The loop keeps in memory only the operations whose status is not delivered yet; when a newer
//!   desired status arrives before an older one went out, only the newest is sent (level-based). The
//!   same watch keeps the `kok_operations{phase}` gauge (one phase per operation in memory).
//! - State lives in the API server, so a restart resumes: a ClusterOperation whose `desiredStatus`
//!   differs from `reported` is delivered again; one whose statuses are equal is never sent again.
//! - After a delivery, `status.reported` is set to the delivered status and `reportAttempts` removed,
//!   with a merge patch on `/status` under the field manager [`REPORT_FIELD_MANAGER`] (so a server-side
//!   apply of the status by the controller, under another manager, leaves those fields alone).
//! - A failed delivery increments `reportAttempts` and is retried after [`Backoff::delay`]: the
//!   sink's Retry-After when it gave one, else exponential from 1 s up to 5 min. A refusal (4xx) is
//!   retried at the longest delay, since only a configuration change can fix it.
//! - Delivery is at least once: a crash between the sink's answer and the status patch sends the same
//!   status again on restart (if only the patch failed while running, just the patch is retried;
//!   harmless either way: the notes sink skips identical lines, GitLab's same-state
//!   refusal counts as delivered, GitHub keeps the newest of equal statuses).
//! - `kok/sync` statuses are not tied to a ClusterOperation: [`Reporter::deliver_sync`] records them in
//!   the ConfigMap [`SYNC_CONFIGMAP`], one data key per commit holding `{"desired", "reported",
//!   "attempts", "time"}` as JSON, and the same retry policy delivers them. The newest
//!   [`SYNC_HISTORY`] commits are kept.
//! - With several sinks, each status is delivered to every sink, to all of them at once; a sink that
//!   already took it is not sent it again while the others are retried (in memory; after a restart all
//!   sinks get it again).
//! - Rate limits: a sink that answers with a wait (Retry-After, or a rate-limit reset time, see
//!   [`super::forge`]) is paused until then. Deliveries to a paused sink do not send a request: they
//!   fail at once with [`DeliveryError::Paused`], the other sinks take the status meanwhile, and the
//!   operation is tried again when the pause ends, with its newest desired status (so the paused sink
//!   gets the newest status of each commit and context, and none is lost). A pause is not counted in
//!   `reportAttempts`.
//! - Budget: the forge sinks ([`Sink::budgeted`]) show one context per operation only while the commit
//!   has at most `--status-max-contexts` operations ([`Sinks::with_max_contexts`]). Above it, an
//!   operation's status goes to the other sinks only (git notes keep every context), except a failure,
//!   and except a context the forges already show (it keeps being updated, so none is left stale when a
//!   commit grows past the budget); the forges show instead one `kok/summary` status per commit
//!   ([`super::status::summary_status`]). The summary counts the operations by the state of their
//!   desired status (a finished operation deleted by the history limit stays counted); its first and
//!   its final value (nothing running or queued) go out at once, and so does a value counting
//!   operations the last one did not (the watch may show a pass's last operations after the pass
//!   ended) once none appeared for the settle time; the values between go at most once per minute. Operations are not delivered while the watch lists them, so that a commit's operations are
//!   counted before any of its contexts is sent. Until a commit is settled (its reconcile pass
//!   finished, see [`Reporter::settle`]) its operations' statuses go to the notes only and are held for
//!   the forges, which get them in order once the commit turns out to be within the budget (or drop
//!   them when it is above). After a restart, each commit above the budget gets its summary once more.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;

use super::sink::{DeliveryError, Sink};
use super::status::{summary_status, Tally};
use crate::api::watched::{operation_event, WatchedOperation};
use crate::api::{ClusterOperation, CommitStatus, Phase, StatusState};
use crate::metrics::Metrics;

/// Field manager of the `status.reported` / `status.reportAttempts` patches.
pub const REPORT_FIELD_MANAGER: &str = "kok-report";
/// ConfigMap recording the desired and delivered `kok/sync` status of recent commits.
pub const SYNC_CONFIGMAP: &str = "kok-sync-status";
/// How many commits the sync ConfigMap keeps.
pub const SYNC_HISTORY: usize = 50;
/// Every phase, in the order the gauge lists them.
const ALL_PHASES: [Phase; 6] = [
    Phase::Pending,
    Phase::Queued,
    Phase::Running,
    Phase::Succeeded,
    Phase::Failed,
    Phase::Canceled,
];
/// Most operation deliveries running at once (each sink may allow fewer, see
/// [`Sink::max_in_flight`]; the notes sink writes the deliveries in flight together in one batch, so
/// this bounds how many statuses one notes commit takes when a fleet-size commit reports at once).
pub const MAX_IN_FLIGHT: usize = 256;
/// Most writes of `status.reported` / `status.reportAttempts` running at once. Each holds a connection
/// to the API server, and the client keeps an idle connection open for 90 s with its buffers: with all
/// [`MAX_IN_FLIGHT`] deliveries recording at once, a fleet-size commit opened about 320 connections.
pub const RECORD_CONCURRENCY: usize = 16;
/// Wait before recording a delivered status again after the API server refused the patch.
const RECORD_RETRY: Duration = Duration::from_secs(5);

/// Retry delays for failed deliveries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// Delay after the first failure.
    pub initial: Duration,
    /// Longest delay (also used after a refusal).
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(300),
        }
    }
}

impl Backoff {
    /// Delay before the next attempt after `attempts` failures: the sink's Retry-After when given
    /// (capped at one hour), the longest delay after a refusal, else `initial * 2^(attempts-1)`, capped.
    pub fn delay(&self, attempts: u32, error: &DeliveryError) -> Duration {
        if !error.is_retryable() {
            return self.max;
        }
        if let Some(wait) = error.retry_after() {
            return wait.min(Duration::from_secs(3600));
        }
        let exponent = attempts.saturating_sub(1).min(20);
        self.initial.saturating_mul(1u32 << exponent).min(self.max)
    }
}

/// Errors of the delivery loop (the sinks' own failures are retried, not returned).
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Recording a delivery on a ClusterOperation's status failed.
    #[error("recording the delivered commit status on ClusterOperation {namespace}/{name}: {source}")]
    PatchOperationStatus {
        /// Namespace.
        namespace: String,
        /// ClusterOperation name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Reading or writing the sync status ConfigMap failed.
    #[error(
        "updating ConfigMap {namespace}/{SYNC_CONFIGMAP} with the kok/sync status of {commit}: {source}"
    )]
    SyncRecord {
        /// Namespace.
        namespace: String,
        /// Commit sha.
        commit: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// A sync record in the ConfigMap could not be encoded.
    #[error("encoding the kok/sync record of {commit}: {source}")]
    Encode {
        /// Commit sha.
        commit: String,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
}

/// (commit, context) → the status being delivered and the indexes of the sinks that took it.
type Partial = HashMap<(String, String), (CommitStatus, HashSet<usize>)>;

/// Default of `--status-max-contexts`: most operations a commit may have and still get one context per
/// operation on a forge.
pub const DEFAULT_MAX_CONTEXTS: usize = 50;
/// A commit whose operations stop appearing for this long counts as settled even when no reconcile
/// pass says so (see [`Reporter::settle`]).
pub const SETTLE_QUIET: Duration = Duration::from_secs(2);
/// Shortest time between two updates of a commit's `kok/summary` status (its first and final ones go
/// at once).
pub const SUMMARY_INTERVAL: Duration = Duration::from_secs(60);

/// Which of the sinks a status goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Every sink: `kok/sync`, and the statuses of operations shown one by one.
    All,
    /// Only the sinks without a budget (git notes): an operation of a commit above the budget.
    Unbudgeted,
    /// Only the budgeted sinks (forges): the `kok/summary` status.
    Budgeted,
    /// The sinks without a budget now, the budgeted ones once the commit's operations are all known.
    Hold,
}

impl Route {
    fn includes(self, sink: &dyn Sink) -> bool {
        match self {
            Route::All => true,
            Route::Unbudgeted | Route::Hold => !sink.budgeted(),
            Route::Budgeted => sink.budgeted(),
        }
    }
}

/// Every configured sink, with per-sink bookkeeping so a status reaches each sink once, and per-sink
/// rate-limit pauses.
pub struct Sinks {
    sinks: Vec<Arc<dyn Sink>>,
    /// Per sink, the permits of its deliveries in flight when it limits them.
    limits: Vec<Option<Arc<Semaphore>>>,
    /// Per sink, when the pause its rate limit asked for ends.
    paused: Vec<Mutex<Option<Instant>>>,
    metrics: &'static Metrics,
    /// (commit, context) → the status and the indexes of the sinks that took it, while others still fail.
    partial: Mutex<Partial>,
    max_contexts: usize,
    settle_quiet: Duration,
}

impl std::fmt::Debug for Sinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.sinks.iter().map(|s| s.name()))
            .finish()
    }
}

impl Sinks {
    /// Delivers to each of `sinks`, counting results in `metrics`, with a budget of
    /// [`DEFAULT_MAX_CONTEXTS`] per-operation contexts on the budgeted sinks.
    pub fn new(sinks: Vec<Arc<dyn Sink>>, metrics: &'static Metrics) -> Self {
        let limits = sinks
            .iter()
            .map(|s| s.max_in_flight().map(|n| Arc::new(Semaphore::new(n.max(1)))))
            .collect();
        let paused = sinks.iter().map(|_| Mutex::new(None)).collect();
        Sinks {
            sinks,
            limits,
            paused,
            metrics,
            partial: Mutex::default(),
            max_contexts: DEFAULT_MAX_CONTEXTS,
            settle_quiet: SETTLE_QUIET,
        }
    }

    /// Sets the budget: a commit with more operations than `max` shows one `kok/summary` context
    /// (plus one per failed operation) on the budgeted sinks instead of one per operation.
    pub fn with_max_contexts(mut self, max: usize) -> Self {
        self.max_contexts = max;
        self
    }

    /// Sets how long a commit's operations must stop appearing before the forges get their statuses
    /// when no reconcile pass says the commit is complete ([`Reporter::settle`]).
    pub fn with_settle_quiet(mut self, quiet: Duration) -> Self {
        self.settle_quiet = quiet;
        self
    }

    /// Names of the sinks.
    pub fn names(&self) -> Vec<String> {
        self.sinks.iter().map(|s| s.name().to_string()).collect()
    }

    /// The most operations a commit may have and still show one context each on the budgeted sinks;
    /// `usize::MAX` when no sink has a budget.
    fn budget(&self) -> usize {
        if self.sinks.iter().any(|s| s.budgeted()) {
            self.max_contexts
        } else {
            usize::MAX
        }
    }

    /// Delivers `status` on `commit` to every sink that has not taken it yet. On failure returns the
    /// error that allows the earliest retry (a retryable one before a refusal).
    pub async fn deliver(&self, commit: &str, status: &CommitStatus) -> Result<(), DeliveryError> {
        self.deliver_to(commit, status, Route::All).await
    }

    /// Delivers `status` on `commit` to the sinks of `route` that have not taken it yet, all at once, so
    /// a slow or paused sink does not hold up the others.
    pub async fn deliver_to(
        &self,
        commit: &str,
        status: &CommitStatus,
        route: Route,
    ) -> Result<(), DeliveryError> {
        // One entry per commit and context: a newer status replaces an older one's bookkeeping.
        let key = (commit.to_string(), status.context.clone());
        let done = match self.lock().get(&key) {
            Some((s, done)) if s == status => done.clone(),
            _ => HashSet::new(),
        };
        let attempts = self
            .sinks
            .iter()
            .enumerate()
            .filter(|(index, sink)| !done.contains(index) && route.includes(sink.as_ref()))
            .map(|(index, _)| async move { (index, self.deliver_one(index, commit, status).await) });
        let mut worst: Option<DeliveryError> = None;
        for (index, result) in futures::future::join_all(attempts).await {
            match result {
                Ok(()) => {
                    let mut partial = self.lock();
                    let entry = partial
                        .entry(key.clone())
                        .or_insert_with(|| (status.clone(), HashSet::new()));
                    if entry.0 != *status {
                        *entry = (status.clone(), HashSet::new());
                    }
                    entry.1.insert(index);
                }
                Err(err) => {
                    worst = Some(match worst {
                        Some(prev) if prefer(&prev, &err) => prev,
                        _ => err,
                    });
                }
            }
        }
        match worst {
            Some(err) => Err(err),
            None => {
                // A held status still goes to the budgeted sinks later: keep which sinks took it.
                if route != Route::Hold {
                    self.lock().remove(&key);
                }
                Ok(())
            }
        }
    }

    /// Delivers `status` once to the sinks of `route`, without retries or bookkeeping (failures are
    /// logged and counted only).
    async fn deliver_once(&self, commit: &str, status: &CommitStatus, route: Route) {
        let attempts = self
            .sinks
            .iter()
            .enumerate()
            .filter(|(_, sink)| route.includes(sink.as_ref()))
            .map(|(index, _)| self.deliver_one(index, commit, status));
        futures::future::join_all(attempts).await;
    }

    /// One delivery to sink `index`, unless it is paused; a wait the sink asks for pauses it.
    async fn deliver_one(
        &self,
        index: usize,
        commit: &str,
        status: &CommitStatus,
    ) -> Result<(), DeliveryError> {
        let sink = &self.sinks[index];
        let paused = |wait: Duration| {
            self.metrics.status_delivery(sink.name(), "paused");
            tracing::debug!(sink = sink.name(), %commit, context = %status.context, "commit status waits for the sink's rate limit");
            Err(DeliveryError::Paused {
                sink: sink.name().to_string(),
                context: status.context.clone(),
                commit: commit.to_string(),
                wait,
            })
        };
        if let Some(wait) = self.pause_left(index) {
            return paused(wait);
        }
        let _permit = match &self.limits[index] {
            Some(limit) => limit.clone().acquire_owned().await.ok(),
            None => None,
        };
        // The pause may have begun while this delivery waited for a permit.
        if let Some(wait) = self.pause_left(index) {
            return paused(wait);
        }
        let result = sink.deliver(commit, status).await;
        match &result {
            Ok(()) => {
                self.metrics.status_delivery(sink.name(), "delivered");
                tracing::info!(sink = sink.name(), %commit, context = %status.context, state = ?status.state, "commit status delivered");
            }
            Err(err) => {
                let result = if err.is_retryable() { "retry" } else { "failed" };
                self.metrics.status_delivery(sink.name(), result);
                tracing::warn!(sink = sink.name(), %commit, context = %status.context, error = %err, "commit status not delivered");
                if let Some(wait) = err.retry_after().filter(|_| err.is_retryable()) {
                    self.pause(index, wait);
                }
            }
        }
        result
    }

    /// Time left of sink `index`'s pause, if it is paused.
    fn pause_left(&self, index: usize) -> Option<Duration> {
        let until = (*self.paused[index].lock().unwrap_or_else(|p| p.into_inner()))?;
        let now = Instant::now();
        (until > now).then(|| until - now)
    }

    /// Pauses sink `index` for `wait` (capped at an hour), unless it is already paused for longer.
    fn pause(&self, index: usize, wait: Duration) {
        let wait = wait.min(Duration::from_secs(3600));
        if wait.is_zero() {
            return;
        }
        let until = Instant::now() + wait;
        let mut paused = self.paused[index].lock().unwrap_or_else(|p| p.into_inner());
        if paused.is_none_or(|p| p < until) {
            *paused = Some(until);
            tracing::warn!(
                sink = self.sinks[index].name(),
                seconds = wait.as_secs(),
                "the sink asked to wait (rate limit); pausing its deliveries, the other sinks go on"
            );
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Partial> {
        self.partial
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Whether `a` should be reported over `b`: retryable first, then the shorter wait.
fn prefer(a: &DeliveryError, b: &DeliveryError) -> bool {
    match (a.is_retryable(), b.is_retryable()) {
        (true, false) => true,
        (false, true) => false,
        _ => a.retry_after().unwrap_or_default() <= b.retry_after().unwrap_or_default(),
    }
}

/// One commit's `kok/sync` record in [`SYNC_CONFIGMAP`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncRecord {
    /// The status the commit should show.
    pub desired: CommitStatus,
    /// The status last delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported: Option<CommitStatus>,
    /// Failed attempts at delivering `desired`.
    #[serde(default)]
    pub attempts: u32,
    /// When `desired` was recorded (RFC 3339), to keep the newest records.
    pub time: String,
}

/// Delivers commit statuses from ClusterOperations and `kok/sync` records, durably and once.
pub struct Reporter {
    pub(super) client: Client,
    pub(super) namespace: String,
    pub(super) sinks: Arc<Sinks>,
    pub(super) backoff: Backoff,
    /// Per ClusterOperation (or `sync/<commit>`): the status being retried and when it may be tried again.
    not_before: Mutex<HashMap<String, (CommitStatus, Instant)>>,
    sync_wake: Notify,
    settle_wake: Notify,
    /// Places for the record writes, [`RECORD_CONCURRENCY`] of them.
    records: Semaphore,
}

impl std::fmt::Debug for Reporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reporter")
            .field("namespace", &self.namespace)
            .field("sinks", &self.sinks)
            .finish()
    }
}

impl Reporter {
    /// A reporter for the ClusterOperations in `namespace`.
    pub fn new(client: Client, namespace: impl Into<String>, sinks: Sinks, backoff: Backoff) -> Arc<Self> {
        Arc::new(Reporter {
            client,
            namespace: namespace.into(),
            sinks: Arc::new(sinks),
            backoff,
            not_before: Mutex::default(),
            sync_wake: Notify::new(),
            settle_wake: Notify::new(),
            records: Semaphore::new(RECORD_CONCURRENCY),
        })
    }

    /// Runs the delivery loops (operations, rollouts, `kok/sync`) until `shutdown` completes.
    pub async fn run(
        self: Arc<Self>,
        shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
    ) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        let operations = self.clone().run_operations(wait_true(rx.clone()));
        let rollouts = self.clone().run_rollouts(wait_true(rx.clone()));
        let sync = self.clone().run_sync(wait_true(rx));
        let stop = async move {
            shutdown.await;
            let _ = tx.send(true);
        };
        tokio::join!(operations, rollouts, sync, stop);
    }

    /// Watches the ClusterOperations and delivers each `desiredStatus` that differs from `reported`,
    /// until `shutdown` completes; deliveries in flight then finish and are recorded.
    ///
    /// Only operations with an undelivered status are kept in memory (not a copy of every object), and
    /// at most [`MAX_IN_FLIGHT`] deliveries run at once.
    pub async fn run_operations(
        self: Arc<Self>,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let api: Api<WatchedOperation> = Api::namespaced(self.client.clone(), &self.namespace);
        let events = watcher(api, watcher::Config::default())
            .default_backoff()
            .map_ok(operation_event);
        tokio::pin!(events);
        tokio::pin!(shutdown);
        let mut queue = Queue::new(self.sinks.settle_quiet);
        let budget = self.sinks.budget();
        let interval = SUMMARY_INTERVAL;
        let mut in_flight: JoinSet<Done> = JoinSet::new();
        loop {
            // While the watch lists, the operations of a commit are not all counted yet: wait for the
            // whole list before deciding which contexts a commit shows.
            if !queue.listing() {
                let now = Instant::now();
                queue.settle(false, now);
                for (commit, summary) in queue.due_summaries(now, budget, interval) {
                    in_flight.spawn(self.clone().deliver_summary(commit, summary));
                }
                for (name, mut job) in queue.take_due(now, MAX_IN_FLIGHT.saturating_sub(in_flight.len())) {
                    let route = queue.route(&job, budget);
                    job.backlog = queue.take_backlog(&name, route);
                    in_flight.spawn(self.clone().deliver_operation(name, job, route));
                }
            }
            // Nothing is taken while listing; at the in-flight limit a finished task wakes the loop.
            let next_due = match (queue.listing(), in_flight.len() >= MAX_IN_FLIGHT) {
                (true, _) => None,
                (false, true) => queue.next_summary(Instant::now(), budget, interval),
                (false, false) => queue
                    .next_due()
                    .into_iter()
                    .chain(queue.next_summary(Instant::now(), budget, interval))
                    .min(),
            };
            tokio::select! {
                _ = &mut shutdown => break,
                event = events.next() => if !self.take_event(&mut queue, event) {
                    break;
                },
                Some(done) = in_flight.join_next(), if !in_flight.is_empty() => match done {
                    Ok(Done::Operation(name, outcome)) => queue.finish(&name, outcome, Instant::now()),
                    Ok(Done::Summary { commit, status, retry }) => queue.finish_summary(&commit, status, retry, Instant::now()),
                    Err(err) => tracing::warn!(error = %err, "a commit status delivery task stopped"),
                },
                _ = self.settle_wake.notified() => {
                    // The pass's writes are done: take the events already received before settling,
                    // so that its last operations are counted.
                    while let Some(event) = events.next().now_or_never() {
                        if !self.take_event(&mut queue, event) {
                            break;
                        }
                    }
                    queue.settle(true, Instant::now());
                }
                _ = sleep_until(next_due), if next_due.is_some() => {}
            }
        }
        while in_flight.join_next().await.is_some() {}
    }

    /// Feeds one watch event to `queue` and the phase gauge; false when the watch ended.
    fn take_event(
        &self,
        queue: &mut Queue,
        event: Option<Result<watcher::Event<ClusterOperation>, watcher::Error>>,
    ) -> bool {
        match event {
            Some(Ok(event)) => {
                let counted = !matches!(event, watcher::Event::Init | watcher::Event::InitApply(_));
                queue.observe(event);
                if counted {
                    for (phase, n) in queue.phase_counts() {
                        self.sinks.metrics.set_operations(phase, n);
                    }
                }
            }
            Some(Err(err)) => {
                tracing::warn!(error = %err, "watching ClusterOperations for commit statuses failed; retrying")
            }
            None => return false,
        }
        true
    }

    /// Delivers a commit's `kok/summary` status to the budgeted sinks.
    async fn deliver_summary(self: Arc<Self>, commit: String, job: SummaryJob) -> Done {
        let result = self.sinks.deliver_to(&commit, &job.status, Route::Budgeted).await;
        let retry = result
            .err()
            .map(|err| self.backoff.delay(job.attempts.saturating_add(1), &err));
        Done::Summary {
            commit,
            status: job.status,
            retry,
        }
    }

    /// Delivers one operation's desired status to the sinks of `route` (unless it already was) and
    /// records it on the object.
    async fn deliver_operation(self: Arc<Self>, name: String, job: Pending, route: Route) -> Done {
        let (name, outcome) = self.deliver_and_record(name, job, route).await;
        Done::Operation(name, outcome)
    }

    async fn deliver_and_record(
        self: Arc<Self>,
        name: String,
        job: Pending,
        route: Route,
    ) -> (String, Outcome) {
        let api: Api<ClusterOperation> = Api::namespaced(self.client.clone(), &self.namespace);
        let record_failed = |err: kube::Error| {
            let err = ReportError::PatchOperationStatus {
                namespace: self.namespace.clone(),
                name: name.clone(),
                source: err,
            };
            tracing::warn!(error = %err, "commit status bookkeeping failed; retrying");
        };
        if !job.delivered {
            // Best effort, in order: the newest status below is the one that must arrive.
            for older in &job.backlog {
                self.sinks.deliver_once(&job.commit, older, Route::Budgeted).await;
            }
            if let Err(err) = self.sinks.deliver_to(&job.commit, &job.desired, route).await {
                if err.is_paused() {
                    // Nothing was sent: not an attempt, just a wait for the sink's rate limit.
                    let delay = self.backoff.delay(job.attempts.max(1), &err);
                    return (
                        name,
                        Outcome::Failed {
                            desired: job.desired,
                            attempts: job.attempts,
                            delay,
                        },
                    );
                }
                let attempts = job.attempts.saturating_add(1);
                let delay = self.backoff.delay(attempts, &err);
                let patch = serde_json::json!({ "status": { "reportAttempts": attempts } });
                let _place = self.records.acquire().await;
                if let Err(e) = api
                    .patch_status(&name, &patch_params(), &Patch::Merge(&patch))
                    .await
                {
                    record_failed(e);
                }
                return (
                    name,
                    Outcome::Failed {
                        desired: job.desired,
                        attempts,
                        delay,
                    },
                );
            }
        }
        if route == Route::Hold {
            return (name, Outcome::Held { desired: job.desired });
        }
        let patch = serde_json::json!({ "status": { "reported": &job.desired, "reportAttempts": null } });
        let _place = self.records.acquire().await;
        match api
            .patch_status(&name, &patch_params(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => (name, Outcome::Recorded { desired: job.desired }),
            Err(kube::Error::Api(e)) if e.code == 404 => (name, Outcome::Recorded { desired: job.desired }),
            Err(e) => {
                record_failed(e);
                (
                    name,
                    Outcome::DeliveredNotRecorded {
                        desired: job.desired,
                        delay: RECORD_RETRY,
                    },
                )
            }
        }
    }

    /// Says a reconcile pass finished: the operations of every commit known now are all known, so the
    /// forges may get their statuses (each commit's or its summary, by the budget).
    pub fn settle(&self) {
        self.settle_wake.notify_one();
    }

    /// Records the `kok/sync` status of `commit` and wakes the sync loop to deliver it. It also settles
    /// the commits known now (see [`Reporter::settle`]): kok/sync is recorded once a pass finished.
    pub async fn deliver_sync(&self, commit: &str, status: &CommitStatus) -> Result<(), ReportError> {
        self.settle();
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
        let sync_err = |source| ReportError::SyncRecord {
            namespace: self.namespace.clone(),
            commit: commit.to_string(),
            source,
        };
        let existing = api.get_opt(SYNC_CONFIGMAP).await.map_err(sync_err)?;
        let records = existing.as_ref().map(sync_records).unwrap_or_default();
        if let Some(record) = records.get(commit) {
            if record.desired == *status {
                return Ok(());
            }
        }
        let record = SyncRecord {
            desired: status.clone(),
            reported: records.get(commit).and_then(|r| r.reported.clone()),
            attempts: 0,
            time: jiff::Timestamp::now().to_string(),
        };
        let encoded = serde_json::to_string(&record).map_err(|source| ReportError::Encode {
            commit: commit.to_string(),
            source,
        })?;
        let mut data = serde_json::Map::new();
        data.insert(commit.to_string(), serde_json::Value::String(encoded));
        // Keep the newest records: drop the oldest delivered ones beyond the limit.
        let mut by_age: Vec<(&String, &SyncRecord)> = records.iter().filter(|(c, _)| *c != commit).collect();
        by_age.sort_by(|a, b| b.1.time.cmp(&a.1.time));
        for (old, _) in by_age.iter().skip(SYNC_HISTORY.saturating_sub(1)) {
            data.insert((*old).clone(), serde_json::Value::Null);
        }
        let patch = serde_json::json!({ "data": data });
        match existing {
            Some(_) => {
                api.patch(SYNC_CONFIGMAP, &patch_params(), &Patch::Merge(&patch))
                    .await
                    .map_err(sync_err)?;
            }
            None => {
                let mut cm: ConfigMap = serde_json::from_value(serde_json::json!({
                    "metadata": {
                        "name": SYNC_CONFIGMAP,
                        "labels": {
                            "app.kubernetes.io/part-of": "kok",
                            "app.kubernetes.io/component": "commit-status",
                        },
                    },
                }))
                .map_err(|source| ReportError::Encode {
                    commit: commit.to_string(),
                    source,
                })?;
                let mut map = BTreeMap::new();
                if let Some(serde_json::Value::String(v)) = data.get(commit) {
                    map.insert(commit.to_string(), v.clone());
                }
                cm.data = Some(map);
                match api
                    .create(
                        &PostParams {
                            field_manager: Some(REPORT_FIELD_MANAGER.into()),
                            ..Default::default()
                        },
                        &cm,
                    )
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 409 => {
                        api.patch(SYNC_CONFIGMAP, &patch_params(), &Patch::Merge(&patch))
                            .await
                            .map_err(sync_err)?;
                    }
                    Err(e) => return Err(sync_err(e)),
                }
            }
        }
        self.sync_wake.notify_one();
        Ok(())
    }

    /// Delivers the `kok/sync` records whose desired status differs from the reported one, until
    /// `shutdown` completes.
    pub async fn run_sync(
        self: Arc<Self>,
        shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
    ) {
        tokio::pin!(shutdown);
        loop {
            let wait = match self.sync_pass().await {
                Ok(next) => next.unwrap_or(self.backoff.max),
                Err(err) => {
                    tracing::warn!(error = %err, "kok/sync delivery pass failed; retrying");
                    self.backoff.initial.max(Duration::from_secs(5))
                }
            };
            tokio::select! {
                _ = &mut shutdown => return,
                _ = self.sync_wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// One pass over the sync records; returns how long until the next retry is due, if any.
    async fn sync_pass(&self) -> Result<Option<Duration>, ReportError> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
        let cm = api
            .get_opt(SYNC_CONFIGMAP)
            .await
            .map_err(|source| ReportError::SyncRecord {
                namespace: self.namespace.clone(),
                commit: String::new(),
                source,
            })?;
        let Some(cm) = cm else { return Ok(None) };
        let mut next: Option<Duration> = None;
        for (commit, mut record) in sync_records(&cm) {
            if record.reported.as_ref() == Some(&record.desired) {
                continue;
            }
            let key = format!("sync/{commit}");
            if let Some(wait) = self.wait_for(&key, &record.desired) {
                next = Some(next.map_or(wait, |n| n.min(wait)));
                continue;
            }
            let result = self.sinks.deliver(&commit, &record.desired).await;
            let wait = match &result {
                Ok(()) => {
                    record.reported = Some(record.desired.clone());
                    record.attempts = 0;
                    self.clear_wait(&key);
                    None
                }
                Err(err) => {
                    record.attempts = record.attempts.saturating_add(1);
                    Some(self.schedule(&key, &record.desired, record.attempts, err))
                }
            };
            if let Some(wait) = wait {
                next = Some(next.map_or(wait, |n| n.min(wait)));
            }
            self.patch_sync_record(&api, &commit, &record).await?;
        }
        Ok(next)
    }

    /// Writes one record back, unless its desired status changed meanwhile (then the next pass sends it).
    async fn patch_sync_record(
        &self,
        api: &Api<ConfigMap>,
        commit: &str,
        record: &SyncRecord,
    ) -> Result<(), ReportError> {
        let sync_err = |source| ReportError::SyncRecord {
            namespace: self.namespace.clone(),
            commit: commit.to_string(),
            source,
        };
        let current = api.get_opt(SYNC_CONFIGMAP).await.map_err(sync_err)?;
        let latest = current.as_ref().map(sync_records).unwrap_or_default();
        let mut record = record.clone();
        if let Some(now) = latest.get(commit) {
            if now.desired != record.desired {
                record.desired = now.desired.clone();
                record.time = now.time.clone();
                record.attempts = 0;
            }
        }
        let encoded = serde_json::to_string(&record).map_err(|source| ReportError::Encode {
            commit: commit.to_string(),
            source,
        })?;
        let patch = serde_json::json!({ "data": { commit: encoded } });
        api.patch(SYNC_CONFIGMAP, &patch_params(), &Patch::Merge(&patch))
            .await
            .map_err(sync_err)?;
        Ok(())
    }

    /// Remaining wait for `key` when `status` is the one scheduled for a later retry.
    pub(super) fn wait_for(&self, key: &str, status: &CommitStatus) -> Option<Duration> {
        let map = self.not_before.lock().unwrap_or_else(|p| p.into_inner());
        let (scheduled, at) = map.get(key)?;
        if scheduled != status {
            return None;
        }
        let now = Instant::now();
        (*at > now).then(|| *at - now)
    }

    pub(super) fn schedule(
        &self,
        key: &str,
        status: &CommitStatus,
        attempts: u32,
        err: &DeliveryError,
    ) -> Duration {
        let delay = self.backoff.delay(attempts, err);
        let mut map = self.not_before.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(key.to_string(), (status.clone(), Instant::now() + delay));
        delay
    }

    pub(super) fn clear_wait(&self, key: &str) {
        self.not_before
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

impl Reporter {
    /// The sinks, for statuses whose retry lives elsewhere (a pull request's `kok/plan` is planned and
    /// sent again at the next poll until delivered).
    pub fn sinks(&self) -> &Sinks {
        &self.sinks
    }
}

pub(super) fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(REPORT_FIELD_MANAGER.to_string()),
        ..Default::default()
    }
}

async fn wait_true(mut rx: tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

fn sync_records(cm: &ConfigMap) -> BTreeMap<String, SyncRecord> {
    cm.data
        .iter()
        .flatten()
        .filter_map(|(commit, value)| Some((commit.clone(), serde_json::from_str(value).ok()?)))
        .collect()
}

/// An operation whose desired status is not delivered yet.
#[derive(Clone, Debug, PartialEq)]
struct Pending {
    commit: String,
    desired: CommitStatus,
    /// Failed attempts so far (from `status.reportAttempts`, so they survive restarts).
    attempts: u32,
    /// The sinks took it; only recording it on the object is left.
    delivered: bool,
    /// The sinks without a budget took it; the budgeted ones wait until the operations of its commit
    /// are all known ([`CommitOps::settled`]).
    held: bool,
    /// Older statuses of the operation that only the sinks without a budget took while it was held:
    /// the budgeted sinks get them first, in order, when it is sent to every sink.
    backlog: Vec<CommitStatus>,
    not_before: Instant,
}

/// A delivery task's result.
#[derive(Debug)]
enum Done {
    /// An operation's status, by ClusterOperation name.
    Operation(String, Outcome),
    /// A commit's `kok/summary` status; `retry` is the wait before the next attempt when it failed.
    Summary {
        commit: String,
        status: CommitStatus,
        retry: Option<Duration>,
    },
}

/// A `kok/summary` status to deliver, and the failed attempts before it.
#[derive(Debug)]
struct SummaryJob {
    status: CommitStatus,
    attempts: u32,
}

/// How one delivery task ended.
#[derive(Debug)]
enum Outcome {
    /// Delivered and recorded as `status.reported`.
    Recorded { desired: CommitStatus },
    /// Delivered to the sinks without a budget; the others wait until its commit is settled.
    Held { desired: CommitStatus },
    /// Delivered, but recording it failed: only the record is retried.
    DeliveredNotRecorded { desired: CommitStatus, delay: Duration },
    /// Not delivered; retried after `delay`.
    Failed {
        desired: CommitStatus,
        attempts: u32,
        delay: Duration,
    },
}

/// The operations with undelivered statuses, fed by watch events and delivery outcomes.
#[derive(Debug, Default)]
struct Queue {
    pending: HashMap<String, Pending>,
    /// Names with a delivery task running.
    busy: HashSet<String>,
    /// Statuses this loop recorded as reported that the watch has not shown back yet: an older event
    /// of the same object must not queue them again.
    recorded: HashMap<String, CommitStatus>,
    /// Names seen since the watch (re)started listing; the others are dropped when the list is done.
    relisting: Option<HashSet<String>>,
    /// Every operation: its phase, and what [`Queue::commits`] counts of it.
    ops: HashMap<String, Tracked>,
    /// How many operations are in each phase of [`ALL_PHASES`], kept with `ops`.
    phase_totals: [u64; ALL_PHASES.len()],
    /// Per commit: its operations by state, and its `kok/summary` bookkeeping. The key is the one copy
    /// of the commit the operations' entries share.
    commits: HashMap<Arc<str>, CommitOps>,
    /// How long without a new operation settles a commit.
    settle_quiet: Duration,
    /// Per operation: older statuses the budgeted sinks have not had because they were held.
    backlog: HashMap<String, Vec<CommitStatus>>,
}

/// What the loop keeps of every operation.
#[derive(Debug, Default)]
struct Tracked {
    /// Its phase, for the `kok_operations{phase}` gauge.
    phase: Phase,
    /// Its commit and the state of its desired status, as counted in [`Queue::commits`].
    counted: Option<(Arc<str>, Option<StatusState>)>,
}

/// What the loop knows of one commit's operations.
#[derive(Debug)]
struct CommitOps {
    /// The commit's operations by state; finished operations stay counted after they are deleted
    /// (history limit), unfinished ones leave with their object.
    tally: Tally,
    /// Operations of the commit that still exist; the entry goes when none is left.
    live: usize,
    /// Per-operation contexts sent to every sink: they keep being updated there even once the commit
    /// has grown above the budget, so none is left stale.
    shown: HashSet<String>,
    /// The `kok/summary` status last delivered, and when.
    summary_sent: Option<(CommitStatus, Instant)>,
    /// How many operations the summary last delivered counted, and the one in flight counts.
    sent_total: usize,
    busy_total: usize,
    /// When the last operation was added to the count (also after the commit settled: the watch may
    /// show a pass's last operations after the pass ended).
    grown: Instant,
    /// Failed attempts at delivering the current summary, and when the next may start.
    summary_retry: Option<(u32, Instant)>,
    /// A summary delivery is in flight.
    summary_busy: bool,
    /// Every operation of the commit is known: a reconcile pass finished since it appeared, the watch
    /// listed it, or no new operation of it appeared for [`SETTLE_QUIET`]. Until then the budgeted
    /// sinks get neither its operations' statuses nor its summary (its count may still grow).
    settled: bool,
    /// When the last new operation of the commit appeared.
    last_new: Instant,
}

impl Default for CommitOps {
    fn default() -> Self {
        CommitOps {
            tally: Tally::default(),
            live: 0,
            shown: HashSet::new(),
            summary_sent: None,
            sent_total: 0,
            busy_total: 0,
            grown: Instant::now(),
            summary_retry: None,
            summary_busy: false,
            settled: false,
            last_new: Instant::now(),
        }
    }
}

impl CommitOps {
    /// The summary to send and when it may go, when it differs from the one delivered. The first and
    /// the final summary (nothing running or queued) go at once; so does one that counts operations
    /// the last one did not (the watch showed some of the commit's operations after it went), once no
    /// new one appeared for `quiet`; the updates between at most once per `interval`; a failed one
    /// waits for its retry.
    fn summary_due(
        &self,
        now: Instant,
        interval: Duration,
        quiet: Duration,
    ) -> Option<(CommitStatus, Instant)> {
        if self.summary_busy {
            return None;
        }
        let wanted = summary_status(&self.tally);
        let mut at = match &self.summary_sent {
            Some((sent, _)) if *sent == wanted => return None,
            None => now,
            Some(_) if self.tally.finished() => now,
            Some(_) if self.tally.total() != self.sent_total => self.grown + quiet,
            Some((_, at)) => *at + interval,
        };
        if let Some((_, retry)) = self.summary_retry {
            at = at.max(retry);
        }
        Some((wanted, at))
    }
}

impl Queue {
    fn new(settle_quiet: Duration) -> Self {
        Queue {
            settle_quiet,
            ..Queue::default()
        }
    }

    fn observe(&mut self, event: watcher::Event<ClusterOperation>) {
        match event {
            watcher::Event::Init => self.relisting = Some(HashSet::new()),
            watcher::Event::InitApply(op) => {
                if let Some(seen) = self.relisting.as_mut() {
                    seen.insert(op.name_any());
                }
                self.apply(&op);
            }
            watcher::Event::InitDone => {
                if let Some(seen) = self.relisting.take() {
                    let gone: Vec<String> = self
                        .ops
                        .keys()
                        .chain(self.pending.keys())
                        .filter(|name| !seen.contains(*name))
                        .cloned()
                        .collect();
                    for name in gone {
                        self.forget(&name);
                    }
                }
                self.settle(true, Instant::now());
            }
            watcher::Event::Apply(op) => self.apply(&op),
            watcher::Event::Delete(op) => self.forget(&op.name_any()),
        }
    }

    /// True while the watch (re)lists the operations.
    fn listing(&self) -> bool {
        self.relisting.is_some()
    }

    /// Drops an operation that no longer exists.
    fn forget(&mut self, name: &str) {
        self.pending.remove(name);
        self.backlog.remove(name);
        self.recorded.remove(name);
        let Some(tracked) = self.ops.remove(name) else {
            return;
        };
        self.count_phase(tracked.phase, false);
        let Some((commit, state)) = tracked.counted else {
            return;
        };
        let Some(ops) = self.commits.get_mut(&commit) else {
            return;
        };
        if !matches!(
            state,
            Some(StatusState::Success | StatusState::Failure | StatusState::Error)
        ) {
            let slot = ops.tally.slot(state);
            *slot = slot.saturating_sub(1);
        }
        ops.live = ops.live.saturating_sub(1);
        if ops.live == 0 {
            self.commits.remove(&commit);
        }
    }

    /// Counts `name` on `commit` with the state of its desired status.
    fn count(&mut self, name: &str, commit: &str, state: Option<StatusState>) {
        let old = self.ops.get(name).and_then(|t| t.counted.clone());
        let added = old.as_ref().is_none_or(|(c, _)| &**c != commit);
        if let Some((old_commit, old_state)) = old {
            if &*old_commit == commit && old_state == state {
                return;
            }
            self.forget_count(name, &old_commit, old_state);
            if &*old_commit != commit && self.commits.get(&old_commit).is_some_and(|o| o.live == 0) {
                self.commits.remove(&old_commit);
            }
        }
        let key = match self.commits.get_key_value(commit) {
            Some((key, _)) => key.clone(),
            None => Arc::from(commit),
        };
        let ops = self.commits.entry(key.clone()).or_default();
        *ops.tally.slot(state) += 1;
        ops.live += 1;
        if added {
            ops.grown = Instant::now();
        }
        if !ops.settled {
            ops.last_new = Instant::now();
        }
        self.ops.entry(name.to_string()).or_default().counted = Some((key, state));
    }

    /// Takes `name` out of `commit`'s counts (its state changes, or its commit does).
    fn forget_count(&mut self, name: &str, commit: &str, state: Option<StatusState>) {
        if let Some(tracked) = self.ops.get_mut(name) {
            tracked.counted = None;
        }
        if let Some(ops) = self.commits.get_mut(commit) {
            let slot = ops.tally.slot(state);
            *slot = slot.saturating_sub(1);
            ops.live = ops.live.saturating_sub(1);
        }
    }

    /// The sinks `job`'s status goes to: every sink while its commit has at most `budget` operations,
    /// when it failed, or when its context was already sent to every sink; else only the sinks without
    /// a budget (the budgeted ones show the commit's `kok/summary` instead).
    fn route(&mut self, job: &Pending, budget: usize) -> Route {
        let Some(ops) = self.commits.get_mut(job.commit.as_str()) else {
            return Route::All;
        };
        let context = &job.desired.context;
        let failed = matches!(job.desired.state, StatusState::Failure | StatusState::Error);
        if budget == usize::MAX || failed || ops.shown.contains(context) {
            return Route::All;
        }
        if !ops.settled && ops.tally.total() <= budget {
            return Route::Hold;
        }
        if ops.tally.total() <= budget {
            ops.shown.insert(context.clone());
            return Route::All;
        }
        Route::Unbudgeted
    }

    /// The held statuses of `name` that go to the budgeted sinks before its current one, when it goes
    /// by `route`: all of them for every sink, none (dropped) when only the other sinks get it.
    fn take_backlog(&mut self, name: &str, route: Route) -> Vec<CommitStatus> {
        match route {
            Route::All => self.backlog.remove(name).unwrap_or_default(),
            Route::Unbudgeted => {
                self.backlog.remove(name);
                Vec::new()
            }
            Route::Budgeted | Route::Hold => Vec::new(),
        }
    }

    /// Marks every commit known now as settled (a reconcile pass finished, or the watch listed them), and
    /// those without a new operation for the quiet time; their held statuses become due.
    fn settle(&mut self, all: bool, now: Instant) {
        let mut settled = Vec::new();
        for (commit, ops) in self.commits.iter_mut() {
            if !ops.settled && (all || ops.last_new + self.settle_quiet <= now) {
                ops.settled = true;
                settled.push(commit.clone());
            }
        }
        if settled.is_empty() {
            return;
        }
        for p in self.pending.values_mut() {
            if p.held && settled.iter().any(|c: &Arc<str>| **c == *p.commit) {
                p.held = false;
                p.not_before = now;
            }
        }
    }

    /// The commits above `budget` whose `kok/summary` is due, marked busy.
    fn due_summaries(
        &mut self,
        now: Instant,
        budget: usize,
        interval: Duration,
    ) -> Vec<(String, SummaryJob)> {
        let mut due = Vec::new();
        for (commit, ops) in self.commits.iter_mut() {
            if !ops.settled || ops.tally.total() <= budget {
                continue;
            }
            let Some((status, at)) = ops.summary_due(now, interval, self.settle_quiet) else {
                continue;
            };
            if at <= now {
                ops.summary_busy = true;
                ops.busy_total = ops.tally.total();
                let attempts = ops.summary_retry.map_or(0, |(n, _)| n);
                due.push((commit.to_string(), SummaryJob { status, attempts }));
            }
        }
        due
    }

    /// When the earliest summary not due yet becomes due.
    fn next_summary(&self, now: Instant, budget: usize, interval: Duration) -> Option<Instant> {
        self.commits
            .values()
            .filter(|ops| ops.settled && ops.tally.total() > budget)
            .filter_map(|ops| {
                ops.summary_due(now, interval, self.settle_quiet)
                    .map(|(_, at)| at)
            })
            .min()
    }

    fn finish_summary(&mut self, commit: &str, status: CommitStatus, retry: Option<Duration>, now: Instant) {
        let Some(ops) = self.commits.get_mut(commit) else {
            return;
        };
        ops.summary_busy = false;
        match retry {
            None => {
                ops.summary_sent = Some((status, now));
                ops.sent_total = ops.busy_total;
                ops.summary_retry = None;
            }
            Some(delay) => {
                let attempts = ops.summary_retry.map_or(0, |(n, _)| n).saturating_add(1);
                ops.summary_retry = Some((attempts, now + delay));
            }
        }
    }

    /// How many operations are in each phase.
    fn phase_counts(&self) -> [(Phase, u64); ALL_PHASES.len()] {
        std::array::from_fn(|i| (ALL_PHASES[i], self.phase_totals[i]))
    }

    /// Counts `phase` in (or out of) the totals the gauge shows.
    fn count_phase(&mut self, phase: Phase, added: bool) {
        if let Some(i) = ALL_PHASES.iter().position(|p| *p == phase) {
            let total = &mut self.phase_totals[i];
            *total = if added {
                *total + 1
            } else {
                total.saturating_sub(1)
            };
        }
    }

    fn apply(&mut self, op: &ClusterOperation) {
        let name = op.name_any();
        let status = op.status.as_ref();
        let phase = status.map(|s| s.phase).unwrap_or_default();
        match self.ops.get_mut(&name) {
            Some(tracked) => {
                let old = std::mem::replace(&mut tracked.phase, phase);
                self.count_phase(old, false);
            }
            None => {
                self.ops.insert(name.clone(), Tracked { phase, counted: None });
            }
        }
        self.count_phase(phase, true);
        let desired = status.and_then(|s| s.desired_status.as_deref());
        let reported = status.and_then(|s| s.reported.as_deref());
        if !op.spec.source.commit.is_empty() {
            self.count(&name, &op.spec.source.commit, desired.map(|d| d.state));
        }
        if let Some(memo) = self.recorded.get(&name) {
            if reported == Some(memo) || desired != Some(memo) {
                self.recorded.remove(&name); // the watch caught up, or there is a newer desired status
            } else {
                return; // an event older than our own record
            }
        }
        let Some(desired) = desired.filter(|d| Some(*d) != reported) else {
            self.pending.remove(&name);
            return;
        };
        let commit = &op.spec.source.commit;
        if commit.is_empty() {
            tracing::warn!(operation = %name, "ClusterOperation has no spec.source.commit; its commit status cannot be delivered");
            self.pending.remove(&name);
            return;
        }
        let attempts = status.and_then(|s| s.report_attempts).unwrap_or(0);
        match self.pending.get_mut(&name) {
            Some(p) if p.desired == *desired => p.attempts = p.attempts.max(attempts),
            _ => {
                let pending = Pending {
                    commit: commit.clone(),
                    desired: desired.clone(),
                    attempts,
                    delivered: false,
                    held: false,
                    backlog: Vec::new(),
                    not_before: Instant::now(),
                };
                // A held status that is superseded still goes to the budgeted sinks, before this one.
                if let Some(old) = self.pending.insert(name.clone(), pending) {
                    if old.held {
                        self.backlog.entry(name).or_default().push(old.desired);
                    }
                }
            }
        }
    }

    /// Up to `limit` due operations not already being delivered, marked busy.
    fn take_due(&mut self, now: Instant, limit: usize) -> Vec<(String, Pending)> {
        if limit == 0 {
            return Vec::new();
        }
        // Only the `limit` earliest are copied out: thousands may be due while few slots are free.
        let mut due: Vec<(Instant, &String)> = self
            .pending
            .iter()
            .filter(|(name, p)| p.not_before <= now && !p.held && !self.busy.contains(*name))
            .map(|(name, p)| (p.not_before, name))
            .collect();
        if due.len() > limit {
            due.select_nth_unstable(limit - 1);
            due.truncate(limit);
        }
        due.sort();
        let taken: Vec<(String, Pending)> = due
            .into_iter()
            .filter_map(|(_, name)| Some((name.clone(), self.pending.get(name)?.clone())))
            .collect();
        for (name, _) in &taken {
            self.busy.insert(name.clone());
        }
        taken
    }

    /// When the earliest waiting operation becomes due.
    fn next_due(&self) -> Option<Instant> {
        self.pending
            .iter()
            .filter(|(name, p)| !p.held && !self.busy.contains(*name))
            .map(|(_, p)| p.not_before)
            .chain(
                self.commits
                    .values()
                    .filter(|ops| !ops.settled)
                    .map(|ops| ops.last_new + self.settle_quiet),
            )
            .min()
    }

    fn finish(&mut self, name: &str, outcome: Outcome, now: Instant) {
        self.busy.remove(name);
        let Some(p) = self.pending.get_mut(name) else {
            return;
        };
        match outcome {
            Outcome::Recorded { desired } => {
                if p.desired == desired {
                    self.pending.remove(name);
                    self.recorded.insert(name.to_string(), desired);
                }
            }
            Outcome::Held { desired } => {
                if p.desired != desired {
                    self.backlog.entry(name.to_string()).or_default().push(desired);
                } else if self.commits.get(p.commit.as_str()).is_some_and(|c| !c.settled) {
                    p.held = true;
                } else {
                    p.not_before = now; // the commit settled meanwhile
                }
            }
            Outcome::DeliveredNotRecorded { desired, delay } => {
                if p.desired == desired {
                    p.delivered = true;
                    p.not_before = now + delay;
                }
            }
            Outcome::Failed {
                desired,
                attempts,
                delay,
            } => {
                if p.desired == desired {
                    p.attempts = p.attempts.max(attempts);
                    p.not_before = now + delay;
                }
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retryable(after: Option<u64>) -> DeliveryError {
        DeliveryError::Retryable {
            sink: "s".into(),
            context: "c".into(),
            commit: "x".into(),
            reason: "r".into(),
            retry_after: after.map(Duration::from_secs),
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_honours_retry_after() {
        let b = Backoff::default();
        assert_eq!(b.delay(1, &retryable(None)), Duration::from_secs(1));
        assert_eq!(b.delay(3, &retryable(None)), Duration::from_secs(4));
        assert_eq!(b.delay(30, &retryable(None)), Duration::from_secs(300));
        assert_eq!(b.delay(1, &retryable(Some(42))), Duration::from_secs(42));
        let refused = DeliveryError::Permanent {
            sink: "s".into(),
            context: "c".into(),
            commit: "x".into(),
            reason: "r".into(),
        };
        assert_eq!(b.delay(1, &refused), Duration::from_secs(300));
    }

    fn op(name: &str, desired: Option<&str>, reported: Option<&str>) -> ClusterOperation {
        let st = |d: &str| CommitStatus {
            context: "kok/c/x".into(),
            state: crate::api::StatusState::Pending,
            description: d.into(),
            target_url: None,
            run: None,
        };
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {
                "cluster": "c", "id": "x", "digest": "d", "action": "a.yml", "image": "i",
                "hostsConfRef": {"name": "h"}, "varsConfRef": {"name": "v"},
                "source": {"commit": "abc", "revision": "main@sha1:abc", "path": "clusters/c"},
                "queuePosition": "0",
            },
            "status": {"desiredStatus": desired.map(st), "reported": reported.map(st)},
        }))
        .unwrap()
    }

    #[test]
    fn queue_keeps_only_undelivered_statuses_and_the_newest_desired() {
        let mut q = Queue::default();
        q.observe(watcher::Event::Apply(op("a", Some("queued"), None)));
        q.observe(watcher::Event::Apply(op("b", Some("done"), Some("done"))));
        q.observe(watcher::Event::Apply(op("c", None, None)));
        assert_eq!(q.pending.keys().collect::<Vec<_>>(), ["a"]);
        q.observe(watcher::Event::Apply(op("a", Some("running"), None)));
        assert_eq!(q.pending["a"].desired.description, "running");
        q.observe(watcher::Event::Apply(op("a", Some("running"), Some("running"))));
        assert!(q.pending.is_empty());
        assert_eq!(
            q.phase_counts()[0],
            (Phase::Pending, 3),
            "every operation is counted, delivered or not"
        );
        q.observe(watcher::Event::Delete(op("c", None, None)));
        assert_eq!(q.phase_counts()[0], (Phase::Pending, 2));
    }

    #[test]
    fn queue_retries_failures_later_and_forgets_objects_gone_after_a_relist() {
        let mut q = Queue::default();
        q.observe(watcher::Event::Apply(op("a", Some("queued"), None)));
        q.observe(watcher::Event::Apply(op("gone", Some("queued"), None)));
        let now = Instant::now();
        let due = q.take_due(now, 1);
        assert_eq!(due.len(), 1, "the in-flight limit holds");
        let (name, job) = due.into_iter().next().unwrap();
        assert!(
            q.take_due(now, 8).iter().all(|(n, _)| *n != name),
            "a busy operation is not started twice"
        );
        q.finish(
            &name,
            Outcome::Failed {
                desired: job.desired,
                attempts: 1,
                delay: Duration::from_secs(60),
            },
            now,
        );
        assert!(
            q.take_due(now, 8).iter().all(|(n, _)| *n != name),
            "a failed one waits for its delay"
        );
        assert_eq!(q.pending[&name].attempts, 1);

        let mut q = Queue::default();
        q.observe(watcher::Event::Apply(op("a", Some("queued"), None)));
        q.observe(watcher::Event::Apply(op("gone", Some("queued"), None)));
        q.observe(watcher::Event::Init);
        q.observe(watcher::Event::InitApply(op("a", Some("queued"), None)));
        q.observe(watcher::Event::InitDone);
        assert_eq!(q.pending.keys().collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn the_earliest_due_statuses_are_taken_first_and_a_full_loop_takes_none() {
        let mut q = Queue::default();
        let now = Instant::now();
        for (i, name) in ["e", "b", "d", "a", "c"].iter().enumerate() {
            q.observe(watcher::Event::Apply(op(name, Some("queued"), None)));
            q.pending.get_mut(*name).unwrap().not_before = now - Duration::from_secs(10 - i as u64);
        }
        assert!(q.take_due(now, 0).is_empty(), "no free slot");
        let names = |due: Vec<(String, Pending)>| due.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        assert_eq!(names(q.take_due(now, 2)), ["e", "b"]);
        assert_eq!(
            names(q.take_due(now, 8)),
            ["d", "a", "c"],
            "the busy ones are not taken again"
        );
    }

    fn op_in(name: &str, state: crate::api::StatusState) -> ClusterOperation {
        let mut op = op(name, Some("d"), None);
        let desired = op.status.as_mut().unwrap().desired_status.as_mut().unwrap();
        desired.context = format!("kok/c/{name}");
        desired.state = state;
        op
    }

    #[test]
    fn above_the_budget_only_failures_and_contexts_already_shown_reach_every_sink() {
        use crate::api::StatusState::*;
        let mut q = Queue::new(SETTLE_QUIET);
        q.observe(watcher::Event::Apply(op_in("a", Pending)));
        let job_a = q.pending["a"].clone();
        assert_eq!(
            q.route(&job_a, 2),
            Route::Hold,
            "the forges wait until the commit's operations are all known"
        );
        assert_eq!(
            q.route(&job_a, usize::MAX),
            Route::All,
            "no budgeted sink: nothing waits"
        );
        let (name, job) = q.take_due(Instant::now(), 8).remove(0);
        q.finish(&name, Outcome::Held { desired: job.desired }, Instant::now());
        assert!(
            q.take_due(Instant::now(), 8).is_empty(),
            "a held status waits for the commit"
        );
        let now = Instant::now();
        q.settle(false, now);
        assert!(q.take_due(now, 8).is_empty(), "operations may still appear");
        q.settle(false, now + SETTLE_QUIET);
        assert_eq!(
            q.take_due(now + SETTLE_QUIET, 8).len(),
            1,
            "settled once none appeared for a while"
        );
        assert_eq!(q.route(&job_a, 2), Route::All, "within the budget");
        q.observe(watcher::Event::Apply(op_in("b", Pending)));
        q.observe(watcher::Event::Apply(op_in("c", Failure)));
        assert_eq!(q.commits["abc"].tally.total(), 3);
        assert_eq!(q.route(&q.pending["b"].clone(), 2), Route::Unbudgeted);
        assert_eq!(
            q.route(&q.pending["c"].clone(), 2),
            Route::All,
            "failures always show"
        );
        assert_eq!(
            q.route(&job_a, 2),
            Route::All,
            "a context already shown keeps its updates"
        );
        q.observe(watcher::Event::Delete(op_in("c", Failure)));
        q.observe(watcher::Event::Delete(op_in("b", Pending)));
        let tally = q.commits["abc"].tally;
        assert_eq!(
            (tally.failed, tally.queued),
            (1, 1),
            "a finished operation deleted stays counted"
        );
        q.observe(watcher::Event::Delete(op_in("a", Pending)));
        assert!(
            q.commits.is_empty(),
            "the commit is forgotten with its last operation"
        );
    }

    #[test]
    fn held_statuses_reach_the_forges_in_order_and_none_stays_held_once_settled() {
        use crate::api::StatusState::*;
        let mut q = Queue::new(SETTLE_QUIET);
        let now = Instant::now();
        q.observe(watcher::Event::Apply(op_in("a", Pending)));
        let (name, job) = q.take_due(Instant::now(), 8).remove(0);
        assert_eq!(q.route(&job, 50), Route::Hold);
        q.finish(&name, Outcome::Held { desired: job.desired }, now);
        q.observe(watcher::Event::Apply(op_in("a", Running)));
        let (name, job) = q.take_due(Instant::now(), 8).remove(0);
        assert_eq!(q.route(&job, 50), Route::Hold);
        // Superseded while its delivery runs.
        q.observe(watcher::Event::Apply(op_in("a", Failure)));
        q.finish(&name, Outcome::Held { desired: job.desired }, now);
        let (name, job) = q.take_due(Instant::now(), 8).remove(0);
        let route = q.route(&job, 50);
        assert_eq!(route, Route::All, "a failure is not held");
        let states: Vec<_> = q.take_backlog(&name, route).iter().map(|s| s.state).collect();
        assert_eq!(states, [Pending, Running], "the held statuses first, in order");
        assert!(q.take_backlog(&name, route).is_empty());

        q.observe(watcher::Event::Apply(op_in("b", Pending)));
        let (name, job) = q.take_due(Instant::now(), 8).remove(0);
        assert_eq!(q.route(&job, 50), Route::Hold);
        q.settle(true, now);
        q.finish(&name, Outcome::Held { desired: job.desired }, now);
        assert_eq!(
            q.take_due(Instant::now(), 8).len(),
            1,
            "settled while its delivery ran: due at once, not held"
        );
    }

    #[test]
    fn summaries_go_first_and_final_at_once_and_between_at_most_once_per_interval() {
        use crate::api::StatusState::*;
        let interval = Duration::from_secs(60);
        let mut q = Queue::default();
        for name in ["a", "b", "c"] {
            q.observe(watcher::Event::Apply(op_in(name, Pending)));
        }
        let now = Instant::now();
        assert!(
            q.due_summaries(now, 2, interval).is_empty(),
            "not before the commit is settled"
        );
        q.settle(true, now);
        assert!(
            q.due_summaries(now, 3, interval).is_empty(),
            "within the budget: no summary"
        );
        let first = q.due_summaries(now, 2, interval);
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].1.status.description, "0/3 succeeded, 3 queued");
        assert!(
            q.due_summaries(now, 2, interval).is_empty(),
            "one delivery at a time"
        );
        q.finish_summary("abc", first[0].1.status.clone(), None, now);
        q.observe(watcher::Event::Apply(op_in("a", Success)));
        assert!(
            q.due_summaries(now, 2, interval).is_empty(),
            "an update waits for the interval"
        );
        assert_eq!(q.next_summary(now, 2, interval), Some(now + interval));
        q.observe(watcher::Event::Apply(op_in("b", Success)));
        q.observe(watcher::Event::Apply(op_in("c", Error)));
        let last = q.due_summaries(now, 2, interval);
        assert_eq!(last.len(), 1, "the final summary is not held back");
        assert_eq!(last[0].1.status.description, "2/3 succeeded, 1 failed");
        assert_eq!(last[0].1.status.state, Failure);
        q.finish_summary("abc", last[0].1.status.clone(), Some(Duration::from_secs(5)), now);
        assert!(
            q.due_summaries(now, 2, interval).is_empty(),
            "a failed delivery waits for its retry"
        );
        assert_eq!(
            q.due_summaries(now + Duration::from_secs(5), 2, interval).len(),
            1
        );
    }

    #[test]
    fn a_summary_counting_operations_the_last_one_missed_goes_once_they_stop_appearing() {
        use crate::api::StatusState::*;
        let (interval, quiet) = (Duration::from_secs(60), Duration::from_secs(2));
        let mut q = Queue::new(quiet);
        for name in ["a", "b", "c"] {
            q.observe(watcher::Event::Apply(op_in(name, Pending)));
        }
        let now = Instant::now();
        q.settle(true, now);
        let first = q.due_summaries(now, 2, interval);
        assert_eq!(first[0].1.status.description, "0/3 succeeded, 3 queued");
        q.finish_summary("abc", first[0].1.status.clone(), None, now);
        // The watch shows one more operation of the commit after its pass ended.
        q.observe(watcher::Event::Apply(op_in("d", Pending)));
        let later = Instant::now();
        let due = q.next_summary(later, 2, interval).expect("a summary is due");
        assert!(due <= later + quiet, "not a minute later: {:?}", due - later);
        let grown = q.due_summaries(later + quiet, 2, interval);
        assert_eq!(grown.len(), 1);
        assert_eq!(grown[0].1.status.description, "0/4 succeeded, 4 queued");
        q.finish_summary("abc", grown[0].1.status.clone(), None, later + quiet);
        q.observe(watcher::Event::Apply(op_in("a", Success)));
        assert!(
            q.due_summaries(later + quiet, 2, interval).is_empty(),
            "an update of the same operations still waits for the interval"
        );
        for name in ["b", "c", "d"] {
            q.observe(watcher::Event::Apply(op_in(name, Success)));
        }
        let last = q.due_summaries(later + quiet, 2, interval);
        assert_eq!(last.len(), 1, "the final summary goes at once");
        assert_eq!(last[0].1.status.description, "4/4 succeeded");
    }

    #[test]
    fn an_event_older_than_our_own_record_does_not_queue_the_status_again() {
        let mut q = Queue::default();
        q.observe(watcher::Event::Apply(op("a", Some("queued"), None)));
        let (name, job) = q.take_due(Instant::now(), 8).remove(0);
        q.finish(&name, Outcome::Recorded { desired: job.desired }, Instant::now());
        q.observe(watcher::Event::Apply(op("a", Some("queued"), None)));
        assert!(q.pending.is_empty(), "a stale event re-queued a delivered status");
        q.observe(watcher::Event::Apply(op("a", Some("queued"), Some("queued"))));
        assert!(
            q.recorded.is_empty(),
            "the memo is dropped once the watch shows the record"
        );
        q.observe(watcher::Event::Apply(op("a", Some("running"), Some("queued"))));
        assert_eq!(q.pending["a"].desired.description, "running");
    }
}
