//! The health round at fleet size (mode `health`): every cluster of the fleet gets a kubeconfig Secret
//! in the meta-cluster pointing at one second testkit, which serves every cluster's five Nodes (named
//! `<cluster>-nodeN`, InternalIP the inventory's `ansible_host`, kubelet [`super::KUBE_VERSION`]) and a kube-system
//! Deployment and DaemonSet. A small router in front of it takes the cluster's name from the path of
//! its kubeconfig's `server` (`http://127.0.0.1:P/<cluster>`) and lists only that cluster's Nodes (a
//! label selector), so `InventoryMatches` holds.
//!
//! Two kok processes, each from a cold start on its own meta-cluster and its own freshly generated
//! remote, with `--health-interval` `KOK_FLEET_HEALTH_INTERVAL_SECS` (default 30): the fleet without
//! kubeconfigs (the RSS baseline), and the fleet with them (the first round writes every Cluster's
//! conditions, the second finds nothing changed); then, in the second process, 100 of the Secrets
//! changed to a closed port (a round that records them unreachable, then a steady one). A round's
//! length is kok's own `kok_health_round_duration_seconds` (from the round's start until its last
//! cluster is recorded).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::ByteString;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde::Serialize;
use serde_json::json;

use super::e2e::{Kok, KokOptions, Remote, NS};
use super::{cluster_name, fmt_opt, generate, mark, metric, metrics, peak_rss_mib, Config, POLL};
use kok::api::{kubeconfig_secret, Cluster, KUBECONFIG_KEY};
use kok::controller::health::OBSERVE_TIMEOUT;

/// Label on the second testkit's Nodes naming the cluster they belong to.
const CLUSTER_LABEL: &str = "bench.kok.dev/cluster";
/// Clusters whose kubeconfig is changed to a closed port.
const UNREACHABLE: usize = 100;
/// Hosts per cluster (as [`super::generate`] writes them).
const HOSTS: usize = 5;
/// Requests the bench sends at once while it fills a server.
const FILL_CONCURRENCY: usize = 32;

/// What the health round measured.
#[derive(Debug, Default, Serialize)]
pub struct HealthRun {
    pub clusters: usize,
    pub interval_secs: u64,
    /// Peak RSS of kok on the fleet without kubeconfigs, once it had reconciled and run a round.
    pub baseline_rss_mib: Option<f64>,
    /// Peak RSS of kok on the fleet with kubeconfigs, after two rounds.
    pub health_rss_mib: Option<f64>,
    /// The first round with kubeconfigs (writes every Cluster's conditions and Events), in seconds.
    pub first_round_secs: Option<f64>,
    /// The next round (nothing changed).
    pub round_secs: Option<f64>,
    /// Clusters whose conditions said Reachable, NodesReady, InventoryMatches and VersionMatches
    /// after the steady round.
    pub healthy_clusters: usize,
    /// Requests the second testkit answered per round (by the router's count).
    pub workload_requests_per_round: Option<usize>,
    /// Clusters whose kubeconfig was changed to a closed port ([`UNREACHABLE`] at most).
    pub unreachable: usize,
    /// The round that found them newly unreachable.
    pub unreachable_first_round_secs: Option<f64>,
    /// The next round with them still unreachable.
    pub unreachable_round_secs: Option<f64>,
    /// Clusters whose Reachable condition was False after it.
    pub unreachable_clusters: usize,
    /// The per-cluster timeout of a check (kok's `OBSERVE_TIMEOUT`, the health timeout).
    pub check_timeout_secs: u64,
    pub problems: Vec<String>,
}

/// The router in front of the second testkit: `/<cluster>/<path>` is `<path>` on the testkit, with
/// a Node list narrowed to the cluster's Nodes. It counts what it forwards.
#[derive(Clone)]
struct Router {
    upstream: String,
    http: reqwest::Client,
    forwarded: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

async fn route(State(router): State<Router>, req: Request) -> Response {
    router
        .forwarded
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = req.uri().path().to_string();
    let Some((cluster, rest)) = path.trim_start_matches('/').split_once('/') else {
        return (axum::http::StatusCode::NOT_FOUND, "no cluster in the path").into_response();
    };
    let mut url = format!("{}/{rest}", router.upstream);
    let mut query: Vec<String> = req.uri().query().map(|q| vec![q.to_string()]).unwrap_or_default();
    if rest == "api/v1/nodes" {
        query.push(format!("labelSelector={CLUSTER_LABEL}%3D{cluster}"));
    }
    if !query.is_empty() {
        url = format!("{url}?{}", query.join("&"));
    }
    let mut forward = router.http.request(req.method().clone(), url);
    if let Some(accept) = req.headers().get(axum::http::header::ACCEPT) {
        forward = forward.header(axum::http::header::ACCEPT, accept.clone());
    }
    match forward.send().await {
        Ok(answer) => {
            let status = answer.status();
            let kind = answer.headers().get(axum::http::header::CONTENT_TYPE).cloned();
            let body = answer.bytes().await.unwrap_or_default();
            let mut response = Response::new(Body::from(body));
            *response.status_mut() = status;
            if let Some(kind) = kind {
                response
                    .headers_mut()
                    .insert(axum::http::header::CONTENT_TYPE, kind);
            }
            response
        }
        Err(e) => (axum::http::StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}

/// Starts the router on a free port; it stops with the runtime.
async fn start_router(upstream: String) -> anyhow::Result<(u16, Router)> {
    let router = Router {
        upstream,
        http: reqwest::Client::new(),
        forwarded: Default::default(),
    };
    let app = axum::Router::new().fallback(route).with_state(router.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((port, router))
}

/// Writes every cluster's Nodes and the shared kube-system workloads into the second testkit.
async fn fill_workload(api: &testkit::ApiServer, clusters: usize) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(api.client());
    futures::stream::iter((0..clusters).flat_map(|i| (1..=HOSTS).map(move |h| (i, h))))
        .map(|(i, h)| {
            let nodes = nodes.clone();
            async move {
                let cluster = cluster_name(i);
                let name = format!("{cluster}-node{h}");
                let node: Node = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": {CLUSTER_LABEL: cluster}},
                }))?;
                nodes.create(&PostParams::default(), &node).await?;
                let status = json!({"status": {
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                    "addresses": [{"type": "InternalIP", "address": format!("10.{}.{}.{h}", i / 256, i % 256)}],
                    "nodeInfo": {"kubeletVersion": super::KUBE_VERSION, "kubeProxyVersion": "", "machineID": "",
                        "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": "",
                        "containerRuntimeVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
                }});
                nodes
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(FILL_CONCURRENCY)
        .try_collect::<()>()
        .await?;
    let labels = json!({"app": "bench"});
    let template =
        json!({"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "x"}]}});
    let deployments: Api<Deployment> = Api::namespaced(api.client(), "kube-system");
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "coredns"},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": template},
    }))?;
    deployments.create(&PostParams::default(), &deployment).await?;
    deployments
        .patch_status(
            "coredns",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"replicas": 2, "availableReplicas": 2, "readyReplicas": 2}})),
        )
        .await?;
    let daemon_sets: Api<DaemonSet> = Api::namespaced(api.client(), "kube-system");
    let daemon_set: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "kube-proxy"},
        "spec": {"selector": {"matchLabels": labels}, "template": template},
    }))?;
    daemon_sets.create(&PostParams::default(), &daemon_set).await?;
    let status = json!({"status": {"desiredNumberScheduled": HOSTS, "numberAvailable": HOSTS,
        "currentNumberScheduled": HOSTS, "numberMisscheduled": 0, "numberReady": HOSTS}});
    daemon_sets
        .patch_status("kube-proxy", &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// Sets the kubeconfig Secret of clusters `which` to point at `server(cluster)`.
async fn write_kubeconfigs(
    meta: &testkit::ApiServer,
    which: std::ops::Range<usize>,
    server: impl Fn(&str) -> String,
) -> anyhow::Result<()> {
    let secrets: Api<Secret> = Api::namespaced(meta.client(), NS);
    let apply = PatchParams::apply("kok-fleet-bench").force();
    futures::stream::iter(which)
        .map(|i| {
            let cluster = cluster_name(i);
            let text = testkit::kubeconfig_yaml(&server(&cluster));
            let (secrets, apply) = (secrets.clone(), apply.clone());
            async move {
                let name = kubeconfig_secret(&cluster);
                let secret = Secret {
                    metadata: kube::api::ObjectMeta {
                        name: Some(name.clone()),
                        ..Default::default()
                    },
                    data: Some(BTreeMap::from([(
                        KUBECONFIG_KEY.to_string(),
                        ByteString(text.into_bytes()),
                    )])),
                    ..Default::default()
                };
                let mut secret = serde_json::to_value(&secret)?;
                secret["apiVersion"] = json!("v1");
                secret["kind"] = json!("Secret");
                secrets.patch(&name, &apply, &Patch::Apply(&secret)).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(FILL_CONCURRENCY)
        .try_collect::<()>()
        .await
}

/// Conditions of every Cluster in `meta`, read without a request: how many have all four health
/// conditions True, and how many have Reachable False.
fn census(meta: &testkit::ApiServer, clusters: usize) -> (usize, usize) {
    let resource = kube::core::ApiResource::erase::<Cluster>(&());
    let (mut healthy, mut unreachable) = (0, 0);
    for i in 0..clusters {
        let Some(obj) = meta.object(&resource, NS, &cluster_name(i)) else {
            continue;
        };
        let status = |t: &str| {
            obj["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == t))
                .and_then(|c| c["status"].as_str())
                .map(str::to_string)
        };
        let all = ["Reachable", "NodesReady", "InventoryMatches", "VersionMatches"];
        if all.iter().all(|t| status(t).as_deref() == Some("True")) {
            healthy += 1;
        }
        if status("Reachable").as_deref() == Some("False") {
            unreachable += 1;
        }
    }
    (healthy, unreachable)
}

/// The health round's kok: a cold start on `meta` with a short `--health-interval`.
fn start_kok(cfg: &Config, meta: &testkit::ApiServer, remote: &Remote, name: &str) -> Kok {
    Kok::start(&KokOptions {
        kubeconfig: meta.kubeconfig_path().to_path_buf(),
        repo: remote.bare(),
        cache: remote.scratch(&format!("cache-{name}")),
        log: remote.scratch("logs").join(format!("kok-{name}.log")),
        args: vec![
            "--health-interval".into(),
            format!("{}s", cfg.health_interval.as_secs()),
        ],
        env: vec![("KOK_LOG".into(), "info".into())],
    })
}

/// Waits for kok's next health round to finish; returns its duration in seconds.
async fn next_round(http: &reqwest::Client, kok: &mut Kok, limit: Duration) -> Option<f64> {
    let rounds = |text: &str| {
        metric(text, "kok_health_round_duration_seconds_count")
            .zip(metric(text, "kok_health_round_duration_seconds_sum"))
    };
    let mut before = None;
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline && kok.try_wait().is_none() {
        if let Some((count, sum)) = rounds(&metrics(http, kok).await.unwrap_or_default()) {
            match before {
                None => before = Some((count, sum)),
                Some((c0, s0)) if count > c0 => return Some(((sum - s0) * 1000.0).round() / 1000.0),
                Some(_) => {}
            }
        }
        tokio::time::sleep(POLL).await;
    }
    None
}

/// A free port nothing listens on.
fn closed_port() -> u16 {
    super::e2e::free_port()
}

pub async fn run(
    cfg: &Config,
    http: &reqwest::Client,
    clusters: usize,
    ops: usize,
) -> anyhow::Result<HealthRun> {
    let mut run = HealthRun {
        clusters,
        interval_secs: cfg.health_interval.as_secs(),
        check_timeout_secs: OBSERVE_TIMEOUT.as_secs(),
        ..HealthRun::default()
    };
    // Each kok gets a remote of its own, fresh from the generator: the baseline's kok pushes its
    // statuses as notes, which the next kok would otherwise fetch, history and all, at its start.
    let fresh_remote = || {
        let remote = Remote::new();
        generate(&remote, clusters, ops);
        remote
    };
    let remote = fresh_remote();
    let workload = testkit::ApiServer::start().await?;
    let filled = Instant::now();
    fill_workload(&workload, clusters).await?;
    let (port, router) = start_router(workload.url().trim_end_matches('/').to_string()).await?;
    eprintln!(
        "[health {clusters}] {} Nodes written in {:.1} s; router on port {port}",
        clusters * HOSTS,
        filled.elapsed().as_secs_f64()
    );
    // Wait for two rounds: the first may start before the commit is reconciled.
    let limit = cfg.health_interval * 2 + cfg.timeout;
    let meta_cluster = || async {
        let api = testkit::ApiServer::start_with(testkit::Options {
            event_window: 200_000,
            ..testkit::Options::default()
        })
        .await?;
        api.install_crds(&kok::api::crds()).await?;
        anyhow::Ok(api)
    };

    // The baseline: no kubeconfigs.
    let meta = meta_cluster().await?;
    let mut kok = start_kok(cfg, &meta, &remote, "baseline");
    for _ in 0..2 {
        if next_round(http, &mut kok, limit).await.is_none() {
            run.problems.push("baseline: no health round".into());
        }
    }
    run.baseline_rss_mib = peak_rss_mib(kok.pid());
    kok.kill();
    drop(meta);
    eprintln!(
        "[health {clusters}] baseline peak RSS {:?} MiB",
        run.baseline_rss_mib
    );

    // Every cluster with a kubeconfig.
    let meta = meta_cluster().await?;
    write_kubeconfigs(&meta, 0..clusters, |c| format!("http://127.0.0.1:{port}/{c}")).await?;
    drop(remote);
    let remote = fresh_remote();
    let mut kok = start_kok(cfg, &meta, &remote, "health");
    // The first round that checks every cluster: the commit is reconciled before it starts.
    let started = Instant::now();
    let mut first = None;
    while first.is_none() && started.elapsed() < limit {
        let Some(took) = next_round(http, &mut kok, limit).await else {
            break;
        };
        if census(&meta, clusters).0 > 0 {
            first = Some(took);
        }
    }
    run.first_round_secs = first;
    let forwarded = || router.forwarded.load(std::sync::atomic::Ordering::Relaxed);
    let before = forwarded();
    run.round_secs = next_round(http, &mut kok, limit).await;
    run.workload_requests_per_round = Some(forwarded() - before);
    run.healthy_clusters = census(&meta, clusters).0;
    run.health_rss_mib = peak_rss_mib(kok.pid());
    eprintln!(
        "[health {clusters}] rounds {:?} s then {:?} s, {} healthy, {:?} workload requests, peak RSS {:?} MiB",
        run.first_round_secs,
        run.round_secs,
        run.healthy_clusters,
        run.workload_requests_per_round,
        run.health_rss_mib
    );

    // Some clusters unreachable.
    let unreachable = UNREACHABLE.min(clusters);
    run.unreachable = unreachable;
    let closed = closed_port();
    write_kubeconfigs(&meta, 0..unreachable, |_| format!("http://127.0.0.1:{closed}")).await?;
    run.unreachable_first_round_secs = next_round(http, &mut kok, limit).await;
    run.unreachable_round_secs = next_round(http, &mut kok, limit).await;
    run.unreachable_clusters = census(&meta, clusters).1;
    eprintln!(
        "[health {clusters}] with {unreachable} unreachable: rounds {:?} s then {:?} s, {} Reachable=False",
        run.unreachable_first_round_secs, run.unreachable_round_secs, run.unreachable_clusters
    );
    for (what, v) in [
        ("first round", run.first_round_secs),
        ("steady round", run.round_secs),
        ("round with unreachable clusters", run.unreachable_round_secs),
    ] {
        if v.is_none() {
            run.problems
                .push(format!("{what}: none finished within {} s", limit.as_secs()));
        }
    }
    kok.kill();
    Ok(run)
}

/// The table and the targets beside the figures.
pub fn report(runs: &[HealthRun]) -> String {
    let mut out = String::from(
        "| clusters | first round | round | healthy | workload requests / round | peak RSS without → with kubeconfigs | round with some unreachable (first, then) |\n|---|---|---|---|---|---|---|\n",
    );
    for r in runs {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} → {} | {}: {}, {} ({} Reachable=False) |\n",
            r.clusters,
            fmt_opt(r.first_round_secs, " s"),
            fmt_opt(r.round_secs, " s"),
            r.healthy_clusters,
            r.workload_requests_per_round
                .map(|n| n.to_string())
                .unwrap_or_else(|| "—".into()),
            fmt_opt(r.baseline_rss_mib, " MiB"),
            fmt_opt(r.health_rss_mib, " MiB"),
            r.unreachable,
            fmt_opt(r.unreachable_first_round_secs, " s"),
            fmt_opt(r.unreachable_round_secs, " s"),
            r.unreachable_clusters,
        ));
    }
    out.push_str("\nHealth targets:\n");
    for r in runs {
        let round = r.round_secs;
        out.push_str(&format!(
            "{:>6} one round ≤ 10 s: {} ({} the first) {}\n",
            r.clusters,
            fmt_opt(round, " s"),
            fmt_opt(r.first_round_secs, " s"),
            mark(round.map(|s| s <= 10.0))
        ));
        let grew = r.health_rss_mib.zip(r.baseline_rss_mib).map(|(a, b)| a - b);
        out.push_str(&format!(
            "{:>6} peak RSS grows ≤ 16 MiB with kubeconfigs: {} {}\n",
            r.clusters,
            fmt_opt(grew, " MiB"),
            mark(grew.map(|g| g <= 16.0))
        ));
        let longer = r.unreachable_round_secs.zip(round).map(|(a, b)| a - b);
        let allowed = r.check_timeout_secs as f64 + 1.0;
        out.push_str(&format!(
            "{:>6} {} unreachable make the round ≤ timeout + 1 s = {allowed:.0} s longer: {} ({:.2}× the allowance) {}\n",
            r.clusters,
            r.unreachable,
            fmt_opt(longer, " s"),
            longer.map(|l| l / allowed).unwrap_or(f64::NAN),
            mark(longer.map(|l| l <= allowed))
        ));
        for p in &r.problems {
            out.push_str(&format!("{:>6} {p}\n", r.clusters));
        }
    }
    out
}
