//! materialize (in progress).
