//! Commit statuses: what each operation and commit should show (pure), the sinks that deliver them, and
//! the durable delivery loop.

pub mod deliver;
pub mod forge;
pub mod notes;
pub mod sink;
pub mod status;

pub use deliver::{Backoff, Reporter, Sinks};
pub use forge::{Forge, ForgeSink};
pub use notes::{read_all_notes, read_notes, NoteEntry, NotesSink};
pub use sink::{DeliveryError, Sink, Token};
pub use status::{operation_status, sync_status};
