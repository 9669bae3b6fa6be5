//! Pod logs: what a test says a pod's container printed, served on `GET .../pods/<name>/log` as the
//! kubelet would serve it, whole, or followed (`follow=true`) until the test ends the log.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::sync::watch;

/// A log so far, and whether its container has ended.
#[derive(Debug, Clone, Default)]
struct Log {
    text: String,
    ended: bool,
}

/// Every pod's log, by namespace and pod name.
#[derive(Debug, Default)]
pub struct PodLogs {
    logs: Mutex<HashMap<(String, String), watch::Sender<Log>>>,
}

impl PodLogs {
    fn with<T>(&self, namespace: &str, pod: &str, f: impl FnOnce(&watch::Sender<Log>) -> T) -> T {
        let mut logs = self.logs.lock().unwrap_or_else(|p| p.into_inner());
        let log = logs
            .entry((namespace.to_string(), pod.to_string()))
            .or_insert_with(|| watch::channel(Log::default()).0);
        f(log)
    }

    /// Adds `text` to the end of the pod's log (followers get it at once).
    pub fn append(&self, namespace: &str, pod: &str, text: &str) {
        self.with(namespace, pod, |log| {
            log.send_modify(|log| log.text.push_str(text))
        });
    }

    /// Ends the pod's log, as its container's end does: followers get the rest and their stream ends.
    pub fn end(&self, namespace: &str, pod: &str) {
        self.with(namespace, pod, |log| log.send_modify(|log| log.ended = true));
    }

    /// The answer to a log request: the text so far (`text/plain`), or with `follow` a stream of it and
    /// of what is appended until the log ends or `shutdown` turns true.
    pub fn response(
        &self,
        namespace: &str,
        pod: &str,
        follow: bool,
        shutdown: watch::Receiver<bool>,
    ) -> Response {
        let mut rx = self.with(namespace, pod, watch::Sender::subscribe);
        let plain = [(header::CONTENT_TYPE, "text/plain")];
        if !follow {
            let text = rx.borrow_and_update().text.clone();
            return (StatusCode::OK, plain, text).into_response();
        }
        let chunks = futures::stream::unfold(
            (rx, shutdown, 0usize),
            |(mut rx, mut shutdown, sent)| async move {
                loop {
                    let (chunk, ended) = {
                        let log = rx.borrow_and_update();
                        (log.text.get(sent..).unwrap_or_default().to_string(), log.ended)
                    };
                    if !chunk.is_empty() {
                        let next = sent + chunk.len();
                        return Some((Ok::<_, std::io::Error>(Bytes::from(chunk)), (rx, shutdown, next)));
                    }
                    if ended || *shutdown.borrow() {
                        return None;
                    }
                    tokio::select! {
                        changed = rx.changed() => if changed.is_err() { return None },
                        _ = shutdown.changed() => {}
                    }
                }
            },
        );
        (StatusCode::OK, plain, Body::from_stream(chunks)).into_response()
    }
}
