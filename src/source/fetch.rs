//! The bare cache and its network side: one-round-trip ref listing, fetch of one ref, re-creation
//! of a corrupt cache, and the timeout watchdog.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use git2::{AutotagOption, Direction, ErrorClass, FetchOptions, Oid, RemoteCallbacks, Repository};
use tracing::{debug, info, instrument, warn};

use super::auth::{self, AuthLog, SharedLog};
use super::url::{cache_dir_name, redact, RemoteUrl};
use super::{ChangeSet, GitTree, SourceConfig, SourceError, SOURCE_REF};

/// The outcome of [`Source::poll`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Poll {
    /// The ref still points at the last commit; nothing was fetched or written.
    Unchanged {
        /// The commit the ref points at (= the `last` given).
        commit: Oid,
    },
    /// The ref moved (or there was no last commit); the new commit is in the cache.
    Changed {
        /// The commit the ref now points at.
        commit: Oid,
    },
}

impl Poll {
    /// The commit the ref points at.
    pub fn commit(&self) -> Oid {
        match self {
            Poll::Unchanged { commit } | Poll::Changed { commit } => *commit,
        }
    }
}

/// One remote, its configured ref and its bare cache. Blocking: own it from one thread (or call it
/// from `spawn_blocking`).
pub struct Source {
    config: SourceConfig,
    remote: RemoteUrl,
    cache_path: PathBuf,
    repo: Repository,
    resolved_ref: Option<String>,
    fetches: u64,
    listings: u64,
    pending: Option<JoinHandle<()>>,
    pull_requests: Vec<PullRequestHead>,
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source")
            .field("url", &redact(&self.config.url))
            .field("reference", &self.config.reference)
            .field("cache", &self.cache_path)
            .finish()
    }
}

/// What the network thread returns.
enum NetOutcome {
    Listed(Vec<(String, Oid)>),
    Fetched,
}

impl Source {
    /// Opens (or creates) the bare cache for `config.url` under `config.cache_dir`. A cache that cannot
    /// be opened is deleted and created again.
    pub fn open(config: SourceConfig) -> Result<Source, SourceError> {
        let remote = RemoteUrl::parse(&config.url)?;
        let cache_path = config.cache_dir.join(cache_dir_name(remote.as_str()));
        let repo = open_or_create(&cache_path)?;
        Ok(Source {
            config,
            remote,
            cache_path,
            repo,
            resolved_ref: None,
            fetches: 0,
            listings: 0,
            pending: None,
            pull_requests: Vec::new(),
        })
    }

    /// The bare cache repository (read-only use: trees, blobs, commits).
    pub fn repository(&self) -> &Repository {
        &self.repo
    }

    /// Where the bare cache lives.
    pub fn cache_path(&self) -> &Path {
        &self.cache_path
    }

    /// The remote as configured, classified.
    pub fn remote(&self) -> &RemoteUrl {
        &self.remote
    }

    /// The configuration.
    pub fn config(&self) -> &SourceConfig {
        &self.config
    }

    /// How many fetches this source made (a no-op poll makes none).
    pub fn fetch_count(&self) -> u64 {
        self.fetches
    }

    /// How many ref listings this source made.
    pub fn listing_count(&self) -> u64 {
        self.listings
    }

    /// The full name the configured ref resolved to on the remote (after the first poll).
    pub fn resolved_ref(&self) -> Option<&str> {
        self.resolved_ref.as_deref()
    }

    /// Flux-style revision for `commit`: `<branch or tag>@sha1:<sha>`.
    pub fn revision(&self, commit: Oid) -> String {
        let name = self.resolved_ref.as_deref().unwrap_or(&self.config.reference);
        let short = name
            .strip_prefix("refs/heads/")
            .or_else(|| name.strip_prefix("refs/tags/"))
            .unwrap_or(name);
        format!("{short}@sha1:{commit}")
    }

    /// Asks the remote where the ref points (one round trip) and fetches only when it moved away from
    /// `last` (or when `last` is `None`). Returns the commit the ref points at.
    #[instrument(skip(self), fields(url = %redact(&self.config.url), reference = %self.config.reference))]
    pub fn poll(&mut self, last: Option<Oid>) -> Result<Poll, SourceError> {
        let heads = self.list_remote()?;
        self.pull_requests = pull_request_refs(&heads);
        let (name, listed) =
            resolve(&self.config.reference, &heads).ok_or_else(|| SourceError::RefNotFound {
                reference: self.config.reference.clone(),
                url: redact(&self.config.url),
                looked_for: candidates(&self.config.reference).join(", "),
            })?;
        self.resolved_ref = Some(name.clone());
        if Some(listed) == last {
            debug!(commit = %listed, "ref unchanged");
            return Ok(Poll::Unchanged { commit: listed });
        }
        let commit = self.fetch_ref(&name)?;
        info!(%commit, "fetched");
        Ok(Poll::Changed { commit })
    }

    /// Fetches the ref unconditionally (e.g. for a periodic full resync) and returns its commit.
    pub fn fetch(&mut self) -> Result<Oid, SourceError> {
        self.poll(None).map(|p| p.commit())
    }

    /// Resolves `rev` (a sha, short sha, `refs/kok/source~2`, ...) to a commit in the cache.
    pub fn resolve_commit(&self, rev: &str) -> Result<Oid, SourceError> {
        let spec = if rev == "source" || rev.is_empty() {
            SOURCE_REF
        } else {
            rev
        };
        self.repo
            .revparse_single(spec)
            .and_then(|o| o.peel_to_commit())
            .map(|c| c.id())
            .map_err(|e| SourceError::RevisionNotFound {
                rev: rev.to_string(),
                url: redact(&self.config.url),
                message: e.message().to_string(),
            })
    }

    /// Fetches every branch (as `refs/heads/*` and `refs/remotes/origin/*`) and tag of the remote into
    /// the cache and points the cache's HEAD at the configured branch, so that revisions read there as
    /// `git rev-parse` reads them in a clone: `main`, `origin/main`, `v1`, `HEAD`, `main~2`.
    pub fn fetch_branches_and_tags(&mut self) -> Result<(), SourceError> {
        for (name, into) in [
            ("refs/heads/*", "refs/heads/*"),
            ("refs/heads/*", "refs/remotes/origin/*"),
            ("refs/tags/*", "refs/tags/*"),
        ] {
            self.fetches += 1;
            self.network_into(Some(name.to_string()), into)?;
        }
        if let Some(name) = self
            .resolved_ref
            .as_deref()
            .filter(|n| n.starts_with("refs/heads/"))
        {
            self.repo.set_head(name).map_err(SourceError::git(format!(
                "point HEAD of the cache {} at {name}",
                self.cache_path.display()
            )))?;
        }
        Ok(())
    }

    /// The heads of the remote's open pull requests — `refs/pull/N/head` (GitHub, Gitea) and
    /// `refs/merge-requests/N/head` (GitLab) — from one ref listing, as the main poll makes it; nothing
    /// is fetched. A closed or merged pull request whose ref is gone is simply absent.
    pub fn pull_request_heads(&mut self) -> Result<Vec<PullRequestHead>, SourceError> {
        Ok(pull_request_refs(&self.list_remote()?))
    }

    /// The open pull requests' heads as the last [`Source::poll`] listed them (its one listing serves
    /// both: nothing more is asked of the remote).
    pub fn polled_pull_requests(&self) -> &[PullRequestHead] {
        &self.pull_requests
    }

    /// Fetches the head of a pull request into `refs/kok/pull/<number>` of the cache (no round trip
    /// when the cache already has the commit); returns its commit. Only read (parsed and planned),
    /// never run.
    pub fn fetch_pull_request(&mut self, head: &PullRequestHead) -> Result<Oid, SourceError> {
        let into = format!("refs/kok/pull/{}", head.number);
        if self.repo.find_commit(head.commit).is_ok() {
            // Already in the cache (planned before, against another base): no round trip.
            self.repo
                .reference(&into, head.commit, true, "kok: pull request head")
                .map_err(SourceError::git(format!(
                    "point {into} of the cache {} at {}",
                    self.cache_path.display(),
                    head.commit
                )))?;
            return Ok(head.commit);
        }
        self.fetches += 1;
        self.network_into(Some(head.reference.clone()), &into)?;
        self.repo.refname_to_id(&into).map_err(SourceError::git(format!(
            "read {into} in the cache {}",
            self.cache_path.display()
        )))
    }

    /// A [`crate::layout::TreeReader`] over `commit`'s tree.
    pub fn tree(&self, commit: Oid) -> Result<GitTree<'_>, SourceError> {
        GitTree::at_commit(&self.repo, commit)
    }

    /// Clusters added, changed and removed between `old` and `new` under `root`; see [`super::diff`].
    pub fn diff(&self, old: Option<Oid>, new: Oid, root: &str) -> Result<ChangeSet, SourceError> {
        super::diff::diff(&self.repo, old, new, root)
    }

    /// Fetches `remote_ref` (e.g. `refs/notes/kok`) into `local_ref` of the cache, replacing it, when
    /// the remote has it; returns where it points, or `None` when the remote lacks it.
    pub fn fetch_optional_ref(
        &mut self,
        remote_ref: &str,
        local_ref: &str,
    ) -> Result<Option<Oid>, SourceError> {
        let heads = self.list_remote()?;
        let Some((_, oid)) = heads.iter().find(|(name, _)| name == remote_ref) else {
            return Ok(None);
        };
        let oid = *oid;
        self.fetches += 1;
        self.network_into(Some(remote_ref.to_string()), local_ref)?;
        Ok(Some(oid))
    }

    fn list_remote(&mut self) -> Result<Vec<(String, Oid)>, SourceError> {
        self.listings += 1;
        match self.network(None)? {
            NetOutcome::Listed(heads) => Ok(heads),
            NetOutcome::Fetched => Ok(Vec::new()),
        }
    }

    fn fetch_ref(&mut self, name: &str) -> Result<Oid, SourceError> {
        let mut recreated = false;
        if Repository::open_bare(&self.cache_path).is_err() {
            warn!(cache = %self.cache_path.display(), "git cache missing or unreadable, re-creating it");
            self.recreate()?;
            recreated = true;
        }
        loop {
            self.fetches += 1;
            let result = self
                .network(Some(name.to_string()))
                .and_then(|_| self.fetched_commit());
            match result {
                Ok(commit) => return Ok(commit),
                Err(SourceError::Git { what, source }) if is_local_failure(&source) => {
                    let message = format!("{what}: {}", source.message());
                    if recreated {
                        return Err(SourceError::CacheCorrupt {
                            path: self.cache_path.clone(),
                            message,
                        });
                    }
                    warn!(cache = %self.cache_path.display(), %message, "git cache unusable, re-creating it");
                    self.recreate()?;
                    recreated = true;
                }
                Err(other) => return Err(other),
            }
        }
    }

    fn fetched_commit(&self) -> Result<Oid, SourceError> {
        let reference = self
            .repo
            .find_reference(SOURCE_REF)
            .map_err(SourceError::git(format!(
                "read {SOURCE_REF} in the cache {}",
                self.cache_path.display()
            )))?;
        let commit = reference.peel_to_commit().map_err(SourceError::git(format!(
            "read the fetched commit in the cache {}",
            self.cache_path.display()
        )))?;
        // Make sure the tree is readable too: a damaged pack shows here rather than later.
        commit.tree().map_err(SourceError::git(format!(
            "read the fetched tree in the cache {}",
            self.cache_path.display()
        )))?;
        Ok(commit.id())
    }

    fn recreate(&mut self) -> Result<(), SourceError> {
        let _ = std::fs::remove_dir_all(&self.cache_path);
        self.repo = init_bare(&self.cache_path)?;
        Ok(())
    }

    /// Runs a listing (`refname == None`) or a fetch of `refname` on a helper thread, waiting at most
    /// the configured timeout.
    fn network(&mut self, refname: Option<String>) -> Result<NetOutcome, SourceError> {
        self.network_into(refname, SOURCE_REF)
    }

    /// [`Source::network`], fetching into `into` instead of [`SOURCE_REF`].
    fn network_into(&mut self, refname: Option<String>, into: &str) -> Result<NetOutcome, SourceError> {
        let url = redact(&self.config.url);
        if let Some(handle) = &self.pending {
            if !handle.is_finished() {
                return Err(SourceError::Busy { url });
            }
            self.pending = None;
        }
        let what = match &refname {
            None => "list refs of".to_string(),
            Some(name) => format!("fetch {name} from"),
        };
        let timeout = self.config.timeout;
        let deadline = Instant::now() + timeout;
        let (tx, rx) = mpsc::channel();
        let job = NetJob {
            remote: self.remote.clone(),
            credentials: self.config.credentials.clone(),
            cache_path: self.cache_path.clone(),
            refname,
            into: into.to_string(),
            deadline,
        };
        let handle = std::thread::Builder::new()
            .name("kok-git".to_string())
            .spawn(move || {
                let _ = tx.send(job.run());
            })
            .map_err(|e| SourceError::Remote {
                what: what.clone(),
                url: url.clone(),
                message: e.to_string(),
            })?;
        match rx.recv_timeout(timeout) {
            Ok(result) => {
                let _ = handle.join();
                result.map_err(|failure| failure.into_error(&what, &url, timeout.as_secs().max(1)))
            }
            Err(_) => {
                self.pending = Some(handle);
                Err(SourceError::Timeout {
                    what,
                    url,
                    seconds: timeout.as_secs().max(1),
                })
            }
        }
    }
}

/// A network failure, with what the callbacks recorded.
struct NetFailure {
    error: git2::Error,
    log: AuthLog,
    timed_out: bool,
}

impl NetFailure {
    fn into_error(self: Box<Self>, what: &str, url: &str, seconds: u64) -> SourceError {
        let NetFailure {
            error,
            log,
            timed_out,
        } = *self;
        if let Some(e) = log.host_key {
            return e;
        }
        if let Some(e) = log.read_error {
            return e;
        }
        if timed_out {
            return SourceError::Timeout {
                what: what.to_string(),
                url: url.to_string(),
                seconds,
            };
        }
        let auth_failure = error.code() == git2::ErrorCode::Auth
            || (!log.tried.is_empty()
                && (error.class() == ErrorClass::Ssh
                    || error.message().contains("authentication")
                    || error.message().contains("credentials")));
        if auth_failure {
            return SourceError::AuthFailed {
                url: url.to_string(),
                tried: if log.tried.is_empty() {
                    "nothing".to_string()
                } else {
                    log.tried.join(", ")
                },
                message: crate::redact::scrub(error.message()),
            };
        }
        if is_local_failure(&error) {
            return SourceError::Git {
                what: format!("{what} {url} into the cache"),
                source: error,
            };
        }
        SourceError::Remote {
            what: what.to_string(),
            url: url.to_string(),
            message: crate::redact::scrub(error.message()),
        }
    }
}

/// Everything the network thread needs, owned.
struct NetJob {
    remote: RemoteUrl,
    credentials: super::Credentials,
    cache_path: PathBuf,
    refname: Option<String>,
    /// Local reference a fetch writes.
    into: String,
    deadline: Instant,
}

impl NetJob {
    fn run(self) -> Result<NetOutcome, Box<NetFailure>> {
        let log: SharedLog = Arc::new(Mutex::new(AuthLog::default()));
        let timed_out = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let result = self.run_inner(&log, &timed_out);
        result.map_err(|error| {
            Box::new(NetFailure {
                error,
                log: std::mem::take(&mut *log.lock().unwrap_or_else(|p| p.into_inner())),
                timed_out: timed_out.load(std::sync::atomic::Ordering::Relaxed),
            })
        })
    }

    fn callbacks(
        &self,
        log: &SharedLog,
        timed_out: &Arc<std::sync::atomic::AtomicBool>,
    ) -> RemoteCallbacks<'static> {
        let mut callbacks = RemoteCallbacks::new();
        auth::install(&mut callbacks, &self.remote, &self.credentials, log.clone());
        let deadline = self.deadline;
        let flag = timed_out.clone();
        callbacks.transfer_progress(move |_| {
            let alive = Instant::now() < deadline;
            if !alive {
                flag.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            alive
        });
        let flag = timed_out.clone();
        callbacks.sideband_progress(move |_| {
            let alive = Instant::now() < deadline;
            if !alive {
                flag.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            alive
        });
        callbacks
    }

    fn run_inner(
        &self,
        log: &SharedLog,
        timed_out: &Arc<std::sync::atomic::AtomicBool>,
    ) -> Result<NetOutcome, git2::Error> {
        match &self.refname {
            None => {
                // Listing needs no local repository: the cache is not even opened.
                let mut remote = git2::Remote::create_detached(self.remote.as_str())?;
                let connection =
                    remote.connect_auth(Direction::Fetch, Some(self.callbacks(log, timed_out)), None)?;
                let heads = connection
                    .list()?
                    .iter()
                    .map(|h| (h.name().to_string(), h.oid()))
                    .collect();
                Ok(NetOutcome::Listed(heads))
            }
            Some(name) => {
                let repo = Repository::open_bare(&self.cache_path)?;
                let mut remote = repo.remote_anonymous(self.remote.as_str())?;
                let mut options = FetchOptions::new();
                options.remote_callbacks(self.callbacks(log, timed_out));
                options.download_tags(AutotagOption::None);
                options.update_fetchhead(false);
                let refspec = format!("+{name}:{}", self.into);
                remote.fetch(&[refspec.as_str()], Some(&mut options), None)?;
                Ok(NetOutcome::Fetched)
            }
        }
    }
}

/// True for errors of the local store (as opposed to network, authentication or remote errors).
fn is_local_failure(error: &git2::Error) -> bool {
    matches!(
        error.class(),
        ErrorClass::Odb
            | ErrorClass::Object
            | ErrorClass::Reference
            | ErrorClass::Repository
            | ErrorClass::Zlib
            | ErrorClass::Indexer
            | ErrorClass::Tree
            | ErrorClass::Filesystem
            | ErrorClass::Config
    )
}

/// The head of an open pull request (GitLab: merge request).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullRequestHead {
    /// Its number on the forge.
    pub number: u64,
    /// The full ref name, e.g. `refs/pull/7/head`.
    pub reference: String,
    /// The commit the ref points at.
    pub commit: Oid,
}

/// The pull-request heads of a ref listing, by number.
fn pull_request_refs(heads: &[(String, Oid)]) -> Vec<PullRequestHead> {
    let mut out: Vec<PullRequestHead> = heads
        .iter()
        .filter_map(|(name, oid)| {
            let number = name
                .strip_prefix("refs/pull/")
                .or_else(|| name.strip_prefix("refs/merge-requests/"))?
                .strip_suffix("/head")?
                .parse()
                .ok()?;
            Some(PullRequestHead {
                number,
                reference: name.clone(),
                commit: *oid,
            })
        })
        .collect();
    out.sort_by_key(|h| h.number);
    out
}

/// The names the configured ref may stand for, in the order they are tried.
fn candidates(reference: &str) -> Vec<String> {
    if reference.starts_with("refs/") || reference == "HEAD" {
        vec![reference.to_string()]
    } else {
        vec![
            format!("refs/heads/{reference}"),
            format!("refs/tags/{reference}"),
        ]
    }
}

/// Finds the configured ref in a listing: (full name, commit it points at, peeled for tags).
fn resolve(reference: &str, heads: &[(String, Oid)]) -> Option<(String, Oid)> {
    for name in candidates(reference) {
        let peeled = format!("{name}^{{}}");
        if let Some((_, oid)) = heads.iter().find(|(n, _)| *n == peeled) {
            return Some((name, *oid));
        }
        if let Some((_, oid)) = heads.iter().find(|(n, _)| *n == name) {
            return Some((name, *oid));
        }
    }
    None
}

fn open_or_create(path: &Path) -> Result<Repository, SourceError> {
    if path.exists() {
        match Repository::open_bare(path) {
            Ok(repo) if repo.is_bare() => return Ok(repo),
            Ok(_) => warn!(cache = %path.display(), "git cache is not a bare repository, re-creating it"),
            Err(e) => {
                warn!(cache = %path.display(), error = %e.message(), "git cache unusable, re-creating it")
            }
        }
        std::fs::remove_dir_all(path).map_err(|e| SourceError::CacheInit {
            path: path.to_path_buf(),
            message: format!("could not remove the unusable cache: {e}"),
        })?;
    }
    init_bare(path)
}

fn init_bare(path: &Path) -> Result<Repository, SourceError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| SourceError::CacheInit {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    }
    Repository::init_bare(path).map_err(|e| SourceError::CacheInit {
        path: path.to_path_buf(),
        message: e.message().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oid(n: u8) -> Oid {
        Oid::from_bytes(&[n; 20]).unwrap()
    }

    #[test]
    fn pull_request_heads_are_read_from_github_and_gitlab_refs_only() {
        let listing = vec![
            ("refs/heads/main".to_string(), oid(1)),
            ("refs/pull/12/head".to_string(), oid(2)),
            ("refs/pull/12/merge".to_string(), oid(3)),
            ("refs/merge-requests/3/head".to_string(), oid(4)),
            ("refs/pull/x/head".to_string(), oid(5)),
        ];
        let heads = pull_request_refs(&listing);
        let got: Vec<(u64, &str, Oid)> = heads
            .iter()
            .map(|h| (h.number, h.reference.as_str(), h.commit))
            .collect();
        assert_eq!(
            got,
            [
                (3, "refs/merge-requests/3/head", oid(4)),
                (12, "refs/pull/12/head", oid(2))
            ]
        );
    }

    #[test]
    fn branch_names_resolve_to_heads_before_tags() {
        let heads = vec![
            ("refs/tags/main".to_string(), oid(2)),
            ("refs/heads/main".to_string(), oid(1)),
        ];
        assert_eq!(
            resolve("main", &heads),
            Some(("refs/heads/main".to_string(), oid(1)))
        );
    }

    #[test]
    fn annotated_tags_resolve_to_the_peeled_commit() {
        let heads = vec![
            ("refs/tags/v1".to_string(), oid(3)),
            ("refs/tags/v1^{}".to_string(), oid(4)),
        ];
        assert_eq!(resolve("v1", &heads), Some(("refs/tags/v1".to_string(), oid(4))));
        assert_eq!(
            resolve("refs/tags/v1", &heads),
            Some(("refs/tags/v1".to_string(), oid(4)))
        );
        assert_eq!(resolve("v2", &heads), None);
    }
}
