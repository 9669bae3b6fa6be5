//! Notifications: one more sink of the reporter, with a durable outbox. kok.yml's `notifications:`
//! receivers ([`crate::layout::notifications`]) get an event when an operation fails, succeeds or is
//! held, a cluster's health degrades or recovers, a rollout halts or finishes, or a commit is refused.
//!
//! - [`event`] turns a commit status (or a health transition) into a [`Notification`] with a
//!   deterministic id; [`format`] renders it for each receiver type (CloudEvents + HMAC, Slack, Teams).
//! - [`NotifySink`] is a [`Sink`]: the reporter hands it every commit status exactly as it hands them to
//!   the forges, so an event goes out once per transition (a status equal to the one delivered is never
//!   delivered again, whatever the resyncs), and its "delivery" is the write of the event into the
//!   outbox.
//! - The outbox is the ConfigMap [`NOTIFICATIONS_CONFIGMAP`]: one key per event (`event.<id>`) with the
//!   receivers still to reach and the attempts so far. An event already in it is not added again, so a
//!   restart that hands the sink a status a second time repeats nothing; the receivers still to reach
//!   are reached after a restart; a receiver that is down is tried again with backoff (1 s doubling to
//!   5 min, its Retry-After honoured), the others are not held up. The newest [`DELIVERED_KEPT`]
//!   delivered events stay as the record of what went out.
//! - Health: every second the Clusters' `Healthy` condition is compared with the state last notified
//!   (`health.<cluster>` in the same ConfigMap). A change is one event (`health-degraded` or
//!   `health-recovered`); at most one per cluster and kind per [`HEALTH_QUIET`], so a flapping check does
//!   not page every minute: a change within that time waits for its end and goes out then only if the
//!   cluster is still in that state. A cluster first seen healthy says nothing; without a receiver of
//!   health events nothing is compared or kept.
//! - A receiver's URL (and a webhook's HMAC key) are read from its Secret at delivery and registered with
//!   [`crate::redact`]: no log or error shows them.

pub mod event;
pub mod format;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Patch, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

pub use event::Notification;

use super::deliver::patch_params;
use super::sink::{parse_retry_after, DeliveryError, Sink};
use super::sinks::Backoff;
use crate::api::{Cluster, CommitStatus};
use crate::health::conditions::HEALTHY;
use crate::layout::notifications::{EventKind, Receiver};
use crate::metrics::Metrics;

/// The outbox: pending and recently delivered events, and each cluster's last notified health.
pub const NOTIFICATIONS_CONFIGMAP: &str = "kok-notifications";
/// How many delivered events the outbox keeps.
pub const DELIVERED_KEPT: usize = 100;
/// Most events waiting at once; beyond it the oldest are dropped (with a warning), so that a receiver
/// gone for days cannot fill the ConfigMap.
pub const PENDING_MAX: usize = 500;
/// Shortest time between two health events of the same kind for the same cluster.
pub const HEALTH_QUIET: Duration = Duration::from_secs(600);
/// Longest wait for a receiver's answer.
const POST_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the Clusters' health is compared with what was notified.
const HEALTH_SCAN: Duration = Duration::from_secs(1);
/// Sink name in logs and metrics.
pub const SINK_NAME: &str = "notifications";

/// One event in the outbox.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    notification: Notification,
    /// Receivers that have not taken it yet.
    pending: Vec<String>,
    /// Receivers that took it.
    #[serde(default)]
    delivered: Vec<String>,
    /// Failed attempts so far.
    #[serde(default)]
    attempts: u32,
    /// Not before this time (RFC 3339), after a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

/// What was last notified of a cluster's health.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct HealthRecord {
    /// `health-degraded` or `health-recovered`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    notified: Option<String>,
    /// When each kind last went out (RFC 3339).
    #[serde(default)]
    sent: BTreeMap<String, String>,
}

/// The outbox as the leader holds it (it alone writes the ConfigMap).
#[derive(Debug, Default)]
struct Outbox {
    loaded: bool,
    events: BTreeMap<String, Record>,
    health: BTreeMap<String, HealthRecord>,
}

/// Errors writing the outbox.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// Reading or writing the ConfigMap failed.
    #[error("updating ConfigMap {namespace}/{NOTIFICATIONS_CONFIGMAP}: {source}")]
    Outbox {
        /// Namespace.
        namespace: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// The receivers, the outbox and its delivery loop.
pub struct Notifier {
    client: Client,
    namespace: String,
    metrics: Metrics,
    backoff: Backoff,
    health_quiet: Duration,
    http: reqwest::Client,
    receivers: Mutex<Vec<Receiver>>,
    clusters: Mutex<Option<Store<Cluster>>>,
    outbox: tokio::sync::Mutex<Outbox>,
    wake: Notify,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("namespace", &self.namespace)
            .finish()
    }
}

fn now() -> jiff::Timestamp {
    jiff::Timestamp::now()
}

fn parse_time(text: &str) -> Option<jiff::Timestamp> {
    text.parse().ok()
}

impl Notifier {
    /// A notifier for kok's `namespace`, with no receivers yet ([`Notifier::set_receivers`]).
    pub fn new(client: Client, namespace: impl Into<String>, metrics: Metrics) -> Arc<Self> {
        let http = reqwest::Client::builder()
            .timeout(POST_TIMEOUT)
            .user_agent(concat!("kok/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_default();
        Arc::new(Notifier {
            client,
            namespace: namespace.into(),
            metrics,
            backoff: Backoff::default(),
            health_quiet: HEALTH_QUIET,
            http,
            receivers: Mutex::default(),
            clusters: Mutex::default(),
            outbox: tokio::sync::Mutex::default(),
            wake: Notify::new(),
        })
    }

    /// Sets the retry delays and the health quiet time (tests shorten them); only before it is shared.
    pub fn with_timing(self: Arc<Self>, backoff: Backoff, health_quiet: Duration) -> Arc<Self> {
        match Arc::try_unwrap(self) {
            Ok(mut n) => {
                n.backoff = backoff;
                n.health_quiet = health_quiet;
                Arc::new(n)
            }
            Err(shared) => shared,
        }
    }

    /// The receivers of the reconciled commit's kok.yml.
    pub fn set_receivers(&self, receivers: Vec<Receiver>) {
        let mut current = self.receivers.lock().unwrap_or_else(|p| p.into_inner());
        if *current != receivers {
            let names: Vec<&str> = receivers.iter().map(|r| r.name.as_str()).collect();
            tracing::info!(receivers = ?names, "notification receivers from kok.yml");
            *current = receivers;
        }
    }

    /// The Clusters whose labels pick receivers and whose health is notified.
    pub fn watch_clusters(&self, clusters: Store<Cluster>) {
        *self.clusters.lock().unwrap_or_else(|p| p.into_inner()) = Some(clusters);
    }

    /// The sink the reporter delivers commit statuses to.
    pub fn sink(self: &Arc<Self>) -> Arc<dyn Sink> {
        Arc::new(NotifySink {
            notifier: self.clone(),
        })
    }

    fn receivers(&self) -> Vec<Receiver> {
        self.receivers.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn cluster(&self, name: &str) -> Option<Arc<Cluster>> {
        let store = self.clusters.lock().unwrap_or_else(|p| p.into_inner()).clone()?;
        store.get(&ObjectRef::new(name).within(&self.namespace))
    }

    fn api(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn outbox_error(&self, source: kube::Error) -> NotifyError {
        NotifyError::Outbox {
            namespace: self.namespace.clone(),
            source,
        }
    }

    /// Reads the outbox once (after a restart it holds what is still to go out).
    async fn load(&self, outbox: &mut Outbox) -> Result<(), NotifyError> {
        if outbox.loaded {
            return Ok(());
        }
        let cm = self
            .api()
            .get_opt(NOTIFICATIONS_CONFIGMAP)
            .await
            .map_err(|e| self.outbox_error(e))?;
        for (key, value) in cm.and_then(|cm| cm.data).unwrap_or_default() {
            if let Some(id) = key.strip_prefix("event.") {
                if let Ok(record) = serde_json::from_str(&value) {
                    outbox.events.insert(id.to_string(), record);
                }
            } else if let Some(cluster) = key.strip_prefix("health.") {
                if let Ok(record) = serde_json::from_str(&value) {
                    outbox.health.insert(cluster.to_string(), record);
                }
            }
        }
        outbox.loaded = true;
        Ok(())
    }

    /// Writes `data` (key → JSON, or null to remove) into the outbox ConfigMap, creating it when missing.
    async fn write(&self, data: serde_json::Map<String, serde_json::Value>) -> Result<(), NotifyError> {
        if data.is_empty() {
            return Ok(());
        }
        let api = self.api();
        let patch = serde_json::json!({ "data": data });
        match api
            .patch(NOTIFICATIONS_CONFIGMAP, &patch_params(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(self.outbox_error(e)),
        }
        let values: BTreeMap<String, String> = data
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect();
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(NOTIFICATIONS_CONFIGMAP.into());
        cm.metadata.labels = Some(BTreeMap::from([
            ("app.kubernetes.io/part-of".to_string(), "kok".to_string()),
            (
                "app.kubernetes.io/component".to_string(),
                "notifications".to_string(),
            ),
        ]));
        cm.data = Some(values);
        let post = PostParams {
            field_manager: Some(crate::api::FIELD_MANAGER.into()),
            ..Default::default()
        };
        match api.create(&post, &cm).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => api
                .patch(NOTIFICATIONS_CONFIGMAP, &patch_params(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
                .map_err(|e| self.outbox_error(e)),
            Err(e) => Err(self.outbox_error(e)),
        }
    }

    /// Puts `n` into the outbox for the receivers that want it, unless it is there already. Returns once
    /// it is stored: from then on it goes out even across restarts.
    pub async fn enqueue(&self, n: Notification) -> Result<(), NotifyError> {
        let labels = n.cluster.as_deref().map(|c| {
            self.cluster(c)
                .map(|cluster| cluster.labels().clone())
                .unwrap_or_default()
        });
        let wanted: Vec<String> = self
            .receivers()
            .iter()
            .filter(|r| r.wants(n.kind, labels.as_ref()))
            .map(|r| r.name.clone())
            .collect();
        if wanted.is_empty() {
            return Ok(());
        }
        let mut outbox = self.outbox.lock().await;
        self.load(&mut outbox).await?;
        if outbox.events.contains_key(&n.id) {
            return Ok(());
        }
        let id = n.id.clone();
        let record = Record {
            notification: n,
            pending: wanted,
            delivered: Vec::new(),
            attempts: 0,
            next: None,
        };
        let mut data = serde_json::Map::new();
        data.insert(format!("event.{id}"), encode(&record));
        // Keep the outbox bounded: the oldest waiting events go first.
        let waiting: Vec<(String, String)> = outbox
            .events
            .iter()
            .filter(|(_, r)| !r.pending.is_empty())
            .map(|(id, r)| (r.notification.time.clone(), id.clone()))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let over = (waiting.len() + 1).saturating_sub(PENDING_MAX);
        for (_, old) in waiting.into_iter().take(over) {
            tracing::warn!(event = %old, "the notification outbox is full; dropping its oldest waiting event");
            data.insert(format!("event.{old}"), serde_json::Value::Null);
            outbox.events.remove(&old);
        }
        self.write(data).await?;
        tracing::info!(event = %id, kind = record.notification.kind.as_str(), title = %record.notification.title(), "notification queued");
        outbox.events.insert(id, record);
        drop(outbox);
        self.wake.notify_one();
        Ok(())
    }

    /// Delivers the outbox and notifies health changes until `shutdown` completes.
    pub async fn run(self: Arc<Self>, shutdown: impl std::future::Future<Output = ()> + Send + 'static) {
        tokio::pin!(shutdown);
        loop {
            if let Err(e) = self.scan_health().await {
                tracing::warn!(error = %e, "notifying health changes failed; retrying");
            }
            let wait = match self.deliver_due().await {
                Ok(next) => next.unwrap_or(HEALTH_SCAN).min(HEALTH_SCAN),
                Err(e) => {
                    tracing::warn!(error = %e, "delivering notifications failed; retrying");
                    Duration::from_secs(5)
                }
            };
            tokio::select! {
                _ = &mut shutdown => return,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Compares each Cluster's `Healthy` condition with what was last notified; queues the changes the
    /// quiet time allows.
    async fn scan_health(&self) -> Result<(), NotifyError> {
        let store = self.clusters.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(store) = store else { return Ok(()) };
        let wanted = |kind| {
            self.receivers()
                .iter()
                .any(|r| r.events.is_empty() || r.events.contains(&kind))
        };
        if !wanted(EventKind::HealthDegraded) && !wanted(EventKind::HealthRecovered) {
            return Ok(());
        }
        let mut changes = Vec::new();
        {
            let mut outbox = self.outbox.lock().await;
            self.load(&mut outbox).await?;
            let now = now();
            for cluster in store.state() {
                let name = cluster.name_any();
                let Some(condition) = cluster
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.iter().find(|c| c.type_ == HEALTHY))
                else {
                    continue;
                };
                let healthy = match condition.status.as_str() {
                    "True" => true,
                    "False" => false,
                    _ => continue,
                };
                let kind = if healthy {
                    EventKind::HealthRecovered
                } else {
                    EventKind::HealthDegraded
                };
                let record = outbox.health.get(&name).cloned().unwrap_or_default();
                if record.notified.as_deref() == Some(kind.as_str()) {
                    continue;
                }
                if record.notified.is_none() && healthy {
                    // Healthy and never notified otherwise: nothing to say (nor to keep).
                    continue;
                }
                let last = record.sent.get(kind.as_str()).and_then(|t| parse_time(t));
                if last.is_some_and(|t| now.duration_since(t).as_secs_f64() < self.health_quiet.as_secs_f64())
                {
                    continue;
                }
                let since = condition.last_transition_time.0.to_string();
                let event = event::health(&name, healthy, &since, &condition.message, &now.to_string());
                changes.push((name, record_with(&record, kind, now), event));
            }
        }
        if changes.is_empty() {
            return Ok(());
        }
        // The events first: a crash before the records are written sends them again with the same ids,
        // which the outbox refuses, rather than losing them. The records go in one write.
        let mut data = serde_json::Map::new();
        for (cluster, record, event) in &changes {
            self.enqueue(event.clone()).await?;
            data.insert(format!("health.{cluster}"), encode(record));
        }
        self.write(data).await?;
        let mut outbox = self.outbox.lock().await;
        for (cluster, record, _) in changes {
            outbox.health.insert(cluster, record);
        }
        Ok(())
    }

    /// Posts every due event to its pending receivers; returns the wait until the next one is due. The
    /// outbox is not locked while posting: the sink goes on queueing meanwhile.
    async fn deliver_due(&self) -> Result<Option<Duration>, NotifyError> {
        let now = now();
        let receivers = self.receivers();
        let due: Vec<(String, Record)> = {
            let mut outbox = self.outbox.lock().await;
            self.load(&mut outbox).await?;
            outbox
                .events
                .iter()
                .filter(|(_, r)| !r.pending.is_empty())
                .filter(|(_, r)| r.next.as_deref().and_then(parse_time).is_none_or(|t| t <= now))
                .map(|(id, r)| (id.clone(), r.clone()))
                .collect()
        };
        let mut done = Vec::new();
        for (id, mut record) in due {
            let mut worst: Option<DeliveryError> = None;
            for name in record.pending.clone() {
                // A receiver removed from kok.yml is not waited for any more.
                let Some(receiver) = receivers.iter().find(|r| r.name == name) else {
                    record.pending.retain(|p| *p != name);
                    continue;
                };
                match self.post(receiver, &record.notification).await {
                    Ok(()) => {
                        self.metrics.notification(&name, "delivered");
                        tracing::info!(receiver = %name, event = %id, title = %record.notification.title(), "notification delivered");
                        record.pending.retain(|p| *p != name);
                        record.delivered.push(name);
                    }
                    Err(err) => {
                        let result = if err.is_retryable() { "retry" } else { "failed" };
                        self.metrics.notification(&name, result);
                        tracing::warn!(receiver = %name, event = %id, error = %err, "notification not delivered");
                        worst = Some(err);
                    }
                }
            }
            match worst {
                Some(err) if !record.pending.is_empty() => {
                    record.attempts = record.attempts.saturating_add(1);
                    let delay = self.backoff.delay(record.attempts, &err);
                    let at = now
                        .checked_add(jiff::SignedDuration::try_from(delay).unwrap_or_default())
                        .unwrap_or(now);
                    record.next = Some(at.to_string());
                }
                _ => {
                    record.next = None;
                    record.attempts = 0;
                }
            }
            done.push((id, record));
        }
        let mut outbox = self.outbox.lock().await;
        let mut data = serde_json::Map::new();
        for (id, record) in done {
            data.insert(format!("event.{id}"), encode(&record));
            outbox.events.insert(id, record);
        }
        // Keep the newest delivered events only.
        let mut delivered: Vec<(String, String)> = outbox
            .events
            .iter()
            .filter(|(_, r)| r.pending.is_empty())
            .map(|(id, r)| (r.notification.time.clone(), id.clone()))
            .collect();
        delivered.sort();
        let over = delivered.len().saturating_sub(DELIVERED_KEPT);
        for (_, id) in delivered.into_iter().take(over) {
            outbox.events.remove(&id);
            data.insert(format!("event.{id}"), serde_json::Value::Null);
        }
        self.write(data).await?;
        for receiver in &receivers {
            let waiting = outbox
                .events
                .values()
                .filter(|r| r.pending.contains(&receiver.name))
                .count();
            self.metrics.set_notifications_waiting(&receiver.name, waiting);
        }
        let next = outbox
            .events
            .values()
            .filter(|r| !r.pending.is_empty())
            .filter_map(|r| r.next.as_deref().and_then(parse_time))
            .map(|t| Duration::try_from(now.duration_until(t)).unwrap_or_default())
            .min();
        Ok(next)
    }

    /// Posts `n` to `receiver`, with its URL (and HMAC key) from its Secret.
    async fn post(&self, receiver: &Receiver, n: &Notification) -> Result<(), DeliveryError> {
        let fail = |reason: String, retry_after: Option<Duration>, permanent: bool| {
            let (sink, context, commit) = (
                format!("notification receiver {}", receiver.name),
                n.kind.as_str().to_string(),
                n.commit.clone().unwrap_or_default(),
            );
            if permanent {
                DeliveryError::Permanent {
                    sink,
                    context,
                    commit,
                    reason,
                }
            } else {
                DeliveryError::Retryable {
                    sink,
                    context,
                    commit,
                    reason,
                    retry_after,
                }
            }
        };
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let secret = secrets.get_opt(&receiver.url_secret).await.map_err(|e| {
            fail(
                format!("reading Secret {}: {e}", receiver.url_secret),
                None,
                false,
            )
        })?;
        let value = |key: &str| -> Option<String> {
            let data = secret.as_ref()?.data.as_ref()?;
            let text = String::from_utf8(data.get(key)?.0.clone()).ok()?;
            let text = text.trim().to_string();
            crate::redact::register(&text);
            (!text.is_empty()).then_some(text)
        };
        let Some(url) = value("url") else {
            return Err(fail(
                format!(
                    "Secret {} in {} has no key url: create it with the receiver's URL",
                    receiver.url_secret, self.namespace
                ),
                None,
                true,
            ));
        };
        let source = format!("kok/{}", self.namespace);
        let (body, content_type) = format::body(receiver.kind, n, &source);
        let mut request = self
            .http
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, content_type);
        if let Some(key) = value("hmac") {
            request = request.header(format::SIGNATURE_HEADER, format::signature(key.as_bytes(), &body));
        }
        let response = request
            .body(body)
            .send()
            .await
            .map_err(|e| fail(crate::redact::scrub(&without_url(&e.to_string())), None, false))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, now()));
        let permanent = status.is_client_error() && status.as_u16() != 429 && status.as_u16() != 408;
        Err(fail(
            format!("the receiver answered {status}"),
            retry_after,
            permanent,
        ))
    }
}

/// reqwest's errors name the URL: keep only what comes before it.
fn without_url(text: &str) -> String {
    match text.find(" for url (") {
        Some(at) => text[..at].to_string(),
        None => text.to_string(),
    }
}

fn record_with(record: &HealthRecord, kind: EventKind, sent: jiff::Timestamp) -> HealthRecord {
    let mut next = record.clone();
    next.notified = Some(kind.as_str().to_string());
    next.sent.insert(kind.as_str().to_string(), sent.to_string());
    next
}

fn encode<T: Serialize>(value: &T) -> serde_json::Value {
    serde_json::Value::String(serde_json::to_string(value).unwrap_or_default())
}

/// The reporter's sink that turns commit statuses into notifications in the outbox.
pub struct NotifySink {
    notifier: Arc<Notifier>,
}

impl Sink for NotifySink {
    fn name(&self) -> &str {
        SINK_NAME
    }

    /// Only the statuses that make a notification (a finished or held run, a refused commit, a
    /// rollout's end): a queued or running run's goes nowhere.
    fn takes(&self, status: &CommitStatus) -> bool {
        event::from_status("", status, "").is_some()
    }

    fn deliver<'a>(
        &'a self,
        commit: &'a str,
        status: &'a CommitStatus,
    ) -> BoxFuture<'a, Result<(), DeliveryError>> {
        Box::pin(async move {
            let Some(n) = event::from_status(commit, status, &now().to_string()) else {
                return Ok(());
            };
            self.notifier
                .enqueue(n)
                .await
                .map_err(|e| DeliveryError::Retryable {
                    sink: SINK_NAME.to_string(),
                    context: status.context.clone(),
                    commit: commit.to_string(),
                    reason: e.to_string(),
                    retry_after: None,
                })
        })
    }
}
