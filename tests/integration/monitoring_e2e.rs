//! kok's alerts and dashboard on the real thing: a real Prometheus on loopback scrapes `kok run --local`
//! and evaluates deploy/monitoring/kok.rules.yml, a real Alertmanager takes the alerts. A rollout over
//! two clusters fails on purpose on its canary: KokOperationFailed (with the cluster and operation) and
//! KokRolloutHalted fire in Alertmanager, kok's webhook receiver gets the events, and after a fixing
//! commit both alerts resolve. Then every PromQL query of the dashboard runs against that Prometheus
//! over the test's time and returns numbers.
//!
//! One test, so that the set-up (two real servers, real ansible runs) is paid once.

use crate::common::prometheus;
use crate::common::receivers;
use crate::common::tls;
use crate::forge;
use crate::local_e2e_support;

use std::collections::BTreeMap;
use std::time::Duration;

use forge::ForgeServer;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use local_e2e_support::{
    alertmanager_or_skip, ansible_or_skip, command, kubectl_or_skip, prometheus_or_skip, LocalKok, LocalRepo,
    NS,
};
use prometheus::{free_port, has_numbers, Monitoring};
use serde_json::{json, Value};

/// The rollout and its operation's id.
const ROLLOUT: &str = "bump";
/// The canary, which fails until its `<marks>/r1.fail` is gone, and the cluster after it.
const CLUSTERS: [&str; 2] = ["r1", "r2"];
const HMAC_KEY: &str = "monitoring-e2e-hmac";

/// Counts its run, leaves the workload cluster's kubeconfig as kubespray's `kubeconfig_localhost` does
/// (kok saves it and checks the cluster's health with it), and fails while `<marks>/<mark>.fail` exists.
fn playbook(kubeconfig: &std::path::Path) -> String {
    format!(
        r#"- name: Rollout step
  hosts: all
  become: false
  gather_facts: false
  tasks:
    - name: Count this run
      ansible.builtin.shell: echo run >> "{{{{ marks }}}}/{{{{ mark }}}}.runs"
    - name: The cluster's kubeconfig
      ansible.builtin.copy:
        dest: "{{{{ inventory_dir }}}}/artifacts/admin.conf"
        src: "{}"
        mode: "0600"
    - name: Fail while told to
      ansible.builtin.fail:
        msg: "{{{{ mark }}}} is told to fail"
      when: (marks + '/' + mark + '.fail') is exists
"#,
        kubeconfig.display()
    )
}

fn rollout_yml(rerun: u64) -> String {
    format!(
        "operation:\n  id: {ROLLOUT}\n  action: playbooks/rollout.yml\n  verify: none\n\
         clusters:\n  selector: {{fleet: e2e}}\n\
         waves:\n  - name: canary\n    clusters: [r1]\n  - name: rest\n\
         maxFailures: 0\nrerun: {rerun}\n"
    )
}

const KOK_YML: &str = "notifications:\n  - name: oncall\n    type: webhook\n    urlSecret: oncall-url\n    \
                       events: [operation-failed, rollout-halted, rollout-finished]\n    \
                       clusters: {selector: {fleet: e2e}}\n";

/// The active alert named `name` in Alertmanager whose labels include `labels`.
fn find<'a>(alerts: &'a [Value], name: &str, labels: &[(&str, &str)]) -> Option<&'a Value> {
    alerts
        .iter()
        .find(|a| a["labels"]["alertname"] == name && labels.iter().all(|(k, v)| a["labels"][*k] == *v))
}

/// Alertmanager's webhook posts to `server`: (status, alertname, labels) of each alert in each post.
fn posted(server: &ForgeServer) -> Vec<(String, String, Value)> {
    server
        .requests()
        .iter()
        .filter_map(|r| serde_json::from_slice::<Value>(&r.body).ok())
        .flat_map(|body| body["alerts"].as_array().cloned().unwrap_or_default())
        .map(|a| {
            (
                a["status"].as_str().unwrap_or_default().to_string(),
                a["labels"]["alertname"].as_str().unwrap_or_default().to_string(),
                a["labels"].clone(),
            )
        })
        .collect()
}

/// Every PromQL query of the dashboard, with Grafana's interval variables replaced.
fn dashboard_queries() -> Vec<(String, String)> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/monitoring/grafana-dashboard.json"
    );
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"]
                .as_str()
                .unwrap()
                .replace("$__rate_interval", "30s");
            queries.push((panel["title"].as_str().unwrap().to_string(), expr));
        }
    }
    queries
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_operation_fires_in_alertmanager_and_resolves_after_the_fixing_commit() {
    let test = "a_failed_operation_fires_in_alertmanager_and_resolves_after_the_fixing_commit";
    if !ansible_or_skip(test) || !prometheus_or_skip(test) || !alertmanager_or_skip(test) {
        return;
    }
    let started = jiff::Timestamp::now().as_millisecond() as f64 / 1000.0;

    // The workload cluster both clusters' kubeconfig points at: one Ready node, localhost.
    let workload = testkit::ApiServer::start().await.unwrap();
    let nodes: Api<Node> = Api::all(workload.client());
    let mut node = Node::default();
    node.metadata.name = Some("localhost".into());
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let ready =
        json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}});
    nodes
        .patch_status("localhost", &PatchParams::default(), &Patch::Merge(&ready))
        .await
        .unwrap();

    // The repository: two clusters of one fleet, a rollout over them, a notification receiver.
    let repo = LocalRepo::new();
    std::fs::create_dir_all(repo.path().join("rollouts")).unwrap();
    repo.write("playbooks/rollout.yml", &playbook(workload.kubeconfig_path()));
    for cluster in CLUSTERS {
        repo.write_cluster(cluster);
        let vars = std::fs::read_to_string(repo.path().join(format!("clusters/{cluster}/vars.yml"))).unwrap();
        repo.write(
            &format!("clusters/{cluster}/vars.yml"),
            &format!("{vars}mark: {cluster}\n"),
        );
        repo.write(
            &format!("clusters/{cluster}/cluster.yml"),
            "labels: {fleet: e2e}\n",
        );
    }
    repo.write("kok.yml", KOK_YML);
    repo.commit("two clusters and a receiver");

    let receiver = ForgeServer::start().await;
    let alerts_hook = ForgeServer::start().await;
    let kok_port = free_port();
    let listen = format!("127.0.0.1:{kok_port}");
    let mut kok = LocalKok::start_with(
        &repo,
        &[
            "--listen",
            &listen,
            "--health-interval",
            "1s",
            "--web-url",
            "http://127.0.0.1:9/kok",
        ],
    );
    let client = kok.client(&repo).await;
    let mut secret = Secret::default();
    secret.metadata.name = Some("oncall-url".into());
    secret.string_data = Some(BTreeMap::from([
        ("url".to_string(), format!("{}/kok-events", receiver.url())),
        ("hmac".to_string(), HMAC_KEY.to_string()),
    ]));
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();

    let rules = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/monitoring/kok.rules.yml");
    let monitoring = Monitoring::start(
        std::slice::from_ref(&listen),
        &rules,
        &format!("{}/alerts", alerts_hook.url()),
    )
    .await;
    monitoring
        .wait("Prometheus to scrape kok", Duration::from_secs(30), || async {
            (monitoring.targets_health().await == ["up"]).then_some(())
        })
        .await;

    // The canary fails on purpose.
    std::fs::write(repo.marks().join("r1.fail"), "").unwrap();
    repo.write(&format!("rollouts/{ROLLOUT}.yml"), &rollout_yml(0));
    let failing = repo.commit("rollout bump");

    let patience = Duration::from_secs(120);
    let alerts = monitoring
        .wait(
            "KokOperationFailed and KokRolloutHalted in Alertmanager",
            patience,
            || async {
                let alerts = monitoring.active_alerts().await;
                let failed = find(
                    &alerts,
                    "KokOperationFailed",
                    &[("cluster", "r1"), ("operation", ROLLOUT)],
                );
                let halted = find(&alerts, "KokRolloutHalted", &[("rollout", ROLLOUT)]);
                (failed.is_some() && halted.is_some()).then_some(alerts)
            },
        )
        .await;
    let failed = find(&alerts, "KokOperationFailed", &[("cluster", "r1")]).unwrap();
    assert_eq!(failed["labels"]["commit"], &failing[..12]);
    assert_eq!(failed["labels"]["severity"], "critical");
    let description = failed["annotations"]["description"].as_str().unwrap();
    assert!(
        description.contains("Operation bump of cluster r1 failed"),
        "{description}"
    );
    assert_eq!(
        failed["annotations"]["runbook_url"],
        "https://kok.dev/docs/runbooks#kokoperationfailed"
    );
    monitoring
        .wait(
            "Alertmanager's webhook to post the firing alert",
            Duration::from_secs(20),
            || async {
                posted(&alerts_hook)
                    .iter()
                    .any(|(status, name, labels)| {
                        status == "firing" && name == "KokOperationFailed" && labels["cluster"] == "r1"
                    })
                    .then_some(())
            },
        )
        .await;

    // kok's own receiver got the failure and the halt, signed, each once.
    let events = monitoring
        .wait(
            "kok's notifications of the failure and the halt",
            Duration::from_secs(20),
            || async {
                let events: Vec<Value> = receiver
                    .requests()
                    .iter()
                    .map(|r| {
                        receivers::cloud_event(
                            &r.header("content-type"),
                            &r.header("x-kok-signature"),
                            &r.body,
                            HMAC_KEY.as_bytes(),
                        )
                    })
                    .collect();
                let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
                (types.contains(&"dev.kok.operation-failed") && types.contains(&"dev.kok.rollout-halted"))
                    .then_some(events)
            },
        )
        .await;
    let failure = events
        .iter()
        .find(|e| e["type"] == "dev.kok.operation-failed")
        .unwrap();
    assert_eq!(failure["data"]["cluster"], "r1");
    assert_eq!(failure["data"]["operation"], ROLLOUT);
    assert_eq!(failure["data"]["commit"], failing.as_str());
    assert_eq!(failure["data"]["failure"]["task"], "Fail while told to");
    assert_eq!(failure["data"]["failure"]["message"], "r1 is told to fail");

    // The fixing commit: the cause gone, the rollout's rerun bumped.
    std::fs::remove_file(repo.marks().join("r1.fail")).unwrap();
    repo.write(&format!("rollouts/{ROLLOUT}.yml"), &rollout_yml(1));
    repo.commit("rollout bump: rerun");
    monitoring
        .wait("both alerts to resolve in Alertmanager", patience, || async {
            let alerts = monitoring.active_alerts().await;
            let gone = find(&alerts, "KokOperationFailed", &[]).is_none()
                && find(&alerts, "KokRolloutHalted", &[]).is_none();
            let resolved = posted(&alerts_hook).iter().any(|(status, name, labels)| {
                status == "resolved" && name == "KokOperationFailed" && labels["cluster"] == "r1"
            });
            (gone && resolved).then_some(())
        })
        .await;
    monitoring
        .wait(
            "the rollout's end to reach kok's receiver",
            Duration::from_secs(60),
            || async {
                receiver
                    .requests()
                    .iter()
                    .any(|r| r.json()["type"] == "dev.kok.rollout-finished")
                    .then_some(())
            },
        )
        .await;
    let failures = receiver
        .requests()
        .iter()
        .filter(|r| r.json()["type"] == "dev.kok.operation-failed")
        .count();
    assert_eq!(failures, 1, "one event per transition");

    // A few more scrapes with the fleet at rest, then every dashboard query over the whole test.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut empty = Vec::new();
    for (title, expr) in dashboard_queries() {
        match monitoring.query_range(&expr, started).await {
            Ok(result) if has_numbers(&result) => {}
            Ok(_) => empty.push(format!("{title}: {expr}")),
            Err(e) => empty.push(format!("{title}: {e}")),
        }
    }
    assert!(
        empty.is_empty(),
        "dashboard queries that show nothing:\n{}\n{}",
        empty.join("\n"),
        monitoring.logs()
    );
    assert!(kok.stop(), "kok stops cleanly; its log:\n{}", kok.log());
}

/// A cluster whose API server presents a certificate (made by openssl, valid 10 days) on a real TLS
/// endpoint: the health round reads it, `CertificatesValid` is False in `kubectl get clusters -o wide` and
/// in `kok status`, and KokClusterCertificateExpiring fires on a real Prometheus with the cluster and the
/// time left.
#[tokio::test(flavor = "multi_thread")]
async fn an_api_server_certificate_that_expires_in_ten_days_is_false_in_kubectl_and_kok_status_and_fires() {
    let test =
        "an_api_server_certificate_that_expires_in_ten_days_is_false_in_kubectl_and_kok_status_and_fires";
    if !prometheus_or_skip(test) || !alertmanager_or_skip(test) || !kubectl_or_skip(test) {
        return;
    }
    const CLUSTER: &str = "expiring";
    let started = jiff::Timestamp::now().as_second() as f64;
    let certificates = tls::Certificates::api_server(10);
    let workload = testkit::ApiServer::start().await.unwrap();
    let port = tls::proxy(&certificates, format!("127.0.0.1:{}", workload.port())).await;
    let plain = std::fs::read_to_string(workload.kubeconfig_path()).unwrap();
    let kubeconfig = tls::kubeconfig(&plain, port, &certificates);

    // The cluster names the Secret kok reaches it with: no run is needed before its health is checked.
    let repo = LocalRepo::new();
    repo.write_cluster(CLUSTER);
    repo.write(
        &format!("clusters/{CLUSTER}/cluster.yml"),
        "kubeconfigSecret: expiring-kubeconfig\n",
    );
    repo.commit("a cluster whose API server certificate expires in 10 days");
    let kok_port = free_port();
    let listen = format!("127.0.0.1:{kok_port}");
    let mut kok = LocalKok::start_with(&repo, &["--listen", &listen, "--health-interval", "1s"]);
    let client = kok.client(&repo).await;
    let mut secret = Secret::default();
    secret.metadata.name = Some("expiring-kubeconfig".into());
    secret.string_data = Some(BTreeMap::from([("value".to_string(), kubeconfig)]));
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();

    let alerts_hook = ForgeServer::start().await;
    let rules = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/monitoring/kok.rules.yml");
    let monitoring = Monitoring::start(
        std::slice::from_ref(&listen),
        &rules,
        &format!("{}/alerts", alerts_hook.url()),
    )
    .await;
    let alerts: Value = monitoring
        .wait(
            "KokClusterCertificateExpiring for the cluster in Alertmanager",
            Duration::from_secs(90),
            || async {
                let alerts = monitoring.active_alerts().await;
                find(&alerts, "KokClusterCertificateExpiring", &[("cluster", CLUSTER)]).cloned()
            },
        )
        .await;
    let alert = &alerts;
    let summary = alert["annotations"]["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("kok: a certificate of cluster expiring expires in 9d ")
            || summary.starts_with("kok: a certificate of cluster expiring expires in 10d "),
        "{summary}"
    );
    assert_eq!(
        alert["annotations"]["runbook_url"],
        "https://kok.dev/docs/runbooks#kokclustercertificateexpiring"
    );
    // The series itself is the certificate's notAfter, as openssl says it.
    let query = format!("kok_cluster_certificate_expiry_timestamp_seconds{{cluster=\"{CLUSTER}\"}}");
    let seconds: f64 = monitoring
        .wait(
            "the expiry series in Prometheus",
            Duration::from_secs(20),
            || async {
                let result = monitoring.query_range(&query, started).await.ok()?;
                result.first()?["values"][0][1].as_str()?.parse().ok()
            },
        )
        .await;
    let said = jiff::Timestamp::from_second(seconds as i64).unwrap();
    let end_date = certificates.end_date();
    assert!(
        end_date.contains(&said.strftime("%H:%M:%S").to_string())
            && end_date.contains(&said.strftime("%Y").to_string()),
        "openssl says {end_date}, the metric {said}"
    );

    // kubectl -o wide shows CertificatesValid and the date.
    let out = command("kubectl")
        .env("KUBECONFIG", repo.state_dir().join("kubeconfig"))
        .arg("--cache-dir")
        .arg(repo.scratch("kube-cache"))
        .args(["-n", NS, "get", "clusters", "-o", "wide"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Cells are read under their headers: the empty cells of a cluster without operations shift kubectl's
    // columns for a reader that splits on spaces.
    let lines: Vec<&str> = text.lines().collect();
    let row = lines
        .iter()
        .find(|l| l.starts_with(CLUSTER))
        .expect("the cluster's row");
    let cell = |name: &str| -> String {
        let at = lines[0].find(name).unwrap_or_else(|| panic!("{name}: {text}"));
        row[at..]
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(cell("CERTIFICATES"), "False", "{text}");
    assert_eq!(
        cell("EXPIRES"),
        said.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        "{text}"
    );

    // kok status shows the days left and CertificatesValid=False; its JSON, the condition's message.
    let state = repo.state_dir().display().to_string();
    let (ok, out, err) = repo.kok(&["status", "--state-dir", &state]);
    assert!(ok, "{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with(CLUSTER))
        .expect("the cluster's line");
    assert!(
        line.contains("9d CertificatesValid=False") || line.contains("10d CertificatesValid=False"),
        "{out}"
    );
    let (ok, out, err) = repo.kok(&["status", "--state-dir", &state, "-o", "json", CLUSTER]);
    assert!(ok, "{err}");
    let rows: Value = serde_json::from_str(&out).unwrap();
    let message = rows[0]["certificates"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("the API server's certificate \"kube-apiserver\" expires on ")
            && message.ends_with(
                "inside the 30-day window: renew the cluster's certificates (docs/day-two.md#renew-certificates)"
            ),
        "{message}"
    );
    assert!(kok.stop(), "kok stops cleanly; its log:\n{}", kok.log());
}
