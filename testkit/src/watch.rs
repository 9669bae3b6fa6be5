//! Watch streams: replay from a resourceVersion (or the current state), then live events,
//! bookmarks, timeouts, and the test controls that cut streams.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use futures::channel::mpsc;
use futures::SinkExt;
use serde_json::{json, Value};
use tokio::sync::{broadcast, watch};

use crate::api::{served, served_json, State};
use crate::errors::ApiError;
use crate::persist::Durability;
use crate::resources::ResourceInfo;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{label, EventKind, Labels, ObjectKey, Stored, WatchEvent};
use crate::table::{self, TableRequest};

/// Rendered lines a watch keeps ready for its reader.
const LINES_IN_FLIGHT: usize = 32;

/// What a watch asks for.
#[derive(Debug, Clone)]
pub struct WatchRequest {
    /// The watched resource at the requested version.
    pub info: Arc<ResourceInfo>,
    /// Namespace, or all.
    pub namespace: Option<String>,
    /// Label selector.
    pub labels: LabelSelector,
    /// Field selector.
    pub fields: FieldSelector,
    /// `resourceVersion` parameter (None, `""` and `"0"` start from the current state).
    pub resource_version: Option<String>,
    /// `allowWatchBookmarks`.
    pub bookmarks: bool,
    /// `sendInitialEvents`.
    pub send_initial_events: bool,
    /// `timeoutSeconds`.
    pub timeout: Option<Duration>,
    /// The Tables to render, when the client asked for Tables.
    pub table: Option<TableRequest>,
}

/// Signals shared by all watches of a server.
#[derive(Debug, Clone)]
pub struct Signals {
    /// The group sync of the store's database: an event is sent once its write is on disk.
    pub durability: Option<Durability>,
    /// Bumped by `cut_watches`.
    pub cut: watch::Receiver<u64>,
    /// Set when the server stops.
    pub shutdown: watch::Receiver<bool>,
    /// Interval between bookmarks.
    pub bookmark_interval: Duration,
}

impl WatchRequest {
    /// Whether the object with this key and these labels is watched (`obj`: the object, for the fields a
    /// field selector reads; an object keeps them through its changes, so its current version is read).
    fn matches(&self, key: &ObjectKey, labels: &Labels, obj: &Stored) -> bool {
        let in_namespace = !self.info.namespaced || self.namespace.as_deref().is_none_or(|ns| *ns == key.0);
        in_namespace && self.labels.matches_with(|k| label(labels, k)) && self.fields.matches_stored(key, obj)
    }

    /// A stored object's line: its JSON as is when the watch neither renames the version nor renders
    /// a Table.
    fn line(&self, kind: &str, obj: &Stored) -> Bytes {
        if self.table.is_some() {
            return self.rendered_line(kind, &Arc::new(obj.value()));
        }
        let json = served_json(&self.info, obj);
        let mut out = Vec::with_capacity(json.len() + 40);
        out.extend_from_slice(b"{\"type\":\"");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\",\"object\":");
        out.extend_from_slice(&json);
        out.extend_from_slice(b"}\n");
        Bytes::from(out)
    }

    fn rendered_line(&self, kind: &str, obj: &Arc<Value>) -> Bytes {
        let object = served(&self.info, obj);
        let rendered = match &self.table {
            Some(request) => {
                let meta = json!({"resourceVersion": object.pointer("/metadata/resourceVersion")});
                table::table(&self.info, &[&object], request, meta, jiff::Timestamp::now())
            }
            None => (*object).clone(),
        };
        let mut out = serde_json::to_vec(&json!({"type": kind, "object": rendered})).unwrap_or_default();
        out.push(b'\n');
        Bytes::from(out)
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = json!({"type": "BOOKMARK", "object": {"kind": self.info.kind, "apiVersion": self.info.api_version(), "metadata": meta}});
        let mut out = serde_json::to_vec(&obj).unwrap_or_default();
        out.push(b'\n');
        Bytes::from(out)
    }

    /// The event type a store event becomes for this watch, if any (selector transitions included).
    fn translate(&self, ev: &WatchEvent) -> Option<&'static str> {
        if ev.resource != self.info.key() {
            return None;
        }
        let now = self.matches(&ev.key, &ev.object.labels, &ev.object);
        let before = ev
            .previous_labels
            .as_ref()
            .is_some_and(|p| self.matches(&ev.key, p, &ev.object));
        match ev.kind {
            EventKind::Added => now.then_some("ADDED"),
            EventKind::Deleted => before.then_some("DELETED"),
            EventKind::Modified => match (before, now) {
                (true, true) => Some("MODIFIED"),
                (false, true) => Some("ADDED"),
                (true, false) => Some("DELETED"),
                (false, false) => None,
            },
        }
    }
}

/// Waits until the write of `rv` is on disk (at once without a database).
async fn on_disk(durability: Option<&Durability>, rv: u64) {
    if let Some(d) = durability {
        d.synced(rv).await;
    }
}

fn error_line(err: &ApiError) -> Bytes {
    let mut out = serde_json::to_vec(&json!({"type": "ERROR", "object": err.status()})).unwrap_or_default();
    out.push(b'\n');
    Bytes::from(out)
}

/// What a watcher that fell behind the broadcast catches up with: the kept events of its resource
/// after its progress, a new receiver, and the resourceVersion both start from.
pub type CatchUp = (Vec<Arc<WatchEvent>>, broadcast::Receiver<Arc<WatchEvent>>, u64);

/// Re-reads the watched resource's history after `rv` and subscribes again, for a watcher that fell
/// behind the broadcast; None when `rv` has left that resource's event window.
pub type Resync = Arc<dyn Fn(u64) -> Option<CatchUp> + Send + Sync>;

/// The sending half of a watch's stream of rendered lines.
type Lines = mpsc::Sender<Result<Bytes, Infallible>>;

/// What a watch sends before live events: objects or events, and a closing line (the initial-events
/// bookmark, or an error that ends the watch).
struct Backlog {
    /// The event type and object of each line, in order.
    lines: Vec<(&'static str, Arc<Stored>)>,
    /// The line after them.
    closing: Option<Bytes>,
    /// Whether the closing line is an error that ends the watch.
    failed: bool,
    /// The store's resourceVersion when the backlog was picked: live events continue after it.
    rv: u64,
}

/// Opens a watch: picks the backlog under the state lock (the objects or events to send first, and a
/// closing line) and streams it, rendered one line at a time, and the rest from a task.
pub fn start(
    state: &State,
    req: WatchRequest,
    signals: Signals,
    resync: Resync,
) -> mpsc::Receiver<Result<Bytes, Infallible>> {
    // Few rendered lines wait for a slow reader; later events wait, shared, in the broadcast.
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(LINES_IN_FLIGHT);
    let backlog = backlog(state, &req);
    let events = state.store.subscribe();
    let mut signals = signals;
    signals.cut.borrow_and_update();
    signals.shutdown.borrow_and_update();
    tokio::spawn(stream(req, backlog, events, signals, resync, tx));
    rx
}

/// The backlog of `req`: the current objects when it starts from the state, else the events after its
/// resourceVersion, or the error of a resourceVersion that is invalid or compacted away.
fn backlog(state: &State, req: &WatchRequest) -> Backlog {
    let mut backlog = Backlog {
        lines: Vec::new(),
        closing: None,
        failed: false,
        rv: state.store.resource_version(),
    };
    let rv_param = req.resource_version.clone().unwrap_or_default();
    let from_state = req.send_initial_events || rv_param.is_empty() || rv_param == "0";
    if from_state {
        let ns = if req.info.namespaced {
            req.namespace.as_deref()
        } else {
            None
        };
        for (key, o) in state.store.list(&req.info.key(), ns) {
            if req.matches(key, &o.labels, o) {
                backlog.lines.push(("ADDED", o.clone()));
            }
        }
        if req.send_initial_events && req.bookmarks {
            backlog.closing = Some(req.bookmark(backlog.rv, true));
        }
        return backlog;
    }
    match rv_param.parse::<u64>() {
        Ok(rv) if rv < state.store.compacted(&req.info.key()) => {
            backlog.closing = Some(error_line(&ApiError::gone(format!(
                "too old resource version: {rv} ({})",
                state.store.compacted(&req.info.key())
            ))));
            backlog.failed = true;
        }
        Ok(rv) => {
            for ev in state.store.events_since(&req.info.key(), rv) {
                if let Some(t) = req.translate(ev) {
                    backlog.lines.push((t, ev.object.clone()));
                }
            }
        }
        Err(_) => {
            backlog.closing = Some(error_line(&ApiError::bad_request(format!(
                "invalid resourceVersion {rv_param:?}"
            ))));
            backlog.failed = true;
        }
    }
    backlog
}

/// A watch's task: sends the backlog, then the live events it sees and bookmarks, until its timeout, a
/// cut, the server's stop, a resync too late to catch up, or its reader leaving.
async fn stream(
    req: WatchRequest,
    backlog: Backlog,
    mut events: broadcast::Receiver<Arc<WatchEvent>>,
    signals: Signals,
    resync: Resync,
    mut tx: Lines,
) {
    let mut progress = backlog.rv;
    if !send_backlog(&mut tx, &req, backlog).await {
        return;
    }
    let Signals {
        durability,
        mut cut,
        mut shutdown,
        bookmark_interval,
    } = signals;
    let deadline = req.timeout.map(|t| tokio::time::Instant::now() + t);
    let mut ticker = tokio::time::interval(bookmark_interval);
    ticker.tick().await;
    loop {
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => futures::future::pending::<()>().await,
            }
        };
        tokio::select! {
            ev = events.recv() => match ev {
                Ok(ev) => {
                    progress = progress.max(ev.rv);
                    if !send_event(&mut tx, &req, durability.as_ref(), &ev).await {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    match catch_up(&mut tx, &req, durability.as_ref(), &resync, progress).await {
                        Some((fresh, now)) => (events, progress) = (fresh, now),
                        None => return,
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = ticker.tick(), if req.bookmarks => {
                on_disk(durability.as_ref(), progress).await;
                if tx.send(Ok(req.bookmark(progress, false))).await.is_err() {
                    return;
                }
            }
            _ = sleep => return,
            _ = cut.changed() => return,
            _ = shutdown.changed() => return,
        }
    }
}

/// Sends store event `ev`, once it is on disk, when this watch sees it; false when the reader has left.
async fn send_event(
    tx: &mut Lines,
    req: &WatchRequest,
    durability: Option<&Durability>,
    ev: &WatchEvent,
) -> bool {
    let Some(t) = req.translate(ev) else {
        return true;
    };
    on_disk(durability, ev.rv).await;
    tx.send(Ok(req.line(t, &ev.object))).await.is_ok()
}

/// Sends the backlog's lines, then its closing line; false when the watch ends there (its reader left, or
/// the closing line was an error).
async fn send_backlog(tx: &mut Lines, req: &WatchRequest, backlog: Backlog) -> bool {
    for (kind, object) in backlog.lines {
        if tx.send(Ok(req.line(kind, &object))).await.is_err() {
            return false;
        }
    }
    if let Some(line) = backlog.closing {
        if tx.send(Ok(line)).await.is_err() || backlog.failed {
            return false;
        }
    }
    true
}

/// Catches up a watch that fell behind the broadcast at `progress`: sends the events it missed and gives
/// the new receiver and the progress it starts from; `None` when the watch ends (too far behind, which
/// its reader is told, or its reader left).
async fn catch_up(
    tx: &mut Lines,
    req: &WatchRequest,
    durability: Option<&Durability>,
    resync: &Resync,
    progress: u64,
) -> Option<(broadcast::Receiver<Arc<WatchEvent>>, u64)> {
    let Some((missed, fresh, now)) = resync(progress) else {
        let gone = ApiError::gone(format!("too old resource version: {progress}"));
        let _ = tx.send(Ok(error_line(&gone))).await;
        return None;
    };
    let progress = progress.max(now);
    for ev in missed {
        if !send_event(tx, req, durability, &ev).await {
            return None;
        }
    }
    Some((fresh, progress))
}
