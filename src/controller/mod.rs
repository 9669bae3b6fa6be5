//! The embedded controller: ClusterOperations become ansible Jobs, one at a time per cluster.
//!
//! - [`job`]: the Job and its entry script (pure).
//! - [`queue`]: queue order, start decisions, Job outcomes, history limit (pure).
//! - [`operation`]: the ClusterOperation reconciler (Pending → Queued → Running → Succeeded/Failed).
//! - [`cluster`]: the Cluster reconciler (conditions, last operation, counts, history limit).
//! - [`cache`]: the indexes of operations and ConfigMaps by cluster that reconciles read.
//! - [`live`]: the watch caches, shared with the reconcile pass.
//! - [`secret`]: the ssh Secret check.
//! - [`credentials`]: the Secrets a cluster's runs keep between them, and the RBAC that guards them.
//! - [`summary`]: the run summary a Job's pod leaves as its termination message (pure).
//! - [`schedule`]: cron firings of scheduled operations.
//!
//! [`run`] runs all the loops until shutdown; tests run it in-process against testkit.

pub mod cache;
pub mod cluster;
mod config_maps;
pub mod credentials;
pub mod job;
pub mod live;
pub mod operation;
pub mod queue;
pub mod schedule;
pub mod secret;
pub mod summary;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, Controller, WatchStreamExt};
use kube::Client;
use tracing::{debug, warn};

use crate::api::{managed_selector, Cluster, ClusterOperation};
pub use job::JobConfig;

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
    /// How often a queued operation looks again even without a trigger (a safety net; finishing
    /// operations wake the queue at once).
    pub queue_resync: Duration,
}

impl ControllerConfig {
    /// Defaults for `namespace`: 4 concurrent Jobs, default Job settings, queue resync 60 s.
    pub fn new(namespace: impl Into<String>) -> Self {
        ControllerConfig {
            namespace: namespace.into(),
            max_concurrent_jobs: 4,
            job: JobConfig::default(),
            status_url: None,
            queue_resync: Duration::from_secs(60),
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
    /// Every ClusterOperation kok manages, as the operation controller sees them.
    pub operations: Store<ClusterOperation>,
    /// The operations by cluster, and the running ones.
    pub index: Arc<cache::OpIndex>,
    /// The Secrets of the namespace, key names only ([`secret::strip_values`]).
    pub secrets: Store<Secret>,
    /// kok's Jobs in the namespace.
    pub jobs: Store<Job>,
    /// Operations whose Job this process created and whose Running phase the store may not show yet,
    /// keyed by name: counted as busy so that no second Job starts for their cluster meanwhile.
    pub claims: Mutex<BTreeMap<String, String>>,
    /// Serializes start decisions, so two reconciles never both take the last slot of a cluster.
    pub start_lock: tokio::sync::Mutex<()>,
    /// Operations that found every Job slot taken; woken when an operation finishes.
    pub slot_waiters: Mutex<std::collections::HashSet<ObjectRef<ClusterOperation>>>,
    /// Wakes queued operations when one finishes.
    pub wake: futures::channel::mpsc::UnboundedSender<ObjectRef<ClusterOperation>>,
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
    let wc = watcher::Config::default().labels(&managed_selector());
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let live::Feeds {
        operations: op_writer,
        clusters: cluster_writer,
        live,
    } = feeds;

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };

    let (wake_tx, wake_rx) = futures::channel::mpsc::unbounded();
    let (cluster_wake_tx, cluster_wake_rx) = futures::channel::mpsc::unbounded();
    let store = live.operations.clone();
    let index = live.op_index.clone();
    let cluster_ns = ns.clone();
    let wake_cluster = cluster_wake_tx.clone();
    let known_clusters = live.clusters.clone();
    // The cache and the index hold an operation's change before its Cluster is reconciled, so the Cluster
    // reconciler (status, history limit) always sees it. A Cluster its watch has not shown yet is
    // reconciled when it does.
    let op_events = live::operation_events(&client, live.clone(), op_writer)
        .inspect(move |event| {
            if let Ok(watcher::Event::Apply(op) | watcher::Event::Delete(op)) = event {
                let cluster = ObjectRef::<Cluster>::new(&op.spec.cluster).within(&cluster_ns);
                if known_clusters.get(&cluster).is_some() {
                    let _ = wake_cluster.unbounded_send(cluster);
                }
            }
        })
        .applied_objects();
    let op_controller = Controller::for_stream(op_events, store.clone())
        .with_config(controller_config())
        .owns(jobs.clone(), wc.clone())
        .reconcile_on(wake_rx)
        .graceful_shutdown_on(stopped());
    let (secrets, secret_writer) = reflector::store::<Secret>();
    let (job_store, job_writer) = reflector::store::<Job>();
    let job_cache = watcher(jobs.clone(), wc.clone())
        .default_backoff()
        .modify(|job: &mut Job| job.metadata.managed_fields = None)
        .reflect(job_writer)
        .for_each(|event| {
            if let Err(e) = event {
                warn!(error = %e, "watching Jobs failed; retrying");
            }
            futures::future::ready(())
        });
    let ctx = Arc::new(Context {
        recorder: crate::events::Publisher::new(&client),
        client: client.clone(),
        config,
        operations: store.clone(),
        index,
        secrets,
        jobs: job_store,
        claims: Mutex::new(BTreeMap::new()),
        slot_waiters: Mutex::new(Default::default()),
        start_lock: tokio::sync::Mutex::new(()),
        wake: wake_tx,
    });

    let op_loop = op_controller
        .run(operation::reconcile, operation::error_policy, ctx.clone())
        .for_each(|res| async move {
            match res {
                Ok((obj, _)) => debug!(operation = %obj.name, "reconciled"),
                Err(e) => warn!(error = %e, "operation reconcile failed"),
            }
        });
    let cluster_store = live.clusters.clone();
    let cluster_controller = Controller::for_stream(
        live::cluster_events(&client, live.clone(), cluster_writer).applied_objects(),
        cluster_store.clone(),
    )
    .with_config(controller_config())
    .reconcile_on(cluster_wake_rx)
    .graceful_shutdown_on(stopped());
    let cm_cache = live::watch_config_maps(client.clone(), live.clone(), stopped());
    let secret_loop = watch_secrets(
        Api::namespaced(client.clone(), &ns),
        secret_writer,
        ctx.clone(),
        cluster_store,
        cluster_wake_tx,
        stopped(),
    );
    let cluster_loop = cluster_controller
        .run(cluster::reconcile, cluster::error_policy, ctx.clone())
        .for_each(|res| async move {
            match res {
                Ok((obj, _)) => debug!(cluster = %obj.name, "reconciled"),
                Err(e) => warn!(error = %e, "cluster reconcile failed"),
            }
        });
    let scheduler = schedule::run_scheduler(client, ns, store, stopped());
    let job_cache = async move {
        tokio::select! {
            () = job_cache => {}
            () = stopped() => {}
        }
    };
    futures::join!(op_loop, cluster_loop, scheduler, secret_loop, job_cache, cm_cache);
}

/// Most reconciles of one controller running at once. Each holds an API request; without a bound a
/// fleet-size commit starts one per operation at once, each with its own connection and buffers.
pub const CONCURRENT_RECONCILES: u16 = 32;

fn controller_config() -> kube::runtime::controller::Config {
    kube::runtime::controller::Config::default().concurrency(CONCURRENT_RECONCILES)
}

/// Keeps the Secret cache and wakes what waits on a Secret that appeared, changed or went away: the
/// operations that name it (not yet finished) and the Clusters that do.
async fn watch_secrets(
    api: Api<Secret>,
    writer: reflector::store::Writer<Secret>,
    ctx: Arc<Context>,
    clusters: Store<Cluster>,
    wake_clusters: futures::channel::mpsc::UnboundedSender<ObjectRef<Cluster>>,
    stopped: impl Future<Output = ()>,
) {
    let events = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(secret::strip_values)
        .reflect(writer)
        .touched_objects();
    let woken = events.for_each(|event| {
        match event {
            Ok(secret) => {
                let name = secret.metadata.name.unwrap_or_default();
                for op in ctx.operations.state() {
                    let names = op.spec.ssh_auth_ref.as_ref().is_some_and(|s| s.name == name);
                    if names && !queue::phase(&op).is_terminal() {
                        let _ = ctx.wake.unbounded_send(ObjectRef::from(op.as_ref()));
                    }
                }
                for cluster in clusters.state() {
                    if cluster.spec.ssh_auth_ref.as_ref().is_some_and(|s| s.name == name) {
                        let _ = wake_clusters.unbounded_send(ObjectRef::from(cluster.as_ref()));
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
