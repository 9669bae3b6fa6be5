//! Notifications against testkit and loopback receivers: each receiver type gets its format, once per
//! transition, within 2 s; a restart repeats nothing and loses nothing; a receiver that is down gets the
//! event later; a cluster selector picks the receivers; a flapping health check is damped.

use crate::common::receivers;
use crate::forge;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use forge::{ForgeServer, Reply};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kok::api::{Cluster, CommitStatus, RunFailure, RunRecord, StatusState};
use kok::layout::notifications::{EventKind, Receiver, ReceiverType};
use kok::metrics::Metrics;
use kok::report::notify::{Notifier, NOTIFICATIONS_CONFIGMAP};
use kok::report::Backoff;
use kube::api::{Api, PostParams};
use kube::runtime::{reflector, watcher};

const NS: &str = "kok-system";
const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
const HMAC_KEY: &str = "hmac-key-for-tests";

fn failed(cluster: &str) -> CommitStatus {
    CommitStatus {
        context: format!("kok/{cluster}/upgrade"),
        state: StatusState::Failure,
        description: "failed at TASK [swap : Stop if swap enabled] on node1: swap is on".into(),
        target_url: Some(format!(
            "https://kok.example/operations/{cluster}-upgrade-1a2b3c4d"
        )),
        run: Some(RunRecord {
            operation: None,
            summary: None,
            failure: Some(RunFailure {
                task: Some("swap : Stop if swap enabled".into()),
                host: Some("node1".into()),
                message: "swap is on".into(),
                ..RunFailure::default()
            }),
        }),
    }
}

fn receiver(name: &str, kind: ReceiverType, selector: &[(&str, &str)]) -> Receiver {
    Receiver {
        name: name.into(),
        kind,
        url_secret: format!("{name}-url"),
        events: Vec::new(),
        selector: selector
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

async fn url_secret(client: &kube::Client, name: &str, url: &str, hmac: Option<&str>) {
    let mut data = BTreeMap::from([("url".to_string(), url.to_string())]);
    if let Some(key) = hmac {
        data.insert("hmac".into(), key.into());
    }
    let mut secret = Secret::default();
    secret.metadata.name = Some(format!("{name}-url"));
    secret.string_data = Some(data);
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

fn cluster(name: &str, labels: &[(&str, &str)], healthy: Option<(&str, &str)>) -> Cluster {
    let mut value = serde_json::json!({
        "apiVersion": "kok.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": NS,
                     "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>()},
        "spec": {"hostsConfRef": {"name": "h"}, "varsConfRef": {"name": "v"},
                 "source": {"path": format!("clusters/{name}"), "revision": "main@sha1:x"}},
    });
    if let Some((status, since)) = healthy {
        value["status"] = serde_json::json!({"conditions": [{
            "type": "Healthy", "status": status, "reason": "R", "message": "node3 is not Ready",
            "lastTransitionTime": since,
        }]});
    }
    serde_json::from_value(value).expect("a Cluster")
}

struct Harness {
    api: testkit::ApiServer,
    metrics: Metrics,
    clusters: reflector::Store<Cluster>,
    writer: reflector::store::Writer<Cluster>,
}

impl Harness {
    async fn start(clusters: Vec<Cluster>) -> Self {
        let api = testkit::ApiServer::start().await.unwrap();
        api.install_crds(&kok::api::crds()).await.unwrap();
        let (store, mut writer) = reflector::store();
        for c in clusters {
            writer.apply_watcher_event(&watcher::Event::Apply(c));
        }
        Harness {
            api,
            metrics: Metrics::new(),
            clusters: store,
            writer,
        }
    }

    fn set_cluster(&mut self, c: Cluster) {
        self.writer.apply_watcher_event(&watcher::Event::Apply(c));
    }

    /// A notifier with `receivers`, running until the sender is dropped.
    fn notifier(
        &self,
        receivers: Vec<Receiver>,
        quiet: Duration,
    ) -> (
        Arc<Notifier>,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ) {
        let backoff = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(400),
        };
        let n = Notifier::new(self.api.client(), NS, self.metrics.clone()).with_timing(backoff, quiet);
        n.set_receivers(receivers);
        n.watch_clusters(self.clusters.clone());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(n.clone().run(async move {
            let _ = rx.await;
        }));
        (n, tx, task)
    }
}

/// Waits until `server` has `n` requests; panics after `within`.
async fn requests(server: &ForgeServer, n: usize, within: Duration) -> Vec<forge::Recorded> {
    let deadline = Instant::now() + within;
    loop {
        let got = server.requests();
        if got.len() >= n {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {n} requests within {within:?}",
            got.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn each_receiver_type_gets_its_format_within_two_seconds_and_once() {
    let h = Harness::start(vec![cluster("prod", &[("env", "prod")], None)]).await;
    let client = h.api.client();
    let (webhook, slack, teams) = (
        ForgeServer::start().await,
        ForgeServer::start().await,
        ForgeServer::start().await,
    );
    teams.respond_with(|_| Some(Reply::new(202, "")));
    url_secret(
        &client,
        "hook",
        &format!("{}/events", webhook.url()),
        Some(HMAC_KEY),
    )
    .await;
    url_secret(&client, "chat", &format!("{}/services/T/B/X", slack.url()), None).await;
    url_secret(&client, "team", &format!("{}/workflows/run", teams.url()), None).await;
    let (n, stop, task) = h.notifier(
        vec![
            receiver("hook", ReceiverType::Webhook, &[]),
            receiver("chat", ReceiverType::Slack, &[("env", "prod")]),
            receiver("team", ReceiverType::MsTeams, &[]),
        ],
        Duration::from_secs(600),
    );
    let sink = n.sink();

    let started = Instant::now();
    sink.deliver(SHA, &failed("prod")).await.unwrap();
    let hooked = requests(&webhook, 1, Duration::from_secs(2)).await;
    requests(&slack, 1, Duration::from_secs(2)).await;
    requests(&teams, 1, Duration::from_secs(2)).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    let r = &hooked[0];
    let event = receivers::cloud_event(
        &r.header("content-type"),
        &r.header("x-kok-signature"),
        &r.body,
        HMAC_KEY.as_bytes(),
    );
    assert_eq!(event["type"], "dev.kok.operation-failed");
    assert_eq!(event["source"], "kok/kok-system");
    let data = &event["data"];
    assert_eq!(
        (data["cluster"].as_str(), data["operation"].as_str()),
        (Some("prod"), Some("upgrade"))
    );
    assert_eq!(data["commit"], SHA);
    assert_eq!(data["failure"]["task"], "swap : Stop if swap enabled");
    assert_eq!(data["failure"]["host"], "node1");
    assert_eq!(data["failure"]["message"], "swap is on");
    assert_eq!(
        data["url"],
        "https://kok.example/operations/prod-upgrade-1a2b3c4d"
    );

    let text = receivers::slack(&slack.requests()[0].json());
    for wanted in [
        "prod/upgrade failed",
        "*Cluster*\\nprod",
        "0123456789ab",
        "node1",
        "Open the run",
    ] {
        assert!(text.contains(wanted), "{wanted} not in {text}");
    }
    let card = receivers::teams(&teams.requests()[0].json());
    assert!(card.to_string().contains("swap : Stop if swap enabled"), "{card}");
    assert_eq!(
        card["actions"][0]["url"],
        "https://kok.example/operations/prod-upgrade-1a2b3c4d"
    );

    // The same status again (a resync, or the reporter retrying another sink) is no new event.
    sink.deliver(SHA, &failed("prod")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        (
            webhook.requests().len(),
            slack.requests().len(),
            teams.requests().len()
        ),
        (1, 1, 1)
    );
    assert_eq!(h.metrics.notifications("hook", "delivered"), 1);
    assert!(
        h.metrics
            .render()
            .contains("kok_notifications_waiting{receiver=\"hook\"} 0\n"),
        "{}",
        h.metrics.render()
    );
    drop(stop);
    task.await.unwrap();
}

#[tokio::test]
async fn a_restart_repeats_nothing_and_a_receiver_that_was_down_gets_the_event_later() {
    let h = Harness::start(vec![cluster("prod", &[], None)]).await;
    let client = h.api.client();
    let hook = ForgeServer::start().await;
    url_secret(&client, "hook", &hook.url(), Some(HMAC_KEY)).await;
    // Down for two attempts, the second with a Retry-After.
    hook.script([
        Reply::new(503, "down"),
        Reply::new(429, "slow down").header("Retry-After", "1"),
    ]);
    let receivers = vec![receiver("hook", ReceiverType::Webhook, &[])];
    let (n, stop, task) = h.notifier(receivers.clone(), Duration::from_secs(600));
    n.sink().deliver(SHA, &failed("prod")).await.unwrap();
    requests(&hook, 2, Duration::from_secs(3)).await;
    assert!(
        h.metrics
            .render()
            .contains("kok_notifications_waiting{receiver=\"hook\"} 1\n"),
        "{}",
        h.metrics.render()
    );
    // kok stops while the receiver is down: the event is in the outbox.
    drop(stop);
    task.await.unwrap();
    let outbox = Api::<ConfigMap>::namespaced(client.clone(), NS)
        .get(NOTIFICATIONS_CONFIGMAP)
        .await
        .unwrap();
    assert_eq!(outbox.data.unwrap().len(), 1);

    // A new kok takes the same outbox: the event goes out once, and the reporter handing the sink the
    // same status again (it does after a restart until the status is recorded) adds nothing.
    let (n2, stop2, task2) = h.notifier(receivers, Duration::from_secs(600));
    n2.sink().deliver(SHA, &failed("prod")).await.unwrap();
    let got = requests(&hook, 3, Duration::from_secs(5)).await;
    let first: serde_json::Value = serde_json::from_slice(&got[0].body).unwrap();
    let last: serde_json::Value = serde_json::from_slice(&got[2].body).unwrap();
    assert_eq!(first["id"], last["id"], "the retried event is the same event");
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(hook.requests().len(), 3, "delivered once, never again");
    assert_eq!(h.metrics.notifications("hook", "retry"), 2);
    assert_eq!(h.metrics.notifications("hook", "delivered"), 1);
    drop(stop2);
    task2.await.unwrap();
}

#[tokio::test]
async fn a_flapping_health_check_sends_one_event_per_kind_per_quiet_time() {
    let mut h = Harness::start(vec![cluster("prod", &[], Some(("True", "2026-11-28T01:00:00Z")))]).await;
    let client = h.api.client();
    let hook = ForgeServer::start().await;
    url_secret(&client, "hook", &hook.url(), Some(HMAC_KEY)).await;
    let quiet = Duration::from_secs(4);
    let (_n, stop, task) = h.notifier(vec![receiver("hook", ReceiverType::Webhook, &[])], quiet);
    let kinds = |hook: &ForgeServer| -> Vec<String> {
        hook.requests()
            .iter()
            .map(|r| r.json()["type"].as_str().unwrap().to_string())
            .collect()
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        kinds(&hook).is_empty(),
        "a cluster first seen healthy says nothing"
    );

    let start = Instant::now();
    h.set_cluster(cluster("prod", &[], Some(("False", "2026-11-28T02:00:00Z"))));
    requests(&hook, 1, Duration::from_secs(3)).await;
    h.set_cluster(cluster("prod", &[], Some(("True", "2026-11-28T02:01:00Z"))));
    requests(&hook, 2, Duration::from_secs(3)).await;
    // Down again within the quiet time: it waits...
    h.set_cluster(cluster("prod", &[], Some(("False", "2026-11-28T02:02:00Z"))));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        kinds(&hook),
        ["dev.kok.health-degraded", "dev.kok.health-recovered"]
    );
    // ...and goes out once the quiet time has passed, the cluster still unhealthy.
    let got = requests(&hook, 3, Duration::from_secs(6)).await;
    assert!(start.elapsed() >= quiet, "{:?}", start.elapsed());
    assert_eq!(got[2].json()["type"], "dev.kok.health-degraded");
    assert_eq!(got[2].json()["data"]["cluster"], "prod");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(hook.requests().len(), 3);
    drop(stop);
    task.await.unwrap();
}

#[test]
fn every_event_kind_is_spelled_as_the_docs_list_it() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operating.md")).unwrap();
    for kind in EventKind::ALL {
        assert!(
            readme.contains(&format!("`{}`", kind.as_str())),
            "docs/operating.md lacks `{}`",
            kind.as_str()
        );
    }
}
