//! The `kok` binary: parse arguments, set up logging, run the subcommand.
#![forbid(unsafe_code)]

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = kok::cli::Cli::parse();
    kok::cli::main(cli)
}
