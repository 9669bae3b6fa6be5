//! Apply benchmark on testkit with 1,000 generated clusters: cold materialization, a one-cluster change
//! against a whole-tree re-apply, a no-op re-poll, and ClusterOperation-created → Job-created latency.
//! Prints figures; asserts nothing about time. Run with `cargo bench --bench apply`.

use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};

use kok::api::{ClusterOperation, FIELD_MANAGER};
use kok::controller::job::job_name;
use kok::controller::{run, ControllerConfig};
use kok::layout::{ClusterDir, Inventory, Operation, Settings};
use kok::materialize::apply::{apply_cluster, ApplyStats};
use kok::materialize::{render_cluster, DesiredCluster, RenderContext};

const NS: &str = "kok-system";
/// Number of generated clusters (`KOK_BENCH_CLUSTERS`, default 1,000).
fn clusters() -> usize {
    std::env::var("KOK_BENCH_CLUSTERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

fn operation(id: &str, index: usize) -> Operation {
    Operation::playbook(id, "cluster.yml", index)
}

fn cluster(i: usize, extra_host: bool) -> ClusterDir {
    let name = format!("c{i:04}");
    let mut hosts = format!("all:\n  hosts:\n    {name}-node1: {{}}\n    {name}-node2: {{}}\n");
    let mut operations = vec![operation("install", 0)];
    if extra_host {
        hosts.push_str(&format!("    {name}-node7: {{}}\n"));
        operations.push(operation("add-node7", 1));
    }
    ClusterDir {
        path: format!("clusters/{name}"),
        name,
        inventory_dir: kok::layout::InventoryDir {
            inventory_file: "hosts.yml".into(),
            hosts_yml: hosts,
            vars_yml: Some("kube_version: v1.33.0\ncontainer_manager: containerd\n".into()),
            vars_files: vec![],
        },
        inventory: Inventory::default(),
        operations,
        settings: Settings::default(),
        kubespray: None,
        repository_files: Default::default(),
    }
}

fn render(dirs: &[ClusterDir], commit: u32) -> Vec<DesiredCluster> {
    let mut ctx = RenderContext::new(NS, "main", format!("{commit:040x}"));
    ctx.queue_base = format!("{commit:08}");
    dirs.iter().map(|d| render_cluster(d, &ctx)).collect()
}

async fn apply_all(client: &Client, desired: &[DesiredCluster]) -> anyhow::Result<ApplyStats> {
    let mut total = ApplyStats::default();
    for d in desired {
        total += apply_cluster(client, NS, d).await?;
    }
    Ok(total)
}

/// What a whole-tree applier does: every object of every cluster server-side applied, unconditionally.
async fn whole_tree_apply(client: &Client, desired: &[DesiredCluster]) -> anyhow::Result<usize> {
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), NS);
    let clusters: Api<kok::api::Cluster> = Api::namespaced(client.clone(), NS);
    let ops: Api<ClusterOperation> = Api::namespaced(client.clone(), NS);
    let mut writes = 0;
    for d in desired {
        for cm in &d.config_maps {
            let mut obj = serde_json::to_value(cm)?;
            obj["apiVersion"] = "v1".into();
            obj["kind"] = "ConfigMap".into();
            cms.patch(&cm.name_any(), &pp, &Patch::Apply(&obj)).await?;
            writes += 1;
        }
        clusters.patch(&d.name, &pp, &Patch::Apply(&d.cluster)).await?;
        writes += 1;
        for op in &d.operations {
            ops.patch(&op.name_any(), &pp, &Patch::Apply(op)).await?;
            writes += 1;
        }
    }
    Ok(writes)
}

async fn wait_job(client: &Client, name: &str) -> anyhow::Result<()> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + Duration::from_secs(60);
    while jobs.get_opt(name).await?.is_none() {
        anyhow::ensure!(Instant::now() < deadline, "Job {name} did not appear within 60 s");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

/// Waits until the server has seen no request for 500 ms.
async fn quiesce(log: &testkit::RequestLog) {
    let mut last = log.total();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = log.total();
        if now == last {
            return;
        }
        last = now;
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::var_os("KOK_BENCH_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_env("KOK_BENCH_LOG"))
            .init();
    }
    let n = clusters();
    let server = testkit::ApiServer::start().await?;
    server.install_crds(&kok::api::crds()).await?;
    let client = server.client();
    let log = server.requests();
    let mut dirs: Vec<ClusterDir> = (0..n).map(|i| cluster(i, false)).collect();

    let t = Instant::now();
    let desired = render(&dirs, 1);
    log.reset();
    let cold = apply_all(&client, &desired).await?;
    println!(
        "cold materialization: {n} clusters in {:?}, {} writes (server counted {})",
        t.elapsed(),
        cold.writes,
        log.writes()
    );

    // One cluster changes: a host and an operation added.
    let changed = n / 2;
    dirs[changed] = cluster(changed, true);
    log.reset();
    let t = Instant::now();
    let one = render(&dirs[changed..=changed], 2);
    let stats = apply_cluster(&client, NS, &one[0]).await?;
    let incremental = t.elapsed();
    println!(
        "one-cluster change: {incremental:?}, {} writes (server counted {})",
        stats.writes,
        log.writes()
    );

    log.reset();
    let t = Instant::now();
    let again = apply_cluster(&client, NS, &one[0]).await?;
    println!(
        "no-op re-poll of the changed cluster: {:?}, {} writes (server counted {})",
        t.elapsed(),
        again.writes,
        log.writes()
    );

    // A full resync of the unchanged tree through kok's applier: reads only, no writes.
    log.reset();
    let t = Instant::now();
    let mut current = desired.clone();
    current[changed] = one[0].clone();
    let resync = apply_all(&client, &current).await?;
    println!(
        "full resync of {n} unchanged clusters: {:?}, {} writes (server counted {})",
        t.elapsed(),
        resync.writes,
        log.writes()
    );

    // The same change as a whole-tree applier handles it (on a copy of the change, so it has work to do).
    dirs[changed + 1] = cluster(changed + 1, true);
    log.reset();
    let t = Instant::now();
    let all = render(&dirs, 3);
    let writes = whole_tree_apply(&client, &all).await?;
    let whole = t.elapsed();
    println!(
        "whole-tree re-render and re-apply: {whole:?}, {writes} writes (server counted {}); ratio {:.1}x",
        log.writes(),
        whole.as_secs_f64() / incremental.as_secs_f64().max(1e-9)
    );

    // Latency: the controller is running and idle on a cluster; a new operation appears.
    let mut cfg = ControllerConfig::new(NS);
    cfg.max_concurrent_jobs = 4 * n;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let feeds = kok::controller::live::caches(NS);
    let ctl = tokio::spawn(run(client.clone(), cfg, feeds, async move {
        let _ = stop_rx.await;
    }));
    let first = desired[7].operations[0].name_any();
    let t = Instant::now();
    wait_job(&client, &job_name(&first)).await?;
    println!(
        "controller start with {n} pending operations → first Jobs: {:?}",
        t.elapsed()
    );
    let last = desired[n - 1].operations[0].name_any();
    wait_job(&client, &job_name(&last)).await?;
    println!("all {n} initial Jobs created after {:?}", t.elapsed());
    server.complete_job(NS, &job_name(&first)).await?;
    let t = Instant::now();
    log.reset();
    quiesce(&log).await;
    if std::env::var_os("KOK_BENCH_LOG").is_some() {
        println!("requests while settling: {:?}", log.snapshot());
    }
    println!(
        "controller settled (no request for 500 ms) after {:?}",
        t.elapsed()
    );

    let target = 7;
    dirs[target] = cluster(target, true);
    let t = Instant::now();
    let d = render(&dirs[target..=target], 4);
    apply_cluster(&client, NS, &d[0]).await?;
    let created = t.elapsed();
    let new_op = d[0]
        .operations
        .iter()
        .find(|o| o.spec.id == "add-node7")
        .map(|o| o.name_any())
        .unwrap_or_default();
    wait_job(&client, &job_name(&new_op)).await?;
    println!(
        "commit seen → ClusterOperation created: {created:?}; → Job created: {:?}",
        t.elapsed()
    );
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), ctl).await;
    Ok(())
}
