//! `kok render` (in progress).

use std::process::ExitCode;

/// Arguments of `kok render`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs `kok render`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("kok render is not available yet")
}
