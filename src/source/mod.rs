//! source (in progress).
