//! The web view's fleet page at 1,000 clusters: its size and how long kok takes to serve it over
//! loopback (the median and the slowest of [`REQUESTS`] requests after one to warm up), from a fixed
//! fleet in every state ([`kok::web::view::Snapshot::sample_fleet`]). The targets: at most
//! 500 KB, served in at most 200 ms. In-process and cheap, so it runs whatever `KOK_FLEET_MODES` says.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use kok::api::ClusterOperation;
use kok::web::logs::LogSource;
use kok::web::view::Snapshot;
use kok::web::Web;
use serde::Serialize;

/// Clusters in the measured fleet.
pub const CLUSTERS: usize = 1000;
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

/// Serves the fleet page of [`CLUSTERS`] clusters on loopback and measures it.
pub async fn run(http: &reqwest::Client) -> anyhow::Result<WebRun> {
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let view = Arc::new(Snapshot::sample_fleet(CLUSTERS));
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
    let mut times = Vec::new();
    let mut bytes = 0;
    for i in 0..=REQUESTS {
        let started = Instant::now();
        let body = http.get(&url).send().await?.error_for_status()?.bytes().await?;
        let took = started.elapsed();
        bytes = body.len();
        // The first request warms the connection and the templates up.
        if i > 0 {
            times.push(took);
        }
    }
    let _ = stop.send(true);
    let _ = server.await;
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    Ok(WebRun {
        clusters: CLUSTERS,
        bytes,
        median_ms: ms(times[times.len() / 2]),
        slowest_ms: ms(times[times.len() - 1]),
    })
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
