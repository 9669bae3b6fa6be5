//! The git source: a bare cache fetched with credentials, a one-round-trip "has the ref moved?" poll,
//! commit-to-commit diffs into changed clusters, operation attribution, history and poll triggers.
//!
//! # Shape
//!
//! ```text
//! let mut source = Source::open(SourceConfig::new(url, "main", cache_dir))?;   // blocking API:
//! match source.poll(last)? {                                  // call it from spawn_blocking
//!     Poll::Unchanged { .. } => {}                            // one ref listing; nothing fetched or written
//!     Poll::Changed { commit } => {
//!         let changes = source.diff(last, commit, "clusters")?;                   // ChangeSet
//!         let tree = source.tree(commit)?;                   // GitTree: a layout::TreeReader
//!         let parsed = layout::parse_clusters(&tree, "clusters", &changes.touched());
//!         let new_ops = attribute(source.repository(), last, commit, "clusters", &changes.touched())?;
//!         ctx.attribution = attribution::to_render_attribution(&new_ops);          // for render_cluster
//!         // prune `changes.removed` (and, when `changes.full_resync`, whatever `commit` lacks)
//!     }
//! }
//! ```
//!
//! The no-op listing does not open the cache at all. [`Source::fetch`] forces a fetch (periodic
//! resync); [`Source::resolve_commit`] turns a user's revision into a commit of the fetched history;
//! [`Source::revision`] gives Flux's `<ref>@sha1:<sha>`; [`Source::fetch_count`] and
//! [`Source::listing_count`] count network round trips.
//!
//! - [`Source`] owns one bare repository under `cache_dir/<hash of the url>.git`. It fetches only the
//!   configured ref, with an explicit refspec, into [`SOURCE_REF`]. A cache that cannot be opened or
//!   read is deleted and re-created once; a second failure is reported as [`SourceError::CacheCorrupt`].
//! - Network work (ref listing, fetch) runs on a helper thread with its own handle on the cache;
//!   [`SourceConfig::timeout`] is enforced by waiting on it at most that long (the poll then fails with
//!   [`SourceError::Timeout`]) and by cancelling the transfer from the progress callbacks once the
//!   deadline has passed. A poll started while a timed-out operation is still running fails at once
//!   with [`SourceError::Busy`]. libgit2's own socket timeouts are process-global options set through
//!   unsafe calls, which this crate forbids, so they are left at their defaults.
//! - Credentials: see [`Credentials`]. The callbacks offer each configured method once and record what
//!   they offered, so a refusal is reported as [`SourceError::AuthFailed`] listing the methods tried.
//!   ssh host keys are checked against the given known_hosts file only (plain and `[host]:port`
//!   entries, wildcards, negations, `@revoked`; hashed `|1|` entries are not read).
//! - [`diff`] compares the trees of two commits under the root path; [`attribution`] finds the
//!   commit that introduced each new operation; [`history`] lists the commits that touched a cluster.
//!   The entries of the last few cluster roots read are kept by tree id for the whole process, so a
//!   pass whose base is the previous pass's commit reads only the new root
//!   ([`forget_recent_trees`] drops them).
//! - [`pulls`] builds the commit a pull request's plan reads: its head merged into the reconciled commit.
//! - [`revision`] reads revisions as `git rev-parse` does, in the user's repository or the cache.
//! - [`verify`] checks commit signatures (SSH and OpenPGP) against trust material from the local
//!   file system.
//! - [`trigger`] holds the interval timer with jitter and backoff, webhook verification and the
//!   local `notify` watcher; they all feed a [`trigger::channel`] that says "poll now".

pub mod attribution;
mod auth;
pub mod diff;
mod fetch;
pub mod history;
pub mod pulls;
pub mod read;
pub mod revision;
mod tree;
pub mod trigger;
mod url;
pub mod verify;

pub use attribution::{attribute, Attributions, Introduced};
pub use diff::{diff_trees, ChangeSet};
pub use fetch::{Poll, PullRequestHead, Source};
pub use history::{cluster_history, HistoryEntry};
pub use pulls::{in_history, merge_target, MergeTarget};
pub use read::{read_commit, CommitRead};
pub use revision::{check_range, open_local, resolve_revision, RevisionError};
pub use tree::{forget_recent_trees, GitTree};
pub use url::{cache_dir_name, redact, replace_password, RemoteUrl};

use std::path::PathBuf;
use std::time::Duration;

/// The private reference the configured ref is fetched into, in the bare cache.
pub const SOURCE_REF: &str = "refs/kok/source";

/// Default network timeout for one listing or fetch.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Username sent with a token when no username file is given (GitHub, Gitea and GitLab accept it).
pub const TOKEN_USERNAME: &str = "x-access-token";

/// Where the credentials live. Every secret is read from a file at use, kept in memory only for the
/// duration of the call, and never logged or put in an error.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Credentials {
    /// https: a token sent as the password (username from `username_file`, else `x-access-token`).
    pub token_file: Option<PathBuf>,
    /// https: the username (with `password_file` or `token_file`); ssh: the login when the URL has none.
    pub username_file: Option<PathBuf>,
    /// https: the password for basic authentication.
    pub password_file: Option<PathBuf>,
    /// ssh: an unencrypted private key (OpenSSH or PEM format).
    pub ssh_key_file: Option<PathBuf>,
    /// ssh: the known_hosts file the server's host key must be listed in (hashed entries are not read).
    pub known_hosts_file: Option<PathBuf>,
}

/// What to fetch, from where, and where to keep it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceConfig {
    /// `https://`, `ssh://`, scp-like `user@host:path`, `file://` or a plain path.
    pub url: String,
    /// Branch (`main`), tag (`v1`), full ref name (`refs/heads/main`) or `HEAD`.
    pub reference: String,
    /// Directory holding the bare caches, one per URL.
    pub cache_dir: PathBuf,
    /// Credential files.
    pub credentials: Credentials,
    /// Longest time one ref listing or fetch may take.
    pub timeout: Duration,
}

/// Installs the credential and host-key callbacks of `credentials` for `remote` on `callbacks`, for
/// other modules that talk to the same remote (the git-notes status push).
pub fn install_callbacks(
    callbacks: &mut git2::RemoteCallbacks<'_>,
    remote: &RemoteUrl,
    credentials: &Credentials,
) {
    auth::install(callbacks, remote, credentials, Default::default());
}

impl SourceConfig {
    /// A configuration without credentials and with the default timeout.
    pub fn new(url: impl Into<String>, reference: impl Into<String>, cache_dir: impl Into<PathBuf>) -> Self {
        SourceConfig {
            url: url.into(),
            reference: reference.into(),
            cache_dir: cache_dir.into(),
            credentials: Credentials::default(),
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// Failures of the git source. Messages name the remote (with any password removed), never a secret.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The URL could not be understood.
    #[error("git remote {url:?} is not a URL, scp-like address or path: {reason}")]
    InvalidUrl {
        /// The URL as given (redacted).
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// The cache directory could not be created or initialized.
    #[error("could not create the git cache at {path}: {}; check that --cache-dir is writable", crate::redact::scrub(.message))]
    CacheInit {
        /// Cache repository path.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// The cache was re-created once and still failed.
    #[error("the git cache at {path} is unusable even after re-creating it: {}", crate::redact::scrub(.message))]
    CacheCorrupt {
        /// Cache repository path.
        path: PathBuf,
        /// What failed the second time.
        message: String,
    },
    /// A credential file could not be read.
    #[error("could not read the {what} file {path}: {}", crate::redact::scrub(.message))]
    ReadCredential {
        /// Which credential (e.g. "token").
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error (never the content).
        message: String,
    },
    /// The server refused every credential offered.
    #[error("authentication to {url} failed after trying {tried}: {}; check the credential files", crate::redact::scrub(.message))]
    AuthFailed {
        /// Remote (redacted).
        url: String,
        /// The methods tried, comma separated (e.g. "ssh key /k/id_ed25519").
        tried: String,
        /// libgit2's message.
        message: String,
    },
    /// An ssh host key is not in the known_hosts file.
    #[error(
        "ssh host key of {host} ({key_type}) is not in the known_hosts file {known_hosts}; \
         add it (e.g. `ssh-keyscan -p PORT HOST >> FILE`) after checking its fingerprint"
    )]
    HostKeyUnknown {
        /// `host` or `[host]:port`.
        host: String,
        /// Key type offered by the server.
        key_type: String,
        /// The known_hosts file consulted.
        known_hosts: String,
    },
    /// An ssh host key differs from the one recorded.
    #[error(
        "ssh host key of {host} ({key_type}) does not match the key recorded in the known_hosts file \
         {known_hosts}; refusing to connect (the server key changed or someone is intercepting)"
    )]
    HostKeyChanged {
        /// `host` or `[host]:port`.
        host: String,
        /// Key type offered by the server.
        key_type: String,
        /// The known_hosts file consulted.
        known_hosts: String,
    },
    /// The configured ref does not exist on the remote.
    #[error("ref {reference:?} does not exist on {url} (looked for {looked_for}); check --ref")]
    RefNotFound {
        /// The configured ref.
        reference: String,
        /// Remote (redacted).
        url: String,
        /// Names looked for.
        looked_for: String,
    },
    /// The remote could not be reached or the transfer failed.
    #[error("could not {what} {url}: {}; check the URL and that the server is reachable", crate::redact::scrub(.message))]
    Remote {
        /// "list refs of" or "fetch ... from".
        what: String,
        /// Remote (redacted).
        url: String,
        /// libgit2's message.
        message: String,
    },
    /// The network operation did not finish in time.
    #[error("could not {what} {url} within {seconds}s (--git-timeout); is the remote reachable?")]
    Timeout {
        /// "list refs of" or "fetch ... from".
        what: String,
        /// Remote (redacted).
        url: String,
        /// The timeout.
        seconds: u64,
    },
    /// A previous network operation that timed out is still running.
    #[error("a previous git operation on {url} timed out and is still running; try again later")]
    Busy {
        /// Remote (redacted).
        url: String,
    },
    /// A revision could not be found in the cache.
    #[error("revision {rev:?} is not in the fetched history of {url}: {}", crate::redact::scrub(.message))]
    RevisionNotFound {
        /// The revision asked for.
        rev: String,
        /// Remote (redacted).
        url: String,
        /// libgit2's message.
        message: String,
    },
    /// Reading the cache failed.
    #[error("could not {what}: {}", crate::redact::scrub(&.source.to_string()))]
    Git {
        /// What was attempted.
        what: String,
        /// libgit2's error.
        #[source]
        source: git2::Error,
    },
}

impl SourceError {
    pub(crate) fn git(what: impl Into<String>) -> impl FnOnce(git2::Error) -> SourceError {
        let what = what.into();
        move |source| SourceError::Git { what, source }
    }
}
