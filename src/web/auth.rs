//! Who may look at the web view in a meta-cluster: whoever may `kubectl get clusterops` in kok's
//! namespace, by a Kubernetes bearer token (an `Authorization: Bearer` header, or the cookie the login
//! form sets), checked with a TokenReview and SubjectAccessReviews and the answer cached briefly.
//!
//! - No token, or one the API server does not authenticate: 401 (browsers get a link to `/login`).
//! - A user who may not `get clusteroperations.kok.dev` in the namespace: 403. The live log
//!   (`/operations/<name>/log`) also needs `get pods/log`; without it an operation's page shows no log.
//! - `GET /login` is the form; `POST /login`, the one route that is not GET, checks the token and sets
//!   it as an HttpOnly, Secure, SameSite=Strict cookie. It changes nothing else.
//!
//! A token is kept in memory only as the key of its cached answer, by its SHA-256; it never reaches a
//! log, an error or a page.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Form, Router};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::{Api, PostParams};
use kube::Client;
use minijinja::Environment;
use serde::Serialize;
use sha2::{Digest, Sha256};

use kube::Resource as _;

use crate::api::{ClusterOperation, GROUP};

/// The cookie the login form sets.
pub const COOKIE: &str = "kok_token";
/// How long an answer of the API server about a token is used before it is asked again.
pub const CACHE_TTL: Duration = Duration::from_secs(30);
/// Most tokens whose answers are kept; past it, expired answers go, and then all of them.
const CACHE_MAX: usize = 4096;
const LOGIN: &str = include_str!("templates/login.html");

/// What a token may do, as the API server answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// The token does not authenticate.
    Unauthenticated,
    /// The token's user, whether it may `get clusteroperations` (the pages) and `get pods/log` (logs).
    User {
        /// The user's name, as the TokenReview gave it.
        name: String,
        /// May see the pages.
        pages: bool,
        /// May see run logs.
        logs: bool,
    },
}

/// Whether the request may see run logs; handlers read it from the request's extensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogAccess(pub bool);

/// Errors of asking the API server about a token.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The TokenReview failed (kok may lack `create tokenreviews`; see deploy/).
    #[error("creating a TokenReview: {0}")]
    TokenReview(#[source] kube::Error),
    /// A SubjectAccessReview failed (kok may lack `create subjectaccessreviews`; see deploy/).
    #[error("creating a SubjectAccessReview: {0}")]
    AccessReview(#[source] kube::Error),
}

/// Answers by token hash, each used for [`CACHE_TTL`].
#[derive(Debug)]
struct Cache {
    ttl: Duration,
    answers: Mutex<HashMap<[u8; 32], (Instant, Access)>>,
}

impl Cache {
    fn get(&self, key: &[u8; 32], now: Instant) -> Option<Access> {
        let answers = self.answers.lock().unwrap_or_else(|p| p.into_inner());
        let (at, access) = answers.get(key)?;
        (now.saturating_duration_since(*at) < self.ttl).then(|| access.clone())
    }

    fn put(&self, key: [u8; 32], access: Access, now: Instant) {
        let mut answers = self.answers.lock().unwrap_or_else(|p| p.into_inner());
        if answers.len() >= CACHE_MAX {
            answers.retain(|_, (at, _)| now.saturating_duration_since(*at) < self.ttl);
            if answers.len() >= CACHE_MAX {
                answers.clear();
            }
        }
        answers.insert(key, (now, access));
    }
}

/// The check in front of the pages: the meta-cluster's reviews, kok's namespace and the cached answers.
#[derive(Clone)]
pub struct Gate {
    client: Client,
    namespace: String,
    cache: Arc<Cache>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl Gate {
    /// A gate asking the API server behind `client` about access to kok's objects in `namespace`.
    pub fn new(client: Client, namespace: &str) -> Gate {
        Gate {
            client,
            namespace: namespace.to_string(),
            cache: Arc::new(Cache {
                ttl: CACHE_TTL,
                answers: Mutex::default(),
            }),
        }
    }

    /// What `token` may do: the cached answer when it is fresh, else the API server's.
    pub async fn access(&self, token: &str) -> Result<Access, ReviewError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(access) = self.cache.get(&key, Instant::now()) {
            return Ok(access);
        }
        let access = self.review(token).await?;
        self.cache.put(key, access.clone(), Instant::now());
        Ok(access)
    }

    async fn review(&self, token: &str) -> Result<Access, ReviewError> {
        let reviews: Api<TokenReview> = Api::all(self.client.clone());
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..Default::default()
        };
        let answer = reviews
            .create(&PostParams::default(), &review)
            .await
            .map_err(ReviewError::TokenReview)?;
        let status = answer.status.unwrap_or_default();
        let user = match status.user {
            Some(user) if status.authenticated == Some(true) => user,
            _ => return Ok(Access::Unauthenticated),
        };
        let pages = self
            .allowed(
                &user,
                ResourceAttributes {
                    group: Some(GROUP.to_string()),
                    resource: Some(ClusterOperation::plural(&()).to_string()),
                    ..self.get_in_namespace()
                },
            )
            .await?;
        let logs = self
            .allowed(
                &user,
                ResourceAttributes {
                    resource: Some("pods".to_string()),
                    subresource: Some("log".to_string()),
                    ..self.get_in_namespace()
                },
            )
            .await?;
        Ok(Access::User {
            name: user.username.unwrap_or_default(),
            pages,
            logs,
        })
    }

    fn get_in_namespace(&self) -> ResourceAttributes {
        ResourceAttributes {
            namespace: Some(self.namespace.clone()),
            verb: Some("get".to_string()),
            ..Default::default()
        }
    }

    async fn allowed(&self, user: &UserInfo, attributes: ResourceAttributes) -> Result<bool, ReviewError> {
        let reviews: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                uid: user.uid.clone(),
                groups: user.groups.clone(),
                extra: user.extra.clone(),
                resource_attributes: Some(attributes),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = reviews
            .create(&PostParams::default(), &review)
            .await
            .map_err(ReviewError::AccessReview)?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}

/// `pages` behind `gate`, with `/login` beside them; `/assets/*` stay open (the login form needs the
/// stylesheet). Every response, refusals included, carries the view's security headers.
pub fn protect(pages: Router, gate: Gate) -> Router {
    let login = Router::new()
        .route("/login", get(form).post(login))
        .with_state(gate.clone());
    pages
        .route_layer(axum::middleware::from_fn_with_state(gate, require))
        .merge(login)
        .layer(axum::middleware::map_response(super::secure_headers))
}

/// The bearer token of a request: the `Authorization` header, else the login cookie.
fn token(headers: &HeaderMap) -> Option<String> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let cookie = || {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .find_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
    };
    bearer
        .or_else(cookie)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
}

/// Whether the request is the `/operations/<name>/log` stream.
fn is_log(path: &str) -> bool {
    path.strip_prefix("/operations/")
        .is_some_and(|rest| rest.ends_with("/log"))
}

async fn require(State(gate): State<Gate>, mut request: Request, next: Next) -> Response {
    let path = request.uri().path().to_string();
    if path.starts_with("/assets/") {
        return next.run(request).await;
    }
    let browser = wants_html(request.headers());
    let Some(token) = token(request.headers()) else {
        return refusal(&gate, Refusal::NoToken, browser);
    };
    match gate.access(&token).await {
        Err(e) => {
            tracing::error!(error = %e, "the web view could not check a viewer's token");
            refusal(&gate, Refusal::Unchecked, browser)
        }
        Ok(Access::Unauthenticated) => refusal(&gate, Refusal::Invalid, browser),
        Ok(Access::User {
            name, pages: false, ..
        }) => refusal(&gate, Refusal::Pages(name), browser),
        Ok(Access::User {
            name, logs: false, ..
        }) if is_log(&path) => refusal(&gate, Refusal::Logs(name), browser),
        Ok(Access::User { logs, .. }) => {
            request.extensions_mut().insert(LogAccess(logs));
            next.run(request).await
        }
    }
}

fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("text/html"))
}

/// Why a request is refused.
enum Refusal {
    NoToken,
    Invalid,
    Unchecked,
    Pages(String),
    Logs(String),
}

impl Refusal {
    fn status(&self) -> StatusCode {
        match self {
            Refusal::NoToken | Refusal::Invalid => StatusCode::UNAUTHORIZED,
            Refusal::Unchecked => StatusCode::SERVICE_UNAVAILABLE,
            Refusal::Pages(_) | Refusal::Logs(_) => StatusCode::FORBIDDEN,
        }
    }

    fn message(&self, namespace: &str) -> String {
        match self {
            Refusal::NoToken => {
                "this view needs a Kubernetes bearer token (Authorization: Bearer, or sign in)".into()
            }
            Refusal::Invalid => "the token does not authenticate (expired, revoked or not a token)".into(),
            Refusal::Unchecked => {
                "kok could not check the token with the API server; its log says why".into()
            }
            Refusal::Pages(user) => {
                let plural = ClusterOperation::plural(&());
                format!("user {user} may not get {plural}.{GROUP} in namespace {namespace}")
            }
            Refusal::Logs(user) => format!("user {user} may not get pods/log in namespace {namespace}"),
        }
    }
}

/// The page of the login template.
#[derive(Debug, Serialize)]
struct LoginPage<'a> {
    title: &'a str,
    problem: Option<String>,
    form: bool,
    namespace: &'a str,
}

fn login_page(status: StatusCode, page: &LoginPage<'_>) -> Response {
    let mut env = Environment::new();
    let rendered = env
        .add_template("login.html", LOGIN)
        .and_then(|()| env.get_template("login.html"))
        .and_then(|t| t.render(minijinja::context! { page => page }));
    match rendered {
        Ok(html) => (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "rendering the login page failed");
            (StatusCode::INTERNAL_SERVER_ERROR, "rendering the page failed\n").into_response()
        }
    }
}

fn refusal(gate: &Gate, why: Refusal, browser: bool) -> Response {
    let status = why.status();
    let message = why.message(&gate.namespace);
    let mut response = if browser {
        let title = match status {
            StatusCode::FORBIDDEN => "Not allowed",
            StatusCode::UNAUTHORIZED => "Sign in",
            _ => "Not available",
        };
        login_page(
            status,
            &LoginPage {
                title,
                problem: Some(message),
                form: false,
                namespace: &gate.namespace,
            },
        )
    } else {
        (status, format!("{}: {message}\n", status.as_u16())).into_response()
    };
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"kok\""),
        );
    }
    response
}

async fn form(State(gate): State<Gate>) -> Response {
    login_page(
        StatusCode::OK,
        &LoginPage {
            title: "Sign in",
            problem: None,
            form: true,
            namespace: &gate.namespace,
        },
    )
}

/// The login form's fields.
#[derive(serde::Deserialize)]
struct Login {
    token: String,
}

/// Whether `token` can be a cookie value as it is (a JWT is): visible ASCII without `;`, `,`, `"`, `\`.
fn cookie_safe(token: &str) -> bool {
    token
        .bytes()
        .all(|b| b.is_ascii_graphic() && !matches!(b, b';' | b',' | b'"' | b'\\'))
}

/// Checks the token and, when it may see the pages, sets it as the cookie and sends the browser to
/// the fleet; otherwise the form again with the reason.
async fn login(State(gate): State<Gate>, Form(Login { token }): Form<Login>) -> Response {
    let token = token.trim();
    let again = |status: StatusCode, problem: String| {
        login_page(
            status,
            &LoginPage {
                title: "Sign in",
                problem: Some(problem),
                form: true,
                namespace: &gate.namespace,
            },
        )
    };
    if token.is_empty() || !cookie_safe(token) {
        return again(StatusCode::BAD_REQUEST, "that is not a bearer token".into());
    }
    let why = match gate.access(token).await {
        Ok(Access::User { pages: true, .. }) => {
            let cookie = format!("{COOKIE}={token}; Path=/; HttpOnly; Secure; SameSite=Strict");
            let mut response = Redirect::to("/").into_response();
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            return response;
        }
        Ok(Access::User { name, .. }) => Refusal::Pages(name),
        Ok(Access::Unauthenticated) => Refusal::Invalid,
        Err(e) => {
            tracing::error!(error = %e, "the web view could not check a viewer's token");
            Refusal::Unchecked
        }
    };
    again(why.status(), why.message(&gate.namespace))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache() -> Cache {
        Cache {
            ttl: CACHE_TTL,
            answers: Mutex::default(),
        }
    }

    #[test]
    fn a_cached_answer_is_used_for_thirty_seconds_and_then_asked_again() {
        let cache = cache();
        let start = Instant::now();
        let key = [7; 32];
        assert_eq!(cache.get(&key, start), None);
        cache.put(key, Access::Unauthenticated, start);
        assert_eq!(
            cache.get(&key, start + Duration::from_secs(29)),
            Some(Access::Unauthenticated)
        );
        assert_eq!(cache.get(&key, start + CACHE_TTL), None);
    }

    #[test]
    fn a_full_cache_drops_expired_answers_first() {
        let cache = cache();
        let start = Instant::now();
        for i in 0..CACHE_MAX {
            let mut key = [0; 32];
            key[..8].copy_from_slice(&(i as u64).to_le_bytes());
            cache.put(key, Access::Unauthenticated, start);
        }
        let later = start + CACHE_TTL;
        cache.put([1; 32], Access::Unauthenticated, later);
        let answers = cache.answers.lock().unwrap();
        assert_eq!(answers.len(), 1, "the expired answers went");
    }

    #[test]
    fn the_token_comes_from_the_bearer_header_or_else_the_cookie() {
        let mut headers = HeaderMap::new();
        assert_eq!(token(&headers), None);
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("theme=dark; kok_token=abc.def"),
        );
        assert_eq!(token(&headers).as_deref(), Some("abc.def"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer xyz"));
        assert_eq!(token(&headers).as_deref(), Some("xyz"));
        assert!(is_log("/operations/a-b-c/log"));
        assert!(!is_log("/operations/a-b-c"));
        assert!(cookie_safe("eyJ.eyJ-_x.sig") && !cookie_safe("a;b") && !cookie_safe("a b"));
    }

    #[test]
    fn a_refusal_page_shows_a_user_name_as_text() {
        let page = LoginPage {
            title: "Not allowed",
            problem: Some(Refusal::Pages("<script>x</script>".into()).message("kok-system")),
            form: false,
            namespace: "kok-system",
        };
        let response = login_page(StatusCode::FORBIDDEN, &page);
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        let body =
            futures::executor::block_on(axum::body::to_bytes(response.into_body(), usize::MAX)).unwrap();
        let html = String::from_utf8(body.to_vec()).unwrap();
        assert!(!html.contains("<script>x"), "{html}");
        assert!(html.contains("&lt;script&gt;x"), "{html}");
        assert!(html.contains(r#"href="/login""#), "{html}");
    }
}
