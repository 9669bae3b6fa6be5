//! ClusterOperations by cluster, kept from their own watch for the Cluster reconciler.
//!
//! The reconciler reads one cluster's operations here instead of scanning every operation, and it is
//! triggered only after the change it reacts to is in the index: an operation that finishes or leaves
//! operations.yml is seen as such by the reconcile it causes, so the history limit applies at once.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};

use futures::channel::mpsc::UnboundedSender;
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, WatchStreamExt};
use kube::ResourceExt;
use tokio::sync::watch;

use crate::api::{Cluster, ClusterOperation};

/// Operations of one cluster, by name.
type Operations = BTreeMap<String, Arc<ClusterOperation>>;

#[derive(Debug, Default)]
struct State {
    by_cluster: HashMap<String, Operations>,
    /// The relist being received (between `Init` and `InitDone`).
    relist: Option<HashMap<String, Operations>>,
}

/// Every ClusterOperation of the namespace, grouped by cluster.
#[derive(Debug)]
pub struct OperationIndex {
    state: Mutex<State>,
    ready: watch::Sender<bool>,
}

impl Default for OperationIndex {
    fn default() -> Self {
        OperationIndex {
            state: Mutex::default(),
            ready: watch::channel(false).0,
        }
    }
}

impl OperationIndex {
    /// The operations of `cluster`, in name order.
    pub fn of_cluster(&self, cluster: &str) -> Vec<Arc<ClusterOperation>> {
        self.lock()
            .by_cluster
            .get(cluster)
            .map(|ops| ops.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Waits until the first complete list is in the index.
    pub async fn wait_until_ready(&self) {
        let mut ready = self.ready.subscribe();
        let _ = ready.wait_for(|r| *r).await;
    }

    /// Applies one watch event; returns the clusters whose operations changed.
    pub fn apply(&self, event: watcher::Event<ClusterOperation>) -> BTreeSet<String> {
        let mut changed = BTreeSet::new();
        let mut state = self.lock();
        match event {
            watcher::Event::Apply(op) => {
                changed.insert(op.spec.cluster.clone());
                insert(&mut state.by_cluster, op);
            }
            watcher::Event::Delete(op) => {
                let cluster = op.spec.cluster.clone();
                if let Some(ops) = state.by_cluster.get_mut(&cluster) {
                    ops.remove(&op.name_any());
                    if ops.is_empty() {
                        state.by_cluster.remove(&cluster);
                    }
                }
                changed.insert(cluster);
            }
            watcher::Event::Init => state.relist = Some(HashMap::new()),
            watcher::Event::InitApply(op) => insert(state.relist.get_or_insert_with(HashMap::new), op),
            watcher::Event::InitDone => {
                let fresh = state.relist.take().unwrap_or_default();
                let old = std::mem::replace(&mut state.by_cluster, fresh);
                // Every cluster that had or has operations may have changed while the watch was down.
                changed.extend(old.into_keys());
                changed.extend(state.by_cluster.keys().cloned());
                drop(state);
                self.ready.send_replace(true);
            }
        }
        changed
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Files `op` under its cluster, without its managed fields (nothing here reads them).
fn insert(index: &mut HashMap<String, Operations>, mut op: ClusterOperation) {
    op.metadata.managed_fields = None;
    let cluster = op.spec.cluster.clone();
    index
        .entry(cluster)
        .or_default()
        .insert(op.name_any(), Arc::new(op));
}

/// Keeps `index` from a watch of `api` until `shutdown`, sending each cluster whose operations changed
/// to `triggers` once the index holds the change.
pub async fn maintain(
    index: Arc<OperationIndex>,
    api: Api<ClusterOperation>,
    config: watcher::Config,
    namespace: String,
    triggers: UnboundedSender<ObjectRef<Cluster>>,
    shutdown: impl Future<Output = ()>,
) {
    let events = watcher(api, config).default_backoff();
    tokio::pin!(events);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            event = events.next() => match event {
                Some(Ok(event)) => {
                    for cluster in index.apply(event) {
                        if triggers
                            .unbounded_send(ObjectRef::new(&cluster).within(&namespace))
                            .is_err()
                        {
                            return;
                        }
                    }
                }
                Some(Err(e)) => tracing::warn!(error = %e, "watching ClusterOperations for the Cluster reconciler failed; retrying"),
                None => return,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ClusterOperationSpec;

    fn op(cluster: &str, name: &str) -> ClusterOperation {
        let spec: ClusterOperationSpec = serde_json::from_value(serde_json::json!({
            "cluster": cluster,
            "id": name,
            "digest": "d",
            "action": "a.yml",
            "image": "i",
            "hostsConfRef": {"name": "h"},
            "varsConfRef": {"name": "v"},
            "source": {"commit": "c", "revision": "r", "path": "p"},
            "queuePosition": "0",
        }))
        .unwrap();
        ClusterOperation::new(name, spec)
    }

    fn names(index: &OperationIndex, cluster: &str) -> Vec<String> {
        index.of_cluster(cluster).iter().map(|o| o.name_any()).collect()
    }

    #[test]
    fn applies_and_deletes_change_only_their_cluster() {
        let index = OperationIndex::default();
        assert_eq!(
            index.apply(watcher::Event::Apply(op("a", "a-1"))),
            BTreeSet::from(["a".to_string()])
        );
        index.apply(watcher::Event::Apply(op("a", "a-2")));
        index.apply(watcher::Event::Apply(op("b", "b-1")));
        assert_eq!(names(&index, "a"), ["a-1", "a-2"]);
        assert_eq!(
            index.apply(watcher::Event::Delete(op("a", "a-1"))),
            BTreeSet::from(["a".to_string()])
        );
        assert_eq!(names(&index, "a"), ["a-2"]);
        assert_eq!(names(&index, "b"), ["b-1"]);
        assert!(names(&index, "c").is_empty());
    }

    #[tokio::test]
    async fn a_relist_replaces_the_index_and_touches_old_and_new_clusters() {
        let index = OperationIndex::default();
        index.apply(watcher::Event::Init);
        index.apply(watcher::Event::InitApply(op("a", "a-1")));
        // Not ready, and nothing visible, before the list is complete.
        assert!(names(&index, "a").is_empty());
        assert!(!*index.ready.borrow());
        index.apply(watcher::Event::InitDone);
        index.wait_until_ready().await;
        assert_eq!(names(&index, "a"), ["a-1"]);

        index.apply(watcher::Event::Init);
        index.apply(watcher::Event::InitApply(op("b", "b-1")));
        let changed = index.apply(watcher::Event::InitDone);
        assert_eq!(changed, BTreeSet::from(["a".to_string(), "b".to_string()]));
        assert!(names(&index, "a").is_empty());
        assert_eq!(names(&index, "b"), ["b-1"]);
    }
}
