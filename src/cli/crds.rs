//! `kok crds` (in progress).

use std::process::ExitCode;

/// Arguments of `kok crds`.
#[derive(clap::Args, Debug)]
pub struct Args {}

/// Runs `kok crds`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("kok crds is not available yet")
}
