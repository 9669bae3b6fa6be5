//! [`GitTree`]: the layout parser's [`TreeReader`] over a commit's tree in the bare cache.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use git2::{Oid, Repository, Tree};

use super::SourceError;
use crate::layout::{Entry, EntryKind, ReadError, TreeReader};

/// The entries of one tree object, in git's order: names, ids and modes only, copied out of the
/// object so that they outlive the repository handle that read them.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Listing {
    /// Every name, back to back.
    names: Vec<u8>,
    /// Per entry: where its name ends in `names`, its id and its file mode.
    entries: Vec<(usize, Oid, i32)>,
}

impl Listing {
    fn of(tree: &Tree<'_>) -> Listing {
        let mut names = Vec::new();
        let mut entries = Vec::with_capacity(tree.len());
        for entry in tree.iter() {
            names.extend_from_slice(entry.name_bytes());
            entries.push((names.len(), entry.id(), entry.filemode()));
        }
        Listing { names, entries }
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Name of entry `index`.
    pub(crate) fn name(&self, index: usize) -> &[u8] {
        let start = index.checked_sub(1).map_or(0, |i| self.entries[i].0);
        &self.names[start..self.entries[index].0]
    }

    /// Id and file mode of entry `index`.
    pub(crate) fn id_mode(&self, index: usize) -> (Oid, i32) {
        let (_, id, mode) = self.entries[index];
        (id, mode)
    }

    /// Git's order of entries `self[index]` and `other[other_index]`: by name, with a `/` after
    /// directory names.
    pub(crate) fn order(&self, index: usize, other: &Listing, other_index: usize) -> Ordering {
        git_order(self.name(index), self.id_mode(index).1)
            .cmp(git_order(other.name(other_index), other.id_mode(other_index).1))
    }

    /// Id and file mode of the entry called `name`, found by binary search.
    pub(crate) fn get(&self, name: &[u8]) -> Option<(Oid, i32)> {
        // The entry sorts as `name/` when it is a directory and as `name` otherwise; try both. A probe
        // equal to a directory's key with another name is `name` ending in `/`, which no entry has.
        [0o040000, 0o100644].into_iter().find_map(|mode| {
            let probe = git_order(name, mode);
            let (mut low, mut high) = (0, self.len());
            while low < high {
                let middle = low + (high - low) / 2;
                match git_order(self.name(middle), self.id_mode(middle).1).cmp(probe.clone()) {
                    Ordering::Less => low = middle + 1,
                    Ordering::Greater => high = middle,
                    Ordering::Equal => return (self.name(middle) == name).then(|| self.id_mode(middle)),
                }
            }
            None
        })
    }
}

/// The key git sorts tree entries by: the name, with a `/` after directory names.
fn git_order(name: &[u8], filemode: i32) -> impl Iterator<Item = u8> + Clone + '_ {
    let slash = (kind_of(filemode) == EntryKind::Dir).then_some(b'/');
    name.iter().copied().chain(slash)
}

/// Listings of the cluster roots read lately, by tree id, shared by every repository of the process
/// (a tree id names its content wherever it is stored). A pass's new root is the next pass's old
/// root, so with this the next pass reads only the new one; libgit2 does not keep tree objects
/// larger than 4 KiB in its own cache.
pub(crate) struct RecentListings {
    capacity: usize,
    slots: Mutex<VecDeque<(Oid, Arc<Listing>)>>,
}

/// The process's recent listings.
static RECENT: RecentListings = RecentListings::new(4);

impl RecentListings {
    /// A cache keeping the `capacity` listings used last.
    pub(crate) const fn new(capacity: usize) -> RecentListings {
        RecentListings {
            capacity,
            slots: Mutex::new(VecDeque::new()),
        }
    }

    fn get(&self, id: Oid) -> Option<Arc<Listing>> {
        let mut slots = self.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let at = slots.iter().position(|(key, _)| *key == id)?;
        let slot = slots.remove(at)?;
        let listing = slot.1.clone();
        slots.push_front(slot);
        Some(listing)
    }

    fn put(&self, id: Oid, listing: Arc<Listing>) {
        if self.capacity == 0 {
            return;
        }
        let mut slots = self.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        slots.retain(|(key, _)| *key != id);
        slots.truncate(self.capacity - 1);
        slots.push_front((id, listing));
    }

    fn clear(&self) {
        self.slots
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clear();
    }
}

/// Forgets the cluster-root listings kept from earlier reads, so that the next read starts cold (for
/// benchmarks measuring a first pass).
pub fn forget_recent_trees() {
    RECENT.clear();
}

/// The tree objects read during one look at the repository (a diff, the parse of its clusters, their
/// attribution), by id. libgit2 does not cache large tree objects, so without this a root directory
/// with thousands of entries would be inflated and parsed again by every step. Cluster roots are read
/// as [`Listing`]s, which are also kept across looks in [`RecentListings`].
#[derive(Clone)]
pub struct Trees<'r> {
    repo: &'r Repository,
    seen: Rc<RefCell<HashMap<Oid, Tree<'r>>>>,
    listings: Rc<RefCell<HashMap<Oid, Arc<Listing>>>>,
    recent: &'r RecentListings,
}

impl<'r> Trees<'r> {
    /// An empty memo over `repo`, sharing the process's recent listings.
    pub fn new(repo: &'r Repository) -> Trees<'r> {
        Trees::with_recent(repo, &RECENT)
    }

    /// An empty memo over `repo` keeping listings across looks in `recent`.
    pub(crate) fn with_recent(repo: &'r Repository, recent: &'r RecentListings) -> Trees<'r> {
        Trees {
            repo,
            seen: Rc::default(),
            listings: Rc::default(),
            recent,
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

    /// The entries of the tree `id` (a cluster root), from a recent look when there was one.
    pub(crate) fn listing(&self, id: Oid) -> Result<Arc<Listing>, git2::Error> {
        if let Some(listing) = self.known_listing(id) {
            return Ok(listing);
        }
        let listing = Arc::new(Listing::of(&self.find(id)?));
        self.recent.put(id, listing.clone());
        self.listings.borrow_mut().insert(id, listing.clone());
        Ok(listing)
    }

    fn known_listing(&self, id: Oid) -> Option<Arc<Listing>> {
        if let Some(listing) = self.listings.borrow().get(&id) {
            return Some(listing.clone());
        }
        let listing = self.recent.get(id)?;
        self.listings.borrow_mut().insert(id, listing.clone());
        Some(listing)
    }

    /// Id and file mode of the entry `name` of the tree `id`: from its listing when one was made,
    /// else from the tree object.
    pub(crate) fn entry_in(&self, id: Oid, name: &str) -> Result<Option<(Oid, i32)>, git2::Error> {
        if let Some(listing) = self.known_listing(id) {
            return Ok(listing.get(name.as_bytes()));
        }
        Ok(self.find(id)?.get_name(name).map(|e| (e.id(), e.filemode())))
    }
}

/// Reads directories and blobs of one tree; nothing is checked out.
pub struct GitTree<'r> {
    trees: Trees<'r>,
    root: Tree<'r>,
    /// Ids of the directories already looked up, by path, so a file read under a large root does not
    /// search it again.
    dirs: RefCell<HashMap<String, Oid>>,
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
        let id = self.dir_id(path)?;
        self.trees.find(id).map_err(|e| Self::io(path, e))
    }

    /// Id of the directory at `path` (the root for ""), or `NotFound`.
    fn dir_id(&self, path: &str) -> Result<Oid, ReadError> {
        if path.is_empty() {
            return Ok(self.root.id());
        }
        if let Some(id) = self.dirs.borrow().get(path) {
            return Ok(*id);
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
        self.dirs.borrow_mut().insert(path.to_string(), id);
        Ok(id)
    }

    /// Id and file mode of the entry at `path` (not the root), `None` when absent.
    fn entry(&self, path: &str) -> Result<Option<(Oid, i32)>, ReadError> {
        let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
        let parent_id = match self.dir_id(parent) {
            Ok(id) => id,
            Err(ReadError::NotFound { .. }) => return Ok(None),
            Err(ReadError::Io { message, .. }) if message == "not a directory" => return Ok(None),
            Err(e) => return Err(e),
        };
        self.trees
            .entry_in(parent_id, name)
            .map_err(|e| Self::io(parent, e))
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

    #[test]
    fn listing_finds_what_libgit2_finds_by_name_and_is_kept_by_tree_id() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path()).unwrap();
        let blob = repo.blob(b"x").unwrap();
        let sub = repo.treebuilder(None).unwrap().write().unwrap();
        let mut builder = repo.treebuilder(None).unwrap();
        // Names whose order changes with the `/` git sorts directories by.
        for (name, id, mode) in [
            ("a", sub, 0o040000),
            ("a-b", blob, 0o120000),
            ("a.b", blob, 0o100644),
            ("a0", sub, 0o040000),
            ("ab", blob, 0o100755),
            ("b", sub, 0o040000),
            ("b-", sub, 0o040000),
        ] {
            builder.insert(name, id, mode).unwrap();
        }
        let id = builder.write().unwrap();
        let recent = RecentListings::new(1);
        let trees = Trees::with_recent(&repo, &recent);
        let listing = trees.listing(id).unwrap();
        let tree = repo.find_tree(id).unwrap();
        assert_eq!(listing.len(), tree.len());
        for name in [
            "a", "a-b", "a.b", "a0", "ab", "b", "b-", "", "a/", "c", "a-", "0", "b-b",
        ] {
            let expected = tree.get_name(name).map(|e| (e.id(), e.filemode()));
            assert_eq!(listing.get(name.as_bytes()), expected, "{name:?}");
            assert_eq!(trees.entry_in(id, name).unwrap(), expected, "{name:?}");
        }

        // A later look finds the listing kept, and a listing pushed out is read again, equal.
        let later = Trees::with_recent(&repo, &recent);
        assert!(Arc::ptr_eq(&later.listing(id).unwrap(), &listing));
        later.listing(sub).unwrap();
        let again = Trees::with_recent(&repo, &recent).listing(id).unwrap();
        assert!(!Arc::ptr_eq(&again, &listing));
        assert_eq!(*again, *listing);
    }
}
