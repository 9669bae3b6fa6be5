//! The controller's view of the meta-cluster: watch caches of ClusterOperations, Secrets and Jobs, and an
//! index of operations by cluster and of the running ones, kept up to date from the watch events.
//!
//! Reconciles read these instead of asking the API server, and a queue decision looks at the operations of
//! its own cluster (through [`OpIndex`]) instead of scanning every operation kok manages.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use super::queue::phase;
use crate::api::{ClusterOperation, Phase, LABEL_CLUSTER};

/// Names of objects by the cluster they belong to, following one watch (relists included).
#[derive(Debug, Default)]
struct ByCluster {
    by_cluster: HashMap<String, BTreeSet<String>>,
    cluster_of: HashMap<String, String>,
    /// Names seen since the watch restarted (a relist), to drop the ones that are gone at its end.
    relisting: Option<HashSet<String>>,
}

impl ByCluster {
    fn upsert(&mut self, name: &str, cluster: &str) {
        if let Some(old) = self.cluster_of.insert(name.to_string(), cluster.to_string()) {
            if old != cluster {
                self.forget_in(&old, name);
            }
        }
        self.by_cluster
            .entry(cluster.to_string())
            .or_default()
            .insert(name.to_string());
        if let Some(seen) = self.relisting.as_mut() {
            seen.insert(name.to_string());
        }
    }

    fn forget_in(&mut self, cluster: &str, name: &str) {
        if let Some(names) = self.by_cluster.get_mut(cluster) {
            names.remove(name);
            if names.is_empty() {
                self.by_cluster.remove(cluster);
            }
        }
    }

    fn remove(&mut self, name: &str) {
        if let Some(cluster) = self.cluster_of.remove(name) {
            self.forget_in(&cluster, name);
        }
    }

    /// Follows a watch event: `cluster_of` names the cluster an object belongs to. Returns the names a
    /// finished relist dropped.
    fn observe<K: Resource>(
        &mut self,
        event: &watcher::Event<K>,
        cluster_of: impl Fn(&K) -> Option<String>,
    ) -> Vec<String> {
        match event {
            watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) => {
                let name = obj.meta().name.clone().unwrap_or_default();
                match cluster_of(obj) {
                    Some(cluster) => self.upsert(&name, &cluster),
                    None => self.remove(&name),
                }
                Vec::new()
            }
            watcher::Event::Delete(obj) => {
                let name = obj.meta().name.clone().unwrap_or_default();
                self.remove(&name);
                vec![name]
            }
            watcher::Event::Init => {
                self.relisting = Some(HashSet::new());
                Vec::new()
            }
            watcher::Event::InitDone => {
                let Some(seen) = self.relisting.take() else {
                    return Vec::new();
                };
                let gone: Vec<String> = self
                    .cluster_of
                    .keys()
                    .filter(|n| !seen.contains(*n))
                    .cloned()
                    .collect();
                for name in &gone {
                    self.remove(name);
                }
                gone
            }
        }
    }

    fn names_in(&self, cluster: &str) -> Vec<String> {
        self.by_cluster
            .get(cluster)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// Names of operations by cluster, and the names of the running ones.
#[derive(Debug, Default)]
pub struct OpIndex {
    inner: Mutex<(ByCluster, BTreeSet<String>)>,
}

impl OpIndex {
    /// Follows one watch event of the ClusterOperation watch.
    pub fn observe(&self, event: &watcher::Event<ClusterOperation>) {
        let Ok(mut guard) = self.inner.lock() else { return };
        let (by_cluster, running) = &mut *guard;
        if let watcher::Event::Apply(op) | watcher::Event::InitApply(op) = event {
            if phase(op) == Phase::Running {
                running.insert(op.name_any());
            } else {
                running.remove(&op.name_any());
            }
        }
        for gone in by_cluster.observe(event, |op| Some(op.spec.cluster.clone())) {
            running.remove(&gone);
        }
    }

    /// Names of the operations of `cluster`.
    pub fn names_in(&self, cluster: &str) -> Vec<String> {
        self.inner
            .lock()
            .map(|i| i.0.names_in(cluster))
            .unwrap_or_default()
    }

    /// Names of the running operations, across clusters.
    pub fn running(&self) -> BTreeSet<String> {
        self.inner.lock().map(|i| i.1.clone()).unwrap_or_default()
    }
}

/// Names of objects by their `kok.dev/cluster` label.
#[derive(Debug, Default)]
pub struct LabelIndex {
    inner: Mutex<ByCluster>,
}

impl LabelIndex {
    /// Follows one watch event.
    pub fn observe<K: Resource>(&self, event: &watcher::Event<K>) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.observe(event, |obj| obj.labels().get(LABEL_CLUSTER).cloned());
        }
    }

    /// Names of the objects labelled with `cluster`.
    pub fn names_in(&self, cluster: &str) -> Vec<String> {
        self.inner.lock().map(|i| i.names_in(cluster)).unwrap_or_default()
    }
}

/// The operations of `cluster`, from the store through the index.
pub fn cluster_operations(
    store: &Store<ClusterOperation>,
    index: &OpIndex,
    namespace: &str,
    cluster: &str,
) -> Vec<Arc<ClusterOperation>> {
    index
        .names_in(cluster)
        .iter()
        .filter_map(|name| store.get(&ObjectRef::new(name).within(namespace)))
        .filter(|op| op.spec.cluster == cluster)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ClusterOperationSpec, ClusterOperationStatus};

    fn op(name: &str, cluster: &str, phase: Phase) -> ClusterOperation {
        let mut o = ClusterOperation::new(
            name,
            ClusterOperationSpec {
                cluster: cluster.into(),
                ..Default::default()
            },
        );
        o.status = Some(ClusterOperationStatus {
            phase,
            ..Default::default()
        });
        o
    }

    #[test]
    fn the_index_follows_applies_deletes_and_relists() {
        let index = OpIndex::default();
        index.observe(&watcher::Event::Apply(op("a1", "a", Phase::Running)));
        index.observe(&watcher::Event::Apply(op("a2", "a", Phase::Queued)));
        index.observe(&watcher::Event::Apply(op("b1", "b", Phase::Pending)));
        assert_eq!(index.names_in("a"), ["a1", "a2"]);
        assert_eq!(index.running(), BTreeSet::from(["a1".to_string()]));

        index.observe(&watcher::Event::Apply(op("a1", "a", Phase::Succeeded)));
        assert!(index.running().is_empty());
        index.observe(&watcher::Event::Delete(op("a2", "a", Phase::Queued)));
        assert_eq!(index.names_in("a"), ["a1"]);

        // A relist that no longer shows b1 drops it.
        index.observe(&watcher::Event::Init);
        index.observe(&watcher::Event::InitApply(op("a1", "a", Phase::Succeeded)));
        index.observe(&watcher::Event::InitDone);
        assert!(index.names_in("b").is_empty());
        assert_eq!(index.names_in("a"), ["a1"]);
    }
}
