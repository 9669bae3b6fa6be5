//! `kok run` as a long-running service: triggers → poll → reconcile pass, beside the controller,
//! the status reporter and leader election, with graceful shutdown.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use git2::Oid;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};
use kube::Client;
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::controller::{self, ControllerConfig};
use crate::leader::{self, LeaderConfig};
use crate::materialize::state;
use crate::pulls::{PullConfig, PullIo, PullRequests};
use crate::reconcile::{self, PassConfig, PassError, SharedSource, Stopping};
use crate::report::comments::PlanComments;
use crate::report::notify::Notifier;
use crate::report::{self, Reporter};
use crate::server::Readiness;
use crate::source::trigger::{self, Interval, TriggerReceiver, TriggerSender};
use crate::source::verify::{RangeVerdict, Verification};
use crate::source::{Poll, Source, SourceConfig};

/// Most refused commits below a refused tip that get their own `kok/sync: error` (the warning
/// log names every one).
const MAX_REFUSED_STATUSES: usize = 20;

/// Longest Event note the API server accepts.
const EVENT_NOTE_MAX: usize = 1024;

/// How long the controller and the reporter get to finish in-flight writes on shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Everything the service needs, resolved from flags.
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    /// The git remote, ref, cache and credentials.
    pub source: SourceConfig,
    /// Root directory of the cluster directories (`--path`).
    pub root: String,
    /// kok's namespace.
    pub namespace: String,
    /// Time between polls.
    pub interval: Duration,
    /// Time between full resyncs (every cluster re-rendered; unchanged objects are not written).
    pub resync_interval: Duration,
    /// Controller settings (Job slots, Job defaults, status URL).
    pub controller: ControllerConfig,
    /// `--status-url` template.
    pub status_url: Option<String>,
    /// Leader election; `None` runs without a Lease (a single replica, or local mode).
    pub leader: Option<LeaderConfig>,
    /// How long the remote may be unreachable before `/readyz` fails.
    pub unreachable_threshold: Duration,
    /// Signature verification; `None` reconciles every commit.
    pub verification: Option<Verification>,
    /// Plan open pull requests and put `kok/plan` on their heads.
    pub pull_requests: bool,
    /// With `--pr-comments`: the plan comment kept on each pull request.
    pub pr_comments: Option<Arc<PlanComments>>,
    /// Where the web view reads the watch caches from, when it is on.
    pub web_caches: Option<crate::web::view::CacheSlot>,
    /// Local mode: the checked-out kubespray trees whose own files pre-flight reads.
    pub trees: Arc<crate::preflight::Trees>,
}

/// Failures that stop the service.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The git cache could not be opened.
    #[error("opening the git source failed: {0}")]
    OpenSource(#[source] PassError),
    /// The last reconciled commit could not be read from the meta-cluster.
    #[error("reading the last reconciled commit failed: {0}")]
    LoadState(#[source] state::StateError),
    /// Leader election could not talk to the API server.
    #[error(transparent)]
    Leader(#[from] leader::LeaderError),
    /// Another replica took the Lease while this one was leading.
    #[error("leadership was lost; stopping so that only one replica reconciles")]
    LeadershipLost,
}

/// Runs the service until `shutdown` resolves: waits for leadership, then runs the controller, the
/// reporter and the poll loop. On shutdown the poll loop finishes its in-flight pass, the controller
/// and reporter stop, and the Lease is released; Jobs keep running and are picked up on restart.
pub async fn run(
    client: Client,
    cfg: ServiceConfig,
    sinks: report::Sinks,
    trigger: (TriggerSender, TriggerReceiver),
    readiness: Arc<Readiness>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServiceError> {
    let (trigger_tx, triggers) = trigger;
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopping = Stopping::on(stop_rx);
    let stopped = {
        let stopping = stopping.clone();
        move || {
            let stopping = stopping.clone();
            async move { stopping.wait().await }
        }
    };

    let metrics = cfg.controller.metrics.clone();
    metrics.set_leader(false);
    let mut leadership = None;
    if let Some(lc) = cfg.leader.clone() {
        tokio::select! {
            led = leader::lead(client.clone(), lc) => leadership = Some(led?),
            _ = stopped() => return Ok(()),
        }
    }
    metrics.set_leader(true);

    let source_cfg = cfg.source.clone();
    let source = tokio::task::spawn_blocking(move || Source::open(source_cfg))
        .await
        .map_err(|e| ServiceError::OpenSource(PassError::Worker(e.to_string())))?
        .map_err(|e| ServiceError::OpenSource(e.into()))?;
    let local_repo = source.remote().local_path();
    let source: SharedSource = Arc::new(Mutex::new(source));
    let _watcher = local_repo.and_then(|path| match trigger::watch_local(&path, trigger_tx.clone()) {
        Ok(w) => Some(w),
        Err(e) => {
            warn!(error = %e, "not watching the local repository; polling on the interval only");
            None
        }
    });

    let feeds = controller::live::caches(&cfg.controller.namespace);
    let live = feeds.live.clone();
    if let Some(slot) = &cfg.web_caches {
        let _ = slot.set(live.clone());
    }
    let controller_task = tokio::spawn(controller::run(
        client.clone(),
        cfg.controller.clone(),
        feeds,
        stopped(),
    ));
    // Notifications are one more sink of the reporter, with their own outbox and delivery loop.
    let notifier = Notifier::new(client.clone(), cfg.namespace.clone(), metrics.clone());
    notifier.watch_clusters(live.clusters.clone());
    let sinks = sinks.with_sink(notifier.sink());
    let notifier_task = tokio::spawn(notifier.clone().run(stopped()));
    let reporter = Reporter::new(
        client.clone(),
        cfg.namespace.clone(),
        sinks,
        report::Backoff::default(),
    );
    reporter.link_statuses_to(cfg.controller.status_url.as_deref());
    let reporter_task = tokio::spawn(reporter.clone().run(stopped()));

    let lost = async {
        match leadership.as_mut() {
            Some(l) => l.lost().await,
            None => std::future::pending().await,
        }
    };
    let result = tokio::select! {
        r = poll_loop(&client, &cfg, &source, (&reporter, &notifier), (trigger_tx.clone(), triggers), &readiness, live, stopping.clone()) => r,
        _ = lost => Err(ServiceError::LeadershipLost),
    };
    // Whatever ended the loop, stop the controller and the reporter too.
    // A kube Controller stopped before its first list completes can wait for it forever; what it
    // would still do is idempotent and redone at the next start, so it gets a bounded grace period.
    for (name, task) in [
        ("controller", controller_task),
        ("status reporter", reporter_task),
        ("notifier", notifier_task),
    ] {
        let abort = task.abort_handle();
        if tokio::time::timeout(SHUTDOWN_GRACE, task).await.is_err() {
            warn!(
                task = name,
                "did not stop within the grace period; stopping it now"
            );
            abort.abort();
        }
    }
    metrics.set_leader(false);
    if let Some(l) = leadership {
        if let Err(e) = l.step_down().await {
            warn!(error = %e, "releasing the leader Lease failed; a standby takes over when it expires");
        }
    }
    result
}

/// Reports a refused tip: a counter per refused commit and reason, a warning, an Event, and `kok/sync:
/// error` on the tip and on each refused commit. Nothing of the commit is materialized.
async fn refuse(
    client: &Client,
    cfg: &ServiceConfig,
    reporter: &Arc<Reporter>,
    tip: Oid,
    verdict: &RangeVerdict,
    metrics: &crate::metrics::Metrics,
) {
    let description = verdict.describe(tip);
    for (commit, refusal) in &verdict.refused {
        metrics.signature_refusal(refusal.reason());
        warn!(%commit, %tip, reason = refusal.reason(), "commit refused: {refusal}");
    }
    warn!(commit = %tip, "{description}");
    publish_refusal(client, &cfg.namespace, &description).await;
    let mut statuses = vec![(tip, report::refused_status(&description))];
    let below = verdict.refused.iter().filter(|(c, _)| *c != tip);
    for (commit, refusal) in below.take(MAX_REFUSED_STATUSES) {
        let text = format!("not reconciled: {refusal}");
        statuses.push((*commit, report::refused_status(&text)));
    }
    for (commit, status) in statuses {
        if let Err(e) = reporter.deliver_sync(&commit.to_string(), &status).await {
            warn!(error = %e, %commit, "recording the kok/sync status failed");
        }
    }
}

/// A Warning Event `CommitRefused` on kok's state ConfigMap.
async fn publish_refusal(client: &Client, namespace: &str, note: &str) {
    let recorder = crate::events::Publisher::new(client);
    let ev = Event {
        type_: EventType::Warning,
        reason: "CommitRefused".into(),
        note: Some(report::status::cut(note, EVENT_NOTE_MAX)),
        action: "VerifySignatures".into(),
        secondary: None,
    };
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: Some(crate::api::STATE_CONFIG_MAP.into()),
        namespace: Some(namespace.into()),
        ..Default::default()
    };
    if let Err(e) = recorder.publish(&ev, &reference).await {
        warn!(error = %e, "the CommitRefused event was not published");
    }
}

/// Sets the notification receivers from kok.yml at `commit` (kept as they are when it cannot be read:
/// the pass reported its errors).
async fn configure_notifications(source: &SharedSource, commit: Oid, root: &str, notifier: &Notifier) {
    let root = root.to_string();
    let read = reconcile::with_source(source, move |s| {
        let tree = s.tree(commit)?;
        Ok(crate::layout::parse_repo_settings(&tree, &root).map(|settings| settings.notifications))
    })
    .await;
    match read {
        Ok(Ok(receivers)) => notifier.set_receivers(receivers),
        Ok(Err(_)) => warn!(%commit, "kok.yml has errors; the notification receivers stay as they were"),
        Err(e) => warn!(%commit, error = %e, "reading kok.yml for its notification receivers failed"),
    }
}

/// The record of what ran that the passes read back; says once, at start, when there is none.
fn record_book(reporter: &Reporter) -> report::record::RecordBook {
    let book = reporter.sinks().record_book();
    if book.is_kept() {
        info!(sinks = ?book.names(), "the record of what ran is read back from these sinks: a lost meta-cluster reruns nothing");
    } else {
        warn!(
            "no status sink keeps a record of what ran (--status none): if this namespace's objects are lost, \
             every current entry of operations.yml runs again; keep --status notes (the default) or a forge"
        );
    }
    book
}

/// What the poll loop carries from one round to the next.
struct LoopState {
    /// Where notifications go: its receivers follow kok.yml of each reconciled commit.
    notifier: Arc<Notifier>,
    /// What each pass needs besides the source and the client.
    pass_cfg: PassConfig,
    /// The last reconciled commit.
    last: Option<Oid>,
    /// The tip last refused, so that a refusal is counted, logged and reported once per tip.
    refused_tip: Option<Oid>,
    next_resync: tokio::time::Instant,
    interval: Interval,
}

#[allow(clippy::too_many_arguments)] // the loop's shared handles, each used throughout
async fn poll_loop(
    client: &Client,
    cfg: &ServiceConfig,
    source: &SharedSource,
    (reporter, notifier): (&Arc<Reporter>, &Arc<Notifier>),
    (again, mut triggers): (TriggerSender, TriggerReceiver),
    readiness: &Readiness,
    live: Arc<controller::live::LiveCache>,
    stopping: Stopping,
) -> Result<(), ServiceError> {
    let pass_cfg = PassConfig {
        namespace: cfg.namespace.clone(),
        root: cfg.root.clone(),
        status_url: cfg.status_url.clone(),
        live: Some(live),
        trees: cfg.trees.clone(),
        records: Some(Arc::new(record_book(reporter))),
        stopping: stopping.clone(),
    };
    let saved = state::load_state(client, &cfg.namespace)
        .await
        .map_err(ServiceError::LoadState)?;
    let last: Option<Oid> = saved
        .filter(|s| state::same_repo(&s.repo, &cfg.source.url))
        .and_then(|s| Oid::from_str(&s.commit).ok());
    if let Some(commit) = last {
        info!(%commit, "resuming from the last reconciled commit");
        configure_notifications(source, commit, &cfg.root, notifier).await;
    }
    let mut round = LoopState {
        notifier: notifier.clone(),
        pass_cfg,
        last,
        refused_tip: None,
        next_resync: tokio::time::Instant::now() + cfg.resync_interval,
        interval: Interval::new(cfg.interval),
    };
    // With no sink and no comments a plan would reach no one.
    let reported = reporter
        .sinks()
        .names()
        .iter()
        .any(|name| name != report::notify::SINK_NAME)
        || cfg.pr_comments.is_some();
    let pull_cfg = (cfg.pull_requests && reported).then(|| PullConfig {
        namespace: cfg.namespace.clone(),
        root: cfg.root.clone(),
        branch: reconcile::short_ref(&cfg.source.reference),
        comments: cfg.pr_comments.clone(),
    });
    let mut pulls = PullRequests::new();
    // The first round runs at once (unless kok is already stopping); later ones wait for the interval or
    // a trigger.
    let mut first = true;
    loop {
        if !first {
            tokio::select! {
                () = stopping.wait() => return Ok(()),
                _ = round.interval.tick() => {}
                _ = triggers.recv() => {}
            }
        }
        first = false;
        if stopping.begun() {
            return Ok(());
        }
        round.reconcile(client, cfg, source, reporter, readiness).await;
        if stopping.begun() {
            return Ok(());
        }
        if let Some(pull_cfg) = &pull_cfg {
            let events = triggers.take_pull_events();
            let heads = match reconcile::with_source(source, |s| Ok(s.polled_pull_requests().to_vec())).await
            {
                Ok(heads) => heads,
                Err(e) => {
                    warn!(error = %e, "reading the listed pull requests failed");
                    continue;
                }
            };
            let base = round.last;
            let io = PullIo {
                client,
                live: round.pass_cfg.live.as_deref(),
                source,
                sinks: reporter.sinks(),
            };
            let more = pulls.round(io, pull_cfg, &heads, base, events).await;
            if more {
                again.trigger(trigger::Reason::Manual);
            }
        }
    }
}

impl LoopState {
    /// Polls the branch and reconciles a new commit (or a due full resync).
    async fn reconcile(
        &mut self,
        client: &Client,
        cfg: &ServiceConfig,
        source: &SharedSource,
        reporter: &Arc<Reporter>,
        readiness: &Readiness,
    ) {
        let metrics = &cfg.controller.metrics;
        let full = tokio::time::Instant::now() >= self.next_resync;
        // A refused tip counts as known: polling it again costs one listing, and it is verified
        // again (with the trust material read afresh) at the next resync or push.
        let known = self.refused_tip.or(self.last);
        let polled = reconcile::with_source(source, move |s| s.poll(known)).await;
        let commit = match polled {
            Err(e) => {
                metrics.poll("error");
                self.interval.failure();
                warn!(error = %e, failures = self.interval.failures(), "poll failed");
                readiness.remote_unreachable();
                return;
            }
            Ok(Poll::Unchanged { .. }) if !full => {
                metrics.poll("unchanged");
                self.interval.success();
                readiness.remote_reachable();
                readiness.mark_reconciled();
                return;
            }
            Ok(p) => {
                metrics.poll("changed");
                metrics.fetch("ok");
                readiness.remote_reachable();
                p.commit()
            }
        };
        let last = self.last;
        if let (Some(verification), true) = (&cfg.verification, last != Some(commit)) {
            match reconcile::verify_signatures(source, verification, last, commit).await {
                Ok(verdict) if verdict.trusted() => {
                    if let Some(signer) = &verdict.tip_signer {
                        info!(%commit, %signer, "commit signature verified");
                    }
                }
                Ok(verdict) => {
                    // Refusing is kok doing its job: it stays ready, so webhooks still reach it.
                    self.interval.success();
                    readiness.mark_reconciled();
                    if full {
                        self.next_resync = tokio::time::Instant::now() + cfg.resync_interval;
                    }
                    if self.refused_tip != Some(commit) {
                        self.refused_tip = Some(commit);
                        refuse(client, cfg, reporter, commit, &verdict, metrics).await;
                    }
                    return;
                }
                Err(e) => {
                    self.interval.failure();
                    error!(error = %e, %commit, "verifying commit signatures failed; not reconciling the commit");
                    return;
                }
            }
        }
        match reconcile::pass(client, source, &self.pass_cfg, last, commit, full, metrics).await {
            Ok(outcome) => {
                self.interval.success();
                if full {
                    self.next_resync = tokio::time::Instant::now() + cfg.resync_interval;
                }
                if last != Some(commit) {
                    let status = report::sync_status(
                        &outcome.commit,
                        outcome.applied.len(),
                        &outcome.diagnostics,
                        cfg.status_url.as_deref(),
                        &cfg.namespace,
                    );
                    if let Err(e) = reporter.deliver_sync(&outcome.commit, &status).await {
                        warn!(error = %e, "recording the kok/sync status failed");
                    }
                }
                if last != Some(commit) || full {
                    configure_notifications(source, commit, &cfg.root, &self.notifier).await;
                }
                self.last = Some(commit);
                self.refused_tip = None;
                readiness.remote_reachable();
                readiness.mark_reconciled();
            }
            Err(PassError::Stopped) => {
                info!(%commit, "kok is stopping: the pass ended after the clusters it had started; the next start reconciles the commit again");
            }
            Err(e) => {
                self.interval.failure();
                error!(error = %e, %commit, "reconciling the commit failed; retrying at the next poll");
            }
        }
    }
}
