//! The web view's fleet page at 1,000 and 10,000 clusters: its size and how long kok takes to serve its
//! first page over loopback (the median and the slowest of [`REQUESTS`] requests after one to warm up),
//! from a fixed fleet in every state ([`kok::web::view::Snapshot::sample_fleet`]). The targets, at both
//! sizes: at most 500 KB, served in at most 200 ms (the page shows 500 clusters, trouble first, and links
//! to the others; its counts are of the whole fleet). In-process and cheap, so it runs whatever
//! `KOK_FLEET_MODES` says.
//!
//! In local mode the real `kok run --local` serves the view too ([`against_kok`]): once the fleet has
//! reconciled and kok idled, its fleet page is measured the same way, and then [`PAGES`] open pages
//! (connections to `/events`, as each page's script keeps one) are held through an idle window while
//! kok's CPU is measured. The target: 50 open pages add under 2 % of a core at rest.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use kok::api::{Cluster, ClusterOperation};
use kok::web::logs::LogSource;
use kok::web::view::{Snapshot, View};
use kok::web::Web;
use serde::Serialize;

/// Clusters in the measured fleets.
pub const CLUSTERS: [usize; 2] = [1_000, 10_000];
/// Requests measured.
const REQUESTS: usize = 20;

/// What the fleet page measured.
#[derive(Debug, Serialize)]
pub struct WebRun {
    /// Clusters on the page.
    pub clusters: usize,
    /// Bytes of the page.
    pub bytes: usize,
    /// Median time from request to the whole page, in milliseconds.
    pub median_ms: f64,
    /// The slowest request, in milliseconds.
    pub slowest_ms: f64,
}

struct NoLogs;

impl LogSource for NoLogs {
    fn read(&self, _op: &ClusterOperation) -> BoxFuture<'static, Option<String>> {
        Box::pin(async { None })
    }
}

/// The size of the page at `url` and the median and slowest of [`REQUESTS`] requests for it, after one
/// to warm up, in milliseconds.
async fn measure_page(http: &reqwest::Client, url: &str) -> anyhow::Result<(usize, f64, f64)> {
    let mut times = Vec::new();
    let mut bytes = 0;
    for i in 0..=REQUESTS {
        let started = Instant::now();
        let body = http.get(url).send().await?.error_for_status()?.bytes().await?;
        let took = started.elapsed();
        bytes = body.len();
        // The first request warms the connection and the templates up.
        if i > 0 {
            times.push(took);
        }
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    Ok((bytes, ms(times[times.len() / 2]), ms(times[times.len() - 1])))
}

/// A fixed fleet with its operations indexed by cluster, as the service's view keeps them
/// ([`kok::web::view::Snapshot`] looks through every operation for each cluster: at 10,000 clusters that
/// is what a request would measure).
struct Indexed {
    clusters: Vec<Cluster>,
    by_cluster: HashMap<String, Vec<ClusterOperation>>,
}

impl Indexed {
    fn of(fleet: Snapshot) -> Indexed {
        let mut by_cluster: HashMap<String, Vec<ClusterOperation>> = HashMap::new();
        for op in fleet.operations {
            by_cluster.entry(op.spec.cluster.clone()).or_default().push(op);
        }
        Indexed {
            clusters: fleet.clusters,
            by_cluster,
        }
    }
}

impl View for Indexed {
    fn clusters(&self) -> Vec<Cluster> {
        self.clusters.clone()
    }

    fn operations_of(&self, cluster: &str) -> Vec<ClusterOperation> {
        self.by_cluster.get(cluster).cloned().unwrap_or_default()
    }

    fn operation(&self, name: &str) -> Option<ClusterOperation> {
        self.by_cluster
            .values()
            .flatten()
            .find(|op| op.metadata.name.as_deref() == Some(name))
            .cloned()
    }
}

/// Serves the fleet page of `clusters` clusters on loopback and measures it.
pub async fn run(http: &reqwest::Client, clusters: usize) -> anyhow::Result<WebRun> {
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let view = Arc::new(Indexed::of(Snapshot::sample_fleet(clusters)));
    let router = kok::web::router(Web::new(view, Arc::new(NoLogs), stopping.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/", listener.local_addr()?);
    let mut stopped = stopping;
    let server = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                let _ = stopped.wait_for(|s| *s).await;
            })
            .await
    });
    let measured = measure_page(http, &url).await;
    let _ = stop.send(true);
    let _ = server.await;
    let (bytes, median_ms, slowest_ms) = measured?;
    Ok(WebRun {
        clusters,
        bytes,
        median_ms,
        slowest_ms,
    })
}

/// Open pages held while kok idles.
pub const PAGES: usize = 50;

/// What the web view of the real kok process measured (local mode).
#[derive(Debug, Default, Serialize)]
pub struct KokWebRun {
    /// The address kok printed (`web view: http://127.0.0.1:PORT/`).
    pub url: String,
    /// Bytes of its fleet page.
    pub bytes: usize,
    /// Median time from request to the whole page, in milliseconds.
    pub median_ms: f64,
    /// The slowest request, in milliseconds.
    pub slowest_ms: f64,
    /// `/events` connections that were open through the whole window.
    pub pages_open: usize,
    /// kok's CPU in the idle window with them, in percent of a core.
    pub cpu_with_pages_percent: Option<f64>,
    /// kok's CPU in the idle window before, without them.
    pub cpu_without_pages_percent: Option<f64>,
}

/// The address kok printed for its web view in `log` (its stdout), if it did.
fn printed_url(log: &str) -> Option<String> {
    log.lines()
        .rev()
        .find_map(|l| l.split_once("web view: ").map(|(_, url)| url.trim().to_string()))
}

/// Measures the web view of the kok process `pid` whose output so far is `log`: its fleet page, then
/// [`PAGES`] open pages held for `idle` while its CPU is measured (`cpu_seconds` reads a process's CPU
/// time); `idle_cpu` is the idle figure measured before without them.
pub async fn against_kok(
    http: &reqwest::Client,
    log: &str,
    pid: u32,
    idle: Duration,
    idle_cpu: Option<f64>,
    cpu_seconds: impl Fn(u32) -> Option<f64>,
) -> anyhow::Result<KokWebRun> {
    let url = printed_url(log).ok_or_else(|| anyhow::anyhow!("kok printed no `web view:` address"))?;
    let (bytes, median_ms, slowest_ms) = measure_page(http, &url).await?;
    // Each page's script holds one `/events` stream; these drain theirs until told to stop. Their
    // own client: no request timeout applies to a stream.
    let streams = reqwest::Client::new();
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let mut pages = Vec::new();
    for _ in 0..PAGES {
        let mut response = streams
            .get(format!("{url}events"))
            .send()
            .await?
            .error_for_status()?;
        let mut stopping = stopping.clone();
        pages.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    chunk = response.chunk() => match chunk {
                        Ok(Some(_)) => {}
                        // The stream ended or broke before the window did.
                        _ => return false,
                    },
                    _ = stopping.wait_for(|s| *s) => return true,
                }
            }
        }));
    }
    let before = cpu_seconds(pid);
    tokio::time::sleep(idle).await;
    let after = cpu_seconds(pid);
    let _ = stop.send(true);
    let mut pages_open = 0;
    for page in pages {
        pages_open += usize::from(page.await.unwrap_or(false));
    }
    Ok(KokWebRun {
        url,
        bytes,
        median_ms,
        slowest_ms,
        pages_open,
        cpu_with_pages_percent: before
            .zip(after)
            .map(|(a, b)| ((b - a) / idle.as_secs_f64().max(1e-9) * 1000.0).round() / 10.0),
        cpu_without_pages_percent: idle_cpu,
    })
}

/// The real kok's figures beside the targets.
pub fn report_kok(fleet: &str, run: &KokWebRun) -> String {
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    let added = run
        .cpu_with_pages_percent
        .zip(run.cpu_without_pages_percent)
        .map(|(with, without)| with - without);
    format!(
        "kok run --local at {fleet}: fleet page {} KB (target <= 500 KB: {}), served in {:.1} ms median, \
         {:.1} ms slowest (target <= 200 ms: {}); {} of {PAGES} open pages held, idle CPU {} with them, \
         {} without: {} added (target < 2 % of a core: {})",
        run.bytes / 1000,
        verdict(run.bytes <= 500_000),
        run.median_ms,
        run.slowest_ms,
        verdict(run.median_ms <= 200.0),
        run.pages_open,
        percent(run.cpu_with_pages_percent),
        percent(run.cpu_without_pages_percent),
        percent(added),
        added.map_or("unknown", |a| verdict(a < 2.0 && run.pages_open == PAGES)),
    )
}

fn percent(p: Option<f64>) -> String {
    p.map_or("unknown".to_string(), |p| format!("{p:.1} %"))
}

/// The figures beside the targets.
pub fn report(run: &WebRun) -> String {
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    format!(
        "fleet page at {} clusters: {} KB (target <= 500 KB: {}), served in {:.1} ms median, {:.1} ms \
         slowest (target <= 200 ms: {})",
        run.clusters,
        run.bytes / 1000,
        verdict(run.bytes <= 500_000),
        run.median_ms,
        run.slowest_ms,
        verdict(run.median_ms <= 200.0),
    )
}
