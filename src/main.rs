//! The `kok` binary: parse arguments, set up logging, run the subcommand.
#![forbid(unsafe_code)]

use clap::Parser;

/// mimalloc, with the settings `kok run` starts itself with (`cli::malloc`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = kok::cli::Cli::parse();
    kok::cli::main(cli)
}
