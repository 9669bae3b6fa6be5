//! Commit statuses: what each operation and commit should show (pure), the sinks that deliver them, and
//! the durable delivery loop.

pub mod status;

pub use status::{operation_status, sync_status};
