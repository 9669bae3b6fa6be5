//! The HTTP listener answers health, readiness, metrics and verified webhooks over loopback.

use std::time::Duration;

use kok::metrics::Metrics;
use kok::server::{self, Readiness, ServerState, WebhookSecret};
use kok::source::trigger::{self, sign, Provider, Reason, TriggerReceiver};
use tokio::sync::oneshot;

const SECRET: &str = "webhook-secret-123";

struct Running {
    base: String,
    readiness: std::sync::Arc<Readiness>,
    triggers: TriggerReceiver,
    metrics: Metrics,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), server::ServerError>>,
    http: reqwest::Client,
}

async fn start(secret: Option<&str>) -> Running {
    let listener = server::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let readiness = Readiness::new(Duration::from_secs(300));
    let metrics = Metrics::new();
    let (tx, triggers) = trigger::channel();
    let state = ServerState {
        readiness: readiness.clone(),
        metrics: metrics.clone(),
        webhook_secret: secret.map(WebhookSecret::new),
        trigger: Some(tx),
        web: None,
    };
    let (stop, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(server::serve(listener, state, async move {
        let _ = rx.await;
    }));
    Running {
        base,
        readiness,
        triggers,
        metrics,
        stop,
        task,
        http: reqwest::Client::new(),
    }
}

impl Running {
    async fn get(&self, path: &str) -> (u16, String) {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    async fn post(&self, path: &str, headers: &[(&str, String)], body: Vec<u8>) -> (u16, String) {
        let mut req = self.http.post(format!("{}{path}", self.base)).body(body);
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let r = req.send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn health_is_ok_and_readiness_follows_the_first_reconcile() {
    let s = start(None).await;
    assert_eq!(s.get("/healthz").await.0, 200);
    let (code, body) = s.get("/readyz").await;
    assert_eq!(code, 503);
    assert!(body.contains("first reconcile"), "{body}");
    s.readiness.mark_reconciled();
    assert_eq!(s.get("/readyz").await.0, 200);
    s.stop().await;
}

#[tokio::test]
async fn metrics_are_served_in_openmetrics_to_prometheus_and_in_text_format_to_others() {
    let s = start(None).await;
    s.metrics.poll("unchanged");
    s.metrics.status_delivery("git-notes", "delivered");
    let r = s
        .http
        .get(format!("{}/metrics", s.base))
        .header(
            "accept",
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let ct = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(
        ct.starts_with("application/openmetrics-text; version=1.0.0"),
        "{ct}"
    );
    let body = r.text().await.unwrap();
    assert!(body.ends_with("# EOF\n"), "{body}");
    assert!(body.contains("kok_polls_total{result=\"unchanged\"} 1"), "{body}");
    let r = s.http.get(format!("{}/metrics", s.base)).send().await.unwrap();
    let ct = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    let body = r.text().await.unwrap();
    assert!(body.contains("kok_polls_total{result=\"unchanged\"} 1"), "{body}");
    assert!(
        body.contains("kok_status_deliveries_total{sink=\"git-notes\",result=\"delivered\"} 1"),
        "{body}"
    );
    assert!(
        body.contains("# TYPE kok_reconcile_duration_seconds histogram"),
        "{body}"
    );

    // Asked for gzip (as Prometheus asks), the same text comes compressed.
    let r = s
        .http
        .get(format!("{}/metrics", s.base))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-encoding"], "gzip");
    assert_eq!(r.headers()["vary"], "Accept-Encoding");
    let gzipped = r.bytes().await.unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&gzipped[..]), &mut text).unwrap();
    assert!(
        text.contains("kok_polls_total{result=\"unchanged\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE kok_reconcile_duration_seconds histogram"),
        "{text}"
    );
    let r = s.http.get(format!("{}/metrics", s.base)).send().await.unwrap();
    assert!(
        r.headers().get("content-encoding").is_none(),
        "plain unless asked"
    );
    s.stop().await;
}

#[tokio::test]
async fn a_signed_github_webhook_is_accepted_and_asks_for_a_poll() {
    let mut s = start(Some(SECRET)).await;
    let body = br#"{"ref":"refs/heads/main"}"#.to_vec();
    let sig = format!("sha256={}", hex::encode(sign(&body, SECRET.as_bytes())));
    let (code, _) = s
        .post("/hooks/github", &[("x-hub-signature-256", sig)], body)
        .await;
    assert_eq!(code, 202);
    assert_eq!(s.triggers.try_recv(), Some(Reason::Webhook(Provider::GitHub)));
    let (code, _) = s
        .post(
            "/hooks/gitlab",
            &[("x-gitlab-token", SECRET.to_string())],
            b"{}".to_vec(),
        )
        .await;
    assert_eq!(code, 202);
    assert_eq!(s.triggers.try_recv(), Some(Reason::Webhook(Provider::GitLab)));
    s.stop().await;
}

#[tokio::test]
async fn bad_signatures_large_bodies_unknown_providers_and_wrong_methods_are_refused() {
    let mut s = start(Some(SECRET)).await;
    let body = b"{}".to_vec();
    let wrong = format!("sha256={}", hex::encode(sign(&body, b"not-the-secret")));
    let (code, text) = s
        .post("/hooks/github", &[("x-hub-signature-256", wrong)], body.clone())
        .await;
    assert_eq!(code, 401);
    assert!(!text.contains(SECRET));
    assert_eq!(
        s.post("/hooks/gitea", &[], body.clone()).await.0,
        401,
        "a missing signature is refused"
    );
    let big = vec![b'x'; trigger::MAX_WEBHOOK_BODY + 1];
    let sig = format!("sha256={}", hex::encode(sign(&big, SECRET.as_bytes())));
    assert_eq!(
        s.post("/hooks/generic", &[("x-kok-signature", sig)], big).await.0,
        413
    );
    assert_eq!(s.post("/hooks/bitbucket", &[], body.clone()).await.0, 404);
    assert_eq!(s.get("/hooks/github").await.0, 405);
    assert_eq!(s.triggers.try_recv(), None, "no refused webhook asked for a poll");
    s.stop().await;
}

#[tokio::test]
async fn webhooks_without_a_configured_secret_are_not_found() {
    let s = start(None).await;
    let (code, text) = s.post("/hooks/github", &[], b"{}".to_vec()).await;
    assert_eq!(code, 404);
    assert!(text.contains("--webhook-secret-file"), "{text}");
    s.stop().await;
}
