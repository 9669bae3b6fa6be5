//! The commit a pull request's plan reads: what merging its head into the reconciled commit would
//! give, as the forge's own test merge does, built in the cache without touching any ref.

use git2::{Oid, Repository, Signature, Time};

use super::SourceError;

/// Author and committer of the merge commits built for plans.
const MERGE_AUTHOR: (&str, &str) = ("kok", "kok@localhost");

/// What a pull request's head is, seen from the reconciled commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MergeTarget {
    /// The head is already in the reconciled history (merged, or an old branch): nothing to plan.
    Merged,
    /// The plan reads `commit` against the base: the head itself when the base is its ancestor (a
    /// fast-forward), else a merge commit of base and head built in the cache.
    Plan {
        /// The commit the merge would reconcile.
        commit: Oid,
        /// True when `commit` is a merge commit made for the plan (not on the forge).
        synthetic: bool,
    },
    /// The head does not merge cleanly into the base.
    Conflict {
        /// The paths in conflict, as git names them.
        paths: Vec<String>,
    },
}

/// The commit reconciling a merge of `head` into `base` would reconcile. `None` as base (nothing
/// reconciled yet) plans the head as it is. The merge commit, when one is needed, is written to the
/// object database of `repo` only (deterministic: the same base and head give the same commit).
pub fn merge_target(
    repo: &Repository,
    base: Option<Oid>,
    head: Oid,
    number: u64,
) -> Result<MergeTarget, SourceError> {
    let Some(base) = base else {
        return Ok(MergeTarget::Plan {
            commit: head,
            synthetic: false,
        });
    };
    if base == head || descends(repo, base, head)? {
        return Ok(MergeTarget::Merged);
    }
    if descends(repo, head, base)? {
        return Ok(MergeTarget::Plan {
            commit: head,
            synthetic: false,
        });
    }
    let what = format!("merge the head {head} of pull request #{number} into {base}");
    let ours = repo.find_commit(base).map_err(SourceError::git(&what))?;
    let theirs = repo.find_commit(head).map_err(SourceError::git(&what))?;
    let mut index = repo
        .merge_commits(&ours, &theirs, None)
        .map_err(SourceError::git(&what))?;
    if index.has_conflicts() {
        let mut paths: Vec<String> = index
            .conflicts()
            .map_err(SourceError::git(&what))?
            .filter_map(|c| c.ok())
            .filter_map(|c| c.our.or(c.their).or(c.ancestor))
            .map(|entry| String::from_utf8_lossy(&entry.path).into_owned())
            .collect();
        paths.sort();
        paths.dedup();
        return Ok(MergeTarget::Conflict { paths });
    }
    let tree = index.write_tree_to(repo).map_err(SourceError::git(&what))?;
    let tree = repo.find_tree(tree).map_err(SourceError::git(&what))?;
    let when = theirs
        .committer()
        .when()
        .seconds()
        .max(ours.committer().when().seconds());
    let signature = Signature::new(MERGE_AUTHOR.0, MERGE_AUTHOR.1, &Time::new(when, 0))
        .map_err(SourceError::git(&what))?;
    let message = format!("Merge pull request #{number}");
    let commit = repo
        .commit(None, &signature, &signature, &message, &tree, &[&ours, &theirs])
        .map_err(SourceError::git(&what))?;
    Ok(MergeTarget::Plan {
        commit,
        synthetic: true,
    })
}

/// For each of `heads`, whether it is already in the history of `base` (the commit itself or an
/// ancestor): a merged pull request. Only the cache is read; a head it lacks is not merged.
pub fn in_history(repo: &Repository, base: Option<Oid>, heads: &[Oid]) -> Vec<bool> {
    heads
        .iter()
        .map(|head| match base {
            Some(base) => {
                repo.find_commit(*head).is_ok()
                    && (*head == base || descends(repo, base, *head).unwrap_or(false))
            }
            None => false,
        })
        .collect()
}

/// True when `descendant` has `ancestor` in its history.
fn descends(repo: &Repository, descendant: Oid, ancestor: Oid) -> Result<bool, SourceError> {
    repo.graph_descendant_of(descendant, ancestor)
        .map_err(SourceError::git(format!(
            "compare the histories of {descendant} and {ancestor}"
        )))
}
