//! A recording HTTP server on 127.0.0.1 for tests: it keeps every request and answers from a script.

pub mod comments;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// One request as received.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// When it arrived (to compare the order of requests to several servers).
    pub at: std::time::Instant,
}

impl Recorded {
    /// The body parsed as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }

    /// A header as a string ("" when absent).
    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    }
}

/// A scripted answer.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn new(status: u16, body: &str) -> Self {
        Reply {
            status,
            headers: Vec::new(),
            body: body.to_string(),
        }
    }

    /// An answer whose body echoes the request's credentials, as a careless server or proxy does:
    /// `{authorization}` and `{private-token}` in `body` become those request headers.
    pub fn echo(status: u16) -> Self {
        Reply::new(status, r#"{"message": "boom {authorization}{private-token}"}"#)
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}

/// Answers requests the script does not: a fake forge with state (see [`comments`]).
pub type Responder = Arc<dyn Fn(&Recorded) -> Option<Reply> + Send + Sync>;

#[derive(Default)]
struct Shared {
    requests: Vec<Recorded>,
    script: VecDeque<Reply>,
    responder: Option<Responder>,
    /// Answer reads of a commit's statuses with 503 (the forge is down).
    fail_reads: bool,
}

/// The commit of a request listing a commit's statuses, as each forge documents it: GitHub
/// `GET /repos/{o}/{r}/commits/{sha}/statuses`, GitLab `GET /api/v4/projects/{id}/repository/commits/{sha}/statuses`,
/// Gitea `GET /api/v1/repos/{o}/{r}/statuses/{sha}`.
fn listed_commit(method: &Method, uri: &Uri) -> Option<String> {
    if method != Method::GET {
        return None;
    }
    let path = uri.path();
    if path.starts_with("/api/v1/repos/") {
        return path.split_once("/statuses/").map(|(_, sha)| sha.to_string());
    }
    let rest = path.strip_suffix("/statuses")?;
    let (_, sha) = rest.rsplit_once("/commits/")?;
    Some(sha.to_string())
}

/// The statuses posted for `sha` so far, listed as the forge of `path` lists them: newest first, each
/// with an id, GitLab's and Gitea's state under `status`, GitLab's context under `name`.
fn listing(requests: &[Recorded], path: &str, sha: &str) -> String {
    let gitlab = path.starts_with("/api/v4/");
    let gitea = path.starts_with("/api/v1/");
    let mut listed: Vec<serde_json::Value> = requests
        .iter()
        .enumerate()
        .filter(|(_, r)| r.method == "POST" && r.path.ends_with(&format!("/statuses/{sha}")))
        .filter_map(|(i, r)| {
            let body: serde_json::Value = serde_json::from_slice(&r.body).ok()?;
            let state_key = if gitlab || gitea { "status" } else { "state" };
            let context_key = if gitlab { "name" } else { "context" };
            let context = body.get("name").or_else(|| body.get("context")).cloned()?;
            Some(serde_json::json!({
                "id": i + 1,
                state_key: body["state"],
                context_key: context,
                "description": body["description"],
                "target_url": body.get("target_url"),
                "created_at": "2026-11-22T00:00:00Z",
            }))
        })
        .collect();
    listed.reverse();
    serde_json::Value::Array(listed).to_string()
}

/// The server; it runs on the test's runtime and stops with it.
#[derive(Clone)]
pub struct ForgeServer {
    addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
}

impl ForgeServer {
    /// Starts a server answering 201 `{}` unless a scripted reply is queued.
    pub async fn start() -> Self {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let state = shared.clone();
        let app =
            axum::Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let state = state.clone();
                async move {
                    let echoed = |name: &str| {
                        headers
                            .get(name)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_string()
                    };
                    let (authorization, private_token) = (echoed("authorization"), echoed("private-token"));
                    let mut reply = {
                        let mut s = state.lock().unwrap();
                        let recorded = Recorded {
                            method: method.to_string(),
                            path: uri.to_string(),
                            headers,
                            body,
                            at: std::time::Instant::now(),
                        };
                        // Reads of a commit's statuses answer from what was posted, apart from the script.
                        let listed = listed_commit(&method, &uri).map(|sha| match s.fail_reads {
                            true => Reply::new(503, r#"{"message": "down"}"#),
                            false => Reply::new(200, &listing(&s.requests, uri.path(), &sha)),
                        });
                        let scripted = listed.or_else(|| s.script.pop_front());
                        let answered = scripted.or_else(|| s.responder.as_ref().and_then(|r| r(&recorded)));
                        s.requests.push(recorded);
                        answered.unwrap_or_else(|| Reply::new(201, "{}"))
                    };
                    reply.body = reply
                        .body
                        .replace("{authorization}", &authorization)
                        .replace("{private-token}", &private_token);
                    let mut response: Response = reply.body.into_response();
                    *response.status_mut() = StatusCode::from_u16(reply.status).unwrap();
                    for (name, value) in reply.headers {
                        response.headers_mut().insert(
                            axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                            value.parse().unwrap(),
                        );
                    }
                    response
                }
            });
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ForgeServer { addr, shared }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Makes reads of a commit's statuses fail (503) or answer again.
    pub fn fail_reads(&self, fail: bool) {
        self.shared.lock().unwrap().fail_reads = fail;
    }

    /// Queues the next answers, in order.
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.shared.lock().unwrap().script.extend(replies);
    }

    /// The statuses received so far, in order, from GitHub, Gitea and GitLab status posts:
    /// (commit, context, state, description).
    pub fn statuses(&self) -> Vec<(String, String, String, String)> {
        self.requests()
            .iter()
            .filter_map(|r| {
                let (_, commit) = r.path.split_once("/statuses/")?;
                let body: serde_json::Value = serde_json::from_slice(&r.body).ok()?;
                let field = |name: &str| body[name].as_str().unwrap_or_default().to_string();
                let context = if body.get("name").is_some() {
                    field("name")
                } else {
                    field("context")
                };
                Some((commit.to_string(), context, field("state"), field("description")))
            })
            .collect()
    }

    /// Requests received so far by kind: method and the path with the repository and commit left out
    /// (`POST statuses`, `GET commits/status`, …).
    #[allow(dead_code)] // the fleet benchmark's
    pub fn request_kinds(&self) -> std::collections::BTreeMap<String, usize> {
        let mut kinds = std::collections::BTreeMap::new();
        for r in self.requests() {
            let path = r.path.split('?').next().unwrap_or_default();
            let kind = match path.split_once("/statuses/") {
                Some(_) => "statuses".to_string(),
                None => path
                    .rsplit('/')
                    .find(|segment| !segment.is_empty())
                    .unwrap_or("/")
                    .to_string(),
            };
            *kinds.entry(format!("{} {kind}", r.method)).or_insert(0) += 1;
        }
        kinds
    }

    /// Answers the requests the script does not with `responder` (when it gives a reply).
    pub fn respond_with(&self, responder: impl Fn(&Recorded) -> Option<Reply> + Send + Sync + 'static) {
        self.shared.lock().unwrap().responder = Some(Arc::new(responder));
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.lock().unwrap().requests.clone()
    }
}
