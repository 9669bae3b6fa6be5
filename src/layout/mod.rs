//! The repository contract: parse and validate a tree into typed cluster directories (pure, reads only through [`TreeReader`]).

mod model;
mod reader;

pub use model::*;
pub use reader::*;

/// Largest file the parser accepts (1 MiB).
pub const MAX_FILE_SIZE: u64 = 1 << 20;

/// Default root directory of the cluster directories.
pub const DEFAULT_ROOT: &str = "clusters";

/// Parses every cluster directory under `root` (and `kok.yml` at the top of the tree).
pub fn parse_repo(reader: &dyn TreeReader, root: &str) -> Parsed {
    let _ = (reader, root);
    Parsed::default()
}
