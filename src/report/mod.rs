//! Commit statuses: what each operation and commit should show (pure), the sinks that deliver them, and
//! the durable delivery loop.
//!
//! - [`status`]: phase → [`CommitStatus`](crate::api::CommitStatus) (`kok/<cluster>/<id>`, `kok/sync`).
//! - [`sink`]: the [`Sink`] trait, [`DeliveryError`] (retryable or refused) and the redacting [`Token`].
//! - [`notes`]: the default sink, git notes under `refs/notes/kok`, and their readers for `kok history`.
//! - [`forge`]: GitHub, GitLab and Gitea/Forgejo statuses APIs.
//! - [`deliver`]: [`Reporter`], which delivers `desiredStatus` until it is `reported`, across restarts,
//!   pausing a rate-limited sink alone and keeping forges within a per-commit context budget; `sinks`
//!   holds the sinks with their pauses, routes and backoff, `queue` the undelivered statuses in memory.
//! - [`record`]: the statuses read back from the notes and forges, so that a run the meta-cluster lost is
//!   restored as it ended instead of running again.
//! - [`rollouts`]: the `kok/rollout/<name>` status of each rollout, from its `FleetRollout`'s status.
//! - [`comments`]: the plan comment kept on each pull request (`--pr-comments`).
//! - [`notify`]: notifications to webhooks, Slack and Teams: one more sink, with a durable outbox.

pub mod comments;
pub mod deliver;
pub mod forge;
pub mod notes;
pub mod notify;
mod queue;
pub mod record;
pub mod rollouts;
pub mod sink;
mod sinks;
pub mod status;

pub use deliver::{Backoff, Reporter, Route, Sinks};
pub use forge::{Forge, ForgeSink};
pub use notes::{
    note_fingerprints, read_all_notes, read_notes, status_fingerprint, CommitNotes, NoteEntry, NotesSink,
};
pub use sink::{DeliveryError, Sink, Token};
pub use status::{
    operation_status, refused_status, summary_status, sync_status, Tally, SUMMARY_CONTEXT, SYNC_CONTEXT,
};
