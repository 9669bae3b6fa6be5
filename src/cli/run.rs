//! `kok run`: the service — poll the repository, materialize, run operations, report statuses.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::ValueEnum;

use crate::api::DEFAULT_NAMESPACE;
use crate::cli::plan::{GitArgs, TrustArgs};
use crate::controller::ControllerConfig;
use crate::layout;
use crate::leader::{self, LeaderConfig};
use crate::report::comments::PlanComments;
use crate::report::{self, Forge, ForgeSink, NotesSink, Sink, Token};
use crate::server::{self, Readiness, ServerState, WebhookSecret};
use crate::service::{self, ServiceConfig};

/// Where commit statuses go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StatusSink {
    /// git notes under refs/notes/kok, pushed to the remote when it accepts pushes.
    Notes,
    /// GitHub (or GitHub Enterprise Server with --status-base-url).
    Github,
    /// GitLab (gitlab.com or self-managed with --status-base-url).
    Gitlab,
    /// Gitea or Forgejo (--status-base-url required).
    Gitea,
    /// No statuses at all.
    None,
}

/// Arguments of `kok run`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The git remote and its credentials.
    #[command(flatten)]
    pub git: GitArgs,
    /// Signature verification of the commits reconciled.
    #[command(flatten)]
    pub trust: TrustArgs,
    /// Root directory of the cluster directories inside the repository.
    #[arg(long, default_value = layout::DEFAULT_ROOT, env = "KOK_PATH")]
    pub path: String,
    /// Namespace of kok's objects in the meta-cluster.
    #[arg(long, default_value = DEFAULT_NAMESPACE, env = "KOK_NAMESPACE")]
    pub namespace: String,
    /// Time between polls of the remote (e.g. 30s, 5m).
    #[arg(long, default_value = "30s", value_parser = parse_duration, env = "KOK_INTERVAL")]
    pub interval: Duration,
    /// Time between full resyncs that repair drift (unchanged objects are not written).
    #[arg(long, default_value = "10m", value_parser = parse_duration, env = "KOK_RESYNC_INTERVAL")]
    pub resync_interval: Duration,
    /// Time between health checks of every cluster with a kubeconfig (0 turns them off).
    #[arg(long, default_value = "5m", value_parser = parse_duration, env = "KOK_HEALTH_INTERVAL")]
    pub health_interval: Duration,
    /// Most ansible Jobs running at once across clusters (one per cluster at most).
    #[arg(long, default_value_t = 4, env = "KOK_MAX_CONCURRENT_JOBS")]
    pub max_concurrent_jobs: usize,
    /// kok's own ServiceAccount in --namespace (deploy/ sets it from the pod): an operation whose
    /// `serviceAccount` names it fails without a Job, since its run would get kok's rights.
    #[arg(long, value_name = "NAME", env = "KOK_OWN_SERVICE_ACCOUNT")]
    pub own_service_account: Option<String>,
    /// How long a succeeded run's Job (and its pod, with its log) stays after it completed; kok then deletes
    /// it (0: as soon as the outcome is recorded). A failed run's Job stays until its run leaves the history.
    #[arg(long, default_value = "1h", value_parser = parse_duration, env = "KOK_KEEP_SUCCEEDED_JOBS")]
    pub keep_succeeded_jobs: Duration,
    /// Commit status sinks, comma separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "notes",
        env = "KOK_STATUS"
    )]
    pub status: Vec<StatusSink>,
    /// Link template for statuses: {namespace}, {job}, {operation}, {cluster}, {commit}.
    #[arg(long, env = "KOK_STATUS_URL")]
    pub status_url: Option<String>,
    /// Address people reach the web view at (e.g. behind an ingress): every status links to its page,
    /// an operation's to `<URL>/operations/<name>`, a rollout's to `<URL>/rollouts/<name>`, `kok/sync` to
    /// `<URL>/commits/<sha>`.
    #[arg(long, env = "KOK_WEB_URL", conflicts_with = "status_url")]
    pub web_url: Option<String>,
    /// Forge API base URL for self-hosted servers (GitHub Enterprise: https://ghe.example/api/v3).
    #[arg(long, env = "KOK_STATUS_BASE_URL")]
    pub status_base_url: Option<String>,
    /// Forge repository: owner/repo (GitHub, Gitea) or project id or path (GitLab).
    #[arg(long, env = "KOK_STATUS_REPO")]
    pub status_repo: Option<String>,
    /// File holding the forge token (else the KOK_STATUS_TOKEN environment variable).
    #[arg(long, env = "KOK_STATUS_TOKEN_FILE")]
    pub status_token_file: Option<PathBuf>,
    /// Most operations a commit may have and still get one status context each on a forge; above it
    /// the forge shows one kok/summary context plus one per failed operation (git notes keep all).
    #[arg(long, default_value_t = report::deliver::DEFAULT_MAX_CONTEXTS, env = "KOK_STATUS_MAX_CONTEXTS")]
    pub status_max_contexts: usize,
    /// Plan every open pull request (refs/pull/*/head, refs/merge-requests/*/head) and put the
    /// `kok/plan` status on its head; nothing of a pull request runs.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "KOK_PULL_REQUESTS")]
    pub pull_requests: bool,
    /// Also keep one comment per pull request with the markdown plan, edited in place on each push
    /// (needs a github, gitlab or gitea --status sink; its token must be allowed to comment).
    #[arg(long, env = "KOK_PR_COMMENTS")]
    pub pr_comments: bool,
    /// Address of the HTTP listener (/healthz, /readyz, /metrics, /hooks/<provider>).
    #[arg(long, default_value = server::DEFAULT_LISTEN, env = "KOK_LISTEN")]
    pub listen: String,
    /// File holding the shared secret webhooks are signed with.
    #[arg(long, env = "KOK_WEBHOOK_SECRET_FILE")]
    pub webhook_secret_file: Option<PathBuf>,
    /// Serve the read-only web view (`/`, `/clusters/<name>`, ...) on the HTTP listener. Always on in
    /// local mode (on loopback, unchecked); in a meta-cluster each request needs a Kubernetes token whose
    /// user may `get clusteroperations` in --namespace (and `get pods/log` for run logs).
    #[arg(long, env = "KOK_WEB")]
    pub web: bool,
    /// Elect a leader on a Lease so that only one replica reconciles.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "KOK_LEADER_ELECT")]
    pub leader_elect: bool,
    /// How long the leader Lease stays valid without renewal.
    #[arg(long, default_value = "15s", value_parser = parse_duration, env = "KOK_LEASE_DURATION")]
    pub lease_duration: Duration,
    /// How long the remote may be unreachable before /readyz reports not ready.
    #[arg(long, default_value = "5m", value_parser = parse_duration, env = "KOK_UNREACHABLE_THRESHOLD")]
    pub unreachable_threshold: Duration,
    /// Local mode: no meta-cluster needed. kok embeds an API server on loopback (kubeconfig in the
    /// state directory, so kubectl can inspect it) and runs Jobs as processes on this machine.
    #[arg(long, env = "KOK_LOCAL")]
    pub local: bool,
    /// Local mode: directory of the embedded API server's data, the kubeconfig, logs and git cache.
    #[arg(long, default_value = crate::local::DEFAULT_STATE_DIR, env = "KOK_STATE_DIR")]
    pub state_dir: PathBuf,
    /// Local mode: directory actions run in (default: the repository checked out at the operation's commit),
    /// for every image no --image-workdir maps; their logs and statuses say which directory ran them.
    #[arg(long, env = "KOK_WORKDIR")]
    pub workdir: Option<PathBuf>,
    /// Local mode: IMAGE=DIR runs the operations whose `image:` is IMAGE in DIR (e.g. that kubespray
    /// version's checkout). Repeatable; the environment variable takes a comma-separated list.
    #[arg(long = "image-workdir", value_name = "IMAGE=DIR", value_parser = parse_image_workdir, value_delimiter = ',', env = "KOK_IMAGE_WORKDIR")]
    pub image_workdirs: Vec<(String, PathBuf)>,
    /// Local mode: port of the embedded API server on 127.0.0.1 (0: the previous start's port when free, else
    /// a free one).
    #[arg(long, default_value_t = 0, env = "KOK_API_PORT")]
    pub api_port: u16,
}

/// Parses `90`, `90s`, `5m`, `2h` or `1d` into a duration.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration; write e.g. 30s, 5m or 1h"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86400,
        "ms" => return Ok(Duration::from_millis(n)),
        _ => {
            return Err(format!(
                "{text:?} has an unknown unit {unit:?}; use ms, s, m, h or d"
            ))
        }
    };
    Ok(Duration::from_secs(secs))
}

/// Parses `IMAGE=DIR` (the first `=` ends the image).
pub fn parse_image_workdir(text: &str) -> Result<(String, PathBuf), String> {
    match text.split_once('=') {
        Some((image, dir)) if !image.trim().is_empty() && !dir.trim().is_empty() => {
            Ok((image.trim().to_string(), PathBuf::from(dir.trim())))
        }
        _ => Err(format!(
            "{text:?} is not IMAGE=DIR; write e.g. quay.io/kubespray/kubespray:v2.27.0=/src/kubespray-2.27"
        )),
    }
}

impl Args {
    fn forge_sink(&self, forge: Forge) -> anyhow::Result<ForgeSink> {
        let name = forge.as_str();
        let repo = self.status_repo.as_deref().with_context(|| {
            format!("--status {name} needs --status-repo (owner/repo, or a GitLab project)")
        })?;
        let token = Token::load(self.status_token_file.as_deref(), name)?;
        Ok(ForgeSink::new(
            forge,
            self.status_base_url.as_deref(),
            repo,
            &token,
        )?)
    }

    /// The status sinks these flags ask for; the notes sink writes into the source's cache.
    pub fn sinks(&self, cache_repo: PathBuf) -> anyhow::Result<Vec<Arc<dyn Sink>>> {
        let mut sinks: Vec<Arc<dyn Sink>> = Vec::new();
        for kind in &self.status {
            match kind {
                StatusSink::Notes => {
                    let callbacks: Option<report::notes::CallbacksHook> =
                        crate::source::RemoteUrl::parse(&self.git.repo)
                            .ok()
                            .map(|remote| {
                                let credentials = self.git.source_config().credentials;
                                Arc::new(move |cb: &mut git2::RemoteCallbacks<'_>| {
                                    crate::source::install_callbacks(cb, &remote, &credentials)
                                }) as report::notes::CallbacksHook
                            });
                    let sink = NotesSink::new(cache_repo.clone()).with_push(report::notes::PushTarget {
                        remote: self.git.repo.clone(),
                        callbacks,
                    });
                    sinks.push(Arc::new(sink));
                }
                StatusSink::Github => sinks.push(Arc::new(self.forge_sink(Forge::GitHub)?)),
                StatusSink::Gitlab => sinks.push(Arc::new(self.forge_sink(Forge::GitLab)?)),
                StatusSink::Gitea => sinks.push(Arc::new(self.forge_sink(Forge::Gitea)?)),
                StatusSink::None => {}
            }
        }
        Ok(sinks)
    }

    /// The plan comments `--pr-comments` asks for, through the forge of the one forge status sink.
    fn plan_comments(&self) -> anyhow::Result<Option<Arc<PlanComments>>> {
        if !self.pr_comments {
            return Ok(None);
        }
        let forges: Vec<Forge> = self
            .status
            .iter()
            .filter_map(|kind| match kind {
                StatusSink::Github => Some(Forge::GitHub),
                StatusSink::Gitlab => Some(Forge::GitLab),
                StatusSink::Gitea => Some(Forge::Gitea),
                StatusSink::Notes | StatusSink::None => None,
            })
            .collect();
        let [forge] = forges[..] else {
            anyhow::bail!(
                "--pr-comments needs exactly one forge in --status (github, gitlab or gitea) to comment through; got {}",
                forges.len()
            );
        };
        if !self.pull_requests {
            anyhow::bail!("--pr-comments needs --pull-requests true");
        }
        Ok(Some(Arc::new(PlanComments::new(self.forge_sink(forge)?))))
    }

    /// The service configuration these flags describe.
    /// `--status-url`, or with `--web-url` the template of the web view's `page` (`operations/{operation}`).
    fn status_url_for(&self, page: &str) -> Option<String> {
        self.status_url.clone().or_else(|| self.web_page(page))
    }

    /// `<--web-url>/<page>`, when the web view's address is given.
    fn web_page(&self, page: &str) -> Option<String> {
        self.web_url
            .as_deref()
            .map(|url| format!("{}/{page}", url.trim_end_matches('/')))
    }

    /// Local mode: the kubespray trees of `--workdir` and `--image-workdir`, read once for pre-flight
    /// (nothing otherwise).
    fn kubespray_trees(&self) -> anyhow::Result<crate::preflight::Trees> {
        if !self.local {
            return Ok(crate::preflight::Trees::default());
        }
        let by_image = image_workdirs(&self.image_workdirs)?;
        Ok(crate::local::kubespray::read_trees(
            self.workdir.as_deref(),
            &by_image,
        ))
    }

    pub fn service_config(&self) -> anyhow::Result<ServiceConfig> {
        let mut controller = ControllerConfig::new(&self.namespace);
        controller.max_concurrent_jobs = self.max_concurrent_jobs.max(1);
        controller.own_service_account = self.own_service_account.clone().filter(|n| !n.is_empty());
        controller.health_interval = self.health_interval;
        controller.keep_succeeded_jobs = Some(self.keep_succeeded_jobs);
        controller.status_url = self.status_url_for("operations/{operation}");
        controller.rollout_url = self.web_page("rollouts/{rollout}");
        let leader = self.leader_elect.then(|| {
            let mut cfg = LeaderConfig::new(&self.namespace, leader::default_identity());
            cfg.lease_duration = self.lease_duration.max(Duration::from_secs(3));
            cfg
        });
        Ok(ServiceConfig {
            source: self.git.source_config(),
            root: self.path.clone(),
            namespace: self.namespace.clone(),
            interval: self.interval,
            resync_interval: self.resync_interval,
            controller,
            status_url: self.status_url_for("commits/{commit}"),
            leader,
            unreachable_threshold: self.unreachable_threshold,
            verification: self.trust.verification()?,
            pull_requests: self.pull_requests,
            pr_comments: self.plan_comments()?,
            web_caches: None,
            trees: Arc::new(self.kubespray_trees()?),
        })
    }
}

/// Runs `kok run` until SIGTERM or SIGINT.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    super::malloc::tune(args.local);
    // libgit2 would keep every small tree a pass reads (one per cluster directory) in its object cache
    // for as long as kok runs; a pass keeps the trees it reads itself (`source::tree::Trees`).
    git2::opts::enable_caching(false);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(serve(args))
}

async fn serve(args: Args) -> anyhow::Result<ExitCode> {
    let stop = shutdown_signal();
    // Bad trust material stops kok before it connects anywhere.
    if let Some(verification) = args.trust.verification()? {
        if let Some(repo) = crate::source::RemoteUrl::parse(&args.git.repo)?.local_path() {
            verification.files.check_outside(&repo)?;
        }
    }
    if args.local {
        return serve_local(args, stop).await;
    }
    let client = kube::Client::try_default()
        .await
        .context("connecting to the meta-cluster (in-cluster config, or KUBECONFIG / ~/.kube/config)")?;
    run_with_client(args, client, stop).await
}

/// Local mode: the embedded API server and the local Job runner around the normal service.
async fn serve_local(
    mut args: Args,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<ExitCode> {
    let state_dir = args.state_dir.clone();
    std::fs::create_dir_all(&state_dir).with_context(|| {
        format!(
            "creating the state directory {} (--state-dir)",
            state_dir.display()
        )
    })?;
    let state_dir = state_dir
        .canonicalize()
        .with_context(|| format!("resolving the state directory {}", state_dir.display()))?;
    // One replica by construction; the listener stays on loopback unless asked otherwise.
    args.leader_elect = false;
    if args.listen == server::DEFAULT_LISTEN {
        args.listen = "127.0.0.1:0".to_string();
    }
    if args.git.cache_dir.is_none() {
        args.git.cache_dir = Some(state_dir.join("cache"));
    }
    let api = crate::local::embedded::start(&state_dir, args.api_port, &args.namespace).await?;
    let client = api.client();
    let cfg = args.service_config()?;
    let workdir = match &args.workdir {
        Some(dir) => crate::local::runner::Workdir::Fixed(dir.clone()),
        None => crate::local::runner::Workdir::Checkout {
            repo_path: cache_repo_path(&cfg.source)?,
        },
    };
    let runner_cfg = crate::local::runner::RunnerConfig {
        namespace: args.namespace.clone(),
        state_dir: state_dir.clone(),
        workdir,
        max_parallel: args.max_concurrent_jobs.max(1),
        api_url: Some(api.url()),
        image_workdirs: image_workdirs(&args.image_workdirs)?,
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let store_failed = api.store_failed();
    tokio::spawn(async move {
        tokio::select! {
            _ = stop => {}
            e = store_failed => tracing::error!(error = %e, "stopping"),
        }
        let _ = stop_tx.send(true);
    });
    let runner = tokio::spawn(crate::local::runner::run(
        client.clone(),
        runner_cfg,
        wait_true(stop_rx.clone()),
    ));
    let result = tokio::select! {
        r = run_with_client(args, client, wait_true(stop_rx)) => r,
        e = api.store_failed_past_grace() => Err(e),
    };
    match runner.await {
        Ok(Err(e)) => tracing::warn!(error = %e, "the local Job runner stopped with an error"),
        Err(e) => tracing::warn!(error = %e, "the local Job runner task failed"),
        Ok(Ok(())) => {}
    }
    let store_failure = api.store_failure();
    api.stop().await;
    match store_failure {
        Some(e) => Err(e),
        None => result,
    }
}

/// The `--image-workdir` map, each directory made absolute; an image given twice with two directories is
/// refused, and so is a directory that does not exist.
fn image_workdirs(
    pairs: &[(String, PathBuf)],
) -> anyhow::Result<std::collections::BTreeMap<String, PathBuf>> {
    let mut map = std::collections::BTreeMap::new();
    for (image, dir) in pairs {
        let abs = dir.canonicalize().with_context(|| {
            format!(
                "--image-workdir {image}={}: the directory cannot be used",
                dir.display()
            )
        })?;
        if let Some(other) = map.insert(image.clone(), abs.clone()) {
            if other != abs {
                anyhow::bail!(
                    "--image-workdir maps {image} twice ({} and {}); give one directory per image",
                    other.display(),
                    abs.display()
                );
            }
        }
    }
    Ok(map)
}

/// The bare cache repository the source keeps for `config`.
fn cache_repo_path(config: &crate::source::SourceConfig) -> anyhow::Result<PathBuf> {
    let remote = crate::source::RemoteUrl::parse(&config.url)?;
    Ok(config
        .cache_dir
        .join(crate::source::cache_dir_name(remote.as_str())))
}

/// Runs the service against `client` until `shutdown` resolves (the process entry point and tests).
pub async fn run_with_client(
    args: Args,
    client: kube::Client,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<ExitCode> {
    let mut cfg = args.service_config()?;
    let cache_repo = cache_repo_path(&cfg.source)?;
    // The service's one registry: the controller, the reporter, the poll loop and /metrics share it.
    let metrics = cfg.controller.metrics.clone();
    let sinks = report::Sinks::new(args.sinks(cache_repo)?, metrics.clone())
        .with_max_contexts(args.status_max_contexts);
    let (trigger_tx, trigger_rx) = crate::source::trigger::channel();
    let listener = server::bind(&args.listen).await?;
    let mut state = ServerState::new(Readiness::new(cfg.unreachable_threshold), metrics);
    if let Some(path) = &args.webhook_secret_file {
        let secret = std::fs::read(path)
            .with_context(|| format!("reading the webhook secret file {}", path.display()))?;
        state.webhook_secret = Some(WebhookSecret::new(secret));
        state.trigger = Some(trigger_tx.clone());
    }
    let readiness = state.readiness.clone();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    if let Some((routes, caches)) = web_view(&args, &client, stop_rx.clone())? {
        state.web = Some(routes);
        cfg.web_caches = Some(caches);
        if let Ok(addr) = listener.local_addr() {
            println!("web view: http://{addr}/");
        }
    }
    let server = tokio::spawn(server::serve(listener, state, wait_true(stop_rx)));
    let result = service::run(client, cfg, sinks, (trigger_tx, trigger_rx), readiness, shutdown).await;
    let _ = stop_tx.send(true);
    if let Ok(Err(e)) = server.await {
        tracing::warn!(error = %e, "HTTP listener stopped with an error");
    }
    result?;
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

/// The web view's routes and the slot its caches go in: in local mode open on loopback with the log files
/// of the state directory; in a meta-cluster only with `--web`, each request's token checked
/// (`web::auth`) and logs read from the Jobs' pods.
fn web_view(
    args: &Args,
    client: &kube::Client,
    stopping: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<Option<(axum::Router, crate::web::view::CacheSlot)>> {
    use crate::web::{auth, logs, view::CacheView, Web};
    if !args.local && !args.web {
        return Ok(None);
    }
    let logs: Arc<dyn logs::LogSource> = if args.local {
        Arc::new(logs::LocalLogs {
            state_dir: args.state_dir.clone(),
        })
    } else {
        Arc::new(logs::PodLogs::new(client.clone(), args.namespace.clone()))
    };
    let view = CacheView::new().with_repository(cache_repo_path(&args.git.source_config())?);
    let caches = view.slot();
    let routes = crate::web::router(Web::new(Arc::new(view), logs, stopping));
    if args.local {
        return Ok(Some((routes, caches)));
    }
    let gate = auth::Gate::new(client.clone(), &args.namespace);
    Ok(Some((auth::protect(routes, gate), caches)))
}

async fn wait_true(mut rx: tokio::sync::watch::Receiver<bool>) {
    while !*rx.borrow() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// Resolves on SIGTERM or SIGINT.
/// Resolves at the first SIGTERM or SIGINT. The handlers are installed when this is called, not when it is
/// first awaited: a signal that arrives while kok is still starting (its embedded API server already
/// answering, say) waits for it, instead of ending the process before it has a handler.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{signal, Signal, SignalKind};
    let term = signal(SignalKind::terminate()).ok();
    let interrupt = signal(SignalKind::interrupt()).ok();
    async move {
        let received = |s: Option<Signal>| async move {
            match s {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = received(term) => {}
            _ = received(interrupt) => {}
        }
        tracing::info!("shutting down: finishing in-flight work");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn web_url_links_operation_statuses_to_their_page_and_kok_sync_to_the_commit_page() {
        use clap::Parser as _;
        let parse = |extra: &[&str]| {
            let argv = [&["kok", "run", "--repo", "/tmp/repo"][..], extra].concat();
            match crate::cli::Cli::try_parse_from(argv).map(|cli| cli.command) {
                Ok(crate::cli::Command::Run(args)) => Ok(args),
                Ok(other) => panic!("{other:?}"),
                Err(e) => Err(e),
            }
        };
        let args = parse(&["--web-url", "https://kok.example/view/"]).unwrap();
        let cfg = args.service_config().unwrap();
        assert_eq!(
            cfg.controller.status_url.as_deref(),
            Some("https://kok.example/view/operations/{operation}")
        );
        assert_eq!(
            cfg.status_url.as_deref(),
            Some("https://kok.example/view/commits/{commit}")
        );
        assert_eq!(
            cfg.controller.rollout_url.as_deref(),
            Some("https://kok.example/view/rollouts/{rollout}")
        );
        assert!(
            parse(&["--web-url", "https://a", "--status-url", "https://b/{job}"]).is_err(),
            "one link template at a time"
        );
    }

    #[test]
    fn durations_accept_plain_seconds_and_units() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("5 minutes").is_err());
        assert!(parse_duration("m").is_err());
    }

    #[test]
    fn image_workdirs_are_image_equals_directory() {
        assert_eq!(
            parse_image_workdir("quay.io/kubespray/kubespray:v2.27.0=/src/ks=2"),
            Ok((
                "quay.io/kubespray/kubespray:v2.27.0".to_string(),
                PathBuf::from("/src/ks=2")
            ))
        );
        assert!(parse_image_workdir("/src/ks").is_err());
        assert!(parse_image_workdir("=/src/ks").is_err());
    }
}
