//! The record in git of what ran, read back: an entry of operations.yml whose ClusterOperation is gone (a
//! lost or rebuilt meta-cluster, a new namespace, a deleted state directory or object) is restored as it
//! ended instead of running again.
//!
//! Every status kok delivers is kept by the sinks that keep a record ([`Sink::keeps_record`]): the git
//! notes (pushed to the remote, joined from it at the first read) and the forges. The record of a run is
//! the status of its context (`kok/<cluster>/<id>`) on the commit that introduced it; the notes also
//! carry the run's identity (ClusterOperation name and entry digest) and outcome in machine-readable form
//! ([`crate::api::OperationRecord`]), so a status of another digest on the same context never passes
//! for it. The notes are asked first, then each forge in turn: a forge is the record where the notes
//! cannot be pushed (a read-only deploy key).
//!
//! A sink that cannot be read (the forge is down) makes the lookup fail: kok creates no run it cannot
//! rule out having made before, and the pass is tried again.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::Mutex;

use super::forge::CONTEXT_MAX;
use super::sink::Sink;
use super::status::shorten_context;
use crate::api::Recorded;

/// A record could not be read.
#[derive(Debug, thiserror::Error)]
#[error(
    "reading what {sink} recorded on commit {commit} failed: {reason}; kok creates no operation it cannot \
     rule out having run before, and tries again at the next pass"
)]
pub struct RecordError {
    /// Sink name.
    pub sink: String,
    /// Commit sha.
    pub commit: String,
    /// What went wrong (scrubbed of every secret kok holds).
    pub reason: String,
}

/// The sinks that keep a record, in the order they are asked: git notes first, then forges.
#[derive(Clone, Default)]
pub struct RecordBook {
    sinks: Vec<Arc<dyn Sink>>,
}

impl std::fmt::Debug for RecordBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.sinks.iter().map(|s| s.name()).collect();
        f.debug_struct("RecordBook").field("sinks", &names).finish()
    }
}

impl RecordBook {
    /// The record kept by `sinks` (those that keep none are left out), unbudgeted sinks (git notes,
    /// which hold every context) first.
    pub fn new(sinks: &[Arc<dyn Sink>]) -> RecordBook {
        let mut sinks: Vec<Arc<dyn Sink>> = sinks.iter().filter(|s| s.keeps_record()).cloned().collect();
        sinks.sort_by_key(|s| s.budgeted());
        RecordBook { sinks }
    }

    /// True when some sink keeps a record: without one, a lost meta-cluster runs every current entry
    /// again.
    pub fn is_kept(&self) -> bool {
        !self.sinks.is_empty()
    }

    /// The names of the sinks asked, in order.
    pub fn names(&self) -> Vec<String> {
        self.sinks.iter().map(|s| s.name().to_string()).collect()
    }

    /// A lookup for one pass: each commit's statuses are read once per sink, and a later pass reads
    /// them afresh (they change as runs go on).
    pub fn lookup(&self) -> Lookup<'_> {
        Lookup {
            book: self,
            read: Mutex::default(),
        }
    }
}

/// (sink index, commit) → the statuses read.
type Read = HashMap<(usize, String), Arc<Vec<Recorded>>>;

/// One pass's reads of the record.
pub struct Lookup<'a> {
    book: &'a RecordBook,
    read: Mutex<Read>,
}

impl Lookup<'_> {
    /// The recorded status of the run of `context` with entry digest `digest` introduced by `commit`;
    /// `None` when no sink holds one.
    pub async fn find(
        &self,
        commit: &str,
        context: &str,
        digest: &str,
    ) -> Result<Option<Recorded>, RecordError> {
        for (index, sink) in self.book.sinks.iter().enumerate() {
            let statuses = self.read(index, sink.as_ref(), commit).await?;
            if let Some(found) = matching(&statuses, context, digest) {
                return Ok(Some(found.clone()));
            }
        }
        Ok(None)
    }

    async fn read(
        &self,
        index: usize,
        sink: &dyn Sink,
        commit: &str,
    ) -> Result<Arc<Vec<Recorded>>, RecordError> {
        let mut read = self.read.lock().await;
        let key = (index, commit.to_string());
        if let Some(statuses) = read.get(&key) {
            return Ok(statuses.clone());
        }
        let statuses = sink.read_back(commit).await.map_err(|reason| RecordError {
            sink: sink.name().to_string(),
            commit: commit.to_string(),
            reason: crate::redact::scrub(&reason),
        })?;
        let statuses = Arc::new(statuses);
        read.insert(key, statuses.clone());
        Ok(statuses)
    }
}

/// The status of `context` among `statuses` that is the run with `digest`: its context as kok writes it
/// (or as a forge shortened it), and no other digest in its record.
pub fn matching<'s>(statuses: &'s [Recorded], context: &str, digest: &str) -> Option<&'s Recorded> {
    let shortened = shorten_context(context, CONTEXT_MAX);
    statuses.iter().find(|r| {
        let same_context = r.status.context == context || r.status.context == shortened;
        let recorded_digest = r
            .status
            .run
            .as_ref()
            .and_then(|run| run.operation.as_ref())
            .map(|op| op.digest.as_str());
        same_context && recorded_digest.is_none_or(|d| d == digest)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{CommitStatus, OperationRecord, RunRecord, StatusState};

    fn recorded(context: &str, digest: Option<&str>) -> Recorded {
        Recorded {
            from: "git-notes".into(),
            time: "2026-11-22T00:03:12Z".into(),
            status: CommitStatus {
                context: context.into(),
                state: StatusState::Success,
                description: "succeeded in 3m12s".into(),
                target_url: None,
                run: digest.map(|d| RunRecord {
                    operation: Some(OperationRecord {
                        name: "c-install-abcdef12".into(),
                        digest: d.into(),
                        ..OperationRecord::default()
                    }),
                    ..RunRecord::default()
                }),
            },
        }
    }

    #[test]
    fn a_status_of_the_same_context_and_digest_is_the_run() {
        let statuses = [
            recorded("kok/c/other", Some("d1")),
            recorded("kok/c/install", Some("d1")),
        ];
        assert_eq!(
            matching(&statuses, "kok/c/install", "d1").map(|r| r.status.context.as_str()),
            Some("kok/c/install")
        );
    }

    #[test]
    fn a_status_of_another_digest_is_not_the_run() {
        let statuses = [recorded("kok/c/install", Some("d1"))];
        assert!(matching(&statuses, "kok/c/install", "d2").is_none());
    }

    #[test]
    fn a_status_without_identity_counts_for_its_context_on_its_commit() {
        // Forges, and notes written before the record carried the identity, say only the context.
        let statuses = [recorded("kok/c/install", None)];
        assert!(matching(&statuses, "kok/c/install", "d2").is_some());
        assert!(matching(&statuses, "kok/c/other", "d2").is_none());
    }

    #[test]
    fn a_context_a_forge_shortened_still_matches() {
        let long = format!("kok/c/{}", "x".repeat(300));
        let statuses = [recorded(&shorten_context(&long, CONTEXT_MAX), None)];
        assert!(matching(&statuses, &long, "d").is_some());
    }
}
