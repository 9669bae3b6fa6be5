//! What one reconciliation reads of a commit: the clusters changed since the last one, parsed, and
//! the commit that introduced each new operation. The service's pass and `kok plan` read alike.

use std::collections::BTreeSet;

use git2::{Oid, Repository};

use super::tree::Trees;
use super::{attribution, diff, ChangeSet, Introduced, SourceError};
use crate::layout::{self, Parsed};

/// A commit as a reconciliation reads it.
#[derive(Clone, Debug)]
pub struct CommitRead {
    /// Clusters added, changed and removed since the base.
    pub changes: ChangeSet,
    /// The added and changed clusters, parsed at the commit.
    pub parsed: Parsed,
    /// The operations new since the base, each with the commit that introduced it.
    pub introduced: Vec<Introduced>,
    /// On a periodic resync (`full` with a base the commit descends from), the clusters whose
    /// directories did not change since the base: they keep the revision they were reconciled at.
    pub untouched: BTreeSet<String>,
}

/// What changed in a commit, before any cluster is parsed: a pass reads its clusters a part at a time
/// ([`read_clusters`]), so that a fleet-size pass never holds the whole parsed commit.
#[derive(Clone, Debug)]
pub struct CommitChanges {
    /// Clusters added, changed and removed since the base.
    pub changes: ChangeSet,
    /// The added and changed clusters, sorted: the ones to parse.
    pub names: Vec<String>,
    /// As [`CommitRead::untouched`].
    pub untouched: BTreeSet<String>,
}

/// Reads `new` against `old` (against nothing when `full`) under `root`.
pub fn read_commit(
    repo: &Repository,
    old: Option<Oid>,
    new: Oid,
    root: &str,
    full: bool,
) -> Result<CommitRead, SourceError> {
    let CommitChanges {
        changes,
        names,
        untouched,
    } = read_changes(repo, old, new, root, full)?;
    let (parsed, introduced) = read_clusters(repo, old, new, root, &names)?;
    Ok(CommitRead {
        changes,
        parsed,
        introduced,
        untouched,
    })
}

/// The clusters that changed in `new` against `old` (against nothing when `full`) under `root`.
pub fn read_changes(
    repo: &Repository,
    old: Option<Oid>,
    new: Oid,
    root: &str,
    full: bool,
) -> Result<CommitChanges, SourceError> {
    let trees = Trees::new(repo);
    let changes = diff::diff_in(&trees, if full { None } else { old }, new, root)?;
    let mut names: Vec<String> = changes.added.iter().chain(&changes.changed).cloned().collect();
    names.sort();
    names.dedup();
    let untouched = match (full, old) {
        (true, Some(old)) => {
            let since = diff::diff_in(&trees, Some(old), new, root)?;
            if since.full_resync || since.settings_changed {
                BTreeSet::new()
            } else {
                let touched: BTreeSet<&String> = since.added.iter().chain(&since.changed).collect();
                names.iter().filter(|n| !touched.contains(n)).cloned().collect()
            }
        }
        _ => BTreeSet::new(),
    };
    Ok(CommitChanges {
        changes,
        names,
        untouched,
    })
}

/// Parses the clusters `names` at `new`, and the commit that introduced each of their operations not
/// at `old`. On a full resync without a base (kok's first start, a force push) that is every
/// operation, each attributed to the commit that brought its current entry in (walking back at most
/// [`attribution::MAX_ATTRIBUTION_COMMITS`]), so a first start reports a run where `kok history`
/// shows it; operations already in the meta-cluster keep the commit they were created with.
pub fn read_clusters(
    repo: &Repository,
    old: Option<Oid>,
    new: Oid,
    root: &str,
    names: &[String],
) -> Result<(Parsed, Vec<Introduced>), SourceError> {
    let trees = Trees::new(repo);
    let tree = super::GitTree::at_commit_in(&trees, new)?;
    let parsed = layout::parse_clusters(&tree, root, names);
    let introduced = attribution::attribute_parsed(&trees, old, new, root, names, &parsed)?;
    Ok((parsed, introduced))
}

/// The rollout files of a commit, as a reconciliation reads them (see [`read_rollouts`]).
#[derive(Clone, Debug, Default)]
pub struct RolloutsRead {
    /// The valid rollouts, each with its clusters placed in waves.
    pub rollouts: Vec<layout::rollouts::Rollout>,
    /// Names of the rollout files that are present but refused: their runs stay as they are.
    pub broken: BTreeSet<String>,
    /// The problems found in the rollout files.
    pub diagnostics: Vec<layout::Diagnostic>,
    /// Whether the rollouts directory differs between the base and the commit (always, without a base).
    pub changed: bool,
    /// The clusters whose runs of a rollout may change: filled by the pass from the rollouts' writes.
    pub touched: BTreeSet<String>,
}

/// The rollout files beside `root` at `new`, when `new` or `old` has a rollouts directory and either it
/// changed or `clusters_changed`; `None` otherwise (nothing of a rollout to write). Placing clusters in
/// waves needs every cluster's labels, so this parses the whole commit.
pub fn read_rollouts(
    repo: &Repository,
    old: Option<Oid>,
    new: Oid,
    root: &str,
    clusters_changed: bool,
) -> Result<Option<RolloutsRead>, SourceError> {
    let trees = Trees::new(repo);
    let dir = layout::rollouts::rollouts_dir(root);
    let id_at = |commit: Oid| -> Result<Option<Oid>, SourceError> {
        let tree = trees
            .of_commit(commit)
            .map_err(SourceError::git(format!("read the tree of commit {commit}")))?;
        Ok(tree.get_path(std::path::Path::new(&dir)).ok().map(|e| e.id()))
    };
    let now = id_at(new)?;
    let before = match old {
        Some(old) => id_at(old).ok().flatten(),
        None => None,
    };
    let changed = old.is_none() || now != before;
    if (now.is_none() && before.is_none()) || !(changed || clusters_changed) {
        return Ok(None);
    }
    let tree = super::GitTree::at_commit_in(&trees, new)?;
    let parsed = layout::parse_repo(&tree, root);
    let prefix = format!("{dir}/");
    let diagnostics: Vec<layout::Diagnostic> = parsed
        .diagnostics
        .into_iter()
        .filter(|d| d.path.starts_with(&prefix))
        .collect();
    let valid: BTreeSet<&str> = parsed.rollouts.iter().map(|r| r.name.as_str()).collect();
    let broken = diagnostics
        .iter()
        .filter(|d| d.severity == layout::Severity::Error)
        .filter_map(|d| d.path.strip_prefix(&prefix)?.strip_suffix(".yml"))
        .filter(|name| !valid.contains(name))
        .map(str::to_string)
        .collect();
    Ok(Some(RolloutsRead {
        rollouts: parsed.rollouts,
        broken,
        diagnostics,
        changed,
        touched: BTreeSet::new(),
    }))
}
