//! The allocators' settings `kok run` runs with.
//!
//! kok's own allocations go to mimalloc (the `kok` binary's global allocator): at 10,000 × 20 a first
//! pass spent a third of its CPU in glibc's malloc and free, and with mimalloc kok needed about a
//! sixth less CPU for the same pass (against the benchmark process's, paired), with a lower peak (`cargo bench --bench fleet`, paired runs in
//! docs/performance.md). It runs with two settings:
//!
//! - **No transparent huge pages** (`MIMALLOC_ALLOW_THP=0`). mimalloc asks the kernel for huge pages
//!   in its arenas, and a 2 MiB page is resident as soon as one byte of it is touched: the service's
//!   peak at 1,000 × 10 was 128 to 138 MiB with them, 88 MiB without.
//! - **Freed memory returned at once** (`MIMALLOC_PURGE_DELAY=0`, not after a second): a pass frees
//!   its parses and request bodies in bursts, and the peak at 1,000 × 10 fell to 60 to 63.4 MiB (55 MiB
//!   with glibc's malloc; ≤ 64 MiB is the target) without a slower reconcile.
//!
//! glibc's malloc still serves the C libraries (libgit2, libssh2, OpenSSL, and SQLite in local mode).
//! In service mode it keeps the settings that made kok's own allocations lighter before mimalloc:
//!
//! - **One arena** (`glibc.malloc.arena_max=1`). glibc gives each thread that allocates an arena of
//!   its own, up to eight per core. Memory freed in an arena is reused only by the threads on it, so
//!   what a pass frees on the blocking threads (git reads) stays resident beside the rest.
//! - **A fixed mmap threshold of 128 KiB** (`glibc.malloc.mmap_threshold=131072`). glibc otherwise
//!   raises the threshold to the size of each large block freed, up to 32 MiB, and from then on
//!   takes large buffers from the heap, where the holes they leave stay resident.
//! - **No per-thread cache** (`glibc.malloc.tcache_count=0`). glibc keeps up to seven freed small
//!   blocks of each size per thread, marked in use, so the holes around them cannot merge.
//!
//! Both allocators read their settings only when a process starts, so `kok run` starts itself once
//! more with them added to its environment, before any thread exists. A setting the environment
//! already makes is left alone (`MIMALLOC_PURGE_DELAY=1000` or `GLIBC_TUNABLES=glibc.malloc.arena_max=4`
//! choose differently); elsewhere than glibc the glibc settings are not made.
//!
//! `kok run --local` takes mimalloc's settings but keeps glibc's defaults: there the embedded API
//! server shares the process, and one glibc arena made the reconcile about 12 % slower in a paired
//! run at 1,000 × 10 when glibc's malloc served every allocation (not measured again since).

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

/// mimalloc's settings `kok run` makes: environment variable and value.
const MIMALLOC: [(&str, &str); 2] = [("MIMALLOC_ALLOW_THP", "0"), ("MIMALLOC_PURGE_DELAY", "0")];

/// The environment variables to set for kok's allocator settings, given the environment's own
/// (`env`) and whether kok runs in local mode: none when the environment makes them all.
fn settings(env: impl Fn(&str) -> Option<OsString>, local: bool) -> Vec<(&'static str, OsString)> {
    let mut settings: Vec<(&'static str, OsString)> = MIMALLOC
        .iter()
        .filter(|(name, _)| env(name).is_none())
        .map(|&(name, value)| (name, value.into()))
        .collect();
    if !local && cfg!(all(target_os = "linux", target_env = "gnu")) {
        if let Some(tunables) = with_kok_tunables(env("GLIBC_TUNABLES").as_deref()) {
            settings.push(("GLIBC_TUNABLES", tunables));
        }
    }
    settings
}

/// Starts this program again in place (same process id, arguments and environment) with kok's
/// allocator settings, unless the environment makes them all (then it logs them). Returns only when
/// nothing was done or the start failed; the latter is logged and kok goes on with the allocators'
/// defaults.
pub fn tune(local: bool) {
    let settings = settings(|name| std::env::var_os(name), local);
    if settings.is_empty() {
        // glibc shows only some tunables in /proc/<pid>/environ; the log says what kok runs with.
        let shown = |name: &str| {
            std::env::var_os(name)
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        };
        tracing::info!(
            MIMALLOC_ALLOW_THP = %shown("MIMALLOC_ALLOW_THP"),
            MIMALLOC_PURGE_DELAY = %shown("MIMALLOC_PURGE_DELAY"),
            GLIBC_TUNABLES = %shown("GLIBC_TUNABLES"),
            "malloc settings"
        );
        return;
    }
    let program = match std::env::current_exe() {
        Ok(program) => program,
        Err(e) => {
            tracing::debug!(error = %e, "cannot find kok's own executable; the allocators keep their defaults");
            return;
        }
    };
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new(program);
    if let Some(arg0) = args.next() {
        std::os::unix::process::CommandExt::arg0(&mut command, arg0);
    }
    command.args(args).envs(settings);
    let e = std::os::unix::process::CommandExt::exec(&mut command);
    tracing::warn!(error = %e, "could not restart with kok's malloc settings; running with the allocators' defaults");
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

    #[test]
    fn mimalloc_settings_in_both_modes_and_glibc_tunables_only_in_service_mode() {
        let none = |_: &str| None;
        fn names(settings: Vec<(&'static str, OsString)>) -> Vec<&'static str> {
            settings.into_iter().map(|(name, _)| name).collect()
        }
        assert_eq!(
            names(settings(none, true)),
            ["MIMALLOC_ALLOW_THP", "MIMALLOC_PURGE_DELAY"]
        );
        let service = settings(none, false);
        assert_eq!(
            service,
            [
                ("MIMALLOC_ALLOW_THP", OsString::from("0")),
                ("MIMALLOC_PURGE_DELAY", OsString::from("0")),
                ("GLIBC_TUNABLES", OsString::from(KOK)),
            ]
        );
        let operator = |name: &str| (name == "MIMALLOC_PURGE_DELAY").then(|| OsString::from("1000"));
        assert_eq!(
            names(settings(operator, true)),
            ["MIMALLOC_ALLOW_THP"],
            "an operator's own purge delay stays"
        );
        let restarted = |name: &str| match name {
            "GLIBC_TUNABLES" => Some(OsString::from(KOK)),
            _ => Some(OsString::from("0")),
        };
        assert!(
            settings(restarted, false).is_empty(),
            "a restarted kok stops there"
        );
        assert!(settings(restarted, true).is_empty());
    }
}
