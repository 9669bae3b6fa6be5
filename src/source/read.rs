//! What one reconciliation reads of a commit: the clusters changed since the last one, parsed, and
//! the commit that introduced each new operation. The service's pass and `kok plan` read alike.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

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

/// What rollout files may refer to at one commit: every cluster directory, with its labels when it is
/// valid. Kept from one pass to the next (see [`read_rollouts`]).
#[derive(Clone, Debug)]
struct FleetMemo {
    /// The repository, root and commit it describes.
    key: (std::path::PathBuf, String, Oid),
    /// Every cluster directory: its labels when valid, `None` when refused.
    clusters: BTreeMap<String, Option<BTreeMap<String, String>>>,
}

/// The fleet of the last commit whose rollouts were read, so that the next pass parses only the
/// clusters that changed since (one slot for the process, like the recent tree listings).
static FLEET_MEMO: Mutex<Option<FleetMemo>> = Mutex::new(None);

impl FleetMemo {
    fn of(parsed: &Parsed) -> BTreeMap<String, Option<BTreeMap<String, String>>> {
        let valid = parsed
            .clusters
            .iter()
            .map(|c| (c.name.clone(), Some(c.settings.labels.clone())));
        let invalid = parsed.invalid.iter().map(|n| (n.clone(), None));
        valid.chain(invalid).collect()
    }
}

/// The rollout files beside `root` at `new`, when `new` or `old` has a rollouts directory and either it
/// changed or a cluster did (`changes`); `None` otherwise (nothing of a rollout to write).
///
/// Placing clusters in waves needs every cluster's labels: the first call parses the whole commit; a
/// later one whose base is the commit the last call read parses only the clusters that changed since.
pub fn read_rollouts(
    repo: &Repository,
    old: Option<Oid>,
    new: Oid,
    root: &str,
    changes: &CommitChanges,
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
    let clusters_changed = !changes.names.is_empty() || !changes.changes.removed.is_empty();
    if (now.is_none() && before.is_none()) || !(changed || clusters_changed) {
        return Ok(None);
    }
    let tree = super::GitTree::at_commit_in(&trees, new)?;
    let clusters = fleet_at(repo, &tree, old, new, root, changes);
    Ok(Some(rollouts_against(&tree, root, &clusters, changed)))
}

/// The rollout files at `commit` beside the cluster root `root`, each cluster placed in its wave, as
/// `kok plan` reads them; `None` without a commit or a rollouts directory. The whole commit is parsed
/// (placing clusters needs every cluster's labels), and the pass's memo of the fleet is left alone.
pub fn rollouts_at(
    repo: &Repository,
    commit: Option<Oid>,
    root: &str,
) -> Result<Option<RolloutsRead>, SourceError> {
    let dir = layout::rollouts::rollouts_dir(root);
    let Some(commit) = commit.filter(|c| has_dir(repo, *c, &dir)) else {
        return Ok(None);
    };
    let tree = super::GitTree::at_commit(repo, commit)?;
    let clusters = FleetMemo::of(&layout::parse_repo(&tree, root));
    Ok(Some(rollouts_against(&tree, root, &clusters, true)))
}

/// Whether `commit` has the directory `dir`.
pub fn has_dir(repo: &Repository, commit: Oid, dir: &str) -> bool {
    repo.find_commit(commit)
        .and_then(|c| c.tree())
        .is_ok_and(|t| t.get_path(std::path::Path::new(dir)).is_ok())
}

/// The rollout files of `tree` placed against `clusters` (every cluster directory, with its labels when
/// valid): the valid rollouts, the broken files' names and the diagnostics of the rollouts directory.
fn rollouts_against(
    tree: &super::GitTree<'_>,
    root: &str,
    clusters: &BTreeMap<String, Option<BTreeMap<String, String>>>,
    changed: bool,
) -> RolloutsRead {
    let fleet = layout::rollouts::Fleet {
        names: clusters.keys().map(String::as_str).collect(),
        labels: clusters
            .iter()
            .filter_map(|(n, l)| Some((n.as_str(), l.as_ref()?)))
            .collect(),
    };
    let mut diagnostics = Vec::new();
    let rollouts = layout::rollouts::parse_rollouts(tree, root, &fleet, &mut diagnostics);
    diagnostics.sort();
    let prefix = format!("{}/", layout::rollouts::rollouts_dir(root));
    let valid: BTreeSet<&str> = rollouts.iter().map(|r| r.name.as_str()).collect();
    let broken = diagnostics
        .iter()
        .filter(|d| d.severity == layout::Severity::Error)
        .filter_map(|d| d.path.strip_prefix(&prefix)?.strip_suffix(".yml"))
        .filter(|name| !valid.contains(name))
        .map(str::to_string)
        .collect();
    RolloutsRead {
        rollouts,
        broken,
        diagnostics,
        changed,
        touched: BTreeSet::new(),
    }
}

/// Every cluster directory at `new` with its labels when valid: from the memo of `old` and the clusters
/// that changed since, or from the whole commit.
fn fleet_at(
    repo: &Repository,
    tree: &super::GitTree<'_>,
    old: Option<Oid>,
    new: Oid,
    root: &str,
    changes: &CommitChanges,
) -> BTreeMap<String, Option<BTreeMap<String, String>>> {
    let path = repo.path().to_path_buf();
    let mut memo = FLEET_MEMO.lock().unwrap_or_else(|p| p.into_inner());
    let base = memo
        .take()
        .filter(|m| old.is_some_and(|old| m.key == (path.clone(), root.to_string(), old)));
    let clusters = match base {
        Some(FleetMemo { mut clusters, .. }) if !changes.changes.full_resync => {
            let parsed = layout::parse_clusters(tree, root, &changes.names);
            for name in changes.names.iter().chain(&changes.changes.removed) {
                clusters.remove(name);
            }
            clusters.extend(FleetMemo::of(&parsed));
            clusters
        }
        _ => FleetMemo::of(&layout::parse_repo(tree, root)),
    };
    *memo = Some(FleetMemo {
        key: (path, root.to_string(), new),
        clusters: clusters.clone(),
    });
    clusters
}
