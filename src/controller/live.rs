//! The live objects of every cluster as kok's watches show them, for the reconcile pass.
//!
//! The pass decides its writes from this view instead of listing each cluster's objects, so a commit
//! that touches a thousand clusters costs its writes and no reads. The view is only trusted for a cluster
//! once it shows that cluster's own last writes (their resourceVersions, or their absence after a
//! delete), or its watch has delivered a later resourceVersion (the object changed or went since);
//! until then, briefly, the pass waits, and after [`CATCH_UP`] it lists that cluster instead.
//! A conflict on a guarded write means the view was stale after all: apply lists and decides again.
//!
//! The watches keep what the decisions and the web view read and drop the rest: every object its
//! `managedFields`, Clusters kok's own labels (the watch selects by them; the user's, from cluster.yml,
//! stay for the web view's label filter) and annotations (the content hash is kept apart, and a
//! snapshot puts it back). Operations and ConfigMaps are not kept as objects at all but as kok's own
//! records of what is read of them (see `op_cache` and `config_maps`).
//!
//! Beside them, [`PlanIndex`] keeps the plans the service made of open pull requests' heads, for the web
//! view's commit pages.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use tracing::{debug, warn};

use super::cache::SetAside;
use super::config_maps::ConfigMapCache;
use super::op_cache::OpCache;
use crate::api::watched::{operation_event, WatchedOperation};
use crate::api::{managed_selector, Cluster, ClusterOperation, FleetRollout};
use crate::materialize::apply::{Live, Written};
use crate::materialize::shared;

/// How long the pass waits for the watches to show a cluster's last writes before listing it.
pub const CATCH_UP: Duration = Duration::from_secs(2);

/// The writing ends of the watch caches: the controller (or [`Feeds::watch`]) runs the watches.
pub struct Feeds {
    /// Feeds the Cluster store.
    pub clusters: reflector::store::Writer<Cluster>,
    /// Feeds the FleetRollout store (the controller's rollout watch).
    pub rollouts: reflector::store::Writer<FleetRollout>,
    /// The view the stores make up.
    pub live: Arc<LiveCache>,
}

/// Most pull-request plans [`PlanIndex`] keeps.
pub const PLANS_KEPT: usize = 64;

/// The plans kok made of open pull requests' heads, as text by head sha, newest last: what the web
/// view's commit page shows. At most [`PLANS_KEPT`]; the oldest go first.
#[derive(Debug, Default)]
pub struct PlanIndex {
    plans: Mutex<std::collections::VecDeque<(String, Arc<str>)>>,
}

impl PlanIndex {
    /// Keeps `text` as the plan of `head` (in place of an earlier one).
    pub fn keep(&self, head: &str, text: &str) {
        if let Ok(mut plans) = self.plans.lock() {
            plans.retain(|(h, _)| h != head);
            if plans.len() >= PLANS_KEPT {
                plans.pop_front();
            }
            plans.push_back((head.to_string(), Arc::from(text)));
        }
    }

    /// The plan of `head`, if kok made one lately.
    pub fn get(&self, head: &str) -> Option<Arc<str>> {
        let plans = self.plans.lock().ok()?;
        plans.iter().find(|(h, _)| h == head).map(|(_, p)| p.clone())
    }
}

/// The live objects kok manages in its namespace, from its watches.
pub struct LiveCache {
    namespace: String,
    /// Every ClusterOperation kok manages, as kok's own records, by cluster.
    pub operations: Arc<OpCache>,
    /// Every Cluster kok manages, without annotations.
    pub clusters: Store<Cluster>,
    /// Every FleetRollout kok manages (the controller's rollout watch fills it; the web view reads it).
    pub rollouts: Store<FleetRollout>,
    /// The content hashes of the cached Clusters (kept without annotations).
    cluster_aside: SetAside,
    /// Every ConfigMap kok manages, as kok's own records.
    config_maps: ConfigMapCache,
    /// When the last sweep of shared ConfigMaps ran.
    last_sweep: Mutex<Option<std::time::Instant>>,
    /// The plans of open pull requests' heads (kept by `pulls`, read by the web view).
    pub plans: PlanIndex,
    /// Per cluster, what the pass's last writes left behind and the watches may not show yet.
    expected: Mutex<HashMap<String, Vec<Written>>>,
    /// How many clusters `expected` kept when it last forgot the ones the watches show.
    expected_kept: AtomicUsize,
    /// The newest resourceVersion each watch has delivered (Cluster, ConfigMap, ClusterOperation,
    /// FleetRollout): a write at or below it has been seen, whatever became of its object since.
    progress: [AtomicU64; 4],
}

/// The watches, as indexes of [`LiveCache::progress`].
#[derive(Clone, Copy)]
enum Watch {
    Clusters = 0,
    ConfigMaps = 1,
    Operations = 2,
    Rollouts = 3,
}

impl Watch {
    fn of(kind: &str) -> Watch {
        match kind {
            "Cluster" => Watch::Clusters,
            "ConfigMap" => Watch::ConfigMaps,
            "FleetRollout" => Watch::Rollouts,
            _ => Watch::Operations,
        }
    }
}

impl std::fmt::Debug for LiveCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveCache")
            .field("namespace", &self.namespace)
            .field("clusters", &self.clusters.len())
            .field("operations", &self.operations.len())
            .field("config_maps", &self.config_maps.len())
            .finish()
    }
}

/// Empty caches of `namespace` and the ends that fill them.
pub fn caches(namespace: &str) -> Feeds {
    let (clusters, cluster_writer) = reflector::store::<Cluster>();
    let (rollouts, rollout_writer) = reflector::store::<FleetRollout>();
    Feeds {
        clusters: cluster_writer,
        rollouts: rollout_writer,
        live: Arc::new(LiveCache {
            namespace: namespace.to_string(),
            operations: Arc::new(OpCache::new(namespace)),
            clusters,
            rollouts,
            config_maps: ConfigMapCache::default(),
            last_sweep: Mutex::default(),
            plans: PlanIndex::default(),
            cluster_aside: SetAside::default(),
            expected: Mutex::new(HashMap::new()),
            expected_kept: AtomicUsize::new(0),
            progress: Default::default(),
        }),
    }
}

fn managed() -> watcher::Config {
    watcher::Config::default().labels(&managed_selector())
}

/// The ClusterOperation watch, feeding the operation cache; its events come after the cache took them,
/// each with whether it may let the operations waiting behind that one go ([`OpCache::observe`]).
pub fn operation_events(
    client: &Client,
    live: Arc<LiveCache>,
) -> impl Stream<Item = Result<(watcher::Event<ClusterOperation>, bool), watcher::Error>> + Send {
    let api = Api::<WatchedOperation>::namespaced(client.clone(), &live.namespace);
    watcher(api, managed()).default_backoff().map_ok(move |event| {
        let event = operation_event(event);
        let lets_go = live.operations.observe(&event);
        live.advance(Watch::Operations, &event);
        (event, lets_go)
    })
}

/// The Cluster watch, feeding the store.
pub fn cluster_events(
    client: &Client,
    live: Arc<LiveCache>,
    writer: reflector::store::Writer<Cluster>,
) -> impl Stream<Item = Result<watcher::Event<Cluster>, watcher::Error>> + Send {
    let api = Api::<Cluster>::namespaced(client.clone(), &live.namespace);
    let slim = live.clone();
    watcher(api, managed())
        .default_backoff()
        .modify(move |c: &mut Cluster| slim.slim_cluster(c))
        .reflect(writer)
        .inspect(move |event| {
            if let Ok(event) = event {
                if let watcher::Event::Delete(c) = event {
                    live.cluster_aside.forget(&c.name_any());
                }
                live.advance(Watch::Clusters, event);
            }
        })
}

/// Keeps the ConfigMap cache (names, resourceVersions, labels and owners) until `stopped`.
pub async fn watch_config_maps(client: Client, live: Arc<LiveCache>, stopped: impl Future<Output = ()>) {
    let api = Api::<ConfigMap>::namespaced(client, &live.namespace);
    let events = watcher(api, managed()).default_backoff().for_each(|event| {
        match event {
            Ok(event) => {
                live.config_maps.observe(&event);
                live.advance(Watch::ConfigMaps, &event);
            }
            Err(e) => warn!(error = %e, "watching ConfigMaps failed; retrying"),
        }
        futures::future::ready(())
    });
    tokio::select! {
        () = events => {}
        () = stopped => {}
    }
}

impl Feeds {
    /// Runs the three watches alone, for a pass without the controller, until `stopped`.
    pub async fn watch(self, client: Client, stopped: impl Future<Output = ()> + Send + 'static) {
        let ops = operation_events(&client, self.live.clone()).for_each(|e| logged("ClusterOperations", e));
        let clusters =
            cluster_events(&client, self.live.clone(), self.clusters).for_each(|e| logged("Clusters", e));
        let cms = watch_config_maps(client.clone(), self.live.clone(), std::future::pending());
        tokio::select! {
            _ = futures::future::join3(ops, clusters, cms) => {}
            () = stopped => {}
        }
    }
}

fn logged<T>(kind: &str, event: Result<T, watcher::Error>) -> futures::future::Ready<()> {
    if let Err(e) = event {
        warn!(error = %e, "watching {kind} failed; retrying");
    }
    futures::future::ready(())
}

/// Of a cluster's writes, the ones whose showing means the watches show them all: per watch, the write
/// with the newest numeric resourceVersion, and every write that deleted its object or whose version is
/// not a number. A watch delivers its events in resourceVersion order and a relist is one snapshot, so a
/// cache that shows the newest write of a watch shows that watch's earlier ones. A pass writes about
/// 23 objects of a cluster of 20 runs; this keeps 3 of them until the watches show them.
fn newest_per_watch(written: Vec<Written>) -> Vec<Written> {
    let mut newest: [Option<(u64, Written)>; 4] = Default::default();
    let mut kept = Vec::new();
    for w in written {
        let version = w
            .resource_version
            .as_deref()
            .and_then(|rv| rv.parse::<u64>().ok());
        match version {
            Some(v) => {
                let slot = &mut newest[Watch::of(w.kind) as usize];
                if slot.as_ref().is_none_or(|(known, _)| v > *known) {
                    *slot = Some((v, w));
                }
            }
            None => kept.push(w),
        }
    }
    kept.extend(newest.into_iter().flatten().map(|(_, w)| w));
    kept.shrink_to_fit();
    kept
}

/// True when a cache that shows `have` has seen a write that returned `want`. resourceVersions are
/// opaque, but every API server in use hands out increasing integers; other values must match exactly.
fn seen(have: Option<&str>, want: &str) -> bool {
    match (have.and_then(|h| h.parse::<u64>().ok()), want.parse::<u64>().ok()) {
        (Some(h), Some(w)) => h >= w,
        _ => have == Some(want),
    }
}

impl LiveCache {
    /// The namespace the caches follow.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Waits until every watch has listed once, at most `within`; false when they have not (the
    /// caller lists instead).
    pub async fn ready(&self, within: Duration) -> bool {
        let all = async {
            self.operations.wait_until_listed().await;
            self.config_maps.wait_until_listed().await;
            self.clusters.wait_until_ready().await.is_ok()
        };
        tokio::time::timeout(within, all).await.unwrap_or(false)
    }

    /// Drops what nothing reads of a Cluster the watch delivers: `managedFields`, kok's own labels (the
    /// user's stay), and the annotations, whose content hash is kept apart for [`LiveCache::snapshot`].
    fn slim_cluster(&self, cluster: &mut Cluster) {
        cluster.metadata.managed_fields = None;
        if let Some(labels) = cluster.metadata.labels.as_mut() {
            for own in crate::api::common_labels("").keys() {
                labels.remove(own);
            }
            if labels.is_empty() {
                cluster.metadata.labels = None;
            }
        }
        self.cluster_aside.take_annotations(&mut cluster.metadata);
    }

    fn rv_of<K: Resource<DynamicType = ()> + Clone>(&self, store: &Store<K>, name: &str) -> Option<String> {
        store
            .get(&ObjectRef::new(name).within(&self.namespace))
            .and_then(|o| o.meta().resource_version.clone())
    }

    /// Follows a watch's progress: the newest resourceVersion it delivered after its list (objects of
    /// a list come in no order, and the store takes them only once the list is whole).
    fn advance<K: Resource>(&self, watch: Watch, event: &watcher::Event<K>) {
        let newest = match event {
            watcher::Event::Apply(obj) | watcher::Event::Delete(obj) => obj
                .meta()
                .resource_version
                .as_deref()
                .and_then(|rv| rv.parse::<u64>().ok()),
            watcher::Event::InitApply(_) | watcher::Event::Init | watcher::Event::InitDone => None,
        };
        if let Some(rv) = newest {
            self.progress[watch as usize].fetch_max(rv, Ordering::Relaxed);
        }
    }

    fn shows(&self, w: &Written) -> bool {
        let watch = Watch::of(w.kind);
        let have = match watch {
            Watch::Clusters => self.rv_of(&self.clusters, &w.name),
            Watch::ConfigMaps => self.config_maps.resource_version(&w.name),
            Watch::Operations => self.operations.resource_version(&w.name),
            Watch::Rollouts => self.rv_of(&self.rollouts, &w.name),
        };
        match &w.resource_version {
            // Shown at that version or later, or the watch is past it (the object changed or went since).
            Some(want) => {
                let progress = self.progress[watch as usize].load(Ordering::Relaxed);
                seen(have.as_deref(), want) || (progress > 0 && seen(Some(&progress.to_string()), want))
            }
            None => have.is_none(),
        }
    }

    fn caught_up(&self, cluster: &str) -> bool {
        let Ok(mut expected) = self.expected.lock() else {
            return false;
        };
        let done = expected
            .get(cluster)
            .is_none_or(|writes| writes.iter().all(|w| self.shows(w)));
        if done {
            expected.remove(cluster);
        }
        done
    }

    /// Follows the rollout watch's progress, so that [`LiveCache::progress`] moves when a rollout changes.
    pub fn saw_rollout(&self, event: &watcher::Event<FleetRollout>) {
        self.advance(Watch::Rollouts, event);
    }

    /// The newest resourceVersion any watch has delivered: it grows whenever a watched object changes, a
    /// cheap "has anything changed?" for readers such as the web view.
    pub fn progress(&self) -> u64 {
        self.progress
            .iter()
            .map(|p| p.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0)
    }

    /// Notes what a pass's writes to `cluster` left behind: the cluster's view is trusted again once
    /// the watches show it.
    pub fn wrote(&self, cluster: &str, written: Vec<Written>) {
        if written.is_empty() {
            return;
        }
        if let Ok(mut expected) = self.expected.lock() {
            // A fleet-size pass would otherwise keep every cluster's writes until that cluster's next
            // pass: once the map doubled, the clusters the watches show already are forgotten.
            if expected.len() >= 2 * self.expected_kept.load(Ordering::Relaxed) + 64 {
                expected.retain(|_, writes| !writes.iter().all(|w| self.shows(w)));
                expected.shrink_to_fit();
                self.expected_kept.store(expected.len(), Ordering::Relaxed);
            }
            let kept = expected.entry(cluster.to_string()).or_default();
            kept.extend(written);
            *kept = newest_per_watch(std::mem::take(kept));
        }
    }

    /// The live objects of `cluster` as the watches show them, once they show its last writes; `None`
    /// when they do not within [`CATCH_UP`] (the caller lists instead).
    pub async fn live(&self, cluster: &str) -> Option<Live> {
        let deadline = tokio::time::Instant::now() + CATCH_UP;
        while !self.caught_up(cluster) {
            if tokio::time::Instant::now() >= deadline {
                debug!(%cluster, "the watches lag behind the last writes; listing instead");
                // The list is the truth now; the writes decided from it set new expectations.
                if let Ok(mut expected) = self.expected.lock() {
                    expected.remove(cluster);
                }
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Some(self.snapshot(cluster))
    }

    fn snapshot(&self, cluster: &str) -> Live {
        let ns = self.namespace.as_str();
        let cluster_obj = self.clusters.get(&ObjectRef::new(cluster).within(ns)).map(|c| {
            let mut c = (*c).clone();
            self.cluster_aside.restore(&mut c.metadata);
            c
        });
        let config_maps: BTreeMap<String, ConfigMap> =
            self.config_maps.of_cluster(ns, cluster).into_iter().collect();
        let operations: BTreeMap<String, ClusterOperation> = self
            .operations
            .of_cluster(cluster)
            .into_iter()
            .filter(|(_, op)| op.labels().get(crate::api::LABEL_CLUSTER).map(String::as_str) == Some(cluster))
            .collect();
        Live {
            cluster: cluster_obj,
            config_maps,
            operations,
        }
    }

    /// Deletes the shared ConfigMaps no Cluster or ClusterOperation in the caches names (see
    /// [`crate::materialize::shared`]), at most once every [`shared::SWEEP_EVERY`]; returns how many.
    pub async fn sweep_shared(
        &self,
        client: &Client,
    ) -> Result<usize, crate::materialize::apply::ApplyError> {
        {
            let Ok(mut last) = self.last_sweep.lock() else {
                return Ok(0);
            };
            if last.is_some_and(|t| t.elapsed() < shared::SWEEP_EVERY) {
                return Ok(0);
            }
            *last = Some(std::time::Instant::now());
        }
        let all = self.config_maps.collectable();
        if all.is_empty() {
            return Ok(0);
        }
        let mut named = std::collections::HashSet::new();
        self.operations.add_named(&mut named);
        for c in self.clusters.state() {
            shared::add_named(&mut named, &c.spec);
        }
        let now = jiff::Timestamp::now().as_second();
        let doomed = shared::decide_sweep(&all, &named, now, shared::SHARED_GRACE);
        shared::delete_shared(client, &self.namespace, &doomed).await
    }

    /// True when the ConfigMap `name` is in the cache (kok's own, any cluster's or shared).
    pub fn has_config_map(&self, name: &str) -> bool {
        self.config_maps.resource_version(name).is_some()
    }

    /// Names of the Clusters kok manages, as the watch shows them (it selects kok's own).
    pub fn cluster_names(&self) -> BTreeSet<String> {
        self.clusters.state().iter().map(|c| c.name_any()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_cluster_keeps_only_the_user_s_labels_and_a_snapshot_puts_its_content_hash_back() {
        let Feeds {
            clusters: mut writer,
            live,
            ..
        } = caches("kok");
        let mut cluster: Cluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "kok.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {
                "name": "prod-bj",
                "namespace": "kok",
                "uid": "u-1",
                "resourceVersion": "7",
                "labels": {
                    crate::api::LABEL_MANAGED_BY: crate::api::MANAGED_BY,
                    "kok.dev/cluster": "prod-bj",
                    "env": "prod",
                },
                "annotations": {crate::api::ANNOTATION_CONTENT_HASH: "h1"},
            },
            "spec": {
                "hostsConfRef": {"name": "prod-bj-hosts"},
                "varsConfRef": {"name": "prod-bj-vars"},
                "source": {"path": "clusters/prod-bj", "revision": "main"},
            },
        }))
        .expect("a Cluster");
        live.slim_cluster(&mut cluster);
        assert_eq!(
            cluster.metadata.labels,
            Some(BTreeMap::from([("env".to_string(), "prod".to_string())]))
        );
        assert_eq!(cluster.metadata.annotations, None);
        writer.apply_watcher_event(&watcher::Event::Apply(cluster));

        assert_eq!(live.cluster_names(), BTreeSet::from(["prod-bj".to_string()]));
        let cached = live.snapshot("prod-bj").cluster.expect("the cached Cluster");
        assert_eq!(
            cached
                .annotations()
                .get(crate::api::ANNOTATION_CONTENT_HASH)
                .map(String::as_str),
            Some("h1")
        );
        assert_eq!(cached.metadata.uid.as_deref(), Some("u-1"));
    }

    #[test]
    fn the_writes_the_watches_show_are_forgotten_without_waiting_for_their_cluster_s_next_pass() {
        let Feeds { live, .. } = caches("kok");
        let written = |cluster: &str, rv: u64| {
            vec![Written {
                kind: "ConfigMap",
                name: format!("{cluster}-hosts"),
                resource_version: Some(rv.to_string()),
            }]
        };
        for i in 0..64 {
            live.wrote(&format!("c{i}"), written(&format!("c{i}"), 100 + i));
        }
        // The ConfigMap watch delivers a version past the first 32 writes.
        let mut cm = ConfigMap::default();
        cm.metadata.resource_version = Some("131".into());
        live.advance(Watch::ConfigMaps, &watcher::Event::Apply(cm));
        live.wrote("c64", written("c64", 200));
        let expected = live.expected.lock().unwrap();
        assert_eq!(expected.len(), 33, "c32 to c63, and c64");
        assert!(!expected.contains_key("c0") && !expected.contains_key("c31"));
        assert!(expected.contains_key("c32") && expected.contains_key("c64"));
    }

    #[test]
    fn a_clusters_writes_are_awaited_by_the_newest_of_each_watch_and_every_delete() {
        let w = |kind: &'static str, name: &str, rv: Option<&str>| Written {
            kind,
            name: name.to_string(),
            resource_version: rv.map(str::to_string),
        };
        let kept = newest_per_watch(vec![
            w("ClusterOperation", "op-1", Some("120")),
            w("ConfigMap", "hosts", Some("101")),
            w("ClusterOperation", "op-3", Some("131")),
            w("ClusterOperation", "op-2", Some("125")),
            w("ClusterOperation", "op-old", None),
            w("Cluster", "a", Some("132")),
            w("ConfigMap", "vars", Some("v-abc")),
        ]);
        let names: Vec<&str> = kept.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["op-old", "vars", "a", "hosts", "op-3"]);

        // The cluster is caught up only once the operation watch is past the newest of its writes.
        let Feeds { live, .. } = caches("kok");
        live.wrote(
            "a",
            vec![
                w("ClusterOperation", "op-1", Some("120")),
                w("ClusterOperation", "op-3", Some("131")),
            ],
        );
        let past = |rv: &str| {
            let mut op = ClusterOperation::new("other", Default::default());
            op.metadata.resource_version = Some(rv.into());
            watcher::Event::Apply(op)
        };
        live.advance(Watch::Operations, &past("130"));
        assert!(!live.caught_up("a"), "op-3 is not shown yet");
        live.advance(Watch::Operations, &past("131"));
        assert!(live.caught_up("a"));
    }

    #[test]
    fn the_plan_index_keeps_the_newest_plan_of_each_head_and_forgets_the_oldest_heads() {
        let plans = PlanIndex::default();
        plans.keep("a", "old plan of a");
        plans.keep("a", "plan of a");
        assert_eq!(plans.get("a").as_deref(), Some("plan of a"));
        for i in 0..PLANS_KEPT {
            plans.keep(&format!("h{i}"), "a plan");
        }
        assert!(plans.get("a").is_none(), "the oldest head went");
        assert!(plans.get("h0").is_some() && plans.get(&format!("h{}", PLANS_KEPT - 1)).is_some());
    }

    #[test]
    fn a_rollout_s_change_moves_the_caches_progress_so_open_web_pages_follow_it() {
        let Feeds {
            rollouts: mut writer,
            live,
            ..
        } = caches("kok");
        let mut rollout = FleetRollout::new("upgrade", Default::default());
        rollout.metadata.namespace = Some("kok".into());
        rollout.metadata.resource_version = Some("42".into());
        let event = watcher::Event::Apply(rollout);
        writer.apply_watcher_event(&event);
        live.saw_rollout(&event);
        assert_eq!(live.progress(), 42);
        assert_eq!(live.rollouts.state().len(), 1);
    }

    #[test]
    fn a_write_is_seen_at_its_resource_version_or_later() {
        assert!(seen(Some("12"), "12"));
        assert!(seen(Some("13"), "12"));
        assert!(!seen(Some("11"), "12"));
        assert!(!seen(None, "12"));
        assert!(seen(Some("abc"), "abc"));
        assert!(!seen(Some("abd"), "abc"));
    }
}
