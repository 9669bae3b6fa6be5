//! The `Sink` trait every commit-status destination implements, its errors, and the redacting token.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;

use crate::api::{CommitStatus, Recorded};

/// Environment variable holding the forge token when no token file is given.
pub const TOKEN_ENV: &str = "KOK_STATUS_TOKEN";

/// A destination for commit statuses: git notes or a forge's statuses API.
pub trait Sink: Send + Sync {
    /// Short name used in logs and metrics (`git-notes`, `github`, `gitlab`, `gitea`).
    fn name(&self) -> &str;

    /// Puts `status` on `commit` (a full sha). Delivering the same status twice must be harmless.
    fn deliver<'a>(
        &'a self,
        commit: &'a str,
        status: &'a CommitStatus,
    ) -> BoxFuture<'a, Result<(), DeliveryError>>;

    /// Most deliveries to this sink at once; `None` for no limit (a sink that batches what arrives
    /// together).
    fn max_in_flight(&self) -> Option<usize> {
        Some(DEFAULT_SINK_IN_FLIGHT)
    }

    /// True when the per-operation contexts this sink shows are limited by `--status-max-contexts`
    /// (forges, whose API rate limits make one context per operation too costly on a large commit);
    /// false when it holds every context (git notes).
    fn budgeted(&self) -> bool {
        false
    }

    /// True when this sink keeps a record of the statuses it was given that [`Sink::read_back`] reads
    /// (git notes, a forge's statuses); false for sinks that only notify.
    fn keeps_record(&self) -> bool {
        false
    }

    /// Reads back the statuses this sink holds on `commit` (a full sha), the newest per context, so a
    /// run the meta-cluster lost is restored instead of run again ([`super::record`]). A sink that keeps
    /// no record holds nothing.
    fn read_back<'a>(&'a self, _commit: &'a str) -> BoxFuture<'a, Result<Vec<Recorded>, String>> {
        futures::future::ready(Ok(Vec::new())).boxed()
    }

    /// False for a status this sink does nothing with (a notification sink and a queued run): it takes
    /// it without a trace, and needs no record of it.
    fn takes(&self, _status: &CommitStatus) -> bool {
        true
    }

    /// The fingerprint [`Sink::holding`] gives `status` once this sink took it; `None` for a sink that
    /// cannot tell exactly which statuses it holds. A status that only sinks which can tell take (git
    /// notes: an operation of a commit above the budget, or no forge) is not recorded on its operation:
    /// their own record is read back instead after a restart.
    fn fingerprint(&self, _status: &CommitStatus) -> Option<u64> {
        None
    }

    /// The fingerprints of the statuses this sink holds on `commit` (see [`Sink::fingerprint`]); `None`
    /// when it cannot tell.
    fn holding<'a>(&'a self, _commit: &'a str) -> BoxFuture<'a, Result<Option<HashSet<u64>>, String>> {
        futures::future::ready(Ok(None)).boxed()
    }
}

/// Most deliveries at once to a sink that does not say otherwise (a forge's API).
pub const DEFAULT_SINK_IN_FLIGHT: usize = 8;

/// Why a status could not be delivered, and whether trying again can help.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// The sink is unavailable for now (network error, 5xx, 429, rate limit): retry with backoff.
    #[error("{sink}: delivering status {context} on {commit} failed, will retry: {}", crate::redact::scrub(.reason))]
    Retryable {
        /// Sink name.
        sink: String,
        /// Status context.
        context: String,
        /// Commit sha.
        commit: String,
        /// What went wrong (scrubbed of every secret kok holds).
        reason: String,
        /// How long the sink asked to wait (Retry-After), if it said.
        retry_after: Option<Duration>,
    },
    /// The sink is paused until its rate limit resets; nothing was sent.
    #[error("{sink}: paused by its rate limit for {}s more; status {context} on {commit} goes out after", .wait.as_secs())]
    Paused {
        /// Sink name.
        sink: String,
        /// Status context.
        context: String,
        /// Commit sha.
        commit: String,
        /// Time left until the pause ends.
        wait: Duration,
    },
    /// The sink refused the status (4xx other than 429): retrying the same request will not help until
    /// the configuration (token, project, base URL) is fixed.
    #[error(
        "{sink}: delivering status {context} on {commit} was refused: {}; check the status sink configuration and token",
        crate::redact::scrub(.reason)
    )]
    Permanent {
        /// Sink name.
        sink: String,
        /// Status context.
        context: String,
        /// Commit sha.
        commit: String,
        /// What went wrong (scrubbed of every secret kok holds).
        reason: String,
    },
}

impl DeliveryError {
    /// True when a later attempt may succeed without a configuration change.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            DeliveryError::Retryable { .. } | DeliveryError::Paused { .. }
        )
    }

    /// True when the sink was not even asked: it is paused by its rate limit.
    pub fn is_paused(&self) -> bool {
        matches!(self, DeliveryError::Paused { .. })
    }

    /// The wait the sink asked for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            DeliveryError::Retryable { retry_after, .. } => *retry_after,
            DeliveryError::Paused { wait, .. } => Some(*wait),
            DeliveryError::Permanent { .. } => None,
        }
    }
}

/// Errors reading a token.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The token file could not be read.
    #[error("reading the status token from {path}: {source}; mount the Secret there or set {TOKEN_ENV}")]
    ReadFile {
        /// Path of the token file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The token file or variable is empty.
    #[error("the status token from {from} is empty; put the forge token there")]
    Empty {
        /// Where the token was read from.
        from: String,
    },
    /// Neither a token file nor the variable is set.
    #[error("the {sink} status sink needs a token: pass --status-token-file or set {TOKEN_ENV}")]
    Missing {
        /// Sink that needs the token.
        sink: String,
    },
}

/// A forge API token. Its `Debug` and `Display` never show the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// Wraps a token value (surrounding whitespace is dropped).
    pub fn new(value: impl Into<String>) -> Self {
        let token = value.into().trim().to_string();
        crate::redact::register(&token);
        Token(token)
    }

    /// Reads the token from a file (a mounted Secret), trimming the trailing newline.
    pub fn from_file(path: &Path) -> Result<Self, TokenError> {
        let raw = std::fs::read_to_string(path).map_err(|source| TokenError::ReadFile {
            path: path.display().to_string(),
            source,
        })?;
        let token = Token::new(raw);
        if token.0.is_empty() {
            return Err(TokenError::Empty {
                from: path.display().to_string(),
            });
        }
        Ok(token)
    }

    /// The token from `file` when given, else from [`TOKEN_ENV`]; `sink` names who needs it.
    pub fn load(file: Option<&Path>, sink: &str) -> Result<Self, TokenError> {
        if let Some(path) = file {
            return Token::from_file(path);
        }
        match std::env::var(TOKEN_ENV) {
            Ok(value) if !value.trim().is_empty() => Ok(Token::new(value)),
            Ok(_) => Err(TokenError::Empty {
                from: TOKEN_ENV.to_string(),
            }),
            Err(_) => Err(TokenError::Missing {
                sink: sink.to_string(),
            }),
        }
    }

    /// The secret value, for building a request header only.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl std::fmt::Display for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Parses a `Retry-After` value: delay seconds, or an HTTP-date (relative to `now`).
pub fn parse_retry_after(value: &str, now: jiff::Timestamp) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = jiff::fmt::rfc2822::parse(value).ok()?.timestamp();
    let wait = at.as_second().saturating_sub(now.as_second());
    Some(Duration::from_secs(wait.max(0) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_debug_and_display_never_show_the_value() {
        let t = Token::new("s3cr3t-value\n");
        assert_eq!(format!("{t:?}"), "Token(<redacted>)");
        assert_eq!(format!("{t}"), "<redacted>");
        assert_eq!(t.expose(), "s3cr3t-value");
    }

    #[test]
    fn retry_after_accepts_seconds_and_http_dates() {
        let now: jiff::Timestamp = "2015-10-21T07:27:00Z".parse().unwrap();
        assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:20:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
    }

    #[test]
    fn token_file_is_trimmed_and_an_empty_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "abc\n").unwrap();
        assert_eq!(Token::from_file(&path).unwrap().expose(), "abc");
        std::fs::write(&path, "\n").unwrap();
        let err = Token::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("is empty"), "{err}");
    }
}
