//! Where a status goes: every configured [`Sink`] with its in-flight limit and rate-limit pause, the
//! bookkeeping that sends each status to each sink once while others are retried, the [`Route`] that
//! picks the sinks by the forges' budget, and the retry [`Backoff`].

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use super::sink::{DeliveryError, Sink};
use crate::api::CommitStatus;
use crate::metrics::Metrics;

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

/// What sinks hold on a commit, by sink index: the fingerprints of its statuses ([`Sinks::holding`]).
pub(super) type Holding = HashMap<usize, HashSet<u64>>;

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
    pub(super) fn includes(self, sink: &dyn Sink) -> bool {
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
    metrics: Metrics,
    /// `kok/sync` records not delivered yet (every sink waits for them).
    pub(super) sync_waiting: std::sync::atomic::AtomicUsize,
    /// (commit, context) → the status and the indexes of the sinks that took it, while others still fail.
    partial: Mutex<Partial>,
    max_contexts: usize,
    pub(super) settle_quiet: Duration,
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
    pub fn new(sinks: Vec<Arc<dyn Sink>>, metrics: Metrics) -> Self {
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
            sync_waiting: std::sync::atomic::AtomicUsize::new(0),
            partial: Mutex::default(),
            max_contexts: DEFAULT_MAX_CONTEXTS,
            settle_quiet: SETTLE_QUIET,
        }
    }

    /// Adds one more sink (the notifications' is added by the service, which owns their outbox).
    pub fn with_sink(mut self, sink: Arc<dyn Sink>) -> Self {
        self.limits
            .push(sink.max_in_flight().map(|n| Arc::new(Semaphore::new(n.max(1)))));
        self.paused.push(Mutex::new(None));
        self.sinks.push(sink);
        self
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
    /// The record these sinks keep, read back to restore runs a lost meta-cluster forgot.
    pub fn record_book(&self) -> super::record::RecordBook {
        super::record::RecordBook::new(&self.sinks)
    }

    pub fn names(&self) -> Vec<String> {
        self.sinks.iter().map(|s| s.name().to_string()).collect()
    }

    /// Sets `kok_status_deliveries_waiting` of every sink: the `operations` whose status is not
    /// delivered and recorded yet and the undelivered `kok/sync` records, less those the sink already took
    /// while others still fail.
    pub(super) fn publish_waiting(&self, operations: usize) {
        let sync = self.sync_waiting.load(std::sync::atomic::Ordering::Relaxed);
        let partial = self.lock();
        for (index, sink) in self.sinks.iter().enumerate() {
            let taken = partial.values().filter(|(_, done)| done.contains(&index)).count();
            let waiting = (operations + sync).saturating_sub(taken);
            self.metrics.set_status_waiting(sink.name(), waiting);
        }
    }

    /// The most operations a commit may have and still show one context each on the budgeted sinks;
    /// `usize::MAX` when no sink has a budget.
    pub(super) fn budget(&self) -> usize {
        if self.sinks.iter().any(|s| s.budgeted()) {
            self.max_contexts
        } else {
            usize::MAX
        }
    }

    /// The fingerprint of `status` in each sink of `route` that takes it ([`Sink::takes`]), by the
    /// sink's index, when each of them can tell exactly which statuses it holds ([`Sink::fingerprint`]);
    /// `None` when one cannot (a forge; a notification sink for a finished run). A status whose sinks
    /// can tell is not recorded on its operation.
    pub(super) fn fingerprints(&self, route: Route, status: &CommitStatus) -> Option<Vec<(usize, u64)>> {
        self.sinks
            .iter()
            .enumerate()
            .filter(|(_, sink)| route.includes(sink.as_ref()) && sink.takes(status))
            .map(|(index, sink)| sink.fingerprint(status).map(|print| (index, print)))
            .collect()
    }

    /// What the sinks of `route` that can tell hold on `commit` ([`Sink::holding`]), by sink index.
    pub(super) async fn holding(&self, route: Route, commit: &str) -> Result<Holding, String> {
        let mut held = Holding::new();
        for (index, sink) in self.sinks.iter().enumerate() {
            if route.includes(sink.as_ref()) {
                if let Some(set) = sink.holding(commit).await? {
                    held.insert(index, set);
                }
            }
        }
        Ok(held)
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
    pub(super) async fn deliver_once(&self, commit: &str, status: &CommitStatus, route: Route) {
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
        if !sink.takes(status) {
            // Nothing to deliver: neither counted nor logged as a delivery.
            return Ok(());
        }
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
                // One line per status would be a third of a fleet's log (200,000 lines for 10,000
                // clusters × 20 runs) and says nothing the sink and the metrics do not: debug.
                tracing::debug!(sink = sink.name(), %commit, context = %status.context, state = ?status.state, "commit status delivered");
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

    /// Takes only finished runs, as the notifications do, and counts what it is given.
    struct Finished(std::sync::atomic::AtomicUsize);

    impl Sink for Finished {
        fn name(&self) -> &str {
            "finished"
        }

        fn takes(&self, status: &CommitStatus) -> bool {
            status.state != crate::api::StatusState::Pending
        }

        fn deliver<'a>(
            &'a self,
            _commit: &'a str,
            _status: &'a CommitStatus,
        ) -> futures::future::BoxFuture<'a, Result<(), DeliveryError>> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Box::pin(async { Ok(()) })
        }
    }

    #[tokio::test]
    async fn a_status_a_sink_does_not_take_is_neither_given_to_it_nor_counted_as_delivered() {
        let sink = Arc::new(Finished(Default::default()));
        let metrics = Metrics::new();
        let sinks = Sinks::new(vec![sink.clone()], metrics.clone());
        let status = |state| CommitStatus {
            context: "kok/a/install".into(),
            state,
            description: "d".into(),
            target_url: None,
            run: None,
        };
        let delivered = |m: &Metrics| {
            m.render()
                .lines()
                .any(|l| l == "kok_status_deliveries_total{sink=\"finished\",result=\"delivered\"} 1")
        };
        sinks
            .deliver("c1", &status(crate::api::StatusState::Pending))
            .await
            .expect("taken");
        sinks
            .deliver_once("c1", &status(crate::api::StatusState::Pending), Route::All)
            .await;
        assert_eq!(sink.0.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert!(
            !metrics.render().contains("sink=\"finished\""),
            "{}",
            metrics.render()
        );
        sinks
            .deliver("c1", &status(crate::api::StatusState::Success))
            .await
            .expect("taken");
        assert_eq!(sink.0.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(delivered(&metrics), "{}", metrics.render());
    }
}
