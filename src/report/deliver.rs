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
//! - With several sinks, each status is delivered to every sink; a sink that already took it is not
//!   sent it again while the others are retried (in memory; after a restart all sinks get it again).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, ResourceExt};
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;

use super::sink::{DeliveryError, Sink};
use crate::api::{ClusterOperation, CommitStatus, Phase};
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
/// [`Sink::max_in_flight`]; the notes sink writes the deliveries in flight together in one batch).
pub const MAX_IN_FLIGHT: usize = 64;
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

/// Every configured sink, with per-sink bookkeeping so a status reaches each sink once.
pub struct Sinks {
    sinks: Vec<Arc<dyn Sink>>,
    /// Per sink, the permits of its deliveries in flight when it limits them.
    limits: Vec<Option<Arc<Semaphore>>>,
    metrics: &'static Metrics,
    /// (commit, context) → the status and the indexes of the sinks that took it, while others still fail.
    partial: Mutex<Partial>,
}

impl std::fmt::Debug for Sinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.sinks.iter().map(|s| s.name()))
            .finish()
    }
}

impl Sinks {
    /// Delivers to each of `sinks`, counting results in `metrics`.
    pub fn new(sinks: Vec<Arc<dyn Sink>>, metrics: &'static Metrics) -> Self {
        let limits = sinks
            .iter()
            .map(|s| s.max_in_flight().map(|n| Arc::new(Semaphore::new(n.max(1)))))
            .collect();
        Sinks {
            sinks,
            limits,
            metrics,
            partial: Mutex::default(),
        }
    }

    /// Names of the sinks.
    pub fn names(&self) -> Vec<String> {
        self.sinks.iter().map(|s| s.name().to_string()).collect()
    }

    /// Delivers `status` on `commit` to every sink that has not taken it yet. On failure returns the
    /// error that allows the earliest retry (a retryable one before a refusal).
    pub async fn deliver(&self, commit: &str, status: &CommitStatus) -> Result<(), DeliveryError> {
        // One entry per commit and context: a newer status replaces an older one's bookkeeping.
        let key = (commit.to_string(), status.context.clone());
        let done = match self.lock().get(&key) {
            Some((s, done)) if s == status => done.clone(),
            _ => HashSet::new(),
        };
        let mut worst: Option<DeliveryError> = None;
        for (index, sink) in self.sinks.iter().enumerate() {
            if done.contains(&index) {
                continue;
            }
            let _permit = match &self.limits[index] {
                Some(limit) => limit.clone().acquire_owned().await.ok(),
                None => None,
            };
            match sink.deliver(commit, status).await {
                Ok(()) => {
                    self.metrics.status_delivery(sink.name(), "delivered");
                    tracing::info!(sink = sink.name(), %commit, context = %status.context, state = ?status.state, "commit status delivered");
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
                    let result = if err.is_retryable() { "retry" } else { "failed" };
                    self.metrics.status_delivery(sink.name(), result);
                    tracing::warn!(sink = sink.name(), %commit, context = %status.context, error = %err, "commit status not delivered");
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
                self.lock().remove(&key);
                Ok(())
            }
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
    client: Client,
    namespace: String,
    sinks: Arc<Sinks>,
    backoff: Backoff,
    /// Per ClusterOperation (or `sync/<commit>`): the status being retried and when it may be tried again.
    not_before: Mutex<HashMap<String, (CommitStatus, Instant)>>,
    sync_wake: Notify,
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
        })
    }

    /// Runs both delivery loops until `shutdown` completes.
    pub async fn run(
        self: Arc<Self>,
        shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
    ) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        let operations = self.clone().run_operations(wait_true(rx.clone()));
        let sync = self.clone().run_sync(wait_true(rx));
        let stop = async move {
            shutdown.await;
            let _ = tx.send(true);
        };
        tokio::join!(operations, sync, stop);
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
        let api: Api<ClusterOperation> = Api::namespaced(self.client.clone(), &self.namespace);
        let events = watcher(api, watcher::Config::default()).default_backoff();
        tokio::pin!(events);
        tokio::pin!(shutdown);
        let mut queue = Queue::default();
        let mut in_flight: JoinSet<(String, Outcome)> = JoinSet::new();
        loop {
            for (name, job) in queue.take_due(Instant::now(), MAX_IN_FLIGHT.saturating_sub(in_flight.len())) {
                in_flight.spawn(self.clone().deliver_operation(name, job));
            }
            let next_due = queue.next_due();
            tokio::select! {
                _ = &mut shutdown => break,
                event = events.next() => match event {
                    Some(Ok(event)) => {
                        let counted = !matches!(event, watcher::Event::Init | watcher::Event::InitApply(_));
                        queue.observe(event);
                        if counted {
                            for (phase, n) in queue.phase_counts() {
                                self.sinks.metrics.set_operations(phase, n);
                            }
                        }
                    }
                    Some(Err(err)) => tracing::warn!(error = %err, "watching ClusterOperations for commit statuses failed; retrying"),
                    None => break,
                },
                Some(done) = in_flight.join_next(), if !in_flight.is_empty() => match done {
                    Ok((name, outcome)) => queue.finish(&name, outcome, Instant::now()),
                    Err(err) => tracing::warn!(error = %err, "a commit status delivery task stopped"),
                },
                _ = sleep_until(next_due), if next_due.is_some() => {}
            }
        }
        while in_flight.join_next().await.is_some() {}
    }

    /// Delivers one operation's desired status (unless it already was) and records it on the object.
    async fn deliver_operation(self: Arc<Self>, name: String, job: Pending) -> (String, Outcome) {
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
            if let Err(err) = self.sinks.deliver(&job.commit, &job.desired).await {
                let attempts = job.attempts.saturating_add(1);
                let delay = self.backoff.delay(attempts, &err);
                let patch = serde_json::json!({ "status": { "reportAttempts": attempts } });
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
        let patch = serde_json::json!({ "status": { "reported": &job.desired, "reportAttempts": null } });
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

    /// Records the `kok/sync` status of `commit` and wakes the sync loop to deliver it.
    pub async fn deliver_sync(&self, commit: &str, status: &CommitStatus) -> Result<(), ReportError> {
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
    fn wait_for(&self, key: &str, status: &CommitStatus) -> Option<Duration> {
        let map = self.not_before.lock().unwrap_or_else(|p| p.into_inner());
        let (scheduled, at) = map.get(key)?;
        if scheduled != status {
            return None;
        }
        let now = Instant::now();
        (*at > now).then(|| *at - now)
    }

    fn schedule(&self, key: &str, status: &CommitStatus, attempts: u32, err: &DeliveryError) -> Duration {
        let delay = self.backoff.delay(attempts, err);
        let mut map = self.not_before.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(key.to_string(), (status.clone(), Instant::now() + delay));
        delay
    }

    fn clear_wait(&self, key: &str) {
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

fn patch_params() -> PatchParams {
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
    not_before: Instant,
}

/// How one delivery task ended.
#[derive(Debug)]
enum Outcome {
    /// Delivered and recorded as `status.reported`.
    Recorded { desired: CommitStatus },
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
    /// Phase of every operation, for the `kok_operations{phase}` gauge.
    phases: HashMap<String, Phase>,
}

impl Queue {
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
                    self.pending.retain(|name, _| seen.contains(name));
                    self.recorded.retain(|name, _| seen.contains(name));
                    self.phases.retain(|name, _| seen.contains(name));
                }
            }
            watcher::Event::Apply(op) => self.apply(&op),
            watcher::Event::Delete(op) => {
                self.pending.remove(&op.name_any());
                self.recorded.remove(&op.name_any());
                self.phases.remove(&op.name_any());
            }
        }
    }

    /// How many operations are in each phase.
    fn phase_counts(&self) -> [(Phase, u64); 6] {
        let mut counts = ALL_PHASES.map(|p| (p, 0u64));
        for phase in self.phases.values() {
            if let Some(slot) = counts.iter_mut().find(|(p, _)| p == phase) {
                slot.1 += 1;
            }
        }
        counts
    }

    fn apply(&mut self, op: &ClusterOperation) {
        let name = op.name_any();
        let status = op.status.as_ref();
        self.phases
            .insert(name.clone(), status.map(|s| s.phase).unwrap_or_default());
        let desired = status.and_then(|s| s.desired_status.as_ref());
        let reported = status.and_then(|s| s.reported.as_ref());
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
                    not_before: Instant::now(),
                };
                self.pending.insert(name, pending);
            }
        }
    }

    /// Up to `limit` due operations not already being delivered, marked busy.
    fn take_due(&mut self, now: Instant, limit: usize) -> Vec<(String, Pending)> {
        let mut due: Vec<(String, Pending)> = self
            .pending
            .iter()
            .filter(|(name, p)| p.not_before <= now && !self.busy.contains(*name))
            .map(|(name, p)| (name.clone(), p.clone()))
            .collect();
        due.sort_by_key(|(_, p)| p.not_before);
        due.truncate(limit);
        for (name, _) in &due {
            self.busy.insert(name.clone());
        }
        due
    }

    /// When the earliest waiting operation becomes due.
    fn next_due(&self) -> Option<Instant> {
        self.pending
            .iter()
            .filter(|(name, _)| !self.busy.contains(*name))
            .map(|(_, p)| p.not_before)
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
