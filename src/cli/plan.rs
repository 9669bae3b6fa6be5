//! `kok plan`: what a commit range would change — objects created, updated and deleted per cluster,
//! and the operations that would run, each with the commit that introduced it (and the facts playbook its Job
//! runs first when it limits its hosts); and each rollout it adds, changes or removes, wave by wave.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use git2::Oid;

use crate::api::DEFAULT_NAMESPACE;
use crate::layout;
pub use crate::plan::{
    decide, live_baseline, markdown, plan_status, prepare, text, Baseline, ClusterPlan, InvalidCluster,
    ObjectRef, Plan, PlannedOperation, PlannedRerun, PlannedWave, Prepared, RolloutChange, RolloutPlan,
    PLAN_CONTEXT,
};
use crate::source::verify::{
    commits_to_verify, signature_states, Trust, TrustFiles, Verification, VerifyMode,
};
use crate::source::{check_range, open_local, resolve_revision, Credentials, Source, SourceConfig};

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

/// The trust material commits are checked against; shared by `run`, `validate`, `plan` and `history`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TrustFileArgs {
    /// OpenSSH allowed_signers file of the trusted SSH signing keys.
    #[arg(long, env = "KOK_ALLOWED_SIGNERS")]
    pub allowed_signers: Option<PathBuf>,
    /// Directory of trusted OpenPGP public keys (armored or binary, one or more per file).
    #[arg(long, env = "KOK_TRUSTED_KEYS")]
    pub trusted_keys: Option<PathBuf>,
}

impl TrustFileArgs {
    /// The trust files given (possibly none).
    pub fn files(&self) -> TrustFiles {
        TrustFiles {
            allowed_signers: self.allowed_signers.clone(),
            trusted_keys: self.trusted_keys.clone(),
        }
    }

    /// The trusted keys; none when no file is given (every signature then shows as untrusted).
    pub fn load(&self) -> anyhow::Result<Trust> {
        let files = self.files();
        if files == TrustFiles::default() {
            return Ok(Trust::default());
        }
        Ok(Trust::load(&files)?)
    }
}

/// Which commits must be signed, and by whom; shared by `run`, `validate` and `plan`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TrustArgs {
    /// Refuse commits without a valid signature by a trusted key: `tip` (the newest commit) or
    /// `all` (every commit since the last reconciled one, or since --from / --since).
    #[arg(long, value_enum, env = "KOK_VERIFY_SIGNATURES")]
    pub verify_signatures: Option<VerifyMode>,
    /// The trust material.
    #[command(flatten)]
    pub trust: TrustFileArgs,
}

impl TrustArgs {
    /// The verification `kok run` performs: the mode and the trust material, read once now so that
    /// a missing or malformed file stops kok at start.
    pub fn verification(&self) -> anyhow::Result<Option<Verification>> {
        let files = self.trust.files();
        let Some(mode) = self.verify_signatures else {
            if files != TrustFiles::default() {
                anyhow::bail!("--allowed-signers and --trusted-keys need --verify-signatures tip|all");
            }
            return Ok(None);
        };
        Trust::load(&files)?;
        Ok(Some(Verification { mode, files }))
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
    /// Kubeconfig of the meta-cluster: the plan starts from its live objects (also in a pod, from the
    /// in-cluster configuration). Without one, it starts from the render of --from.
    #[arg(long, env = "KOK_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Exit codes as terraform's: 0 nothing to do, 2 objects would be written or operations would
    /// run, 1 an error (an invalid cluster or kok.yml at --to included).
    #[arg(long, env = "KOK_DETAILED_EXITCODE")]
    pub detailed_exitcode: bool,
    /// Signature checks: every commit of the range is reported; with --verify-signatures, an
    /// untrusted one (the tip alone with `tip`) makes the exit code 1.
    #[command(flatten)]
    pub trust: TrustArgs,
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

/// The meta-cluster to read: `--kubeconfig`, or the in-cluster configuration inside a pod.
fn meta_cluster(args: &Args) -> anyhow::Result<Option<kube::Config>> {
    if let Some(path) = &args.kubeconfig {
        let kubeconfig = kube::config::Kubeconfig::read_from(path)
            .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        let config = runtime
            .block_on(kube::Config::from_custom_kubeconfig(
                kubeconfig,
                &Default::default(),
            ))
            .with_context(|| format!("loading the kubeconfig {}", path.display()))?;
        return Ok(Some(config));
    }
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        return Ok(Some(
            kube::Config::incluster().context("reading the in-cluster configuration")?,
        ));
    }
    Ok(None)
}

/// Runs `kok plan`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (repository, from, to) = open_range(&args)?;
    let ref_name = crate::reconcile::short_ref(&args.git.reference);
    let prepared = prepare(
        repository.repository(),
        from,
        to,
        &args.path,
        &args.namespace,
        &ref_name,
    )?;
    let baseline = match meta_cluster(&args)? {
        Some(config) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?
            .block_on(async {
                let client = kube::Client::try_from(config).context("connecting to the meta-cluster")?;
                anyhow::Ok(live_baseline(&client, &args.namespace, &prepared).await?)
            })?,
        None => prepared.simulated_baseline(),
    };
    let mut plan = decide(&prepared, &baseline);
    let trust = args.trust.trust.load()?;
    let repo = repository.repository();
    let range = commits_to_verify(repo, from, to, VerifyMode::All)?;
    plan.signatures = signature_states(repo, &range, &trust, jiff::Timestamp::now().as_second())?;
    let refused = match args.trust.verify_signatures {
        Some(VerifyMode::All) => plan.signatures.iter().any(|s| !s.trusted),
        Some(VerifyMode::Tip) => plan.signatures.first().is_some_and(|s| !s.trusted),
        None => false,
    };
    let rendered = match args.output {
        PlanFormat::Json => serde_json::to_string_pretty(&plan).context("serializing the plan")? + "\n",
        PlanFormat::Text => text(&plan),
        PlanFormat::Markdown => markdown(&plan),
    };
    std::io::Write::write_all(&mut std::io::stdout().lock(), rendered.as_bytes())
        .context("writing the plan to stdout")?;
    Ok(if refused {
        ExitCode::FAILURE
    } else if !args.detailed_exitcode {
        ExitCode::SUCCESS
    } else if plan.has_errors() {
        ExitCode::FAILURE
    } else if plan.has_changes() {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}
