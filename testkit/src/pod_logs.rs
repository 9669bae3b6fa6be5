//! `GET .../pods/<name>/log` as kube-apiserver answers it, with the log from a node's [`Kubelet`].
//!
//! The order is the real server's: the options are read and checked first ([`LogOptions::parse`]: 400
//! for what does not parse, 422 `PodLogOptions` for what is out of range, even for a pod that does not
//! exist), then the pod (404), its container (400), its node: a pod with no `nodeName` answers 204 with
//! no body; a node with a registered kubelet serves the log; otherwise the Node must exist (404 naming
//! it under kind `pods`) and have an address (500), and testkit has no kubelet to reach there.
//!
//! The kubelet gives a container's lines with the time each was written; `tailLines`, `sinceSeconds` /
//! `sinceTime`, `timestamps`, `limitBytes` and `follow` are applied here, as the kubelet applies them,
//! the same for every kubelet. A test's pods get their logs from [`PodLogs`], fed by
//! [`crate::ApiServer::append_pod_log`]; a program registers its own kubelet for a node with
//! [`crate::ApiServer::set_kubelet`] (kok's local mode serves its runs' log files so).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, BoxStream, StreamExt};
use serde_json::Value;
use tokio::sync::watch;

use crate::errors::{cause, ApiError};

/// One line of a container's log (with its newline, unless the container has not finished it) and when
/// it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// When the line was written.
    pub time: jiff::Timestamp,
    /// The line.
    pub text: Bytes,
}

/// A container's log as its kubelet answers: the lines written so far, and what comes after them.
pub struct ContainerLog {
    /// The lines written so far.
    pub lines: Vec<LogLine>,
    /// The lines written after them, as they come, ending when the container ends; `None` when it has
    /// ended. Read only when the client follows (`follow=true`).
    pub rest: Option<BoxStream<'static, LogLine>>,
}

/// The log side of a node's kubelet.
pub trait Kubelet: Send + Sync {
    /// The log of container `container` of `pod` (the stored Pod, on this kubelet's node); an error is
    /// answered as it is (the container has not started, for example).
    fn container_log(&self, pod: &Value, container: &str) -> Result<ContainerLog, ApiError>;
}

/// What a `pods/<name>/log` request asks for (`PodLogOptions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// `container`.
    pub container: Option<String>,
    /// `follow`.
    pub follow: bool,
    /// `previous`.
    pub previous: bool,
    /// `timestamps`.
    pub timestamps: bool,
    /// `tailLines`.
    pub tail_lines: Option<i64>,
    /// `limitBytes`.
    pub limit_bytes: Option<i64>,
    /// `sinceSeconds`.
    pub since_seconds: Option<i64>,
    /// `sinceTime`.
    pub since_time: Option<jiff::Timestamp>,
}

/// Go's `strconv.ParseBool`: what does not parse is left unset, as the server leaves it.
fn flag(q: &HashMap<String, String>, key: &str) -> bool {
    matches!(
        q.get(key).map(String::as_str),
        Some("1" | "t" | "T" | "TRUE" | "true" | "True")
    )
}

fn integer(q: &HashMap<String, String>, key: &str) -> Result<Option<i64>, ApiError> {
    let Some(raw) = q.get(key) else {
        return Ok(None);
    };
    raw.parse::<i64>().map(Some).map_err(|e| {
        let why = match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => "value out of range",
            _ => "invalid syntax",
        };
        ApiError::bad_request(format!(
            "strconv.ParseInt: parsing {}: {why}",
            Value::from(raw.as_str())
        ))
    })
}

fn rfc3339(raw: &str) -> Result<jiff::Timestamp, ApiError> {
    raw.parse::<jiff::Timestamp>().map_err(|_| {
        let quoted = Value::from(raw).to_string();
        ApiError::bad_request(format!(
            "parsing time {quoted} as \"2006-01-02T15:04:05Z07:00\": cannot parse {quoted} as \"2006\""
        ))
    })
}

impl LogOptions {
    /// Reads and checks the query of a log request for pod `pod`, with the server's wording.
    pub fn parse(q: &HashMap<String, String>, pod: &str) -> Result<LogOptions, ApiError> {
        let opts = LogOptions {
            container: q.get("container").filter(|c| !c.is_empty()).cloned(),
            follow: flag(q, "follow"),
            previous: flag(q, "previous"),
            timestamps: flag(q, "timestamps"),
            tail_lines: integer(q, "tailLines")?,
            limit_bytes: integer(q, "limitBytes")?,
            since_seconds: integer(q, "sinceSeconds")?,
            since_time: q.get("sinceTime").map(|t| rfc3339(t)).transpose()?,
        };
        let mut causes = Vec::new();
        let invalid = |field: &str, value: i64, detail: &str| {
            cause(
                "FieldValueInvalid",
                field,
                format!("Invalid value: {value}: {detail}"),
            )
        };
        if let Some(n) = opts.tail_lines.filter(|n| *n < 0) {
            causes.push(invalid("tailLines", n, "must be greater than or equal to 0"));
        }
        if let Some(n) = opts.limit_bytes.filter(|n| *n < 1) {
            causes.push(invalid("limitBytes", n, "must be greater than 0"));
        }
        match (opts.since_seconds, opts.since_time) {
            (Some(_), Some(_)) => causes.push(cause(
                "FieldValueForbidden",
                "[]",
                "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified",
            )),
            (Some(n), None) if n < 1 => causes.push(invalid("sinceSeconds", n, "must be greater than 0")),
            _ => {}
        }
        if q.contains_key("stream") {
            causes.push(cause(
                "FieldValueForbidden",
                "stream",
                "Forbidden: may not be specified",
            ));
        }
        if causes.is_empty() {
            Ok(opts)
        } else {
            Err(ApiError::invalid("", "PodLogOptions", pod, causes))
        }
    }

    /// The earliest line shown, for `sinceSeconds` (counted back from `now`) or `sinceTime`.
    fn since(&self, now: jiff::Timestamp) -> Option<jiff::Timestamp> {
        self.since_time.or_else(|| {
            let seconds = self.since_seconds?;
            now.checked_sub(jiff::SignedDuration::from_secs(seconds)).ok()
        })
    }
}

fn names<'a>(pod: &'a Value, key: &str) -> Vec<&'a str> {
    pod["spec"][key]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect()
}

/// The container a log request is for: the one named, or the pod's only container.
pub fn container(pod: &Value, asked: Option<&str>) -> Result<String, ApiError> {
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    let containers = names(pod, "containers");
    let init = names(pod, "initContainers");
    let ephemeral = names(pod, "ephemeralContainers");
    match asked {
        Some(asked) => {
            if containers
                .iter()
                .chain(&init)
                .chain(&ephemeral)
                .any(|c| *c == asked)
            {
                Ok(asked.to_string())
            } else {
                Err(ApiError::bad_request(format!(
                    "container {asked} is not valid for pod {name}"
                )))
            }
        }
        None => match containers.as_slice() {
            [only] => Ok(only.to_string()),
            [] => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}"
            ))),
            _ => {
                let all: Vec<&str> = init
                    .iter()
                    .chain(&containers)
                    .chain(&ephemeral)
                    .copied()
                    .collect();
                Err(ApiError::bad_request(format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    all.join(" ")
                )))
            }
        },
    }
}

/// `previous=true`: the container must have ended once before; kok's kubelets never restart one.
fn previous_instance(pod: &Value, container: &str) -> Result<(), ApiError> {
    let statuses = ["containerStatuses", "initContainerStatuses"];
    let restarted = statuses
        .iter()
        .flat_map(|key| pod["status"][key].as_array().into_iter().flatten())
        .find(|s| s["name"] == container)
        .is_some_and(|s| s["lastState"]["terminated"].is_object());
    if restarted {
        return Err(ApiError::bad_request(format!(
            "testkit keeps no log of the previous instance of container \"{container}\""
        )));
    }
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    Err(ApiError::bad_request(format!(
        "previous terminated container \"{container}\" in pod \"{name}\" not found"
    )))
}

/// A kubelet's timestamp: RFC 3339 with nine fractional digits.
fn timestamp(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.9fZ").to_string()
}

/// Shapes lines as the options ask: only those since the given time, with their timestamps, until the
/// byte limit.
struct Shaper {
    since: Option<jiff::Timestamp>,
    timestamps: bool,
    left: Option<usize>,
}

impl Shaper {
    /// The bytes of `line` to send (empty for a line before `since`); `None` once the limit is reached.
    fn shape(&mut self, line: &LogLine) -> Option<Bytes> {
        if self.left == Some(0) {
            return None;
        }
        if self.since.is_some_and(|since| line.time < since) {
            return Some(Bytes::new());
        }
        let mut out = if self.timestamps {
            let mut out = format!("{} ", timestamp(line.time)).into_bytes();
            out.extend_from_slice(&line.text);
            Bytes::from(out)
        } else {
            line.text.clone()
        };
        if let Some(left) = self.left.as_mut() {
            out.truncate(*left);
            *left -= out.len();
        }
        Some(out)
    }
}

/// The answer to a log request whose container's kubelet gave `log`: what the options select, whole,
/// or with `follow` streamed until the container ends or `shutdown` turns true.
pub fn respond(log: ContainerLog, opts: &LogOptions, mut shutdown: watch::Receiver<bool>) -> Response {
    let ContainerLog { mut lines, rest } = log;
    if let Some(tail) = opts.tail_lines {
        let tail = usize::try_from(tail).unwrap_or(0);
        lines.drain(..lines.len().saturating_sub(tail));
    }
    let mut shaper = Shaper {
        since: opts.since(jiff::Timestamp::now()),
        timestamps: opts.timestamps,
        left: opts.limit_bytes.and_then(|n| usize::try_from(n).ok()),
    };
    let plain = [(header::CONTENT_TYPE, "text/plain")];
    let mut head = Vec::new();
    for line in &lines {
        match shaper.shape(line) {
            Some(bytes) => head.extend_from_slice(&bytes),
            None => break,
        }
    }
    let rest = match rest {
        Some(rest) if opts.follow && shaper.left != Some(0) => rest,
        _ => return (StatusCode::OK, plain, head).into_response(),
    };
    let stopped = async move {
        let _ = shutdown.wait_for(|stop| *stop).await;
    };
    let followed = rest
        .take_until(Box::pin(stopped))
        .map(move |line| shaper.shape(&line))
        .take_while(|bytes| std::future::ready(bytes.is_some()))
        .filter_map(|bytes| std::future::ready(bytes.filter(|b| !b.is_empty())));
    let body = stream::once(std::future::ready(Bytes::from(head)))
        .chain(followed)
        .filter(|bytes| std::future::ready(!bytes.is_empty()))
        .map(Ok::<_, std::io::Error>);
    (StatusCode::OK, plain, Body::from_stream(body)).into_response()
}

/// Serves a log request for `pod` once options, container and node are settled: `kubelet` is the one of
/// the pod's node, or the test's [`PodLogs`] when the test gave the pod a log.
pub fn serve(
    kubelet: &dyn Kubelet,
    pod: &Value,
    container: &str,
    opts: &LogOptions,
    shutdown: watch::Receiver<bool>,
) -> Response {
    if opts.previous {
        if let Err(e) = previous_instance(pod, container) {
            return error(&e);
        }
    }
    match kubelet.container_log(pod, container) {
        Ok(log) => respond(log, opts, shutdown),
        Err(e) => error(&e),
    }
}

fn error(e: &ApiError) -> Response {
    let body = serde_json::to_vec(&e.status()).unwrap_or_default();
    (
        StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// A log so far, and whether its container has ended.
#[derive(Debug, Clone, Default)]
struct Log {
    lines: Vec<LogLine>,
    ended: bool,
}

/// What tests say pods printed, by namespace and pod name: the kubelet of every pod a test gave a log.
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

    /// Whether a test gave this pod a log.
    pub fn has(&self, namespace: &str, pod: &str) -> bool {
        let logs = self.logs.lock().unwrap_or_else(|p| p.into_inner());
        logs.contains_key(&(namespace.to_string(), pod.to_string()))
    }

    /// Adds `text` to the end of the pod's log, written now (followers get it at once).
    pub fn append(&self, namespace: &str, pod: &str, text: &str) {
        let time = jiff::Timestamp::now();
        self.with(namespace, pod, |log| {
            log.send_modify(|log| {
                for piece in text.split_inclusive('\n') {
                    match log.lines.last_mut() {
                        Some(last) if !last.text.ends_with(b"\n") => {
                            last.text = Bytes::from([&last.text[..], piece.as_bytes()].concat());
                        }
                        _ => log.lines.push(LogLine {
                            time,
                            text: Bytes::from(piece.to_string()),
                        }),
                    }
                }
            })
        });
    }

    /// Ends the pod's log, as its container's end does: followers get the rest and their stream ends.
    pub fn end(&self, namespace: &str, pod: &str) {
        self.with(namespace, pod, |log| log.send_modify(|log| log.ended = true));
    }
}

impl Kubelet for PodLogs {
    fn container_log(&self, pod: &Value, _container: &str) -> Result<ContainerLog, ApiError> {
        let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("");
        let name = pod["metadata"]["name"].as_str().unwrap_or("");
        let rx = self.with(namespace, name, watch::Sender::subscribe);
        let (mut lines, ended) = {
            let log = rx.borrow();
            (log.lines.clone(), log.ended)
        };
        if !ended {
            // A line still being written is sent once finished.
            let finished = lines.iter().take_while(|l| l.text.ends_with(b"\n")).count();
            lines.truncate(finished);
        }
        let sent = lines.len();
        let rest = (!ended).then(|| {
            stream::unfold((rx, sent), |(mut rx, sent)| async move {
                loop {
                    let (next, ended) = {
                        let log = rx.borrow_and_update();
                        (log.lines.get(sent).cloned(), log.ended)
                    };
                    match next {
                        Some(line) if line.text.ends_with(b"\n") || ended => {
                            return Some((line, (rx, sent + 1)))
                        }
                        _ if ended => return None,
                        _ => {}
                    }
                    if rx.changed().await.is_err() {
                        return None;
                    }
                }
            })
            .boxed()
        });
        Ok(ContainerLog { lines, rest })
    }
}

/// The kubelets programs registered, by node name.
#[derive(Default)]
pub struct Kubelets {
    by_node: Mutex<HashMap<String, Arc<dyn Kubelet>>>,
}

impl std::fmt::Debug for Kubelets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nodes: Vec<String> = self
            .by_node
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        f.debug_struct("Kubelets").field("nodes", &nodes).finish()
    }
}

impl Kubelets {
    /// Registers the kubelet of `node` (replacing an earlier one).
    pub fn set(&self, node: &str, kubelet: Arc<dyn Kubelet>) {
        let mut by_node = self.by_node.lock().unwrap_or_else(|p| p.into_inner());
        by_node.insert(node.to_string(), kubelet);
    }

    /// The kubelet of `node`, if one is registered.
    pub fn get(&self, node: &str) -> Option<Arc<dyn Kubelet>> {
        let by_node = self.by_node.lock().unwrap_or_else(|p| p.into_inner());
        by_node.get(node).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn options_are_refused_in_the_servers_words_before_anything_else() {
        let e = LogOptions::parse(&query(&[("tailLines", "abc")]), "p").unwrap_err();
        assert_eq!(e.message, "strconv.ParseInt: parsing \"abc\": invalid syntax");
        let e = LogOptions::parse(&query(&[("tailLines", "-1"), ("limitBytes", "0")]), "p").unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(e.details.causes.len(), 2);
        let ok = LogOptions::parse(&query(&[("timestamps", "notabool"), ("bogus", "1")]), "p").unwrap();
        assert!(!ok.timestamps);
    }

    #[test]
    fn lines_are_shaped_by_since_timestamps_and_the_byte_limit() {
        let t = |s: &str| -> jiff::Timestamp { s.parse().unwrap() };
        let line = |time: &str, text: &'static str| LogLine {
            time: t(time),
            text: Bytes::from_static(text.as_bytes()),
        };
        let mut shaper = Shaper {
            since: Some(t("2026-01-01T00:00:01Z")),
            timestamps: true,
            left: Some(43),
        };
        assert_eq!(shaper.shape(&line("2026-01-01T00:00:00Z", "old\n")).unwrap(), "");
        assert_eq!(
            shaper.shape(&line("2026-01-01T00:00:02.5Z", "new\n")).unwrap(),
            "2026-01-01T00:00:02.500000000Z new\n"
        );
        assert_eq!(
            shaper.shape(&line("2026-01-01T00:00:03Z", "cut here\n")).unwrap(),
            "2026-01-"
        );
        assert!(shaper.shape(&line("2026-01-01T00:00:04Z", "more\n")).is_none());
    }

    #[test]
    fn a_pod_of_several_containers_needs_one_named() {
        let pod = serde_json::json!({"metadata": {"name": "two"},
            "spec": {"initContainers": [{"name": "setup"}], "containers": [{"name": "app"}, {"name": "sidecar"}]}});
        assert_eq!(
            container(&pod, None).unwrap_err().message,
            "a container name must be specified for pod two, choose one of: [setup app sidecar]"
        );
        assert_eq!(container(&pod, Some("setup")).unwrap(), "setup");
        assert_eq!(
            container(&pod, Some("x")).unwrap_err().message,
            "container x is not valid for pod two"
        );
    }
}
