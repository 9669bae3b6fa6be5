//! The `kok` binary as a one-shot process (plan, history, ...) with its git cache in a temp dir, and
//! what a running kok process shows of itself.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

/// Runs `kok args...` with `KOK_CACHE_DIR=cache`; returns (success, stdout, stderr).
pub fn kok(args: &[&str], cache: &Path) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kok"))
        .args(args)
        .env("KOK_CACHE_DIR", cache)
        .env("KOK_LOG", "error")
        .output()
        .expect("kok runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `GLIBC_TUNABLES` in the environment of process `pid`, as `/proc/<pid>/environ` shows it.
pub fn glibc_tunables(pid: u32) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("read the process environment");
    environ
        .split(|b| *b == 0)
        .filter_map(|var| std::str::from_utf8(var).ok())
        .find_map(|var| var.strip_prefix("GLIBC_TUNABLES=").map(str::to_string))
}
