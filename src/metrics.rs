//! Prometheus metrics: a small registry other modules increment, rendered in the text exposition format.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::api::Phase;

/// Upper bounds (seconds) of the reconcile duration histogram buckets.
pub const RECONCILE_BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Every metric kok exports.
#[derive(Debug, Default)]
pub struct Metrics {
    polls: Family,
    fetches: Family,
    objects_written: AtomicU64,
    operations: Family,
    status_deliveries: Family,
    last_reconciled_commit_time: AtomicU64,
    reconcile: Histogram,
    health_round: Histogram,
    signature_refusals: Family,
    cluster_conditions: Family,
    cluster_nodes: Family,
}

/// The process-wide registry that the service renders on `/metrics`.
pub fn global() -> &'static Metrics {
    static GLOBAL: OnceLock<Metrics> = OnceLock::new();
    GLOBAL.get_or_init(Metrics::default)
}

impl Metrics {
    /// An empty registry (tests use their own; the service uses [`global`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one poll of the remote; `result` is e.g. `unchanged`, `changed` or `error`.
    pub fn poll(&self, result: &str) {
        self.polls.add(&[("result", result)], 1.0);
    }

    /// Counts one fetch from the remote; `result` is e.g. `ok` or `error`.
    pub fn fetch(&self, result: &str) {
        self.fetches.add(&[("result", result)], 1.0);
    }

    /// Records how long one reconcile of a commit took.
    pub fn observe_reconcile(&self, took: Duration) {
        self.reconcile.observe(took.as_secs_f64());
    }

    /// Records how long one health round (every cluster checked once) took.
    pub fn observe_health_round(&self, took: Duration) {
        self.health_round.observe(took.as_secs_f64());
    }

    /// Counts objects written to the meta-cluster (creates, patches and deletes).
    pub fn objects_written(&self, n: u64) {
        self.objects_written.fetch_add(n, Ordering::Relaxed);
    }

    /// Sets how many ClusterOperations are in `phase` now.
    pub fn set_operations(&self, phase: Phase, n: u64) {
        self.operations.set(&[("phase", phase.as_str())], n as f64);
    }

    /// Counts one commit status delivery attempt on `sink`; `result` is `delivered`, `retry` or `failed`.
    pub fn status_delivery(&self, sink: &str, result: &str) {
        self.status_deliveries
            .add(&[("sink", sink), ("result", result)], 1.0);
    }

    /// Records the commit time (Unix seconds) of the commit reconciled last.
    pub fn set_last_reconciled_commit_time(&self, unix_seconds: i64) {
        self.last_reconciled_commit_time
            .store(unix_seconds.max(0) as u64, Ordering::Relaxed);
    }

    /// Counts one commit refused by signature verification; `reason` is e.g. `unsigned`.
    pub fn signature_refusal(&self, reason: &str) {
        self.signature_refusals.add(&[("reason", reason)], 1.0);
    }

    /// Records a health condition of `cluster`: 1 for True, 0 for False, -1 for Unknown.
    pub fn set_cluster_condition(&self, cluster: &str, condition: &str, status: &str) {
        let value = match status {
            "True" => 1.0,
            "False" => 0.0,
            _ => -1.0,
        };
        self.cluster_conditions
            .set(&[("cluster", cluster), ("condition", condition)], value);
    }

    /// Records how many Nodes of `cluster` are Ready and not.
    pub fn set_cluster_nodes(&self, cluster: &str, ready: u32, total: u32) {
        let not_ready = total.saturating_sub(ready);
        self.cluster_nodes
            .set(&[("cluster", cluster), ("state", "ready")], f64::from(ready));
        self.cluster_nodes.set(
            &[("cluster", cluster), ("state", "not_ready")],
            f64::from(not_ready),
        );
    }

    /// Drops the health series (`kok_cluster_condition`, `kok_cluster_nodes`) of every cluster but those
    /// `kept` says exist.
    pub fn keep_clusters(&self, kept: impl Fn(&str) -> bool) {
        self.cluster_conditions.retain_first_label(&kept);
        self.cluster_nodes.retain_first_label(&kept);
    }

    /// The value of one labelled series, for tests and readiness checks.
    pub fn status_deliveries(&self, sink: &str, result: &str) -> u64 {
        self.status_deliveries.get(&[("sink", sink), ("result", result)]) as u64
    }

    /// All metrics in the Prometheus text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.polls.render(
            &mut out,
            "kok_polls_total",
            "counter",
            "Polls of the git remote, by result.",
        );
        self.fetches.render(
            &mut out,
            "kok_fetches_total",
            "counter",
            "Fetches from the git remote, by result.",
        );
        self.reconcile.render(
            &mut out,
            "kok_reconcile_duration_seconds",
            "Time to reconcile one commit into the meta-cluster.",
        );
        self.health_round.render(
            &mut out,
            "kok_health_round_duration_seconds",
            "Time to check the health of every cluster once.",
        );
        header(
            &mut out,
            "kok_objects_written_total",
            "counter",
            "Objects created, patched or deleted.",
        );
        let _ = writeln!(
            out,
            "kok_objects_written_total {}",
            self.objects_written.load(Ordering::Relaxed)
        );
        self.operations
            .render(&mut out, "kok_operations", "gauge", "ClusterOperations by phase.");
        self.status_deliveries.render(
            &mut out,
            "kok_status_deliveries_total",
            "counter",
            "Commit status delivery attempts, by sink and result.",
        );
        self.signature_refusals.render(
            &mut out,
            "kok_signature_refusals_total",
            "counter",
            "Commits refused by signature verification, by reason.",
        );
        self.cluster_conditions.render(
            &mut out,
            "kok_cluster_condition",
            "gauge",
            "Health conditions of each cluster from the last check: 1 True, 0 False, -1 Unknown.",
        );
        self.cluster_nodes.render(
            &mut out,
            "kok_cluster_nodes",
            "gauge",
            "Nodes of each cluster from the last health check, by state (ready, not_ready).",
        );
        header(
            &mut out,
            "kok_last_reconciled_commit_timestamp_seconds",
            "gauge",
            "Commit time of the last reconciled commit, in Unix seconds.",
        );
        let _ = writeln!(
            out,
            "kok_last_reconciled_commit_timestamp_seconds {}",
            self.last_reconciled_commit_time.load(Ordering::Relaxed)
        );
        out
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Series of one metric keyed by their rendered label set.
#[derive(Debug, Default)]
struct Family {
    series: Mutex<BTreeMap<String, f64>>,
}

impl Family {
    fn add(&self, labels: &[(&str, &str)], by: f64) {
        let key = render_labels(labels);
        let mut series = self
            .series
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *series.entry(key).or_default() += by;
    }

    fn set(&self, labels: &[(&str, &str)], value: f64) {
        let key = render_labels(labels);
        let mut series = self
            .series
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        series.insert(key, value);
    }

    fn get(&self, labels: &[(&str, &str)]) -> f64 {
        let key = render_labels(labels);
        let series = self
            .series
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        series.get(&key).copied().unwrap_or_default()
    }

    /// Keeps the series whose first label's value `keep` accepts (values without escapes: names).
    fn retain_first_label(&self, keep: &impl Fn(&str) -> bool) {
        let mut series = self
            .series
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        series.retain(|labels, _| {
            let first = labels.split_once(',').map_or(labels.as_str(), |(first, _)| first);
            let value = first.split_once('=').map_or("", |(_, v)| v.trim_matches('"'));
            keep(value)
        });
    }

    fn render(&self, out: &mut String, name: &str, kind: &str, help: &str) {
        header(out, name, kind, help);
        let series = self
            .series
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for (labels, value) in series.iter() {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    }
}

/// `a="x",b="y"` with Prometheus escaping of `\`, `"` and newlines.
fn render_labels(labels: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (name, value)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let escaped = value
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        let _ = write!(out, "{name}=\"{escaped}\"");
    }
    out
}

#[derive(Debug, Default)]
struct Histogram {
    inner: Mutex<HistogramData>,
}

#[derive(Debug, Default)]
struct HistogramData {
    buckets: [u64; RECONCILE_BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&self, value: f64) {
        let mut data = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for (bucket, bound) in data.buckets.iter_mut().zip(RECONCILE_BUCKETS) {
            if value <= bound {
                *bucket += 1;
            }
        }
        data.count += 1;
        data.sum += value;
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        header(out, name, "histogram", help);
        let data = self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        for (count, bound) in data.buckets.iter().zip(RECONCILE_BUCKETS) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", data.count);
        let _ = writeln!(out, "{name}_sum {}", data.sum);
        let _ = writeln!(out, "{name}_count {}", data.count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_health_is_rendered_by_cluster_condition_and_node_state() {
        let m = Metrics::new();
        m.set_cluster_condition("prod", "NodesReady", "False");
        m.set_cluster_condition("prod", "VersionMatches", "Unknown");
        m.set_cluster_nodes("prod", 4, 5);
        let text = m.render();
        assert!(
            text.contains("kok_cluster_condition{cluster=\"prod\",condition=\"NodesReady\"} 0\n"),
            "{text}"
        );
        assert!(text.contains("kok_cluster_condition{cluster=\"prod\",condition=\"VersionMatches\"} -1\n"));
        assert!(text.contains("kok_cluster_nodes{cluster=\"prod\",state=\"not_ready\"} 1\n"));
        assert!(text.contains("kok_cluster_nodes{cluster=\"prod\",state=\"ready\"} 4\n"));
    }

    #[test]
    fn the_health_series_of_a_cluster_that_is_gone_are_dropped() {
        let m = Metrics::new();
        for cluster in ["prod", "gone"] {
            m.set_cluster_condition(cluster, "Reachable", "True");
            m.set_cluster_nodes(cluster, 2, 2);
        }
        m.keep_clusters(|c| c == "prod");
        let text = m.render();
        assert!(text.contains("kok_cluster_condition{cluster=\"prod\",condition=\"Reachable\"} 1\n"));
        assert!(text.contains("kok_cluster_nodes{cluster=\"prod\",state=\"ready\"} 2\n"));
        assert!(!text.contains("gone"), "{text}");
    }

    #[test]
    fn counters_render_with_their_labels_in_text_format() {
        let m = Metrics::new();
        m.poll("unchanged");
        m.poll("unchanged");
        m.poll("error");
        m.status_delivery("github", "delivered");
        m.set_operations(Phase::Running, 2);
        m.objects_written(5);
        let text = m.render();
        assert!(text.contains("# TYPE kok_polls_total counter"), "{text}");
        assert!(
            text.contains("kok_polls_total{result=\"unchanged\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("kok_polls_total{result=\"error\"} 1\n"), "{text}");
        assert!(text.contains("kok_status_deliveries_total{sink=\"github\",result=\"delivered\"} 1\n"));
        assert!(text.contains("kok_operations{phase=\"Running\"} 2\n"));
        assert!(text.contains("kok_objects_written_total 5\n"));
        assert_eq!(m.status_deliveries("github", "delivered"), 1);
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let m = Metrics::new();
        m.observe_reconcile(Duration::from_millis(3));
        m.observe_reconcile(Duration::from_millis(300));
        let text = m.render();
        assert!(
            text.contains("kok_reconcile_duration_seconds_bucket{le=\"0.001\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("kok_reconcile_duration_seconds_bucket{le=\"0.005\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("kok_reconcile_duration_seconds_bucket{le=\"0.5\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("kok_reconcile_duration_seconds_bucket{le=\"+Inf\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("kok_reconcile_duration_seconds_count 2\n"),
            "{text}"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(render_labels(&[("a", "x\"y\\z")]), "a=\"x\\\"y\\\\z\"");
    }
}
