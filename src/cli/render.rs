//! `kok render`: print the objects a repository renders to, as the YAML stream kok would apply.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use super::validate::{require_repository_dir, summary, text_report};
use crate::api::DEFAULT_NAMESPACE;
use crate::layout::{self, DiskTree};
use crate::materialize::rollout::{render_rollout, rollouts_yaml};
use crate::materialize::{render_all, to_yaml_stream, RenderContext, ZERO_SHA};

/// Arguments of `kok render`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Repository directory to render (its top holds kok.yml and the cluster root).
    #[arg(default_value = ".", env = "KOK_REPO_DIR")]
    pub dir: PathBuf,
    /// Directory inside the repository that holds one directory per cluster.
    #[arg(long, default_value = layout::DEFAULT_ROOT, env = "KOK_PATH")]
    pub path: String,
    /// Namespace of the rendered objects (kok's own namespace in the meta-cluster).
    #[arg(long, default_value = DEFAULT_NAMESPACE, env = "KOK_NAMESPACE")]
    pub namespace: String,
    /// Branch or tag name used in revisions (`<ref>@sha1:<commit>`).
    #[arg(long = "ref", value_name = "REF", default_value = "main", env = "KOK_REF")]
    pub ref_name: String,
    /// Commit sha used in revisions and as every operation's source commit. Default: HEAD of the
    /// git repository containing DIR (uncommitted changes are rendered too), or forty zeros
    /// outside a git repository.
    #[arg(long, value_name = "SHA", env = "KOK_COMMIT", value_parser = parse_full_sha)]
    pub commit: Option<String>,
}

/// Runs `kok render`: the YAML stream to stdout; with validation errors, the diagnostics (as
/// `kok validate` prints them) to stderr and exit code 1. Warnings go to stderr and do not stop it.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    require_repository_dir("render", &args.dir)?;
    let parsed = layout::parse_repo(&DiskTree::new(&args.dir), &args.path);
    eprint!("{}", text_report(&parsed));
    if parsed.has_errors() {
        eprintln!("{}", summary(&parsed));
        eprintln!("nothing rendered: fix the errors above (`kok validate` lists the same problems)");
        return Ok(ExitCode::from(1));
    }
    let commit = match args.commit {
        Some(commit) => commit,
        None => head_commit(&args.dir).unwrap_or_else(|| ZERO_SHA.to_string()),
    };
    let mut ctx = RenderContext::new(args.namespace, args.ref_name, commit);
    // The position is the service's to give (the pass's time orders it): a rendered one would differ from
    // it, and the immutable spec of a live run refuses any change.
    ctx.queue_base = String::new();
    let mut yaml = to_yaml_stream(&render_all(&parsed.clusters, &ctx))?;
    let rollouts: Vec<_> = parsed.rollouts.iter().map(|r| render_rollout(r, &ctx)).collect();
    yaml.push_str(&rollouts_yaml(&rollouts)?);
    std::io::stdout()
        .lock()
        .write_all(yaml.as_bytes())
        .context("writing the rendered objects to stdout")?;
    Ok(ExitCode::SUCCESS)
}

/// Accepts a full commit sha (40 or 64 hex digits), lowercased.
fn parse_full_sha(s: &str) -> Result<String, String> {
    let ok = matches!(s.len(), 40 | 64) && s.bytes().all(|b| b.is_ascii_hexdigit());
    if ok {
        Ok(s.to_ascii_lowercase())
    } else {
        Err(format!(
            "{s:?} is not a full commit sha (40 hex digits); get one with `git rev-parse <rev>`"
        ))
    }
}

/// The sha of HEAD of the git repository containing `dir`, if there is one with a commit.
fn head_commit(dir: &Path) -> Option<String> {
    let repo = git2::Repository::discover(dir).ok()?;
    let commit = repo.head().ok()?.peel_to_commit().ok()?;
    Some(commit.id().to_string())
}
