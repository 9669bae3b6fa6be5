//! The changelog of one cluster: the commits that touched its directory, newest first, as data.

use std::path::Path;

use git2::{DiffOptions, Oid, Repository, Sort};

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
    let mut walk = repo.revwalk().map_err(SourceError::git("walk the history"))?;
    walk.push(tip)
        .map_err(SourceError::git(format!("walk the history from {tip}")))?;
    walk.simplify_first_parent()
        .map_err(SourceError::git("walk the first-parent history"))?;
    walk.set_sorting(Sort::TOPOLOGICAL)
        .map_err(SourceError::git("sort the history"))?;
    let subtree_id = |tree: &git2::Tree<'_>| tree.get_path(Path::new(&dir)).ok().map(|e| e.id());
    let mut entries = Vec::new();
    let mut unchanged = Vec::new();
    for oid in walk {
        if entries.len() >= limit {
            break;
        }
        let oid = oid.map_err(SourceError::git("walk the history"))?;
        let commit = repo
            .find_commit(oid)
            .map_err(SourceError::git(format!("read commit {oid}")))?;
        let tree = commit
            .tree()
            .map_err(SourceError::git(format!("read the tree of {oid}")))?;
        let parent_tree = match commit.parent(0) {
            Ok(p) => Some(
                p.tree()
                    .map_err(SourceError::git(format!("read the tree of {}", p.id())))?,
            ),
            Err(_) => None,
        };
        let now = subtree_id(&tree);
        let before = parent_tree.as_ref().and_then(subtree_id);
        if now == before {
            unchanged.push(oid);
            continue;
        }
        let files = touched_files(repo, parent_tree.as_ref(), &tree, &dir)?;
        entries.push(entry(&commit, files, std::mem::take(&mut unchanged)));
    }
    Ok(entries)
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
