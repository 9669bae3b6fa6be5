//! The changelog of one cluster: the commits that touched its directory, newest first, as data.

use std::path::Path;

use git2::{DiffOptions, Oid, Repository};

use super::SourceError;

/// One commit that touched a cluster directory.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HistoryEntry {
    /// Full commit id.
    pub commit: String,
    /// First 8 hex digits.
    pub short: String,
    /// Commit time, RFC 3339 in UTC.
    pub date: String,
    /// Author name.
    pub author: String,
    /// Author email.
    pub email: String,
    /// First line of the message.
    pub subject: String,
    /// Files under the cluster directory the commit added, changed or deleted, relative to it, sorted.
    pub files: Vec<String>,
    /// The later first-parent commits, newest first, up to the next one that touched the cluster (or
    /// the tip): they left the cluster as this commit made it, so a run they carry the report of ran
    /// what this commit brought in.
    #[serde(skip)]
    pub unchanged_after: Vec<Oid>,
}

/// Commits reachable from `tip` whose tree at `<root>/<cluster>` differs from their first parent's,
/// newest first, at most `limit`, each with the later commits that left the cluster alone. Only
/// first-parent history is walked (merges count as one change).
pub fn cluster_history(
    repo: &Repository,
    tip: Oid,
    root: &str,
    cluster: &str,
    limit: usize,
) -> Result<Vec<HistoryEntry>, SourceError> {
    let dir = if root.is_empty() {
        cluster.to_string()
    } else {
        format!("{root}/{cluster}")
    };
    let mut lookup = SubtreeLookup::new(root, cluster);
    let mut entries = Vec::new();
    let mut unchanged = Vec::new();
    // The first-parent chain, each tree read once: a commit's parent is the next commit looked at.
    let mut current = Some(read_commit(repo, tip)?);
    let mut current_subtree = match &current {
        Some((_, tree)) => lookup.id(repo, tree),
        None => None,
    };
    while let Some((commit, tree)) = current.take() {
        if entries.len() >= limit {
            break;
        }
        let parent = match commit.parent_id(0) {
            Ok(id) => Some(read_commit(repo, id)?),
            Err(_) => None,
        };
        let parent_subtree = match &parent {
            Some((_, parent_tree)) => lookup.id(repo, parent_tree),
            None => None,
        };
        if current_subtree == parent_subtree {
            unchanged.push(commit.id());
        } else {
            let files = touched_files(repo, parent.as_ref().map(|(_, t)| t), &tree, &dir)?;
            entries.push(entry(&commit, files, std::mem::take(&mut unchanged)));
        }
        current = parent;
        current_subtree = parent_subtree;
    }
    Ok(entries)
}

fn read_commit(repo: &Repository, id: Oid) -> Result<(git2::Commit<'_>, git2::Tree<'_>), SourceError> {
    let commit = repo
        .find_commit(id)
        .map_err(SourceError::git(format!("read commit {id}")))?;
    let tree = commit
        .tree()
        .map_err(SourceError::git(format!("read the tree of {id}")))?;
    Ok((commit, tree))
}

/// Finds `<root>/<cluster>` in commit trees, reading the root directory's tree (a thousand entries in
/// a fleet) only when its id differs from the one looked at last.
struct SubtreeLookup<'a> {
    root: &'a str,
    cluster: &'a str,
    /// The root directory's id last looked at, and the cluster's id in it.
    last: Option<(Oid, Option<Oid>)>,
}

impl<'a> SubtreeLookup<'a> {
    fn new(root: &'a str, cluster: &'a str) -> Self {
        SubtreeLookup {
            root,
            cluster,
            last: None,
        }
    }

    fn id(&mut self, repo: &Repository, tree: &git2::Tree<'_>) -> Option<Oid> {
        let root_id = if self.root.is_empty() {
            tree.id()
        } else {
            tree.get_path(Path::new(self.root)).ok()?.id()
        };
        match self.last {
            Some((id, cluster)) if id == root_id => cluster,
            _ => {
                let cluster = repo
                    .find_tree(root_id)
                    .ok()
                    .and_then(|t| t.get_name(self.cluster).map(|e| e.id()));
                self.last = Some((root_id, cluster));
                cluster
            }
        }
    }
}

fn touched_files(
    repo: &Repository,
    old: Option<&git2::Tree<'_>>,
    new: &git2::Tree<'_>,
    dir: &str,
) -> Result<Vec<String>, SourceError> {
    let mut options = DiffOptions::new();
    options.pathspec(format!("{dir}/"));
    let diff = repo
        .diff_tree_to_tree(old, Some(new), Some(&mut options))
        .map_err(SourceError::git(format!("diff {dir}")))?;
    let prefix = format!("{dir}/");
    let mut files: Vec<String> = diff
        .deltas()
        .filter_map(|d| {
            d.new_file()
                .path()
                .or_else(|| d.old_file().path())
                .map(|p| p.to_string_lossy().into_owned())
        })
        .map(|p| p.strip_prefix(&prefix).map(str::to_string).unwrap_or(p))
        .collect();
    files.sort();
    files.dedup();
    Ok(files)
}

fn entry(commit: &git2::Commit<'_>, files: Vec<String>, unchanged_after: Vec<Oid>) -> HistoryEntry {
    let id = commit.id().to_string();
    let author = commit.author();
    let date = jiff::Timestamp::from_second(commit.time().seconds())
        .map(|t| t.to_string())
        .unwrap_or_else(|_| commit.time().seconds().to_string());
    HistoryEntry {
        short: id[..8].to_string(),
        commit: id,
        date,
        author: author.name().unwrap_or_default().to_string(),
        email: author.email().unwrap_or_default().to_string(),
        subject: commit.summary().ok().flatten().unwrap_or_default().to_string(),
        files,
        unchanged_after,
    }
}
