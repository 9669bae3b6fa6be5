//! [`GitTree`]: the layout parser's [`TreeReader`] over a commit's tree in the bare cache.

use std::path::Path;

use git2::{ObjectType, Oid, Repository, Tree};

use super::SourceError;
use crate::layout::{Entry, EntryKind, ReadError, TreeReader};

/// Reads directories and blobs of one tree; nothing is checked out.
pub struct GitTree<'r> {
    repo: &'r Repository,
    root: Tree<'r>,
}

impl std::fmt::Debug for GitTree<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitTree").field("tree", &self.root.id()).finish()
    }
}

impl<'r> GitTree<'r> {
    /// The tree of `commit`.
    pub fn at_commit(repo: &'r Repository, commit: Oid) -> Result<GitTree<'r>, SourceError> {
        let root = repo
            .find_commit(commit)
            .and_then(|c| c.tree())
            .map_err(SourceError::git(format!("read the tree of commit {commit}")))?;
        Ok(GitTree { repo, root })
    }

    /// The tree `tree`.
    pub fn at_tree(repo: &'r Repository, tree: Oid) -> Result<GitTree<'r>, SourceError> {
        let root = repo
            .find_tree(tree)
            .map_err(SourceError::git(format!("read tree {tree}")))?;
        Ok(GitTree { repo, root })
    }

    /// Id of the root tree.
    pub fn id(&self) -> Oid {
        self.root.id()
    }

    fn io(path: &str, e: git2::Error) -> ReadError {
        ReadError::Io {
            path: path.to_string(),
            message: e.message().to_string(),
        }
    }

    /// The tree at `path` (the root for ""), or `NotFound`.
    fn subtree(&self, path: &str) -> Result<Tree<'r>, ReadError> {
        if path.is_empty() {
            return Ok(self.root.clone());
        }
        let entry = self.root.get_path(Path::new(path)).map_err(|e| match e.code() {
            git2::ErrorCode::NotFound => ReadError::NotFound {
                path: path.to_string(),
            },
            _ => Self::io(path, e),
        })?;
        if entry.kind() != Some(ObjectType::Tree) {
            return Err(ReadError::Io {
                path: path.to_string(),
                message: "not a directory".to_string(),
            });
        }
        self.repo.find_tree(entry.id()).map_err(|e| Self::io(path, e))
    }
}

/// Kind of a tree entry from its file mode.
pub(crate) fn kind_of(filemode: i32) -> EntryKind {
    match filemode & 0o170000 {
        0o040000 => EntryKind::Dir,
        0o100000 => EntryKind::File,
        0o120000 => EntryKind::Symlink,
        _ => EntryKind::Other,
    }
}

impl TreeReader for GitTree<'_> {
    fn list(&self, path: &str) -> Result<Vec<Entry>, ReadError> {
        let tree = self.subtree(path)?;
        let mut entries: Vec<Entry> = tree
            .iter()
            .map(|e| Entry {
                name: String::from_utf8_lossy(e.name_bytes()).into_owned(),
                kind: kind_of(e.filemode()),
            })
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    fn read(&self, path: &str, limit: u64) -> Result<Vec<u8>, ReadError> {
        let entry = self.root.get_path(Path::new(path)).map_err(|e| match e.code() {
            git2::ErrorCode::NotFound => ReadError::NotFound {
                path: path.to_string(),
            },
            _ => Self::io(path, e),
        })?;
        if kind_of(entry.filemode()) != EntryKind::File {
            return Err(ReadError::Io {
                path: path.to_string(),
                message: "not a regular file".to_string(),
            });
        }
        let odb = self.repo.odb().map_err(|e| Self::io(path, e))?;
        let (size, _) = odb.read_header(entry.id()).map_err(|e| Self::io(path, e))?;
        let size = size as u64;
        if size > limit {
            return Err(ReadError::TooLarge {
                path: path.to_string(),
                size,
                limit,
            });
        }
        let blob = self.repo.find_blob(entry.id()).map_err(|e| Self::io(path, e))?;
        Ok(blob.content().to_vec())
    }

    fn kind(&self, path: &str) -> Result<Option<EntryKind>, ReadError> {
        if path.is_empty() {
            return Ok(Some(EntryKind::Dir));
        }
        match self.root.get_path(Path::new(path)) {
            Ok(entry) => Ok(Some(kind_of(entry.filemode()))),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
            Err(e) => Err(Self::io(path, e)),
        }
    }
}
