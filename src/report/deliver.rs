//! Durable, exact delivery: a watch loop that sends each ClusterOperation's `status.desiredStatus` to
//! the sinks until `status.reportedDigest` records it, and the same for `kok/sync` statuses kept in a
//! ConfigMap.
//!
//! - The loop keeps in memory only the operations whose status is not delivered yet; when a newer
//!   desired status arrives before an older one went out, only the newest is sent (level-based).
//! - State lives in the API server, so a restart resumes: a ClusterOperation whose `desiredStatus`
//!   is not the one recorded as delivered is delivered again; one that is is never sent again.
//! - After a delivery, `status.reportedDigest` is set to the delivered status's digest (16 characters,
//!   not a second copy of the status; an earlier kok's full `reported` copy is removed) and
//!   `reportAttempts` removed, with a merge patch on `/status` under kok's field manager (the controller's
//!   status writes are merge patches too, so the two share one `managedFields` entry and neither drops
//!   the other's fields).
//! - Except when every sink the status went to keeps a record it can read back exactly
//!   ([`super::sink::Sink::fingerprint`]: the git notes): a status only the notes take (no forge, or
//!   an operation of a commit above the budget that did not fail) is not written on its operation, which
//!   at 10,000 × 20 was 200,000 status writes of a first pass. The loop remembers it by its digest
//!   (8 bytes an operation); after a restart, while the watch lists, each commit's note is read back
//!   once as fingerprints and a listed status the note already holds is taken as delivered, neither
//!   sent nor written again ([`Reporter::check_held`]). A status with failed attempts on its object is
//!   still recorded, which clears them.
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

use std::collections::{BTreeMap, HashMap};
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

use super::queue::{sleep_until, Done, Outcome, Pending, Queue, SummaryJob};
use super::sink::DeliveryError;
use super::sinks::Holding;
pub use super::sinks::{Backoff, Route, Sinks, DEFAULT_MAX_CONTEXTS, SETTLE_QUIET, SUMMARY_INTERVAL};
use crate::api::watched::{operation_event, WatchedOperation};
use crate::api::{ClusterOperation, CommitStatus};

/// Per commit, what the sinks of its route hold ([`Sinks::holding`]), read while the watch lists;
/// `None` when it could not be read.
type Held = HashMap<String, Option<Holding>>;

/// ConfigMap recording the desired and delivered `kok/sync` status of recent commits.
pub const SYNC_CONFIGMAP: &str = "kok-sync-status";
/// How many commits the sync ConfigMap keeps.
pub const SYNC_HISTORY: usize = 50;
/// Most operation deliveries running at once (each sink may allow fewer, see
/// [`Sink::max_in_flight`]; the notes sink writes the deliveries in flight together in one batch, so
/// this bounds how many statuses one notes commit takes when a fleet-size commit reports at once).
/// A batch rewrites the whole note of its commit, and a commit that brings in 200,000 operations has a
/// note of tens of megabytes, and in batches of 256 kok delivered about 70 statuses a second there; in
/// batches of 4,096, about 280 on a machine half as fast (docs/performance.md). Each delivery in flight
/// holds its status, about a kilobyte.
pub const MAX_IN_FLIGHT: usize = 4096;
/// Most writes of `status.reportedDigest` / `status.reportAttempts` running at once. Each holds a connection
/// to the API server, and the client keeps an idle connection open for 90 s with its buffers: with all
/// [`MAX_IN_FLIGHT`] deliveries recording at once, a fleet-size commit opened about 320 connections.
pub const RECORD_CONCURRENCY: usize = 16;
/// Wait before recording a delivered status again after the API server refused the patch.
const RECORD_RETRY: Duration = Duration::from_secs(5);

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
    /// `--status-url`: the commit statuses of runs link there (see [`crate::report::status::desired_status`]).
    pub(super) status_url: std::sync::OnceLock<String>,
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
            status_url: std::sync::OnceLock::new(),
            not_before: Mutex::default(),
            sync_wake: Notify::new(),
            settle_wake: Notify::new(),
            records: Semaphore::new(RECORD_CONCURRENCY),
        })
    }

    /// Makes the commit statuses of runs link to `status_url` (`--status-url`), as the controller's
    /// do; set before [`Reporter::run`].
    pub fn link_statuses_to(&self, status_url: Option<&str>) {
        if let Some(url) = status_url {
            let _ = self.status_url.set(url.to_string());
        }
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
        queue.status_url = self.status_url.get().cloned();
        queue.namespace = self.namespace.clone();
        let budget = self.sinks.budget();
        let interval = SUMMARY_INTERVAL;
        let mut in_flight: JoinSet<Done> = JoinSet::new();
        let mut held = Held::default();
        loop {
            self.sinks.publish_waiting(queue.pending.len());
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
                event = events.next() => if !self.take_event(&mut queue, event, &mut held).await {
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
                        if !self.take_event(&mut queue, event, &mut held).await {
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

    /// Feeds one watch event to `queue`; false when the watch ended. While the watch lists, a pending
    /// status the sinks already hold by their own record is taken as delivered ([`Reporter::check_held`]).
    async fn take_event(
        &self,
        queue: &mut Queue,
        event: Option<Result<watcher::Event<ClusterOperation>, watcher::Error>>,
        held: &mut Held,
    ) -> bool {
        match event {
            Some(Ok(event)) => {
                let listed = match &event {
                    watcher::Event::InitApply(op) => Some(op.name_any()),
                    _ => None,
                };
                let list_done = matches!(event, watcher::Event::InitDone) && queue.listing();
                queue.observe(event);
                if let Some(name) = listed {
                    self.check_held(queue, &name, held).await;
                }
                if list_done {
                    // Every operation is counted now: the ones listed while their commit was still
                    // within the budget are checked too.
                    let pending: Vec<String> = queue.pending.keys().cloned().collect();
                    for name in pending {
                        self.check_held(queue, &name, held).await;
                    }
                }
                if !queue.listing() && !held.is_empty() {
                    *held = Held::default();
                }
            }
            Some(Err(err)) => {
                tracing::warn!(error = %err, "watching ClusterOperations for commit statuses failed; retrying")
            }
            None => return false,
        }
        true
    }

    /// After a restart the sinks that keep their own record (git notes) are the record of the statuses
    /// only they took, which are not recorded on the operations: a listed operation whose status is
    /// pending, goes to such sinks only, and is already held by each of them is taken as delivered,
    /// without sending or recording it again. Each commit's record is read once per listing, as
    /// fingerprints. A commit counts as above the budget once more operations than the budget were
    /// listed on it; the ones listed before are checked when the list is done.
    async fn check_held(&self, queue: &mut Queue, name: &str, held: &mut Held) {
        let budget = self.sinks.budget();
        let Some(p) = queue.pending.get(name).filter(|p| p.attempts == 0) else {
            return;
        };
        let Some(route) = queue.sure_route(p, budget) else {
            return;
        };
        let Some(prints) = self.sinks.fingerprints(route, &p.desired) else {
            return;
        };
        let (commit, desired) = (p.commit.clone(), p.desired.clone());
        if !held.contains_key(&commit) {
            let holding = match self.sinks.holding(route, &commit).await {
                Ok(holding) => Some(holding),
                Err(err) => {
                    tracing::warn!(commit = %commit, error = %crate::redact::scrub(&err), "could not read back the commit statuses the notes hold; they are delivered again");
                    None
                }
            };
            held.insert(commit.clone(), holding);
        }
        let Some(Some(holding)) = held.get(&commit) else {
            return;
        };
        if prints
            .iter()
            .all(|(sink, print)| holding.get(sink).is_some_and(|set| set.contains(print)))
        {
            queue.noted(name, &desired);
        }
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
        // Sinks that keep their own record (git notes alone, or above the budget) are the record: no
        // write, unless failed attempts are on the object to clear.
        if job.attempts == 0 && self.sinks.fingerprints(route, &job.desired).is_some() {
            return (name, Outcome::Noted { desired: job.desired });
        }
        // The digest alone (an earlier kok's full `reported` copy goes): 16 characters, not the status again.
        let patch = serde_json::json!({ "status": {
            "reportedDigest": job.desired.digest(),
            "reported": null,
            "reportAttempts": null,
        } });
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
                            field_manager: Some(crate::api::FIELD_MANAGER.into()),
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
        let mut undelivered = sync_records(&cm)
            .values()
            .filter(|r| r.reported.as_ref() != Some(&r.desired))
            .count();
        self.sinks
            .sync_waiting
            .store(undelivered, std::sync::atomic::Ordering::Relaxed);
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
                    undelivered = undelivered.saturating_sub(1);
                    self.sinks
                        .sync_waiting
                        .store(undelivered, std::sync::atomic::Ordering::Relaxed);
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

/// Parameters of the reporter's patches: kok's field manager, the controller's, so that the status
/// writes of a run share one `managedFields` entry.
pub(super) fn patch_params() -> PatchParams {
    crate::api::kok_params()
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
