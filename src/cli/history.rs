//! `kok history <cluster>`: the commits that touched a cluster directory, newest first.

use std::process::ExitCode;

use anyhow::Context;

use super::plan::GitArgs;
use super::OutputFormat;
use crate::layout;
use crate::source::{cluster_history, HistoryEntry};

/// Arguments of `kok history`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Cluster (directory name under --path).
    pub cluster: String,
    /// The remote and its credentials.
    #[command(flatten)]
    pub git: GitArgs,
    /// Directory inside the repository that holds one directory per cluster.
    #[arg(long, default_value = layout::DEFAULT_ROOT, env = "KOK_PATH")]
    pub path: String,
    /// Most commits shown.
    #[arg(long, default_value_t = 50, env = "KOK_LIMIT")]
    pub limit: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text, env = "KOK_OUTPUT")]
    pub output: OutputFormat,
}

/// Runs `kok history`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (source, tip) = args.git.fetch()?;
    let entries = cluster_history(source.repository(), tip, &args.path, &args.cluster, args.limit)?;
    let mut out = std::io::stdout().lock();
    let result = match args.output {
        OutputFormat::Json => serde_json::to_writer_pretty(&mut out, &entries)
            .map_err(std::io::Error::other)
            .and_then(|()| std::io::Write::write_all(&mut out, b"\n")),
        OutputFormat::Text => {
            std::io::Write::write_all(&mut out, text(&args.cluster, &args.path, &entries).as_bytes())
        }
    };
    result.context("writing the history to stdout")?;
    Ok(ExitCode::SUCCESS)
}

/// The history for humans: one block per commit.
pub fn text(cluster: &str, root: &str, entries: &[HistoryEntry]) -> String {
    if entries.is_empty() {
        return format!("no commit touches {root}/{cluster}\n");
    }
    let mut out = String::new();
    for e in entries {
        out.push_str(&format!("{} {} {} {}\n", e.short, e.date, e.author, e.subject));
        for f in &e.files {
            out.push_str(&format!("    {f}\n"));
        }
    }
    out
}
