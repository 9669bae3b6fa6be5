//! Prometheus metrics: the registry the service owns (prometheus-client, OpenMetrics text), the handles
//! other modules call, and the fleet's gauges read at scrape time from the controller's caches.
//!
//! Names follow Prometheus' naming guide: counters end in `_total`, durations are histograms in
//! seconds, times are Unix seconds in `_timestamp_seconds` gauges. Cardinality is bounded and said on
//! each metric: at most one series per cluster (and condition, phase or node state), per rollout wave,
//! per sink or receiver, per action; never one per operation or commit. Whole values are written as
//! integers. Finished runs are counted over the fleet, not per cluster (see `FINISHED`). At 1,000
//! clusters `/metrics` is about 12,400 series and 0.93 MB of text (0.07 MB as the server gzips it for
//! Prometheus) when every cluster has all its gauges (health checks, a wait and a hold), 0.16 MB
//! without health checks; it renders in a few milliseconds (the fleet benchmark measures both against
//! ≤ 1 MB and ≤ 100 ms).
//!
//! | metric | labels | series |
//! |---|---|---|
//! | `kok_build_info` | version, commit | 1 |
//! | `kok_leader` | | 1: 1 while this replica leads (or runs alone) |
//! | `kok_polls_total`, `kok_fetches_total` | result | ≤ 3 |
//! | `kok_source_last_success_timestamp_seconds` | | 1: last poll that reached the remote |
//! | `kok_last_reconciled_commit_timestamp_seconds` | | 1 |
//! | `kok_reconcile_duration_seconds` (histogram) | | 1 |
//! | `kok_health_round_duration_seconds` (histogram) | | 1 |
//! | `kok_objects_written_total` | | 1 |
//! | `kok_signature_refusals_total` | reason | ≤ 4 |
//! | `kok_job_duration_seconds` (histogram) | action, result | actions × 2 |
//! | `kok_status_deliveries_total` | sink, result | sinks × 4 |
//! | `kok_status_deliveries_waiting` | sink | sinks |
//! | `kok_notifications_total` | receiver, result | receivers × 3 |
//! | `kok_notifications_waiting` | receiver | receivers |
//! | `kok_operations` | cluster, phase | clusters × phases present of Pending, Queued, Running |
//! | `kok_operations_finished` | phase | 3: Succeeded, Failed, Canceled, over the fleet |
//! | `kok_queue_oldest_waiting_seconds` | cluster, operation, reason | ≤ clusters |
//! | `kok_cluster_held` | cluster, operation, commit | ≤ clusters (failed runs that hold) |
//! | `kok_cluster_condition` | cluster, condition | clusters × 6 |
//! | `kok_cluster_nodes` | cluster, state | clusters × 2 |
//! | `kok_cluster_certificate_expiry_timestamp_seconds` | cluster | ≤ clusters (those with certificates) |
//! | `kok_rollout_phase` | rollout, phase | rollouts |
//! | `kok_rollout_wave_clusters` | rollout, wave, state | rollouts × waves × 4 |
//!
//! The fleet's gauges (operations, queue, holds, health, rollouts) come from a [`FleetView`] the
//! controller registers ([`Metrics::watch_fleet`]): they are read from its watch caches at each scrape,
//! so they need no bookkeeping of their own, a deleted cluster's series go with it, and a standby
//! replica (no caches) shows none.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::api::Phase;

/// Upper bounds (seconds) of the reconcile and health-round duration buckets.
pub const RECONCILE_BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Upper bounds (seconds) of the Job duration buckets: ansible runs take from seconds to hours.
pub const JOB_BUCKETS: [f64; 12] = [
    10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0,
];

/// `Content-Type` of the OpenMetrics text format.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// `Content-Type` of the Prometheus text format, for scrapers that do not ask for OpenMetrics.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The commit kok was built from: `KOK_BUILD_COMMIT` at build time (the Dockerfile passes it), else
/// `unknown`.
pub const BUILD_COMMIT: &str = match option_env!("KOK_BUILD_COMMIT") {
    Some(commit) => commit,
    None => "unknown",
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SinkResult {
    sink: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SinkLabel {
    sink: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReceiverResult {
    receiver: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReceiverLabel {
    receiver: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionResult {
    action: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
    commit: String,
}

type JobHistograms = Family<ActionResult, Histogram, fn() -> Histogram>;

fn job_histogram() -> Histogram {
    Histogram::new(JOB_BUCKETS)
}

/// Every metric kok exports; a cheap handle (clones share one registry).
#[derive(Clone, Debug)]
pub struct Metrics {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    registry: Registry,
    source: SourceMetrics,
    pass: PassMetrics,
    report: ReportMetrics,
    fleet: Arc<FleetCollector>,
}

/// The replica's leadership and its polls and fetches of the git remote.
#[derive(Debug)]
struct SourceMetrics {
    leader: Gauge,
    polls: Family<ResultLabel, Counter>,
    fetches: Family<ResultLabel, Counter>,
    source_success: Gauge,
}

/// The passes into the meta-cluster, the health rounds, the refused commits and the operation runs.
#[derive(Debug)]
struct PassMetrics {
    last_reconciled: Gauge,
    reconcile: Histogram,
    health_round: Histogram,
    objects_written: Counter,
    signature_refusals: Family<ReasonLabel, Counter>,
    jobs: JobHistograms,
}

/// The deliveries of commit statuses and notifications.
#[derive(Debug)]
struct ReportMetrics {
    status_deliveries: Family<SinkResult, Counter>,
    status_waiting: Family<SinkLabel, Gauge>,
    notifications: Family<ReceiverResult, Counter>,
    notifications_waiting: Family<ReceiverLabel, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl SourceMetrics {
    /// Registers the build info, the leadership gauge and the git remote's metrics, in that order.
    fn register(registry: &mut Registry) -> Self {
        let build = Info::new(BuildLabels {
            version: env!("CARGO_PKG_VERSION").to_string(),
            commit: BUILD_COMMIT.to_string(),
        });
        registry.register("kok_build", "The version and commit kok was built from", build);
        let leader = Gauge::default();
        registry.register(
            "kok_leader",
            "1 while this replica leads (holds the Lease, or runs without leader election), else 0",
            leader.clone(),
        );
        let polls = Family::default();
        registry.register(
            "kok_polls",
            "Polls of the git remote, by result (unchanged, changed, error)",
            polls.clone(),
        );
        let fetches = Family::default();
        registry.register(
            "kok_fetches",
            "Fetches of a new commit from the git remote, by result",
            fetches.clone(),
        );
        let source_success = Gauge::default();
        registry.register(
            "kok_source_last_success_timestamp_seconds",
            "When a poll last reached the git remote, in Unix seconds (0: not yet)",
            source_success.clone(),
        );
        SourceMetrics {
            leader,
            polls,
            fetches,
            source_success,
        }
    }
}

impl PassMetrics {
    /// Registers the metrics of the passes, health rounds, signature refusals and runs, in that order.
    fn register(registry: &mut Registry) -> Self {
        let last_reconciled = Gauge::default();
        registry.register(
            "kok_last_reconciled_commit_timestamp_seconds",
            "When the last commit was reconciled into the meta-cluster, in Unix seconds",
            last_reconciled.clone(),
        );
        let reconcile = Histogram::new(RECONCILE_BUCKETS);
        registry.register(
            "kok_reconcile_duration_seconds",
            "Time to reconcile one commit into the meta-cluster",
            reconcile.clone(),
        );
        let health_round = Histogram::new(RECONCILE_BUCKETS);
        registry.register(
            "kok_health_round_duration_seconds",
            "Time to check the health of every cluster once",
            health_round.clone(),
        );
        let objects_written = Counter::default();
        registry.register(
            "kok_objects_written",
            "Objects created, patched or deleted in the meta-cluster",
            objects_written.clone(),
        );
        let signature_refusals = Family::default();
        registry.register(
            "kok_signature_refusals",
            "Commits refused by signature verification, by reason",
            signature_refusals.clone(),
        );
        let jobs = JobHistograms::new_with_constructor(job_histogram as fn() -> Histogram);
        registry.register(
            "kok_job_duration_seconds",
            "Duration of finished operation runs (Job start to end), by action (the playbook) and result \
         (succeeded, failed)",
            jobs.clone(),
        );
        PassMetrics {
            last_reconciled,
            reconcile,
            health_round,
            objects_written,
            signature_refusals,
            jobs,
        }
    }
}

impl ReportMetrics {
    /// Registers the status and notification delivery metrics, in that order.
    fn register(registry: &mut Registry) -> Self {
        let status_deliveries = Family::default();
        registry.register(
            "kok_status_deliveries",
            "Commit status delivery attempts, by sink and result (delivered, retry, failed, paused)",
            status_deliveries.clone(),
        );
        let status_waiting = Family::default();
        registry.register(
            "kok_status_deliveries_waiting",
            "Commit statuses the sink has not taken yet (operations' and kok/sync)",
            status_waiting.clone(),
        );
        let notifications = Family::default();
        registry.register(
            "kok_notifications",
            "Notification delivery attempts, by receiver and result (delivered, retry, failed)",
            notifications.clone(),
        );
        let notifications_waiting = Family::default();
        registry.register(
            "kok_notifications_waiting",
            "Notifications the receiver has not taken yet",
            notifications_waiting.clone(),
        );
        ReportMetrics {
            status_deliveries,
            status_waiting,
            notifications,
            notifications_waiting,
        }
    }
}

impl Metrics {
    /// A registry with every metric registered and none observed yet.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let source = SourceMetrics::register(&mut registry);
        let pass = PassMetrics::register(&mut registry);
        let report = ReportMetrics::register(&mut registry);
        let fleet = Arc::new(FleetCollector::default());
        registry.register_collector(Box::new(fleet.clone()));
        Metrics {
            inner: Arc::new(Inner {
                registry,
                source,
                pass,
                report,
                fleet,
            }),
        }
    }

    /// Says whether this replica leads.
    pub fn set_leader(&self, leads: bool) {
        self.inner.source.leader.set(i64::from(leads));
    }

    /// Counts one poll of the remote; `result` is `unchanged`, `changed` or `error`. A poll that is not an
    /// error also records the time of the last contact with the remote.
    pub fn poll(&self, result: &str) {
        self.inner
            .source
            .polls
            .get_or_create(&ResultLabel {
                result: result.to_string(),
            })
            .inc();
        if result != "error" {
            self.inner
                .source
                .source_success
                .set(jiff::Timestamp::now().as_second());
        }
    }

    /// Counts one fetch from the remote; `result` is e.g. `ok` or `error`.
    pub fn fetch(&self, result: &str) {
        self.inner
            .source
            .fetches
            .get_or_create(&ResultLabel {
                result: result.to_string(),
            })
            .inc();
    }

    /// Records how long one reconcile of a commit took.
    pub fn observe_reconcile(&self, took: Duration) {
        self.inner.pass.reconcile.observe(took.as_secs_f64());
    }

    /// Records how long one health round (every cluster checked once) took.
    pub fn observe_health_round(&self, took: Duration) {
        self.inner.pass.health_round.observe(took.as_secs_f64());
    }

    /// Records how long a run of `action` took from Job start to end; `result` is `succeeded` or `failed`.
    pub fn observe_job(&self, action: &str, result: &str, took: Duration) {
        self.inner
            .pass
            .jobs
            .get_or_create(&ActionResult {
                action: action.to_string(),
                result: result.to_string(),
            })
            .observe(took.as_secs_f64());
    }

    /// Counts objects written to the meta-cluster (creates, patches and deletes).
    pub fn objects_written(&self, n: u64) {
        self.inner.pass.objects_written.inc_by(n);
    }

    /// Counts one commit status delivery attempt on `sink`; `result` is `delivered`, `retry`, `failed`
    /// or `paused`.
    pub fn status_delivery(&self, sink: &str, result: &str) {
        self.inner
            .report
            .status_deliveries
            .get_or_create(&SinkResult {
                sink: sink.to_string(),
                result: result.to_string(),
            })
            .inc();
    }

    /// Sets how many commit statuses `sink` has not taken yet.
    pub fn set_status_waiting(&self, sink: &str, n: usize) {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        self.inner
            .report
            .status_waiting
            .get_or_create(&SinkLabel {
                sink: sink.to_string(),
            })
            .set(n);
    }

    /// Counts one notification delivery attempt to `receiver`; `result` is `delivered`, `retry` or
    /// `failed`.
    pub fn notification(&self, receiver: &str, result: &str) {
        self.inner
            .report
            .notifications
            .get_or_create(&ReceiverResult {
                receiver: receiver.to_string(),
                result: result.to_string(),
            })
            .inc();
    }

    /// Sets how many notifications `receiver` has not taken yet.
    pub fn set_notifications_waiting(&self, receiver: &str, n: usize) {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        self.inner
            .report
            .notifications_waiting
            .get_or_create(&ReceiverLabel {
                receiver: receiver.to_string(),
            })
            .set(n);
    }

    /// Records the time (Unix seconds) the last commit was reconciled.
    pub fn set_last_reconciled_commit_time(&self, unix_seconds: i64) {
        self.inner.pass.last_reconciled.set(unix_seconds.max(0));
    }

    /// Counts one commit refused by signature verification; `reason` is e.g. `unsigned`.
    pub fn signature_refusal(&self, reason: &str) {
        self.inner
            .pass
            .signature_refusals
            .get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Reads the fleet's gauges from `view` at each scrape (the controller registers its caches).
    pub fn watch_fleet(&self, view: Arc<dyn FleetView>) {
        *self.inner.fleet.view.lock().unwrap_or_else(|p| p.into_inner()) = Some(view);
    }

    /// The value of one delivery counter, for tests.
    pub fn status_deliveries(&self, sink: &str, result: &str) -> u64 {
        self.inner
            .report
            .status_deliveries
            .get(&SinkResult {
                sink: sink.to_string(),
                result: result.to_string(),
            })
            .map_or(0, |c| c.get())
    }

    /// The value of one notification counter, for tests.
    pub fn notifications(&self, receiver: &str, result: &str) -> u64 {
        self.inner
            .report
            .notifications
            .get(&ReceiverResult {
                receiver: receiver.to_string(),
                result: result.to_string(),
            })
            .map_or(0, |c| c.get())
    }

    /// All metrics in the OpenMetrics text format (ending in `# EOF`).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(64 * 1024);
        // Writing to a String cannot fail, and every name and label set is valid.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.inner.registry);
        out
    }

    /// All metrics in the Prometheus text format 0.0.4, for scrapers that do not accept OpenMetrics.
    pub fn render_text(&self) -> String {
        let mut out = String::with_capacity(64 * 1024);
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.inner.registry);
        out
    }

    /// The body and `Content-Type` for a scrape whose `Accept` header is `accept`: OpenMetrics when the
    /// scraper accepts it (Prometheus does), else the Prometheus text format.
    pub fn negotiate(&self, accept: Option<&str>) -> (String, &'static str) {
        if accept.is_some_and(|a| a.contains("application/openmetrics-text")) {
            (self.render(), OPENMETRICS_CONTENT_TYPE)
        } else {
            (self.render_text(), TEXT_CONTENT_TYPE)
        }
    }
}

/// What the fleet looks like now, for the gauges read at scrape time.
pub trait FleetView: Send + Sync + 'static {
    /// The fleet's state now.
    fn fleet(&self) -> Fleet;
}

/// The fleet's state as the gauges show it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fleet {
    /// Every cluster, by name.
    pub clusters: Vec<ClusterGauges>,
    /// Every rollout, by name.
    pub rollouts: Vec<RolloutGauges>,
}

/// One cluster's gauges.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterGauges {
    /// Cluster name.
    pub name: String,
    /// Health conditions from the last check: (type, `True` | `False` | `Unknown`).
    pub conditions: Vec<(String, String)>,
    /// Nodes from the last check: (ready, total).
    pub nodes: Option<(u32, u32)>,
    /// When the first of its certificates expires, in Unix seconds, from the last check that read them.
    pub certificate_expiry: Option<i64>,
    /// Operations by phase (phases without any are left out).
    pub phases: Vec<(Phase, u64)>,
    /// The operation that has waited longest to start, if any waits.
    pub oldest_waiting: Option<Waiting>,
    /// The failed runs that hold the cluster's later operations.
    pub held_by: Vec<Held>,
}

/// The operation of a cluster that has waited longest to start.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Waiting {
    /// Operation id.
    pub operation: String,
    /// Why it waits, one of a fixed set (see `controller::queue::wait_reason`).
    pub reason: &'static str,
    /// Seconds since it was created.
    pub seconds: f64,
}

/// A failed run that holds its cluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Held {
    /// Operation id.
    pub operation: String,
    /// Commit of the failed run (12 hex digits).
    pub commit: String,
}

/// One rollout's gauges.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RolloutGauges {
    /// Rollout name.
    pub name: String,
    /// Its phase (`Progressing`, `Baking`, `WaitingForPromotion`, `Halted`, `Completed`).
    pub phase: String,
    /// Per wave, in order: (name, pending, running, succeeded, failed) clusters.
    pub waves: Vec<(String, u32, u32, u32, u32)>,
}

/// The collector of the fleet's gauges.
#[derive(Default)]
struct FleetCollector {
    view: Mutex<Option<Arc<dyn FleetView>>>,
}

impl std::fmt::Debug for FleetCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FleetCollector")
    }
}

/// A gauge family written at scrape time: its descriptor (even without samples, so that the name is
/// always there to query), then one sample per label set.
fn gauge_family<'a, L, I>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: I,
) -> Result<(), std::fmt::Error>
where
    L: EncodeLabelSet + 'a,
    I: IntoIterator<Item = (L, f64)>,
{
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in samples {
        let family = metric.encode_family(&labels)?;
        // Counts, conditions, seconds and timestamps are whole: `1` rather than `1.0` takes a sixth less
        // of a condition's sample at fleet size.
        match whole(value) {
            Some(n) => ConstGauge::new(n).encode(family)?,
            None => ConstGauge::new(value).encode(family)?,
        }
    }
    Ok(())
}

/// `value` as an integer when it is one that a float holds exactly.
fn whole(value: f64) -> Option<i64> {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    (value.fract() == 0.0 && value.abs() <= EXACT).then_some(value as i64)
}

/// `True` → 1, `False` → 0, anything else → -1.
fn condition_value(status: &str) -> f64 {
    match status {
        "True" => 1.0,
        "False" => 0.0,
        _ => -1.0,
    }
}

impl Collector for FleetCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let view = self.view.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(view) = view else { return Ok(()) };
        let fleet = view.fleet();
        encode_queues(&mut encoder, &fleet.clusters)?;
        encode_health(&mut encoder, &fleet.clusters)?;
        encode_rollouts(&mut encoder, &fleet.rollouts)
    }
}

/// The phases a run ends in, each counted over the whole fleet: finished runs are history kept up to a
/// cluster's `historyLimit`, whose count per cluster would be a series of every cluster that says little
/// (what a run did is in `kok_job_duration_seconds`, what holds a cluster in `kok_cluster_held`).
const FINISHED: [Phase; 3] = [Phase::Succeeded, Phase::Failed, Phase::Canceled];

/// The clusters' operation gauges: operations by phase, the longest wait and the holds.
fn encode_queues(encoder: &mut DescriptorEncoder, clusters: &[ClusterGauges]) -> Result<(), std::fmt::Error> {
    gauge_family(
        encoder,
        "kok_operations",
        "ClusterOperations not finished (Pending, Queued, Running) by cluster and phase (phases without \
         any are left out)",
        clusters.iter().flat_map(|c| {
            c.phases
                .iter()
                .filter(|(phase, _)| !phase.is_terminal())
                .map(move |(phase, n)| {
                    (
                        [("cluster", c.name.as_str()), ("phase", phase.as_str())],
                        *n as f64,
                    )
                })
        }),
    )?;
    gauge_family(
        encoder,
        "kok_operations_finished",
        "Finished ClusterOperations the fleet keeps (Succeeded, Failed, Canceled), by phase",
        FINISHED.map(|phase| {
            let kept: u64 = clusters
                .iter()
                .flat_map(|c| &c.phases)
                .filter(|(p, _)| *p == phase)
                .map(|(_, n)| n)
                .sum();
            ([("phase", phase.as_str())], kept as f64)
        }),
    )?;
    gauge_family(
        encoder,
        "kok_queue_oldest_waiting_seconds",
        "Per cluster, how long its longest-waiting operation (Pending or Queued) has existed, with its \
         id and why it waits: behind, busy, held, job_slot, window, frozen, wave, secret, maintenance, \
         pending",
        clusters.iter().filter_map(|c| {
            let w = c.oldest_waiting.as_ref()?;
            Some((
                [
                    ("cluster", c.name.as_str()),
                    ("operation", w.operation.as_str()),
                    ("reason", w.reason),
                ],
                w.seconds,
            ))
        }),
    )?;
    gauge_family(
        encoder,
        "kok_cluster_held",
        "1 for each failed run that holds its cluster's later operations, by cluster, operation id and \
         commit",
        clusters.iter().flat_map(|c| {
            c.held_by.iter().map(move |h| {
                (
                    [
                        ("cluster", c.name.as_str()),
                        ("operation", h.operation.as_str()),
                        ("commit", h.commit.as_str()),
                    ],
                    1.0,
                )
            })
        }),
    )?;
    Ok(())
}

/// The clusters' health gauges: conditions, nodes and the first certificate expiry.
fn encode_health(encoder: &mut DescriptorEncoder, clusters: &[ClusterGauges]) -> Result<(), std::fmt::Error> {
    gauge_family(
        encoder,
        "kok_cluster_condition",
        "Health conditions of each cluster from the last check: 1 True, 0 False, -1 Unknown",
        clusters.iter().flat_map(|c| {
            c.conditions.iter().map(move |(type_, status)| {
                (
                    [("cluster", c.name.as_str()), ("condition", type_.as_str())],
                    condition_value(status),
                )
            })
        }),
    )?;
    gauge_family(
        encoder,
        "kok_cluster_nodes",
        "Nodes of each cluster from the last health check, by state (ready, not_ready)",
        clusters.iter().flat_map(|c| {
            c.nodes.into_iter().flat_map(move |(ready, total)| {
                [
                    (
                        [("cluster", c.name.as_str()), ("state", "ready")],
                        f64::from(ready),
                    ),
                    (
                        [("cluster", c.name.as_str()), ("state", "not_ready")],
                        f64::from(total.saturating_sub(ready)),
                    ),
                ]
            })
        }),
    )?;
    gauge_family(
        encoder,
        "kok_cluster_certificate_expiry_timestamp_seconds",
        "When the first of each cluster's certificates expires (notAfter, Unix seconds): of the chain its \
         API server presents and the client certificate of its kubeconfig, from the last health check",
        clusters.iter().filter_map(|c| {
            let expiry = c.certificate_expiry?;
            Some(([("cluster", c.name.as_str())], expiry as f64))
        }),
    )?;
    Ok(())
}

/// The rollouts' gauges: each one's phase and its waves' clusters by state.
fn encode_rollouts(
    encoder: &mut DescriptorEncoder,
    rollouts: &[RolloutGauges],
) -> Result<(), std::fmt::Error> {
    gauge_family(
        encoder,
        "kok_rollout_phase",
        "1 for each rollout, labelled with its phase (Progressing, Baking, WaitingForPromotion, Halted, \
         Completed)",
        rollouts
            .iter()
            .map(|r| ([("rollout", r.name.as_str()), ("phase", r.phase.as_str())], 1.0)),
    )?;
    gauge_family(
        encoder,
        "kok_rollout_wave_clusters",
        "Clusters of each rollout wave by the state of their latest run (pending, running, succeeded, \
         failed)",
        rollouts.iter().flat_map(|r| {
            r.waves
                .iter()
                .flat_map(move |(wave, pending, running, succeeded, failed)| {
                    [
                        ("pending", *pending),
                        ("running", *running),
                        ("succeeded", *succeeded),
                        ("failed", *failed),
                    ]
                    .map(|(state, n)| {
                        (
                            [
                                ("rollout", r.name.as_str()),
                                ("wave", wave.as_str()),
                                ("state", state),
                            ],
                            f64::from(n),
                        )
                    })
                })
        }),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Fleet);

    impl FleetView for Fixed {
        fn fleet(&self) -> Fleet {
            self.0.clone()
        }
    }

    fn fleet() -> Fleet {
        Fleet {
            clusters: vec![ClusterGauges {
                name: "prod".into(),
                conditions: vec![
                    ("NodesReady".into(), "False".into()),
                    ("VersionMatches".into(), "Unknown".into()),
                ],
                nodes: Some((4, 5)),
                certificate_expiry: Some(1_775_000_000),
                phases: vec![(Phase::Queued, 2), (Phase::Failed, 1)],
                oldest_waiting: Some(Waiting {
                    operation: "upgrade".into(),
                    reason: "held",
                    seconds: 90.5,
                }),
                held_by: vec![Held {
                    operation: "install".into(),
                    commit: "0123456789ab".into(),
                }],
            }],
            rollouts: vec![RolloutGauges {
                name: "upgrade".into(),
                phase: "Halted".into(),
                waves: vec![("canary".into(), 0, 0, 1, 1)],
            }],
        }
    }

    #[test]
    fn finished_runs_are_counted_over_the_fleet_and_unfinished_ones_per_cluster() {
        let cluster = |name: &str, phases: Vec<(Phase, u64)>| ClusterGauges {
            name: name.into(),
            phases,
            ..ClusterGauges::default()
        };
        let m = Metrics::new();
        m.watch_fleet(Arc::new(Fixed(Fleet {
            clusters: vec![
                cluster(
                    "a",
                    vec![(Phase::Running, 1), (Phase::Succeeded, 20), (Phase::Failed, 1)],
                ),
                cluster("b", vec![(Phase::Pending, 3), (Phase::Succeeded, 7)]),
                cluster("c", vec![(Phase::Canceled, 2)]),
            ],
            rollouts: vec![],
        })));
        let text = m.render();
        let series: Vec<&str> = text.lines().filter(|l| l.starts_with("kok_operations")).collect();
        assert_eq!(
            series,
            [
                "kok_operations{cluster=\"a\",phase=\"Running\"} 1",
                "kok_operations{cluster=\"b\",phase=\"Pending\"} 3",
                "kok_operations_finished{phase=\"Succeeded\"} 27",
                "kok_operations_finished{phase=\"Failed\"} 1",
                "kok_operations_finished{phase=\"Canceled\"} 2",
            ],
            "{text}"
        );
    }

    #[test]
    fn the_fleet_gauges_are_read_from_the_view_at_each_scrape() {
        let m = Metrics::new();
        assert!(!m.render().contains("kok_operations"), "no view, no fleet gauges");
        m.watch_fleet(Arc::new(Fixed(Fleet::default())));
        assert!(
            m.render().contains("# TYPE kok_operations gauge\n"),
            "an empty fleet still names its gauges"
        );
        m.watch_fleet(Arc::new(Fixed(fleet())));
        let text = m.render();
        for line in [
            "kok_operations{cluster=\"prod\",phase=\"Queued\"} 2\n",
            "kok_queue_oldest_waiting_seconds{cluster=\"prod\",operation=\"upgrade\",reason=\"held\"} 90.5\n",
            "kok_cluster_held{cluster=\"prod\",operation=\"install\",commit=\"0123456789ab\"} 1\n",
            "kok_cluster_condition{cluster=\"prod\",condition=\"NodesReady\"} 0\n",
            "kok_cluster_condition{cluster=\"prod\",condition=\"VersionMatches\"} -1\n",
            "kok_cluster_nodes{cluster=\"prod\",state=\"not_ready\"} 1\n",
            "kok_cluster_certificate_expiry_timestamp_seconds{cluster=\"prod\"} 1775000000\n",
            "kok_rollout_phase{rollout=\"upgrade\",phase=\"Halted\"} 1\n",
            "kok_rollout_wave_clusters{rollout=\"upgrade\",wave=\"canary\",state=\"failed\"} 1\n",
            "kok_operations_finished{phase=\"Succeeded\"} 0\n",
            "kok_operations_finished{phase=\"Failed\"} 1\n",
            "kok_operations_finished{phase=\"Canceled\"} 0\n",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert!(
            !text.contains("kok_operations{cluster=\"prod\",phase=\"Failed\"}"),
            "a finished run is counted over the fleet, not per cluster:\n{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
        // Whole values are written as integers, others as floats.
        assert!(!text.contains("} 1.0\n"), "{text}");
    }

    #[test]
    fn counters_follow_the_naming_guide_and_render_with_their_labels() {
        let m = Metrics::new();
        m.poll("unchanged");
        m.poll("unchanged");
        m.poll("error");
        m.status_delivery("github", "delivered");
        m.objects_written(5);
        m.set_leader(true);
        let text = m.render();
        assert!(text.contains("# TYPE kok_polls counter"), "{text}");
        assert!(
            text.contains("kok_polls_total{result=\"unchanged\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("kok_polls_total{result=\"error\"} 1\n"), "{text}");
        assert!(text.contains("kok_status_deliveries_total{sink=\"github\",result=\"delivered\"} 1\n"));
        assert!(text.contains("kok_objects_written_total 5\n"), "{text}");
        assert!(text.contains("kok_leader 1\n"), "{text}");
        assert!(
            text.contains(&format!(
                "kok_build_info{{version=\"{}\",commit=\"{BUILD_COMMIT}\"}} 1\n",
                env!("CARGO_PKG_VERSION")
            )),
            "{text}"
        );
        assert!(
            !text.contains("kok_source_last_success_timestamp_seconds 0\n"),
            "{text}"
        );
        assert_eq!(m.status_deliveries("github", "delivered"), 1);
        let plain = m.render_text();
        assert!(
            plain.contains("kok_polls_total{result=\"unchanged\"} 2\n"),
            "{plain}"
        );
        assert!(!plain.contains("# EOF"), "{plain}");
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_job_durations_are_by_action() {
        let m = Metrics::new();
        m.observe_reconcile(Duration::from_millis(3));
        m.observe_reconcile(Duration::from_millis(300));
        m.observe_job("cluster.yml", "succeeded", Duration::from_secs(400));
        let text = m.render();
        for line in [
            "kok_reconcile_duration_seconds_bucket{le=\"0.001\"} 0\n",
            "kok_reconcile_duration_seconds_bucket{le=\"0.005\"} 1\n",
            "kok_reconcile_duration_seconds_bucket{le=\"0.5\"} 2\n",
            "kok_reconcile_duration_seconds_bucket{le=\"+Inf\"} 2\n",
            "kok_reconcile_duration_seconds_count 2\n",
            "kok_job_duration_seconds_bucket{le=\"300.0\",action=\"cluster.yml\",result=\"succeeded\"} 0\n",
            "kok_job_duration_seconds_bucket{le=\"600.0\",action=\"cluster.yml\",result=\"succeeded\"} 1\n",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }

    #[test]
    fn label_values_are_escaped() {
        let m = Metrics::new();
        m.status_delivery("x\"y\\z", "delivered");
        assert!(m.render().contains("sink=\"x\\\"y\\\\z\""), "{}", m.render());
    }

    #[test]
    fn prometheus_gets_openmetrics_and_others_the_text_format() {
        let m = Metrics::new();
        let accept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(m.negotiate(Some(accept)).1, OPENMETRICS_CONTENT_TYPE);
        assert_eq!(m.negotiate(None).1, TEXT_CONTENT_TYPE);
    }
}
