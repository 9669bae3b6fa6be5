//! Exports one commit's tree from a git repository into a directory, so an operation's actions run as pinned.
//!
//! Blobs are read from the tree (no work tree, no index, bare repositories work): regular files keep their
//! executable bit, symbolic links are recreated, submodules become empty directories. Blocking: call it from
//! `spawn_blocking`.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use git2::{ObjectType, Repository, Tree};

/// Errors while exporting a commit.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The repository could not be opened.
    #[error("could not open the git repository at {path}: {source}; pass a repository that holds the operation's commit, or set --workdir")]
    Open {
        /// The repository path.
        path: PathBuf,
        /// The git error.
        #[source]
        source: git2::Error,
    },
    /// The commit is not in the repository.
    #[error("commit {commit} is not in the git repository at {path}: {source}")]
    MissingCommit {
        /// The commit asked for.
        commit: String,
        /// The repository path.
        path: PathBuf,
        /// The git error.
        #[source]
        source: git2::Error,
    },
    /// Reading a tree or blob failed.
    #[error("could not read {entry} of commit {commit}: {source}")]
    Read {
        /// The commit being exported.
        commit: String,
        /// Path of the entry inside the tree.
        entry: String,
        /// The git error.
        #[source]
        source: git2::Error,
    },
    /// Writing the export failed.
    #[error("could not write {path} while exporting commit {commit}: {source}")]
    Write {
        /// The commit being exported.
        commit: String,
        /// The file being written.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Writes the tree of `commit` (a full or abbreviated sha, or any revision) from the repository at `repo_path`
/// into `dest`, which must not exist yet. Returns the full sha exported.
pub fn export(repo_path: &Path, commit: &str, dest: &Path) -> Result<String, Error> {
    let repo = Repository::open(repo_path).map_err(|source| Error::Open {
        path: repo_path.to_path_buf(),
        source,
    })?;
    let missing = |source| Error::MissingCommit {
        commit: commit.to_string(),
        path: repo_path.to_path_buf(),
        source,
    };
    let object = repo.revparse_single(commit).map_err(missing)?;
    let found = object.peel_to_commit().map_err(missing)?;
    let sha = found.id().to_string();
    let tree = found.tree().map_err(|source| Error::Read {
        commit: sha.clone(),
        entry: "/".into(),
        source,
    })?;
    let mut exporter = Exporter {
        repo: &repo,
        commit: &sha,
    };
    exporter.mkdir(dest)?;
    exporter.tree(&tree, dest, "")?;
    Ok(sha)
}

struct Exporter<'a> {
    repo: &'a Repository,
    commit: &'a str,
}

impl Exporter<'_> {
    fn write_err(&self, path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
        let path = path.to_path_buf();
        move |source| Error::Write {
            commit: self.commit.to_string(),
            path,
            source,
        }
    }

    fn read_err(&self, entry: &str) -> impl FnOnce(git2::Error) -> Error + '_ {
        let entry = entry.to_string();
        move |source| Error::Read {
            commit: self.commit.to_string(),
            entry,
            source,
        }
    }

    fn mkdir(&self, dir: &Path) -> Result<(), Error> {
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(dir)
            .map_err(self.write_err(dir))
    }

    fn tree(&mut self, tree: &Tree<'_>, dir: &Path, prefix: &str) -> Result<(), Error> {
        for entry in tree.iter() {
            let Ok(name) = entry.name() else { continue };
            // Names git itself refuses to check out.
            if name.is_empty() || name == "." || name == ".." || name == ".git" || name.contains('/') {
                continue;
            }
            let shown = format!("{prefix}{name}");
            let path = dir.join(name);
            match entry.kind() {
                Some(ObjectType::Tree) => {
                    let sub = entry
                        .to_object(self.repo)
                        .and_then(|o| o.peel_to_tree())
                        .map_err(self.read_err(&shown))?;
                    self.mkdir(&path)?;
                    self.tree(&sub, &path, &format!("{shown}/"))?;
                }
                Some(ObjectType::Blob) => {
                    let blob = self.repo.find_blob(entry.id()).map_err(self.read_err(&shown))?;
                    let mode = entry.filemode();
                    if mode == 0o120000 {
                        let target = String::from_utf8_lossy(blob.content()).into_owned();
                        std::os::unix::fs::symlink(target, &path).map_err(self.write_err(&path))?;
                    } else {
                        let perm = if mode & 0o111 != 0 { 0o755 } else { 0o644 };
                        let mut f = std::fs::OpenOptions::new()
                            .write(true)
                            .create_new(true)
                            .mode(perm)
                            .open(&path)
                            .map_err(self.write_err(&path))?;
                        f.write_all(blob.content()).map_err(self.write_err(&path))?;
                    }
                }
                // Submodules (commits) are not part of this repository's content.
                Some(ObjectType::Commit) => self.mkdir(&path)?,
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn commit_files(repo: &Repository, files: &[(&str, &str, i32)]) -> git2::Oid {
        let mut index = repo.index().unwrap();
        for (path, content, mode) in files {
            let blob = repo.blob(content.as_bytes()).unwrap();
            let entry = git2::IndexEntry {
                ctime: git2::IndexTime::new(0, 0),
                mtime: git2::IndexTime::new(0, 0),
                dev: 0,
                ino: 0,
                mode: *mode as u32,
                uid: 0,
                gid: 0,
                file_size: content.len() as u32,
                id: blob,
                flags: 0,
                flags_extended: 0,
                path: path.as_bytes().to_vec(),
            };
            index.add(&entry).unwrap();
        }
        let tree_id = index.write_tree_to(repo).unwrap();
        let tree = repo.find_tree(tree_id).unwrap();
        let sig = git2::Signature::now("t", "t@example.invalid").unwrap();
        let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
        let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
        repo.commit(Some("HEAD"), &sig, &sig, "c", &tree, &parents)
            .unwrap()
    }

    #[test]
    fn a_commit_is_exported_with_its_executable_bits_from_a_bare_repository() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path().join("repo.git")).unwrap();
        let first = commit_files(
            &repo,
            &[
                ("play/site.yml", "- hosts: all\n", 0o100644),
                ("run.sh", "#!/bin/sh\necho hi\n", 0o100755),
            ],
        );
        commit_files(&repo, &[("play/site.yml", "changed later\n", 0o100644)]);

        let dest = dir.path().join("out");
        let sha = export(&dir.path().join("repo.git"), &first.to_string()[..10], &dest).unwrap();
        assert_eq!(sha, first.to_string());
        assert_eq!(
            std::fs::read_to_string(dest.join("play/site.yml")).unwrap(),
            "- hosts: all\n"
        );
        let mode = |p: &str| std::fs::metadata(dest.join(p)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode("run.sh"), 0o755);
        assert_eq!(mode("play/site.yml"), 0o644);
    }

    #[test]
    fn an_unknown_commit_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        Repository::init(dir.path()).unwrap();
        let err = export(dir.path(), "0123456789abcdef", &dir.path().join("out"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("commit 0123456789abcdef is not in the git repository"),
            "{err}"
        );
    }
}
