//! [`TreeReader`] over a directory on disk: symlinks are reported, never followed; sizes are checked before reading.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use super::reader::{Entry, EntryKind, ReadError, TreeReader};

/// A repository tree rooted at a directory on disk.
#[derive(Clone, Debug)]
pub struct DiskTree {
    root: PathBuf,
}

impl DiskTree {
    /// A tree whose root (the empty path) is `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        DiskTree { root: root.into() }
    }

    /// The directory this tree reads.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn resolve(&self, path: &str) -> Result<PathBuf, ReadError> {
        let rel = Path::new(path);
        if rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(ReadError::Io {
                path: path.to_string(),
                message: "path must be relative and stay inside the repository".to_string(),
            });
        }
        Ok(self.root.join(rel))
    }
}

fn io_error(path: &str, err: &std::io::Error) -> ReadError {
    if err.kind() == std::io::ErrorKind::NotFound {
        ReadError::NotFound {
            path: path.to_string(),
        }
    } else {
        ReadError::Io {
            path: path.to_string(),
            message: err.to_string(),
        }
    }
}

fn kind_of(file_type: std::fs::FileType) -> EntryKind {
    if file_type.is_symlink() {
        EntryKind::Symlink
    } else if file_type.is_dir() {
        EntryKind::Dir
    } else if file_type.is_file() {
        EntryKind::File
    } else {
        EntryKind::Other
    }
}

impl TreeReader for DiskTree {
    fn list(&self, path: &str) -> Result<Vec<Entry>, ReadError> {
        let dir = self.resolve(path)?;
        // The root itself was chosen by the caller and may be a symlink; nothing below it is followed.
        let meta = if path.is_empty() {
            std::fs::metadata(&dir)
        } else {
            std::fs::symlink_metadata(&dir)
        }
        .map_err(|e| io_error(path, &e))?;
        if !meta.is_dir() {
            return Err(ReadError::Io {
                path: path.to_string(),
                message: "not a directory".to_string(),
            });
        }
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| io_error(path, &e))? {
            let entry = entry.map_err(|e| io_error(path, &e))?;
            let kind = entry.file_type().map(kind_of).map_err(|e| io_error(path, &e))?;
            entries.push(Entry {
                name: entry.file_name().to_string_lossy().into_owned(),
                kind,
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    fn read(&self, path: &str, limit: u64) -> Result<Vec<u8>, ReadError> {
        let file_path = self.resolve(path)?;
        let meta = std::fs::symlink_metadata(&file_path).map_err(|e| io_error(path, &e))?;
        if !meta.is_file() {
            let what = if meta.file_type().is_symlink() {
                "a symbolic link"
            } else {
                "not a regular file"
            };
            return Err(ReadError::Io {
                path: path.to_string(),
                message: format!("is {what}"),
            });
        }
        if meta.len() > limit {
            return Err(ReadError::TooLarge {
                path: path.to_string(),
                size: meta.len(),
                limit,
            });
        }
        let file = std::fs::File::open(&file_path).map_err(|e| io_error(path, &e))?;
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
        file.take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| io_error(path, &e))?;
        let size = bytes.len() as u64;
        if size > limit {
            return Err(ReadError::TooLarge {
                path: path.to_string(),
                size,
                limit,
            });
        }
        Ok(bytes)
    }

    fn kind(&self, path: &str) -> Result<Option<EntryKind>, ReadError> {
        let full = self.resolve(path)?;
        let meta = if path.is_empty() {
            std::fs::metadata(&full)
        } else {
            std::fs::symlink_metadata(&full)
        };
        match meta {
            Ok(meta) => Ok(Some(kind_of(meta.file_type()))),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(io_error(path, &err)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, DiskTree) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("clusters/a")).unwrap();
        std::fs::write(dir.path().join("clusters/a/hosts.yml"), "all: {}\n").unwrap();
        std::fs::write(dir.path().join("kok.yml"), "{}\n").unwrap();
        let tree = DiskTree::new(dir.path());
        (dir, tree)
    }

    #[test]
    fn lists_entries_sorted_with_their_kinds() {
        let (dir, tree) = tree();
        std::os::unix::fs::symlink("kok.yml", dir.path().join("link.yml")).unwrap();
        let names: Vec<_> = tree
            .list("")
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.kind))
            .collect();
        assert_eq!(
            names,
            [
                ("clusters".to_string(), EntryKind::Dir),
                ("kok.yml".to_string(), EntryKind::File),
                ("link.yml".to_string(), EntryKind::Symlink)
            ]
        );
    }

    #[test]
    fn reads_files_and_refuses_large_ones_and_symlinks() {
        let (dir, tree) = tree();
        assert_eq!(tree.read("clusters/a/hosts.yml", 100).unwrap(), b"all: {}\n");
        assert!(matches!(
            tree.read("clusters/a/hosts.yml", 3),
            Err(ReadError::TooLarge {
                size: 8,
                limit: 3,
                ..
            })
        ));
        std::os::unix::fs::symlink("kok.yml", dir.path().join("link.yml")).unwrap();
        assert!(matches!(tree.read("link.yml", 100), Err(ReadError::Io { .. })));
        assert!(matches!(
            tree.read("missing.yml", 100),
            Err(ReadError::NotFound { .. })
        ));
    }

    #[test]
    fn kind_does_not_follow_symlinks_and_absent_is_none() {
        let (dir, tree) = tree();
        std::os::unix::fs::symlink("clusters", dir.path().join("linked")).unwrap();
        assert_eq!(tree.kind("linked").unwrap(), Some(EntryKind::Symlink));
        assert_eq!(tree.kind("clusters").unwrap(), Some(EntryKind::Dir));
        assert_eq!(tree.kind("").unwrap(), Some(EntryKind::Dir));
        assert_eq!(tree.kind("nope").unwrap(), None);
    }

    #[test]
    fn paths_escaping_the_root_are_refused() {
        let (_dir, tree) = tree();
        assert!(tree.read("../etc/passwd", 100).is_err());
        assert!(tree.list("/etc").is_err());
    }
}
