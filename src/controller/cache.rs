//! What the watch caches share: names of objects by cluster, one copy of the strings their records
//! have in common, and what a cache keeps apart of the objects it holds without annotations.
//!
//! Reconciles read the caches instead of asking the API server, and a queue decision looks at the
//! operations of its own cluster (through the index) instead of scanning every operation kok manages.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Pod};
use kube::api::ObjectMeta;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use super::job::JOB_NAME_LABEL;
use super::start::{self, JobPods};
use crate::api::{ANNOTATION_CONTENT_HASH, LABEL_CLUSTER};

/// Whether a cache's watch has listed once, and a wait for it.
#[derive(Debug)]
pub(super) struct Listed(tokio::sync::watch::Sender<bool>);

impl Default for Listed {
    fn default() -> Self {
        Listed(tokio::sync::watch::Sender::new(false))
    }
}

impl Listed {
    /// The watch has listed.
    pub(super) fn set(&self) {
        self.0.send_replace(true);
    }

    /// True once the watch has listed.
    #[cfg(test)]
    pub(super) fn is_set(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits until the watch has listed once.
    pub(super) async fn wait(&self) {
        let mut listed = self.0.subscribe();
        let _ = listed.wait_for(|l| *l).await;
    }
}

/// Values held once for every record that uses them. Values no record uses any more are dropped once
/// the set has doubled since the last sweep.
#[derive(Debug)]
pub(super) struct Shared<T: ?Sized> {
    set: HashSet<Arc<T>>,
    after_sweep: usize,
}

impl<T: ?Sized> Default for Shared<T> {
    fn default() -> Self {
        Shared {
            set: HashSet::new(),
            after_sweep: 0,
        }
    }
}

/// Strings held once for every record that uses them.
pub(super) type Words = Shared<str>;

impl<T: ?Sized + Eq + Hash> Shared<T> {
    /// Holds `value`, new to the set.
    fn keep(&mut self, value: Arc<T>) -> Arc<T> {
        self.set.insert(value.clone());
        if self.set.len() > 2 * self.after_sweep.max(512) {
            self.sweep();
        }
        value
    }

    /// How many values it holds.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.set.len()
    }

    /// Drops the values no record uses any more.
    pub(super) fn sweep(&mut self) {
        self.set.retain(|w| Arc::strong_count(w) > 1);
        self.set.shrink_to_fit();
        self.after_sweep = self.set.len();
    }
}

impl Words {
    /// The one copy of `word`.
    pub(super) fn get(&mut self, word: &str) -> Arc<str> {
        match self.set.get(word) {
            Some(known) => known.clone(),
            None => self.keep(Arc::from(word)),
        }
    }
}

impl<T: Eq + Hash> Shared<T> {
    /// The one copy of `value`.
    pub(super) fn share(&mut self, value: T) -> Arc<T> {
        match self.set.get(&value) {
            Some(known) => known.clone(),
            None => self.keep(Arc::new(value)),
        }
    }
}

/// Names by cluster, each cluster's sorted: the index [`ByCluster`] and the operation cache keep.
pub(super) type NamesByCluster = HashMap<Arc<str>, Vec<Arc<str>>>;

/// Adds `name` to `cluster`'s list (once).
pub(super) fn list_in(lists: &mut NamesByCluster, cluster: Arc<str>, name: Arc<str>) {
    let names = lists.entry(cluster).or_default();
    if let Err(at) = names.binary_search(&name) {
        names.insert(at, name);
    }
}

/// Drops `name` from `cluster`'s list, and the list when it is left empty.
pub(super) fn unlist_in(lists: &mut NamesByCluster, cluster: &str, name: &str) {
    if let Some(names) = lists.get_mut(cluster) {
        if let Ok(at) = names.binary_search_by(|n| (**n).cmp(name)) {
            names.remove(at);
        }
        if names.is_empty() {
            lists.remove(cluster);
        }
    }
}

/// Names of objects by the cluster they belong to, following one watch (relists included). Each name
/// and cluster is held once, shared by both directions.
#[derive(Debug, Default)]
pub(super) struct ByCluster {
    /// Per cluster, the names of its objects, sorted.
    by_cluster: NamesByCluster,
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
        list_in(&mut self.by_cluster, cluster, name.clone());
        if let Some(seen) = self.relisting.as_mut() {
            seen.insert(name);
        }
    }

    fn forget_in(&mut self, cluster: &str, name: &str) {
        unlist_in(&mut self.by_cluster, cluster, name);
    }

    fn remove(&mut self, name: &str) {
        if let Some(cluster) = self.cluster_of.remove(name) {
            self.forget_in(&cluster, name);
        }
    }

    /// Follows a watch event: `cluster_of` names the cluster an object belongs to. Returns the names a
    /// finished relist dropped.
    pub(super) fn observe<K: Resource>(
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

    pub(super) fn names_in(&self, cluster: &str) -> Vec<String> {
        self.by_cluster
            .get(cluster)
            .map(|names| names.iter().map(|n| n.to_string()).collect())
            .unwrap_or_default()
    }
}

/// What a cache keeps apart of each object it holds without annotations, by name: its content hash.
#[derive(Debug, Default)]
pub struct SetAside(Mutex<HashMap<Box<str>, Box<str>>>);

impl SetAside {
    /// Takes the annotations off `meta`, keeping its content hash (or forgetting the name's hash when
    /// this version has none). A known name is changed in place, so a watch event allocates no key.
    pub fn take_annotations(&self, meta: &mut ObjectMeta) {
        let hash = meta
            .annotations
            .take()
            .and_then(|mut a| a.remove(ANNOTATION_CONTENT_HASH));
        let name = meta.name.as_deref().unwrap_or_default();
        let Ok(mut all) = self.0.lock() else { return };
        match (all.get_mut(name), hash) {
            (Some(kept), Some(hash)) => *kept = hash.into_boxed_str(),
            (None, Some(hash)) => {
                all.insert(name.into(), hash.into_boxed_str());
            }
            (_, None) => {
                all.remove(name);
            }
        }
    }

    /// The content hash `name` had when its watch last showed it.
    pub fn hash(&self, name: &str) -> Option<String> {
        self.0.lock().ok()?.get(name).map(|h| h.to_string())
    }

    /// Forgets `name`, deleted.
    pub fn forget(&self, name: &str) {
        if let Ok(mut all) = self.0.lock() {
            all.remove(name);
        }
    }

    /// Puts the kept content hash back on `meta`'s object.
    pub fn restore(&self, meta: &mut ObjectMeta) {
        let Some(name) = meta.name.as_deref() else { return };
        let Ok(all) = self.0.lock() else { return };
        if let Some(hash) = all.get(name) {
            meta.annotations
                .get_or_insert_with(Default::default)
                .insert(ANNOTATION_CONTENT_HASH.to_string(), hash.to_string());
        }
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

/// What the pods of kok's Jobs and the Job controller's `FailedCreate` Events about them say, by Job name
/// ([`super::start`]): one watch of the pods kok's Jobs make (by kok's labels) and one of those Events
/// (by field selector) feed it, so that a running operation's reconcile asks no API server about its pod.
/// A Job's entry goes when the Job does.
#[derive(Debug, Default)]
pub struct RunPods {
    inner: Mutex<RunPodsInner>,
}

#[derive(Debug, Default)]
struct RunPodsInner {
    by_job: HashMap<String, JobPods>,
    /// Pods seen since the pod watch restarted (a relist): the others were deleted meanwhile.
    relisting: Option<HashSet<String>>,
}

impl RunPods {
    /// Follows one event of the pod watch; returns the Jobs whose pods changed in what [`start`] reads (a
    /// pod's other changes, such as its readiness, wake nothing).
    pub fn observe_pod(&self, event: &watcher::Event<Pod>) -> Vec<String> {
        let Ok(mut inner) = self.inner.lock() else {
            return Vec::new();
        };
        match event {
            watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                let Some(job) = job_of_pod(pod) else {
                    return Vec::new();
                };
                let seen = start::seen(pod);
                if let Some(relisting) = inner.relisting.as_mut() {
                    relisting.insert(seen.name.clone());
                }
                let pods = &mut inner.by_job.entry(job.clone()).or_default().pods;
                match pods.iter_mut().find(|p| p.name == seen.name) {
                    Some(known) => {
                        let before = known.clone();
                        known.update(seen);
                        if *known == before {
                            return Vec::new();
                        }
                    }
                    None => pods.push(seen),
                }
                vec![job]
            }
            watcher::Event::Delete(pod) => {
                let Some(job) = job_of_pod(pod) else {
                    return Vec::new();
                };
                let seen = start::seen(pod);
                // A pod of a Job already forgotten (deleted, its pods after it) is not remembered again.
                let Some(known) = inner.by_job.get_mut(&job) else {
                    return Vec::new();
                };
                match known.pods.iter_mut().find(|p| p.name == seen.name) {
                    // Whether it ended is what the last look before it went said.
                    Some(known) => known.went(),
                    None => {
                        let mut seen = seen;
                        seen.went();
                        known.pods.push(seen);
                    }
                }
                vec![job]
            }
            watcher::Event::Init => {
                inner.relisting = Some(HashSet::new());
                Vec::new()
            }
            watcher::Event::InitDone => {
                let Some(listed) = inner.relisting.take() else {
                    return Vec::new();
                };
                let mut changed = Vec::new();
                for (job, pods) in inner.by_job.iter_mut() {
                    for pod in pods
                        .pods
                        .iter_mut()
                        .filter(|p| !p.gone && !listed.contains(&p.name))
                    {
                        pod.went();
                        changed.push(job.clone());
                    }
                }
                changed
            }
        }
    }

    /// Follows one `FailedCreate` Event about a Job; returns the Job.
    pub fn observe_failed_create(&self, event: &CoreEvent) -> Option<String> {
        let job = event.involved_object.name.clone()?;
        let message = event.message.clone().unwrap_or_default();
        let mut inner = self.inner.lock().ok()?;
        inner.by_job.entry(job.clone()).or_default().failed_create = Some(message);
        Some(job)
    }

    /// What the pods of Job `job` and its Events say.
    pub fn of(&self, job: &str) -> JobPods {
        self.inner
            .lock()
            .ok()
            .and_then(|i| i.by_job.get(job).cloned())
            .unwrap_or_default()
    }

    /// Forgets Job `job`, deleted.
    pub fn forget(&self, job: &str) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.by_job.remove(job);
        }
    }
}

/// The Job a pod belongs to: its controller owner of kind Job, else its `job-name` label.
fn job_of_pod(pod: &Pod) -> Option<String> {
    let owners = pod.metadata.owner_references.iter().flatten();
    owners
        .filter(|o| o.kind == "Job")
        .map(|o| o.name.clone())
        .next()
        .or_else(|| pod.labels().get(JOB_NAME_LABEL).cloned())
}

#[cfg(test)]
mod run_pods_tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, phase: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "kok-a", "uid": "u"}]},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_gone_in_a_relist_counts_as_deleted_and_one_listed_again_does_not() {
        let pods = RunPods::default();
        assert_eq!(
            pods.observe_pod(&watcher::Event::Apply(pod("p1", "Running"))),
            ["kok-a"]
        );
        assert_eq!(
            pods.observe_pod(&watcher::Event::Apply(pod("p2", "Running"))),
            ["kok-a"]
        );
        // Nothing kok reads changed: no wake.
        assert!(pods
            .observe_pod(&watcher::Event::Apply(pod("p2", "Running")))
            .is_empty());
        pods.observe_pod(&watcher::Event::Init);
        pods.observe_pod(&watcher::Event::InitApply(pod("p2", "Running")));
        assert_eq!(pods.observe_pod(&watcher::Event::InitDone), ["kok-a"]);
        let seen = pods.of("kok-a").pods;
        let gone: Vec<_> = seen
            .iter()
            .map(|p| (p.name.as_str(), p.gone, p.deleted))
            .collect();
        assert_eq!(gone, [("p1", true, true), ("p2", false, false)]);
        pods.forget("kok-a");
        assert_eq!(pods.of("kok-a"), JobPods::default());
    }

    #[test]
    fn a_deleted_pod_keeps_its_eviction() {
        let pods = RunPods::default();
        let mut evicted = pod("p1", "Failed");
        evicted.status.as_mut().unwrap().reason = Some("Evicted".into());
        pods.observe_pod(&watcher::Event::Apply(evicted));
        pods.observe_pod(&watcher::Event::Delete(pod("p1", "Running")));
        let seen = &pods.of("kok-a").pods[0];
        assert!(
            seen.gone && seen.ended && !seen.deleted && seen.evicted.is_some(),
            "{seen:?}"
        );
    }
}

/// The pinned ConfigMap `name`, from the cache or read once; on failure, its name and the error.
pub(super) async fn pinned_config_map(
    ctx: &super::Context,
    name: &str,
) -> Result<Arc<ConfigMap>, (String, kube::Error)> {
    // Content-addressed and immutable: once read, a ConfigMap's data is known for good.
    if let Some(cm) = ctx.pinned.get(name) {
        return Ok(cm);
    }
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let cm = api.get(name).await.map_err(|e| (name.to_string(), e))?;
    Ok(ctx.pinned.keep(name, &cm))
}

/// `op` with the files of its file list (`varsFilesRef`) in `varsFiles`, as the Job lays them out; `op` as
/// it is when it lists them itself. On failure, the list's name and the error.
pub(super) async fn with_vars_files<'a>(
    ctx: &super::Context,
    op: &'a crate::api::ClusterOperation,
) -> Result<std::borrow::Cow<'a, crate::api::ClusterOperation>, (String, kube::Error)> {
    let Some(list) = &op.spec.vars_files_ref else {
        return Ok(std::borrow::Cow::Borrowed(op));
    };
    let cm = pinned_config_map(ctx, &list.name).await?;
    let Some(files) = crate::api::file_list(&cm) else {
        let status = kube::core::Status::failure(
            &format!(
                "ConfigMap {} holds no file list under {}",
                list.name,
                crate::api::FILES_KEY
            ),
            "Invalid",
        );
        return Err((list.name.clone(), kube::Error::Api(status.boxed())));
    };
    let mut op = op.clone();
    op.spec.vars_files = files;
    Ok(std::borrow::Cow::Owned(op))
}

/// The data of pinned ConfigMaps, by name, read once: their names are content-addressed and their data
/// immutable, so an entry is never stale. Verification and health read a pinned inventory from here; the
/// files a fleet shares (one ConfigMap each) are read once for the whole fleet. Holds at most
/// [`PinnedData::MAX_BYTES`] of data; past it, the entries read longest ago go.
#[derive(Debug, Default)]
pub struct PinnedData(Mutex<PinnedEntries>);

#[derive(Debug, Default)]
struct PinnedEntries {
    by_name: HashMap<Box<str>, (u64, Arc<ConfigMap>)>,
    bytes: usize,
    clock: u64,
}

impl PinnedData {
    /// How much data the cache keeps (8 MiB).
    pub const MAX_BYTES: usize = 8 << 20;

    /// The cached ConfigMap `name` (its data only).
    pub fn get(&self, name: &str) -> Option<Arc<ConfigMap>> {
        let mut entries = self.0.lock().ok()?;
        entries.clock += 1;
        let now = entries.clock;
        let (used, cm) = entries.by_name.get_mut(name)?;
        *used = now;
        Some(cm.clone())
    }

    /// Keeps the data of `cm`, read from the API server, under `name`.
    pub fn keep(&self, name: &str, cm: &ConfigMap) -> Arc<ConfigMap> {
        let kept = Arc::new(ConfigMap {
            data: cm.data.clone(),
            binary_data: cm.binary_data.clone(),
            ..Default::default()
        });
        let size = data_size(&kept);
        let Ok(mut entries) = self.0.lock() else {
            return kept;
        };
        entries.clock += 1;
        let now = entries.clock;
        if let Some((_, old)) = entries.by_name.insert(Box::from(name), (now, kept.clone())) {
            entries.bytes -= data_size(&old);
        }
        entries.bytes += size;
        while entries.bytes > Self::MAX_BYTES && entries.by_name.len() > 1 {
            let Some(oldest) = entries
                .by_name
                .iter()
                .min_by_key(|(_, (used, _))| *used)
                .map(|(n, _)| n.clone())
            else {
                break;
            };
            if let Some((_, gone)) = entries.by_name.remove(&oldest) {
                entries.bytes -= data_size(&gone);
            }
        }
        kept
    }
}

fn data_size(cm: &ConfigMap) -> usize {
    let text: usize = cm.data.iter().flatten().map(|(k, v)| k.len() + v.len()).sum();
    let binary: usize = cm
        .binary_data
        .iter()
        .flatten()
        .map(|(k, v)| k.len() + v.0.len())
        .sum();
    text + binary
}
