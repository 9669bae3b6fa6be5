//! `/metrics` at 1,000 clusters with every gauge set, in process: each cluster with its six health
//! conditions, its nodes and certificate expiry, operations in three phases (two queued, seven
//! succeeded and one failed kept), a waiting operation and a failed run holding it, ten rollouts of
//! four waves, and every counter and histogram observed. It is the largest a 1,000-cluster kok renders
//! but for a moment (a held cluster runs nothing, and an operation is Pending only until the
//! controller's next look; the fleet runs scrape the real kok too, whose clusters have no health
//! checks and hold nothing). Targets: ≤ 1 MB and ≤ 100 ms.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kok::api::Phase;
use kok::metrics::{ClusterGauges, Fleet, FleetView, Held, Metrics, RolloutGauges, Waiting};
use serde::Serialize;

/// Clusters of the fleet.
const CLUSTERS: usize = 1000;
/// Renders timed.
const RENDERS: usize = 20;

/// What was measured.
#[derive(Debug, Serialize)]
pub struct EveryGauge {
    pub clusters: usize,
    pub bytes: usize,
    /// The text gzip-compressed as kok sends it to a scraper that asks (Prometheus does).
    pub gzip_bytes: usize,
    pub series: usize,
    pub render_ms_median: f64,
    pub render_ms_max: f64,
}

struct Full(Fleet);

impl FleetView for Full {
    fn fleet(&self) -> Fleet {
        self.0.clone()
    }
}

fn fleet() -> Fleet {
    let conditions = [
        "Reachable",
        "NodesReady",
        "InventoryMatches",
        "VersionMatches",
        "Healthy",
        "CertificatesValid",
    ];
    let clusters = (0..CLUSTERS)
        .map(|i| ClusterGauges {
            name: format!("cluster-{i:05}"),
            conditions: conditions
                .iter()
                .map(|c| {
                    (
                        c.to_string(),
                        if i % 7 == 0 { "False" } else { "True" }.to_string(),
                    )
                })
                .collect(),
            nodes: Some((5, 5)),
            certificate_expiry: Some(1_800_000_000 + i as i64),
            phases: vec![(Phase::Queued, 2), (Phase::Succeeded, 7), (Phase::Failed, 1)],
            oldest_waiting: Some(Waiting {
                operation: "add-node7".into(),
                reason: "held",
                seconds: 3600.0 + i as f64,
            }),
            held_by: vec![Held {
                operation: "upgrade-1-31".into(),
                commit: "0123456789ab".into(),
            }],
        })
        .collect();
    let rollouts = (0..10)
        .map(|r| RolloutGauges {
            name: format!("rollout-{r}"),
            phase: "Progressing".into(),
            waves: ["canary", "first", "second", "rest"]
                .iter()
                .map(|w| (w.to_string(), 100, 10, 140, 0))
                .collect(),
        })
        .collect();
    Fleet { clusters, rollouts }
}

/// Renders the fleet's `/metrics` [`RENDERS`] times.
pub fn run() -> EveryGauge {
    let m = Metrics::new();
    m.watch_fleet(Arc::new(Full(fleet())));
    m.set_leader(true);
    for result in ["unchanged", "changed", "error"] {
        m.poll(result);
    }
    for action in [
        "cluster.yml",
        "scale.yml",
        "upgrade-cluster.yml",
        "remove-node.yml",
        "reset.yml",
    ] {
        for result in ["succeeded", "failed"] {
            m.observe_job(action, result, Duration::from_secs(600));
        }
    }
    for sink in ["git-notes", "github", "notifications"] {
        for result in ["delivered", "retry", "failed", "paused"] {
            m.status_delivery(sink, result);
        }
        m.set_status_waiting(sink, 3);
    }
    for receiver in ["oncall", "chat", "teams"] {
        m.notification(receiver, "delivered");
        m.set_notifications_waiting(receiver, 0);
    }
    m.observe_reconcile(Duration::from_millis(30));
    m.observe_health_round(Duration::from_secs(3));
    let mut times = Vec::new();
    let mut text = String::new();
    for _ in 0..RENDERS {
        let started = Instant::now();
        text = m.render();
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    EveryGauge {
        clusters: CLUSTERS,
        bytes: text.len(),
        gzip_bytes: kok::server::gzip(text.as_bytes()).map_or(0, |g| g.len()),
        series: text.lines().filter(|l| !l.starts_with('#')).count(),
        render_ms_median: (times[times.len() / 2] * 100.0).round() / 100.0,
        render_ms_max: (times[times.len() - 1] * 100.0).round() / 100.0,
    }
}

/// One line with the targets.
pub fn report(r: &EveryGauge) -> String {
    let size_ok = if r.bytes <= 1_000_000 { "met" } else { "NOT met" };
    let time_ok = if r.render_ms_max <= 100.0 {
        "met"
    } else {
        "NOT met"
    };
    format!(
        "{} clusters with every gauge, in process: {} series, {:.0} KB of text (≤ 1 MB: {size_ok}; {:.0} KB \
         gzip as Prometheus fetches it), render median {} ms, max {} ms of {RENDERS} (≤ 100 ms: {time_ok})",
        r.clusters,
        r.series,
        r.bytes as f64 / 1000.0,
        r.gzip_bytes as f64 / 1000.0,
        r.render_ms_median,
        r.render_ms_max
    )
}
