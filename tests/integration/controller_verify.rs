//! After a successful Job, the controller verifies the workload cluster before it reports success: a
//! second testkit plays that cluster (its Nodes, kube-system workloads, /readyz), written by each test.

use crate::controller_support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::ByteString;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;
use tokio::io::AsyncReadExt;

use controller_support::*;
use kok::api::{ClusterOperation, Phase, StatusState, VerificationState, Verify};
use kok::controller::job::job_name;
use kok::controller::CONCURRENT_RECONCILES;
use kok::materialize::apply::apply_cluster;

/// node1 in kube_control_plane, node2 in kube_node (through a child group), a bastion outside both.
const HOSTS: &str = "all:\n  hosts:\n    node1: {ip: 10.0.0.1}\n    node2: {ip: 10.0.0.2}\n    bastion:\n  children:\n    \
                     kube_control_plane:\n      hosts:\n        node1:\n    kube_node:\n      children:\n        workers:\n          \
                     hosts:\n            node2:\n";
const VARS: &str = "kube_version: v1.31.4\n";

/// Writes Node `name` to the workload cluster as a kubelet would: Ready or not, with its InternalIP and version.
async fn node(workload: &Client, name: &str, ip: &str, ready: bool, version: &str) {
    let api: Api<Node> = Api::all(workload.clone());
    let mut n = Node::default();
    n.metadata.name = Some(name.into());
    api.create(&PostParams::default(), &n).await.unwrap();
    let (status, reason) = if ready {
        ("True", "KubeletReady")
    } else {
        ("False", "KubeletNotReady")
    };
    let patch = json!({"status": {
        "conditions": [{"type": "Ready", "status": status, "reason": reason,
                        "lastHeartbeatTime": "2026-11-26T22:11:33Z", "lastTransitionTime": "2026-11-26T22:11:33Z"}],
        "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
        "nodeInfo": {"kubeletVersion": version, "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
                     "osImage": "", "containerRuntimeVersion": "", "kubeProxyVersion": "", "operatingSystem": "linux",
                     "architecture": "amd64"}}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// A kube-system Deployment with `available` of `replicas` available.
async fn deployment(workload: &Client, name: &str, replicas: i32, available: i32) {
    let api: Api<Deployment> = Api::namespaced(workload.clone(), "kube-system");
    let d: Deployment = serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"replicas": replicas,
        "selector": {"matchLabels": {"k8s-app": name}},
        "template": {"metadata": {"labels": {"k8s-app": name}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}))
    .unwrap();
    api.create(&PostParams::default(), &d).await.unwrap();
    let status = json!({"status": {"replicas": replicas, "availableReplicas": available,
        "unavailableReplicas": replicas - available, "observedGeneration": 1}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// A kube-system DaemonSet on every node, all available.
async fn daemon_set(workload: &Client, name: &str, pods: i32) {
    let api: Api<DaemonSet> = Api::namespaced(workload.clone(), "kube-system");
    let d: DaemonSet = serde_json::from_value(json!({"metadata": {"name": name}, "spec": {
        "selector": {"matchLabels": {"k8s-app": name}},
        "template": {"metadata": {"labels": {"k8s-app": name}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}))
    .unwrap();
    api.create(&PostParams::default(), &d).await.unwrap();
    let status = json!({"status": {"desiredNumberScheduled": pods, "currentNumberScheduled": pods, "numberReady": pods,
        "numberAvailable": pods, "numberMisscheduled": 0, "observedGeneration": 1}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// A healthy two-node cluster at v1.31.4 with CoreDNS and calico-node available.
async fn healthy(workload: &Client) {
    node(workload, "node1", "10.0.0.1", true, "v1.31.4").await;
    node(workload, "node2", "10.0.0.2", true, "v1.31.4").await;
    deployment(workload, "coredns", 2, 2).await;
    daemon_set(workload, "calico-node", 2).await;
}

/// Puts `kubeconfig` into Secret `name` (key `value`).
async fn kubeconfig_secret(meta: &Client, name: &str, kubeconfig: &str) {
    let mut s = Secret {
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            "value".to_string(),
            ByteString(kubeconfig.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    };
    s.metadata.name = Some(name.into());
    Api::<Secret>::namespaced(meta.clone(), NS)
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
}

/// The meta-cluster (and its client) with `kubeconfig` in Secret `prod-kubeconfig`.
async fn meta_with_kubeconfig(kubeconfig: &str) -> (testkit::ApiServer, Client) {
    let meta = server().await;
    let client = meta.client();
    kubeconfig_secret(&client, "prod-kubeconfig", kubeconfig).await;
    (meta, client)
}

/// An `install` operation with `verify` and `verifyTimeout` set as given.
fn install(verify: Option<Verify>, timeout: Option<&str>) -> kok::layout::Operation {
    let mut op = entry("install", "cluster.yml", &[]);
    if let Some(v) = verify {
        op.verify = v;
        op.entry["verify"] = json!(v.as_str());
    }
    if let Some(t) = timeout {
        op.verify_timeout = Some(t.to_string());
        op.entry["verifyTimeout"] = json!(t);
    }
    op
}

/// The meta-cluster, the controller (looking again every 100 ms while a verification fails), and the
/// name of the operation of `op` on cluster `prod` once its Job ran and succeeded.
async fn run_and_succeed_job(
    server: &testkit::ApiServer,
    op: kok::layout::Operation,
    kubeconfig_setting: Option<&str>,
) -> (Running, String) {
    run_and_succeed_first(server, vec![op], kubeconfig_setting).await
}

/// As [`run_and_succeed_job`], with `ops` in operations.yml, the first being `install`.
async fn run_and_succeed_first(
    server: &testkit::ApiServer,
    ops: Vec<kok::layout::Operation>,
    kubeconfig_setting: Option<&str>,
) -> (Running, String) {
    let client = server.client();
    let mut dir = cluster_dir("prod", HOSTS, ops, None);
    dir.inventory_dir.vars_yml = Some(VARS.into());
    dir.settings.kubeconfig_secret = kubeconfig_setting.map(Into::into);
    let d = render(&dir, 1, &[]);
    apply_cluster(&client, NS, &d).await.unwrap();
    let mut cfg = config(4);
    cfg.verify_retry = Duration::from_millis(100);
    let ctl = start(&client, cfg);
    let name = op_name(&d, "install");
    wait_phase(&client, &name, Phase::Running).await;
    server.complete_job(NS, &job_name(&name)).await.unwrap();
    (ctl, name)
}

/// The description of the commit status `op` should have now.
fn description(op: &ClusterOperation) -> String {
    desired(op).description
}

/// Runs `install` against a workload cluster prepared by the test, and returns the operation once it ended.
async fn verified(workload: &testkit::ApiServer, timeout: &str, want: Phase) -> ClusterOperation {
    let (server, client) = meta_with_kubeconfig(&testkit::kubeconfig_yaml(&workload.url())).await;
    let (ctl, name) = run_and_succeed_job(&server, install(None, Some(timeout)), None).await;
    let done = wait_phase(&client, &name, want).await;
    ctl.stop().await;
    done
}

#[tokio::test]
async fn a_healthy_cluster_is_verified_and_the_success_says_so() {
    let workload = testkit::ApiServer::start().await.unwrap();
    healthy(&workload.client()).await;
    let done = verified(&workload, "1m", Phase::Succeeded).await;
    let text = description(&done);
    assert!(text.starts_with("succeeded"), "{text}");
    assert!(text.ends_with("; verified: 2/2 nodes Ready, v1.31.4"), "{text}");
    let status = done.status.unwrap();
    assert_eq!(
        status.result.as_deref(),
        Some(text.as_str()),
        "the Result column shows it"
    );
    let v = status.verification.unwrap();
    assert_eq!(v.state, VerificationState::Passed);
    let checks: Vec<(&str, bool)> = v.checks.iter().map(|c| (c.name.as_str(), c.passed)).collect();
    assert_eq!(
        checks,
        [
            ("Reachable", true),
            ("NodesReady", true),
            ("InventoryMatches", true),
            ("VersionMatches", true),
            ("WorkloadsAvailable", true)
        ]
    );
}

/// Runs `install` (verifyTimeout 1s) on a workload cluster of the Nodes `nodes` (name, InternalIP,
/// Ready, kubelet version), and checks that it fails saying `why`.
async fn fails_because(nodes: &[(&str, &str, bool, &str)], why: &str) -> ClusterOperation {
    let workload = testkit::ApiServer::start().await.unwrap();
    for (name, ip, ready, version) in nodes {
        node(&workload.client(), name, ip, *ready, version).await;
    }
    let done = verified(&workload, "1s", Phase::Failed).await;
    assert_eq!(
        description(&done),
        format!("playbook succeeded, verification failed: {why}")
    );
    done
}

#[tokio::test]
async fn a_node_not_ready_fails_the_operation_once_the_verify_timeout_passed() {
    let done = fails_because(
        &[
            ("node1", "10.0.0.1", true, "v1.31.4"),
            ("node2", "10.0.0.2", false, "v1.31.4"),
        ],
        "1/2 nodes not Ready: node2 (KubeletNotReady)",
    )
    .await;
    assert_eq!(desired(&done).state, StatusState::Failure);
    let status = done.status.unwrap();
    let v = status.verification.unwrap();
    assert_eq!(v.state, VerificationState::Failed);
    assert!(v.started_at.is_some());
    assert!(v.checks.iter().any(|c| c.name == "NodesReady" && !c.passed));
}

#[tokio::test]
async fn a_host_that_never_joined_is_named() {
    fails_because(
        &[("node1", "10.0.0.1", true, "v1.31.4")],
        "node2 is in hosts.yml but not a node of the cluster",
    )
    .await;
}

#[tokio::test]
async fn a_node_the_inventory_lacks_is_named_and_a_node_is_matched_by_its_internal_ip() {
    fails_because(
        &[
            ("node1", "10.0.0.1", true, "v1.31.4"),
            ("ip-10-0-0-2", "10.0.0.2", true, "v1.31.4"),
            ("node9", "10.0.0.9", true, "v1.31.4"),
        ],
        "node9 is a node of the cluster but not in hosts.yml",
    )
    .await;
}

#[tokio::test]
async fn kubelets_left_at_the_old_version_fail_the_upgrade() {
    fails_because(
        &[
            ("node1", "10.0.0.1", true, "v1.30.6"),
            ("node2", "10.0.0.2", true, "v1.30.6"),
        ],
        "2 kubelets still at v1.30.6 (node1, node2), want v1.31.4",
    )
    .await;
}

/// A cluster in kubespray's layout whose `kube_version` lives where kubespray's sample keeps it,
/// `group_vars/k8s_cluster/k8s-cluster.yml` (pinned compressed: it is over 1 KiB), above an older value of
/// `group_vars/all`; the inventory names no `k8s_cluster` group, which kubespray makes at run time.
fn kubespray_layout_dir() -> kok::layout::ClusterDir {
    let mut dir = cluster_dir("prod", "", vec![install(None, Some("1s"))], None);
    dir.inventory_dir.inventory_file = "inventory.ini".into();
    dir.inventory_dir.hosts_yml =
        "[kube_control_plane]\nnode1\n\n[etcd:children]\nkube_control_plane\n\n[kube_node]\nnode2\n".into();
    dir.inventory_dir.vars_yml = None;
    let padding = "# kubespray's sample explains every setting at length\n".repeat(40);
    dir.inventory_dir.vars_files = vec![
        ("group_vars/all/all.yml".into(), "kube_version: v1.29.0\n".into()),
        (
            "group_vars/k8s_cluster/k8s-cluster.yml".into(),
            format!("{padding}kube_version: v1.31.4\n"),
        ),
        ("host_vars/node1.yml".into(), "ip: 10.0.0.1\n".into()),
        ("host_vars/node2.yml".into(), "ip: 10.0.0.2\n".into()),
    ];
    dir
}

#[tokio::test]
async fn a_kubespray_inventory_is_verified_against_the_kube_version_its_k8s_cluster_group_vars_set() {
    for (kubelets, want) in [("v1.31.4", Phase::Succeeded), ("v1.29.0", Phase::Failed)] {
        let workload = testkit::ApiServer::start().await.unwrap();
        node(&workload.client(), "node1", "10.0.0.1", true, kubelets).await;
        node(&workload.client(), "node2", "10.0.0.2", true, kubelets).await;
        let (server, client) = meta_with_kubeconfig(&testkit::kubeconfig_yaml(&workload.url())).await;
        let dir = kubespray_layout_dir();
        let d = render(&dir, 1, &[]);
        let listed = d
            .config_maps
            .iter()
            .find_map(kok::api::file_list)
            .expect("the files are listed");
        assert!(
            listed.iter().any(|f| f.gzip),
            "k8s-cluster.yml is pinned compressed"
        );
        apply_cluster(&client, NS, &d).await.unwrap();
        let mut cfg = config(4);
        cfg.verify_retry = Duration::from_millis(100);
        let ctl = start(&client, cfg);
        let name = op_name(&d, "install");
        wait_phase(&client, &name, Phase::Running).await;
        server.complete_job(NS, &job_name(&name)).await.unwrap();
        let done = wait_phase(&client, &name, want).await;
        ctl.stop().await;
        let text = description(&done);
        if want == Phase::Succeeded {
            assert!(text.ends_with("; verified: 2/2 nodes Ready, v1.31.4"), "{text}");
        } else {
            assert_eq!(
                text,
                "playbook succeeded, verification failed: 2 kubelets still at v1.29.0 (node1, node2), want v1.31.4"
            );
        }
    }
}

#[tokio::test]
async fn an_unreachable_api_server_fails_with_the_cause() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let kubeconfig = testkit::kubeconfig_yaml(&format!("http://127.0.0.1:{closed}"));
    let (server, client) = meta_with_kubeconfig(&kubeconfig).await;
    let (ctl, name) = run_and_succeed_job(&server, install(None, Some("1s")), None).await;
    let done = wait_phase(&client, &name, Phase::Failed).await;
    assert_eq!(
        description(&done),
        "playbook succeeded, verification failed: API server unreachable: connection refused"
    );
    ctl.stop().await;
}

#[tokio::test]
async fn a_node_that_joins_while_kok_retries_and_restarts_turns_the_verification_into_success() {
    let workload = testkit::ApiServer::start().await.unwrap();
    let w = workload.client();
    node(&w, "node1", "10.0.0.1", true, "v1.31.4").await;
    let (server, client) = meta_with_kubeconfig(&testkit::kubeconfig_yaml(&workload.url())).await;
    let (ctl, name) = run_and_succeed_job(&server, install(None, Some("10m")), None).await;
    let verifying = wait_for("the operation to show its verification", || async {
        let o = op(&client, &name).await?;
        let v = o.status.as_ref()?.verification.clone()?;
        (v.state == VerificationState::Verifying).then_some(o)
    })
    .await;
    let status = verifying.status.clone().unwrap();
    assert_eq!(status.phase, Phase::Running);
    assert_eq!(
        status.message.as_deref(),
        Some(
            "playbook succeeded, verifying the cluster: node2 is in hosts.yml but not a node of the cluster"
        )
    );
    assert_eq!(desired(&verifying).state, StatusState::Running);
    let started = status.verification.unwrap().started_at;

    // kok stops while it verifies; the next one resumes from the status.
    ctl.kill();
    node(&w, "node2", "10.0.0.2", true, "v1.31.4").await;
    let mut cfg = config(4);
    cfg.verify_retry = Duration::from_millis(100);
    let ctl = start(&client, cfg);
    let done = wait_phase(&client, &name, Phase::Succeeded).await;
    assert!(description(&done).ends_with("; verified: 2/2 nodes Ready, v1.31.4"));
    assert_eq!(done.status.unwrap().verification.unwrap().started_at, started);
    ctl.stop().await;
}

#[tokio::test]
async fn verify_none_opts_out_and_reachable_checks_only_the_api_server() {
    let (meta, client) = meta_with_kubeconfig(&testkit::kubeconfig_yaml("http://127.0.0.1:9")).await;
    let (ctl, name) = run_and_succeed_job(&meta, install(Some(Verify::None), None), None).await;
    let done = wait_phase(&client, &name, Phase::Succeeded).await;
    assert!(!description(&done).contains("verified"), "{}", description(&done));
    assert!(done.status.unwrap().verification.is_none());
    ctl.stop().await;

    // A workload cluster with no Nodes at all still answers.
    let workload = testkit::ApiServer::start().await.unwrap();
    let (meta, client) = meta_with_kubeconfig(&testkit::kubeconfig_yaml(&workload.url())).await;
    let (ctl, name) = run_and_succeed_job(&meta, install(Some(Verify::Reachable), Some("1s")), None).await;
    let done = wait_phase(&client, &name, Phase::Succeeded).await;
    assert!(
        description(&done).ends_with("; verified: API server answers"),
        "{}",
        description(&done)
    );
    ctl.stop().await;
}

#[tokio::test]
async fn a_cluster_without_a_kubeconfig_yet_succeeds_unverified() {
    let server = server().await;
    let client = server.client();
    let (ctl, name) = run_and_succeed_job(&server, install(None, None), None).await;
    let done = wait_phase(&client, &name, Phase::Succeeded).await;
    assert!(
        description(&done).ends_with("; not verified: no kubeconfig"),
        "{}",
        description(&done)
    );
    assert_eq!(
        done.status.unwrap().verification.unwrap().state,
        VerificationState::Skipped
    );
    ctl.stop().await;
}

#[tokio::test]
async fn an_exec_kubeconfig_is_refused_without_running_it() {
    let server = server().await;
    let client = server.client();
    let marker = std::env::temp_dir().join(format!("kok-exec-ran-{}", std::process::id()));
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'http://127.0.0.1:9'}}\ncontexts:\n\
         - name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\nusers:\n- name: u\n  user:\n    exec:\n      \
         apiVersion: client.authentication.k8s.io/v1\n      command: touch\n      args: ['{}']\n",
        marker.display()
    );
    kubeconfig_secret(&client, "prod-reader", &kubeconfig).await;
    let (ctl, name) = run_and_succeed_job(&server, install(None, None), Some("prod-reader")).await;
    let done = wait_phase(&client, &name, Phase::Failed).await;
    assert_eq!(
        description(&done),
        "playbook succeeded, verification failed: the kubeconfig in Secret prod-reader is refused: user \"u\" runs a \
         program (exec); kok never runs programs or reads files a Secret names: give it a token, or a client \
         certificate and key as data"
    );
    assert!(!marker.exists(), "the exec plugin ran");
    ctl.stop().await;
}

#[tokio::test]
async fn a_named_kubeconfig_secret_that_is_missing_fails_with_what_to_do() {
    let server = server().await;
    let client = server.client();
    let (ctl, name) = run_and_succeed_job(&server, install(None, None), Some("prod-reader")).await;
    let done = wait_phase(&client, &name, Phase::Failed).await;
    assert_eq!(
        description(&done),
        "playbook succeeded, verification failed: Secret prod-reader named by kubeconfigSecret does not exist in \
         namespace kok-system: create it with the cluster's kubeconfig under key `value`"
    );
    ctl.stop().await;
}

#[tokio::test]
async fn a_failed_verification_holds_the_clusters_later_operations() {
    let workload = testkit::ApiServer::start().await.unwrap();
    node(&workload.client(), "node1", "10.0.0.1", true, "v1.31.4").await;
    let (server, client) = meta_with_kubeconfig(&testkit::kubeconfig_yaml(&workload.url())).await;
    let ops = vec![install(None, Some("1s")), entry("later", "cluster-info.yml", &[])];
    let (ctl, name) = run_and_succeed_first(&server, ops, None).await;
    wait_phase(&client, &name, Phase::Failed).await;
    let later = wait_for("the later operation to be held", || async {
        let ops: Vec<ClusterOperation> = Api::<ClusterOperation>::namespaced(client.clone(), NS)
            .list(&Default::default())
            .await
            .ok()?
            .items;
        let later = ops.into_iter().find(|o| o.spec.id == "later")?;
        let message = later.status.as_ref()?.message.clone()?;
        message.starts_with("held: ").then_some(later)
    })
    .await;
    assert_eq!(later.status.unwrap().phase, Phase::Queued);
    ctl.stop().await;
}

#[tokio::test]
async fn a_cluster_that_refuses_kok_the_nodes_says_so() {
    let workload = testkit::ApiServer::start().await.unwrap();
    healthy(&workload.client()).await;
    workload.inject_fault(testkit::Fault::on("list", "nodes", 403, 1000));
    let done = verified(&workload, "1s", Phase::Failed).await;
    let text = description(&done);
    assert!(
        text.starts_with("playbook succeeded, verification failed: API server refused listing nodes: 403 "),
        "{text}"
    );
}

/// The meta-cluster with cluster `name` (no operations) and its kubeconfig for `workload`, and the
/// controller checking its health every `interval`.
async fn checked_every(
    interval: Duration,
    name: &str,
    workload: &testkit::ApiServer,
) -> (testkit::ApiServer, Client, Running) {
    checked_every_into(interval, name, workload, kok::metrics::Metrics::new()).await
}

/// [`checked_every`], the controller's gauges in `metrics`.
async fn checked_every_into(
    interval: Duration,
    name: &str,
    workload: &testkit::ApiServer,
    metrics: kok::metrics::Metrics,
) -> (testkit::ApiServer, Client, Running) {
    let meta = server().await;
    let client = meta.client();
    let kubeconfig = testkit::kubeconfig_yaml(&workload.url());
    kubeconfig_secret(&client, &format!("{name}-kubeconfig"), &kubeconfig).await;
    let mut dir = cluster_dir(name, HOSTS, vec![], None);
    dir.inventory_dir.vars_yml = Some(VARS.into());
    apply_cluster(&client, NS, &render(&dir, 1, &[])).await.unwrap();
    let mut cfg = config(4);
    cfg.health_interval = interval;
    cfg.metrics = metrics;
    let ctl = start(&client, cfg);
    (meta, client, ctl)
}

#[tokio::test]
async fn periodic_health_checks_keep_conditions_version_and_node_counts_on_the_cluster() {
    let workload = testkit::ApiServer::start().await.unwrap();
    let w = workload.client();
    healthy(&w).await;
    let (_meta, client, ctl) = checked_every(Duration::from_millis(200), "prod", &workload).await;
    let clusters: Api<kok::api::Cluster> = Api::namespaced(client.clone(), NS);
    let condition = |status: &kok::api::ClusterStatus, type_: &str| {
        let c = status.conditions.iter().find(|c| c.type_ == type_)?;
        Some((c.status.clone(), c.message.clone()))
    };
    let status = wait_for("the cluster to be Healthy", || async {
        let s = clusters.get("prod").await.ok()?.status?;
        (condition(&s, "Healthy")?.0 == "True").then_some(s)
    })
    .await;
    assert_eq!(status.kubernetes_version.as_deref(), Some("v1.33.0-testkit"));
    assert_eq!(status.kubelet_versions, ["v1.31.4"]);
    assert_eq!(status.nodes.as_ref().unwrap().summary, "2/2");
    for type_ in [
        "Reachable",
        "NodesReady",
        "InventoryMatches",
        "VersionMatches",
        "Ready",
    ] {
        assert_eq!(
            condition(&status_of(&clusters).await, type_).unwrap().0,
            "True",
            "{type_}"
        );
    }

    // Someone removes a node by hand: the drift shows within an interval, beside the Cluster's own conditions.
    Api::<Node>::all(w.clone())
        .delete("node2", &Default::default())
        .await
        .unwrap();
    let status = wait_for("the drift to show", || async {
        let s = clusters.get("prod").await.ok()?.status?;
        (condition(&s, "InventoryMatches")?.0 == "False").then_some(s)
    })
    .await;
    assert_eq!(
        condition(&status, "InventoryMatches").unwrap().1,
        "node2 is in hosts.yml but not a node of the cluster"
    );
    assert_eq!(condition(&status, "Healthy").unwrap().0, "False");
    assert_eq!(status.nodes.as_ref().unwrap().summary, "1/1");
    assert!(
        condition(&status, "Ready").is_some(),
        "the Cluster reconciler's conditions stay"
    );
    let events = wait_for("an Event for the drift", || async {
        let list = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), NS)
            .list(&Default::default())
            .await
            .ok()?;
        let reasons: Vec<String> = list.items.into_iter().filter_map(|e| e.reason).collect();
        reasons
            .contains(&"NodesDifferFromInventory".to_string())
            .then_some(reasons)
    })
    .await;
    assert!(events.contains(&"AllChecksPassed".to_string()), "{events:?}");
    ctl.stop().await;
}

#[tokio::test]
async fn health_rounds_read_a_clusters_pinned_inventory_and_vars_once_not_every_round() {
    let workload = testkit::ApiServer::start().await.unwrap();
    healthy(&workload.client()).await;
    let (meta, _client, ctl) = checked_every(Duration::from_millis(100), "prod", &workload).await;
    // Each round lists the cluster's Nodes once.
    wait_for("five health rounds", || async {
        (workload.requests().count("list", "nodes") >= 5).then_some(())
    })
    .await;
    ctl.stop().await;
    assert_eq!(
        meta.requests().count("get", "configmaps"),
        2,
        "the hosts and vars ConfigMaps, each read once across the rounds"
    );
    assert!(
        meta.requests().count("get", "secrets") >= 5,
        "the kubeconfig Secret is read every round"
    );
}

async fn status_of(clusters: &Api<kok::api::Cluster>) -> kok::api::ClusterStatus {
    clusters.get("prod").await.unwrap().status.unwrap()
}

/// A loopback listener that accepts connections and never answers, counting the connections it
/// accepted and those the other side closed; it stops with the test's runtime.
struct Silent {
    url: String,
    accepted: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
}

async fn silent_server() -> Silent {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (accepted, closed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let counts = (accepted.clone(), closed.clone());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counts.0.fetch_add(1, Ordering::SeqCst);
            let closed = counts.1.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {}
                closed.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    Silent {
        url,
        accepted,
        closed,
    }
}

/// The health conditions of every Cluster by name, as (Reachable status and message, Healthy status).
async fn health_by_cluster(
    clusters: &Api<kok::api::Cluster>,
) -> BTreeMap<String, (Option<(String, String)>, Option<String>)> {
    let list = clusters.list(&Default::default()).await.unwrap();
    list.items
        .into_iter()
        .map(|c| {
            let name = c.metadata.name.clone().unwrap();
            let conditions = c.status.map(|s| s.conditions).unwrap_or_default();
            let find = |t: &str| conditions.iter().find(|c| c.type_ == t).cloned();
            let reachable = find("Reachable").map(|c| (c.status, c.message));
            (name, (reachable, find("Healthy").map(|c| c.status)))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_that_never_answer_do_not_delay_the_healthy_ones_in_a_health_round() {
    let workload = testkit::ApiServer::start().await.unwrap();
    healthy(&workload.client()).await;
    let silent = silent_server().await.url;
    let meta = server().await;
    let client = meta.client();
    let reachable = workload.url();
    // The hung clusters sort first by name: more of them than checks run at once take every place first.
    let hung: Vec<String> = (0..20).map(|i| format!("hung{i:02}")).collect();
    let good: Vec<String> = (0..3).map(|i| format!("well{i}")).collect();
    for (name, url) in hung
        .iter()
        .map(|n| (n, &silent))
        .chain(good.iter().map(|n| (n, &reachable)))
    {
        kubeconfig_secret(
            &client,
            &format!("{name}-kubeconfig"),
            &testkit::kubeconfig_yaml(url),
        )
        .await;
        let mut dir = cluster_dir(name, HOSTS, vec![], None);
        dir.inventory_dir.vars_yml = Some(VARS.into());
        apply_cluster(&client, NS, &render(&dir, 1, &[])).await.unwrap();
    }
    let mut cfg = config(4);
    cfg.health_interval = Duration::from_millis(200);
    cfg.health_timeout = Duration::from_secs(10);
    let ctl = start(&client, cfg);
    let clusters: Api<kok::api::Cluster> = Api::namespaced(client.clone(), NS);

    let seen = wait_for("the healthy clusters to be Healthy", || async {
        let seen = health_by_cluster(&clusters).await;
        good.iter()
            .all(|g| seen[g].1.as_deref() == Some("True"))
            .then_some(seen)
    })
    .await;
    for h in &hung {
        assert_eq!(
            seen[h],
            (None, None),
            "{h} was recorded before the healthy clusters: the hung checks delayed them"
        );
    }

    // Every hung cluster ends its round unreachable (its own timeout, not the round's), none left out.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let seen = health_by_cluster(&clusters).await;
        let pending: Vec<&String> = hung
            .iter()
            .filter(|h| seen[*h].0.as_ref().is_none_or(|r| r.0 != "False"))
            .collect();
        if pending.is_empty() {
            for h in &hung {
                let (status, message) = seen[h].0.clone().unwrap();
                assert_eq!(
                    (status.as_str(), message.as_str()),
                    ("False", "API server unreachable: timed out")
                );
            }
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "hung clusters never recorded as unreachable: {pending:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ctl.stop().await;
}

#[tokio::test]
async fn a_verification_reads_the_pinned_inventory_and_vars_once_however_often_it_retries() {
    let workload = testkit::ApiServer::start().await.unwrap();
    node(&workload.client(), "node1", "10.0.0.1", true, "v1.31.4").await;
    let (server, client) = meta_with_kubeconfig(&testkit::kubeconfig_yaml(&workload.url())).await;
    let (ctl, name) = run_and_succeed_job(&server, install(None, Some("2s")), None).await;
    wait_phase(&client, &name, Phase::Failed).await;
    ctl.stop().await;
    let attempts = workload.requests().count("list", "nodes");
    assert!(attempts >= 3, "the verification was tried {attempts} times");
    assert_eq!(
        server.requests().count("get", "configmaps"),
        2,
        "the pinned hosts and vars ConfigMaps, each read once"
    );
}

/// Applies cluster `other` with one operation and waits for its Job.
async fn another_clusters_job_starts(client: &Client) {
    let other = render(
        &cluster_dir("other", HOSTS, vec![entry("install", "cluster.yml", &[])], None),
        1,
        &[],
    );
    apply_cluster(client, NS, &other).await.unwrap();
    wait_job(client, &job_name(&op_name(&other, "install"))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verifications_of_clusters_that_never_answer_leave_the_reconcile_slots_to_other_operations() {
    let silent = silent_server().await;
    let meta = server().await;
    let client = meta.client();
    let mut hung = Vec::new();
    for i in 0..=CONCURRENT_RECONCILES {
        let cluster = format!("hung{i:02}");
        kubeconfig_secret(
            &client,
            &format!("{cluster}-kubeconfig"),
            &testkit::kubeconfig_yaml(&silent.url),
        )
        .await;
        let mut dir = cluster_dir(&cluster, HOSTS, vec![install(None, Some("10m"))], None);
        dir.inventory_dir.vars_yml = Some(VARS.into());
        let d = render(&dir, 1, &[]);
        apply_cluster(&client, NS, &d).await.unwrap();
        hung.push(op_name(&d, "install"));
    }
    let ctl = start(&client, config(2 * hung.len()));
    for name in &hung {
        wait_phase(&client, name, Phase::Running).await;
        meta.complete_job(NS, &job_name(name)).await.unwrap();
    }
    wait_for(
        "every reconcile slot's worth of verifications to wait on a silent cluster",
        || async { (silent.accepted.load(Ordering::SeqCst) >= CONCURRENT_RECONCILES).then_some(()) },
    )
    .await;

    another_clusters_job_starts(&client).await;
    assert_eq!(
        silent.closed.load(Ordering::SeqCst),
        0,
        "the other cluster's operation started only once a verification gave up on its silent cluster"
    );
    ctl.stop().await;
}

#[tokio::test]
async fn the_health_metrics_of_a_deleted_cluster_go_away() {
    let workload = testkit::ApiServer::start().await.unwrap();
    healthy(&workload.client()).await;
    let metrics = kok::metrics::Metrics::new();
    let (_meta, client, ctl) =
        checked_every_into(Duration::from_millis(200), "gone", &workload, metrics.clone()).await;
    let series = || {
        let text = metrics.render();
        text.lines()
            .filter(|l| l.contains("cluster=\"gone\""))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let before = wait_for("the cluster's health series", || async {
        let s = series();
        s.iter().any(|l| l.starts_with("kok_cluster_nodes")).then_some(s)
    })
    .await;
    assert!(
        before.iter().any(|l| l.starts_with("kok_cluster_condition")),
        "{before:?}"
    );

    Api::<kok::api::Cluster>::namespaced(client.clone(), NS)
        .delete("gone", &Default::default())
        .await
        .unwrap();
    wait_for("the deleted cluster's series to go", || async {
        series().is_empty().then_some(())
    })
    .await;
    ctl.stop().await;
}

#[tokio::test]
async fn a_health_check_whose_status_write_meets_a_conflict_writes_again_in_the_same_round() {
    let workload = testkit::ApiServer::start().await.unwrap();
    healthy(&workload.client()).await;
    let (meta, client, ctl) = checked_every(Duration::from_secs(3), "clash", &workload).await;
    let clusters: Api<kok::api::Cluster> = Api::namespaced(client.clone(), NS);
    let condition = |status: &kok::api::ClusterStatus, type_: &str| {
        let c = status.conditions.iter().find(|c| c.type_ == type_)?;
        Some(c.status.clone())
    };
    wait_for("the Cluster reconciler's own status", || async {
        condition(&clusters.get("clash").await.ok()?.status?, "Ready")
    })
    .await;
    meta.inject_fault(testkit::Fault::on("patch", "clusters/status", 409, 1).named("clash"));
    wait_for("the cluster to be Healthy", || async {
        let status = clusters.get("clash").await.ok()?.status?;
        (condition(&status, "Healthy")? == "True").then_some(())
    })
    .await;
    assert_eq!(
        workload.requests().count("list", "nodes"),
        1,
        "the health was recorded by a later round's check, not by the one whose write met the conflict"
    );
    ctl.stop().await;
}

#[tokio::test]
async fn a_cluster_being_verified_leaves_its_job_slot_to_other_clusters() {
    let silent = silent_server().await;
    let (meta, client) = meta_with_kubeconfig(&testkit::kubeconfig_yaml(&silent.url)).await;
    let mut dir = cluster_dir("prod", HOSTS, vec![install(None, Some("10m"))], None);
    dir.inventory_dir.vars_yml = Some(VARS.into());
    let prod = render(&dir, 1, &[]);
    apply_cluster(&client, NS, &prod).await.unwrap();
    let prod = op_name(&prod, "install");
    let ctl = start(&client, config(1));
    wait_job(&client, &job_name(&prod)).await;
    meta.complete_job(NS, &job_name(&prod)).await.unwrap();
    wait_for("the verification to wait on its silent cluster", || async {
        (silent.accepted.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await;

    another_clusters_job_starts(&client).await;
    assert_eq!(
        phase(&client, &prod).await,
        Some(Phase::Running),
        "still verifying"
    );
    ctl.stop().await;
}
