//! How many malloc arenas `kok run` uses.
//!
//! glibc gives each thread that allocates an arena of its own, up to eight per core. Memory freed in
//! an arena is reused only by the threads on it, so what a pass frees on the blocking threads (git
//! reads, note edits, parses) stays resident beside the watch caches the runtime threads fill, and a
//! fleet's peak RSS is a third above its live heap. With one arena, everything freed is reused by every
//! thread: `cargo bench --bench fleet` measures 15 MiB less at 1,000 × 10 with the same reconcile time.
//!
//! glibc reads the setting (`GLIBC_TUNABLES=glibc.malloc.arena_max=N`) only when a process starts,
//! so `kok run` starts itself once more with it added, before any thread exists. An arena limit the
//! environment already sets is left alone; elsewhere than glibc nothing happens.
//!
//! `kok run --local` keeps glibc's default: there the embedded API server's threads share the
//! process, one arena made the reconcile about 12 % slower in a paired run at 1,000 × 10, and local
//! mode's memory is within its target without it.

use std::ffi::{OsStr, OsString};

/// The glibc tunable that limits malloc arenas.
const ARENA_MAX: &str = "glibc.malloc.arena_max";
/// Arenas `kok run` asks for.
const ARENAS: u32 = 1;

/// `GLIBC_TUNABLES` with kok's arena limit added to `current`, or `None` when `current` already
/// limits arenas.
fn with_arena_limit(current: Option<&OsStr>) -> Option<OsString> {
    let setting = format!("{ARENA_MAX}={ARENAS}");
    let Some(current) = current.filter(|c| !c.is_empty()) else {
        return Some(setting.into());
    };
    let limited = current
        .to_string_lossy()
        .split(':')
        .any(|tunable| tunable.split_once('=').is_some_and(|(name, _)| name == ARENA_MAX));
    if limited {
        return None;
    }
    let mut tunables = current.to_os_string();
    tunables.push(":");
    tunables.push(setting);
    Some(tunables)
}

/// Starts this program again in place (same process id, arguments and environment) with kok's arena
/// limit, unless it is set already. Returns only when nothing was done or the start failed; the latter
/// is logged and kok goes on with glibc's default.
pub fn limit() {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return;
    }
    let Some(tunables) = with_arena_limit(std::env::var_os("GLIBC_TUNABLES").as_deref()) else {
        return;
    };
    let program = match std::env::current_exe() {
        Ok(program) => program,
        Err(e) => {
            tracing::debug!(error = %e, "cannot find kok's own executable; malloc arenas stay at glibc's default");
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
    tracing::warn!(error = %e, "could not restart with one malloc arena; running with glibc's default");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arena_limit_is_added_once_and_never_overrides_the_environment() {
        assert_eq!(with_arena_limit(None), Some("glibc.malloc.arena_max=1".into()));
        assert_eq!(
            with_arena_limit(Some(OsStr::new(""))),
            Some("glibc.malloc.arena_max=1".into())
        );
        assert_eq!(
            with_arena_limit(Some(OsStr::new("glibc.malloc.tcache_count=0"))),
            Some("glibc.malloc.tcache_count=0:glibc.malloc.arena_max=1".into())
        );
        assert_eq!(
            with_arena_limit(Some(OsStr::new("glibc.malloc.arena_max=4"))),
            None
        );
        assert_eq!(
            with_arena_limit(Some(OsStr::new("glibc.malloc.check=0:glibc.malloc.arena_max=8"))),
            None
        );
        // A tunable whose name only starts like the limit is another one.
        assert_eq!(
            with_arena_limit(Some(OsStr::new("glibc.malloc.arena_max_x=3"))),
            Some("glibc.malloc.arena_max_x=3:glibc.malloc.arena_max=1".into())
        );
    }
}
