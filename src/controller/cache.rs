//! The controller's view of the meta-cluster: watch caches of ClusterOperations, Secrets and Jobs, and an
//! index of operations by cluster and of the running ones, kept up to date from the watch events.
//!
//! Reconciles read these instead of asking the API server, and a queue decision looks at the operations of
//! its own cluster (through [`OpIndex`]) instead of scanning every operation kok manages.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use kube::api::ObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use super::queue::phase;
use crate::api::{ClusterOperation, Phase, ANNOTATION_CONTENT_HASH, LABEL_CLUSTER, LABEL_CURRENT};

/// Names of objects by the cluster they belong to, following one watch (relists included). Each name
/// and cluster is held once, shared by both directions.
#[derive(Debug, Default)]
struct ByCluster {
    /// Per cluster, the names of its objects, sorted.
    by_cluster: HashMap<Arc<str>, Vec<Arc<str>>>,
    cluster_of: HashMap<Arc<str>, Arc<str>>,
    /// Names seen since the watch restarted (a relist), to drop the ones that are gone at its end.
    relisting: Option<HashSet<Arc<str>>>,
}

impl ByCluster {
    fn upsert(&mut self, name: &str, cluster: &str) {
        let name: Arc<str> = match self.cluster_of.get_key_value(name) {
            Some((known, old)) if &**old == cluster => known.clone(),
            Some((known, old)) => {
                let (known, old) = (known.clone(), old.clone());
                self.forget_in(&old, &known);
                known
            }
            None => Arc::from(name),
        };
        let cluster: Arc<str> = match self.by_cluster.get_key_value(cluster) {
            Some((known, _)) => known.clone(),
            None => Arc::from(cluster),
        };
        self.cluster_of.insert(name.clone(), cluster.clone());
        let names = self.by_cluster.entry(cluster).or_default();
        if let Err(at) = names.binary_search(&name) {
            names.insert(at, name.clone());
        }
        if let Some(seen) = self.relisting.as_mut() {
            seen.insert(name);
        }
    }

    fn forget_in(&mut self, cluster: &str, name: &str) {
        if let Some(names) = self.by_cluster.get_mut(cluster) {
            if let Ok(at) = names.binary_search_by(|n| (**n).cmp(name)) {
                names.remove(at);
            }
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
        cluster_of: impl Fn(&K) -> Option<&str>,
    ) -> Vec<String> {
        match event {
            watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) => {
                let name = obj.meta().name.as_deref().unwrap_or_default();
                match cluster_of(obj) {
                    Some(cluster) => self.upsert(name, cluster),
                    None => self.remove(name),
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
                    .map(|n| n.to_string())
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
            .map(|names| names.iter().map(|n| n.to_string()).collect())
            .unwrap_or_default()
    }
}

/// The labels decisions read of a cached object, in this order: its cluster, and whether it is current.
const DECISION_LABELS: [&str; 2] = [LABEL_CLUSTER, LABEL_CURRENT];

/// What a cache took off one object to put back for the decisions: its content hash and, for an
/// operation, the two labels decisions read. A map of two labels alone costs a 0.5 KiB B-tree node.
#[derive(Debug, Default)]
struct Aside {
    hash: Option<Box<str>>,
    labels: [Option<Box<str>>; 2],
}

impl Aside {
    fn is_empty(&self) -> bool {
        self.hash.is_none() && self.labels.iter().all(Option::is_none)
    }
}

/// What a cache keeps apart of each object of one watch, by name: the content hash of objects kept
/// without annotations, and the cluster and current labels of objects kept without labels.
#[derive(Debug, Default)]
pub struct SetAside(Mutex<HashMap<Box<str>, Aside>>);

impl SetAside {
    /// Changes what is kept of `meta`'s object with `change`; an object with nothing kept is forgotten.
    /// A known name is changed in place, so a watch event allocates nothing here.
    fn keep(&self, meta: &ObjectMeta, change: impl FnOnce(&mut Aside)) {
        let name = meta.name.as_deref().unwrap_or_default();
        let Ok(mut all) = self.0.lock() else { return };
        match all.get_mut(name) {
            Some(aside) => {
                change(aside);
                if aside.is_empty() {
                    all.remove(name);
                }
            }
            None => {
                let mut aside = Aside::default();
                change(&mut aside);
                if !aside.is_empty() {
                    all.insert(name.into(), aside);
                }
            }
        }
    }

    /// Takes the annotations off `meta`, keeping its content hash (or forgetting the name's hash when
    /// this version has none).
    pub fn take_annotations(&self, meta: &mut ObjectMeta) {
        let hash = meta
            .annotations
            .take()
            .and_then(|mut a| a.remove(ANNOTATION_CONTENT_HASH));
        self.keep(meta, |aside| aside.hash = hash.map(String::into_boxed_str));
    }

    /// Takes the labels off `meta`, keeping the two decisions read (or forgetting the name's when this
    /// version has neither).
    pub fn take_labels(&self, meta: &mut ObjectMeta) {
        let mut labels = meta.labels.take().unwrap_or_default();
        let kept = DECISION_LABELS.map(|key| labels.remove(key).map(String::into_boxed_str));
        self.keep(meta, |aside| aside.labels = kept);
    }

    /// The content hash `name` had when its watch last showed it.
    pub fn hash(&self, name: &str) -> Option<String> {
        self.0.lock().ok()?.get(name)?.hash.as_deref().map(str::to_string)
    }

    /// Forgets `name`, deleted.
    pub fn forget(&self, name: &str) {
        if let Ok(mut all) = self.0.lock() {
            all.remove(name);
        }
    }

    /// Puts what was kept of `meta`'s object back on it.
    pub fn restore(&self, meta: &mut ObjectMeta) {
        self.put_back(meta, true);
    }

    /// Puts the kept labels back on `meta`'s object, not its content hash (which the queue's decisions
    /// do not read).
    pub fn restore_labels(&self, meta: &mut ObjectMeta) {
        self.put_back(meta, false);
    }

    fn put_back(&self, meta: &mut ObjectMeta, with_hash: bool) {
        let Some(name) = meta.name.as_deref() else { return };
        let Ok(all) = self.0.lock() else { return };
        let Some(aside) = all.get(name) else { return };
        if let Some(hash) = aside.hash.as_ref().filter(|_| with_hash) {
            meta.annotations
                .get_or_insert_with(Default::default)
                .insert(ANNOTATION_CONTENT_HASH.to_string(), hash.to_string());
        }
        for (key, value) in DECISION_LABELS.iter().zip(&aside.labels) {
            if let Some(value) = value {
                meta.labels
                    .get_or_insert_with(Default::default)
                    .insert(key.to_string(), value.to_string());
            }
        }
    }
}

/// Names of operations by cluster, the names of the running ones, and what the cache keeps apart of
/// each operation (it keeps them without annotations or labels, see [`OpIndex::slim`]).
#[derive(Debug, Default)]
pub struct OpIndex {
    inner: Mutex<(ByCluster, BTreeSet<String>)>,
    /// The content hashes and decision labels of the cached operations.
    pub aside: SetAside,
}

impl OpIndex {
    /// Drops what neither the controller nor apply reads of an operation the watch delivers, before the
    /// cache keeps it: the commit statuses (the reporter watches them itself), `managedFields`, the owner
    /// references, and the labels and annotations: the cluster and current labels and the content hash
    /// are kept apart ([`OpIndex::aside`]), and [`OpIndex::restore`] puts them back for the decisions.
    /// An operation with a schedule keeps its metadata: the scheduler copies it into the runs.
    pub fn slim(&self, op: &mut ClusterOperation) {
        op.metadata.managed_fields = None;
        if let Some(status) = op.status.as_mut() {
            status.desired_status = None;
            status.reported = None;
        }
        if op.spec.schedule.is_some() {
            return;
        }
        op.metadata.owner_references = None;
        self.aside.take_labels(&mut op.metadata);
        self.aside.take_annotations(&mut op.metadata);
    }

    /// A copy of the cached `op` with what [`OpIndex::slim`] kept apart put back, for apply.
    pub fn restore(&self, op: &ClusterOperation) -> ClusterOperation {
        let mut op = op.clone();
        self.aside.restore(&mut op.metadata);
        op
    }

    /// A copy of the cached `op` with its cluster and current labels put back, for the queue's
    /// decisions.
    pub fn with_labels(&self, op: &ClusterOperation) -> ClusterOperation {
        let mut op = op.clone();
        self.aside.restore_labels(&mut op.metadata);
        op
    }

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
        for gone in by_cluster.observe(event, |op| Some(op.spec.cluster.as_str())) {
            running.remove(&gone);
            self.aside.forget(&gone);
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
            inner.observe(event, |obj| obj.labels().get(LABEL_CLUSTER).map(String::as_str));
        }
    }

    /// Names of the objects labelled with `cluster`.
    pub fn names_in(&self, cluster: &str) -> Vec<String> {
        self.inner.lock().map(|i| i.names_in(cluster)).unwrap_or_default()
    }
}

/// The operations of `cluster`, from the store through the index, with their cluster and current
/// labels (for the queue's decisions).
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
        .map(|op| Arc::new(index.with_labels(&op)))
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
    fn the_cache_keeps_an_operation_slim_and_its_hash_and_decision_labels_in_the_index() {
        use crate::api::{LABEL_MANAGED_BY, LABEL_OPERATION};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let index = OpIndex::default();
        let full = |schedule: Option<&str>| {
            let mut o = op("a1", "a", Phase::Queued);
            o.spec.schedule = schedule.map(str::to_string);
            o.metadata.labels = Some(
                [
                    (LABEL_MANAGED_BY, "kok"),
                    (LABEL_CLUSTER, "a"),
                    (LABEL_CURRENT, "true"),
                    (LABEL_OPERATION, "install"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            );
            o.metadata.annotations = Some(
                [
                    (ANNOTATION_CONTENT_HASH, "h1"),
                    ("kok.dev/revision", "main@sha1:0"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            );
            o.metadata.owner_references = Some(vec![OwnerReference::default()]);
            o
        };
        let mut slim = full(None);
        index.slim(&mut slim);
        assert!(slim.metadata.labels.is_none());
        assert!(slim.metadata.annotations.is_none());
        assert!(slim.metadata.owner_references.is_none());
        assert_eq!(index.aside.hash("a1").as_deref(), Some("h1"));
        let restored = index.restore(&slim);
        let labels: Vec<(&str, &str)> = restored
            .labels()
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(labels, [(LABEL_CLUSTER, "a"), (LABEL_CURRENT, "true")]);
        assert!(super::super::queue::is_current(&restored));
        assert_eq!(
            restored
                .annotations()
                .get(ANNOTATION_CONTENT_HASH)
                .map(String::as_str),
            Some("h1")
        );

        // A later version without a hash or the current label has neither once restored.
        let mut later = op("a1", "a", Phase::Queued);
        later.metadata.labels = Some([(LABEL_CLUSTER.to_string(), "a".to_string())].into());
        index.slim(&mut later);
        assert_eq!(index.aside.hash("a1"), None);
        let restored = index.restore(&later);
        assert!(!super::super::queue::is_current(&restored));
        assert_eq!(restored.labels().len(), 1);
        assert!(restored.metadata.annotations.is_none());

        index.slim(&mut full(None));
        index.observe(&watcher::Event::Delete(op("a1", "a", Phase::Queued)));
        assert_eq!(
            index.aside.hash("a1"),
            None,
            "a deleted operation's hash goes with it"
        );
        assert!(
            index
                .restore(&op("a1", "a", Phase::Queued))
                .metadata
                .labels
                .is_none(),
            "and its labels"
        );

        let mut base = full(Some("0 3 * * *"));
        index.slim(&mut base);
        assert_eq!(base.labels().len(), 4, "a schedule keeps its labels for its runs");
        assert_eq!(base.annotations().len(), 2);
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
        index.observe(&watcher::Event::Apply(op("a0", "b", Phase::Queued)));
        index.observe(&watcher::Event::Apply(op("a0", "a", Phase::Queued)));
        assert_eq!(
            index.names_in("a"),
            ["a0", "a1", "a2"],
            "sorted, and moved out of b"
        );
        assert_eq!(index.names_in("b"), ["b1"]);
        index.observe(&watcher::Event::Delete(op("a0", "a", Phase::Queued)));
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
