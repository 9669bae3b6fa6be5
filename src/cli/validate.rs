//! `kok validate` (in progress).

use std::process::ExitCode;

/// Arguments of `kok validate`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs `kok validate`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("kok validate is not available yet")
}
