//! Commit-to-commit diff into added, changed and removed cluster directories, by tree ids only.

use std::collections::BTreeMap;
use std::path::Path;

use git2::{ObjectType, Oid, Repository, Tree};

use super::tree::{kind_of, Trees};
use super::SourceError;
use crate::layout::EntryKind;

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
    diff_in(&Trees::new(repo), old, new, root)
}

/// [`diff`], reading tree objects through `trees`.
pub fn diff_in(trees: &Trees<'_>, old: Option<Oid>, new: Oid, root: &str) -> Result<ChangeSet, SourceError> {
    let repo = trees.repo();
    let new_tree = commit_tree(trees, new)?;
    let base = old.and_then(|o| trees.of_commit(o).ok().map(|t| (o, t)));
    let Some((old, old_tree)) = base else {
        let clusters = cluster_entries(trees, &new_tree, root)?;
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
    let mut changes = diff_trees(trees, &old_tree, &new_tree, root)?;
    if !fast_forward {
        changes.full_resync = true;
        let clusters = cluster_entries(trees, &new_tree, root)?;
        let added: std::collections::BTreeSet<&String> = changes.added.iter().collect();
        changes.changed = clusters
            .into_keys()
            .filter(|name| !added.contains(name))
            .collect();
    }
    Ok(changes)
}

fn commit_tree<'r>(trees: &Trees<'r>, commit: Oid) -> Result<Tree<'r>, SourceError> {
    trees
        .of_commit(commit)
        .map_err(SourceError::git(format!("read commit {commit}")))
}

/// Compares two trees: only the top level, the root directory and the ids of its entries are read.
pub fn diff_trees(
    trees: &Trees<'_>,
    old: &Tree<'_>,
    new: &Tree<'_>,
    root: &str,
) -> Result<ChangeSet, SourceError> {
    // kok.yml sits beside the cluster root (crate::layout::settings_path).
    let settings = crate::layout::settings_path(root);
    let settings_id = |t: &Tree<'_>| t.get_path(Path::new(&settings)).ok().map(|e| e.id());
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
    let before = root_tree(trees, old_root, root)?;
    let after = root_tree(trees, new_root, root)?;
    // Both listings are in git's tree order, so one merge pass compares them without building maps.
    let mut old_entries = before.iter().flat_map(|t| t.iter()).filter(is_cluster).peekable();
    let mut new_entries = after.iter().flat_map(|t| t.iter()).filter(is_cluster).peekable();
    loop {
        let order = match (old_entries.peek(), new_entries.peek()) {
            (None, None) => break,
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some(o), Some(n)) => git_order(o).cmp(git_order(n)),
        };
        match order {
            std::cmp::Ordering::Less => {
                if let Some(o) = old_entries.next() {
                    changes.removed.push(entry_name(&o));
                }
            }
            std::cmp::Ordering::Greater => {
                if let Some(n) = new_entries.next() {
                    changes.added.push(entry_name(&n));
                }
            }
            std::cmp::Ordering::Equal => {
                if let (Some(o), Some(n)) = (old_entries.next(), new_entries.next()) {
                    if o.id() != n.id() || o.filemode() != n.filemode() || settings_changed {
                        changes.changed.push(entry_name(&n));
                    }
                }
            }
        }
    }
    changes.added.sort();
    changes.changed.sort();
    changes.removed.sort();
    Ok(changes)
}

/// The key git sorts tree entries by: the name, with a `/` after directory names.
fn git_order<'a>(entry: &'a git2::TreeEntry<'_>) -> impl Iterator<Item = u8> + 'a {
    let slash = (kind_of(entry.filemode()) == EntryKind::Dir).then_some(b'/');
    entry.name_bytes().iter().copied().chain(slash)
}

fn is_cluster(entry: &git2::TreeEntry<'_>) -> bool {
    kind_of(entry.filemode()) != EntryKind::File
}

fn entry_name(entry: &git2::TreeEntry<'_>) -> String {
    String::from_utf8_lossy(entry.name_bytes()).into_owned()
}

fn root_tree<'r>(trees: &Trees<'r>, id: Option<Oid>, root: &str) -> Result<Option<Tree<'r>>, SourceError> {
    id.map(|id| {
        trees
            .find(id)
            .map_err(SourceError::git(format!("read the tree of {root}/")))
    })
    .transpose()
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
    trees: &Trees<'_>,
    tree: &Tree<'_>,
    root: &str,
) -> Result<BTreeMap<String, (Oid, i32)>, SourceError> {
    let Some(id) = root_id(tree, root) else {
        return Ok(BTreeMap::new());
    };
    let root_tree = trees
        .find(id)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A repository in a temp dir and a builder of top-level trees with `clusters/` entries.
    fn tree(repo: &Repository, entries: &[(&str, i32, &str)]) -> Oid {
        let mut clusters = repo.treebuilder(None).unwrap();
        for (name, mode, content) in entries {
            let id = if *mode == 0o040000 {
                let blob = repo.blob(content.as_bytes()).unwrap();
                let mut sub = repo.treebuilder(None).unwrap();
                sub.insert("hosts.yml", blob, 0o100644).unwrap();
                sub.write().unwrap()
            } else {
                repo.blob(content.as_bytes()).unwrap()
            };
            clusters.insert(name, id, *mode).unwrap();
        }
        let mut top = repo.treebuilder(None).unwrap();
        top.insert("clusters", clusters.write().unwrap(), 0o040000)
            .unwrap();
        top.write().unwrap()
    }

    #[test]
    fn merge_follows_git_order_with_symlinks_next_to_directories() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path()).unwrap();
        let old = tree(
            &repo,
            &[("a", 0o040000, "1"), ("a-b", 0o120000, "a"), ("c", 0o040000, "1")],
        );
        let new = tree(
            &repo,
            &[
                ("a", 0o040000, "2"),
                ("a-b", 0o120000, "a"),
                ("b", 0o040000, "1"),
                ("README.md", 0o100644, "x"),
            ],
        );
        let (old, new) = (repo.find_tree(old).unwrap(), repo.find_tree(new).unwrap());
        let changes = diff_trees(&Trees::new(&repo), &old, &new, "clusters").unwrap();
        assert_eq!(changes.changed, vec!["a"]);
        assert_eq!(changes.added, vec!["b"]);
        assert_eq!(changes.removed, vec!["c"]);
    }
}
