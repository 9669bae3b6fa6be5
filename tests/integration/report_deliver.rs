//! The delivery loop sends each desired commit status once, records it as reported, retries with
//! backoff, and resumes from the objects after a restart.

use crate::common::operation;
use crate::forge;

use std::sync::Arc;
use std::time::Duration;

use forge::{ForgeServer, Reply};
use k8s_openapi::api::core::v1::ConfigMap;
use kok::api::{ClusterOperation, CommitStatus, StatusState};
use kok::metrics::Metrics;
use kok::report::deliver::{SyncRecord, SYNC_CONFIGMAP};
use kok::report::{Backoff, Forge, ForgeSink, Reporter, Sink, Sinks, Token};
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use operation::{operation, NS};
use tokio::sync::oneshot;

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

fn status(context: &str, state: StatusState, description: &str) -> CommitStatus {
    CommitStatus {
        context: context.into(),
        state,
        description: description.into(),
        target_url: None,
        run: None,
    }
}

struct Harness {
    api: testkit::ApiServer,
    forge: ForgeServer,
    metrics: Metrics,
}

impl Harness {
    async fn start() -> Self {
        let api = testkit::ApiServer::start().await.unwrap();
        api.install_crds(&kok::api::crds()).await.unwrap();
        Harness {
            api,
            forge: ForgeServer::start().await,
            metrics: Metrics::new(),
        }
    }

    fn ops(&self) -> Api<ClusterOperation> {
        Api::namespaced(self.api.client(), NS)
    }

    /// Starts a reporter delivering to the recording GitHub server; dropping the sender stops it.
    fn reporter(
        &self,
        backoff: Backoff,
    ) -> (Arc<Reporter>, oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
        let sink = ForgeSink::new(
            Forge::GitHub,
            Some(&self.forge.url()),
            "acme/infra",
            &Token::new("t"),
        )
        .unwrap();
        let sinks = Sinks::new(vec![Arc::new(sink) as Arc<dyn Sink>], self.metrics.clone());
        let reporter = Reporter::new(self.api.client(), NS, sinks, backoff);
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(reporter.clone().run(async move {
            let _ = rx.await;
        }));
        (reporter, tx, task)
    }

    async fn create_with_desired(&self, name: &str, desired: &CommitStatus) {
        self.ops()
            .create(&PostParams::default(), &operation(name, SHA))
            .await
            .unwrap();
        self.set_desired(name, desired).await;
    }

    async fn set_desired(&self, name: &str, desired: &CommitStatus) {
        let patch = serde_json::json!({"status": {"phase": "Running", "desiredStatus": desired}});
        self.ops()
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Waits (bounded) until `name`'s reported status equals `expected`.
    async fn wait_reported(&self, name: &str, expected: &CommitStatus) -> ClusterOperation {
        for _ in 0..400 {
            let op = self.ops().get(name).await.unwrap();
            if op.status.as_ref().is_some_and(|s| s.has_reported(expected)) {
                return op;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("{name} never reported {expected:?}");
    }

    async fn wait_requests(&self, n: usize) {
        for _ in 0..400 {
            if self.forge.requests().len() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!(
            "the forge never received {n} requests: {:?}",
            self.forge.requests()
        );
    }
}

fn fast() -> Backoff {
    Backoff {
        initial: Duration::from_millis(10),
        max: Duration::from_millis(200),
    }
}

#[tokio::test]
async fn desired_status_is_delivered_once_and_not_again_after_a_restart() {
    let h = Harness::start().await;
    let running = status(
        "kok/prod-bj/add-node7",
        StatusState::Running,
        "running: scale.yml",
    );
    h.create_with_desired("add-node7", &running).await;

    let (_reporter, stop, task) = h.reporter(fast());
    let op = h.wait_reported("add-node7", &running).await;
    let st = op.status.unwrap();
    assert_eq!(st.report_attempts, None);
    // Recorded by its digest, not as a second copy of the status.
    assert_eq!(st.reported, None);
    assert_eq!(st.reported_digest.as_deref(), Some(running.digest().as_str()));
    assert_eq!(running.digest().len(), 16);
    assert_eq!(h.forge.requests().len(), 1);
    assert_eq!(h.forge.requests()[0].json()["state"], "pending");
    assert_eq!(h.forge.requests()[0].json()["description"], "running: scale.yml");
    let waits_none = "kok_status_deliveries_waiting{sink=\"github\"} 0\n";
    tokio::time::timeout(Duration::from_secs(5), async {
        while !h.metrics.render().contains(waits_none) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the sink waits for nothing once delivered:\n{}",
            h.metrics.render()
        )
    });

    // A new desired status is delivered too.
    let success = status(
        "kok/prod-bj/add-node7",
        StatusState::Success,
        "succeeded in 3m12s",
    );
    h.set_desired("add-node7", &success).await;
    h.wait_reported("add-node7", &success).await;
    assert_eq!(h.forge.requests().len(), 2);
    drop(stop);
    task.await.unwrap();

    // Restarted: the delivered status is not sent again; a new operation's status is.
    let (_reporter, stop, task) = h.reporter(fast());
    let queued = status("kok/prod-bj/upgrade", StatusState::Pending, "queued");
    h.create_with_desired("upgrade", &queued).await;
    h.wait_reported("upgrade", &queued).await;
    let contexts: Vec<String> = h
        .forge
        .requests()
        .iter()
        .map(|r| r.json()["context"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        contexts,
        [
            "kok/prod-bj/add-node7",
            "kok/prod-bj/add-node7",
            "kok/prod-bj/upgrade"
        ]
    );
    assert_eq!(h.metrics.status_deliveries("github", "delivered"), 3);
    drop(stop);
    task.await.unwrap();
}

#[tokio::test]
async fn a_server_error_then_created_is_delivered_once() {
    let h = Harness::start().await;
    h.forge.script([Reply::new(500, "oops")]);
    let queued = status("kok/prod-bj/install", StatusState::Pending, "queued");
    h.create_with_desired("install", &queued).await;
    let (_reporter, stop, task) = h.reporter(fast());
    let op = h.wait_reported("install", &queued).await;
    assert_eq!(
        op.status.unwrap().report_attempts,
        None,
        "attempts are reset once delivered"
    );
    assert_eq!(h.forge.requests().len(), 2);
    assert_eq!(h.metrics.status_deliveries("github", "retry"), 1);
    assert_eq!(h.metrics.status_deliveries("github", "delivered"), 1);
    drop(stop);
    task.await.unwrap();
}

#[tokio::test]
async fn retry_after_is_honoured_before_the_next_attempt() {
    let h = Harness::start().await;
    h.forge
        .script([Reply::new(429, "slow down").header("retry-after", "1")]);
    let queued = status("kok/prod-bj/install", StatusState::Pending, "queued");
    h.create_with_desired("install", &queued).await;
    let backoff = Backoff {
        initial: Duration::from_millis(1),
        max: Duration::from_millis(5),
    };
    let (_reporter, stop, task) = h.reporter(backoff);
    h.wait_requests(1).await;
    // With the 1 ms backoff alone, a second attempt would follow at once; Retry-After holds it back.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(h.forge.requests().len(), 1, "retried before Retry-After elapsed");
    let op = h.ops().get("install").await.unwrap();
    assert_eq!(op.status.unwrap().report_attempts, Some(1));
    h.wait_reported("install", &queued).await;
    assert_eq!(h.forge.requests().len(), 2);
    drop(stop);
    task.await.unwrap();
}

#[tokio::test]
async fn a_refused_status_counts_attempts_and_is_not_reported() {
    let h = Harness::start().await;
    h.forge.script([Reply::new(404, r#"{"message":"Not Found"}"#)]);
    let queued = status("kok/prod-bj/install", StatusState::Pending, "queued");
    h.create_with_desired("install", &queued).await;
    let backoff = Backoff {
        initial: Duration::from_millis(1),
        max: Duration::from_secs(60),
    };
    let (_reporter, stop, task) = h.reporter(backoff);
    for _ in 0..400 {
        let op = h.ops().get("install").await.unwrap();
        if op.status.as_ref().and_then(|s| s.report_attempts) == Some(1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let op = h.ops().get("install").await.unwrap();
    let st = op.status.unwrap();
    assert_eq!(st.report_attempts, Some(1));
    assert_eq!((st.reported, st.reported_digest), (None, None));
    assert_eq!(h.metrics.status_deliveries("github", "failed"), 1);
    drop(stop);
    task.await.unwrap();
}

#[tokio::test]
async fn sync_statuses_are_recorded_in_a_configmap_and_delivered_once() {
    let h = Harness::start().await;
    let (reporter, stop, task) = h.reporter(fast());
    let ok = status(
        "kok/sync",
        StatusState::Error,
        "clusters/prod-bj/hosts.yml:12: host \"node7\" is not defined",
    );
    reporter.deliver_sync(SHA, &ok).await.unwrap();
    h.wait_requests(1).await;
    let cms: Api<ConfigMap> = Api::namespaced(h.api.client(), NS);
    let mut record: Option<SyncRecord> = None;
    for _ in 0..400 {
        let cm = cms.get(SYNC_CONFIGMAP).await.unwrap();
        let r: SyncRecord = serde_json::from_str(&cm.data.unwrap()[SHA]).unwrap();
        if r.reported.is_some() {
            record = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let record = record.expect("the sync record is marked reported");
    assert_eq!(record.reported.as_ref(), Some(&ok));
    // Recording the same status again sends nothing.
    reporter.deliver_sync(SHA, &ok).await.unwrap();
    let r = &h.forge.requests()[0];
    assert_eq!(r.json()["context"], "kok/sync");
    assert_eq!(r.json()["state"], "error");
    drop(stop);
    task.await.unwrap();
    assert_eq!(h.forge.requests().len(), 1);
}

/// A sink that takes every status at once and without a limit, as the notes sink takes a batch.
struct Unlimited;

impl Sink for Unlimited {
    fn name(&self) -> &str {
        "unlimited"
    }

    fn deliver<'a>(
        &'a self,
        _commit: &'a str,
        _status: &'a CommitStatus,
    ) -> futures::future::BoxFuture<'a, Result<(), kok::report::DeliveryError>> {
        Box::pin(async { Ok(()) })
    }

    fn max_in_flight(&self) -> Option<usize> {
        None
    }
}

#[tokio::test]
async fn a_burst_of_deliveries_records_them_over_a_bounded_number_of_connections() {
    const OPS: usize = 120;
    let h = Harness::start().await;
    let desired = status("kok/prod/op", StatusState::Success, "done");
    for i in 0..OPS {
        h.create_with_desired(&format!("op{i}"), &desired).await;
    }
    // Every record write takes a while, so the deliveries' writes all wait at once.
    h.api.set_latency(Duration::from_millis(100));
    let before = h.api.connections();
    let sinks = Sinks::new(vec![Arc::new(Unlimited) as Arc<dyn Sink>], h.metrics.clone());
    let reporter = Reporter::new(h.api.client(), NS, sinks, fast());
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(reporter.run(async move {
        let _ = rx.await;
    }));
    let log = h.api.requests();
    for _ in 0..400 {
        if log.count("patch", "clusteroperations/status") >= OPS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    h.api.set_latency(Duration::ZERO);
    for i in [0, OPS / 2, OPS - 1] {
        h.wait_reported(&format!("op{i}"), &desired).await;
    }
    let opened = h.api.connections() - before;
    // The record writes (`RECORD_CONCURRENCY` at once), the reporter's watches and this test's own
    // reads: far fewer than one connection per delivery in flight.
    assert!(
        opened <= 30,
        "{opened} connections opened for {OPS} record writes"
    );
    drop(tx);
    task.await.unwrap();
}
