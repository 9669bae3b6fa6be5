//! [`GitTree`]: the layout parser's [`TreeReader`] over a commit's tree in the bare cache.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use git2::{Oid, Repository, Tree};

use super::SourceError;
use crate::layout::{Entry, EntryKind, ReadError, TreeReader};

/// The tree objects read during one look at the repository (a diff, the parse of its clusters, their
/// attribution), by id. libgit2 does not cache large tree objects, so without this a root directory
/// with thousands of entries would be inflated and parsed again by every step.
#[derive(Clone)]
pub struct Trees<'r> {
    repo: &'r Repository,
    seen: Rc<RefCell<HashMap<Oid, Tree<'r>>>>,
}

impl<'r> Trees<'r> {
    /// An empty memo over `repo`.
    pub fn new(repo: &'r Repository) -> Trees<'r> {
        Trees {
            repo,
            seen: Rc::default(),
        }
    }

    /// The repository.
    pub fn repo(&self) -> &'r Repository {
        self.repo
    }

    /// The tree `id`, read once.
    pub fn find(&self, id: Oid) -> Result<Tree<'r>, git2::Error> {
        if let Some(tree) = self.seen.borrow().get(&id) {
            return Ok(tree.clone());
        }
        let tree = self.repo.find_tree(id)?;
        self.seen.borrow_mut().insert(id, tree.clone());
        Ok(tree)
    }

    /// The top-level tree of `commit`.
    pub fn of_commit(&self, commit: Oid) -> Result<Tree<'r>, git2::Error> {
        let id = self.repo.find_commit(commit)?.tree_id();
        self.find(id)
    }
}

/// Reads directories and blobs of one tree; nothing is checked out.
pub struct GitTree<'r> {
    trees: Trees<'r>,
    root: Tree<'r>,
    /// Directories already looked up, by path, so a file read under a large root does not search it
    /// again.
    dirs: RefCell<HashMap<String, Tree<'r>>>,
}

impl std::fmt::Debug for GitTree<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitTree").field("tree", &self.root.id()).finish()
    }
}

impl<'r> GitTree<'r> {
    /// The tree of `commit`.
    pub fn at_commit(repo: &'r Repository, commit: Oid) -> Result<GitTree<'r>, SourceError> {
        GitTree::at_commit_in(&Trees::new(repo), commit)
    }

    /// The tree of `commit`, sharing the tree objects of `trees`.
    pub fn at_commit_in(trees: &Trees<'r>, commit: Oid) -> Result<GitTree<'r>, SourceError> {
        let root = trees
            .of_commit(commit)
            .map_err(SourceError::git(format!("read the tree of commit {commit}")))?;
        Ok(GitTree {
            trees: trees.clone(),
            root,
            dirs: RefCell::new(HashMap::new()),
        })
    }

    /// The tree `tree`.
    pub fn at_tree(repo: &'r Repository, tree: Oid) -> Result<GitTree<'r>, SourceError> {
        let trees = Trees::new(repo);
        let root = trees
            .find(tree)
            .map_err(SourceError::git(format!("read tree {tree}")))?;
        Ok(GitTree {
            trees,
            root,
            dirs: RefCell::new(HashMap::new()),
        })
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
        if let Some(tree) = self.dirs.borrow().get(path) {
            return Ok(tree.clone());
        }
        let (id, mode) = self.entry(path)?.ok_or_else(|| ReadError::NotFound {
            path: path.to_string(),
        })?;
        if kind_of(mode) != EntryKind::Dir {
            return Err(ReadError::Io {
                path: path.to_string(),
                message: "not a directory".to_string(),
            });
        }
        let tree = self.trees.find(id).map_err(|e| Self::io(path, e))?;
        self.dirs.borrow_mut().insert(path.to_string(), tree.clone());
        Ok(tree)
    }

    /// Id and file mode of the entry at `path` (not the root), `None` when absent.
    fn entry(&self, path: &str) -> Result<Option<(Oid, i32)>, ReadError> {
        let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
        let parent_tree = match self.subtree(parent) {
            Ok(tree) => tree,
            Err(ReadError::NotFound { .. }) => return Ok(None),
            Err(ReadError::Io { message, .. }) if message == "not a directory" => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(parent_tree.get_name(name).map(|e| (e.id(), e.filemode())))
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
        let (id, mode) = self.entry(path)?.ok_or_else(|| ReadError::NotFound {
            path: path.to_string(),
        })?;
        if kind_of(mode) != EntryKind::File {
            return Err(ReadError::Io {
                path: path.to_string(),
                message: "not a regular file".to_string(),
            });
        }
        let odb = self.trees.repo().odb().map_err(|e| Self::io(path, e))?;
        let (size, _) = odb.read_header(id).map_err(|e| Self::io(path, e))?;
        let size = size as u64;
        if size > limit {
            return Err(ReadError::TooLarge {
                path: path.to_string(),
                size,
                limit,
            });
        }
        let blob = self.trees.repo().find_blob(id).map_err(|e| Self::io(path, e))?;
        Ok(blob.content().to_vec())
    }

    fn kind(&self, path: &str) -> Result<Option<EntryKind>, ReadError> {
        if path.is_empty() {
            return Ok(Some(EntryKind::Dir));
        }
        Ok(self.entry(path)?.map(|(_, mode)| kind_of(mode)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_report_symlinks_submodules_and_sizes_without_a_work_tree() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path()).unwrap();
        let big = repo.blob(&[b'x'; 2048]).unwrap();
        let small = repo.blob(b"all: {}\n").unwrap();
        let link = repo.blob(b"../elsewhere").unwrap();
        let commit_id = Oid::from_str("1234567890123456789012345678901234567890").unwrap();
        let mut cluster = repo.treebuilder(None).unwrap();
        cluster.insert("hosts.yml", small, 0o100644).unwrap();
        cluster.insert("vars.yml", big, 0o100644).unwrap();
        cluster.insert("link.yml", link, 0o120000).unwrap();
        cluster.insert("sub", commit_id, 0o160000).unwrap();
        let cluster = cluster.write().unwrap();
        let mut top = repo.treebuilder(None).unwrap();
        top.insert("a", cluster, 0o040000).unwrap();
        let top = top.write().unwrap();
        let tree = GitTree::at_tree(&repo, top).unwrap();

        let kinds: Vec<(String, EntryKind)> = tree
            .list("a")
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.kind))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("hosts.yml".to_string(), EntryKind::File),
                ("link.yml".to_string(), EntryKind::Symlink),
                ("sub".to_string(), EntryKind::Other),
                ("vars.yml".to_string(), EntryKind::File),
            ]
        );
        assert_eq!(tree.read("a/hosts.yml", 1024).unwrap(), b"all: {}\n");
        assert!(matches!(
            tree.read("a/vars.yml", 1024),
            Err(ReadError::TooLarge { size: 2048, .. })
        ));
        assert!(matches!(
            tree.read("a/missing.yml", 1024),
            Err(ReadError::NotFound { .. })
        ));
        assert_eq!(tree.kind("a").unwrap(), Some(EntryKind::Dir));
        assert_eq!(tree.kind("a/link.yml").unwrap(), Some(EntryKind::Symlink));
        assert_eq!(tree.kind("b/hosts.yml").unwrap(), None);
        assert!(matches!(tree.list("b"), Err(ReadError::NotFound { .. })));
    }
}
