//! The default sink: commit statuses as git notes under `refs/notes/kok`, readable with
//! `git log --notes=kok`, pushed to the remote when it accepts pushes.
//!
//! One note per commit, one line per context, in the order contexts first appeared:
//!
//! ```text
//! kok/sync: success 2026-11-21T23:59:00Z - materialized 3 clusters
//! kok/prod-bj/add-node7: success 2026-11-22T00:03:12Z https://logs.example/kok-system/kok-job succeeded in 3m12s
//! ```
//!
//! Each line is `<context>: <state> <time> <url or -> <description>`. A finished run's record (its
//! ansible summary and first failure, as JSON) follows its line on a continuation line:
//!
//! ```text
//! kok/prod-bj/install: success 2026-11-22T00:03:12Z - succeeded in 3m12s: 3 hosts, 41 changed
//!   run {"summary":{"hostCount":3,"hosts":{...},"total":{...}}}
//! ```
//!
//! Updating a context rewrites its line (and its continuation) and keeps the others (lines kok does not
//! recognise are kept as they are); writing a line that is already there (same state, url, description
//! and record) changes nothing.
//!
//! Writes are batched: statuses that arrive while a write is in progress wait for it, then go into the
//! next notes commit together (each note rewritten once per batch, one commit and one push per batch),
//! so delivering N statuses costs far fewer than N commits. After a batch, the next one waits
//! [`GATHER_PER_WRITE`] times as long as the last took to write, so a stream of statuses on a commit
//! with thousands of contexts (a note of megabytes) spends at most a quarter of its time rewriting the
//! note, and the cores it shares with a fleet's pass go to the pass. A batch no status has joined for
//! [`QUIET`] is written at once: the stream has ended, and its last statuses do not wait out a
//! gathering meant for a stream. A delivery returns once its batch is written.
//!
//! Pushing: after a write, `refs/notes/kok:refs/notes/kok` is pushed (never forced) to the configured
//! remote. Before the first push, and again when a push is refused, the remote's notes are fetched and
//! joined: a local ref that is missing or behind moves to the remote's; when both moved, the local
//! entries are written again on top of the remote's notes (the local line of a context wins). So a
//! re-created cache (an emptyDir after a restart) continues the remote's notes instead of forking
//! them. The local note is the record: a push that still fails is logged once per distinct failure,
//! does not fail the delivery, and is tried again after the next write. A remote on this machine (a
//! plain path or `file://`, possibly a work tree) does not receive a push: the objects it lacks are
//! copied into it one by one and its ref moved, with the same fast-forward rule.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use git2::{Oid, PushOptions, RemoteCallbacks, Repository, Signature};
use tokio::sync::{oneshot, Mutex};

use super::sink::{DeliveryError, Sink};
use crate::api::{CommitStatus, Recorded, RunRecord, StatusState};

/// The notes reference kok writes.
pub const NOTES_REF: &str = "refs/notes/kok";
/// Refspec used to push the notes.
pub const NOTES_REFSPEC: &str = "refs/notes/kok:refs/notes/kok";
/// Sink name in logs and metrics.
pub const NOTES_SINK: &str = "git-notes";

/// One context's line of a commit's note.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoteEntry {
    /// Status context, e.g. `kok/prod-bj/add-node7`.
    pub context: String,
    /// State of the status.
    pub state: StatusState,
    /// When the status was written (RFC 3339, UTC, seconds).
    pub time: String,
    /// Link of the status, if any.
    pub target_url: Option<String>,
    /// Description of the status.
    pub description: String,
    /// The finished run's record, from the continuation line.
    pub run: Option<RunRecord>,
}

impl NoteEntry {
    /// The entry as a status read back from the record.
    pub fn recorded(self) -> Recorded {
        Recorded {
            from: NOTES_SINK.to_string(),
            time: self.time,
            status: CommitStatus {
                context: self.context,
                state: self.state,
                description: self.description,
                target_url: self.target_url,
                run: self.run,
            },
        }
    }
}

/// Start of the continuation line holding an entry's run record.
pub const RUN_LINE_PREFIX: &str = "  run ";

/// A commit and the statuses recorded on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitNotes {
    /// Full sha of the commit.
    pub commit: String,
    /// Its entries, in note order.
    pub entries: Vec<NoteEntry>,
}

/// Errors reading or writing notes.
#[derive(Debug, thiserror::Error)]
pub enum NotesError {
    /// The repository could not be opened.
    #[error("opening the git repository {path} to read or write notes: {source}")]
    OpenRepository {
        /// Repository path.
        path: PathBuf,
        /// The git error.
        #[source]
        source: git2::Error,
    },
    /// The commit is not a sha.
    #[error("{commit:?} is not a commit sha")]
    BadCommit {
        /// What was given.
        commit: String,
    },
    /// Reading notes failed.
    #[error("reading {NOTES_REF} in {path}: {source}")]
    Read {
        /// Repository path.
        path: PathBuf,
        /// The git error.
        #[source]
        source: git2::Error,
    },
    /// Writing the note failed.
    #[error("writing the {NOTES_REF} note of {commit} in {path}: {source}")]
    Write {
        /// Repository path.
        path: PathBuf,
        /// Commit sha.
        commit: String,
        /// The git error.
        #[source]
        source: git2::Error,
    },
    /// The blocking task did not finish.
    #[error("the git notes task stopped before finishing: {0}")]
    Join(String),
    /// The batch this status was written in failed (the message is the batch's error).
    #[error("{0}")]
    Batch(String),
}

/// Sets up credentials (and anything else) on the callbacks of a notes push.
pub type CallbacksHook = Arc<dyn Fn(&mut RemoteCallbacks<'_>) + Send + Sync>;

/// Where notes are pushed.
#[derive(Clone)]
pub struct PushTarget {
    /// A remote name of the repository (`origin`) or a URL/path.
    pub remote: String,
    /// Installs credential callbacks for the push, if the remote needs them.
    pub callbacks: Option<CallbacksHook>,
}

impl std::fmt::Debug for PushTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushTarget")
            .field("remote", &self.remote)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct PushState {
    /// Notes commit last pushed successfully.
    pushed: Option<Oid>,
    /// Last push failure logged, so each distinct failure is logged once.
    last_failure: Option<String>,
    /// The remote's notes were joined into the local ones since the last refused push.
    joined: bool,
    /// When the last batch was written, and how long it took.
    last_batch: Option<(tokio::time::Instant, std::time::Duration)>,
}

/// How many times as long as the last batch took to write the next one gathers statuses.
pub const GATHER_PER_WRITE: u32 = 3;

/// A gathering batch that no status joined for this long is written without waiting longer.
pub const QUIET: std::time::Duration = std::time::Duration::from_millis(250);

impl PushState {
    /// When the next batch may be written: a batch rewrites whole notes, so under a steady stream of
    /// statuses writing takes at most a quarter of the time and the rest gathers the next batch.
    fn next_batch_at(&self) -> Option<tokio::time::Instant> {
        self.last_batch
            .map(|(ended, took)| ended + took * GATHER_PER_WRITE)
    }
}

/// The error of a status whose batch was dropped before it was written (kok is stopping).
fn abandoned() -> NotesError {
    NotesError::Batch("the notes batch holding this status was abandoned".into())
}

/// A status waiting for the next batch, and where its result goes.
#[derive(Debug)]
struct Queued {
    commit: Oid,
    status: CommitStatus,
    done: oneshot::Sender<Result<bool, NotesError>>,
}

/// Writes statuses as git notes in a repository (the bare cache the source maintains).
#[derive(Debug)]
pub struct NotesSink {
    repo: PathBuf,
    push: Option<PushTarget>,
    /// Serializes writers of the notes ref and holds the push state.
    state: Arc<Mutex<PushState>>,
    /// Statuses waiting for the next batch.
    queue: Arc<std::sync::Mutex<Vec<Queued>>>,
}

impl NotesSink {
    /// A sink writing notes in the repository at `repo`, without pushing.
    pub fn new(repo: impl Into<PathBuf>) -> Self {
        NotesSink {
            repo: repo.into(),
            push: None,
            state: Arc::default(),
            queue: Arc::default(),
        }
    }

    /// Also push the notes to `target` after each write.
    pub fn with_push(mut self, target: PushTarget) -> Self {
        self.push = Some(target);
        self
    }

    /// Writes `status` into the note of `commit` and pushes; returns whether the note changed. The
    /// status joins the next batch: statuses queued while another batch is written go out together.
    pub async fn write(&self, commit: &str, status: &CommitStatus) -> Result<bool, NotesError> {
        let oid = parse_commit(commit)?;
        let (done, mut result) = oneshot::channel();
        self.lock_queue().push(Queued {
            commit: oid,
            status: status.clone(),
            done,
        });
        let mut state = self.state.lock().await;
        match result.try_recv() {
            // A batch written while this call waited for the lock took the status.
            Ok(written) => return written,
            Err(oneshot::error::TryRecvError::Closed) => return Err(abandoned()),
            Err(oneshot::error::TryRecvError::Empty) => {}
        }
        if let Some(at) = state.next_batch_at() {
            self.gather_until(at).await;
        }
        let (entries, senders): (Vec<(Oid, CommitStatus)>, Vec<_>) = std::mem::take(&mut *self.lock_queue())
            .into_iter()
            .map(|q| ((q.commit, q.status), q.done))
            .unzip();
        let started = tokio::time::Instant::now();
        let written = self.write_batch(&mut state, entries).await;
        let ended = tokio::time::Instant::now();
        state.last_batch = Some((ended, ended - started));
        drop(state);
        match written {
            Ok(changed) => {
                for (done, changed) in senders.into_iter().zip(changed) {
                    let _ = done.send(Ok(changed));
                }
            }
            Err(err) => {
                let message = err.to_string();
                for done in senders {
                    let _ = done.send(Err(NotesError::Batch(message.clone())));
                }
            }
        }
        result.await.unwrap_or_else(|_| Err(abandoned()))
    }

    /// Lets statuses join the next batch until `until`, or until none has joined for [`QUIET`].
    async fn gather_until(&self, until: tokio::time::Instant) {
        let mut queued = self.lock_queue().len();
        loop {
            let now = tokio::time::Instant::now();
            if now >= until {
                return;
            }
            tokio::time::sleep_until(until.min(now + QUIET)).await;
            let now_queued = self.lock_queue().len();
            if now_queued == queued {
                return;
            }
            queued = now_queued;
        }
    }

    fn lock_queue(&self) -> std::sync::MutexGuard<'_, Vec<Queued>> {
        self.queue.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Writes `entries` in one notes commit and pushes it; returns, per entry, whether it changed its note.
    async fn write_batch(
        &self,
        state: &mut PushState,
        entries: Vec<(Oid, CommitStatus)>,
    ) -> Result<Vec<bool>, NotesError> {
        let repo = self.repo.clone();
        let push = self.push.clone();
        let pushed = state.pushed;
        let joined = state.joined;
        let (changed, push_result) = tokio::task::spawn_blocking(move || {
            let now = jiff::Timestamp::now();
            let Some(target) = &push else {
                return Ok::<_, NotesError>((write_notes(&repo, &entries, now)?, Ok(None)));
            };
            // Join the remote's notes once (the cache may be new), and again when a push is refused.
            let mut join_error = None;
            if !joined {
                join_error = join_remote(&repo, target).err();
            }
            let changed = write_notes(&repo, &entries, now)?;
            let mut pushed_now = push_notes(&repo, target, pushed);
            if pushed_now.is_err() && joined {
                if let Err(e) = join_remote(&repo, target) {
                    join_error = Some(e);
                }
                pushed_now = push_notes(&repo, target, pushed);
            }
            let result = match (pushed_now, join_error) {
                (Ok(done), _) => Ok(done),
                (Err(push), Some(join)) => Err(format!("{push} (reading the remote's notes: {join})")),
                (Err(push), None) => Err(push),
            };
            Ok((changed, result))
        })
        .await
        .map_err(|e| NotesError::Join(e.to_string()))??;
        match push_result {
            Ok(Some(oid)) => {
                state.pushed = Some(oid);
                state.joined = true;
                if state.last_failure.take().is_some() {
                    tracing::info!(remote = %self.remote_name(), "pushing {NOTES_REF} works again");
                }
            }
            Ok(None) => {}
            Err(message) => {
                // The remote's answer may echo the credentials sent with the push.
                let message = crate::redact::scrub(&message);
                if state.last_failure.as_deref() != Some(message.as_str()) {
                    tracing::warn!(
                        remote = %self.remote_name(),
                        error = %message,
                        "could not push {NOTES_REF}; statuses stay in the local notes and the push is retried after the next write"
                    );
                    state.last_failure = Some(message);
                }
            }
        }
        Ok(changed)
    }

    /// The entries of the note on `commit`, after joining the remote's notes once (a new cache, a
    /// rebuilt meta-cluster: the remote holds what earlier runs of kok recorded). A remote that cannot
    /// be read is logged and the local notes answer.
    pub async fn read_joined(&self, commit: &str) -> Result<Vec<NoteEntry>, NotesError> {
        self.read_after_join(commit, read_notes).await
    }

    /// The fingerprints of the entries of the note on `commit` ([`status_fingerprint`]), after joining
    /// the remote's notes once as [`NotesSink::read_joined`] does. The note is read as a stream and only
    /// its fingerprints are kept: 8 bytes a context instead of the entries.
    pub async fn fingerprints(&self, commit: &str) -> Result<HashSet<u64>, NotesError> {
        self.read_after_join(commit, note_fingerprints).await
    }

    /// `read` of the note on `commit`, on a blocking thread, once the remote's notes are joined.
    async fn read_after_join<T: Send + 'static>(
        &self,
        commit: &str,
        read: fn(&Path, &str) -> Result<T, NotesError>,
    ) -> Result<T, NotesError> {
        self.join_once().await?;
        let (repo, commit) = (self.repo.clone(), commit.to_string());
        tokio::task::spawn_blocking(move || read(&repo, &commit))
            .await
            .map_err(|e| NotesError::Join(e.to_string()))?
    }

    /// Joins the remote's notes into the local ones, the first time only.
    async fn join_once(&self) -> Result<(), NotesError> {
        let repo = self.repo.clone();
        if let Some(target) = &self.push {
            let mut state = self.state.lock().await;
            if !state.joined {
                let (path, target) = (repo.clone(), target.clone());
                let joined = tokio::task::spawn_blocking(move || join_remote(&path, &target))
                    .await
                    .map_err(|e| NotesError::Join(e.to_string()))?;
                match joined {
                    Ok(()) => state.joined = true,
                    Err(e) => tracing::warn!(
                        remote = %self.remote_name(),
                        error = %crate::redact::scrub(&e),
                        "could not read the remote's refs/notes/kok; the local notes answer for what ran"
                    ),
                }
            }
        }
        Ok(())
    }

    fn remote_name(&self) -> &str {
        self.push.as_ref().map(|p| p.remote.as_str()).unwrap_or_default()
    }
}

impl Sink for NotesSink {
    fn name(&self) -> &str {
        NOTES_SINK
    }

    /// Statuses arriving together are written in one batch, so every delivery may be in flight.
    fn max_in_flight(&self) -> Option<usize> {
        None
    }

    fn keeps_record(&self) -> bool {
        true
    }

    fn read_back<'a>(&'a self, commit: &'a str) -> BoxFuture<'a, Result<Vec<Recorded>, String>> {
        async move {
            let entries = self.read_joined(commit).await.map_err(|e| e.to_string())?;
            Ok(entries.into_iter().map(NoteEntry::recorded).collect())
        }
        .boxed()
    }

    fn fingerprint(&self, status: &CommitStatus) -> Option<u64> {
        Some(status_fingerprint(status))
    }

    fn holding<'a>(&'a self, commit: &'a str) -> BoxFuture<'a, Result<Option<HashSet<u64>>, String>> {
        async move {
            let held = self.fingerprints(commit).await.map_err(|e| e.to_string())?;
            Ok(Some(held))
        }
        .boxed()
    }

    fn deliver<'a>(
        &'a self,
        commit: &'a str,
        status: &'a CommitStatus,
    ) -> BoxFuture<'a, Result<(), DeliveryError>> {
        async move {
            self.write(commit, status)
                .await
                .map(|_| ())
                .map_err(|err| match err {
                    NotesError::BadCommit { .. } => DeliveryError::Permanent {
                        sink: NOTES_SINK.to_string(),
                        context: status.context.clone(),
                        commit: commit.to_string(),
                        reason: err.to_string(),
                    },
                    _ => DeliveryError::Retryable {
                        sink: NOTES_SINK.to_string(),
                        context: status.context.clone(),
                        commit: commit.to_string(),
                        reason: err.to_string(),
                        retry_after: None,
                    },
                })
        }
        .boxed()
    }
}

/// The entries of the note on `commit` (empty when it has none).
pub fn read_notes(repo: &Path, commit: &str) -> Result<Vec<NoteEntry>, NotesError> {
    let repository = open(repo)?;
    let oid = parse_commit(commit)?;
    let found = repository.find_note(Some(NOTES_REF), oid);
    match found {
        Ok(note) => Ok(parse_note(note.message().unwrap_or_default())),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(Vec::new()),
        Err(source) => Err(NotesError::Read {
            path: repo.to_path_buf(),
            source,
        }),
    }
}

/// The fingerprints of the entries of the note on `commit` (empty when it has none), read as a stream.
pub fn note_fingerprints(repo: &Path, commit: &str) -> Result<HashSet<u64>, NotesError> {
    let repository = open(repo)?;
    let oid = parse_commit(commit)?;
    let read_err = |source| NotesError::Read {
        path: repo.to_path_buf(),
        source,
    };
    let mut held = HashSet::new();
    let mut take = |text: &str| {
        held.extend(
            pieces(text)
                .filter_map(|p| p.entry())
                .map(|e| entry_fingerprint(&e)),
        );
        Ok(())
    };
    match note_place(&repository, oid).map_err(read_err)? {
        NotePlace::Top(None) => {}
        NotePlace::Top(Some(blob)) => read_note_parts(&repository, blob, &mut take).map_err(read_err)?,
        NotePlace::FannedOut => {
            let text = note_text(&repository, oid).map_err(read_err)?;
            let _ = take(&text);
        }
    }
    Ok(held)
}

/// What tells two lines of a context apart, as [`edit_note`] compares them: the context, state, url,
/// description and record, not the time.
fn entry_fingerprint(entry: &NoteEntry) -> u64 {
    use std::hash::{Hash, Hasher};
    // SipHash with fixed keys: the same entry gives the same fingerprint in every process.
    #[allow(deprecated)]
    let mut hasher = std::hash::SipHasher::new();
    entry.context.hash(&mut hasher);
    state_word(entry.state).hash(&mut hasher);
    entry.target_url.hash(&mut hasher);
    entry.description.hash(&mut hasher);
    entry
        .run
        .as_ref()
        .and_then(|r| serde_json::to_string(r).ok())
        .hash(&mut hasher);
    hasher.finish()
}

/// The fingerprint of the line `status` is written as, as it reads back from the note (see
/// [`note_fingerprints`]).
pub fn status_fingerprint(status: &CommitStatus) -> u64 {
    let entry = entry_of(status, jiff::Timestamp::UNIX_EPOCH);
    let line = render_line(&entry);
    let read = pieces(&line).next().and_then(|p| p.entry());
    entry_fingerprint(read.as_ref().unwrap_or(&entry))
}

/// Every commit with a kok note and its entries, sorted by commit sha.
pub fn read_all_notes(repo: &Path) -> Result<Vec<CommitNotes>, NotesError> {
    let repository = open(repo)?;
    let read_err = |source| NotesError::Read {
        path: repo.to_path_buf(),
        source,
    };
    let notes = match repository.notes(Some(NOTES_REF)) {
        Ok(n) => n,
        Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(read_err(source)),
    };
    let mut out = Vec::new();
    for item in notes {
        let (_, annotated) = item.map_err(read_err)?;
        let note = repository
            .find_note(Some(NOTES_REF), annotated)
            .map_err(read_err)?;
        out.push(CommitNotes {
            commit: annotated.to_string(),
            entries: parse_note(note.message().unwrap_or_default()),
        });
    }
    out.sort_by(|a, b| a.commit.cmp(&b.commit));
    Ok(out)
}

/// Parses a note's text; lines that are not kok entries are skipped.
pub fn parse_note(text: &str) -> Vec<NoteEntry> {
    pieces(text).filter_map(|piece| piece.entry()).collect()
}

/// Renders one entry as its note line.
pub fn render_line(entry: &NoteEntry) -> String {
    let url = entry
        .target_url
        .as_deref()
        .filter(|u| !u.is_empty())
        .unwrap_or("-");
    let description = one_line(&entry.description);
    let line = format!(
        "{}: {} {} {} {}",
        entry.context,
        state_word(entry.state),
        entry.time,
        one_line(url),
        description
    );
    let mut line = line.trim_end().to_string();
    if let Some(json) = entry.run.as_ref().and_then(|r| serde_json::to_string(r).ok()) {
        line.push('\n');
        line.push_str(RUN_LINE_PREFIX);
        line.push_str(&json);
    }
    line
}

fn parse_line(line: &str) -> Option<NoteEntry> {
    let fields = line_fields(line)?;
    Some(NoteEntry {
        context: fields.context.to_string(),
        state: fields.state,
        time: fields.time.to_string(),
        target_url: (fields.url != "-").then(|| fields.url.to_string()),
        description: fields.description.to_string(),
        run: None,
    })
}

/// The fields of an entry line, borrowed from it.
struct LineFields<'l> {
    context: &'l str,
    state: StatusState,
    time: &'l str,
    url: &'l str,
    description: &'l str,
}

/// The fields of an entry line; `None` for any other line.
fn line_fields(line: &str) -> Option<LineFields<'_>> {
    let (context, rest) = line.split_once(": ")?;
    if !context.starts_with(super::status::CONTEXT_PREFIX) || context.contains(' ') {
        return None;
    }
    let mut parts = rest.splitn(4, ' ');
    let state = parse_state(parts.next()?)?;
    let time = parts.next()?;
    let url = parts.next()?;
    let description = parts.next().unwrap_or_default();
    Some(LineFields {
        context,
        state,
        time,
        url,
        description,
    })
}

fn state_word(state: StatusState) -> &'static str {
    match state {
        StatusState::Pending => "pending",
        StatusState::Running => "running",
        StatusState::Success => "success",
        StatusState::Failure => "failure",
        StatusState::Error => "error",
    }
}

fn parse_state(word: &str) -> Option<StatusState> {
    Some(match word {
        "pending" => StatusState::Pending,
        "running" => StatusState::Running,
        "success" => StatusState::Success,
        "failure" => StatusState::Failure,
        "error" => StatusState::Error,
        _ => return None,
    })
}

/// Newlines and tabs become spaces so an entry stays on its line; a URL may not hold spaces.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

fn open(repo: &Path) -> Result<Repository, NotesError> {
    Repository::open(repo).map_err(|source| NotesError::OpenRepository {
        path: repo.to_path_buf(),
        source,
    })
}

fn parse_commit(commit: &str) -> Result<Oid, NotesError> {
    Oid::from_str(commit).map_err(|_| NotesError::BadCommit {
        commit: commit.to_string(),
    })
}

/// The note entry of `status` written at `now`.
fn entry_of(status: &CommitStatus, now: jiff::Timestamp) -> NoteEntry {
    NoteEntry {
        context: status.context.clone(),
        state: status.state,
        time: now.round(jiff::Unit::Second).unwrap_or(now).to_string(),
        target_url: status
            .target_url
            .clone()
            .map(|u| one_line(&u).replace(' ', "%20")),
        description: one_line(&status.description).trim_end().to_string(),
        run: status.run.clone(),
    }
}

/// Sets the line of each status in the note of its commit, in one notes commit; returns, per status,
/// whether it changed its note.
fn write_notes(
    repo: &Path,
    entries: &[(Oid, CommitStatus)],
    now: jiff::Timestamp,
) -> Result<Vec<bool>, NotesError> {
    let repository = open(repo)?;
    let write_err = |commit: Oid| {
        let path = repo.to_path_buf();
        move |source| NotesError::Write {
            path,
            commit: commit.to_string(),
            source,
        }
    };
    let mut changed = vec![false; entries.len()];
    // Each commit's note is read once with every entry of the batch applied, and written once.
    let mut commits: Vec<(Oid, Vec<usize>)> = Vec::new();
    for (index, (commit, _)) in entries.iter().enumerate() {
        match commits.iter_mut().find(|(c, _)| c == commit) {
            Some((_, indexes)) => indexes.push(index),
            None => commits.push((*commit, vec![index])),
        }
    }
    let before = repository.refname_to_id(NOTES_REF).ok();
    let mut written: Vec<Oid> = Vec::new();
    for (commit, indexes) in commits {
        let new_entries: Vec<NoteEntry> = indexes.iter().map(|&i| entry_of(&entries[i].1, now)).collect();
        let signature = Signature::now("kok", "kok@localhost").map_err(write_err(commit))?;
        let set = rewrite_note(&repository, &signature, commit, &new_entries).map_err(write_err(commit))?;
        if set.contains(&true) {
            written.push(commit);
        }
        for (&index, set) in indexes.iter().zip(set) {
            changed[index] = set;
        }
    }
    if let [first, _, ..] = written[..] {
        // Several notes changed: their commits become one.
        let signature = Signature::now("kok", "kok@localhost").map_err(write_err(first))?;
        squash_notes(&repository, before, &signature, entries.len()).map_err(write_err(first))?;
    }
    Ok(changed)
}

/// Replaces the notes commits written since `before` by one commit with the same tree.
fn squash_notes(
    repository: &Repository,
    before: Option<Oid>,
    signature: &Signature<'_>,
    statuses: usize,
) -> Result<(), git2::Error> {
    let last = repository.find_commit(repository.refname_to_id(NOTES_REF)?)?;
    let tree = last.tree()?;
    let parent = before.map(|oid| repository.find_commit(oid)).transpose()?;
    let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
    let message = format!("kok: {statuses} commit statuses\n");
    let squashed = repository.commit(None, signature, signature, &message, &tree, &parents)?;
    repository.reference(NOTES_REF, squashed, true, "kok: notes batch")?;
    Ok(())
}

/// The note of `oid` under [`NOTES_REF`] ("" when there is none).
fn note_text(repository: &Repository, oid: Oid) -> Result<String, git2::Error> {
    match repository.find_note(Some(NOTES_REF), oid) {
        Ok(note) => Ok(note.message().unwrap_or_default().to_string()),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(String::new()),
        Err(e) => Err(e),
    }
}

/// Where the note of a commit is in the notes tree.
enum NotePlace {
    /// At the top of the tree, named by the commit (how kok writes notes), or not there yet.
    Top(Option<Oid>),
    /// The tree fans notes out into subtrees (as git does for many notes): libgit2 places the note.
    FannedOut,
}

fn note_place(repository: &Repository, annotated: Oid) -> Result<NotePlace, git2::Error> {
    let tree = match repository.find_reference(NOTES_REF) {
        Ok(r) => r.peel_to_tree()?,
        Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(NotePlace::Top(None)),
        Err(e) => return Err(e),
    };
    if let Some(entry) = tree.get_name(&annotated.to_string()) {
        return Ok(NotePlace::Top(Some(entry.id())));
    }
    let fanned_out = tree.iter().any(|e| e.kind() == Some(git2::ObjectType::Tree));
    Ok(if fanned_out {
        NotePlace::FannedOut
    } else {
        NotePlace::Top(None)
    })
}

/// Applies `batch` to the note of `annotated` and commits it on the notes ref when anything changed;
/// returns, per entry, whether it changed the note.
///
/// The note's blob is read as a stream, a part at a time, and the edited text goes to the object
/// database as a stream too, so a note of ten thousand contexts is never held whole while it is
/// rewritten (libgit2's note calls hold its text three times).
fn rewrite_note(
    repository: &Repository,
    signature: &Signature<'_>,
    annotated: Oid,
    batch: &[NoteEntry],
) -> Result<Vec<bool>, git2::Error> {
    let blob = match note_place(repository, annotated)? {
        NotePlace::Top(blob) => blob,
        NotePlace::FannedOut => {
            let text = note_text(repository, annotated)?;
            let (updated, set) = edit_note(&text, batch);
            if let Some(updated) = updated {
                repository.note(signature, signature, Some(NOTES_REF), annotated, &updated, true)?;
            }
            return Ok(set);
        }
    };
    // The note as a stream of parts, read once for each pass over it.
    let parts = |f: &mut dyn FnMut(&str) -> std::io::Result<()>| match blob {
        Some(id) => read_note_parts(repository, id, f),
        None => f("").map_err(|e| git2::Error::from_str(&e.to_string())),
    };
    let mut scan = Scan::new(batch);
    parts(&mut |part| {
        scan.read(part);
        Ok(())
    })?;
    let (edit, set) = scan.finish();
    let Some(edit) = edit else { return Ok(set) };
    // The object database takes a blob as a stream once it knows its size, which the scan counted:
    // the note is read twice, not three times.
    let write_err =
        |e: std::io::Error| git2::Error::from_str(&format!("writing the note of {annotated}: {e}"));
    let odb = repository.odb()?;
    let mut writer = odb.writer(edit.size, git2::ObjectType::Blob)?;
    {
        let mut buffered = std::io::BufWriter::new(&mut writer);
        let mut placed = edit.unplaced();
        parts(&mut |part| edit.write_part(part, &mut placed, &mut buffered))?;
        edit.write_appended(&mut buffered).map_err(write_err)?;
        std::io::Write::flush(&mut buffered).map_err(write_err)?;
    }
    let written = writer.finalize()?;
    let parent = match repository.find_reference(NOTES_REF) {
        Ok(r) => Some(r.peel_to_commit()?),
        Err(e) if e.code() == git2::ErrorCode::NotFound => None,
        Err(e) => return Err(e),
    };
    let base = parent.as_ref().map(|c| c.tree()).transpose()?;
    let mut tree = repository.treebuilder(base.as_ref())?;
    tree.insert(annotated.to_string(), written, 0o100644)?;
    let tree = repository.find_tree(tree.write()?)?;
    let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
    let message = format!("kok: commit statuses of {annotated}\n");
    repository.commit(Some(NOTES_REF), signature, signature, &message, &tree, &parents)?;
    Ok(set)
}

/// One piece of a note: an entry line with its record's continuation line, or a foreign line.
struct Piece<'t> {
    line: &'t str,
    run: Option<&'t str>,
    /// The context, for an entry line.
    context: Option<&'t str>,
}

impl Piece<'_> {
    fn entry(&self) -> Option<NoteEntry> {
        let mut entry = parse_line(self.line)?;
        entry.run = self
            .run
            .and_then(|l| l.strip_prefix(RUN_LINE_PREFIX))
            .and_then(|json| serde_json::from_str(json).ok());
        Some(entry)
    }

    /// Bytes [`Piece::write_to`] writes.
    fn written_len(&self) -> usize {
        self.line.len() + 1 + self.run.map_or(0, |run| run.len() + 1)
    }

    fn write_to(&self, out: &mut (impl std::io::Write + ?Sized)) -> std::io::Result<()> {
        writeln!(out, "{}", self.line)?;
        if let Some(run) = self.run {
            writeln!(out, "{run}")?;
        }
        Ok(())
    }
}

/// The pieces of a note's text, in order, borrowed from it.
fn pieces(text: &str) -> impl Iterator<Item = Piece<'_>> {
    let mut lines = text.lines().peekable();
    std::iter::from_fn(move || {
        let line = lines.next()?;
        let context = entry_context(line);
        let run = match context {
            Some(_) => lines.next_if(|next| next.starts_with(RUN_LINE_PREFIX)),
            None => None,
        };
        Some(Piece { line, run, context })
    })
}

/// The context of an entry line; `None` for any other line.
fn entry_context(line: &str) -> Option<&str> {
    line_fields(line).map(|fields| fields.context)
}

/// Applies a batch of entries (in order) to a note: each replaces its context's first line, later lines
/// of that context are dropped, and a new context is appended. An entry equal to its context's line
/// (state, url, description and record; not the time) changes nothing. Returns the new text, `None`
/// when nothing changed, and per entry whether it changed the note. The note is read twice and never
/// held as parsed lines, so a note of ten thousand contexts costs its text and the batch.
fn edit_note(text: &str, batch: &[NoteEntry]) -> (Option<String>, Vec<bool>) {
    let mut scan = Scan::new(batch);
    scan.read(text);
    let (edit, set) = scan.finish();
    let Some(edit) = edit else { return (None, set) };
    let mut out = Vec::with_capacity(edit.size);
    let mut placed = edit.unplaced();
    // Writing to memory does not fail, and the text and lines are UTF-8.
    let _ = edit
        .write_part(text, &mut placed, &mut out)
        .and_then(|()| edit.write_appended(&mut out));
    debug_assert_eq!(out.len(), edit.size, "the scan's size of the edited note");
    let out = String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    (Some(out), set)
}

/// The first read of a note for a batch: per context of the batch, its line as the note has it (the
/// first one). The note may come a part at a time, each part whole pieces.
struct Scan<'b> {
    batch: &'b [NoteEntry],
    slots: HashMap<&'b str, usize>,
    current: Vec<Option<NoteEntry>>,
    found: Vec<bool>,
    /// Bytes the note's pieces take as [`NoteEdit::write_part`] writes them unchanged: all of them,
    /// and per context of the batch its own.
    written: usize,
    slot_bytes: Vec<usize>,
}

impl<'b> Scan<'b> {
    fn new(batch: &'b [NoteEntry]) -> Scan<'b> {
        let mut slots: HashMap<&str, usize> = HashMap::new();
        let mut current: Vec<Option<NoteEntry>> = Vec::new();
        for entry in batch {
            slots.entry(entry.context.as_str()).or_insert_with(|| {
                current.push(None);
                current.len() - 1
            });
        }
        let found = vec![false; current.len()];
        let slot_bytes = vec![0; current.len()];
        Scan {
            batch,
            slots,
            current,
            found,
            written: 0,
            slot_bytes,
        }
    }

    fn read(&mut self, part: &str) {
        for piece in pieces(part) {
            let len = piece.written_len();
            self.written += len;
            let Some(&slot) = piece.context.and_then(|c| self.slots.get(c)) else {
                continue;
            };
            self.slot_bytes[slot] += len;
            if !self.found[slot] {
                self.found[slot] = true;
                self.current[slot] = piece.entry();
            }
        }
    }

    /// What the batch changes, `None` when nothing, and per entry whether it changed the note.
    fn finish(self) -> (Option<NoteEdit<'b>>, Vec<bool>) {
        let Scan {
            batch,
            slots,
            mut current,
            found,
            written,
            slot_bytes,
        } = self;
        // The batch in order: the line each context ends with, in the order contexts first changed.
        let mut lines: Vec<Option<String>> = vec![None; current.len()];
        let mut appended: Vec<usize> = Vec::new();
        let mut set = Vec::with_capacity(batch.len());
        for entry in batch {
            let slot = slots[entry.context.as_str()];
            let same = current[slot].as_ref().is_some_and(|old| {
                old.state == entry.state
                    && old.target_url == entry.target_url
                    && old.description == entry.description
                    && old.run == entry.run
            });
            set.push(!same);
            if same {
                continue;
            }
            let line = render_line(entry);
            // The entry as it reads back from its line, so that the next comparison is with the note.
            current[slot] = pieces(&line).next().and_then(|p| p.entry());
            if !found[slot] && lines[slot].is_none() {
                appended.push(slot);
            }
            lines[slot] = Some(line);
        }
        if lines.iter().all(Option::is_none) {
            return (None, set);
        }
        // A changed context's pieces become its one new line; the rest is written as it was.
        let size = lines
            .iter()
            .zip(&slot_bytes)
            .filter_map(|(line, &old)| line.as_ref().map(|line| (line.len() + 1, old)))
            .fold(written, |size, (new, old)| size - old + new);
        (
            Some(NoteEdit {
                slots,
                lines,
                appended,
                size,
            }),
            set,
        )
    }
}

/// What a batch changes in a note ([`Scan::finish`]): per context of the batch its slot, the line each
/// changed context ends with, and the contexts the note did not have, in the order they first changed.
struct NoteEdit<'b> {
    slots: HashMap<&'b str, usize>,
    lines: Vec<Option<String>>,
    appended: Vec<usize>,
    /// Bytes of the edited note.
    size: usize,
}

impl NoteEdit<'_> {
    /// Which contexts the written text has shown so far: none yet.
    fn unplaced(&self) -> Vec<bool> {
        vec![false; self.lines.len()]
    }

    /// Writes a part of the note (whole pieces, in order) with the edit applied to `out`: a changed
    /// context's first line becomes its new line, its later lines go.
    fn write_part(
        &self,
        part: &str,
        placed: &mut [bool],
        out: &mut (impl std::io::Write + ?Sized),
    ) -> std::io::Result<()> {
        for piece in pieces(part) {
            let slot = piece.context.and_then(|c| self.slots.get(c)).copied();
            match slot.and_then(|s| self.lines[s].as_deref().map(|line| (s, line))) {
                Some((s, line)) => {
                    if !placed[s] {
                        placed[s] = true;
                        writeln!(out, "{line}")?;
                    }
                }
                None => piece.write_to(out)?,
            }
        }
        Ok(())
    }

    /// Writes the lines of the contexts the note did not have, after the note.
    fn write_appended(&self, out: &mut (impl std::io::Write + ?Sized)) -> std::io::Result<()> {
        for &slot in &self.appended {
            if let Some(line) = &self.lines[slot] {
                writeln!(out, "{line}")?;
            }
        }
        Ok(())
    }
}

/// Size of the parts a note blob is read in.
const NOTE_PART: usize = 64 * 1024;

/// Calls `f` with the text of the blob `id` a part at a time, each part whole pieces (an entry line
/// stays with its run line), read as a stream where the object database can (a loose object, as kok
/// writes them). A packed blob is read whole. A note that is not UTF-8 reads as empty, as libgit2's
/// message does.
fn read_note_parts(
    repository: &Repository,
    id: Oid,
    mut f: impl FnMut(&str) -> std::io::Result<()>,
) -> Result<(), git2::Error> {
    use std::io::BufRead;
    let io_err = |e: std::io::Error| git2::Error::from_str(&format!("reading note {id}: {e}"));
    let odb = repository.odb()?;
    let Ok((reader, _, _)) = odb.reader(id) else {
        let blob = repository.find_blob(id)?;
        return f(std::str::from_utf8(blob.content()).unwrap_or_default()).map_err(io_err);
    };
    let mut reader = std::io::BufReader::new(reader);
    let (mut part, mut line) = (String::new(), String::new());
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => return f("").map_err(io_err),
            Err(e) => return Err(io_err(e)),
        }
        if part.len() >= NOTE_PART && !line.starts_with(RUN_LINE_PREFIX) {
            f(&part).map_err(io_err)?;
            part.clear();
        }
        part.push_str(&line);
    }
    f(&part).map_err(io_err)
}

/// Every note under `notes_ref`: annotated commit and its entries.
fn notes_under(repository: &Repository, notes_ref: &str) -> Result<Vec<(Oid, Vec<NoteEntry>)>, git2::Error> {
    let notes = match repository.notes(Some(notes_ref)) {
        Ok(n) => n,
        Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for item in notes {
        let (_, annotated) = item?;
        let note = repository.find_note(Some(notes_ref), annotated)?;
        out.push((annotated, parse_note(note.message().unwrap_or_default())));
    }
    Ok(out)
}

/// Private ref the remote's notes are fetched into before they are joined with the local ones.
const REMOTE_NOTES_REF: &str = "refs/kok/notes-remote";

/// Brings the remote's notes into the local ones, so that the next push is a fast-forward (the cache
/// may have been re-created, or another writer pushed). When both moved, the local entries are
/// written again on top of the remote's notes: for each context the local line wins.
fn join_remote(repo: &Path, target: &PushTarget) -> Result<(), String> {
    let repository = Repository::open(repo).map_err(|e| e.message().to_string())?;
    let mut remote = find_remote(&repository, &target.remote)?;
    let mut callbacks = RemoteCallbacks::new();
    if let Some(hook) = &target.callbacks {
        hook(&mut callbacks);
    }
    let mut options = git2::FetchOptions::new();
    options.remote_callbacks(callbacks);
    let refspec = format!("+{NOTES_REF}:{REMOTE_NOTES_REF}");
    remote
        .fetch(&[refspec.as_str()], Some(&mut options), None)
        .map_err(|e| e.message().to_string())?;
    let Ok(theirs) = repository.refname_to_id(REMOTE_NOTES_REF) else {
        return Ok(()); // the remote has no notes yet
    };
    let message = "kok: join remote notes";
    let ours = match repository.refname_to_id(NOTES_REF) {
        Ok(oid) => oid,
        Err(_) => {
            repository
                .reference(NOTES_REF, theirs, true, message)
                .map_err(|e| e.message().to_string())?;
            return Ok(());
        }
    };
    if ours == theirs || repository.graph_descendant_of(ours, theirs).unwrap_or(false) {
        return Ok(());
    }
    if repository.graph_descendant_of(theirs, ours).unwrap_or(false) {
        repository
            .reference(NOTES_REF, theirs, true, message)
            .map_err(|e| e.message().to_string())?;
        return Ok(());
    }
    let local = notes_under(&repository, NOTES_REF).map_err(|e| e.message().to_string())?;
    repository
        .reference(NOTES_REF, theirs, true, message)
        .map_err(|e| e.message().to_string())?;
    let write_err = |e: git2::Error| e.message().to_string();
    let signature = Signature::now("kok", "kok@localhost").map_err(write_err)?;
    for (oid, entries) in local {
        rewrite_note(&repository, &signature, oid, &entries).map_err(write_err)?;
    }
    Ok(())
}

fn find_remote<'r>(repository: &'r Repository, remote: &str) -> Result<git2::Remote<'r>, String> {
    repository
        .find_remote(remote)
        .or_else(|_| repository.remote_anonymous(remote))
        .map_err(|e| e.message().to_string())
}

/// Pushes the notes ref unless it is already where the last push left it. `Ok(Some(oid))` when pushed,
/// `Ok(None)` when there was nothing to push, `Err(message)` when the push failed or was refused.
fn push_notes(repo: &Path, target: &PushTarget, pushed: Option<Oid>) -> Result<Option<Oid>, String> {
    let repository = Repository::open(repo).map_err(|e| e.message().to_string())?;
    let local = match repository.refname_to_id(NOTES_REF) {
        Ok(oid) => oid,
        Err(_) => return Ok(None),
    };
    if pushed == Some(local) {
        return Ok(None);
    }
    if let Some(path) = local_remote_path(&repository, &target.remote) {
        return update_local_remote(&repository, &path, local);
    }
    let mut remote = find_remote(&repository, &target.remote)?;
    let refused = std::cell::RefCell::new(None::<String>);
    {
        let mut callbacks = RemoteCallbacks::new();
        if let Some(hook) = &target.callbacks {
            hook(&mut callbacks);
        }
        callbacks.push_update_reference(|reference, message| {
            if let Some(message) = message {
                *refused.borrow_mut() = Some(format!("{reference} refused: {message}"));
            }
            Ok(())
        });
        let mut options = PushOptions::new();
        options.remote_callbacks(callbacks);
        remote
            .push(&[NOTES_REFSPEC], Some(&mut options))
            .map_err(|e| e.message().to_string())?;
    }
    match refused.into_inner() {
        Some(message) => Err(message),
        None => Ok(Some(local)),
    }
}

/// The directory of `remote` when it is a plain path or a `file://` URL (directly or as a named
/// remote of the repository).
fn local_remote_path(repository: &Repository, remote: &str) -> Option<PathBuf> {
    let url = match repository.find_remote(remote) {
        Ok(named) => named.url().ok()?.to_string(),
        Err(_) => remote.to_string(),
    };
    crate::source::RemoteUrl::parse(&url).ok()?.local_path()
}

/// Moves the notes ref of a repository on this machine to `local`. libgit2 cannot push to a non-bare
/// local repository (a work tree such as `--repo .`), and a fetch or push packs every new object, the
/// note blob included (tens of MB on a commit with 100,000 contexts), in memory once to pack it and once
/// more to index the pack. So the objects the remote lacks are copied into its object database one at a
/// time, as streams where both sides can (loose objects, as kok writes them), and then the ref moves.
/// Like a push, this is refused unless it fast-forwards, so a second writer's notes are joined rather
/// than overwritten; the ref moves only from the value checked, so a writer in between is refused too.
fn update_local_remote(repository: &Repository, path: &Path, local: Oid) -> Result<Option<Oid>, String> {
    let target = Repository::open(path).map_err(|e| e.message().to_string())?;
    if let Ok(theirs) = target.refname_to_id(NOTES_REF) {
        if theirs == local {
            return Ok(Some(local));
        }
        if !repository.graph_descendant_of(local, theirs).unwrap_or(false) {
            return Err(format!(
                "{NOTES_REF} refused: the notes of {} moved; not a fast-forward",
                path.display()
            ));
        }
    }
    let message = |e: git2::Error| format!("copying the notes into {}: {}", path.display(), e.message());
    copy_missing_objects(repository, &target, local).map_err(message)?;
    let log = "kok: notes";
    let moved = match target.refname_to_id(NOTES_REF) {
        Ok(theirs) => target.reference_matching(NOTES_REF, local, true, theirs, log),
        Err(_) => target.reference(NOTES_REF, local, false, log),
    };
    moved.map_err(|e| {
        format!(
            "{NOTES_REF} refused: the notes of {} moved while they were updated: {}",
            path.display(),
            e.message()
        )
    })?;
    Ok(Some(local))
}

/// Writes into `target` every object reachable from the commit `tip` of `source` that `target` lacks,
/// each after every object it names (a copy cut short leaves objects nothing names, never a commit or
/// tree missing what it names, so the next copy, which stops at what `target` has, finds it whole).
fn copy_missing_objects(source: &Repository, target: &Repository, tip: Oid) -> Result<(), git2::Error> {
    let (from, into) = (source.odb()?, target.odb()?);
    let mut seen = std::collections::HashSet::new();
    // Depth first; `true` once the object's links are on the stack above it: it is written when it
    // comes back, after them.
    let mut walk = vec![(tip, false)];
    while let Some((id, linked)) = walk.pop() {
        if linked {
            if !(link_loose_object(source, target, id) && into.exists(id)) {
                copy_object(&from, &into, id)?;
            }
            continue;
        }
        if !seen.insert(id) || into.exists(id) {
            continue;
        }
        walk.push((id, true));
        match from.read_header(id)?.1 {
            git2::ObjectType::Commit => {
                let commit = source.find_commit(id)?;
                walk.push((commit.tree_id(), false));
                walk.extend(commit.parent_ids().map(|p| (p, false)));
            }
            git2::ObjectType::Tree => {
                let tree = source.find_tree(id)?;
                walk.extend(
                    tree.iter()
                        .filter(|entry| entry.kind() != Some(git2::ObjectType::Commit))
                        .map(|entry| (entry.id(), false)),
                );
            }
            _ => {}
        }
    }
    Ok(())
}

/// Puts the loose object `id` of `source` into `target`'s object database as it is on disk (a hard link
/// where both are on one filesystem, else a copy renamed into place): a loose object's file is the same
/// in every repository, so the note blob is neither inflated, hashed nor deflated again. `false` when
/// the object is not loose in `source` or the file could not be placed (the caller copies it through
/// the object databases).
fn link_loose_object(source: &Repository, target: &Repository, id: Oid) -> bool {
    let hex = id.to_string();
    let (dir, name) = hex.split_at(2);
    let from = source.path().join("objects").join(dir).join(name);
    let into_dir = target.path().join("objects").join(dir);
    if !from.is_file() || std::fs::create_dir_all(&into_dir).is_err() {
        return false;
    }
    let into = into_dir.join(name);
    match std::fs::hard_link(&from, &into) {
        Ok(()) => return true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return true,
        Err(_) => {}
    }
    let partial = into_dir.join(format!("tmp_kok_{name}_{}", std::process::id()));
    let placed = std::fs::copy(&from, &partial).and_then(|_| std::fs::rename(&partial, &into));
    if placed.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    placed.is_ok()
}

/// Copies one object from `from` into `into`, as a stream where `from` can read it so (a loose object):
/// a note blob is never held whole.
fn copy_object(from: &git2::Odb<'_>, into: &git2::Odb<'_>, id: Oid) -> Result<(), git2::Error> {
    use std::io::Write;
    let io_err = |e: std::io::Error| git2::Error::from_str(&format!("copying object {id}: {e}"));
    let (size, kind) = from.read_header(id)?;
    let mut writer = into.writer(size, kind)?;
    match from.reader(id) {
        Ok((mut reader, _, _)) => {
            std::io::copy(&mut reader, &mut writer).map_err(io_err)?;
        }
        Err(_) => writer.write_all(from.read(id)?.data()).map_err(io_err)?,
    }
    let written = writer.finalize()?;
    if written != id {
        return Err(git2::Error::from_str(&format!(
            "copying object {id}: it was written as {written}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn note_lines_round_trip_with_and_without_url() {
        let entry = NoteEntry {
            context: "kok/prod-bj/add-node7".into(),
            state: StatusState::Success,
            time: "2026-11-22T00:03:12Z".into(),
            target_url: Some("https://logs/x".into()),
            description: "succeeded in 3m12s".into(),
            run: None,
        };
        let line = render_line(&entry);
        assert_eq!(
            line,
            "kok/prod-bj/add-node7: success 2026-11-22T00:03:12Z https://logs/x succeeded in 3m12s"
        );
        assert_eq!(parse_line(&line), Some(entry.clone()));
        let bare = NoteEntry {
            target_url: None,
            ..entry
        };
        assert_eq!(parse_line(&render_line(&bare)), Some(bare));
    }

    /// A run record: a summary of three hosts.
    fn three_hosts() -> RunRecord {
        RunRecord {
            operation: None,
            summary: Some(crate::api::RunSummary {
                host_count: 3,
                ..Default::default()
            }),
            failure: None,
        }
    }

    #[test]
    fn a_run_record_rides_on_a_continuation_line_and_is_replaced_with_its_entry() {
        let run = three_hosts();
        let entry = NoteEntry {
            context: "kok/prod-bj/install".into(),
            state: StatusState::Success,
            time: "2026-11-22T00:03:12Z".into(),
            target_url: None,
            description: "succeeded in 3m12s: 3 hosts, 0 changed".into(),
            run: Some(run),
        };
        let note = format!(
            "kok/sync: success 2026-11-22T00:00:00Z - materialized 1 cluster\n{}\nforeign\n",
            render_line(&entry)
        );
        let parsed = parse_note(&note);
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[1], entry);
        assert_eq!(
            edit_note(&note, std::slice::from_ref(&entry)),
            (None, vec![false]),
            "the same entry and record change nothing"
        );

        let failed = NoteEntry {
            state: StatusState::Failure,
            description: "failed".into(),
            run: None,
            ..entry
        };
        let (updated, set) = edit_note(&note, std::slice::from_ref(&failed));
        assert_eq!(set, vec![true]);
        let updated = updated.expect("the failure changes the note");
        assert!(
            !updated.contains(RUN_LINE_PREFIX),
            "the old record went with its line:\n{updated}"
        );
        assert!(updated.ends_with("foreign\n"), "foreign lines stay:\n{updated}");
        assert_eq!(parse_note(&updated)[1], failed);
    }

    #[test]
    fn a_batch_updates_lines_in_place_appends_new_contexts_and_drops_duplicates() {
        let line = |context: &str, state: StatusState, description: &str| NoteEntry {
            context: context.into(),
            state,
            time: "2026-11-22T00:00:00Z".into(),
            target_url: None,
            description: description.into(),
            run: None,
        };
        let a = line("kok/c/a", StatusState::Pending, "queued");
        let b = line("kok/c/b", StatusState::Pending, "queued");
        let note = format!(
            "{}\n{}\nforeign\n{RUN_LINE_PREFIX}{{}}\n{}\n{RUN_LINE_PREFIX}{{}}\n",
            render_line(&a),
            render_line(&b),
            render_line(&a),
        );
        let a2 = line("kok/c/a", StatusState::Success, "done");
        let c = line("kok/c/c", StatusState::Pending, "queued");
        let (rendered, set) = edit_note(&note, &[a2.clone(), b.clone(), c.clone(), a2.clone()]);
        assert_eq!(
            set,
            vec![true, false, true, false],
            "b is already there as it is; the second a2 is compared with a's new line, not its old one"
        );
        let rendered = rendered.expect("a and c change the note");
        assert_eq!(
            rendered,
            format!(
                "{}\n{}\nforeign\n{RUN_LINE_PREFIX}{{}}\n{}\n",
                render_line(&a2),
                render_line(&b),
                render_line(&c)
            ),
            "the duplicate of a went with its record; the run line after a foreign line stays"
        );
        assert_eq!(parse_note(&rendered), vec![a2, b, c]);
    }

    #[test]
    fn a_context_set_twice_in_a_batch_ends_with_its_last_line_once() {
        let line = |state: StatusState, description: &str| NoteEntry {
            context: "kok/c/a".into(),
            state,
            time: "2026-11-22T00:00:00Z".into(),
            target_url: None,
            description: description.into(),
            run: None,
        };
        let queued = line(StatusState::Pending, "queued");
        let running = line(StatusState::Running, "running");
        let done = line(StatusState::Success, "done");
        let (new, set) = edit_note("", &[queued.clone(), running.clone(), done.clone()]);
        assert_eq!(set, vec![true, true, true]);
        assert_eq!(new.as_deref(), Some(format!("{}\n", render_line(&done)).as_str()));

        let twice = format!("{}\nforeign\n{}\n", render_line(&queued), render_line(&queued));
        assert_eq!(
            edit_note(&twice, std::slice::from_ref(&queued)),
            (None, vec![false]),
            "an unchanged context leaves the note, duplicates and all, as it is"
        );
        let (edited, _) = edit_note(&twice, &[running, done.clone()]);
        assert_eq!(edited, Some(format!("{}\nforeign\n", render_line(&done))));
    }

    /// A repository with one commit to annotate, and the signature notes are written with.
    fn annotated_repository() -> (tempfile::TempDir, Repository, Oid, Signature<'static>) {
        let dir = tempfile::tempdir().expect("temp dir");
        let repository = Repository::init(dir.path()).expect("init");
        let signature = Signature::now("kok", "kok@localhost").expect("signature");
        let tree = repository
            .find_tree(repository.treebuilder(None).unwrap().write().unwrap())
            .unwrap();
        let commit = repository
            .commit(Some("HEAD"), &signature, &signature, "c\n", &tree, &[])
            .unwrap();
        drop(tree);
        (dir, repository, commit, signature)
    }

    #[test]
    fn a_status_is_held_by_a_note_exactly_when_its_line_is_there() {
        let (dir, _repository, commit, _) = annotated_repository();
        let run = three_hosts();
        let status =
            |context: &str, description: &str, url: Option<&str>, run: Option<RunRecord>| CommitStatus {
                context: context.into(),
                state: StatusState::Success,
                description: description.into(),
                target_url: url.map(str::to_string),
                run,
            };
        // What the line changes of a status: control characters, a trailing space, a space in a url,
        // an empty url; and a record on a continuation line.
        let written = [
            status("kok/c/a", "line one\nline two \t", Some("https://logs/a b"), None),
            status("kok/c/b", "succeeded: 3 hosts", Some(""), Some(run.clone())),
            status("kok/c/c", "", None, None),
        ];
        let entries: Vec<(Oid, CommitStatus)> = written.iter().map(|s| (commit, s.clone())).collect();
        write_notes(dir.path(), &entries, jiff::Timestamp::now()).expect("notes written");

        let held = note_fingerprints(dir.path(), &commit.to_string()).expect("note read");
        assert_eq!(held.len(), 3);
        for s in &written {
            assert!(
                held.contains(&status_fingerprint(s)),
                "{s:?} reads back from its line"
            );
        }
        let not_held = [
            CommitStatus {
                state: StatusState::Failure,
                ..written[0].clone()
            },
            status("kok/c/b", "succeeded: 3 hosts", None, None),
            status("kok/c/c", "queued", None, None),
            status("kok/c/d", "", None, None),
        ];
        for s in &not_held {
            assert!(
                !held.contains(&status_fingerprint(s)),
                "{s:?} is not the line of its context"
            );
        }
        let other = Oid::from_str("0123456789012345678901234567890123456789").unwrap();
        assert!(note_fingerprints(dir.path(), &other.to_string())
            .unwrap()
            .is_empty());
    }

    fn numbered(i: usize, state: StatusState) -> NoteEntry {
        NoteEntry {
            context: format!("kok/cluster-{i:05}/op"),
            state,
            time: "2026-11-22T00:00:00Z".into(),
            target_url: Some(format!("https://logs.example/{i}")),
            description: format!("operation {i} of a fleet-size commit"),
            run: None,
        }
    }

    #[test]
    fn a_note_of_many_parts_is_rewritten_as_a_stream_to_the_text_a_whole_edit_gives() {
        let (_dir, repository, commit, signature) = annotated_repository();
        // Even entries with a run record, a foreign line now and then, and a duplicate of entry 5 far
        // past the first part: the parts split between pieces, never inside one.
        let mut text = String::new();
        for i in 0..3000 {
            text.push_str(&render_line(&numbered(i, StatusState::Pending)));
            text.push('\n');
            if i % 2 == 0 {
                text.push_str(&format!("{RUN_LINE_PREFIX}{{}}\n"));
            }
            if i % 100 == 0 {
                text.push_str("foreign line\n");
            }
            if i == 2500 {
                text.push_str(&render_line(&numbered(5, StatusState::Pending)));
                text.push('\n');
            }
        }
        assert!(text.len() > 3 * NOTE_PART, "the note spans several parts");
        repository
            .note(&signature, &signature, Some(NOTES_REF), commit, &text, false)
            .unwrap();

        let batch = vec![
            numbered(0, StatusState::Success),
            numbered(5, StatusState::Failure),
            numbered(1200, StatusState::Running),
            numbered(1201, StatusState::Pending),
            numbered(2999, StatusState::Success),
            numbered(3000, StatusState::Pending),
        ];
        let (expected, expected_set) = edit_note(&text, &batch);
        let expected = expected.expect("the batch changes the note");
        let set = rewrite_note(&repository, &signature, commit, &batch).unwrap();
        assert_eq!(set, expected_set);
        assert_eq!(
            set,
            vec![true, true, true, false, true, true],
            "1201 is in the note as it is"
        );
        let written = note_text(&repository, commit).unwrap();
        assert!(
            written == expected,
            "the streamed rewrite differs from the whole edit"
        );
        assert_eq!(
            written.matches("kok/cluster-00005/op:").count(),
            1,
            "the duplicate went"
        );
        assert_eq!(
            written.matches(RUN_LINE_PREFIX).count(),
            1500 - 2,
            "0 and 1200 lost their records"
        );

        let head = repository.refname_to_id(NOTES_REF).unwrap();
        let again = rewrite_note(&repository, &signature, commit, &batch).unwrap();
        assert_eq!(again, vec![false; batch.len()]);
        assert_eq!(
            repository.refname_to_id(NOTES_REF).unwrap(),
            head,
            "nothing changed, nothing committed"
        );
    }

    #[test]
    fn the_edited_notes_size_comes_from_the_scan_whatever_the_text_holds() {
        let line = |i, state| render_line(&numbered(i, state));
        let pending = StatusState::Pending;
        // Each text with something a plain count of its lines would get wrong: a missing last newline,
        // CRLF line ends, a run line after a foreign line, a context twice (its record with the first),
        // an empty note.
        let texts = [
            format!("{}\n{}", line(1, pending), line(2, pending)),
            format!("{}\r\n{}\r\n", line(1, pending), line(2, pending)),
            format!("foreign\n{RUN_LINE_PREFIX}{{}}\n{}\n", line(1, pending)),
            format!(
                "{}\n{RUN_LINE_PREFIX}{{\"summary\":null}}\n{}\n{}\n",
                line(1, pending),
                line(2, pending),
                line(1, StatusState::Running)
            ),
            String::new(),
        ];
        let batch = [
            numbered(1, StatusState::Success),
            numbered(3, pending),
            numbered(1, StatusState::Failure),
        ];
        for text in &texts {
            let (_dir, repository, commit, signature) = annotated_repository();
            if !text.is_empty() {
                repository
                    .note(&signature, &signature, Some(NOTES_REF), commit, text, false)
                    .unwrap();
            }
            // A size that is not the written text's makes the object database refuse the blob.
            let set = rewrite_note(&repository, &signature, commit, &batch)
                .unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(set, vec![true, true, true], "{text:?}");
            let written = note_text(&repository, commit).unwrap();
            assert_eq!(Some(written.clone()), edit_note(text, &batch).0, "{text:?}");
            assert_eq!(
                parse_note(&written)
                    .iter()
                    .map(|e| e.context.as_str())
                    .filter(|c| c.ends_with("01/op"))
                    .count(),
                1,
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_note_in_a_fanned_out_notes_tree_is_rewritten_in_its_place() {
        let (_dir, repository, commit, signature) = annotated_repository();
        // Notes written by git with many notes live under a two-character directory.
        let hex = commit.to_string();
        let first = numbered(1, StatusState::Pending);
        let text = format!("{}\n", render_line(&first));
        let blob = repository.blob(text.as_bytes()).unwrap();
        let mut inner = repository.treebuilder(None).unwrap();
        inner.insert(&hex[2..], blob, 0o100644).unwrap();
        let inner = inner.write().unwrap();
        let mut top = repository.treebuilder(None).unwrap();
        top.insert(&hex[..2], inner, 0o040000).unwrap();
        let top = repository.find_tree(top.write().unwrap()).unwrap();
        repository
            .commit(Some(NOTES_REF), &signature, &signature, "fanned\n", &top, &[])
            .unwrap();
        assert_eq!(note_text(&repository, commit).unwrap(), text);

        let batch = vec![
            numbered(1, StatusState::Success),
            numbered(2, StatusState::Pending),
        ];
        assert_eq!(
            rewrite_note(&repository, &signature, commit, &batch).unwrap(),
            vec![true, true]
        );
        let written = note_text(&repository, commit).unwrap();
        assert_eq!(parse_note(&written), batch);
        let tree = repository
            .find_reference(NOTES_REF)
            .unwrap()
            .peel_to_tree()
            .unwrap();
        assert!(
            tree.get_name(&hex).is_none(),
            "no second copy of the note at the top of the tree"
        );
    }

    #[test]
    fn the_next_batch_gathers_three_times_as_long_as_the_last_took_to_write() {
        let mut state = PushState::default();
        assert_eq!(state.next_batch_at(), None, "the first batch does not wait");
        let ended = tokio::time::Instant::now();
        state.last_batch = Some((ended, std::time::Duration::from_millis(400)));
        assert_eq!(
            state.next_batch_at(),
            Some(ended + std::time::Duration::from_millis(1200))
        );
    }

    /// A status for the queue of `sink`, its result dropped.
    fn queue_one(sink: &NotesSink) {
        let (done, _) = oneshot::channel();
        sink.lock_queue().push(Queued {
            commit: Oid::ZERO_SHA1,
            status: CommitStatus {
                context: "kok/c/op".into(),
                state: StatusState::Pending,
                description: String::new(),
                target_url: None,
                run: None,
            },
            done,
        });
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_gathers_while_statuses_join_it_and_goes_once_they_stop() {
        let sink = Arc::new(NotesSink::new("/nonexistent"));
        // A status every 100 ms, 100 of them.
        let feed = |sink: &Arc<NotesSink>| {
            let sink = sink.clone();
            tokio::spawn(async move {
                for _ in 0..100 {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    queue_one(&sink);
                }
            })
        };
        let start = tokio::time::Instant::now();
        let until = start + std::time::Duration::from_secs(30);

        // Nothing joins: the batch goes after the quiet time, not after 30 s.
        queue_one(&sink);
        sink.gather_until(until).await;
        assert_eq!(start.elapsed(), QUIET);

        // A status every 100 ms for 10 s: the batch gathers for all of them, then goes once they stop.
        let start = tokio::time::Instant::now();
        let feeder = feed(&sink);
        sink.gather_until(until).await;
        feeder.await.unwrap();
        let waited = start.elapsed();
        assert!(
            waited >= std::time::Duration::from_secs(10)
                && waited <= std::time::Duration::from_secs(10) + 2 * QUIET,
            "gathered {waited:?}"
        );
        assert_eq!(sink.lock_queue().len(), 101);

        // A steady stream past the deadline: the batch goes at the deadline.
        let start = tokio::time::Instant::now();
        let feeder = feed(&sink);
        sink.gather_until(start + std::time::Duration::from_secs(2)).await;
        assert_eq!(start.elapsed(), std::time::Duration::from_secs(2));
        feeder.abort();
    }

    #[test]
    fn foreign_lines_are_not_entries() {
        assert_eq!(parse_note("hello: world\nsome text\n"), Vec::new());
    }
}
