//! The embedded controller: ClusterOperations become ansible Jobs, one at a time per cluster.
//!
//! - [`job`]: the Job and its entry script (pure).
//! - [`queue`]: queue order, start decisions, Job outcomes, history limit (pure).
//! - [`operation`]: the ClusterOperation reconciler (Pending → Queued → Running → Succeeded/Failed).
//! - [`verify`]: after a successful Job, the verification of the workload cluster ([`crate::health`]).
//! - [`health`]: between operations, the periodic health checks of every cluster with a kubeconfig.
//! - `gauges`: the fleet's gauges (queue, holds, health, rollouts), read from the caches at each scrape.
//! - [`cluster`]: the Cluster reconciler (conditions, last operation, counts, history limit).
//! - [`runner`]: the work queue each reconciler runs from (names, delays, a bound on concurrency).
//! - [`op_cache`]: kok's own records of the ClusterOperations, by cluster and by rollout.
//! - [`cache`]: the indexes by cluster and what the caches keep apart.
//! - [`live`]: the watch caches, shared with the reconcile pass.
//! - [`secret`]: the ssh and vault Secret checks, and the redaction of what a Job mounts.
//! - [`credentials`]: the Secrets a cluster's runs keep between them, and the RBAC that guards them.
//! - [`start`]: why a run's pod cannot start, or stopped before its end (pure).
//! - [`summary`]: the run summary a Job's pod leaves as its termination message (pure).
//! - [`schedule`]: cron firings of scheduled operations.
//! - [`wave`]: rollout waves as start decisions, a rollout's phase and counts (pure).
//! - [`rollout`]: the wave decision before a run of a rollout starts, its wakes, the FleetRollout status.
//! - [`window`]: maintenance windows and freezes as start decisions (pure), and the controller's clock.
//!
//! [`run`] runs all the loops until shutdown; tests run it in-process against testkit.

pub mod cache;
pub mod cluster;
mod config_maps;
pub mod credentials;
mod gauges;
pub mod health;
pub mod job;
pub mod live;
pub mod op_cache;
pub mod operation;
pub mod queue;
pub mod restore;
pub mod retention;
pub mod rollout;
pub mod runner;
pub mod schedule;
pub mod secret;
pub mod start;
pub mod summary;
pub mod verify;
pub mod wave;
pub mod window;

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Pod, Secret};
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use tracing::warn;

use crate::api::{managed_selector, Cluster, ClusterOperation, FleetRollout};
pub use job::JobConfig;
pub use runner::{Action, WorkQueue};

/// Settings of the controller.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// Namespace of every object kok manages.
    pub namespace: String,
    /// Most Jobs running at once across clusters (`--max-concurrent-jobs`).
    pub max_concurrent_jobs: usize,
    /// Settings of every Job.
    pub job: JobConfig,
    /// `--status-url` template for commit statuses' links.
    pub status_url: Option<String>,
    /// Link of each `kok/rollout/<name>` status, `{rollout}` replaced by the name (with `--web-url`, the
    /// web view's `rollouts/{rollout}`).
    pub rollout_url: Option<String>,
    /// How often a queued operation looks again even without a trigger (a safety net; finishing
    /// operations wake the queue at once).
    pub queue_resync: Duration,
    /// How long a failed verification of a workload cluster waits before it looks again.
    pub verify_retry: Duration,
    /// Time between health checks of every cluster with a kubeconfig (`--health-interval`); zero: none.
    pub health_interval: Duration,
    /// Longest one cluster's health check may wait for its API server before it counts as unreachable.
    pub health_timeout: Duration,
    /// Where the start decisions read the time (maintenance windows and freezes).
    pub clock: window::Clock,
    /// The service's metrics: Job durations, health rounds, and the fleet's gauges read from the caches.
    pub metrics: crate::metrics::Metrics,
    /// kok's own ServiceAccount (`--own-service-account`): no operation's Job runs as it.
    pub own_service_account: Option<String>,
    /// How long a succeeded run's Job is kept after it completed (`--keep-succeeded-jobs`); `None`: always
    /// ([`retention`]).
    pub keep_succeeded_jobs: Option<Duration>,
}

impl ControllerConfig {
    /// Defaults for `namespace`: 4 concurrent Jobs, default Job settings, queue resync 60 s.
    pub fn new(namespace: impl Into<String>) -> Self {
        ControllerConfig {
            namespace: namespace.into(),
            max_concurrent_jobs: 4,
            job: JobConfig::default(),
            status_url: None,
            rollout_url: None,
            queue_resync: Duration::from_secs(60),
            verify_retry: Duration::from_secs(10),
            health_interval: Duration::from_secs(300),
            health_timeout: health::OBSERVE_TIMEOUT,
            clock: window::Clock::system(),
            metrics: crate::metrics::Metrics::new(),
            own_service_account: None,
            keep_succeeded_jobs: Some(retention::KEEP_SUCCEEDED_JOBS),
        }
    }
}

/// Failures of a reconcile; each is retried by the error policy.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// Reading or writing a ClusterOperation or its Job failed.
    #[error("{action} for ClusterOperation {name} in namespace {namespace} failed: {source}")]
    Operation {
        /// What was attempted, e.g. `creating Job kok-x`.
        action: String,
        /// The ClusterOperation.
        name: String,
        /// Namespace.
        namespace: String,
        /// What the API server said.
        #[source]
        source: kube::Error,
    },
    /// Reading or writing a Cluster or its operations failed.
    #[error("{action} for Cluster {name} in namespace {namespace} failed: {source}")]
    Cluster {
        /// What was attempted.
        action: String,
        /// The Cluster.
        name: String,
        /// Namespace.
        namespace: String,
        /// What the API server said.
        #[source]
        source: kube::Error,
    },
}

/// Shared state of the reconcilers.
pub struct Context {
    /// Client of the meta-cluster.
    pub client: Client,
    /// Settings.
    pub config: ControllerConfig,
    /// Publishes one Event per transition.
    pub recorder: crate::events::Publisher,
    /// Every ClusterOperation kok manages, as kok's own records, by cluster, and the running ones.
    pub operations: Arc<op_cache::OpCache>,
    /// The Secrets of the namespace, key names only ([`secret::strip_values`]).
    pub secrets: Store<Secret>,
    /// kok's Jobs in the namespace: metadata and status, without their spec ([`strip_job`]).
    pub jobs: Store<Job>,
    /// What the pods of kok's Jobs, and the Job controller's `FailedCreate` Events, say, by Job.
    pub pods: Arc<cache::RunPods>,
    /// Operations whose Job this process created and whose Running phase the cache may not show yet,
    /// keyed by name, with the message their start records: counted as busy so that no second Job
    /// starts for their cluster meanwhile, and started (not adopted) when their start is recorded.
    pub claims: Mutex<BTreeMap<String, Option<String>>>,
    /// Serializes start decisions, so two reconciles never both take the last slot of a cluster.
    pub start_lock: tokio::sync::Mutex<()>,
    /// Operations that found every Job slot taken; woken when an operation finishes.
    pub slot_waiters: Mutex<HashSet<String>>,
    /// The operations to reconcile: a watch event, a Job's or a Secret's, or a finished operation
    /// triggers them.
    pub queue: Arc<WorkQueue>,
    /// The Clusters kok manages (their `kubeconfigSecretRef`).
    pub clusters: Store<Cluster>,
    /// The verifications of workload clusters under way.
    pub verifications: verify::Verifications,
    /// The data of the pinned ConfigMaps verification and health read, each read once.
    pub pinned: cache::PinnedData,
    /// The rollouts' `FleetRollout` objects.
    pub rollouts: Store<FleetRollout>,
    /// The rollouts whose status to look at: a run's change or the object's triggers them.
    pub rollout_queue: Arc<WorkQueue>,
}

/// Runs the ClusterOperation controller, the Cluster controller, the scheduler and the watches that
/// fill `feeds` until `shutdown`.
pub async fn run(
    client: Client,
    config: ControllerConfig,
    feeds: live::Feeds,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let ns = config.namespace.clone();
    let live::Feeds {
        clusters: cluster_writer,
        rollouts: rollout_writer,
        live,
    } = feeds;
    config.metrics.watch_fleet(live.clone());
    let stop = Signal::raised_by(shutdown);
    let stopped = || stop.wait();

    let cluster_queue = Arc::new(WorkQueue::default());
    let (secrets, secret_writer) = reflector::store::<Secret>();
    let (job_store, job_writer) = reflector::store::<Job>();
    let ctx = new_context(&client, config, &live, secrets, job_store);
    let watches = watch_all(
        &client,
        &ctx,
        &live,
        cluster_writer,
        rollout_writer,
        job_writer,
        &cluster_queue,
    );
    let (stores_listed, listed) = stores_listed(&ctx);
    let op_loop = ctx.queue.run(
        CONCURRENT_RECONCILES,
        |name| reconcile_operation(ctx.clone(), name),
        stopped(),
    );
    let cluster_loop = cluster_queue.run(
        CONCURRENT_RECONCILES,
        |name| reconcile_cluster(ctx.clone(), &name),
        stopped(),
    );
    let rollout_loop = ctx.rollout_queue.run(
        CONCURRENT_RECONCILES,
        |name| rollout::reconcile_status(ctx.clone(), name),
        stopped(),
    );
    let cm_cache = live::watch_config_maps(client.clone(), live.clone(), stopped());
    let secret_loop = watch_secrets(
        Api::namespaced(client.clone(), &ns),
        secret_writer,
        ctx.clone(),
        live.clusters.clone(),
        cluster_queue.clone(),
        stopped(),
    );
    let health_checks = health::run(ctx.clone(), stopped());
    let job_retention = once(listed.wait(), stopped(), retention::run(ctx.clone(), stopped()));
    let scheduler = schedule::run_scheduler(client, ns.clone(), live.operations.clone(), stopped());
    futures::join!(
        once(listed.wait(), stopped(), op_loop),
        once(listed.wait(), stopped(), cluster_loop),
        once(listed.wait(), stopped(), rollout_loop),
        scheduler,
        secret_loop,
        until(stopped(), watches),
        cm_cache,
        health_checks,
        job_retention,
        until(stopped(), stores_listed)
    );
}

/// The controller's shared state over `live`'s caches and the Secret and Job stores.
fn new_context(
    client: &Client,
    config: ControllerConfig,
    live: &live::LiveCache,
    secrets: Store<Secret>,
    jobs: Store<Job>,
) -> Arc<Context> {
    Arc::new(Context {
        recorder: crate::events::Publisher::new(client),
        client: client.clone(),
        config,
        operations: live.operations.clone(),
        secrets,
        jobs,
        pods: Arc::new(cache::RunPods::default()),
        claims: Mutex::new(BTreeMap::new()),
        slot_waiters: Mutex::new(HashSet::new()),
        start_lock: tokio::sync::Mutex::new(()),
        queue: Arc::new(WorkQueue::default()),
        clusters: live.clusters.clone(),
        verifications: verify::Verifications::default(),
        pinned: cache::PinnedData::default(),
        rollouts: live.rollouts.clone(),
        rollout_queue: Arc::new(WorkQueue::default()),
    })
}

/// The watches that fill the caches and wake the reconcilers: the ClusterOperations, the Jobs and
/// their pods, the Clusters and the FleetRollouts.
fn watch_all(
    client: &Client,
    ctx: &Arc<Context>,
    live: &Arc<live::LiveCache>,
    cluster_writer: reflector::store::Writer<Cluster>,
    rollout_writer: reflector::store::Writer<FleetRollout>,
    job_writer: reflector::store::Writer<Job>,
    cluster_queue: &Arc<WorkQueue>,
) -> impl Future<Output = ()> {
    let ns = &ctx.config.namespace;
    let op_watch = watch_operations(client, ctx, live, cluster_queue);
    let job_watch = watch_jobs(client, job_writer, ctx);
    let cluster_watch = watch_clusters(client, live, cluster_writer, cluster_queue);
    let rollout_watch = watch_rollouts(client.clone(), ns, rollout_writer, ctx.clone(), live.clone());
    let pod_watch = watch_run_pods(client, ns, ctx.clone());
    async move {
        futures::future::join5(op_watch, job_watch, cluster_watch, rollout_watch, pod_watch).await;
    }
}

/// A signal any number of tasks wait for: it comes once raised, or once whatever was to raise it has
/// gone without doing so.
#[derive(Clone)]
struct Signal(tokio::sync::watch::Receiver<bool>);

impl Signal {
    /// A signal and the sender that raises it (`send_replace(true)`).
    fn new() -> (tokio::sync::watch::Sender<bool>, Signal) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        (tx, Signal(rx))
    }

    /// A signal raised when `event` comes (a task of its own waits for it).
    fn raised_by(event: impl Future<Output = ()> + Send + 'static) -> Signal {
        let (tx, signal) = Signal::new();
        tokio::spawn(async move {
            event.await;
            let _ = tx.send(true);
        });
        signal
    }

    /// Comes once the signal is raised.
    fn wait(&self) -> impl Future<Output = ()> {
        let mut rx = self.0.clone();
        async move {
            let _ = rx.wait_for(|raised| *raised).await;
        }
    }
}

/// Keeps the Job cache; a Job's change reconciles the operation that owns it, and a Job gone takes
/// what [`Context::pods`] knew of its pods with it.
fn watch_jobs(
    client: &Client,
    writer: reflector::store::Writer<Job>,
    ctx: &Arc<Context>,
) -> impl Future<Output = ()> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ctx.config.namespace);
    let wc = watcher::Config::default().labels(&managed_selector());
    let (run_pods, op_queue) = (ctx.pods.clone(), ctx.queue.clone());
    watcher(jobs, wc)
        .default_backoff()
        .modify(strip_job)
        .reflect(writer)
        .for_each(move |event| {
            let deleted = matches!(event, Ok(watcher::Event::Delete(_)));
            match event {
                Ok(
                    watcher::Event::Apply(job) | watcher::Event::InitApply(job) | watcher::Event::Delete(job),
                ) => {
                    if deleted {
                        run_pods.forget(&job.name_any());
                    }
                    let owners = job.metadata.owner_references.iter().flatten();
                    for owner in owners.filter(|o| o.kind == ClusterOperation::kind(&())) {
                        op_queue.trigger(&owner.name);
                    }
                }
                Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
                Err(e) => warn!(error = %e, "watching Jobs failed; retrying"),
            }
            futures::future::ready(())
        })
}

/// Follows the ClusterOperations through the live cache: a change reconciles the operation, its
/// rollout and (once its watch has shown it) its Cluster.
///
/// The cache holds an operation's change before its Cluster is reconciled, so the Cluster reconciler
/// (status, history limit) always sees it. A Cluster its watch has not shown yet is reconciled when
/// it does. An operation that finished, or whose hold was released, wakes the operations waiting
/// behind it once the cache shows it (see `OpCache::observe`).
fn watch_operations(
    client: &Client,
    ctx: &Arc<Context>,
    live: &Arc<live::LiveCache>,
    cluster_queue: &Arc<WorkQueue>,
) -> impl Future<Output = ()> {
    let (ctx, live, cluster_queue) = (ctx.clone(), live.clone(), cluster_queue.clone());
    live::operation_events(client, live.clone()).for_each(move |event| {
        match event {
            Ok((watcher::Event::Apply(op), lets_go)) => {
                ctx.queue.trigger(&op.name_any());
                if lets_go {
                    operation::let_waiting_go(&ctx, &op.spec.cluster);
                }
                if let Some(r) = &op.spec.rollout {
                    let finished = lets_go.then_some(op.spec.cluster.as_str());
                    match finished {
                        Some(_) => rollout::wake_rollout(&ctx, &r.name, finished),
                        None => ctx.rollout_queue.trigger(&r.name),
                    }
                }
                wake_known_cluster(&live, &cluster_queue, &op.spec.cluster);
            }
            Ok((watcher::Event::InitApply(op), _)) => ctx.queue.trigger(&op.name_any()),
            Ok((watcher::Event::Delete(op), _)) => {
                if let Some(r) = &op.spec.rollout {
                    ctx.rollout_queue.trigger(&r.name);
                }
                wake_known_cluster(&live, &cluster_queue, &op.spec.cluster)
            }
            Ok((watcher::Event::Init | watcher::Event::InitDone, _)) => {}
            Err(e) => warn!(error = %e, "watching ClusterOperations failed; retrying"),
        }
        futures::future::ready(())
    })
}

/// Keeps the Cluster cache; a Cluster's change reconciles it.
fn watch_clusters(
    client: &Client,
    live: &Arc<live::LiveCache>,
    writer: reflector::store::Writer<Cluster>,
    cluster_queue: &Arc<WorkQueue>,
) -> impl Future<Output = ()> {
    let cluster_queue = cluster_queue.clone();
    live::cluster_events(client, live.clone(), writer).for_each(move |event| {
        match event {
            // A new Cluster's first status waits as a change of its operations does: the pass creates
            // them right after it, and one write then counts them all.
            Ok(watcher::Event::Apply(c)) if c.status.is_none() => {
                cluster_queue.trigger_after(&c.name_any(), CLUSTER_SETTLE)
            }
            Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) => {
                cluster_queue.trigger(&c.name_any())
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "watching Clusters failed; retrying"),
        }
        futures::future::ready(())
    })
}

/// The task that raises the returned signal once the Secret and Job stores have listed: the
/// reconcilers wait for it.
///
/// One task waits for the stores: kube's `Store::wait_until_ready` wakes only the last of the tasks
/// that wait for it at once, so reconciles that each waited for it themselves (every unfinished
/// operation after a restart) could wait for good.
fn stores_listed(ctx: &Context) -> (impl Future<Output = ()>, Signal) {
    let (listed_tx, listed) = Signal::new();
    let (secret_cache, job_cache) = (ctx.secrets.clone(), ctx.jobs.clone());
    let task = async move {
        if secret_cache.wait_until_ready().await.is_ok() && job_cache.wait_until_ready().await.is_ok() {
            listed_tx.send_replace(true);
        }
    };
    (task, listed)
}

/// Reconciles the ClusterOperation `name` as the cache holds it.
async fn reconcile_operation(ctx: Arc<Context>, name: Arc<str>) -> Action {
    // Gone since it was triggered: nothing to do.
    let Some(op) = ctx.operations.get(&name) else {
        return Action::await_change();
    };
    let op = Arc::new(op);
    match operation::reconcile(op.clone(), ctx.clone()).await {
        Ok(action) => action,
        Err(e) => operation::error_policy(op, &e, ctx),
    }
}

/// Reconciles the Cluster `name` as the cache holds it now.
fn reconcile_cluster(ctx: Arc<Context>, name: &str) -> impl Future<Output = Action> {
    let cluster = ctx
        .clusters
        .get(&ObjectRef::new(name).within(&ctx.config.namespace));
    async move {
        let Some(cluster) = cluster else {
            return Action::await_change();
        };
        match cluster::reconcile(cluster.clone(), ctx.clone()).await {
            Ok(action) => action,
            Err(e) => cluster::error_policy(cluster, &e, ctx),
        }
    }
}

/// Keeps the `FleetRollout` store and the caches' progress (which the web view follows); a rollout whose
/// spec changed (a new generation: a commit moved `stopAfter`, raised `maxFailures`, changed its waves)
/// wakes its waiting runs and its status. Its own status writes wake nothing.
fn watch_rollouts(
    client: Client,
    namespace: &str,
    writer: reflector::store::Writer<FleetRollout>,
    ctx: Arc<Context>,
    live: Arc<live::LiveCache>,
) -> impl Future<Output = ()> {
    let api: Api<FleetRollout> = Api::namespaced(client, namespace);
    let wc = watcher::Config::default().labels(&managed_selector());
    let mut seen: BTreeMap<String, Option<i64>> = BTreeMap::new();
    watcher(api, wc)
        .default_backoff()
        .modify(|r: &mut FleetRollout| r.metadata.managed_fields = None)
        .reflect(writer)
        .for_each(move |event| {
            if let Ok(event) = &event {
                live.saw_rollout(event);
            }
            match event {
                Ok(watcher::Event::Apply(r) | watcher::Event::InitApply(r)) => {
                    let name = r.name_any();
                    let generation = r.metadata.generation;
                    if seen.insert(name.clone(), generation) != Some(generation) {
                        rollout::wake_rollout(&ctx, &name, None);
                    }
                }
                Ok(watcher::Event::Delete(r)) => {
                    seen.remove(&r.name_any());
                }
                Ok(_) => {}
                Err(e) => warn!(error = %e, "watching FleetRollouts failed; retrying"),
            }
            futures::future::ready(())
        })
}

/// Keeps [`Context::pods`]: one watch of the pods of kok's Jobs (kok's labels, which a Job's pods carry) and
/// one of the Job controller's `FailedCreate` Events about Jobs (a field selector); a change wakes the
/// operation that owns the Job.
fn watch_run_pods(client: &Client, namespace: &str, ctx: Arc<Context>) -> impl Future<Output = ()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let events: Api<CoreEvent> = Api::namespaced(client.clone(), namespace);
    let wake = {
        let ctx = ctx.clone();
        move |job: &str| {
            let key = ObjectRef::<Job>::new(job).within(&ctx.config.namespace);
            let Some(job) = ctx.jobs.get(&key) else { return };
            let owners = job.metadata.owner_references.iter().flatten();
            for owner in owners.filter(|o| o.kind == ClusterOperation::kind(&())) {
                ctx.queue.trigger(&owner.name);
            }
        }
    };
    let pod_watch = watcher(pods, watcher::Config::default().labels(&managed_selector()))
        .default_backoff()
        .for_each({
            let (ctx, wake) = (ctx.clone(), wake.clone());
            move |event| {
                match event {
                    Ok(event) => ctx.pods.observe_pod(&event).iter().for_each(|job| wake(job)),
                    Err(e) => warn!(error = %e, "watching the pods of kok's Jobs failed; retrying"),
                }
                futures::future::ready(())
            }
        });
    let selector = format!("involvedObject.kind=Job,reason={}", start::FAILED_CREATE);
    let event_watch = watcher(events, watcher::Config::default().fields(&selector))
        .default_backoff()
        .touched_objects()
        .for_each(move |event| {
            match event {
                Ok(event) => {
                    if let Some(job) = ctx.pods.observe_failed_create(&event) {
                        wake(&job);
                    }
                }
                Err(e) => warn!(error = %e, "watching the Jobs' FailedCreate Events failed; retrying"),
            }
            futures::future::ready(())
        });
    async move {
        futures::join!(pod_watch, event_watch);
    }
}

/// Runs `work` once `ready` has come, unless `stopped` comes first.
async fn once(
    ready: impl Future<Output = ()>,
    stopped: impl Future<Output = ()>,
    work: impl Future<Output = ()>,
) {
    tokio::select! {
        () = ready => work.await,
        () = stopped => {}
    }
}

/// Runs `work` until it ends or `stopped` comes.
async fn until(stopped: impl Future<Output = ()>, work: impl Future<Output = ()>) {
    tokio::select! {
        () = work => {}
        () = stopped => {}
    }
}

/// Reconciles the Cluster `cluster`, once its watch has shown it, [`CLUSTER_SETTLE`] after a change of
/// one of its operations.
fn wake_known_cluster(live: &live::LiveCache, queue: &WorkQueue, cluster: &str) {
    let key = ObjectRef::<Cluster>::new(cluster).within(live.namespace());
    if live.clusters.get(&key).is_some() {
        queue.trigger_after(cluster, CLUSTER_SETTLE);
    }
}

/// How long a Cluster's reconcile waits after a change of one of its operations, so that the changes of
/// a burst (a commit's new operations, each written, queued and reported in turn) make one status
/// write instead of one each; so does a new Cluster's first status. A change of a Cluster with a status,
/// or of a Secret it names, reconciles it at once.
const CLUSTER_SETTLE: Duration = Duration::from_secs(1);

/// Most reconciles of one controller running at once. Each holds an API request; without a bound a
/// fleet-size commit starts one per operation at once, each with its own connection and buffers.
pub const CONCURRENT_RECONCILES: usize = 32;

/// What the Job cache keeps of a Job: kok reads a cached Job's owner, labels and status only. The spec
/// (the pod template, carrying the entry script and kok's two ansible plugins, about 15 KB a Job) and
/// the managed fields are dropped as each Job arrives: a rollout over 1,000 clusters otherwise kept
/// 1,000 of them.
pub fn strip_job(job: &mut Job) {
    job.spec = None;
    job.metadata.managed_fields = None;
}

/// Keeps the Secret cache and wakes what waits on a Secret that appeared, changed or went away: the
/// operations that name it (not yet finished) and the Clusters that do.
async fn watch_secrets(
    api: Api<Secret>,
    writer: reflector::store::Writer<Secret>,
    ctx: Arc<Context>,
    clusters: Store<Cluster>,
    wake_clusters: Arc<WorkQueue>,
    stopped: impl Future<Output = ()>,
) {
    let events = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|s| {
            secret::register_values(s);
            secret::strip_values(s);
        })
        .reflect(writer)
        .touched_objects();
    let woken = events.for_each(|event| {
        match event {
            Ok(secret) => {
                let name = secret.metadata.name.unwrap_or_default();
                for op in ctx.operations.waiting_on_secret(&name) {
                    ctx.queue.trigger(&op);
                }
                for cluster in clusters.state() {
                    if cluster.spec.ssh_auth_ref.as_ref().is_some_and(|s| s.name == name) {
                        wake_clusters.trigger(&cluster.name_any());
                    }
                }
            }
            Err(e) => warn!(error = %e, "watching Secrets failed; retrying"),
        }
        futures::future::ready(())
    });
    tokio::select! {
        () = woken => {}
        () = stopped => {}
    }
}
