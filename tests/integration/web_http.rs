//! The web view over loopback: HTML with a Content-Security-Policy, GET only, and a live log by
//! Server-Sent Events that carries lines written after the page was opened.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use kok::api::{ClusterOperation, Phase};
use kok::web::logs::LogSource;
use kok::web::view::{Snapshot, View};
use kok::web::{Web, CONTENT_SECURITY_POLICY};

use crate::common::web;
use web::{operation, OP};

/// A view and a log that the test changes while the server reads them.
#[derive(Default)]
struct Moving {
    ops: Mutex<Snapshot>,
    log: Mutex<String>,
    version: AtomicU64,
}

impl View for Moving {
    fn clusters(&self) -> Vec<kok::api::Cluster> {
        self.ops.lock().unwrap().clusters()
    }
    fn operations_of(&self, cluster: &str) -> Vec<ClusterOperation> {
        self.ops.lock().unwrap().operations_of(cluster)
    }
    fn operation(&self, name: &str) -> Option<ClusterOperation> {
        self.ops.lock().unwrap().operation(name)
    }
    fn version(&self) -> u64 {
        self.version.load(Ordering::Relaxed)
    }
}

struct SharedLog(Arc<Moving>);

impl LogSource for SharedLog {
    fn read(&self, _op: &ClusterOperation) -> BoxFuture<'static, Option<String>> {
        let text = self.0.log.lock().unwrap().clone();
        Box::pin(async move { Some(text) })
    }
}

impl Moving {
    fn set_phase(&self, phase: Phase) {
        self.ops.lock().unwrap().operations = vec![operation(phase)];
        self.version.fetch_add(1, Ordering::Relaxed);
    }
}

/// Serves the web view of `state` on loopback; the server stops when the returned sender drops.
async fn serve(state: Arc<Moving>) -> (String, tokio::sync::watch::Sender<bool>) {
    web::serve(|stopping| kok::web::router(Web::new(state.clone(), Arc::new(SharedLog(state)), stopping)))
        .await
}

#[tokio::test]
async fn pages_are_html_with_a_policy_that_allows_no_inline_script_and_only_get_is_answered() {
    let state = Arc::new(Moving::default());
    state.set_phase(Phase::Succeeded);
    let (base, _stop) = serve(state).await;
    let http = reqwest::Client::new();
    for path in [
        "/",
        "/clusters/prod",
        &format!("/operations/{OP}"),
        "/commits/0123456789",
    ] {
        let r = http.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200, "{path}");
        let headers = r.headers().clone();
        assert_eq!(headers["content-type"], "text/html; charset=utf-8", "{path}");
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert_eq!(csp, CONTENT_SECURITY_POLICY);
        assert!(
            csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
            "{csp}"
        );
        assert_eq!(headers["x-content-type-options"], "nosniff");
        let body = r.text().await.unwrap();
        assert!(body.starts_with("<!doctype html>"), "{path}: {body}");
        assert!(!body.contains("<script>"), "no inline script on {path}");
    }
    let js = http.get(format!("{base}/assets/kok.js")).send().await.unwrap();
    assert_eq!(js.headers()["content-type"], "text/javascript; charset=utf-8");
    assert!(js.headers().contains_key("content-security-policy"));

    for path in ["/", &format!("/operations/{OP}")] {
        let r = http.post(format!("{base}{path}")).body("x").send().await.unwrap();
        assert_eq!(r.status().as_u16(), 405, "POST {path}");
        let r = http.delete(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 405, "DELETE {path}");
    }
    let r = http
        .get(format!("{base}/operations/nothing"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    let r = http.get(format!("{base}/rollouts/nothing")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 404, "a rollout kok does not know");
    assert_eq!(r.headers()["content-security-policy"], CONTENT_SECURITY_POLICY);
}

/// Reads the SSE body until `needle` has arrived; returns everything read.
async fn read_until(response: &mut reqwest::Response, needle: &str) -> String {
    let mut seen = String::new();
    while !seen.contains(needle) {
        match response.chunk().await.unwrap() {
            Some(chunk) => seen.push_str(&String::from_utf8_lossy(&chunk)),
            None => panic!("the stream ended before {needle:?}; it sent:\n{seen}"),
        }
    }
    seen
}

#[tokio::test]
async fn the_live_log_sends_lines_written_after_it_opened_and_ends_when_the_run_finishes() {
    let state = Arc::new(Moving::default());
    state.set_phase(Phase::Running);
    *state.log.lock().unwrap() = "TASK [one]\n".to_string();
    let (base, _stop) = serve(state.clone()).await;
    let mut stream = reqwest::get(format!("{base}/operations/{OP}/log?from=11"))
        .await
        .unwrap();
    assert_eq!(stream.headers()["content-type"], "text/event-stream");

    state.log.lock().unwrap().push_str("TASK [two]\nhalf a li");
    let seen = read_until(&mut stream, "TASK [two]").await;
    assert!(
        !seen.contains("TASK [one]"),
        "lines before ?from= are not sent again: {seen}"
    );
    assert!(
        seen.contains("id: 22"),
        "each event says where the log continues: {seen}"
    );

    state.log.lock().unwrap().push_str("ne\n");
    state.set_phase(Phase::Succeeded);
    let seen = read_until(&mut stream, "event: end").await;
    assert!(seen.contains("data: half a line"), "{seen}");
    assert!(
        stream.chunk().await.unwrap().is_none(),
        "the stream ends after `end`"
    );
}

#[tokio::test]
async fn pages_carry_the_version_they_show_and_events_say_when_the_view_moved_past_it() {
    let state = Arc::new(Moving::default());
    state.set_phase(Phase::Running);
    let (base, _stop) = serve(state.clone()).await;
    let page = reqwest::get(format!("{base}/"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains(r#"<body data-version="1">"#), "{page}");

    let mut behind = reqwest::get(format!("{base}/events?v=0")).await.unwrap();
    assert_eq!(behind.headers()["content-type"], "text/event-stream");
    read_until(&mut behind, "event: changed\ndata: 1").await;

    let mut current = reqwest::get(format!("{base}/events?v=1")).await.unwrap();
    state.set_phase(Phase::Succeeded);
    read_until(&mut current, "event: changed\ndata: 2").await;
}
