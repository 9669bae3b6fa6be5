//! Commit-to-commit diff into added, changed and removed cluster directories, by tree ids only.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use git2::{ObjectType, Oid, Repository, Tree};

use super::tree::{kind_of, Listing, Trees};
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
    let before = root_listing(trees, old_root, root)?;
    let after = root_listing(trees, new_root, root)?;
    // Both listings are in git's tree order, so one merge pass compares them without building maps.
    let mut old_entries = (0..before.len()).filter(|i| is_cluster(&before, *i)).peekable();
    let mut new_entries = (0..after.len()).filter(|i| is_cluster(&after, *i)).peekable();
    loop {
        let order = match (old_entries.peek(), new_entries.peek()) {
            (None, None) => break,
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some(o), Some(n)) => before.order(*o, &after, *n),
        };
        match order {
            std::cmp::Ordering::Less => {
                if let Some(o) = old_entries.next() {
                    changes.removed.push(entry_name(&before, o));
                }
            }
            std::cmp::Ordering::Greater => {
                if let Some(n) = new_entries.next() {
                    changes.added.push(entry_name(&after, n));
                }
            }
            std::cmp::Ordering::Equal => {
                if let (Some(o), Some(n)) = (old_entries.next(), new_entries.next()) {
                    if before.id_mode(o) != after.id_mode(n) || settings_changed {
                        changes.changed.push(entry_name(&after, n));
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

fn is_cluster(listing: &Listing, index: usize) -> bool {
    kind_of(listing.id_mode(index).1) != EntryKind::File
}

fn entry_name(listing: &Listing, index: usize) -> String {
    String::from_utf8_lossy(listing.name(index)).into_owned()
}

/// The entries of the root directory `id`; none when there is no root directory.
fn root_listing(trees: &Trees<'_>, id: Option<Oid>, root: &str) -> Result<Arc<Listing>, SourceError> {
    match id {
        Some(id) => trees
            .listing(id)
            .map_err(SourceError::git(format!("read the tree of {root}/"))),
        None => Ok(Arc::default()),
    }
}

/// Id of the tree at `root` inside `tree`, if it is a directory.
pub(crate) fn root_id(tree: &Tree<'_>, root: &str) -> Option<Oid> {
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
    let listing = trees
        .listing(id)
        .map_err(SourceError::git(format!("read the tree of {root}/")))?;
    Ok((0..listing.len())
        .filter(|i| is_cluster(&listing, *i))
        .map(|i| (entry_name(&listing, i), listing.id_mode(i)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::tree::RecentListings;

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

    /// The change set of two root trees worked out by name from libgit2's own entries. An entry that
    /// turns from a directory into something else (or back) is another entry in git's order: it is
    /// removed and added.
    fn by_name(repo: &Repository, old: Oid, new: Oid) -> (Vec<String>, Vec<String>, Vec<String>) {
        let clusters = |top: Oid| -> BTreeMap<(String, bool), (Oid, i32)> {
            let top = repo.find_tree(top).unwrap();
            let root = repo.find_tree(top.get_name("clusters").unwrap().id()).unwrap();
            root.iter()
                .filter(|e| kind_of(e.filemode()) != EntryKind::File)
                .map(|e| {
                    let dir = kind_of(e.filemode()) == EntryKind::Dir;
                    ((e.name().unwrap().to_string(), dir), (e.id(), e.filemode()))
                })
                .collect()
        };
        let (before, after) = (clusters(old), clusters(new));
        let names = |keys: Vec<&(String, bool)>| -> Vec<String> {
            let mut names: Vec<String> = keys.into_iter().map(|(name, _)| name.clone()).collect();
            names.sort();
            names
        };
        let added = names(after.keys().filter(|k| !before.contains_key(*k)).collect());
        let removed = names(before.keys().filter(|k| !after.contains_key(*k)).collect());
        let changed = names(
            after
                .iter()
                .filter(|(k, v)| before.get(*k).is_some_and(|b| b != *v))
                .map(|(k, _)| k)
                .collect(),
        );
        (added, changed, removed)
    }

    #[test]
    fn diff_through_kept_listings_equals_the_diff_by_name_whichever_trees_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path()).unwrap();
        let tops = [
            tree(
                &repo,
                &[("a", 0o040000, "1"), ("a-b", 0o120000, "a"), ("c", 0o040000, "1")],
            ),
            tree(
                &repo,
                &[
                    ("a", 0o040000, "2"),
                    ("a-b", 0o040000, "a"),
                    ("a.b", 0o100644, "f"),
                    ("c", 0o040000, "1"),
                ],
            ),
            tree(
                &repo,
                &[("a-b", 0o120000, "b"), ("b", 0o040000, "1"), ("d", 0o040000, "1")],
            ),
            tree(&repo, &[]),
        ];
        let recent = RecentListings::new(2);
        // Every order of looks, so the kept listings are sometimes the old tree, sometimes the new
        // one, sometimes neither.
        for (i, old) in tops.iter().enumerate() {
            for (j, new) in tops.iter().enumerate() {
                let expected = by_name(&repo, *old, *new);
                for trees in [
                    Trees::with_recent(&repo, &recent),
                    Trees::with_recent(&repo, &RecentListings::new(0)),
                ] {
                    let (o, n) = (repo.find_tree(*old).unwrap(), repo.find_tree(*new).unwrap());
                    let changes = diff_trees(&trees, &o, &n, "clusters").unwrap();
                    assert_eq!(
                        (changes.added, changes.changed, changes.removed),
                        expected,
                        "trees {i} -> {j}"
                    );
                }
            }
        }
    }
}
