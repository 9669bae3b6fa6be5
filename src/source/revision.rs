//! Revisions as `git rev-parse` takes them (branches, `origin/main`, tags, `HEAD`, `main~2`, short and
//! full shas), read either in the user's own repository or in the bare cache, with the hints a shallow
//! checkout needs.

use std::path::{Path, PathBuf};

use git2::{Oid, Repository};

use super::url::RemoteUrl;

/// Failures of resolving a revision or a range.
#[derive(Debug, thiserror::Error)]
pub enum RevisionError {
    /// The revision names nothing in the repository.
    #[error(
        "revision {rev:?} is not a branch, remote-tracking branch, tag or commit of {repo}: {message}{hint}"
    )]
    NotFound {
        /// The revision asked for.
        rev: String,
        /// The repository looked in.
        repo: String,
        /// libgit2's message.
        message: String,
        /// What to do about it (the fetch a shallow checkout needs), or nothing.
        hint: String,
    },
    /// A shallow checkout does not reach from one end of the range to the other.
    #[error(
        "{repo} is a shallow clone and its history does not reach from {from} to {to}; \
         fetch the missing history with `git fetch --unshallow` (or a deeper `git fetch --deepen=N`)"
    )]
    ShallowRange {
        /// The repository looked in.
        repo: String,
        /// Start of the range.
        from: String,
        /// End of the range.
        to: String,
    },
}

/// The user's own repository when `url` is a local path (or `file://`) inside a git repository
/// (work tree or bare, shallow or not); `None` for remote URLs and for paths that are no repository.
pub fn open_local(url: &str) -> Option<Repository> {
    let RemoteUrl::Local(local) = RemoteUrl::parse(url).ok()? else {
        return None;
    };
    let path = PathBuf::from(local.strip_prefix("file://").unwrap_or(&local));
    Repository::discover(Path::new(&path)).ok()
}

/// Resolves `rev` in `repo` as `git rev-parse <rev>^{commit}` does. `shown` names the repository in
/// errors. A revision missing from a shallow checkout gets the fetch that brings it.
pub fn resolve_revision(repo: &Repository, rev: &str, shown: &str) -> Result<Oid, RevisionError> {
    repo.revparse_single(rev)
        .and_then(|o| o.peel_to_commit())
        .map(|c| c.id())
        .map_err(|e| {
            let hint = if repo.is_shallow() {
                let branch = rev.strip_prefix("origin/").unwrap_or(rev);
                format!(
                    "; this checkout is shallow: fetch it with `git fetch origin {branch}` \
                     (or everything with `git fetch --unshallow`)"
                )
            } else {
                String::new()
            };
            RevisionError::NotFound {
                rev: rev.to_string(),
                repo: shown.to_string(),
                message: e.message().to_string(),
                hint,
            }
        })
}

/// Checks that a shallow checkout holds the history between `from` and `to`: in a shallow clone,
/// `from` not being an ancestor of `to` may only mean that the history in between was not fetched.
pub fn check_range(repo: &Repository, from: Oid, to: Oid, shown: &str) -> Result<(), RevisionError> {
    if !repo.is_shallow() || from == to {
        return Ok(());
    }
    match repo.graph_descendant_of(to, from) {
        Ok(true) => Ok(()),
        _ => Err(RevisionError::ShallowRange {
            repo: shown.to_string(),
            from: from.to_string(),
            to: to.to_string(),
        }),
    }
}
