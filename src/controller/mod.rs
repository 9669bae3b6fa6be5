//! The embedded controller: ClusterOperations become ansible Jobs, one at a time per cluster.
//!
//! - [`job`]: the Job and its entry script (pure).
//! - [`queue`]: queue order, start decisions, Job outcomes, history limit (pure).
//! - [`operation`]: the ClusterOperation reconciler (Pending → Queued → Running → Succeeded/Failed).
//! - [`cluster`]: the Cluster reconciler (conditions, last operation, counts, history limit).
//! - [`index`]: the operations by cluster the Cluster reconciler reads, kept from their own watch.
//! - [`secret`]: the ssh Secret check.
//! - [`schedule`]: cron firings of scheduled operations.
//!
//! [`run`] runs all the loops until shutdown; tests run it in-process against testkit.

pub mod cluster;
pub mod index;
pub mod job;
pub mod operation;
pub mod queue;
pub mod schedule;
pub mod secret;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::api::Api;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{watcher, Controller};
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
    /// How often an operation waiting for its Secret looks again.
    pub secret_retry: Duration,
    /// How often a queued operation looks again even without a trigger (a safety net; finishing
    /// operations wake the queue at once).
    pub queue_resync: Duration,
}

impl ControllerConfig {
    /// Defaults for `namespace`: 4 concurrent Jobs, default Job settings, Secret retry 10 s, queue resync 60 s.
    pub fn new(namespace: impl Into<String>) -> Self {
        ControllerConfig {
            namespace: namespace.into(),
            max_concurrent_jobs: 4,
            job: JobConfig::default(),
            status_url: None,
            secret_retry: Duration::from_secs(10),
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
    pub recorder: Recorder,
    /// Every ClusterOperation kok manages, as the operation controller sees them.
    pub operations: Store<ClusterOperation>,
    /// Operations whose Job this process created and whose Running phase the store may not show yet,
    /// keyed by name: counted as busy so that no second Job starts for their cluster meanwhile.
    pub claims: Mutex<BTreeMap<String, String>>,
    /// Serializes start decisions, so two reconciles never both take the last slot of a cluster.
    pub start_lock: tokio::sync::Mutex<()>,
    /// Wakes queued operations when one finishes.
    pub wake: futures::channel::mpsc::UnboundedSender<ObjectRef<ClusterOperation>>,
    /// The operations by cluster, as the Cluster reconciler sees them.
    pub cluster_operations: Arc<index::OperationIndex>,
}

/// Runs the ClusterOperation controller, the Cluster controller and the scheduler until `shutdown`.
pub async fn run(
    client: Client,
    config: ControllerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let ns = config.namespace.clone();
    let wc = watcher::Config::default().labels(&managed_selector());
    let ops: Api<ClusterOperation> = Api::namespaced(client.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), &ns);

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
    let op_controller = Controller::new(ops.clone(), wc.clone())
        .owns(jobs, wc.clone())
        .reconcile_on(wake_rx)
        .graceful_shutdown_on(stopped());
    let store = op_controller.store();
    let cluster_operations = Arc::new(index::OperationIndex::default());
    let ctx = Arc::new(Context {
        cluster_operations: cluster_operations.clone(),
        recorder: Recorder::new(client.clone(), crate::materialize::apply::reporter()),
        client: client.clone(),
        config,
        operations: store.clone(),
        claims: Mutex::new(BTreeMap::new()),
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
    // The Cluster reconciler runs when a cluster's operations change, once the index holds the change.
    let (cluster_tx, cluster_rx) = futures::channel::mpsc::unbounded();
    let index_loop = index::maintain(
        cluster_operations,
        ops,
        wc.clone(),
        ns.clone(),
        cluster_tx,
        stopped(),
    );
    let cluster_loop = Controller::new(clusters, wc)
        .reconcile_on(cluster_rx)
        .graceful_shutdown_on(stopped())
        .run(cluster::reconcile, cluster::error_policy, ctx.clone())
        .for_each(|res| async move {
            match res {
                Ok((obj, _)) => debug!(cluster = %obj.name, "reconciled"),
                Err(e) => warn!(error = %e, "cluster reconcile failed"),
            }
        });
    let scheduler = schedule::run_scheduler(client, ns, store, stopped());
    futures::join!(op_loop, cluster_loop, index_loop, scheduler);
}
