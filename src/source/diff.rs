//! Commit-to-commit diff into added, changed and removed cluster directories, by tree ids only.

use std::collections::BTreeMap;
use std::path::Path;

use git2::{ObjectType, Oid, Repository, Tree};

use super::tree::kind_of;
use super::SourceError;
use crate::layout::EntryKind;

/// Name of the repository-wide settings file at the top of the tree.
pub const REPO_SETTINGS_FILE: &str = "kok.yml";

/// The cluster directories a commit range touched.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ChangeSet {
    /// Directories present in `new` only, sorted.
    pub added: Vec<String>,
    /// Directories present in both whose tree differs (or all of them when `kok.yml` changed), sorted.
    pub changed: Vec<String>,
    /// Directories present in `old` only, sorted.
    pub removed: Vec<String>,
    /// True when `old` was missing or not an ancestor of `new`: every cluster of `new` is listed in
    /// `added` or `changed`, and the caller must also prune what `new` no longer holds.
    pub full_resync: bool,
    /// True when top-level `kok.yml` differs.
    pub settings_changed: bool,
}

impl ChangeSet {
    /// Added and changed clusters, sorted: the ones to parse and render.
    pub fn touched(&self) -> Vec<String> {
        let mut all: Vec<String> = self.added.iter().chain(&self.changed).cloned().collect();
        all.sort();
        all
    }

    /// True when nothing under the root or in `kok.yml` changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.changed.is_empty() && self.removed.is_empty() && !self.full_resync
    }
}

/// Diffs `old` → `new` under `root`. When `old` is `None`, missing from the cache, or not an ancestor of
/// `new` (a force push), the result is a full resync.
pub fn diff(repo: &Repository, old: Option<Oid>, new: Oid, root: &str) -> Result<ChangeSet, SourceError> {
    let new_tree = commit_tree(repo, new)?;
    let base = old.and_then(|o| repo.find_commit(o).and_then(|c| c.tree()).ok().map(|t| (o, t)));
    let Some((old, old_tree)) = base else {
        let clusters = cluster_entries(repo, &new_tree, root)?;
        return Ok(ChangeSet {
            added: clusters.into_keys().collect(),
            full_resync: true,
            settings_changed: true,
            ..ChangeSet::default()
        });
    };
    let fast_forward = old == new
        || repo
            .graph_descendant_of(new, old)
            .map_err(SourceError::git(format!("compare {old} with {new}")))?;
    let mut changes = diff_trees(repo, &old_tree, &new_tree, root)?;
    if !fast_forward {
        changes.full_resync = true;
        let clusters = cluster_entries(repo, &new_tree, root)?;
        let added: std::collections::BTreeSet<&String> = changes.added.iter().collect();
        changes.changed = clusters
            .into_keys()
            .filter(|name| !added.contains(name))
            .collect();
    }
    Ok(changes)
}

fn commit_tree(repo: &Repository, commit: Oid) -> Result<Tree<'_>, SourceError> {
    repo.find_commit(commit)
        .and_then(|c| c.tree())
        .map_err(SourceError::git(format!("read commit {commit}")))
}

/// Compares two trees: only the top level, the root directory and the ids of its entries are read.
pub fn diff_trees(
    repo: &Repository,
    old: &Tree<'_>,
    new: &Tree<'_>,
    root: &str,
) -> Result<ChangeSet, SourceError> {
    let settings_id = |t: &Tree<'_>| t.get_name(REPO_SETTINGS_FILE).map(|e| e.id());
    let settings_changed = settings_id(old) != settings_id(new);
    let old_root = root_id(old, root);
    let new_root = root_id(new, root);
    let mut changes = ChangeSet {
        settings_changed,
        ..ChangeSet::default()
    };
    if old_root == new_root && !settings_changed {
        return Ok(changes);
    }
    let before = cluster_entries(repo, old, root)?;
    let after = cluster_entries(repo, new, root)?;
    for (name, id) in &after {
        match before.get(name) {
            None => changes.added.push(name.clone()),
            Some(old_id) if old_id != id || settings_changed => changes.changed.push(name.clone()),
            Some(_) => {}
        }
    }
    changes.removed = before
        .keys()
        .filter(|name| !after.contains_key(*name))
        .cloned()
        .collect();
    Ok(changes)
}

/// Id of the tree at `root` inside `tree`, if it is a directory.
fn root_id(tree: &Tree<'_>, root: &str) -> Option<Oid> {
    if root.is_empty() {
        return Some(tree.id());
    }
    tree.get_path(Path::new(root))
        .ok()
        .filter(|e| e.kind() == Some(ObjectType::Tree))
        .map(|e| e.id())
}

/// Cluster directory candidates under `root`: every entry that is not a regular file, name → (id, mode).
pub(crate) fn cluster_entries(
    repo: &Repository,
    tree: &Tree<'_>,
    root: &str,
) -> Result<BTreeMap<String, (Oid, i32)>, SourceError> {
    let Some(id) = root_id(tree, root) else {
        return Ok(BTreeMap::new());
    };
    let root_tree = repo
        .find_tree(id)
        .map_err(SourceError::git(format!("read the tree of {root}/")))?;
    Ok(root_tree
        .iter()
        .filter(|e| kind_of(e.filemode()) != EntryKind::File)
        .map(|e| {
            (
                String::from_utf8_lossy(e.name_bytes()).into_owned(),
                (e.id(), e.filemode()),
            )
        })
        .collect())
}
