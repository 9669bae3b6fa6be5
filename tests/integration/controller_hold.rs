//! Against testkit with the test playing the kubelet: what a finished pod's termination message puts in the
//! operation's status, Event and commit status (never a Secret the Job mounts), and how a failure holds its
//! cluster's later operations.

use crate::controller_support;

use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::ByteString;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use controller_support::*;
use kok::api::{ClusterOperation, Phase, StatusState, HELD_PREFIX};
use kok::controller::job::job_name;
use kok::layout::Operation;
use kok::materialize::apply::apply_cluster;
use kok::materialize::DesiredCluster;

const HOSTS: &str = "all:\n  hosts:\n    node1: {}\n    node2: {}\n    node3: {}\n";

/// Plays the kubelet: the Job's pod, terminated with `exit_code` and termination message `message`.
async fn finish_pod(client: &kube::Client, job: &str, exit_code: i32, message: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": format!("{job}-abcde"), "labels": {"job-name": job, "batch.kubernetes.io/job-name": job}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "ansible", "image": "runner"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("pod created");
    let status = json!({"status": {
        "phase": if exit_code == 0 { "Succeeded" } else { "Failed" },
        "containerStatuses": [{"name": "ansible", "image": "runner", "imageID": "", "ready": false,
            "restartCount": 0, "state": {"terminated": {"exitCode": exit_code, "message": message}}}],
    }});
    pods.patch_status(
        &format!("{job}-abcde"),
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .expect("pod status written");
}

async fn fail_with(server: &testkit::ApiServer, name: &str, message: &str) {
    let client = server.client();
    finish_pod(&client, &job_name(name), 2, message).await;
    server
        .fail_job(
            NS,
            &job_name(name),
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        )
        .await
        .unwrap();
}

async fn event_notes(client: &kube::Client, name: &str) -> Vec<(String, String)> {
    let api: Api<Event> = Api::namespaced(client.clone(), NS);
    api.list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// A testkit server and the controller, with cluster `prod` applied at commit 1 with `ops`; returns once the
/// first operation runs.
async fn running_first(ops: Vec<Operation>) -> (testkit::ApiServer, kube::Client, Running, DesiredCluster) {
    let server = server().await;
    let client = server.client();
    let d = render(&cluster_dir("prod", HOSTS, ops, None), 1, &[]);
    apply_cluster(&client, NS, &d).await.unwrap();
    let ctl = start(&client, config(4));
    let first = d.operations[0].metadata.name.clone().expect("named");
    wait_phase(&client, &first, Phase::Running).await;
    (server, client, ctl, d)
}

fn description(op: &ClusterOperation) -> String {
    kok::report::status::desired_status(op, None, NS)
        .map(|d| d.description)
        .unwrap_or_default()
}

/// Waits until `name` is Queued and held; returns its commit status description.
async fn wait_held(client: &kube::Client, name: &str) -> String {
    wait_for(&format!("{name} to be held"), || async {
        op(client, name)
            .await
            .filter(|o| o.status.as_ref().is_some_and(|s| s.phase == Phase::Queued))
            .map(|o| description(&o))
            .filter(|d| d.starts_with(HELD_PREFIX))
    })
    .await
}

const FAILED_TASK: &str = r#"{"hosts":{"node1":{"ok":5,"changed":1,"failed":0,"unreachable":0,"skipped":0},
 "node2":{"ok":3,"changed":0,"failed":1,"unreachable":0,"skipped":1}},
 "total":{"ok":8,"changed":1,"failed":1,"unreachable":0,"skipped":1},"hostCount":2,
 "failure":{"step":"action: upgrade.yml","play":"all","task":"kubernetes/preinstall : Stop if unsupported OS",
 "host":"node2","message":"Debian 9 is not supported"}}"#;

fn with_on_failure(mut op: Operation, on_failure: &str) -> Operation {
    op.entry["onFailure"] = json!(on_failure);
    op.on_failure = serde_json::from_value(json!(on_failure)).unwrap();
    op
}

fn with_rerun(mut op: Operation, rerun: u64) -> Operation {
    op.entry["rerun"] = json!(rerun);
    op.rerun = Some(rerun);
    op
}

#[tokio::test]
async fn a_failed_task_is_named_in_the_status_event_and_commit_status() {
    let (server, client, ctl, d) = running_first(vec![entry("upgrade", "upgrade.yml", &[])]).await;
    let name = op_name(&d, "upgrade");
    fail_with(&server, &name, FAILED_TASK).await;
    let done = wait_phase(&client, &name, Phase::Failed).await;
    let want =
        "failed at TASK [kubernetes/preinstall : Stop if unsupported OS] on node2: Debian 9 is not supported";
    assert_eq!(description(&done), want);
    let status = done.status.clone().unwrap();
    assert_eq!(status.result.as_deref(), Some(want));
    assert_eq!(desired(&done).state, StatusState::Failure);
    let failure = status.failure.expect("failure stored");
    assert_eq!(failure.host.as_deref(), Some("node2"));
    assert_eq!(status.summary.expect("summary stored").total.failed, 1);
    let notes = wait_for("the Failed event", || async {
        event_notes(&client, &name)
            .await
            .into_iter()
            .find(|(reason, _)| reason == "Failed")
    })
    .await;
    assert_eq!(notes.1, want);
    ctl.stop().await;
}

#[tokio::test]
async fn a_success_says_hosts_and_changes_and_a_failure_before_ansible_says_its_error_line() {
    let (server, client, ctl, d) = running_first(vec![
        entry("install", "cluster.yml", &[]),
        entry("broken", "missing.yml", &[]),
    ])
    .await;
    let install = op_name(&d, "install");
    let summary = r#"{"hosts":{"node1":{"ok":30,"changed":20},"node2":{"ok":30,"changed":11},
        "node3":{"ok":30,"changed":10}},"total":{"ok":90,"changed":41},"hostCount":3}"#;
    finish_pod(&client, &job_name(&install), 0, summary).await;
    server.complete_job(NS, &job_name(&install)).await.unwrap();
    let done = wait_phase(&client, &install, Phase::Succeeded).await;
    let text = description(&done);
    assert!(
        text.starts_with("succeeded in ")
            && text.ends_with(": 3 hosts, 41 changed; not verified: no kubeconfig"),
        "{text}"
    );

    let broken = op_name(&d, "broken");
    wait_phase(&client, &broken, Phase::Running).await;
    let tail = "kok: action: missing.yml\n[ERROR]: the playbook: missing.yml could not be found\n\
                kok: action: missing.yml failed with exit code 1\n";
    fail_with(&server, &broken, tail).await;
    let done = wait_phase(&client, &broken, Phase::Failed).await;
    assert_eq!(
        description(&done),
        "failed: the playbook: missing.yml could not be found"
    );
    ctl.stop().await;
}

#[tokio::test]
async fn a_failure_holds_later_operations_until_a_rerun_of_it_succeeds() {
    let other = render(
        &cluster_dir("other", HOSTS, vec![entry("install", "cluster.yml", &[])], None),
        1,
        &[],
    );
    let (server, client, ctl, d1) = running_first(vec![
        entry("upgrade", "upgrade.yml", &[]),
        entry("add-node", "scale.yml", &["--limit=node3"]),
    ])
    .await;
    let upgrade = op_name(&d1, "upgrade");
    let add_node = op_name(&d1, "add-node");
    fail_with(&server, &upgrade, FAILED_TASK).await;
    wait_phase(&client, &upgrade, Phase::Failed).await;

    let held = wait_held(&client, &add_node).await;
    assert_eq!(
        held,
        format!(
            "held: prod/upgrade failed at {}; bump its rerun or remove it from operations.yml to go on",
            &sha(1)[..7]
        )
    );
    // Other clusters are never held.
    apply_cluster(&client, NS, &other).await.unwrap();
    wait_phase(&client, &op_name(&other, "install"), Phase::Running).await;
    assert!(!jobs(&client).await.contains(&job_name(&add_node)));

    // A rerun of the failed entry runs although add-node is earlier in the queue; add-node waits for it.
    let ops = vec![
        with_rerun(entry("upgrade", "upgrade.yml", &[]), 1),
        entry("add-node", "scale.yml", &["--limit=node3"]),
    ];
    let d2 = render(&cluster_dir("prod", HOSTS, ops, None), 2, &[("add-node", 1)]);
    apply_cluster(&client, NS, &d2).await.unwrap();
    let rerun = op_name(&d2, "upgrade");
    assert_ne!(rerun, upgrade);
    wait_phase(&client, &rerun, Phase::Running).await;
    assert_eq!(wait_held(&client, &add_node).await, held);
    server.complete_job(NS, &job_name(&rerun)).await.unwrap();
    wait_phase(&client, &rerun, Phase::Succeeded).await;
    wait_phase(&client, &add_node, Phase::Running).await;
    ctl.stop().await;
}

#[tokio::test]
async fn removing_the_failed_entry_releases_the_hold_and_says_so_in_an_event() {
    let (server, client, ctl, d1) = running_first(vec![
        entry("upgrade", "upgrade.yml", &[]),
        entry("add-node", "scale.yml", &[]),
    ])
    .await;
    let upgrade = op_name(&d1, "upgrade");
    let add_node = op_name(&d1, "add-node");
    fail_with(&server, &upgrade, FAILED_TASK).await;
    wait_held(&client, &add_node).await;

    let d2 = render(
        &cluster_dir("prod", HOSTS, vec![entry("add-node", "scale.yml", &[])], None),
        2,
        &[("add-node", 1)],
    );
    apply_cluster(&client, NS, &d2).await.unwrap();
    wait_phase(&client, &add_node, Phase::Running).await;
    let (_, note) = wait_for("the HoldReleased event", || async {
        event_notes(&client, &upgrade)
            .await
            .into_iter()
            .find(|(reason, _)| reason == "HoldReleased")
    })
    .await;
    assert!(
        note.contains("prod/upgrade removed from operations.yml"),
        "{note}"
    );
    let failed = op(&client, &upgrade).await.unwrap();
    assert!(failed.status.unwrap().hold_released.is_some());
    ctl.stop().await;
}

#[tokio::test]
async fn an_operation_that_continues_on_failure_does_not_hold_its_cluster() {
    let (server, client, ctl, d) = running_first(vec![
        with_on_failure(entry("report", "report.yml", &[]), "continue"),
        entry("add-node", "scale.yml", &[]),
    ])
    .await;
    let report = op_name(&d, "report");
    fail_with(&server, &report, FAILED_TASK).await;
    wait_phase(&client, &report, Phase::Failed).await;
    wait_phase(&client, &op_name(&d, "add-node"), Phase::Running).await;
    ctl.stop().await;
}

/// The vault password, a line of the ssh key, a value the run saved to `<cluster>-credentials` and the
/// token of the kubeconfig it saved, as a playbook that prints them would put them in its termination
/// message.
const VAULT_PASSWORD: &str = "vault-Pw-7c1e9a";
const KEY_LINE: &str = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ";
const CREDENTIAL: &str = "kubeadm-cert-key-5d3f0b2a";
/// The token of the kubeconfig the run saved to `<cluster>-kubeconfig` (kubespray's admin.conf).
const ADMIN_TOKEN: &str = "admin-token-0f9e8d7c6b";

async fn create_secret_with(client: &kube::Client, name: &str, key: &str, value: &str) {
    let mut secret = Secret {
        data: Some([(key.to_string(), ByteString(value.as_bytes().to_vec()))].into()),
        ..Secret::default()
    };
    secret.metadata.name = Some(name.into());
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret created");
}

#[tokio::test]
async fn secrets_the_job_mounts_reach_no_status_event_commit_status_or_log_when_the_run_prints_them() {
    let server = server().await;
    let client = server.client();
    let key = format!("-----BEGIN OPENSSH PRIVATE KEY-----\n{KEY_LINE}\n-----END OPENSSH PRIVATE KEY-----\n");
    create_secret_with(&client, "prod-ssh", "ssh-privatekey", &key).await;
    create_secret_with(&client, "prod-vault", "password", &format!("{VAULT_PASSWORD}\n")).await;
    let mut dir = cluster_dir(
        "prod",
        HOSTS,
        vec![entry("upgrade", "upgrade.yml", &[])],
        Some("prod-ssh"),
    );
    dir.settings.vault_password_secret = Some("prod-vault".into());
    let d = render(&dir, 1, &[]);
    apply_cluster(&client, NS, &d).await.unwrap();
    let ctl = start(&client, config(4));
    let name = op_name(&d, "upgrade");
    wait_phase(&client, &name, Phase::Running).await;

    // The run saves a new credential before it fails: kok knew nothing of it when it created the Job.
    let saved = json!({"data": {"kubeadm_certificate_key.creds": base64(CREDENTIAL)}});
    Api::<Secret>::namespaced(client.clone(), NS)
        .patch("prod-credentials", &PatchParams::default(), &Patch::Merge(&saved))
        .await
        .expect("credentials saved");
    let admin_conf = format!(
        "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: https://10.0.0.1:6443}}}}]\nusers: [{{name: admin, user: {{token: {ADMIN_TOKEN}}}}}]\n"
    );
    let saved = json!({"data": {"value": base64(&admin_conf)}});
    Api::<Secret>::namespaced(client.clone(), NS)
        .patch("prod-kubeconfig", &PatchParams::default(), &Patch::Merge(&saved))
        .await
        .expect("kubeconfig saved");
    let message = json!({
        "hosts": {"node1": {"ok": 2, "changed": 0, "failed": 1, "unreachable": 0, "skipped": 0}},
        "total": {"ok": 2, "changed": 0, "failed": 1, "unreachable": 0, "skipped": 0}, "hostCount": 1,
        "failure": {"step": "action: upgrade.yml", "play": "all", "task": format!("debug {VAULT_PASSWORD}"),
            "host": "node1",
            "message": format!("vault {VAULT_PASSWORD}, key {KEY_LINE}, credential {CREDENTIAL}, token {ADMIN_TOKEN}")},
    });
    fail_with(&server, &name, &message.to_string()).await;
    let done = wait_phase(&client, &name, Phase::Failed).await;

    let leaked = |text: &str| {
        [VAULT_PASSWORD, KEY_LINE, CREDENTIAL, ADMIN_TOKEN]
            .into_iter()
            .find(|s| text.contains(s))
    };
    let status = serde_json::to_string(&done.status).unwrap();
    assert_eq!(leaked(&status), None, "the status holds no secret: {status}");
    assert_eq!(
        description(&done),
        "failed at TASK [debug <redacted>] on node1: vault <redacted>, key <redacted>, credential <redacted>, token <redacted>",
        "the commit status to send says where the secrets were"
    );
    let (_, note) = wait_for("the Failed event", || async {
        event_notes(&client, &name)
            .await
            .into_iter()
            .find(|(reason, _)| reason == "Failed")
    })
    .await;
    assert_eq!(leaked(&note), None, "the Event holds no secret: {note}");
    assert!(note.contains("<redacted>"), "{note}");

    // The web view's log of that run.
    let job = job_name(&name);
    server.append_pod_log(
        NS,
        &format!("{job}-abcde"),
        &format!("TASK [debug]\n{KEY_LINE}\npassword: {VAULT_PASSWORD}\ncreds: {CREDENTIAL}\n"),
    );
    let logs = kok::web::logs::PodLogs::new(client.clone(), NS);
    let log = kok::web::logs::LogSource::read(&logs, &done)
        .await
        .expect("the run's log");
    assert_eq!(leaked(&log), None, "the log holds no secret: {log}");
    assert_eq!(
        log,
        "TASK [debug]\n<redacted>\npassword: <redacted>\ncreds: <redacted>\n"
    );
    ctl.stop().await;
}

fn base64(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

#[tokio::test]
async fn an_operation_that_names_kok_s_own_service_account_fails_without_a_job_and_others_run() {
    let server = server().await;
    let client = server.client();
    let mut own = cluster_dir("prod", HOSTS, vec![entry("upgrade", "upgrade.yml", &[])], None);
    own.settings.defaults.service_account = Some("kok".into());
    let mut other = cluster_dir("dev", HOSTS, vec![entry("upgrade", "upgrade.yml", &[])], None);
    other.settings.defaults.service_account = Some("dev-runner".into());
    let (own, other) = (render(&own, 1, &[]), render(&other, 1, &[]));
    apply_cluster(&client, NS, &own).await.unwrap();
    apply_cluster(&client, NS, &other).await.unwrap();
    let mut cfg = config(4);
    cfg.own_service_account = Some("kok".into());
    let ctl = start(&client, cfg);

    let name = op_name(&own, "upgrade");
    let failed = wait_phase(&client, &name, Phase::Failed).await;
    assert_eq!(
        failed.status.as_ref().and_then(|s| s.message.as_deref()),
        Some(
            "serviceAccount kok is kok's own ServiceAccount: a run may not get kok's rights; name another \
             one in cluster.yml or kok.yml, or leave serviceAccount out"
        )
    );
    let (_, note) = wait_for("the ServiceAccountRefused event", || async {
        event_notes(&client, &name)
            .await
            .into_iter()
            .find(|(reason, _)| reason == "ServiceAccountRefused")
    })
    .await;
    assert!(note.contains("kok's own ServiceAccount"), "{note}");
    let other_name = op_name(&other, "upgrade");
    wait_phase(&client, &other_name, Phase::Running).await;
    let jobs = Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), NS);
    assert!(
        jobs.get_opt(&job_name(&name)).await.unwrap().is_none(),
        "no Job runs as kok"
    );
    assert!(
        jobs.get_opt(&job_name(&other_name)).await.unwrap().is_some(),
        "another account runs"
    );
    ctl.stop().await;
}
