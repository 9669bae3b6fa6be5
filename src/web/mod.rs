//! The web view: read-only HTML pages of the fleet, its clusters, their runs, commits and rollouts, on
//! kok's HTTP listener.
//!
//! - [`view`] is what the pages read: snapshots of the controller's watch caches, nothing else.
//! - [`pages`] turns snapshots into page values (pure), [`rollouts`] those of the rollouts; `templates/`
//!   lays them out, one template per page sharing `layout.html`, HTML-escaped by default.
//! - [`logs`] reads a run's log: kok's log files in local mode, the Job's pod in a meta-cluster.
//! - [`auth`] decides who may look in a meta-cluster (a Kubernetes token, TokenReview and
//!   SubjectAccessReview) and adds `/login`, the one route that is not GET; local mode has no check.
//!
//! Routes (GET only; any other method is 405): `/` the fleet (`?name=&state=&label=key=value`),
//! `/clusters/<name>`, `/operations/<name>`, `/operations/<name>/log` (the live log as Server-Sent
//! Events), `/commits/<sha>`, `/rollouts/<name>`, `/events` (`changed` whenever the view changes, for
//! the script to fetch the page again), and `/assets/*` (the stylesheet and the one script, embedded).
//! Every response carries [`CONTENT_SECURITY_POLICY`]: no inline script, nothing from elsewhere.

pub mod auth;
pub mod logs;
pub mod pages;
pub mod rollouts;
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

const TEMPLATES: [(&str, &str); 8] = [
    ("layout.html", include_str!("templates/layout.html")),
    ("macros.html", include_str!("templates/macros.html")),
    ("fleet.html", include_str!("templates/fleet.html")),
    ("cluster.html", include_str!("templates/cluster.html")),
    ("operation.html", include_str!("templates/operation.html")),
    ("commit.html", include_str!("templates/commit.html")),
    ("rollout.html", include_str!("templates/rollout.html")),
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
        .route("/rollouts/{name}", get(rollout))
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

/// Builds a page from the view off the async threads: the cluster, run and commit pages may read the
/// local git cache (a commit's author, the inventory, the notes) the first time they name something.
async fn built<T: Send + 'static>(
    web: &Web,
    build: impl FnOnce(&dyn View) -> T + Send + 'static,
) -> Option<T> {
    let view = web.view.clone();
    tokio::task::spawn_blocking(move || build(view.as_ref()))
        .await
        .ok()
}

async fn cluster(State(web): State<Web>, Path(name): Path<String>) -> Response {
    let version = web.view.version();
    let wanted = name.clone();
    match built(&web, move |view| pages::cluster(view, &wanted, now()))
        .await
        .flatten()
    {
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
    match built(&web, move |view| pages::operation(view, &op, log, now())).await {
        Some(page) => web.render("operation.html", version, page),
        None => web.not_found(format!("operation {name:?}")),
    }
}

async fn commit(State(web): State<Web>, Path(sha): Path<String>) -> Response {
    let version = web.view.version();
    match built(&web, move |view| pages::commit(view, &sha)).await {
        Some(page) => web.render("commit.html", version, page),
        None => web.not_found("commit".to_string()),
    }
}

async fn rollout(State(web): State<Web>, Path(name): Path<String>) -> Response {
    let version = web.view.version();
    match rollouts::rollout(web.view.as_ref(), &name, now()) {
        Some(page) => web.render("rollout.html", version, page),
        None => web.not_found(format!("rollout {name:?}")),
    }
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
    use crate::api::{Cluster, ClusterOperation, ClusterSpec, HostCounts, Phase, RunFailure, RunSummary};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    const SCRIPT: &str = "<script>alert(1)</script>";

    fn op(cluster: &str, id: &str, phase: Phase) -> ClusterOperation {
        view::Snapshot::sample_operation(cluster, id, phase, format!("message {SCRIPT}"))
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
                    let mut cluster = Cluster::new(name, ClusterSpec::for_test());
                    cluster.metadata.labels = Some([("env".to_string(), "prod".to_string())].into());
                    cluster.status = Some(view::Snapshot::sample_health(name != "busy"));
                    cluster
                })
                .collect(),
            operations: vec![
                op("calm", "install", Phase::Succeeded),
                failed,
                op("busy", "install", Phase::Running),
                op("busy", "scale", Phase::Queued),
            ],
            ..Default::default()
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
            pages::operation(&view, &failed, Some(SCRIPT.into()), now),
        );
        assert_escaped(&html);
        assert!(html.contains("node2"), "the failing host is shown: {html}");
        assert_escaped(&render("commit.html", pages::commit(&view, "c0ffee0")));
    }

    #[test]
    fn a_failed_hosts_row_marks_its_failed_count_not_its_ok_count() {
        let view = fleet();
        let failed = view.operation(&format!("{SCRIPT}-install-0123abcd")).unwrap();
        let html = render(
            "operation.html",
            pages::operation(&view, &failed, None, jiff::Timestamp::now()),
        );
        let row = html
            .lines()
            .find(|l| l.contains("<th scope=\"row\">node2</th>"))
            .unwrap_or_else(|| panic!("node2's row: {html}"));
        assert!(
            row.contains("<td>0</td><td>0</td><td class=\"t-failure\">1</td><td>0</td>"),
            "only the Failed count is marked: {row}"
        );
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
        assert_eq!(page.rows[1].activity, "running install");
        assert_eq!(page.rows[1].running_since, Some(1_767_225_600));

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
    fn the_fleet_page_shows_500_rows_a_page_with_links_between_pages_and_stays_small_at_ten_thousand() {
        let now = jiff::Timestamp::now();
        let view = view::Snapshot::sample_fleet(10_000);
        let first = pages::fleet(&view, Filter::default(), now);
        assert_eq!(
            (first.page, first.pages, first.matching, first.first_row),
            (1, 20, 10_000, 1)
        );
        assert!(first.previous.is_none());
        let html = render("fleet.html", first);
        assert_eq!(html.matches("<tr class=").count(), pages::FLEET_PAGE_ROWS);
        assert!(html.len() <= 300_000, "{} bytes", html.len());
        assert!(
            html.contains("1–500 of 10000 of 10000 clusters (page 1 of 20)"),
            "{html}"
        );
        assert!(html.contains(r#"<a rel="next" href="/?page=2">"#), "{html}");
        // The last page, asked past the end, and a filter the links keep.
        let filter = |page: &str, name: Option<&str>| Filter {
            page: Some(page.to_string()),
            name: name.map(str::to_string),
            ..Filter::default()
        };
        let last = pages::fleet(&view, filter("99", None), now);
        assert_eq!((last.page, last.first_row, last.rows.len()), (20, 9_501, 500));
        assert!(last.next.is_none());
        // Every cluster is on exactly one page, trouble first across pages; the links keep the filter.
        let view = view::Snapshot::sample_fleet(1_200);
        let mut seen = std::collections::BTreeSet::new();
        let mut trouble = Vec::new();
        for p in 1..=3 {
            for row in pages::fleet(&view, filter(&p.to_string(), None), now).rows {
                trouble.push(row.trouble());
                assert!(seen.insert(row.name));
            }
        }
        assert_eq!(seen.len(), 1_200);
        assert!(trouble.is_sorted());
        let some = pages::fleet(&view, filter("x", Some("prod-region-0")), now);
        assert_eq!((some.page, some.pages, some.matching), (1, 2, 1_000));
        let html = render("fleet.html", some);
        assert!(
            html.contains(r#"href="/?name=prod-region-0&amp;page=2""#),
            "{html}"
        );
    }

    #[test]
    fn the_fleet_shows_health_version_and_nodes_puts_an_unhealthy_cluster_before_a_calm_one_and_filters() {
        let mut view = fleet();
        let mut sick = view.clusters[0].clone();
        sick.metadata.name = Some("sick".into());
        sick.metadata.labels = Some([("env".to_string(), "staging".to_string())].into());
        sick.status = Some(view::Snapshot::sample_health(false));
        view.clusters.push(sick);
        view.operations.push(op("sick", "install", Phase::Succeeded));
        let now = jiff::Timestamp::now();
        let page = pages::fleet(&view, Filter::default(), now);
        let order: Vec<_> = page.rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(order, [SCRIPT, "busy", "sick", "calm"]);
        let health: Vec<_> = page.health.iter().map(|c| (c.state, c.count)).collect();
        assert_eq!(health, [("unhealthy", 2), ("unknown", 0), ("healthy", 2)]);

        let html = render("fleet.html", &page);
        assert!(html.contains("v1.31.4"), "{html}");
        assert!(html.contains("<td class=\"short\">4/5</td>"), "{html}");
        assert!(html.contains("NodesReady: nodes not ready"), "{html}");
        assert!(html.contains("<small>env=staging</small>"), "{html}");
        // The running cluster has no finished run yet: its last outcome says so instead of staying empty.
        assert!(html.contains("no run finished yet"), "{html}");
        assert!(html.contains("data-t=\"1767225600\""), "{html}");

        let names = |f: Filter| {
            pages::fleet(&view, f, now)
                .rows
                .into_iter()
                .map(|r| r.name)
                .collect::<Vec<_>>()
        };
        let label = |l: &str| Filter {
            label: Some(l.into()),
            ..Default::default()
        };
        assert_eq!(names(label("env=staging")), ["sick"]);
        assert_eq!(names(label("env")).len(), 4);
        assert!(names(label("team")).is_empty());
        let unhealthy = Filter {
            health: Some("unhealthy".into()),
            ..Default::default()
        };
        assert_eq!(names(unhealthy), ["busy", "sick"]);
    }

    const SHA: &str = view::SAMPLE_COMMIT;

    #[test]
    fn a_cluster_page_shows_the_changelog_with_authors_the_next_window_the_durations_and_the_hosts() {
        let mut view = fleet();
        let calm = &mut view.clusters[0];
        calm.spec.source = crate::api::ClusterSource {
            path: "clusters/calm".into(),
            revision: format!("main@sha1:{SHA}"),
        };
        calm.spec.maintenance = Some(crate::api::saturday_night_in_berlin());
        let mut failed = op("calm", "upgrade", Phase::Failed);
        let status = failed.status.as_mut().unwrap();
        status.start_time = Some(Time("2026-01-02T00:00:00Z".parse().unwrap()));
        status.end_time = Some(Time("2026-01-02T00:01:00Z".parse().unwrap()));
        view.operations.push(failed);
        view.commits.insert(
            SHA.into(),
            view::CommitMeta {
                author: "Ada <b>".into(),
                subject: "Install calm".into(),
                date: "2026-01-01T00:00:00Z".into(),
            },
        );
        let hosts = "all:\n  hosts:\n    node1:\n      ip: 10.0.0.1\n    node2:\n  children:\n    kube_node:\n      hosts:\n        node2:\n";
        view.inventories.insert(
            (SHA.into(), "clusters/calm".into()),
            Arc::new(crate::layout::read_inventory(hosts).unwrap()),
        );
        // A Friday noon in Berlin: the Saturday window opens in 13 hours.
        let now: jiff::Timestamp = "2026-01-02T11:00:00Z".parse().unwrap();
        let page = pages::cluster(&view, "calm", now).unwrap();
        let history: Vec<_> = page.history.iter().map(|l| l.id.as_str()).collect();
        assert_eq!(history, ["upgrade", "install"], "newest first");
        assert_eq!(page.bars.len(), 2);
        assert!(
            page.bars[0].height > page.bars[1].height,
            "install (3m12s) drawn taller than upgrade (1m): {:?}",
            page.bars
        );
        assert_eq!(
            page.window.as_deref(),
            Some("next window opens Sat 2026-01-03 02:00 Europe/Berlin (in 14h 0m)")
        );

        let html = render("cluster.html", &page);
        assert!(
            html.contains("Install calm") && html.contains("by Ada &lt;b&gt;"),
            "{html}"
        );
        assert!(
            html.contains("<svg viewBox=\"0 0 60 40\" width=\"120\""),
            "{html}"
        );
        assert!(html.contains("<title>upgrade: 1m0s, Failed</title>"), "{html}");
        assert!(
            html.contains("Durations of the last 2 runs, oldest on the left; the longest took 3m12s."),
            "{html}"
        );
        assert!(
            html.contains("<th scope=\"row\">node1</th><td>10.0.0.1</td><td></td>"),
            "{html}"
        );
        assert!(html.contains("<td>kube_node</td>"), "{html}");
        assert!(html.contains("no ssh Secret named (none needed)"), "{html}");
        assert!(!html.contains("NoSecret"), "{html}");
        assert!(html.contains("Nodes ready</dt><dd>5 of 5"), "{html}");
    }

    #[test]
    fn the_days_left_on_a_clusters_certificates_show_on_the_fleet_and_its_page_marked_inside_the_window() {
        let mut view = fleet();
        let mut sick = view.clusters[0].clone();
        sick.metadata.name = Some("sick".into());
        sick.status = Some(view::Snapshot::sample_health(false));
        view.clusters.push(sick);
        // Sample certificates run from 2026-01-01: 300 days for a calm cluster, 10 for a sick one.
        let now: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let page = pages::fleet(&view, Filter::default(), now);
        let html = render("fleet.html", &page);
        assert!(html.contains("<th scope=\"col\">Certificates</th>"), "{html}");
        assert!(html.contains("<td class=short>10d</td>"), "{html}");
        assert!(html.contains("<td>300d</td>"), "{html}");
        assert!(
            html.contains("CertificatesValid: certificate expires soon"),
            "{html}"
        );

        let page = pages::cluster(&view, "sick", now).unwrap();
        let days = page.row.health.certificates.as_ref().unwrap();
        assert_eq!((days.days_left, days.renew()), (10, true));
        let html = render("cluster.html", &page);
        assert!(
            html.contains(
                "<dt>Certificates</dt><dd class=\"short\">10 days left: CertificatesValid message</dd>"
            ),
            "{html}"
        );
        let later: jiff::Timestamp = "2026-01-12T00:00:00Z".parse().unwrap();
        let html = render("cluster.html", pages::cluster(&view, "sick", later).unwrap());
        assert!(html.contains("<dd class=\"short\">expired: "), "{html}");
    }

    #[test]
    fn a_cluster_with_one_finished_run_says_so_under_its_durations() {
        let view = fleet();
        let page = pages::cluster(&view, "calm", jiff::Timestamp::now()).unwrap();
        assert_eq!(page.bars.len(), 1);
        let html = render("cluster.html", &page);
        assert!(
            html.contains("Duration of the one run so far: 3m12s.</figcaption>"),
            "{html}"
        );
        assert!(!html.contains("the last 1 runs"), "{html}");
    }

    #[test]
    fn an_operation_page_names_its_phases_with_their_times_its_commit_and_its_status_once() {
        let mut view = fleet();
        view.commits.insert(
            SHA.into(),
            view::CommitMeta {
                author: "Ada".into(),
                subject: "Install it".into(),
                date: String::new(),
            },
        );
        let mut failed = view.operation(&format!("{SCRIPT}-install-0123abcd")).unwrap();
        failed.metadata.creation_timestamp = Some(Time("2025-12-31T23:59:50Z".parse().unwrap()));
        let html = render(
            "operation.html",
            pages::operation(&view, &failed, None, jiff::Timestamp::now()),
        );
        for needle in [
            "<strong>Created</strong>",
            "<strong>Started</strong>",
            "(waited 10s)",
            "<strong>Ended</strong>",
            "(ran 3m12s)",
            "Install it",
            "by Ada",
            "<span class=\"status t-failure\">failure</span> failed at TASK",
        ] {
            assert!(html.contains(needle), "{needle:?} missing: {html}");
        }
        assert!(!html.contains("failure failed"), "{html}");
    }

    #[test]
    fn a_commit_page_lists_every_noted_status_and_a_pull_request_s_plan() {
        use crate::api::StatusState;
        use crate::report::notes::NoteEntry;
        let mut view = fleet();
        let note = |context: &str, state, description: &str| NoteEntry {
            context: context.into(),
            state,
            time: "2026-01-01T00:00:00Z".into(),
            target_url: None,
            description: description.into(),
            run: None,
        };
        view.notes.insert(
            SHA.into(),
            vec![
                note("kok/sync", StatusState::Success, "materialized 3 clusters"),
                note("kok/calm/install", StatusState::Success, "succeeded"),
                note(
                    "kok/plan",
                    StatusState::Success,
                    "2 clusters change, 1 operation runs",
                ),
                note("kok/gone/old", StatusState::Failure, "failed long ago"),
            ],
        );
        view.plans
            .insert(SHA.into(), "cluster calm\n  ~ Cluster calm <b>\n".into());
        let page = pages::commit(&view, "c0ffee0");
        assert_eq!(page.sha, SHA, "the whole sha of the commit the prefix names");
        let contexts: Vec<_> = page.statuses.iter().map(|l| l.status.context.as_str()).collect();
        assert_eq!(
            contexts,
            [
                "kok/<script>alert(1)</script>/install",
                "kok/busy/install",
                "kok/busy/scale",
                "kok/calm/install",
                "kok/gone/old",
                "kok/plan",
                "kok/sync"
            ]
        );
        let html = render("commit.html", &page);
        assert!(html.contains("Pull-request plan"), "{html}");
        assert!(html.contains("2 clusters change, 1 operation runs"), "{html}");
        assert!(
            html.contains(
                "<pre class=\"plan\" tabindex=\"0\">cluster calm\n  ~ Cluster calm &lt;b&gt;\n</pre>"
            ),
            "{html}"
        );
        assert!(
            html.contains("href=\"/operations/calm-install-0123abcd\""),
            "{html}"
        );
        assert!(
            html.contains("<th scope=\"row\">kok&#x2f;gone&#x2f;old</th>"),
            "{html}"
        );
    }

    /// `fleet()` with rollout `upgrade` of two waves: `canary` (calm, succeeded) and `rest` (busy, whose
    /// run waits, and <script>, not started), baking until 2026-01-01T01:00:00Z.
    fn with_rollout() -> view::Snapshot {
        use crate::api::{
            FleetRollout, FleetRolloutSpec, FleetRolloutStatus, OperationRollout, RolloutPhase, RolloutWave,
            WaveStatus, LABEL_ROLLOUT, LABEL_WAVE,
        };
        let mut view = fleet();
        for (cluster, wave, phase) in [
            ("calm", "canary", Phase::Succeeded),
            ("busy", "rest", Phase::Queued),
        ] {
            let mut run = op(cluster, "upgrade", phase);
            run.spec.rollout = Some(OperationRollout {
                name: "upgrade".into(),
                rerun: 0,
            });
            run.metadata.labels = Some(
                [
                    (LABEL_ROLLOUT.to_string(), "upgrade".to_string()),
                    (LABEL_WAVE.to_string(), wave.to_string()),
                ]
                .into(),
            );
            view.operations.push(run);
        }
        let wave = |name: &str, clusters: &[&str]| RolloutWave {
            name: name.into(),
            clusters: clusters.iter().map(|c| c.to_string()).collect(),
            max_parallel: None,
        };
        let counts = |name: &str, pending, succeeded| WaveStatus {
            name: name.into(),
            pending,
            succeeded,
            ..Default::default()
        };
        let mut rollout = FleetRollout::new(
            "upgrade",
            FleetRolloutSpec {
                operation_id: "upgrade".into(),
                action: "upgrade-cluster.yml".into(),
                waves: vec![wave("canary", &["calm"]), wave("rest", &["busy", SCRIPT])],
                bake_seconds: 3600,
                ..Default::default()
            },
        );
        rollout.status = Some(FleetRolloutStatus {
            phase: RolloutPhase::Baking,
            waves: vec![counts("canary", 0, 1), counts("rest", 2, 0)],
            current_wave: Some("canary".into()),
            progress: Some("1/3".into()),
            next_wave_time: Some(Time("2026-01-01T01:00:00Z".parse().unwrap())),
            message: Some(format!("wave rest waits for the bake of canary {SCRIPT}")),
            commit: Some(SHA.into()),
            ..Default::default()
        });
        view.rollouts.push(rollout);
        view
    }

    #[test]
    fn a_rollout_page_shows_why_it_waits_and_each_wave_as_a_bar_with_its_clusters_linked() {
        let view = with_rollout();
        let now: jiff::Timestamp = "2026-01-01T00:15:00Z".parse().unwrap();
        let page = rollouts::rollout(&view, "upgrade", now).unwrap();
        assert_eq!(page.row.phase, "baking");
        assert_eq!((page.row.done, page.row.total), (1, 3));
        assert_eq!(
            page.next_wave,
            Some(("2026-01-01T01:00:00Z".to_string(), "45m0s".to_string()))
        );
        let states = |w: &rollouts::WaveLine| {
            w.clusters
                .iter()
                .map(|c| (c.name.clone(), c.state))
                .collect::<Vec<_>>()
        };
        assert_eq!(states(&page.waves[0]), [("calm".to_string(), "succeeded")]);
        assert_eq!(
            states(&page.waves[1]),
            [("busy".to_string(), "pending"), (SCRIPT.to_string(), "pending")]
        );
        let bar: Vec<_> = page.waves[1]
            .segments
            .iter()
            .map(|c| (c.state, c.count, c.width))
            .collect();
        assert_eq!(
            bar,
            [
                ("succeeded", 0, 0.0),
                ("running", 0, 0.0),
                ("failed", 0, 0.0),
                ("pending", 2, 100.0)
            ]
        );
        assert!(rollouts::rollout(&view, "other", now).is_none());

        let html = render("rollout.html", &page);
        assert_escaped(&html);
        for needle in [
            "<span class=\"state s-waiting\">baking</span>",
            "wave rest waits for the bake of canary",
            "(in 45m0s)",
            "each wave bakes 1h0m after it succeeded",
            "<rect class=\"s-succeeded\" x=\"0.0\" y=\"0\" width=\"100.0\" height=\"3\">",
            "href=\"/clusters/calm\"",
            "href=\"/operations/calm-upgrade-0123abcd\">succeeded</a>",
            "href=\"/clusters/%3Cscript%3Ealert%281%29%3C&#x2f;script%3E\"",
            "href=\"/commits/c0ffee0123456789\"",
        ] {
            assert!(html.contains(needle), "{needle:?} missing: {html}");
        }
    }

    #[test]
    fn the_fleet_lists_the_rollouts_and_a_cluster_page_the_rollouts_it_takes_part_in() {
        let now = jiff::Timestamp::now();
        let html = render("fleet.html", pages::fleet(&fleet(), Filter::default(), now));
        assert!(!html.contains("Rollouts"), "no rollout, no list: {html}");

        let view = with_rollout();
        let fleet_page = pages::fleet(&view, Filter::default(), now);
        let html = render("fleet.html", &fleet_page);
        assert!(
            html.contains("<a href=\"/rollouts/upgrade\">upgrade</a>"),
            "{html}"
        );
        assert!(html.contains("width=\"33.33\""), "a third succeeded: {html}");
        assert!(html.contains("</svg> 1/3</td>"), "{html}");

        let page = pages::cluster(&view, "busy", now).unwrap();
        let parts: Vec<_> = page
            .rollouts
            .iter()
            .map(|p| (p.rollout.as_str(), p.wave.as_deref(), p.phase.as_str()))
            .collect();
        assert_eq!(parts, [("upgrade", Some("rest"), "Queued")]);
        let html = render("cluster.html", &page);
        assert!(
            html.contains("<a href=\"/rollouts/upgrade\">upgrade</a></th><td>rest</td>"),
            "{html}"
        );
        assert!(pages::cluster(&fleet(), "busy", now).unwrap().rollouts.is_empty());
    }

    #[test]
    fn a_running_operation_page_streams_its_log_from_where_the_page_ends() {
        let view = fleet();
        let running = view.operation("busy-install-0123abcd").unwrap();
        let html = render(
            "operation.html",
            pages::operation(&view, &running, Some("line one\n".into()), jiff::Timestamp::now()),
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
