//! The small file-access abstraction the parser reads through: a directory on disk or a git tree.

/// What a directory entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory (or git tree).
    Dir,
    /// A symbolic link (refused by validation).
    Symlink,
    /// Anything else (submodule, device, ...).
    Other,
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// File name, without directory.
    pub name: String,
    /// What it is.
    pub kind: EntryKind,
}

/// Failure to read from the tree.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The path does not exist.
    #[error("{path}: not found")]
    NotFound {
        /// Path relative to the root.
        path: String,
    },
    /// The file is larger than the limit.
    #[error("{path}: file is {size} bytes, more than the {limit} bytes allowed")]
    TooLarge {
        /// Path relative to the root.
        path: String,
        /// Actual size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// Anything else from the underlying store.
    #[error("{path}: {message}")]
    Io {
        /// Path relative to the root.
        path: String,
        /// What failed.
        message: String,
    },
}

/// Read access to a repository tree. Paths are relative, `/`-separated, without leading `/`;
/// the empty string is the root.
pub trait TreeReader {
    /// Entries of the directory at `path`, sorted by name.
    fn list(&self, path: &str) -> Result<Vec<Entry>, ReadError>;
    /// Content of the file at `path`; refuses files over `limit` bytes without reading them.
    fn read(&self, path: &str, limit: u64) -> Result<Vec<u8>, ReadError>;
    /// Kind of the entry at `path`, `None` when absent.
    fn kind(&self, path: &str) -> Result<Option<EntryKind>, ReadError>;
}
