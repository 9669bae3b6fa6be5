//! Command-line interface: one file per subcommand; every flag has a `KOK_*` environment twin.

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

pub mod crds;
pub mod history;
pub mod logs;
mod malloc;
pub mod plan;
pub mod reference;
pub mod render;
pub mod run;
pub mod status;
pub mod validate;

/// kok: a GitOps reconciler for Kubernetes clusters installed and changed with ansible.
#[derive(Parser, Debug)]
#[command(name = "kok", version, about, long_about = None)]
pub struct Cli {
    /// Log format.
    #[arg(long, global = true, env = "KOK_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// How logs are written to stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Output format of the offline commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Lines for humans.
    Text,
    /// JSON for tools.
    Json,
}

/// kok's subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the service: poll the repository, materialize clusters, run operations, report statuses.
    Run(Box<run::Args>),
    /// Validate a repository: exit 1 with `path:line:col: message` lines when it is invalid.
    Validate(validate::Args),
    /// Print the objects a repository renders to, as a YAML stream.
    Render(render::Args),
    /// Print kok's CustomResourceDefinitions.
    Crds(crds::Args),
    /// Print the log of an operation run in local mode.
    Logs(logs::Args),
    /// What a commit range would change: objects per cluster and the operations that would run.
    Plan(plan::Args),
    /// The commits that touched a cluster directory, newest first.
    History(history::Args),
    /// The fleet: each cluster's version, nodes, health, what its queue does and its last outcome.
    Status(status::Args),
    /// Print a reference page as markdown: `cli` (every subcommand and flag) or `crds` (every CRD field).
    ///
    /// The pages docs/reference/cli.md and docs/reference/crds.md are this command's output, generated from
    /// the code; a test fails when they differ.
    Reference(reference::Args),
}

/// Runs the parsed command line; the process exit code is the result.
pub fn main(cli: Cli) -> ExitCode {
    init_tracing(cli.log_format);
    let result = match cli.command {
        Command::Run(args) => run::run(*args),
        Command::Validate(args) => validate::run(args),
        Command::Render(args) => render::run(args),
        Command::Crds(args) => crds::run(args),
        Command::Logs(args) => logs::run(args),
        Command::Plan(args) => plan::run(args),
        Command::History(args) => history::run(args),
        Command::Status(args) => status::run(args),
        Command::Reference(args) => reference::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KOK_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
