//! `kok plan`: what a commit range would change — objects created, updated and deleted per cluster,
//! and the operations that would run, each with the commit that introduced it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use git2::Oid;
use serde::Serialize;

use crate::api::DEFAULT_NAMESPACE;
use crate::layout::{self, Diagnostic, Parsed};
use crate::materialize::{canonical_json, render_cluster, RenderContext, ZERO_SHA};
use crate::source::{
    attribute, check_range, open_local, resolve_revision, Credentials, GitTree, Source, SourceConfig,
};

/// Where the remote is and how to reach it; shared by the commands that read a git remote.
#[derive(clap::Args, Debug, Clone)]
pub struct GitArgs {
    /// Repository: https://, ssh://, user@host:path, file:// or a plain path.
    #[arg(long, env = "KOK_REPO")]
    pub repo: String,
    /// Branch, tag or full ref name to read.
    #[arg(long = "ref", default_value = "main", env = "KOK_REF")]
    pub reference: String,
    /// Directory of the bare git caches (default: $XDG_CACHE_HOME/kok/git, ~/.cache/kok/git or a
    /// directory under the system temp dir).
    #[arg(long, env = "KOK_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Longest time, in seconds, one ref listing or fetch may take.
    #[arg(long, default_value_t = 60, env = "KOK_GIT_TIMEOUT")]
    pub git_timeout: u64,
    /// https: file holding a token, sent as the password.
    #[arg(long, env = "KOK_GIT_TOKEN_FILE")]
    pub git_token_file: Option<PathBuf>,
    /// https: file holding the username (default with a token: x-access-token); ssh: the login.
    #[arg(long, env = "KOK_GIT_USERNAME_FILE")]
    pub git_username_file: Option<PathBuf>,
    /// https: file holding the password.
    #[arg(long, env = "KOK_GIT_PASSWORD_FILE")]
    pub git_password_file: Option<PathBuf>,
    /// ssh: unencrypted private key file.
    #[arg(long, env = "KOK_GIT_SSH_KEY_FILE")]
    pub git_ssh_key_file: Option<PathBuf>,
    /// ssh: known_hosts file that must list the server's host key.
    #[arg(long, env = "KOK_GIT_KNOWN_HOSTS")]
    pub git_known_hosts: Option<PathBuf>,
}

impl GitArgs {
    /// The source configuration these flags describe.
    pub fn source_config(&self) -> SourceConfig {
        let cache_dir = self.cache_dir.clone().unwrap_or_else(default_cache_dir);
        let mut config = SourceConfig::new(self.repo.clone(), self.reference.clone(), cache_dir);
        config.timeout = Duration::from_secs(self.git_timeout.max(1));
        config.credentials = Credentials {
            token_file: self.git_token_file.clone(),
            username_file: self.git_username_file.clone(),
            password_file: self.git_password_file.clone(),
            ssh_key_file: self.git_ssh_key_file.clone(),
            known_hosts_file: self.git_known_hosts.clone(),
        };
        config
    }

    /// Opens the source and fetches the ref.
    pub fn fetch(&self) -> anyhow::Result<(Source, Oid)> {
        let mut source = Source::open(self.source_config())?;
        let tip = source.fetch()?;
        Ok((source, tip))
    }
}

/// `$XDG_CACHE_HOME/kok/git`, `~/.cache/kok/git`, or `<tmp>/kok-cache/git`.
pub fn default_cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| std::env::temp_dir().join("kok-cache"));
    base.join("kok").join("git")
}

/// Arguments of `kok plan`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The remote and its credentials.
    #[command(flatten)]
    pub git: GitArgs,
    /// Start of the range (exclusive): a commit or revision (default: the first parent of --to).
    #[arg(long, env = "KOK_FROM")]
    pub from: Option<String>,
    /// End of the range: a commit or revision (default: the tip of --ref).
    #[arg(long, env = "KOK_TO")]
    pub to: Option<String>,
    /// Directory inside the repository that holds one directory per cluster.
    #[arg(long, default_value = layout::DEFAULT_ROOT, env = "KOK_PATH")]
    pub path: String,
    /// Namespace the objects would be written to.
    #[arg(long, default_value = DEFAULT_NAMESPACE, env = "KOK_NAMESPACE")]
    pub namespace: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = PlanFormat::Text, env = "KOK_OUTPUT")]
    pub output: PlanFormat,
    /// Exit codes as terraform's: 0 nothing to do, 2 objects would be written or operations would
    /// run, 1 an error (an invalid cluster or kok.yml at --to included).
    #[arg(long, env = "KOK_DETAILED_EXITCODE")]
    pub detailed_exitcode: bool,
}

/// Output formats of `kok plan`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PlanFormat {
    /// Lines for humans.
    Text,
    /// JSON for tools.
    Json,
    /// Markdown, one table per cluster: a pull-request comment.
    Markdown,
}

/// One object, by kind and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct ObjectRef {
    /// Kubernetes kind.
    pub kind: String,
    /// Object name.
    pub name: String,
}

/// An operation that would run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedOperation {
    /// Operation id.
    pub id: String,
    /// ClusterOperation name.
    pub name: String,
    /// Playbook or script.
    pub action: String,
    /// Full sha of the commit that introduced it.
    pub commit: String,
    /// Subject of that commit.
    pub subject: String,
    /// Position of that commit in the range, oldest first.
    pub commit_index: usize,
}

/// The plan of one cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ClusterPlan {
    /// Cluster name.
    pub name: String,
    /// Objects in `to` and not in `from`.
    pub created: Vec<ObjectRef>,
    /// Objects in both whose content differs.
    pub updated: Vec<ObjectRef>,
    /// Objects in `from` and not in `to`.
    pub deleted: Vec<ObjectRef>,
    /// Operations that would run, in commit order then file order.
    pub operations: Vec<PlannedOperation>,
}

/// A cluster that is invalid at `to`: nothing of it changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InvalidCluster {
    /// Cluster name.
    pub name: String,
    /// Its diagnostics at `to`.
    pub diagnostics: Vec<Diagnostic>,
}

/// What a commit range would change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Start of the range (exclusive); `None` when `to` has no parent.
    pub from: Option<String>,
    /// End of the range.
    pub to: String,
    /// Commits in the range on the first-parent path.
    pub commits: usize,
    /// True when `from` is not an ancestor of `to`: every cluster was compared.
    pub full_resync: bool,
    /// Clusters with changes, sorted by name.
    pub clusters: Vec<ClusterPlan>,
    /// Clusters left at their last good state because they are invalid at `to`.
    pub invalid: Vec<InvalidCluster>,
    /// Repository-wide diagnostics at `to` (kok.yml).
    pub repo_diagnostics: Vec<Diagnostic>,
}

/// The repository a plan reads: the user's own when `--repo` is a local repository (a CI checkout of
/// a pull request: `--repo . --from origin/main --to HEAD`), else the bare cache of the remote with all
/// its branches and tags.
enum PlanRepository {
    /// A local repository, read in place; nothing is fetched.
    Local(git2::Repository),
    /// The cache of a remote.
    Cache(Box<Source>),
}

impl PlanRepository {
    fn repository(&self) -> &git2::Repository {
        match self {
            PlanRepository::Local(repo) => repo,
            PlanRepository::Cache(source) => source.repository(),
        }
    }
}

/// The ends of the range `args` asks for, resolved as `git rev-parse` resolves them.
fn open_range(args: &Args) -> anyhow::Result<(PlanRepository, Option<Oid>, Oid)> {
    let shown = crate::source::redact(&args.git.repo);
    let (repository, to) = match open_local(&args.git.repo) {
        Some(repo) => {
            let to = match &args.to {
                Some(rev) => resolve_revision(&repo, rev, &shown)?,
                None => resolve_revision(&repo, &args.git.reference, &shown).map_err(|e| {
                    anyhow::anyhow!(
                        "ref {:?} does not exist in {shown}; check --ref ({e})",
                        args.git.reference
                    )
                })?,
            };
            (PlanRepository::Local(repo), to)
        }
        None => {
            let (mut source, tip) = args.git.fetch()?;
            let to = match &args.to {
                Some(rev) => {
                    source.fetch_branches_and_tags()?;
                    resolve_revision(source.repository(), rev, &shown)?
                }
                None if args.from.is_some() => {
                    source.fetch_branches_and_tags()?;
                    tip
                }
                None => tip,
            };
            (PlanRepository::Cache(Box::new(source)), to)
        }
    };
    let repo = repository.repository();
    let from = match &args.from {
        Some(rev) => Some(resolve_revision(repo, rev, &shown)?),
        None => repo.find_commit(to).ok().and_then(|c| c.parent_id(0).ok()),
    };
    if let Some(from) = from {
        check_range(repo, from, to, &shown)?;
    }
    Ok((repository, from, to))
}

/// Runs `kok plan`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (repository, from, to) = open_range(&args)?;
    let plan = compute(repository.repository(), from, to, &args.path, &args.namespace)?;
    let rendered = match args.output {
        PlanFormat::Json => serde_json::to_string_pretty(&plan).context("serializing the plan")? + "\n",
        PlanFormat::Text => text(&plan),
        PlanFormat::Markdown => markdown(&plan),
    };
    std::io::Write::write_all(&mut std::io::stdout().lock(), rendered.as_bytes())
        .context("writing the plan to stdout")?;
    Ok(if !args.detailed_exitcode {
        ExitCode::SUCCESS
    } else if plan.has_errors() {
        ExitCode::FAILURE
    } else if plan.has_changes() {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}

impl Plan {
    /// True when the merge would write an object or run an operation.
    pub fn has_changes(&self) -> bool {
        !self.clusters.is_empty()
    }

    /// True when a cluster or kok.yml is invalid at `to`.
    pub fn has_errors(&self) -> bool {
        !self.invalid.is_empty() || !self.repo_diagnostics.is_empty()
    }
}

/// Computes the plan of `(from, to]` under `root`. Both ends are rendered with the same neutral
/// revision, so revision annotations do not count as updates; only clusters the diff reports are
/// compared.
pub fn compute(
    repo: &git2::Repository,
    from: Option<Oid>,
    to: Oid,
    root: &str,
    namespace: &str,
) -> anyhow::Result<Plan> {
    let changes = crate::source::diff::diff(repo, from, to, root)?;
    let touched = changes.touched();
    let mut names: Vec<String> = touched.iter().chain(&changes.removed).cloned().collect();
    names.sort();
    names.dedup();
    let at_to = parse(repo, to, root, &names)?;
    let at_from = match from {
        Some(f) if repo.find_commit(f).is_ok() => parse(repo, f, root, &names)?,
        _ => Parsed::default(),
    };
    let introduced = attribute(repo, from, to, root, &touched)?;
    let path = crate::source::attribution::first_parent_path(repo, from, to)?;
    let neutral = RenderContext::new(namespace, "plan", ZERO_SHA);
    let mut clusters = Vec::new();
    for name in &names {
        if at_to.invalid.contains(name) {
            continue;
        }
        let before = objects(&at_from, name, &neutral)?;
        let after = objects(&at_to, name, &neutral)?;
        let mut plan = ClusterPlan {
            name: name.clone(),
            ..ClusterPlan::default()
        };
        for (key, hash) in &after {
            match before.get(key) {
                None => plan.created.push(key.clone()),
                Some(old) if old != hash => plan.updated.push(key.clone()),
                Some(_) => {}
            }
        }
        plan.deleted = before
            .keys()
            .filter(|k| !after.contains_key(*k))
            .cloned()
            .collect();
        let cluster_dir = at_to.clusters.iter().find(|c| &c.name == name);
        for op in introduced.iter().filter(|i| &i.cluster == name) {
            let action = cluster_dir
                .and_then(|c| c.operations.iter().find(|o| o.id == op.id))
                .map(|o| o.action.clone())
                .unwrap_or_default();
            let subject = Oid::from_str(&op.commit)
                .ok()
                .and_then(|id| repo.find_commit(id).ok())
                .and_then(|c| c.summary().ok().flatten().map(str::to_string))
                .unwrap_or_default();
            plan.operations.push(PlannedOperation {
                id: op.id.clone(),
                name: crate::materialize::operation_name(name, &op.id, &op.digest),
                action,
                commit: op.commit.clone(),
                subject,
                commit_index: op.commit_index,
            });
        }
        if !(plan.created.is_empty() && plan.updated.is_empty() && plan.deleted.is_empty()) {
            clusters.push(plan);
        }
    }
    let invalid = at_to
        .invalid
        .iter()
        .filter(|n| names.contains(n))
        .map(|n| InvalidCluster {
            name: n.clone(),
            diagnostics: at_to
                .diagnostics
                .iter()
                .filter(|d| d.cluster.as_deref() == Some(n))
                .cloned()
                .collect(),
        })
        .collect();
    let repo_diagnostics = at_to
        .diagnostics
        .iter()
        .filter(|d| d.cluster.is_none())
        .cloned()
        .collect();
    Ok(Plan {
        from: from.map(|f| f.to_string()),
        to: to.to_string(),
        commits: path.len(),
        full_resync: changes.full_resync,
        clusters,
        invalid,
        repo_diagnostics,
    })
}

fn parse(repo: &git2::Repository, commit: Oid, root: &str, names: &[String]) -> anyhow::Result<Parsed> {
    let tree = GitTree::at_commit(repo, commit)?;
    Ok(layout::parse_clusters(&tree, root, names))
}

/// The rendered objects of cluster `name`: (kind, name) → canonical JSON.
fn objects(parsed: &Parsed, name: &str, ctx: &RenderContext) -> anyhow::Result<BTreeMap<ObjectRef, String>> {
    let Some(cluster) = parsed.clusters.iter().find(|c| c.name == name) else {
        return Ok(BTreeMap::new());
    };
    let desired = render_cluster(cluster, ctx);
    let mut out = BTreeMap::new();
    for object in desired.objects()? {
        let kind = object
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or_default()
            .to_string();
        let obj_name = object
            .pointer("/metadata/name")
            .and_then(|n| n.as_str())
            .unwrap_or_default()
            .to_string();
        out.insert(ObjectRef { kind, name: obj_name }, canonical_json(&object));
    }
    Ok(out)
}

/// The plan for humans.
pub fn text(plan: &Plan) -> String {
    let short = |s: &str| s.chars().take(8).collect::<String>();
    let mut out = String::new();
    let from = plan
        .from
        .as_deref()
        .map(short)
        .unwrap_or_else(|| "(root)".to_string());
    let commits = if plan.commits == 1 {
        "1 commit".to_string()
    } else {
        format!("{} commits", plan.commits)
    };
    out.push_str(&format!("plan {from}..{} ({commits})\n", short(&plan.to)));
    if plan.full_resync {
        out.push_str(
            "full resync: the start is not an ancestor of the end (or is unknown); every cluster compared\n",
        );
    }
    for d in &plan.repo_diagnostics {
        out.push_str(&format!("{d}\n"));
    }
    if plan.clusters.is_empty() && plan.invalid.is_empty() {
        out.push_str("no changes\n");
    }
    for cluster in &plan.clusters {
        out.push_str(&format!("\ncluster {}\n", cluster.name));
        for (sign, list) in [
            ("+", &cluster.created),
            ("~", &cluster.updated),
            ("-", &cluster.deleted),
        ] {
            for o in list {
                out.push_str(&format!("  {sign} {} {}\n", o.kind, o.name));
            }
        }
        if !cluster.operations.is_empty() {
            out.push_str("  operations that would run:\n");
            for op in &cluster.operations {
                out.push_str(&format!(
                    "    {} ({}) from {} {:?}\n",
                    op.id,
                    op.action,
                    short(&op.commit),
                    op.subject
                ));
            }
        }
    }
    for invalid in &plan.invalid {
        out.push_str(&format!(
            "\ncluster {}: invalid, it would be left at its last good state\n",
            invalid.name
        ));
        for d in &invalid.diagnostics {
            out.push_str(&format!("  {d}\n"));
        }
    }
    out
}

/// A markdown table cell: pipes escaped, line breaks folded.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The plan as markdown, one table per cluster, fit for a pull-request comment.
pub fn markdown(plan: &Plan) -> String {
    let short = |s: &str| s.chars().take(8).collect::<String>();
    let from = plan
        .from
        .as_deref()
        .map(short)
        .unwrap_or_else(|| "(root)".to_string());
    let mut out = format!("### kok plan `{from}..{}`\n\n", short(&plan.to));
    if plan.full_resync {
        out.push_str("Full resync: the start is not an ancestor of the end; every cluster compared.\n\n");
    }
    for d in &plan.repo_diagnostics {
        out.push_str(&format!("- :x: `{}`\n", cell(&d.to_string())));
    }
    if plan.clusters.is_empty() && plan.invalid.is_empty() {
        out.push_str("No changes.\n");
    }
    for cluster in &plan.clusters {
        out.push_str(&format!(
            "#### {}\n\n| change | kind | name | detail |\n|---|---|---|---|\n",
            cluster.name
        ));
        for (change, list) in [
            ("create", &cluster.created),
            ("update", &cluster.updated),
            ("delete", &cluster.deleted),
        ] {
            for o in list {
                out.push_str(&format!("| {change} | {} | `{}` | |\n", o.kind, o.name));
            }
        }
        for op in &cluster.operations {
            out.push_str(&format!(
                "| run | ClusterOperation | `{}` | `{}` (`{}`) from `{}` {} |\n",
                op.name,
                cell(&op.id),
                cell(&op.action),
                short(&op.commit),
                cell(&op.subject)
            ));
        }
        out.push('\n');
    }
    for invalid in &plan.invalid {
        out.push_str(&format!(
            "#### {} (invalid: left at its last good state)\n\n",
            invalid.name
        ));
        for d in &invalid.diagnostics {
            out.push_str(&format!("- `{}`\n", cell(&d.to_string())));
        }
        out.push('\n');
    }
    out
}
