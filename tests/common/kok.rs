//! The `kok` binary as a one-shot process (plan, history, ...) with its git cache in a temp dir.

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
