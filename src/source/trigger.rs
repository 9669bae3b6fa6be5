//! What makes the source poll: an interval with jitter and backoff, verified webhooks, and a local
//! `notify` watch on the refs of `file://`/path remotes, all feeding one coalescing "poll now" channel.

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use tokio::sync::mpsc;

/// Longest backoff after failed polls.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Relative jitter applied to every interval (±5%).
pub const JITTER: f64 = 0.05;

/// Largest webhook body accepted (1 MiB).
pub const MAX_WEBHOOK_BODY: usize = 1 << 20;

/// Why a poll was asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The interval elapsed.
    Interval,
    /// A verified webhook arrived from this provider.
    Webhook(Provider),
    /// The local repository's refs changed.
    LocalChange,
    /// Asked for by hand (tests, admin).
    Manual,
    /// A verified pull-request (GitLab: merge-request) webhook arrived from this provider.
    PullRequest(Provider),
}

/// What a pull-request webhook says about one pull request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullEvent {
    /// Its number (GitLab: iid).
    pub number: u64,
    /// Its head commit, when the payload names it.
    pub head: Option<String>,
    /// True when it was closed or merged; false when opened, reopened or pushed to.
    pub closed: bool,
}

/// Most pull-request events kept between two polls (the oldest are dropped beyond it; the next ref
/// listing finds every open pull request anyway).
const MAX_PENDING_PULL_EVENTS: usize = 256;

type PullEvents = std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<PullEvent>>>;

/// Sending half of the "poll now" channel; cheap to clone, usable from any thread.
#[derive(Clone, Debug)]
pub struct TriggerSender {
    tx: mpsc::Sender<Reason>,
    pulls: PullEvents,
}

/// Receiving half of the "poll now" channel.
#[derive(Debug)]
pub struct TriggerReceiver {
    rx: mpsc::Receiver<Reason>,
    pulls: PullEvents,
}

/// A "poll now" channel. Requests coalesce: while one is pending, further ones are dropped, since a
/// single poll answers them all. Pull-request events are kept beside it (they say which pull
/// requests closed), so coalescing loses none of them.
pub fn channel() -> (TriggerSender, TriggerReceiver) {
    let (tx, rx) = mpsc::channel(1);
    let pulls = PullEvents::default();
    (
        TriggerSender {
            tx,
            pulls: pulls.clone(),
        },
        TriggerReceiver { rx, pulls },
    )
}

impl TriggerSender {
    /// Asks for a poll; returns false when one was already pending or the receiver is gone.
    pub fn trigger(&self, reason: Reason) -> bool {
        self.tx.try_send(reason).is_ok()
    }

    /// Records a pull-request event and asks for a poll (which plans the pull requests at once).
    pub fn pull_request(&self, provider: Provider, event: PullEvent) -> bool {
        {
            let mut pulls = self.pulls.lock().unwrap_or_else(|p| p.into_inner());
            if pulls.len() >= MAX_PENDING_PULL_EVENTS {
                pulls.pop_front();
            }
            pulls.push_back(event);
        }
        self.trigger(Reason::PullRequest(provider))
    }
}

impl TriggerReceiver {
    /// Waits for the next request; `None` once every sender is gone.
    pub async fn recv(&mut self) -> Option<Reason> {
        self.rx.recv().await
    }

    /// A pending request, without waiting.
    pub fn try_recv(&mut self) -> Option<Reason> {
        self.rx.try_recv().ok()
    }

    /// The pull-request events received since the last call, oldest first.
    pub fn take_pull_events(&self) -> Vec<PullEvent> {
        let mut pulls = self.pulls.lock().unwrap_or_else(|p| p.into_inner());
        pulls.drain(..).collect()
    }
}

/// The pull-request event a verified webhook carries, if it is one: GitHub's and Gitea's
/// `pull_request` (header `X-GitHub-Event` / `X-Gitea-Event`; `number`, `action`,
/// `pull_request.head.sha`) and GitLab's `Merge Request Hook` (`object_attributes.iid`, `.action`,
/// `.last_commit.id`). Other events, and payloads that do not parse, give `None`.
pub fn pull_request_event(provider: Provider, headers: &HeaderMap, body: &[u8]) -> Option<PullEvent> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    let event_header = match provider {
        Provider::GitHub => "x-github-event",
        Provider::Gitea => "x-gitea-event",
        Provider::GitLab => "x-gitlab-event",
        Provider::Generic => return None,
    };
    let event = header(event_header)?;
    let payload: serde_json::Value = serde_json::from_slice(body).ok()?;
    let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
    match provider {
        Provider::GitLab => {
            if event != "Merge Request Hook" {
                return None;
            }
            let attributes = &payload["object_attributes"];
            let action = attributes["action"].as_str().unwrap_or_default();
            let state = attributes["state"].as_str().unwrap_or_default();
            Some(PullEvent {
                number: attributes["iid"].as_u64()?,
                head: text(&attributes["last_commit"]["id"]),
                closed: matches!(action, "close" | "merge") || matches!(state, "closed" | "merged"),
            })
        }
        _ => {
            if event != "pull_request" {
                return None;
            }
            Some(PullEvent {
                number: payload["number"]
                    .as_u64()
                    .or_else(|| payload["pull_request"]["number"].as_u64())?,
                head: text(&payload["pull_request"]["head"]["sha"]),
                closed: payload["action"].as_str() == Some("closed"),
            })
        }
    }
}

/// The poll interval with ±5% jitter and exponential backoff after failures (capped at
/// [`MAX_BACKOFF`], or at the interval itself when that is longer).
#[derive(Clone, Debug, PartialEq)]
pub struct Interval {
    base: Duration,
    failures: u32,
}

impl Interval {
    /// An interval of `base` between successful polls.
    pub fn new(base: Duration) -> Self {
        Interval { base, failures: 0 }
    }

    /// A poll succeeded: back to the base interval.
    pub fn success(&mut self) {
        self.failures = 0;
    }

    /// A poll failed: the next delay doubles.
    pub fn failure(&mut self) {
        self.failures = self.failures.saturating_add(1);
    }

    /// Consecutive failures so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// The delay before the next poll for a jitter draw `unit` in `[-1, 1]` (pure).
    pub fn delay_with(&self, unit: f64) -> Duration {
        let cap = MAX_BACKOFF.max(self.base);
        let factor = 2f64.powi(self.failures.min(30) as i32);
        let raw = (self.base.as_secs_f64() * factor).min(cap.as_secs_f64());
        let jittered = raw * (1.0 + JITTER * unit.clamp(-1.0, 1.0));
        Duration::from_secs_f64(jittered.min(cap.as_secs_f64()).max(0.0))
    }

    /// The delay before the next poll, with a random jitter.
    pub fn delay(&self) -> Duration {
        self.delay_with(rand::random_range(-1.0..=1.0))
    }

    /// Sleeps for [`Interval::delay`] (tokio time, so `tokio::time::pause()` drives it in tests).
    pub async fn tick(&self) {
        tokio::time::sleep(self.delay()).await;
    }
}

/// Forges whose webhook signatures are checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// `X-Hub-Signature-256: sha256=<hex>` HMAC-SHA256 of the body.
    GitHub,
    /// `X-Gitea-Signature: <hex>` HMAC-SHA256 of the body.
    Gitea,
    /// `X-Gitlab-Token: <secret>`.
    GitLab,
    /// `X-Kok-Signature: sha256=<hex>` HMAC-SHA256 of the body.
    Generic,
}

impl Provider {
    /// The provider for a `/hooks/<name>` path segment.
    pub fn from_name(name: &str) -> Option<Provider> {
        match name {
            "github" => Some(Provider::GitHub),
            "gitea" => Some(Provider::Gitea),
            "gitlab" => Some(Provider::GitLab),
            "generic" | "kok" => Some(Provider::Generic),
            _ => None,
        }
    }

    /// The header carrying the signature or token.
    pub fn header(self) -> &'static str {
        match self {
            Provider::GitHub => "x-hub-signature-256",
            Provider::Gitea => "x-gitea-signature",
            Provider::GitLab => "x-gitlab-token",
            Provider::Generic => "x-kok-signature",
        }
    }
}

/// Why a webhook request was refused. Messages never contain the secret or the received signature.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    /// The body is over [`MAX_WEBHOOK_BODY`].
    #[error("webhook body of {size} bytes is over the {limit} bytes accepted")]
    TooLarge {
        /// Body size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The signature header is absent.
    #[error("webhook request has no {header} header; configure the webhook secret on the forge")]
    MissingHeader {
        /// Header name.
        header: &'static str,
    },
    /// The signature header cannot be parsed.
    #[error("webhook header {header} is malformed (expected {expected})")]
    Malformed {
        /// Header name.
        header: &'static str,
        /// The expected shape.
        expected: &'static str,
    },
    /// The signature or token does not match the configured secret.
    #[error("webhook {header} does not match the configured secret")]
    Mismatch {
        /// Header name.
        header: &'static str,
    },
}

impl WebhookError {
    /// The HTTP status to answer with: 413 for a too large body, 401 otherwise.
    pub fn status(&self) -> u16 {
        match self {
            WebhookError::TooLarge { .. } => 413,
            _ => 401,
        }
    }
}

/// Verifies a webhook request for `provider` against `secret`, in constant time.
pub fn verify(
    provider: Provider,
    headers: &HeaderMap,
    body: &[u8],
    secret: &[u8],
) -> Result<(), WebhookError> {
    if body.len() > MAX_WEBHOOK_BODY {
        return Err(WebhookError::TooLarge {
            size: body.len(),
            limit: MAX_WEBHOOK_BODY,
        });
    }
    let header = provider.header();
    let value = headers
        .get(header)
        .ok_or(WebhookError::MissingHeader { header })?
        .to_str()
        .map_err(|_| WebhookError::Malformed {
            header,
            expected: "ASCII",
        })?
        .trim();
    match provider {
        Provider::GitLab => {
            if bool::from(value.as_bytes().ct_eq(secret)) {
                Ok(())
            } else {
                Err(WebhookError::Mismatch { header })
            }
        }
        Provider::GitHub | Provider::Generic => {
            let hex_part = value.strip_prefix("sha256=").ok_or(WebhookError::Malformed {
                header,
                expected: "sha256=<hex>",
            })?;
            check_hmac(header, hex_part, body, secret, "sha256=<hex>")
        }
        Provider::Gitea => check_hmac(header, value, body, secret, "<hex>"),
    }
}

fn check_hmac(
    header: &'static str,
    hex_signature: &str,
    body: &[u8],
    secret: &[u8],
    expected: &'static str,
) -> Result<(), WebhookError> {
    let given = hex::decode(hex_signature).map_err(|_| WebhookError::Malformed { header, expected })?;
    let computed = sign(body, secret);
    if given.len() == computed.len() && bool::from(given.ct_eq(&computed)) {
        Ok(())
    } else {
        Err(WebhookError::Mismatch { header })
    }
}

/// HMAC-SHA256 of `body` with `secret` (what a forge puts, hex-encoded, in its signature header).
pub fn sign(body: &[u8], secret: &[u8]) -> Vec<u8> {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(m) => m,
        Err(_) => return Vec::new(),
    };
    mac.update(body);
    mac.finalize().into_bytes().to_vec()
}

/// How long the refs must stay quiet after a change before the watch asks for one more poll. A ref
/// written into a directory that was just made (`refs/pull/7/head` after `refs/pull/7` was pruned)
/// can land before the watch on that directory is added, so its own event is never seen and the
/// poll the directory's event asked for may run before the ref is there; the poll after the burst
/// settles reads it.
pub const SETTLE: Duration = Duration::from_millis(100);

/// Failure to start the local watcher.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The repository directory has no refs to watch.
    #[error("cannot watch {path} for new commits: it is not a git repository (no refs/ directory)")]
    NotARepository {
        /// The path given.
        path: PathBuf,
    },
    /// notify refused.
    #[error("cannot watch {path} for new commits: {source}")]
    Notify {
        /// The path watched.
        path: PathBuf,
        /// notify's error.
        #[source]
        source: notify::Error,
    },
    /// The thread that follows the watch's events could not start.
    #[error("cannot watch {path} for new commits: starting its thread failed: {source}")]
    Thread {
        /// The path watched.
        path: PathBuf,
        /// The spawn error.
        #[source]
        source: std::io::Error,
    },
}

/// A running watch on a local repository's refs; dropping it stops the watch.
pub struct LocalWatcher {
    _watcher: notify::RecommendedWatcher,
    git_dir: PathBuf,
}

impl std::fmt::Debug for LocalWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalWatcher")
            .field("git_dir", &self.git_dir)
            .finish()
    }
}

impl LocalWatcher {
    /// The git directory watched.
    pub fn git_dir(&self) -> &Path {
        &self.git_dir
    }
}

/// Watches the refs of the local repository at `repo` (bare or with a `.git` directory): `refs/`
/// recursively, plus `packed-refs` and `HEAD`, but not their `.lock` files. A burst of changes sends
/// [`Reason::LocalChange`] at its first change and again once it has been quiet for [`SETTLE`].
pub fn watch_local(repo: &Path, sender: TriggerSender) -> Result<LocalWatcher, WatchError> {
    use notify::Watcher;
    let git_dir = if repo.join(".git").is_dir() {
        repo.join(".git")
    } else {
        repo.to_path_buf()
    };
    let refs = git_dir.join("refs");
    if !refs.is_dir() {
        return Err(WatchError::NotARepository {
            path: repo.to_path_buf(),
        });
    }
    let refs_for_filter = refs.clone();
    let (seen, changes) = std::sync::mpsc::channel::<()>();
    std::thread::Builder::new()
        .name("kok-watch".to_string())
        .spawn(move || follow_bursts(&changes, &sender))
        .map_err(|source| WatchError::Thread {
            path: git_dir.clone(),
            source,
        })?;
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        if matches!(event.kind, notify::EventKind::Access(_)) {
            return;
        }
        let relevant = event.paths.iter().any(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            // git writes `<ref>.lock` and renames it over the ref: the lock's own events come before
            // the ref moved, and a poll they asked for would read the old commit, leaving the new
            // one to the poll after the burst settles. The rename is the change.
            !name.ends_with(".lock")
                && (p.starts_with(&refs_for_filter) || matches!(name, "packed-refs" | "HEAD"))
        });
        if relevant {
            let _ = seen.send(());
        }
    })
    .map_err(|source| WatchError::Notify {
        path: git_dir.clone(),
        source,
    })?;
    watcher
        .watch(&refs, notify::RecursiveMode::Recursive)
        .map_err(|source| WatchError::Notify {
            path: refs.clone(),
            source,
        })?;
    watcher
        .watch(&git_dir, notify::RecursiveMode::NonRecursive)
        .map_err(|source| WatchError::Notify {
            path: git_dir.clone(),
            source,
        })?;
    Ok(LocalWatcher {
        _watcher: watcher,
        git_dir,
    })
}

/// Asks for a poll at the first change of each burst and again once it settles; returns when the
/// watch is dropped.
fn follow_bursts(changes: &std::sync::mpsc::Receiver<()>, sender: &TriggerSender) {
    use std::sync::mpsc::RecvTimeoutError;
    while changes.recv().is_ok() {
        sender.trigger(Reason::LocalChange);
        loop {
            match changes.recv_timeout(SETTLE) {
                Ok(()) => {}
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        sender.trigger(Reason::LocalChange);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_jitter_stays_within_five_percent() {
        let interval = Interval::new(Duration::from_secs(100));
        assert_eq!(interval.delay_with(1.0), Duration::from_secs(105));
        assert_eq!(interval.delay_with(-1.0), Duration::from_secs(95));
        for _ in 0..100 {
            let d = interval.delay();
            assert!(
                d >= Duration::from_secs(95) && d <= Duration::from_secs(105),
                "{d:?}"
            );
        }
    }

    #[test]
    fn failures_double_the_delay_up_to_five_minutes() {
        let mut interval = Interval::new(Duration::from_secs(30));
        interval.failure();
        assert_eq!(interval.delay_with(0.0), Duration::from_secs(60));
        interval.failure();
        assert_eq!(interval.delay_with(0.0), Duration::from_secs(120));
        for _ in 0..10 {
            interval.failure();
        }
        assert_eq!(interval.delay_with(1.0), MAX_BACKOFF);
        interval.success();
        assert_eq!(interval.delay_with(0.0), Duration::from_secs(30));
    }

    #[test]
    fn intervals_longer_than_the_cap_are_kept() {
        let mut interval = Interval::new(Duration::from_secs(600));
        interval.failure();
        assert_eq!(interval.delay_with(0.0), Duration::from_secs(600));
    }

    #[tokio::test(start_paused = true)]
    async fn tick_sleeps_the_jittered_interval_in_tokio_time() {
        let mut interval = Interval::new(Duration::from_secs(60));
        interval.failure();
        let start = tokio::time::Instant::now();
        interval.tick().await;
        let slept = start.elapsed();
        assert!(
            slept >= Duration::from_secs(114) && slept <= Duration::from_secs(126),
            "{slept:?}"
        );
    }

    fn headers(name: &'static str, value: &str) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(name, value.parse().unwrap());
        map
    }

    #[test]
    fn github_signatures_are_checked_against_the_body() {
        let body = b"{\"ref\":\"refs/heads/main\"}";
        let good = format!("sha256={}", hex::encode(sign(body, b"s3cret")));
        assert_eq!(
            verify(
                Provider::GitHub,
                &headers("x-hub-signature-256", &good),
                body,
                b"s3cret"
            ),
            Ok(())
        );
        let err = verify(
            Provider::GitHub,
            &headers("x-hub-signature-256", &good),
            b"other",
            b"s3cret",
        )
        .unwrap_err();
        assert_eq!(err.status(), 401);
        assert!(!err.to_string().contains("s3cret"));
        let err = verify(Provider::GitHub, &HeaderMap::new(), body, b"s3cret").unwrap_err();
        assert_eq!(
            err,
            WebhookError::MissingHeader {
                header: "x-hub-signature-256"
            }
        );
    }

    #[test]
    fn gitea_generic_and_gitlab_headers_are_verified() {
        let body = b"payload";
        let sig = hex::encode(sign(body, b"k"));
        assert_eq!(
            verify(Provider::Gitea, &headers("x-gitea-signature", &sig), body, b"k"),
            Ok(())
        );
        let generic = format!("sha256={sig}");
        assert_eq!(
            verify(
                Provider::Generic,
                &headers("x-kok-signature", &generic),
                body,
                b"k"
            ),
            Ok(())
        );
        assert!(verify(Provider::Generic, &headers("x-kok-signature", &sig), body, b"k").is_err());
        assert_eq!(
            verify(Provider::GitLab, &headers("x-gitlab-token", "k"), body, b"k"),
            Ok(())
        );
        let err = verify(Provider::GitLab, &headers("x-gitlab-token", "wrong"), body, b"k").unwrap_err();
        assert_eq!(
            err,
            WebhookError::Mismatch {
                header: "x-gitlab-token"
            }
        );
    }

    #[test]
    fn oversized_bodies_are_refused_with_413() {
        let body = vec![b'x'; MAX_WEBHOOK_BODY + 1];
        let err = verify(Provider::GitLab, &headers("x-gitlab-token", "k"), &body, b"k").unwrap_err();
        assert_eq!(err.status(), 413);
    }

    #[test]
    fn pull_request_webhooks_name_the_pull_request_its_head_and_whether_it_closed() {
        let github = br#"{"action":"synchronize","number":7,"pull_request":{"head":{"sha":"abc"}}}"#;
        assert_eq!(
            pull_request_event(
                Provider::GitHub,
                &headers("x-github-event", "pull_request"),
                github
            ),
            Some(PullEvent {
                number: 7,
                head: Some("abc".into()),
                closed: false
            })
        );
        assert_eq!(
            pull_request_event(Provider::GitHub, &headers("x-github-event", "push"), github),
            None
        );
        let gitea = br#"{"action":"closed","number":3,"pull_request":{"head":{"sha":"def"}}}"#;
        assert!(
            pull_request_event(Provider::Gitea, &headers("x-gitea-event", "pull_request"), gitea)
                .unwrap()
                .closed
        );
        let gitlab = br#"{"object_kind":"merge_request","object_attributes":{"iid":12,"action":"update","state":"opened","last_commit":{"id":"0123"}}}"#;
        assert_eq!(
            pull_request_event(
                Provider::GitLab,
                &headers("x-gitlab-event", "Merge Request Hook"),
                gitlab
            ),
            Some(PullEvent {
                number: 12,
                head: Some("0123".into()),
                closed: false
            })
        );
        let merged = br#"{"object_attributes":{"iid":12,"action":"merge","state":"merged"}}"#;
        assert!(
            pull_request_event(
                Provider::GitLab,
                &headers("x-gitlab-event", "Merge Request Hook"),
                merged
            )
            .unwrap()
            .closed
        );
    }

    #[test]
    fn pull_request_events_survive_coalesced_polls() {
        let (tx, mut rx) = channel();
        let event = |number| PullEvent {
            number,
            head: None,
            closed: true,
        };
        assert!(tx.pull_request(Provider::GitHub, event(1)));
        assert!(!tx.pull_request(Provider::GitHub, event(2)));
        assert_eq!(rx.try_recv(), Some(Reason::PullRequest(Provider::GitHub)));
        assert_eq!(rx.take_pull_events(), vec![event(1), event(2)]);
        assert!(rx.take_pull_events().is_empty());
    }

    #[test]
    fn trigger_requests_coalesce_while_one_is_pending() {
        let (tx, mut rx) = channel();
        assert!(tx.trigger(Reason::Manual));
        assert!(!tx.trigger(Reason::Interval));
        assert_eq!(rx.try_recv(), Some(Reason::Manual));
        assert_eq!(rx.try_recv(), None);
    }
}
