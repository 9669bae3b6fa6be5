//! Which commit introduced each new operation: its first appearance on the first-parent path
//! from the old commit (exclusive) to the new one, so operations run in commit order.

use std::collections::{BTreeMap, BTreeSet};

use git2::{Oid, Repository};

use super::tree::Trees;
use super::{diff, GitTree, SourceError};
use crate::layout::{self, ClusterDir, Parsed};
use crate::materialize::{operation_digest, Attribution};

/// Longest first-parent path examined; older commits are not looked at (their operations are
/// attributed to the oldest commit examined).
pub const MAX_ATTRIBUTION_COMMITS: usize = 1000;

/// Attribution of the new operations of a range, keyed by `(cluster, operation id)` — the shape
/// [`crate::materialize::RenderContext::attribution`] takes.
pub type Attributions = BTreeMap<(String, String), Attribution>;

/// One new operation and the commit that introduced it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Introduced {
    /// Cluster name.
    pub cluster: String,
    /// Operation id.
    pub id: String,
    /// Digest of the entry (as in the ClusterOperation name).
    pub digest: String,
    /// Full sha of the introducing commit.
    pub commit: String,
    /// 0-based position of that commit on the path, oldest first.
    pub commit_index: usize,
    /// Position of the entry in operations.yml at `new`.
    pub file_index: usize,
}

/// The first-parent path `(old, new]`, oldest first. When `old` is not on it (missing, force push,
/// `None`), the path goes back to the root commit, at most [`MAX_ATTRIBUTION_COMMITS`] long.
pub fn first_parent_path(repo: &Repository, old: Option<Oid>, new: Oid) -> Result<Vec<Oid>, SourceError> {
    let mut path = Vec::new();
    let mut current = Some(new);
    while let Some(id) = current {
        if Some(id) == old || path.len() >= MAX_ATTRIBUTION_COMMITS {
            break;
        }
        path.push(id);
        let commit = repo
            .find_commit(id)
            .map_err(SourceError::git(format!("read commit {id}")))?;
        current = commit.parent_id(0).ok();
    }
    path.reverse();
    Ok(path)
}

/// Parses the named clusters (only) of `commit`.
pub fn parse_at(
    trees: &Trees<'_>,
    commit: Oid,
    root: &str,
    clusters: &[String],
) -> Result<Parsed, SourceError> {
    let tree = GitTree::at_commit_in(trees, commit)?;
    Ok(layout::parse_clusters(&tree, root, clusters))
}

/// For every operation of `clusters` present at `new` but not at `old` (same id and digest), the
/// commit that introduced it, in commit order then file order.
pub fn attribute(
    repo: &Repository,
    old: Option<Oid>,
    new: Oid,
    root: &str,
    clusters: &[String],
) -> Result<Vec<Introduced>, SourceError> {
    if clusters.is_empty() {
        return Ok(Vec::new());
    }
    let trees = Trees::new(repo);
    let target = parse_at(&trees, new, root, clusters)?;
    attribute_parsed(&trees, old, new, root, clusters, &target)
}

/// [`attribute`] for a caller that has already parsed `clusters` at `new` (the reconcile pass does),
/// so they are not parsed twice.
pub fn attribute_parsed(
    trees: &Trees<'_>,
    old: Option<Oid>,
    new: Oid,
    root: &str,
    clusters: &[String],
    target: &Parsed,
) -> Result<Vec<Introduced>, SourceError> {
    // A periodic resync of the commit already reconciled: nothing is new, nothing is parsed again.
    if clusters.is_empty() || old == Some(new) {
        return Ok(Vec::new());
    }
    let repo = trees.repo();
    let base_ops: BTreeSet<(String, String, String)> = match old.filter(|o| repo.find_commit(*o).is_ok()) {
        Some(o) => op_keys(&parse_at(trees, o, root, clusters)?.clusters).collect(),
        None => BTreeSet::new(),
    };
    // (cluster, id, digest) -> file index at `new`, for the operations still to attribute.
    let mut pending: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    for cluster in &target.clusters {
        for op in &cluster.operations {
            let key = (cluster.name.clone(), op.id.clone(), operation_digest(&op.entry));
            if !base_ops.contains(&key) {
                pending.insert(key, op.index);
            }
        }
    }
    let path = first_parent_path(repo, old, new)?;
    let mut found = Vec::new();
    let mut last_subtree: BTreeMap<String, Option<Oid>> = BTreeMap::new();
    for (index, commit) in path.iter().enumerate() {
        if pending.is_empty() {
            break;
        }
        let waiting: BTreeSet<String> = pending.keys().map(|(c, _, _)| c.clone()).collect();
        let tree = trees
            .of_commit(*commit)
            .map_err(SourceError::git(format!("read the tree of {commit}")))?;
        let root_id = diff::root_id(&tree, root);
        let mut to_parse = Vec::new();
        for cluster in waiting {
            let id = root_id.and_then(|r| trees.entry_in(r, &cluster).ok().flatten().map(|(id, _)| id));
            if last_subtree.get(&cluster) != Some(&id) && id.is_some() {
                to_parse.push(cluster.clone());
            }
            last_subtree.insert(cluster, id);
        }
        if to_parse.is_empty() {
            continue;
        }
        // The last commit is `new` itself, already parsed by the caller.
        let present: BTreeSet<_> = if *commit == new {
            let at_new = target.clusters.iter().filter(|c| to_parse.contains(&c.name));
            at_new.flat_map(cluster_op_keys).collect()
        } else {
            op_keys(&parse_at(trees, *commit, root, &to_parse)?.clusters).collect()
        };
        let mut hits: Vec<_> = pending.keys().filter(|k| present.contains(*k)).cloned().collect();
        hits.sort_by_key(|k| pending.get(k).copied().unwrap_or_default());
        for key in hits {
            if let Some(file_index) = pending.remove(&key) {
                let (cluster, id, digest) = key;
                found.push(Introduced {
                    cluster,
                    id,
                    digest,
                    commit: commit.to_string(),
                    commit_index: index,
                    file_index,
                });
            }
        }
    }
    // Entries whose introduction lies beyond the examined path: the oldest commit examined.
    if let Some(first) = path.first() {
        for ((cluster, id, digest), file_index) in pending {
            found.push(Introduced {
                cluster,
                id,
                digest,
                commit: first.to_string(),
                commit_index: 0,
                file_index,
            });
        }
    }
    found.sort_by(|a, b| {
        (a.commit_index, &a.cluster, a.file_index).cmp(&(b.commit_index, &b.cluster, b.file_index))
    });
    Ok(found)
}

/// The attribution map a [`crate::materialize::RenderContext`] takes.
pub fn to_render_attribution(introduced: &[Introduced]) -> Attributions {
    introduced
        .iter()
        .map(|i| {
            (
                (i.cluster.clone(), i.id.clone()),
                Attribution {
                    commit: i.commit.clone(),
                    commit_index: i.commit_index,
                },
            )
        })
        .collect()
}

fn op_keys(clusters: &[ClusterDir]) -> impl Iterator<Item = (String, String, String)> + '_ {
    clusters.iter().flat_map(cluster_op_keys)
}

fn cluster_op_keys(c: &ClusterDir) -> impl Iterator<Item = (String, String, String)> + '_ {
    c.operations
        .iter()
        .map(move |op| (c.name.clone(), op.id.clone(), operation_digest(&op.entry)))
}
