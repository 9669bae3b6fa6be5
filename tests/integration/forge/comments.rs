//! A forge's pull-request comments API with state, on the recording server: GitHub and Gitea issue
//! comments, GitLab merge-request notes, and the pull request's open/closed state. Requests with
//! the wrong token, an unexpected shape or an unknown comment are refused as the forge would.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use super::{ForgeServer, Recorded, Reply};

/// Which API the fake speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    GitHub,
    GitLab,
    Gitea,
}

impl Kind {
    /// The repository's API prefix for `owner/repo` `acme/infra` (GitLab: the project `acme/infra`).
    pub fn prefix(self) -> &'static str {
        match self {
            Kind::GitHub => "/repos/acme/infra",
            Kind::GitLab => "/api/v4/projects/acme%2Finfra",
            Kind::Gitea => "/api/v1/repos/acme/infra",
        }
    }

    /// The auth header and its value for `token`.
    pub fn auth(self, token: &str) -> (&'static str, String) {
        match self {
            Kind::GitHub => ("authorization", format!("Bearer {token}")),
            Kind::GitLab => ("private-token", token.to_string()),
            Kind::Gitea => ("authorization", format!("token {token}")),
        }
    }

    /// The path comments of pull request `number` are listed and created at.
    pub fn comments_path(self, number: u64) -> String {
        match self {
            Kind::GitHub | Kind::Gitea => format!("{}/issues/{number}/comments", self.prefix()),
            Kind::GitLab => format!("{}/merge_requests/{number}/notes", self.prefix()),
        }
    }

    /// The method and path comment `id` of pull request `number` is edited with.
    pub fn edit(self, number: u64, id: u64) -> (&'static str, String) {
        match self {
            Kind::GitHub | Kind::Gitea => ("PATCH", format!("{}/issues/comments/{id}", self.prefix())),
            Kind::GitLab => (
                "PUT",
                format!("{}/merge_requests/{number}/notes/{id}", self.prefix()),
            ),
        }
    }

    /// The path the pull request itself is read at.
    pub fn pull_path(self, number: u64) -> String {
        match self {
            Kind::GitHub | Kind::Gitea => format!("{}/pulls/{number}", self.prefix()),
            Kind::GitLab => format!("{}/merge_requests/{number}", self.prefix()),
        }
    }

    /// The `--status` value.
    pub fn sink(self) -> &'static str {
        match self {
            Kind::GitHub => "github",
            Kind::GitLab => "gitlab",
            Kind::Gitea => "gitea",
        }
    }
}

#[derive(Default)]
struct State {
    next_id: u64,
    /// Pull request → its comments (id, body), oldest first.
    comments: BTreeMap<u64, Vec<(u64, String)>>,
    closed: BTreeSet<u64>,
}

/// The comments a fake forge holds.
#[derive(Clone)]
pub struct Comments {
    kind: Kind,
    state: Arc<Mutex<State>>,
}

impl Comments {
    /// Serves the comments API of `kind` on `server`, accepting only `token`.
    pub fn serve(server: &ForgeServer, kind: Kind, token: &str) -> Comments {
        let comments = Comments {
            kind,
            state: Arc::new(Mutex::new(State {
                next_id: 1000,
                ..State::default()
            })),
        };
        let handler = comments.clone();
        let (header, value) = kind.auth(token);
        server.respond_with(move |r| {
            if !r.path.starts_with(kind.prefix()) || r.path.contains("/statuses/") {
                return None;
            }
            if r.header(header) != value {
                return Some(Reply::new(401, r#"{"message":"Bad credentials"}"#));
            }
            Some(handler.answer(r))
        });
        comments
    }

    /// Adds a comment someone else wrote.
    pub fn add(&self, number: u64, body: &str) -> u64 {
        let mut s = self.state.lock().unwrap();
        s.next_id += 1;
        let id = s.next_id;
        s.comments.entry(number).or_default().push((id, body.to_string()));
        id
    }

    /// Marks pull request `number` closed.
    pub fn close(&self, number: u64) {
        self.state.lock().unwrap().closed.insert(number);
    }

    /// The comments on pull request `number`: (id, body).
    pub fn on(&self, number: u64) -> Vec<(u64, String)> {
        self.state
            .lock()
            .unwrap()
            .comments
            .get(&number)
            .cloned()
            .unwrap_or_default()
    }

    fn answer(&self, r: &Recorded) -> Reply {
        let kind = self.kind;
        let (path, query) = r.path.split_once('?').unwrap_or((&r.path, ""));
        let mut s = self.state.lock().unwrap();
        let numbers: Vec<u64> = s.comments.keys().copied().chain(1..=100).collect();
        for number in numbers {
            if path == kind.comments_path(number) && r.method == "GET" {
                let param = |name: &str| {
                    query
                        .split('&')
                        .find_map(|p| p.strip_prefix(name)?.strip_prefix('=')?.parse::<usize>().ok())
                };
                let size = param("per_page").or_else(|| param("limit")).unwrap_or(30);
                let page = param("page").unwrap_or(1).max(1);
                let list: Vec<serde_json::Value> = s
                    .comments
                    .get(&number)
                    .into_iter()
                    .flatten()
                    .skip((page - 1) * size)
                    .take(size)
                    .map(|(id, body)| serde_json::json!({"id": id, "body": body}))
                    .collect();
                return Reply::new(200, &serde_json::Value::Array(list).to_string());
            }
            if path == kind.comments_path(number) && r.method == "POST" {
                let Some(body) = only_body(r) else {
                    return Reply::new(422, r#"{"message":"body is required"}"#);
                };
                s.next_id += 1;
                let id = s.next_id;
                s.comments.entry(number).or_default().push((id, body.clone()));
                return Reply::new(201, &serde_json::json!({"id": id, "body": body}).to_string());
            }
            if path == kind.pull_path(number) && r.method == "GET" {
                let state = match (kind, s.closed.contains(&number)) {
                    (_, true) => "closed",
                    (Kind::GitLab, false) => "opened",
                    (_, false) => "open",
                };
                return Reply::new(
                    200,
                    &serde_json::json!({"number": number, "state": state}).to_string(),
                );
            }
            let ids: Vec<u64> = s
                .comments
                .get(&number)
                .into_iter()
                .flatten()
                .map(|(id, _)| *id)
                .collect();
            for id in ids {
                let (method, edit_path) = kind.edit(number, id);
                if path == edit_path && r.method == method {
                    let Some(body) = only_body(r) else {
                        return Reply::new(422, r#"{"message":"body is required"}"#);
                    };
                    let comments = s.comments.get_mut(&number).unwrap();
                    let entry = comments.iter_mut().find(|(i, _)| *i == id).unwrap();
                    entry.1 = body.clone();
                    return Reply::new(200, &serde_json::json!({"id": id, "body": body}).to_string());
                }
            }
        }
        Reply::new(404, r#"{"message":"Not Found"}"#)
    }
}

/// The `body` of a JSON body that holds nothing else.
fn only_body(r: &Recorded) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(&r.body).ok()?;
    let object = value.as_object()?;
    if object.len() != 1 {
        return None;
    }
    object.get("body")?.as_str().map(str::to_string)
}
