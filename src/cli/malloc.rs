//! The malloc settings `kok run` runs with.
//!
//! - **One arena** (`glibc.malloc.arena_max=1`). glibc gives each thread that allocates an arena of
//!   its own, up to eight per core. Memory freed in an arena is reused only by the threads on it, so
//!   what a pass frees on the blocking threads (git reads, note edits, parses) stays resident beside
//!   the watch caches the runtime threads fill, and a fleet's peak RSS is a third above its live heap.
//!   With one arena, everything freed is reused by every thread: `cargo bench --bench fleet` measures
//!   15 MiB less at 1,000 × 10 with the same reconcile time.
//! - **A fixed mmap threshold of 128 KiB** (`glibc.malloc.mmap_threshold=131072`). glibc otherwise
//!   raises the threshold to the size of each large block freed, up to 32 MiB, and from then on
//!   takes the large buffers of a pass (watch pages, request bodies, note blobs) from the heap, where
//!   the holes they leave stay resident. At the fixed threshold they are mapped apart and go back to
//!   the system when freed: 4 MiB less peak RSS at 1,000 × 10 in paired runs, with the same time.
//! - **No per-thread cache** (`glibc.malloc.tcache_count=0`). glibc keeps up to seven freed small
//!   blocks of each size per thread, marked in use: they stay out of the arena's free lists and its
//!   neighbours cannot merge with them, so in a fleet-size burst the holes they pin add up. Without
//!   the cache the service's peak RSS at 1,000 × 10 was 55 to 56 MiB against 73 to 76 MiB in paired
//!   release runs (10,000 × 1: about 100 MiB either way); reconciles took 14.6 to 19.5 s against
//!   12.2 to 18.5 s, within the machine's spread.
//!
//! glibc reads these settings (`GLIBC_TUNABLES`) only when a process starts, so `kok run` starts
//! itself once more with them added, before any thread exists. A setting the environment already
//! makes is left alone; elsewhere than glibc nothing happens.
//!
//! `kok run --local` keeps glibc's defaults: there the embedded API server's threads share the
//! process, one arena made the reconcile about 12 % slower in a paired run at 1,000 × 10, and local
//! mode's memory is within its target without it.

use std::ffi::{OsStr, OsString};

/// The glibc tunables `kok run` sets, with their values.
const TUNABLES: [(&str, &str); 3] = [
    ("glibc.malloc.arena_max", "1"),
    ("glibc.malloc.mmap_threshold", "131072"),
    ("glibc.malloc.tcache_count", "0"),
];

/// `GLIBC_TUNABLES` with kok's settings added to `current` where it does not make them itself, or
/// `None` when it makes them all.
fn with_kok_tunables(current: Option<&OsStr>) -> Option<OsString> {
    let current = current.map(OsStr::to_string_lossy).unwrap_or_default();
    let set: Vec<&str> = current
        .split(':')
        .filter_map(|tunable| tunable.split_once('=').map(|(name, _)| name))
        .collect();
    let mut tunables = current.to_string();
    for (name, value) in TUNABLES {
        if set.contains(&name) {
            continue;
        }
        if !tunables.is_empty() && !tunables.ends_with(':') {
            tunables.push(':');
        }
        tunables.push_str(&format!("{name}={value}"));
    }
    (tunables != current).then(|| tunables.into())
}

/// Starts this program again in place (same process id, arguments and environment) with kok's malloc
/// settings, unless the environment makes them all (then it logs them). Returns only when nothing was
/// done or the start failed; the latter is logged and kok goes on with glibc's defaults.
pub fn tune() {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return;
    }
    let current = std::env::var_os("GLIBC_TUNABLES");
    let Some(tunables) = with_kok_tunables(current.as_deref()) else {
        // glibc shows only some tunables in /proc/<pid>/environ; the log says what kok runs with.
        let current = current.unwrap_or_default();
        tracing::info!(GLIBC_TUNABLES = %current.to_string_lossy(), "malloc settings");
        return;
    };
    let program = match std::env::current_exe() {
        Ok(program) => program,
        Err(e) => {
            tracing::debug!(error = %e, "cannot find kok's own executable; malloc stays at glibc's defaults");
            return;
        }
    };
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new(program);
    if let Some(arg0) = args.next() {
        std::os::unix::process::CommandExt::arg0(&mut command, arg0);
    }
    command.args(args).env("GLIBC_TUNABLES", tunables);
    let e = std::os::unix::process::CommandExt::exec(&mut command);
    tracing::warn!(error = %e, "could not restart with kok's malloc settings; running with glibc's defaults");
}

#[cfg(test)]
mod tests {
    use super::*;

    const KOK: &str =
        "glibc.malloc.arena_max=1:glibc.malloc.mmap_threshold=131072:glibc.malloc.tcache_count=0";

    #[test]
    fn kok_tunables_are_added_once_and_never_override_the_environment() {
        assert_eq!(with_kok_tunables(None), Some(KOK.into()));
        assert_eq!(with_kok_tunables(Some(OsStr::new(""))), Some(KOK.into()));
        assert_eq!(
            with_kok_tunables(Some(OsStr::new("glibc.malloc.tcache_count=7"))),
            Some(
                "glibc.malloc.tcache_count=7:glibc.malloc.arena_max=1:glibc.malloc.mmap_threshold=131072"
                    .into()
            ),
            "an operator's own cache size stays"
        );
        assert_eq!(
            with_kok_tunables(Some(OsStr::new("glibc.malloc.arena_max=4"))),
            Some(
                "glibc.malloc.arena_max=4:glibc.malloc.mmap_threshold=131072:glibc.malloc.tcache_count=0"
                    .into()
            )
        );
        assert_eq!(
            with_kok_tunables(Some(OsStr::new(
                "glibc.malloc.mmap_threshold=65536:glibc.malloc.check=0:glibc.malloc.tcache_count=3:glibc.malloc.arena_max=8"
            ))),
            None,
            "all set by the environment: no restart"
        );
        assert_eq!(
            with_kok_tunables(Some(OsStr::new(KOK))),
            None,
            "a restarted kok stops there"
        );
        assert_eq!(
            with_kok_tunables(Some(OsStr::new("glibc.malloc.check=0:"))),
            Some(format!("glibc.malloc.check=0:{KOK}").into()),
            "no empty tunable between the environment's and kok's"
        );
        // A tunable whose name only starts like one of kok's is another one.
        assert_eq!(
            with_kok_tunables(Some(OsStr::new("glibc.malloc.arena_max_x=3"))),
            Some(format!("glibc.malloc.arena_max_x=3:{KOK}").into())
        );
    }
}
