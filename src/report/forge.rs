//! Commit statuses through a forge's REST API: GitHub (and GHES), GitLab, Gitea/Forgejo.
//!
//! | forge  | request                                                  | auth header              |
//! |--------|----------------------------------------------------------|--------------------------|
//! | GitHub | `POST {base}/repos/{owner}/{repo}/statuses/{sha}` (JSON)  | `Authorization: Bearer`  |
//! | GitLab | `POST {base}/api/v4/projects/{id}/statuses/{sha}` (JSON)  | `PRIVATE-TOKEN`          |
//! | Gitea  | `POST {base}/api/v1/repos/{owner}/{repo}/statuses/{sha}` | `Authorization: token`   |
//!
//! Read back (rebuilding runs a lost meta-cluster forgot, see [`super::record`]): GitHub
//! `GET {base}/repos/{owner}/{repo}/commits/{sha}/statuses?per_page=100`, GitLab
//! `GET {base}/api/v4/projects/{id}/repository/commits/{sha}/statuses?per_page=100`, Gitea
//! `GET {base}/api/v1/repos/{owner}/{repo}/statuses/{sha}?limit=50`; the newest status of each context
//! (by `id`) is what the forge holds. One page is read: the contexts kok puts on a commit are budgeted
//! (`--status-max-contexts`, 50 by default).
//!
//! Limits: GitHub descriptions are cut to 140 characters, GitLab's and Gitea's to 255; contexts (GitLab:
//! `name`) longer than 255 characters are shortened with a hash suffix.
//!
//! Rate limits: a 403 or 429 with `Retry-After`, or with `x-ratelimit-remaining: 0` (GitHub, Gitea)
//! and a reset time (`x-ratelimit-reset`, GitLab's `RateLimit-Reset`, Unix seconds; a 429 needs no
//! remaining count) is retryable with that wait, which pauses the sink (see [`super::deliver`]).

use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, RETRY_AFTER, USER_AGENT};
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};

use super::sink::{parse_retry_after, DeliveryError, Sink, Token};
use super::status::{cut, shorten_context, split_run_context};
use crate::api::{CommitStatus, Recorded, StatusState};

/// Default GitHub API base; GitHub Enterprise Server uses `https://<host>/api/v3`.
pub const GITHUB_API: &str = "https://api.github.com";
/// GitHub's limit on a status description.
pub const GITHUB_DESCRIPTION_MAX: usize = 140;
/// GitLab's limit on a status description.
pub const GITLAB_DESCRIPTION_MAX: usize = 255;
/// Limit kept for Gitea descriptions.
pub const GITEA_DESCRIPTION_MAX: usize = 255;
/// Longest context (GitLab: name) sent to any forge.
pub const CONTEXT_MAX: usize = 255;
/// Timeout of one request to a forge.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Which forge API a [`ForgeSink`] speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forge {
    /// GitHub or GitHub Enterprise Server.
    GitHub,
    /// GitLab (SaaS or self-managed).
    GitLab,
    /// Gitea or Forgejo.
    Gitea,
}

impl Forge {
    /// Sink name used in logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Forge::GitHub => "github",
            Forge::GitLab => "gitlab",
            Forge::Gitea => "gitea",
        }
    }
}

/// Errors building a forge sink.
#[derive(Debug, thiserror::Error)]
pub enum ForgeError {
    /// The base URL does not parse.
    #[error("status sink {forge}: base URL {base:?} is not a valid http(s) URL; pass e.g. --status-base-url https://git.example")]
    BaseUrl {
        /// Forge name.
        forge: &'static str,
        /// The rejected value.
        base: String,
    },
    /// The repository is not `owner/name` (GitHub, Gitea) or is empty (GitLab).
    #[error("status sink {forge}: repository {repo:?} should be {expected}")]
    Repository {
        /// Forge name.
        forge: &'static str,
        /// The rejected value.
        repo: String,
        /// The expected shape.
        expected: &'static str,
    },
    /// The token cannot be put in an HTTP header.
    #[error("status sink {forge}: the token contains characters not allowed in an HTTP header")]
    TokenHeader {
        /// Forge name.
        forge: &'static str,
    },
    /// The HTTP client could not be built.
    #[error("status sink {forge}: building the HTTP client: {source}")]
    Client {
        /// Forge name.
        forge: &'static str,
        /// The client error.
        #[source]
        source: reqwest::Error,
    },
}

/// Delivers statuses through a forge's REST API.
pub struct ForgeSink {
    forge: Forge,
    base: String,
    /// `owner/repo` (GitHub, Gitea) or the project id / URL-encoded path (GitLab), ready for the URL.
    repo_path: String,
    client: reqwest::Client,
}

impl std::fmt::Debug for ForgeSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForgeSink")
            .field("forge", &self.forge)
            .field("base", &self.base)
            .field("repo", &self.repo_path)
            .field("token", &"<redacted>")
            .finish()
    }
}

#[derive(Serialize)]
struct GitHubBody<'a> {
    state: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_url: Option<&'a str>,
    description: String,
    context: String,
}

#[derive(Serialize)]
struct GitLabBody<'a> {
    state: &'a str,
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_url: Option<&'a str>,
    description: String,
}

impl ForgeSink {
    /// A sink for `forge`. `base` is the API root (`None`: github.com; required in practice for GitLab
    /// and Gitea, e.g. `https://gitlab.example`); `repo` is `owner/name` for GitHub and Gitea, and the
    /// numeric project id or the `group/project` path for GitLab.
    pub fn new(forge: Forge, base: Option<&str>, repo: &str, token: &Token) -> Result<Self, ForgeError> {
        let name = forge.as_str();
        let base = match (forge, base) {
            (_, Some(b)) => b.trim_end_matches('/').to_string(),
            (Forge::GitHub, None) => GITHUB_API.to_string(),
            (Forge::GitLab, None) => "https://gitlab.com".to_string(),
            (Forge::Gitea, None) => {
                return Err(ForgeError::BaseUrl {
                    forge: name,
                    base: String::new(),
                })
            }
        };
        if reqwest::Url::parse(&base)
            .map(|u| !matches!(u.scheme(), "http" | "https"))
            .unwrap_or(true)
        {
            return Err(ForgeError::BaseUrl { forge: name, base });
        }
        let repo = repo.trim().trim_matches('/');
        let repo_path = match forge {
            Forge::GitHub | Forge::Gitea => {
                let parts: Vec<&str> = repo.split('/').collect();
                if parts.len() != 2 || parts.iter().any(|p| p.is_empty()) {
                    return Err(ForgeError::Repository {
                        forge: name,
                        repo: repo.to_string(),
                        expected: "owner/name",
                    });
                }
                parts
                    .iter()
                    .map(|p| encode_segment(p))
                    .collect::<Vec<_>>()
                    .join("/")
            }
            Forge::GitLab => {
                if repo.is_empty() {
                    return Err(ForgeError::Repository {
                        forge: name,
                        repo: repo.to_string(),
                        expected: "a numeric project id or group/project",
                    });
                }
                encode_segment(repo)
            }
        };
        let mut headers = HeaderMap::new();
        let (header, value) = match forge {
            Forge::GitHub => (AUTHORIZATION, format!("Bearer {}", token.expose())),
            Forge::GitLab => (
                HeaderName::from_static("private-token"),
                token.expose().to_string(),
            ),
            Forge::Gitea => (AUTHORIZATION, format!("token {}", token.expose())),
        };
        let mut value = HeaderValue::from_str(&value).map_err(|_| ForgeError::TokenHeader { forge: name })?;
        value.set_sensitive(true);
        headers.insert(header, value);
        let accept = match forge {
            Forge::GitHub => "application/vnd.github+json",
            Forge::GitLab | Forge::Gitea => "application/json",
        };
        headers.insert(ACCEPT, HeaderValue::from_static(accept));
        if forge == Forge::GitHub {
            headers.insert("x-github-api-version", HeaderValue::from_static("2022-11-28"));
        }
        headers.insert(
            USER_AGENT,
            HeaderValue::from_static(concat!("kok/", env!("CARGO_PKG_VERSION"))),
        );
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|source| ForgeError::Client { forge: name, source })?;
        Ok(ForgeSink {
            forge,
            base,
            repo_path,
            client,
        })
    }

    /// The URL a status for `commit` is posted to.
    pub fn status_url(&self, commit: &str) -> String {
        let commit = encode_segment(commit);
        match self.forge {
            Forge::GitHub => format!("{}/repos/{}/statuses/{commit}", self.base, self.repo_path),
            Forge::GitLab => format!(
                "{}/api/v4/projects/{}/statuses/{commit}",
                self.base, self.repo_path
            ),
            Forge::Gitea => format!("{}/api/v1/repos/{}/statuses/{commit}", self.base, self.repo_path),
        }
    }

    /// The JSON body sent for `status`, with the forge's state word and limits applied.
    pub fn body(&self, status: &CommitStatus) -> serde_json::Value {
        let state = forge_state(self.forge, status.state);
        let target_url = status.target_url.as_deref().filter(|u| !u.is_empty());
        // A forge shows every firing of a scheduled operation under the operation's one context.
        let context = shorten_context(split_run_context(&status.context).0, CONTEXT_MAX);
        let value = match self.forge {
            Forge::GitHub => serde_json::to_value(GitHubBody {
                state,
                target_url,
                description: cut(&status.description, GITHUB_DESCRIPTION_MAX),
                context,
            }),
            Forge::Gitea => serde_json::to_value(GitHubBody {
                state,
                target_url,
                description: cut(&status.description, GITEA_DESCRIPTION_MAX),
                context,
            }),
            Forge::GitLab => serde_json::to_value(GitLabBody {
                state,
                name: context,
                target_url,
                description: cut(&status.description, GITLAB_DESCRIPTION_MAX),
            }),
        };
        value.unwrap_or(serde_json::Value::Null)
    }

    async fn post(&self, commit: &str, status: &CommitStatus) -> Result<(), DeliveryError> {
        let url = self.status_url(commit);
        let retryable = |reason: String, retry_after: Option<Duration>| DeliveryError::Retryable {
            sink: self.forge.as_str().to_string(),
            context: status.context.clone(),
            commit: commit.to_string(),
            reason,
            retry_after,
        };
        let permanent = |reason: String| DeliveryError::Permanent {
            sink: self.forge.as_str().to_string(),
            context: status.context.clone(),
            commit: commit.to_string(),
            reason,
        };
        let response = match self.client.post(&url).json(&self.body(status)).send().await {
            Ok(r) => r,
            Err(err) => {
                let reason = crate::redact::scrub(&format!("POST {url}: {}", err.without_url()));
                return Err(retryable(reason, None));
            }
        };
        let code = response.status();
        if code.is_success() {
            return Ok(());
        }
        let headers = response.headers().clone();
        let retry_after = headers
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, jiff::Timestamp::now()));
        let body = response.text().await.unwrap_or_default();
        // A server may echo the request, Authorization header included: scrub before cutting.
        let snippet = cut(&crate::redact::scrub(body.trim()), 300);
        let reason = format!("POST {url} answered {code}: {snippet}");
        if code == StatusCode::TOO_MANY_REQUESTS {
            return Err(retryable(reason, rate_limit_wait(&headers, retry_after, true)));
        }
        if code.is_server_error() {
            return Err(retryable(reason, retry_after));
        }
        if code == StatusCode::FORBIDDEN {
            if let Some(wait) = rate_limit_wait(&headers, retry_after, false) {
                return Err(retryable(reason, Some(wait)));
            }
        }
        if self.forge == Forge::GitLab && code == StatusCode::BAD_REQUEST {
            if let Some(from) = gitlab_refused_from(&body) {
                if from == forge_state(Forge::GitLab, status.state) {
                    return Ok(());
                }
            }
        }
        Err(permanent(reason))
    }
}

/// One status as a forge lists it (GitHub and Gitea name the context `context`, GitLab `name`; GitHub
/// says `state`, GitLab and Gitea `status`).
#[derive(Deserialize)]
struct Listed {
    #[serde(default)]
    id: i64,
    #[serde(alias = "name", default)]
    context: String,
    #[serde(alias = "status", default)]
    state: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    target_url: Option<String>,
    #[serde(alias = "updated_at", default)]
    created_at: Option<String>,
}

/// kok's state for a forge's state word; `None` for a word kok never writes.
fn state_from_forge(word: &str) -> Option<StatusState> {
    Some(match word {
        "pending" => StatusState::Pending,
        "running" => StatusState::Running,
        "success" => StatusState::Success,
        "failure" | "failed" | "canceled" => StatusState::Failure,
        "error" => StatusState::Error,
        _ => return None,
    })
}

/// The newest status of each kok context in a forge's list of a commit's statuses.
fn newest_per_context(forge: Forge, listed: Vec<Listed>) -> Vec<Recorded> {
    let mut newest: std::collections::BTreeMap<String, Listed> = std::collections::BTreeMap::new();
    for status in listed {
        if !status.context.starts_with(super::status::CONTEXT_PREFIX) {
            continue;
        }
        match newest.get(&status.context) {
            Some(kept) if kept.id >= status.id => {}
            _ => {
                newest.insert(status.context.clone(), status);
            }
        }
    }
    newest
        .into_values()
        .filter_map(|s| {
            Some(Recorded {
                from: forge.as_str().to_string(),
                time: s.created_at.unwrap_or_default(),
                status: CommitStatus {
                    state: state_from_forge(&s.state)?,
                    context: s.context,
                    description: s.description.unwrap_or_default(),
                    target_url: s.target_url.filter(|u| !u.is_empty()),
                    run: None,
                },
            })
        })
        .collect()
}

impl ForgeSink {
    /// The URL a commit's statuses are listed from.
    pub fn statuses_url(&self, commit: &str) -> String {
        let commit = encode_segment(commit);
        match self.forge {
            Forge::GitHub => format!(
                "{}/repos/{}/commits/{commit}/statuses?per_page=100",
                self.base, self.repo_path
            ),
            Forge::GitLab => format!(
                "{}/api/v4/projects/{}/repository/commits/{commit}/statuses?per_page=100",
                self.base, self.repo_path
            ),
            Forge::Gitea => format!(
                "{}/api/v1/repos/{}/statuses/{commit}?limit=50",
                self.base, self.repo_path
            ),
        }
    }

    /// The newest status of each kok context on `commit`, as the forge holds it.
    pub async fn statuses(&self, commit: &str) -> Result<Vec<Recorded>, String> {
        let url = self.statuses_url(commit);
        let failed = |what: String| crate::redact::scrub(&format!("GET {url}: {what}"));
        let response = self
            .client
            .get(&url)
            .send()
            .await
            .map_err(|e| failed(e.without_url().to_string()))?;
        let code = response.status();
        if code == StatusCode::NOT_FOUND {
            // GitLab and Gitea answer 404 for a commit they do not have: nothing was recorded there.
            return Ok(Vec::new());
        }
        let body = response
            .text()
            .await
            .map_err(|e| failed(e.without_url().to_string()))?;
        if !code.is_success() {
            return Err(failed(format!("answered {code}: {}", cut(body.trim(), 300))));
        }
        let listed: Vec<Listed> = serde_json::from_str(&body)
            .map_err(|e| failed(format!("the answer is not a status list: {e}")))?;
        Ok(newest_per_context(self.forge, listed))
    }
}

impl Sink for ForgeSink {
    fn name(&self) -> &str {
        self.forge.as_str()
    }

    fn keeps_record(&self) -> bool {
        true
    }

    fn read_back<'a>(&'a self, commit: &'a str) -> BoxFuture<'a, Result<Vec<Recorded>, String>> {
        self.statuses(commit).boxed()
    }

    fn deliver<'a>(
        &'a self,
        commit: &'a str,
        status: &'a CommitStatus,
    ) -> BoxFuture<'a, Result<(), DeliveryError>> {
        self.post(commit, status).boxed()
    }

    fn budgeted(&self) -> bool {
        true
    }
}

/// The forge's word for a state.
pub fn forge_state(forge: Forge, state: StatusState) -> &'static str {
    match (forge, state) {
        (_, StatusState::Pending) => "pending",
        (Forge::GitLab, StatusState::Running) => "running",
        (_, StatusState::Running) => "pending",
        (_, StatusState::Success) => "success",
        (Forge::GitLab, StatusState::Failure | StatusState::Error) => "failed",
        (_, StatusState::Failure) => "failure",
        (_, StatusState::Error) => "error",
    }
}

/// GitLab refuses a transition with `Cannot transition status via :run from :running`; returns the
/// state it is in (`running`), which equals the requested state when the status is already there.
fn gitlab_refused_from(body: &str) -> Option<&str> {
    let rest = &body[body.find("Cannot transition status via")?..];
    let from = &rest[rest.find("from :")? + "from :".len()..];
    let end = from
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(from.len());
    Some(&from[..end])
}

/// How long a rate-limited forge asked to wait: `Retry-After` when given, else until the reset time
/// (Unix seconds) of `x-ratelimit-reset` (GitHub, Gitea) or `RateLimit-Reset` (GitLab). GitHub also
/// answers 403 to a request refused for other reasons, so a 403 (`too_many` false) counts as a rate
/// limit only when the remaining count says 0; a 429 always does.
fn rate_limit_wait(headers: &HeaderMap, retry_after: Option<Duration>, too_many: bool) -> Option<Duration> {
    if retry_after.is_some() {
        return retry_after;
    }
    let header = |names: [&str; 2]| {
        names
            .iter()
            .find_map(|name| headers.get(*name))
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if !too_many && header(["x-ratelimit-remaining", "ratelimit-remaining"]) != Some("0") {
        return None;
    }
    let reset: i64 = header(["x-ratelimit-reset", "ratelimit-reset"])?.parse().ok()?;
    let wait = reset.saturating_sub(jiff::Timestamp::now().as_second());
    Some(Duration::from_secs(wait.max(1) as u64))
}

/// Percent-encodes everything but RFC 3986 unreserved characters (so `group/project` → `group%2Fproject`).
fn encode_segment(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for byte in raw.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// What other requests to the same forge (the plan comments) share with the statuses.
impl ForgeSink {
    /// The forge this sink speaks to.
    pub fn forge(&self) -> Forge {
        self.forge
    }

    /// The repository's API URL: `{base}/repos/{owner}/{repo}` (GitHub), `{base}/api/v4/projects/{id}`
    /// (GitLab), `{base}/api/v1/repos/{owner}/{repo}` (Gitea).
    pub fn repository_url(&self) -> String {
        match self.forge {
            Forge::GitHub => format!("{}/repos/{}", self.base, self.repo_path),
            Forge::GitLab => format!("{}/api/v4/projects/{}", self.base, self.repo_path),
            Forge::Gitea => format!("{}/api/v1/repos/{}", self.base, self.repo_path),
        }
    }

    /// The HTTP client, with the forge's token and accept headers.
    pub(crate) fn client(&self) -> &reqwest::Client {
        &self.client
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitlab_refusal_names_the_state_the_status_is_in() {
        let body = r#"{"message":"Cannot transition status via :run from :running (Reason(s): Status cannot transition via \"run\")"}"#;
        assert_eq!(gitlab_refused_from(body), Some("running"));
        assert_eq!(
            gitlab_refused_from(r#"{"message":"Cannot transition status via :enqueue from :pending"}"#),
            Some("pending")
        );
        assert_eq!(gitlab_refused_from(r#"{"message":"state is invalid"}"#), None);
    }

    #[test]
    fn gitlab_project_paths_are_url_encoded_and_ids_kept() {
        let token = Token::new("t");
        let s = ForgeSink::new(
            Forge::GitLab,
            Some("https://gl.example/"),
            "group/sub/project",
            &token,
        )
        .unwrap();
        assert_eq!(
            s.status_url("abc"),
            "https://gl.example/api/v4/projects/group%2Fsub%2Fproject/statuses/abc"
        );
        let s = ForgeSink::new(Forge::GitLab, Some("https://gl.example"), "42", &token).unwrap();
        assert_eq!(
            s.status_url("abc"),
            "https://gl.example/api/v4/projects/42/statuses/abc"
        );
    }

    #[test]
    fn a_forge_shows_every_firing_of_a_scheduled_operation_under_the_operations_context() {
        let sink = ForgeSink::new(Forge::GitHub, None, "acme/infra", &Token::new("t")).unwrap();
        let status = CommitStatus {
            context: "kok/prod-bj/backup@2026-11-22T03:00:00Z".into(),
            state: StatusState::Success,
            description: "succeeded".into(),
            target_url: None,
            run: None,
        };
        assert_eq!(sink.body(&status)["context"], "kok/prod-bj/backup");
    }

    #[test]
    fn github_repository_must_be_owner_and_name() {
        let err = ForgeSink::new(Forge::GitHub, None, "just-a-name", &Token::new("t")).unwrap_err();
        assert!(err.to_string().contains("owner/name"), "{err}");
    }

    #[test]
    fn states_map_to_each_forges_words() {
        assert_eq!(forge_state(Forge::GitHub, StatusState::Running), "pending");
        assert_eq!(forge_state(Forge::Gitea, StatusState::Running), "pending");
        assert_eq!(forge_state(Forge::GitLab, StatusState::Running), "running");
        assert_eq!(forge_state(Forge::GitLab, StatusState::Failure), "failed");
        assert_eq!(forge_state(Forge::GitHub, StatusState::Error), "error");
        assert_eq!(forge_state(Forge::Gitea, StatusState::Failure), "failure");
    }

    #[test]
    fn rate_limit_waits_come_from_retry_after_or_the_reset_time() {
        let reset = (jiff::Timestamp::now().as_second() + 120).to_string();
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, HeaderValue::from_str(value).unwrap());
            }
            map
        };
        let github = headers(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", &reset)]);
        let wait = rate_limit_wait(&github, None, false).unwrap();
        assert!(
            wait > Duration::from_secs(100) && wait <= Duration::from_secs(120),
            "{wait:?}"
        );
        let gitlab = headers(&[("ratelimit-reset", &reset)]);
        assert!(rate_limit_wait(&gitlab, None, true).is_some());
        assert_eq!(
            rate_limit_wait(&gitlab, None, false),
            None,
            "a 403 without remaining 0 is a refusal"
        );
        let refused = headers(&[("x-ratelimit-remaining", "4999"), ("x-ratelimit-reset", &reset)]);
        assert_eq!(rate_limit_wait(&refused, None, false), None);
        assert_eq!(
            rate_limit_wait(&refused, Some(Duration::from_secs(7)), false),
            Some(Duration::from_secs(7))
        );
    }

    #[test]
    fn debug_of_a_sink_redacts_the_token() {
        let s = ForgeSink::new(Forge::GitHub, None, "o/r", &Token::new("ghp_supersecret")).unwrap();
        let debug = format!("{s:?}");
        assert!(!debug.contains("supersecret"), "{debug}");
    }
}
