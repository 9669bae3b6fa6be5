//! Names of the commit-status contexts kok writes: one per operation run, one per rollout.

/// Prefix of every context kok writes.
pub const CONTEXT_PREFIX: &str = "kok/";

/// Context of an operation's status: `kok/<cluster>/<operation id>`.
pub fn operation_context(cluster: &str, id: &str) -> String {
    format!("{CONTEXT_PREFIX}{cluster}/{id}")
}

/// Separates a scheduled run's firing from its operation's context: `kok/<cluster>/<id>@<firing>`.
pub const FIRING_SEPARATOR: char = '@';

/// Context of one run's status: the operation's context, and for a scheduled run `@<firing>` (RFC 3339),
/// so the git notes keep every firing on its own line.
pub fn run_context(cluster: &str, id: &str, firing: Option<&str>) -> String {
    match firing {
        Some(firing) => format!("{}{FIRING_SEPARATOR}{firing}", operation_context(cluster, id)),
        None => operation_context(cluster, id),
    }
}

/// A run's context split into its operation's context and its firing, if it is a scheduled run's.
pub fn split_run_context(context: &str) -> (&str, Option<&str>) {
    match context.split_once(FIRING_SEPARATOR) {
        Some((operation, firing)) => (operation, Some(firing)),
        None => (context, None),
    }
}

/// Context of a rollout's status on the commit that introduced or last changed it: `kok/rollout/<name>`.
pub fn rollout_context(rollout: &str) -> String {
    format!("{CONTEXT_PREFIX}rollout/{rollout}")
}
