//! Local mode's kubelet: runs kok's Jobs as host processes and keeps one log file per operation.
//!
//! - [`runner`] watches kok's Jobs, runs each one once on the host and reports its status the way the Job
//!   controller does.
//! - [`rundir`] is a run's own directory: what it uses and leaves on this machine (temporary files, fact
//!   cache, ssh control sockets, output, exit status), so that a restarted kok picks the run up again.
//! - [`supervise`] starts a run's process in a session of its own, watches it (or picks it up again) to its
//!   end, copies its output into the log and ends what it leaves behind (ssh masters included).
//! - [`volumes`] materializes a Job's ConfigMap, Secret and projected volumes into a private directory and maps
//!   in-container paths (`/conf/hosts.yml`) onto it.
//! - [`checkout`] exports a commit's tree, so actions kept in the repository run as pinned.
//! - [`logs`] names, writes and finds the per-operation log files that `kok logs` prints.
//! - [`status`] builds the Job status patches (pure).
//! - [`pod`] is a run's pod, as the Job controller makes it and a kubelet reports it, bound to this machine.
//! - [`kubelet`] serves a run's log file as its pod's log (`kubectl logs`), for the embedded API server.
//! - [`kubespray`] reads what a checked-out kubespray tree (`--workdir`, `--image-workdir`) says of itself,
//!   for pre-flight.

use std::path::{Path, PathBuf};

pub mod checkout;
pub mod embedded;
pub mod kubelet;
pub mod kubespray;
pub mod logs;
pub mod pod;
pub mod rundir;
pub mod runner;
pub mod status;
mod supervise;
pub mod volumes;

/// State directory used by local mode when `--state-dir` is not given, relative to the working directory.
pub const DEFAULT_STATE_DIR: &str = ".kok";

/// The directory holding the per-operation log files inside `state_dir`.
pub fn logs_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("logs")
}
