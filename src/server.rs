//! The HTTP listener: /healthz, /readyz, /metrics and `/hooks/<provider>`.
//!
//! - `GET /healthz`: 200 while the process runs.
//! - `GET /readyz`: 503 until the first reconcile completed, and while the git remote has been
//!   unreachable for longer than [`Readiness`]'s threshold; 200 otherwise. The body says why.
//! - `GET /metrics`: the [`Metrics`] registry, in OpenMetrics text when the scraper accepts it (Prometheus
//!   does), else in the Prometheus text format; gzip-compressed when `Accept-Encoding` takes gzip (Prometheus
//!   asks for it).
//! - `GET /`, `/clusters/...` and the rest of the web view, when [`ServerState::web`] holds its routes.
//! - `POST /hooks/github|gitlab|gitea|generic`: verified with [`crate::source::trigger::verify`]
//!   against the webhook secret, then a "poll now" is sent on the trigger channel; a pull-request event
//!   (GitHub/Gitea `pull_request`, GitLab `Merge Request Hook`) also says which pull request moved or
//!   closed, and the poll plans it at once. Answers 202
//!   accepted, 401 bad or missing signature, 413 body over
//!   [`MAX_WEBHOOK_BODY`] bytes, 404 unknown provider or
//!   webhooks not configured, 405 another method.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;

use crate::metrics::Metrics;
use crate::source::trigger::{pull_request_event, verify, Provider, Reason, TriggerSender, MAX_WEBHOOK_BODY};

/// Address `--listen` binds when not given.
pub const DEFAULT_LISTEN: &str = "0.0.0.0:8080";
/// How long the remote may be unreachable before the service reports not ready.
pub const DEFAULT_UNREACHABLE_THRESHOLD: Duration = Duration::from_secs(300);

/// Readiness of the service, updated by the reconcile loop and read by `/readyz`.
#[derive(Debug)]
pub struct Readiness {
    reconciled: AtomicBool,
    unreachable_since: Mutex<Option<Instant>>,
    threshold: Duration,
}

impl Readiness {
    /// Not ready until [`Readiness::mark_reconciled`]; not ready while the remote has failed for
    /// longer than `threshold`.
    pub fn new(threshold: Duration) -> Arc<Self> {
        Arc::new(Readiness {
            reconciled: AtomicBool::new(false),
            unreachable_since: Mutex::new(None),
            threshold,
        })
    }

    /// Records that a reconcile of a commit completed.
    pub fn mark_reconciled(&self) {
        self.reconciled.store(true, Ordering::Relaxed);
    }

    /// Records a successful contact with the git remote.
    pub fn remote_reachable(&self) {
        *self.unreachable_since.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Records a failed contact with the git remote (the first failure in a row starts the clock).
    pub fn remote_unreachable(&self) {
        self.unreachable_since
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(Instant::now);
    }

    /// `Ok` when ready, else why not.
    pub fn check(&self) -> Result<(), String> {
        if !self.reconciled.load(Ordering::Relaxed) {
            return Err("not ready: the first reconcile has not completed".to_string());
        }
        let since = *self.unreachable_since.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(since) = since {
            let down = since.elapsed();
            if down > self.threshold {
                return Err(format!(
                    "not ready: the git remote has been unreachable for {}s",
                    down.as_secs()
                ));
            }
        }
        Ok(())
    }
}

/// The webhook secret shared by every provider. Its `Debug` never shows the value.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret(Vec<u8>);

impl WebhookSecret {
    /// Wraps a secret (surrounding whitespace, such as a file's trailing newline, is dropped).
    pub fn new(secret: impl AsRef<[u8]>) -> Self {
        let secret = secret.as_ref().trim_ascii().to_vec();
        if let Ok(text) = std::str::from_utf8(&secret) {
            crate::redact::register(text);
        }
        WebhookSecret(secret)
    }
}

impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecret(<redacted>)")
    }
}

/// What the handlers share.
#[derive(Clone, Debug)]
pub struct ServerState {
    /// Readiness, updated by the reconcile loop.
    pub readiness: Arc<Readiness>,
    /// Metrics rendered on `/metrics`.
    pub metrics: Metrics,
    /// Secret the webhooks are verified with; `None` disables `/hooks/*` (404).
    pub webhook_secret: Option<WebhookSecret>,
    /// Where verified webhooks ask for a poll.
    pub trigger: Option<TriggerSender>,
    /// The web view's routes (`crate::web::router`), when it is on.
    pub web: Option<Router>,
}

impl ServerState {
    /// State with `metrics`, no webhooks and a fresh readiness.
    pub fn new(readiness: Arc<Readiness>, metrics: Metrics) -> Self {
        ServerState {
            readiness,
            metrics,
            webhook_secret: None,
            trigger: None,
            web: None,
        }
    }
}

/// Errors of the listener.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Binding the address failed.
    #[error("binding the HTTP listener to {addr}: {source}; choose another --listen address")]
    Bind {
        /// The address.
        addr: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Serving stopped with an error.
    #[error("serving HTTP: {0}")]
    Serve(#[source] std::io::Error),
}

/// Binds `addr` (e.g. [`DEFAULT_LISTEN`] or `127.0.0.1:0`).
pub async fn bind(addr: &str) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr).await.map_err(|source| ServerError::Bind {
        addr: addr.to_string(),
        source,
    })
}

/// The routes, for serving or for tests.
pub fn router(state: ServerState) -> Router {
    let web = state.web.clone();
    let router = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/hooks/{provider}", post(hook))
        .layer(DefaultBodyLimit::max(MAX_WEBHOOK_BODY))
        .with_state(state);
    match web {
        Some(web) => router.merge(web),
        None => router,
    }
}

/// Serves on `listener` until `shutdown` completes, then finishes in-flight requests and returns.
pub async fn serve(
    listener: TcpListener,
    state: ServerState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "HTTP listener serving /healthz, /readyz, /metrics and /hooks");
    }
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(ServerError::Serve)
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<ServerState>) -> Response {
    match state.readiness.check() {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
    }
}

async fn metrics(State(state): State<ServerState>, headers: HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let (body, content_type) = state.metrics.negotiate(accept);
    let vary = (header::VARY, "Accept-Encoding");
    if accepts_gzip(&headers) {
        if let Some(gzipped) = gzip(body.as_bytes()) {
            let encoding = (header::CONTENT_ENCODING, "gzip");
            return ([(header::CONTENT_TYPE, content_type), encoding, vary], gzipped).into_response();
        }
    }
    ([(header::CONTENT_TYPE, content_type), vary], body).into_response()
}

/// Whether `Accept-Encoding` takes gzip (named, with a q-value above 0). Prometheus asks for it: the
/// fleet's gauges, about 1 MB of text at 1,000 clusters with every gauge, travel as a tenth of that.
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let mut parts = coding.split(';').map(str::trim);
            let named = parts.next().is_some_and(|name| name.eq_ignore_ascii_case("gzip"));
            let refused = parts.any(|param| {
                param
                    .strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            named && !refused
        })
}

/// `body` gzip-compressed at the fastest level (a scrape's text compresses about tenfold even so);
/// `None` when compressing fails, and the text goes as it is.
pub fn gzip(body: &[u8]) -> Option<Vec<u8>> {
    use std::io::Write;
    let mut out =
        flate2::write::GzEncoder::new(Vec::with_capacity(body.len() / 8), flate2::Compression::fast());
    out.write_all(body).ok()?;
    out.finish().ok()
}

async fn hook(
    State(state): State<ServerState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(provider) = Provider::from_name(&name) else {
        return (
            StatusCode::NOT_FOUND,
            format!("unknown webhook provider {name:?}; use github, gitlab, gitea or generic\n"),
        )
            .into_response();
    };
    let Some(secret) = &state.webhook_secret else {
        return (
            StatusCode::NOT_FOUND,
            "webhooks are not configured: set --webhook-secret-file\n",
        )
            .into_response();
    };
    if let Err(err) = verify(provider, &headers, &body, &secret.0) {
        let message = crate::redact::scrub(&err.to_string());
        tracing::warn!(provider = ?provider, error = %message, "webhook refused");
        let code = StatusCode::from_u16(err.status()).unwrap_or(StatusCode::UNAUTHORIZED);
        return (code, format!("{message}\n")).into_response();
    }
    if let Some(trigger) = &state.trigger {
        match pull_request_event(provider, &headers, &body) {
            Some(event) => {
                tracing::info!(provider = ?provider, number = event.number, closed = event.closed, "pull-request webhook accepted; planning it now");
                trigger.pull_request(provider, event);
            }
            None => {
                let queued = trigger.trigger(Reason::Webhook(provider));
                tracing::debug!(provider = ?provider, queued, "webhook accepted; poll requested");
            }
        }
    }
    (StatusCode::ACCEPTED, "accepted\n").into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_is_taken_when_named_with_a_q_value_above_zero() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::ACCEPT_ENCODING, value.parse().unwrap());
            accepts_gzip(&headers)
        };
        for yes in [
            "gzip",
            "deflate, gzip",
            "GZIP;q=0.5",
            "identity;q=1, gzip ; q=0.001",
        ] {
            assert!(with(yes), "{yes}");
        }
        for no in [
            "identity",
            "deflate, br",
            "gzip;q=0",
            "gzip; q=0.0",
            "x-gzip2",
            "*",
        ] {
            assert!(!with(no), "{no}");
        }
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    #[test]
    fn readiness_waits_for_the_first_reconcile_and_tolerates_short_outages() {
        let r = Readiness::new(Duration::from_secs(60));
        assert!(r.check().is_err());
        r.mark_reconciled();
        assert_eq!(r.check(), Ok(()));
        r.remote_unreachable();
        assert_eq!(r.check(), Ok(()), "a fresh outage is within the threshold");
        let zero = Readiness::new(Duration::ZERO);
        zero.mark_reconciled();
        zero.remote_unreachable();
        std::thread::sleep(Duration::from_millis(2));
        assert!(zero.check().unwrap_err().contains("unreachable"));
        zero.remote_reachable();
        assert_eq!(zero.check(), Ok(()));
    }

    #[test]
    fn webhook_secret_debug_is_redacted() {
        assert_eq!(
            format!("{:?}", WebhookSecret::new("hunter2\n")),
            "WebhookSecret(<redacted>)"
        );
    }
}
