//! The controller's view of the meta-cluster: watch caches of ClusterOperations, Secrets and Jobs, and an
//! index of operations by cluster and of the running ones, kept up to date from the watch events.
//!
//! Reconciles read these instead of asking the API server, and a queue decision looks at the operations of
//! its own cluster (through [`OpIndex`]) instead of scanning every operation kok manages.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::ResourceExt;

use super::queue::phase;
use crate::api::{ClusterOperation, Phase};

/// Names of operations by cluster, and the names of the running ones.
#[derive(Debug, Default)]
pub struct OpIndex {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    by_cluster: HashMap<String, BTreeSet<String>>,
    cluster_of: HashMap<String, String>,
    running: BTreeSet<String>,
    /// Names seen since the watch restarted (a relist), to drop the ones that are gone at its end.
    relisting: Option<HashSet<String>>,
}

impl Inner {
    fn upsert(&mut self, op: &ClusterOperation) {
        let name = op.name_any();
        let cluster = op.spec.cluster.clone();
        if let Some(old) = self.cluster_of.insert(name.clone(), cluster.clone()) {
            if old != cluster {
                self.forget_in(&old, &name);
            }
        }
        self.by_cluster.entry(cluster).or_default().insert(name.clone());
        if phase(op) == Phase::Running {
            self.running.insert(name.clone());
        } else {
            self.running.remove(&name);
        }
        if let Some(seen) = self.relisting.as_mut() {
            seen.insert(name);
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
        self.running.remove(name);
    }
}

impl OpIndex {
    /// Follows one watch event of the ClusterOperation watch.
    pub fn observe(&self, event: &watcher::Event<ClusterOperation>) {
        let Ok(mut inner) = self.inner.lock() else { return };
        match event {
            watcher::Event::Apply(op) | watcher::Event::InitApply(op) => inner.upsert(op),
            watcher::Event::Delete(op) => inner.remove(&op.name_any()),
            watcher::Event::Init => inner.relisting = Some(HashSet::new()),
            watcher::Event::InitDone => {
                if let Some(seen) = inner.relisting.take() {
                    let gone: Vec<String> = inner
                        .cluster_of
                        .keys()
                        .filter(|n| !seen.contains(*n))
                        .cloned()
                        .collect();
                    for name in gone {
                        inner.remove(&name);
                    }
                }
            }
        }
    }

    /// Names of the operations of `cluster`.
    pub fn names_in(&self, cluster: &str) -> Vec<String> {
        self.inner
            .lock()
            .map(|i| i.by_cluster.get(cluster).map(|s| s.iter().cloned().collect()))
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    /// Names of the running operations, across clusters.
    pub fn running(&self) -> BTreeSet<String> {
        self.inner.lock().map(|i| i.running.clone()).unwrap_or_default()
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
