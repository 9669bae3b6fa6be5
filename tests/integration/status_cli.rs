//! `kok status` run as the real binary against testkit as the meta-cluster: the table and the JSON, the
//! meta-cluster found through `--kubeconfig` and through local mode's `--state-dir`, the same table read
//! from the Clusters alone once their status says what their queues do, and `--watch` printing again when
//! a Cluster's queue changes.

use crate::common::kok as kok_process;
use crate::controller_support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

use controller_support::*;
use kok::api::{Cluster, ClusterOperation, LABEL_CLUSTER};
use kok::controller::cluster::cluster_status;
use kok::controller::health::carry;
use kok::materialize::apply::apply_cluster;
use kok_process::kok;

/// Longest wait for `--watch` to print something.
const PATIENCE: Duration = Duration::from_secs(30);

/// The meta-cluster with clusters `prod` (healthy, `install` done, `scale` waiting) and `dev` (never
/// checked, nothing run), and a state directory holding its kubeconfig as local mode writes it.
async fn fleet() -> (testkit::ApiServer, Client, tempfile::TempDir, String, String) {
    let meta = server().await;
    let client = meta.client();
    let prod = cluster_dir(
        "prod",
        "all:\n  hosts:\n    node1:\n",
        vec![
            entry("install", "cluster.yml", &[]),
            entry("scale", "scale.yml", &[]),
        ],
        None,
    );
    let prod = render(&prod, 1, &[]);
    apply_cluster(&client, NS, &prod).await.unwrap();
    let dev = cluster_dir("dev", "all:\n  hosts:\n    node1:\n", vec![], None);
    apply_cluster(&client, NS, &render(&dev, 1, &[])).await.unwrap();
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), NS);
    let health = json!({"status": {
        "conditions": [{"type": "Healthy", "status": "True", "reason": "AllChecksPassed", "message": "ok",
                        "lastTransitionTime": "2026-11-26T22:11:33Z"}],
        "kubernetesVersion": "v1.31.4",
        "nodes": {"ready": 3, "total": 3, "summary": "3/3"}}});
    clusters
        .patch_status("prod", &PatchParams::default(), &Patch::Merge(&health))
        .await
        .unwrap();
    let install = op_name(&prod, "install");
    let scale = op_name(&prod, "scale");
    set_status(
        &client,
        &install,
        json!({"phase": "Succeeded", "message": "succeeded in 3m",
        "startTime": "2026-11-26T22:00:00Z", "endTime": "2026-11-26T22:03:00Z"}),
    )
    .await;
    set_status(
        &client,
        &scale,
        json!({"phase": "Queued", "message": "waiting for the maintenance window"}),
    )
    .await;
    let state = tempfile::tempdir().unwrap();
    std::fs::write(
        state.path().join("kubeconfig"),
        testkit::kubeconfig_yaml(&meta.url()),
    )
    .unwrap();
    (meta, client, state, install, scale)
}

/// Writes onto Cluster `name` the status the Cluster reconciler makes from its runs now (its health kept).
async fn reconcile_status(client: &Client, name: &str) {
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), NS);
    let cluster = clusters.get(name).await.unwrap();
    let ops = Api::<ClusterOperation>::namespaced(client.clone(), NS)
        .list(&ListParams::default().labels(&format!("{LABEL_CLUSTER}={name}")))
        .await
        .unwrap()
        .items;
    let ops: Vec<&ClusterOperation> = ops.iter().collect();
    let mut status = cluster_status(&cluster, &ops, Ok("NoSecret"));
    carry(&mut status, cluster.status.as_ref());
    clusters
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": status })),
        )
        .await
        .unwrap();
}

async fn set_status(client: &Client, op: &str, status: Value) {
    Api::<ClusterOperation>::namespaced(client.clone(), NS)
        .patch_status(
            op,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await
        .unwrap();
}

/// Runs `kok status` with local mode's state directory and `args`; returns its stdout.
fn status(state: &std::path::Path, args: &[&str]) -> String {
    let state = state.to_str().unwrap();
    let mut all = vec!["status", "--state-dir", state, "--namespace", NS];
    all.extend_from_slice(args);
    let (ok, out, err) = kok(&all, std::path::Path::new(state));
    assert!(ok, "kok status failed: {err}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_shows_each_cluster_with_its_health_and_queue() {
    let (_meta, _client, state, _, _) = fleet().await;
    let text = status(state.path(), &[]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].starts_with("CLUSTER") && lines[0].contains("HEALTH"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("dev ") && lines[1].contains("unknown"),
        "{text}"
    );
    assert!(lines[1].contains("nothing to run"), "{text}");
    for want in [
        "v1.31.4",
        "3/3",
        "healthy",
        "next: scale, waiting for the maintenance window",
        "install succeeded",
    ] {
        assert!(lines[2].contains(want), "{want}: {text}");
    }

    // One cluster, found through --kubeconfig this time.
    let kubeconfig = state.path().join("kubeconfig");
    let one = |cluster: &str| {
        let args = [
            "status",
            cluster,
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--namespace",
            NS,
        ];
        kok(&args, state.path())
    };
    let (ok, out, err) = one("prod");
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 2, "{out}");
    let (ok, _, err) = one("nope");
    assert!(
        !ok && err.contains("no Cluster nope in namespace kok-system"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_each_cluster_is_reconciled_the_table_is_read_from_the_clusters_alone() {
    let (meta, client, state, _, _) = fleet().await;
    let log = meta.requests();
    let from_runs = status(state.path(), &["--output", "json"]);
    assert!(
        log.count("list", "clusteroperations") > 0,
        "no Cluster says what its queue does yet, so the runs are read"
    );
    for cluster in ["prod", "dev"] {
        reconcile_status(&client, cluster).await;
    }
    log.reset();
    let from_clusters = status(state.path(), &["--output", "json"]);
    assert_eq!(log.count("list", "clusteroperations"), 0, "{:?}", log.snapshot());
    assert_eq!(log.count("list", "clusters"), 1, "{:?}", log.snapshot());
    let (a, b): (Value, Value) = (
        serde_json::from_str(&from_runs).unwrap(),
        serde_json::from_str(&from_clusters).unwrap(),
    );
    assert_eq!(a, b, "the same rows from the runs and from the Clusters");
    assert_eq!(b[1]["current"]["id"], "scale", "{b}");
    assert_eq!(
        b[1]["current"]["outcome"], "waiting for the maintenance window",
        "{b}"
    );
    assert_eq!(b[1]["last"]["id"], "install", "{b}");
    assert_eq!(b[1]["last"]["seconds"], 180, "{b}");
    // The runs are gone and the table still says what the Clusters say.
    Api::<ClusterOperation>::namespaced(client.clone(), NS)
        .delete_collection(&Default::default(), &ListParams::default())
        .await
        .unwrap();
    let text = status(state.path(), &[]);
    assert!(
        text.contains("next: scale, waiting for the maintenance window"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_has_one_object_per_cluster() {
    let (_meta, _client, state, _, _) = fleet().await;
    let rows: Value = serde_json::from_str(&status(state.path(), &["--output", "json"])).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let prod = &rows[1];
    assert_eq!(prod["cluster"], "prod");
    assert_eq!(prod["version"], "v1.31.4");
    assert_eq!(prod["health"], "healthy");
    assert_eq!(prod["nodes"]["summary"], "3/3");
    assert_eq!(prod["state"], "waiting");
    assert_eq!(prod["current"]["id"], "scale");
    assert_eq!(prod["last"]["id"], "install");
    assert_eq!(rows[0]["health"], "unknown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_again_when_a_clusters_queue_changes() {
    let (_meta, client, state, _, scale) = fleet().await;
    reconcile_status(&client, "prod").await;
    let mut child = Killed(
        Command::new(env!("CARGO_BIN_EXE_kok"))
            .args(["status", "--watch", "--namespace", NS, "--state-dir"])
            .arg(state.path())
            .env("KOK_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("kok runs"),
    );
    let (tx, lines) = mpsc::channel();
    let stdout = child.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let wait_line = |want: &str| loop {
        match lines.recv_timeout(PATIENCE) {
            Ok(line) if line.contains(want) => return line,
            Ok(_) => {}
            Err(e) => panic!("--watch never printed {want:?}: {e}"),
        }
    };
    let first = wait_line("next: scale, waiting");
    assert!(first.starts_with("prod "), "{first}");
    set_status(
        &client,
        &scale,
        json!({"phase": "Running", "message": "running",
        "startTime": jiff::Timestamp::now().to_string()}),
    )
    .await;
    reconcile_status(&client, "prod").await;
    let update = wait_line("running scale for");
    assert!(update.starts_with("prod "), "{update}");
    drop(child);
}

/// A child process killed (and reaped) when dropped, also when the test panics.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
