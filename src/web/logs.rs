//! Where a run's log is read from: kok's log files in local mode, the Job's pod in a meta-cluster.

use std::path::PathBuf;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams};
use kube::Client;

use crate::api::ClusterOperation;

/// Reads the log of one operation's run, as far as it goes now.
pub trait LogSource: Send + Sync {
    /// The log of `op`'s run so far, `None` when there is none (not started, or gone).
    fn read(&self, op: &ClusterOperation) -> BoxFuture<'static, Option<String>>;
}

/// Local mode: `<state dir>/logs/<operation>.log`, as `kok logs` reads it.
#[derive(Clone, Debug)]
pub struct LocalLogs {
    /// `--state-dir`.
    pub state_dir: PathBuf,
}

impl LogSource for LocalLogs {
    fn read(&self, op: &ClusterOperation) -> BoxFuture<'static, Option<String>> {
        let name = kube::ResourceExt::name_any(op);
        let path = crate::local::logs::log_path(&self.state_dir, &name);
        Box::pin(async move { tokio::fs::read_to_string(path).await.ok() })
    }
}

/// A meta-cluster: the log of the Job's pod (`pods/log`), with every secret kok knows scrubbed, the
/// Secrets that Job mounts included.
///
/// The controller's Secret watch registers those as it sees them ([`crate::controller::secret::register_values`]).
#[derive(Clone)]
pub struct PodLogs {
    client: Client,
    namespace: String,
}

impl PodLogs {
    /// The logs of the pods in `namespace` of the meta-cluster `client` reaches.
    pub fn new(client: Client, namespace: impl Into<String>) -> PodLogs {
        PodLogs {
            client,
            namespace: namespace.into(),
        }
    }
}

impl LogSource for PodLogs {
    fn read(&self, op: &ClusterOperation) -> BoxFuture<'static, Option<String>> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let job = op.status.as_ref().and_then(|s| s.job_ref.clone());
        Box::pin(async move {
            let selector = format!("job-name={}", job?);
            let list = pods.list(&ListParams::default().labels(&selector)).await.ok()?;
            let pod = list
                .items
                .into_iter()
                .max_by_key(|p| p.metadata.creation_timestamp.clone())?;
            let name = pod.metadata.name?;
            let text = pods.logs(&name, &LogParams::default()).await.ok()?;
            Some(crate::redact::scrub(&text))
        })
    }
}
