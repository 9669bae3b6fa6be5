//! The web view: read-only HTML pages of the fleet, its clusters, their runs and commits, on kok's HTTP
//! listener.
//!
//! - [`view`] is what the pages read: snapshots of the controller's watch caches, nothing else.
//! - [`pages`] turns snapshots into page values (pure); `templates/` lays them out, one template per page
//!   sharing `layout.html`, HTML-escaped by default.
//! - [`logs`] reads a run's log: kok's log files in local mode, the Job's pod in a meta-cluster.
//! - [`auth`] decides who may look in a meta-cluster (a Kubernetes token, TokenReview and
//!   SubjectAccessReview) and adds `/login`, the one route that is not GET; local mode has no check.
//!
//! Routes (GET only; any other method is 405): `/` the fleet (`?name=&state=&label=key=value`),
//! `/clusters/<name>`, `/operations/<name>`, `/operations/<name>/log` (the live log as Server-Sent
//! Events), `/commits/<sha>`, `/events` (`changed` whenever the view changes, for the script to fetch the
//! page again), and `/assets/*` (the stylesheet and the one script, embedded). Every
//! response carries [`CONTENT_SECURITY_POLICY`]: no inline script, nothing from elsewhere.

pub mod auth;
pub mod logs;
pub mod pages;
pub mod view;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures::Stream;
use minijinja::Environment;
use serde::Serialize;

use self::logs::LogSource;
use self::pages::Filter;
use self::view::View;

/// The policy of every response: the page's own stylesheet, script and live log, nothing inline.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; script-src 'self'; \
    img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// How often a live log looks for new lines.
const LOG_TICK: Duration = Duration::from_millis(500);

const TEMPLATES: [(&str, &str); 7] = [
    ("layout.html", include_str!("templates/layout.html")),
    ("macros.html", include_str!("templates/macros.html")),
    ("fleet.html", include_str!("templates/fleet.html")),
    ("cluster.html", include_str!("templates/cluster.html")),
    ("operation.html", include_str!("templates/operation.html")),
    ("commit.html", include_str!("templates/commit.html")),
    ("not_found.html", include_str!("templates/not_found.html")),
];
const CSS: &str = include_str!("assets/kok.css");
const JS: &str = include_str!("assets/kok.js");

/// The web view's state: what it reads and how it renders.
#[derive(Clone)]
pub struct Web {
    view: Arc<dyn View>,
    logs: Arc<dyn LogSource>,
    templates: Arc<Environment<'static>>,
    stopping: tokio::sync::watch::Receiver<bool>,
}

impl std::fmt::Debug for Web {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Web").finish_non_exhaustive()
    }
}

/// The template environment, every page template loaded (HTML-escaped, as their names end in `.html`).
pub fn templates() -> Environment<'static> {
    let mut env = Environment::new();
    for (name, source) in TEMPLATES {
        // The templates are part of the binary; the tests render every one of them.
        if let Err(e) = env.add_template(name, source) {
            tracing::error!(template = name, error = %e, "a web template does not parse");
        }
    }
    env
}

impl Web {
    /// A web view reading `view` and `logs`; live logs end when `stopping` turns true.
    pub fn new(
        view: Arc<dyn View>,
        logs: Arc<dyn LogSource>,
        stopping: tokio::sync::watch::Receiver<bool>,
    ) -> Web {
        Web {
            view,
            logs,
            templates: Arc::new(templates()),
            stopping,
        }
    }

    /// Renders `page` with `template`; `version` is the view's version read before the page was built.
    fn render(&self, template: &str, version: u64, page: impl Serialize) -> Response {
        let rendered = self
            .templates
            .get_template(template)
            .and_then(|t| t.render(minijinja::context! { page => page, version => version }));
        match rendered {
            Ok(html) => html_response(StatusCode::OK, html),
            Err(e) => {
                tracing::error!(template, error = %e, "rendering a web page failed");
                (StatusCode::INTERNAL_SERVER_ERROR, "rendering the page failed\n").into_response()
            }
        }
    }

    fn not_found(&self, what: String) -> Response {
        let html = self
            .templates
            .get_template("not_found.html")
            .and_then(|t| t.render(minijinja::context! { what => what }))
            .unwrap_or_else(|_| "not found".to_string());
        html_response(StatusCode::NOT_FOUND, html)
    }
}

fn html_response(status: StatusCode, html: String) -> Response {
    (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}

/// The web view's routes, each response with [`CONTENT_SECURITY_POLICY`] and `nosniff`.
pub fn router(web: Web) -> Router {
    Router::new()
        .route("/", get(fleet))
        .route("/clusters/{name}", get(cluster))
        .route("/operations/{name}", get(operation))
        .route("/operations/{name}/log", get(live_log))
        .route("/commits/{sha}", get(commit))
        .route("/events", get(changes))
        .route(
            "/assets/kok.css",
            get(|| async { asset("text/css; charset=utf-8", CSS) }),
        )
        .route(
            "/assets/kok.js",
            get(|| async { asset("text/javascript; charset=utf-8", JS) }),
        )
        .layer(axum::middleware::map_response(secure_headers))
        .with_state(web)
}

pub(crate) async fn secure_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        body,
    )
        .into_response()
}

fn now() -> jiff::Timestamp {
    jiff::Timestamp::now()
}

async fn fleet(State(web): State<Web>, Query(filter): Query<Filter>) -> Response {
    let version = web.view.version();
    web.render(
        "fleet.html",
        version,
        pages::fleet(web.view.as_ref(), filter, now()),
    )
}

async fn cluster(State(web): State<Web>, Path(name): Path<String>) -> Response {
    let version = web.view.version();
    match pages::cluster(web.view.as_ref(), &name, now()) {
        Some(page) => web.render("cluster.html", version, page),
        None => web.not_found(format!("cluster {name:?}")),
    }
}

async fn operation(
    State(web): State<Web>,
    Path(name): Path<String>,
    access: Option<axum::Extension<auth::LogAccess>>,
) -> Response {
    let version = web.view.version();
    let Some(op) = web.view.operation(&name) else {
        return web.not_found(format!("operation {name:?}"));
    };
    // Behind `auth::protect`, a viewer who may not read pods/log sees the run without its log.
    let log = match access {
        Some(axum::Extension(auth::LogAccess(false))) => None,
        _ => web.logs.read(&op).await,
    };
    web.render("operation.html", version, pages::operation(&op, log, now()))
}

async fn commit(State(web): State<Web>, Path(sha): Path<String>) -> Response {
    let version = web.view.version();
    web.render("commit.html", version, pages::commit(web.view.as_ref(), &sha))
}

/// The version a page was rendered at (`?v=`).
#[derive(Debug, serde::Deserialize)]
struct Since {
    v: Option<u64>,
}

/// `changed` (with the view's new version) each time the view's version moves past the page's, at most
/// once per [`LOG_TICK`]; ends when kok stops. The script then fetches the page again.
async fn changes(State(web): State<Web>, Query(since): Query<Since>) -> Response {
    let start = since.v.unwrap_or_else(|| web.view.version());
    let events = futures::stream::unfold(start, move |mut seen| {
        let web = web.clone();
        async move {
            loop {
                if *web.stopping.borrow() {
                    return None;
                }
                let now = web.view.version();
                if now != seen {
                    seen = now;
                    let event = Event::default().event("changed").data(now.to_string());
                    return Some((Ok::<_, Infallible>(event), seen));
                }
                tokio::time::sleep(LOG_TICK).await;
            }
        }
    });
    Sse::new(events).keep_alive(KeepAlive::default()).into_response()
}

/// Where a live log starts: `Last-Event-ID` of a reconnecting browser, else `?from=`.
#[derive(Debug, serde::Deserialize)]
struct From {
    from: Option<usize>,
}

async fn live_log(
    State(web): State<Web>,
    Path(name): Path<String>,
    Query(from): Query<From>,
    headers: HeaderMap,
) -> Response {
    if web.view.operation(&name).is_none() {
        return web.not_found(format!("operation {name:?}"));
    }
    let resumed = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let offset = resumed.or(from.from).unwrap_or(0);
    Sse::new(log_events(web, name, offset))
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// New whole lines of the log as they come, each event's id the offset after it; an `end` event once the
/// run has finished and every line is out. Ends without `end` when kok stops.
fn log_events(web: Web, name: String, offset: usize) -> impl Stream<Item = Result<Event, Infallible>> {
    futures::stream::unfold(Some(offset), move |offset| {
        let web = web.clone();
        let name = name.clone();
        async move {
            let mut offset = offset?;
            loop {
                if *web.stopping.borrow() {
                    return None;
                }
                let op = web.view.operation(&name);
                let finished = op
                    .as_ref()
                    .is_none_or(|op| crate::controller::queue::phase(op).is_terminal());
                let log = match &op {
                    Some(op) => web.logs.read(op).await.unwrap_or_default(),
                    None => String::new(),
                };
                if offset > log.len() || !log.is_char_boundary(offset) {
                    offset = 0;
                }
                let fresh = &log[offset..];
                let whole = if finished {
                    fresh.len()
                } else {
                    fresh.rfind('\n').map_or(0, |i| i + 1)
                };
                if whole > 0 {
                    let lines = fresh[..whole].trim_end_matches('\n').replace('\r', "");
                    offset += whole;
                    let event = Event::default().id(offset.to_string()).data(lines);
                    return Some((Ok(event), Some(offset)));
                }
                if finished {
                    return Some((Ok(Event::default().event("end").data("finished")), None));
                }
                tokio::time::sleep(LOG_TICK).await;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        Cluster, ClusterOperation, ClusterOperationSpec, ClusterOperationStatus, ClusterSpec, HostCounts,
        OperationSource, Phase, RunFailure, RunSummary,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    const SCRIPT: &str = "<script>alert(1)</script>";

    fn op(cluster: &str, id: &str, phase: Phase) -> ClusterOperation {
        let mut op = ClusterOperation::new(
            &format!("{cluster}-{id}-0123abcd"),
            ClusterOperationSpec {
                cluster: cluster.into(),
                id: id.into(),
                action: "cluster.yml".into(),
                source: OperationSource {
                    commit: "c0ffee0123456789".into(),
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        let start: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        op.status = Some(ClusterOperationStatus {
            phase,
            start_time: (phase != Phase::Queued).then_some(Time(start)),
            end_time: phase
                .is_terminal()
                .then(|| Time(start + jiff::SignedDuration::from_secs(192))),
            message: Some(format!("message {SCRIPT}")),
            ..Default::default()
        });
        op
    }

    fn fleet() -> view::Snapshot {
        let mut failed = op(SCRIPT, "install", Phase::Failed);
        let status = failed.status.as_mut().unwrap();
        status.failure = Some(Box::new(RunFailure {
            task: Some(format!("kubernetes : {SCRIPT}")),
            host: Some("node2".into()),
            message: format!("boom {SCRIPT}"),
            ..Default::default()
        }));
        status.summary = Some(Box::new(RunSummary {
            hosts: [(
                "node2".to_string(),
                HostCounts {
                    failed: 1,
                    ..Default::default()
                },
            )]
            .into(),
            ..Default::default()
        }));
        view::Snapshot {
            clusters: ["calm", SCRIPT, "busy"]
                .into_iter()
                .map(|name| {
                    let spec = ClusterSpec::for_test();
                    Cluster::new(name, spec)
                })
                .collect(),
            operations: vec![
                op("calm", "install", Phase::Succeeded),
                failed,
                op("busy", "install", Phase::Running),
                op("busy", "scale", Phase::Queued),
            ],
        }
    }

    fn render(template: &str, page: impl Serialize) -> String {
        let env = templates();
        env.get_template(template)
            .unwrap()
            .render(minijinja::context! { page => page })
            .unwrap()
    }

    fn assert_escaped(html: &str) {
        assert!(!html.contains(SCRIPT), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"),
            "{html}"
        );
    }

    #[test]
    fn a_cluster_name_with_a_script_tag_shows_as_text_on_every_page() {
        let view = fleet();
        let now = jiff::Timestamp::now();
        assert_escaped(&render("fleet.html", pages::fleet(&view, Filter::default(), now)));
        assert_escaped(&render(
            "cluster.html",
            pages::cluster(&view, SCRIPT, now).unwrap(),
        ));
        let failed = view.operation(&format!("{SCRIPT}-install-0123abcd")).unwrap();
        let html = render(
            "operation.html",
            pages::operation(&failed, Some(SCRIPT.into()), now),
        );
        assert_escaped(&html);
        assert!(html.contains("node2"), "the failing host is shown: {html}");
        assert_escaped(&render("commit.html", pages::commit(&view, "c0ffee0")));
    }

    #[test]
    fn the_fleet_puts_trouble_first_counts_states_and_filters_by_state_and_name() {
        let view = fleet();
        let now = jiff::Timestamp::now();
        let page = pages::fleet(&view, Filter::default(), now);
        let order: Vec<_> = page
            .rows
            .iter()
            .map(|r| (r.name.as_str(), r.state.as_str()))
            .collect();
        assert_eq!(
            order,
            [(SCRIPT, "failed"), ("busy", "running"), ("calm", "succeeded")]
        );
        let counts: Vec<_> = page.counts.iter().map(|c| (c.state, c.count)).collect();
        assert_eq!(
            counts,
            [
                ("failed", 1),
                ("waiting", 0),
                ("running", 1),
                ("succeeded", 1),
                ("idle", 0)
            ]
        );
        assert!(
            page.rows[1].activity.starts_with("running install for "),
            "{:?}",
            page.rows[1]
        );

        let running = Filter {
            state: Some("running".into()),
            ..Default::default()
        };
        let names = |f| {
            pages::fleet(&view, f, now)
                .rows
                .into_iter()
                .map(|r| r.name)
                .collect::<Vec<_>>()
        };
        assert_eq!(names(running), ["busy"]);
        let named = Filter {
            name: Some("cal".into()),
            ..Default::default()
        };
        assert_eq!(names(named), ["calm"]);
    }

    #[test]
    fn a_cluster_page_lists_the_queue_in_order_with_each_reason_and_the_history() {
        let view = fleet();
        let page = pages::cluster(&view, "busy", jiff::Timestamp::now()).unwrap();
        let queue: Vec<_> = page
            .queue
            .iter()
            .map(|o| (o.id.as_str(), o.phase.as_str()))
            .collect();
        assert_eq!(queue, [("install", "Running"), ("scale", "Queued")]);
        assert_eq!(page.queue[1].outcome, format!("message {SCRIPT}"));
        assert!(page.history.is_empty());
        assert!(pages::cluster(&view, "unknown", jiff::Timestamp::now()).is_none());
    }

    #[test]
    fn the_fleet_page_of_a_thousand_clusters_stays_under_500_kb() {
        let mut view = view::Snapshot::default();
        let template = fleet();
        for i in 0..1000 {
            let name = format!("prod-region-{i:04}");
            let mut cluster = template.clusters[0].clone();
            cluster.metadata.name = Some(name.clone());
            view.clusters.push(cluster);
            for (j, phase) in [Phase::Succeeded, Phase::Failed, Phase::Running, Phase::Queued]
                .into_iter()
                .enumerate()
            {
                if j <= i % 4 {
                    view.operations.push(op(&name, &format!("operation-{j}"), phase));
                }
            }
        }
        let html = render(
            "fleet.html",
            pages::fleet(&view, Filter::default(), jiff::Timestamp::now()),
        );
        assert_eq!(html.matches("<tr class=").count(), 1000);
        assert!(html.len() <= 500_000, "{} bytes", html.len());
    }

    #[test]
    fn a_running_operation_page_streams_its_log_from_where_the_page_ends() {
        let view = fleet();
        let running = view.operation("busy-install-0123abcd").unwrap();
        let html = render(
            "operation.html",
            pages::operation(&running, Some("line one\n".into()), jiff::Timestamp::now()),
        );
        assert!(
            html.contains(r#"data-stream="/operations/busy-install-0123abcd/log?from=9""#),
            "{html}"
        );
        assert!(
            html.contains("cluster.yml"),
            "the steps name the playbook: {html}"
        );
    }
}
