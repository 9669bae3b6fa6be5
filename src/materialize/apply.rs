//! Writing desired clusters into the meta-cluster, and pruning what is no longer desired.
//!
//! Each call decides from the live objects of the cluster it handles: the service's watch caches
//! ([`crate::controller::live`]) or, without them, one list per kind by label; so the cost follows the
//! change, not the repository. What is written, and how:
//!
//! - the Cluster: server-side apply with kok's field manager, skipped when the live object's
//!   `kok.dev/content-hash` equals the desired one;
//! - content-addressed ConfigMaps: created once (immutable data); their metadata says who uses them:
//!   owner references to the Cluster while current (label `kok.dev/current`) and to every
//!   ClusterOperation that pins them, so the garbage collector frees them when nothing uses them;
//! - ClusterOperations: created once, labelled `kok.dev/current` while they are entries of operations.yml,
//!   never updated in spec;
//! - removed operations that have not started are marked Canceled; running and finished ones only lose
//!   the current label and stay as the record until the history limit.
//!
//! [`decide_cluster`] and [`decide_removal`] decide the writes from the live and the desired objects
//! (pure); [`apply_cluster_from`] and [`remove_cluster_from`] make them; `kok plan` prints them. An
//! unchanged cluster costs no write, and no read when the caches vouch for it. Guarded writes that meet
//! a conflict (the view was stale) list the cluster afresh and decide again.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tracing::{debug, info, warn};

use super::rollout::{resolve_runs, rollout_of, wave_of};
use super::DesiredCluster;
use crate::api::watched::patch_answered;
use crate::api::{
    run_context, Cluster, ClusterOperation, CommitStatus, OperationRecord, Phase, PinnedInventory, RunRecord,
    StatusState, ANNOTATION_CONTENT_HASH, FIELD_MANAGER, LABEL_CLUSTER, LABEL_CURRENT, LABEL_MANAGED_BY,
    LABEL_WAVE, MANAGED_BY,
};

/// Message of an operation canceled because its entry left operations.yml.
pub const CANCELED_MESSAGE: &str = "removed from operations.yml";

/// What an apply or prune did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApplyStats {
    /// Write requests sent (creates, applies, patches, deletes).
    pub writes: usize,
    /// Objects created.
    pub created: usize,
    /// Objects whose spec or metadata was written again.
    pub updated: usize,
    /// Objects deleted.
    pub deleted: usize,
    /// Operations marked Canceled.
    pub canceled: usize,
}

impl std::ops::AddAssign for ApplyStats {
    fn add_assign(&mut self, o: Self) {
        self.writes += o.writes;
        self.created += o.created;
        self.updated += o.updated;
        self.deleted += o.deleted;
        self.canceled += o.canceled;
    }
}

/// Failures of apply and prune; each names the object and the namespace.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Listing the live objects of a cluster failed.
    #[error("listing the {kind} objects of cluster {cluster} in namespace {namespace} failed: {source}")]
    List {
        /// Kind listed.
        kind: &'static str,
        /// Cluster name.
        cluster: String,
        /// Namespace.
        namespace: String,
        /// What the API server said.
        #[source]
        source: Box<kube::Error>,
    },
    /// Server-side apply of a Cluster failed.
    #[error("applying Cluster {name} in namespace {namespace} failed: {source}")]
    ApplyCluster {
        /// Cluster name.
        name: String,
        /// Namespace.
        namespace: String,
        /// What the API server said.
        #[source]
        source: Box<kube::Error>,
    },
    /// Creating or patching a ConfigMap failed.
    #[error("writing ConfigMap {name} in namespace {namespace} failed: {source}")]
    WriteConfigMap {
        /// ConfigMap name.
        name: String,
        /// Namespace.
        namespace: String,
        /// What the API server said.
        #[source]
        source: Box<kube::Error>,
    },
    /// Creating or labelling a ClusterOperation failed.
    #[error("writing ClusterOperation {name} in namespace {namespace} failed: {source}")]
    WriteOperation {
        /// ClusterOperation name.
        name: String,
        /// Namespace.
        namespace: String,
        /// What the API server said.
        #[source]
        source: Box<kube::Error>,
    },
    /// Server-side apply of a FleetRollout failed.
    #[error("applying FleetRollout {name} in namespace {namespace} failed: {source}")]
    WriteRollout {
        /// Rollout name.
        name: String,
        /// Namespace.
        namespace: String,
        /// What the API server said.
        #[source]
        source: Box<kube::Error>,
    },
    /// Deleting an object of a removed cluster failed.
    #[error("deleting {kind} {name} in namespace {namespace} failed: {source}")]
    Delete {
        /// Kind of the object.
        kind: &'static str,
        /// Its name.
        name: String,
        /// Namespace.
        namespace: String,
        /// What the API server said.
        #[source]
        source: Box<kube::Error>,
    },
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

fn is_invalid(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 422)
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn hash_of<K: Resource>(obj: &K) -> Option<&str> {
    obj.meta()
        .annotations
        .as_ref()?
        .get(ANNOTATION_CONTENT_HASH)
        .map(String::as_str)
}

fn has_label<K: Resource>(obj: &K, key: &str) -> bool {
    obj.meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
        == Some("true")
}

/// Selector for the objects kok manages for `cluster`.
pub fn cluster_selector(cluster: &str) -> String {
    format!("{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_CLUSTER}={cluster}")
}

/// The live objects of one cluster: from the service's watch caches, read with one list per kind, or
/// simulated by `kok plan` when no meta-cluster is reachable.
#[derive(Clone, Debug, Default)]
pub struct Live {
    /// The Cluster, when it exists.
    pub cluster: Option<Cluster>,
    /// The cluster's ConfigMaps, by name.
    pub config_maps: BTreeMap<String, ConfigMap>,
    /// The cluster's ClusterOperations, by name.
    pub operations: BTreeMap<String, ClusterOperation>,
}

impl Live {
    /// Adds to [`Live::config_maps`] the ConfigMaps the fleet shares that `desired` pins and that exist
    /// according to `exists` (a watch cache's view). One missing is created (a server-side apply, so one that
    /// existed after all is left as it is).
    pub fn see_shared(&mut self, desired: &DesiredCluster, exists: impl Fn(&str) -> bool) {
        for cm in desired
            .config_maps
            .iter()
            .filter(|cm| super::render::is_shared(cm))
        {
            let name = cm.name_any();
            if exists(&name) {
                self.config_maps.insert(name, shared_stub(cm));
            }
        }
    }

    fn shared(&self) -> impl Iterator<Item = (&String, &ConfigMap)> {
        self.config_maps
            .iter()
            .filter(|(_, cm)| super::render::is_shared(cm))
    }
}

/// What a cluster's view holds of a shared ConfigMap: its name and labels.
fn shared_stub(cm: &ConfigMap) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: cm.metadata.name.clone(),
            labels: cm.metadata.labels.clone(),
            ..Default::default()
        },
        ..ConfigMap::default()
    }
}

/// Adds to `live` the ConfigMaps the fleet shares that `desired` pins and that exist, reading the metadata
/// of each.
pub async fn read_shared(
    client: &Client,
    namespace: &str,
    desired: &DesiredCluster,
    live: &mut Live,
) -> Result<(), ApplyError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    for cm in desired
        .config_maps
        .iter()
        .filter(|cm| super::render::is_shared(cm))
    {
        let name = cm.name_any();
        match api.get_metadata_opt(&name).await {
            Ok(Some(_)) => {
                live.config_maps.insert(name, shared_stub(cm));
            }
            Ok(None) => {}
            Err(source) => {
                return Err(ApplyError::List {
                    kind: "ConfigMap",
                    cluster: desired.name.clone(),
                    namespace: namespace.to_string(),
                    source: Box::new(source),
                })
            }
        }
    }
    Ok(())
}

/// Reads the live objects of `cluster` (three lists, no write).
pub async fn read_live(client: &Client, namespace: &str, cluster: &str) -> Result<Live, ApplyError> {
    Apis::new(client, namespace).live(cluster).await
}

/// Names of the live Clusters kok manages in `namespace` (one list).
pub async fn live_cluster_names(client: &Client, namespace: &str) -> Result<BTreeSet<String>, ApplyError> {
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), namespace);
    let lp = ListParams::default().labels(&crate::api::managed_selector());
    let live = clusters.list(&lp).await.map_err(|source| ApplyError::List {
        kind: "Cluster",
        cluster: "*".to_string(),
        namespace: namespace.to_string(),
        source: Box::new(source),
    })?;
    Ok(live.items.iter().map(|c| c.name_any()).collect())
}

/// The three API handles of a namespace.
struct Apis {
    client: Client,
    namespace: String,
    clusters: Api<Cluster>,
    config_maps: Api<ConfigMap>,
    operations: Api<ClusterOperation>,
}

impl Apis {
    fn new(client: &Client, namespace: &str) -> Self {
        Apis {
            client: client.clone(),
            namespace: namespace.to_string(),
            clusters: Api::namespaced(client.clone(), namespace),
            config_maps: Api::namespaced(client.clone(), namespace),
            operations: Api::namespaced(client.clone(), namespace),
        }
    }

    async fn live(&self, cluster: &str) -> Result<Live, ApplyError> {
        let lp = ListParams::default().labels(&cluster_selector(cluster));
        let err = |kind: &'static str| {
            let (cluster, namespace) = (cluster.to_string(), self.namespace.clone());
            move |source| ApplyError::List {
                kind,
                cluster,
                namespace,
                source: Box::new(source),
            }
        };
        let (clusters, cms, ops) = futures::join!(
            self.clusters.list(&lp),
            self.config_maps.list(&lp),
            self.operations.list(&lp)
        );
        let live_cluster = clusters
            .map_err(err("Cluster"))?
            .items
            .into_iter()
            .find(|c| c.name_any() == cluster);
        Ok(Live {
            cluster: live_cluster,
            config_maps: cms
                .map_err(err("ConfigMap"))?
                .items
                .into_iter()
                .map(|c| (c.name_any(), c))
                .collect(),
            operations: ops
                .map_err(err("ClusterOperation"))?
                .items
                .into_iter()
                .map(|o| (o.name_any(), o))
                .collect(),
        })
    }

    fn cm_err(&self, name: &str) -> impl FnOnce(kube::Error) -> ApplyError {
        let (name, namespace) = (name.to_string(), self.namespace.clone());
        move |source| ApplyError::WriteConfigMap {
            name,
            namespace,
            source: Box::new(source),
        }
    }

    fn op_err(&self, name: &str) -> impl FnOnce(kube::Error) -> ApplyError {
        let (name, namespace) = (name.to_string(), self.namespace.clone());
        move |source| ApplyError::WriteOperation {
            name,
            namespace,
            source: Box::new(source),
        }
    }
}

/// One write request apply makes, decided from the live and the desired objects: `kok plan` prints
/// them, [`apply_cluster`] and [`remove_cluster`] make them, in this order.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// Server-side apply of the Cluster (`exists`: an update, else a create).
    ApplyCluster {
        /// Cluster name.
        name: String,
        /// True when the Cluster exists.
        exists: bool,
    },
    /// Create a ClusterOperation, labelled current.
    CreateOperation {
        /// Its name.
        name: String,
        /// Its body, for a cluster's run of a rollout (an entry of operations.yml is found in the
        /// desired cluster by name).
        body: Option<Box<ClusterOperation>>,
    },
    /// Set the `kok.dev/wave` label of a cluster's run of a rollout: a commit moved the cluster to
    /// another wave.
    LabelWave {
        /// Its name.
        name: String,
        /// The wave.
        wave: String,
    },
    /// Set (`current`) or drop the current label of a ClusterOperation.
    LabelOperation {
        /// Its name.
        name: String,
        /// The label's new state.
        current: bool,
    },
    /// Mark a ClusterOperation that has not started Canceled (status patch).
    CancelOperation {
        /// Its name.
        name: String,
        /// The status patch, guarded by the resourceVersion it was decided at.
        patch: serde_json::Value,
        /// The operation, for the Canceled Event.
        reference: k8s_openapi::api::core::v1::ObjectReference,
    },
    /// Create a ConfigMap (a cluster's labelled current), without owners.
    CreateConfigMap {
        /// Its name.
        name: String,
    },
    /// Set a ConfigMap's owners and current label, guarded by its resourceVersion.
    PatchConfigMap {
        /// Its name.
        name: String,
        /// The resourceVersion it was decided at.
        resource_version: Option<String>,
        /// Its owners after the patch (an earlier kok made the runs that pin it its owners).
        owners: Vec<OwnerReference>,
        /// Whether it stays current.
        current: bool,
    },
    /// Delete a ConfigMap nothing uses, guarded by its resourceVersion.
    DeleteConfigMap {
        /// Its name.
        name: String,
        /// The resourceVersion it was decided at.
        resource_version: Option<String>,
    },
    /// Delete a Cluster whose directory is gone.
    DeleteCluster {
        /// Its name.
        name: String,
    },
}

/// How a write changes its object, as `kok plan` counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    /// The object is created.
    Create,
    /// The object is written again.
    Update,
    /// The object is deleted.
    Delete,
}

impl Write {
    /// The change, the kind and the name of the object written.
    pub fn target(&self) -> (Change, &'static str, &str) {
        match self {
            Write::ApplyCluster { name, exists } => (
                if *exists { Change::Update } else { Change::Create },
                "Cluster",
                name,
            ),
            Write::CreateOperation { name, .. } => (Change::Create, "ClusterOperation", name),
            Write::LabelOperation { name, .. }
            | Write::LabelWave { name, .. }
            | Write::CancelOperation { name, .. } => (Change::Update, "ClusterOperation", name),
            Write::CreateConfigMap { name, .. } => (Change::Create, "ConfigMap", name),
            Write::PatchConfigMap { name, .. } => (Change::Update, "ConfigMap", name),
            Write::DeleteConfigMap { name, .. } => (Change::Delete, "ConfigMap", name),
            Write::DeleteCluster { name } => (Change::Delete, "Cluster", name),
        }
    }

    /// What the write does, in a few words.
    pub fn describe(&self) -> &'static str {
        match self {
            Write::ApplyCluster { .. } => "applied",
            Write::CreateOperation { body: None, .. } => "created, queued to run",
            Write::CreateOperation { body: Some(_), .. } => {
                "created, queued to run in its wave of the rollout"
            }
            Write::LabelWave { .. } => "moved to another wave of its rollout",
            Write::LabelOperation { current: true, .. } => "an entry of operations.yml again",
            Write::LabelOperation { current: false, .. } => "no longer an entry of operations.yml",
            Write::CancelOperation { .. } => "canceled: removed before it started",
            Write::CreateConfigMap { .. } => "created",
            Write::PatchConfigMap { current: true, .. } => "current again",
            Write::PatchConfigMap { current: false, .. } => "no longer current, kept for its users",
            Write::DeleteConfigMap { .. } | Write::DeleteCluster { .. } => "deleted",
        }
    }
}

fn uid_of<K: Resource>(obj: &K) -> Option<String> {
    obj.meta().uid.clone()
}

/// The writes that make the live objects of one cluster match `desired`: the Cluster (skipped when its
/// content hash matches), operations created once and labelled current, current ConfigMaps created
/// with their users as owners, ConfigMaps no longer current released (deleted when nothing uses or
/// pins them), and operations that left operations.yml retired. Nothing when everything matches.
pub fn decide_cluster(live: &Live, desired: &DesiredCluster, now: Timestamp) -> Vec<Write> {
    let mut writes = Vec::new();
    let cluster_unchanged = matches!(&live.cluster,
        Some(c) if hash_of(c).is_some() && hash_of(c) == hash_of(&desired.cluster));
    if !cluster_unchanged {
        writes.push(Write::ApplyCluster {
            name: desired.name.clone(),
            exists: live.cluster.is_some(),
        });
    }
    let cluster_uid = live.cluster.as_ref().and_then(uid_of);
    let runs = resolve_runs(live.operations.values(), desired);
    let desired_ops = decide_operations(live, desired, &runs, &mut writes);
    decide_config_maps(live, desired, &mut writes);
    release_config_maps(live, desired, cluster_uid.as_ref(), &mut writes);
    // Operations that left operations.yml, or their rollout; runs of a broken rollout file stay.
    for (name, op) in &live.operations {
        let kept = rollout_of(op).is_some_and(|r| desired.kept_rollouts.contains(&r.name));
        if desired_ops.contains(name) || kept || !has_label(op, LABEL_CURRENT) {
            continue;
        }
        writes.extend(retire_writes(op, now));
    }
    writes
}

/// Operations (the entries of operations.yml, then the cluster's `runs` of rollouts): created once,
/// never updated in spec; an existing one labelled current again when it lost the label, and a run of a
/// rollout labelled with its wave when that changed. Returns the names of the desired operations.
fn decide_operations(
    live: &Live,
    desired: &DesiredCluster,
    runs: &[ClusterOperation],
    writes: &mut Vec<Write>,
) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (op, is_run) in desired
        .operations
        .iter()
        .map(|o| (o, false))
        .chain(runs.iter().map(|o| (o, true)))
    {
        let name = op.name_any();
        match live.operations.get(&name) {
            Some(existing) => {
                if !has_label(existing, LABEL_CURRENT) {
                    writes.push(Write::LabelOperation {
                        name: name.clone(),
                        current: true,
                    });
                }
                if let Some(wave) = wave_of(op).filter(|w| wave_of(existing) != Some(*w)) {
                    writes.push(Write::LabelWave {
                        name: name.clone(),
                        wave: wave.to_string(),
                    });
                }
            }
            None => {
                writes.push(Write::CreateOperation {
                    name: name.clone(),
                    body: is_run.then(|| Box::new(op.clone())),
                });
            }
        }
        names.insert(name);
    }
    names
}

/// Current ConfigMaps: created once, without owners (kok deletes one nothing names, see
/// [`super::shared`]: an owner reference per run that pins it would be 20 references and their
/// managedFields in every inventory of a cluster with 20 runs kept); one that lost the current label gets
/// it back, its owners as they are (an earlier kok's).
fn decide_config_maps(live: &Live, desired: &DesiredCluster, writes: &mut Vec<Write>) {
    for cm in &desired.config_maps {
        let name = cm.name_any();
        let Some(existing) = live.config_maps.get(&name) else {
            writes.push(Write::CreateConfigMap { name });
            continue;
        };
        // Shared by the fleet: created once, never labelled current.
        if super::render::is_shared(cm) || has_label(existing, LABEL_CURRENT) {
            continue;
        }
        writes.push(Write::PatchConfigMap {
            name,
            resource_version: existing.resource_version(),
            owners: existing.owner_references().to_vec(),
            current: true,
        });
    }
}

/// ConfigMaps no longer current: the Cluster stops using them; unused ones are deleted.
fn release_config_maps(
    live: &Live,
    desired: &DesiredCluster,
    cluster_uid: Option<&String>,
    writes: &mut Vec<Write>,
) {
    let current: BTreeSet<String> = desired.config_maps.iter().map(|c| c.name_any()).collect();
    let pinned = pinned_config_maps(live);
    for (name, cm) in &live.config_maps {
        if current.contains(name) || !has_label(cm, LABEL_CURRENT) || super::render::is_shared(cm) {
            continue;
        }
        let owners: Vec<OwnerReference> = cm
            .owner_references()
            .iter()
            .filter(|r| Some(&r.uid) != cluster_uid)
            .cloned()
            .collect();
        if owners.is_empty() && !pinned.contains(name.as_str()) {
            writes.push(Write::DeleteConfigMap {
                name: name.clone(),
                resource_version: cm.resource_version(),
            });
        } else {
            writes.push(Write::PatchConfigMap {
                name: name.clone(),
                resource_version: cm.resource_version(),
                owners,
                current: false,
            });
        }
    }
}

/// Names of the ConfigMaps some live operation pins.
fn pinned_config_maps(live: &Live) -> BTreeSet<&str> {
    live.operations
        .values()
        .flat_map(|o| o.spec.pinned_config_maps())
        .collect()
}

/// The writes that retire an operation that left operations.yml: cancel it if it has not started,
/// and drop its current label.
fn retire_writes(op: &ClusterOperation, now: Timestamp) -> Vec<Write> {
    let name = op.name_any();
    let mut writes = Vec::new();
    let phase = op.status.as_ref().map(|s| s.phase).unwrap_or_default();
    if matches!(phase, Phase::Pending | Phase::Queued) {
        let message = match rollout_of(op) {
            Some(r) => format!("no longer a run of rollout {}", r.name),
            None => CANCELED_MESSAGE.to_string(),
        };
        writes.push(Write::CancelOperation {
            name: name.clone(),
            patch: cancel_patch(op, &message, now),
            reference: op.object_ref(&()),
        });
    }
    writes.push(Write::LabelOperation { name, current: false });
    writes
}

/// The writes that remove a cluster whose directory is gone: its operations retired, its ConfigMaps
/// that no operation pins or uses deleted, and the Cluster deleted.
pub fn decide_removal(live: &Live, cluster: &str, now: Timestamp) -> Vec<Write> {
    let mut writes = Vec::new();
    for op in live.operations.values() {
        if has_label(op, LABEL_CURRENT) {
            writes.extend(retire_writes(op, now));
        }
    }
    let cluster_uid = live.cluster.as_ref().and_then(uid_of);
    let pinned = pinned_config_maps(live);
    for (name, cm) in live
        .config_maps
        .iter()
        .filter(|(_, cm)| !super::render::is_shared(cm))
    {
        let used = cm
            .owner_references()
            .iter()
            .any(|r| Some(&r.uid) != cluster_uid.as_ref());
        if !used && !pinned.contains(name.as_str()) {
            writes.push(Write::DeleteConfigMap {
                name: name.clone(),
                resource_version: cm.resource_version(),
            });
        }
    }
    if live.cluster.is_some() {
        writes.push(Write::DeleteCluster {
            name: cluster.to_string(),
        });
    }
    writes
}

/// Applies one desired cluster: Cluster, ConfigMaps and ClusterOperations, and cancels the operations of
/// this cluster that left operations.yml before they started. Writes nothing when everything matches.
pub async fn apply_cluster(
    client: &Client,
    namespace: &str,
    desired: &DesiredCluster,
) -> Result<ApplyStats, ApplyError> {
    Ok(apply_cluster_from(client, namespace, desired, None, false)
        .await?
        .stats)
}

/// What applying or removing one cluster did, and what its writes left behind.
#[derive(Clone, Debug, Default)]
pub struct Applied {
    /// The counts.
    pub stats: ApplyStats,
    /// The objects written, with the resourceVersion each write returned (`None`: deleted).
    pub written: Vec<Written>,
}

/// An object a write left behind: a watch cache that shows it at this resourceVersion (or later, or
/// gone when deleted) has seen the write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// `Cluster`, `ConfigMap` or `ClusterOperation`.
    pub kind: &'static str,
    /// Its name.
    pub name: String,
    /// Its resourceVersion after the write; `None` when it was deleted.
    pub resource_version: Option<String>,
}

/// How many times a cluster's writes are decided again after a conflict (something changed the
/// objects since they were read).
const CONFLICT_RETRIES: usize = 3;

/// Applies one desired cluster, deciding from `live` (a watch cache's view) when given, else from
/// three lists. A conflict means the view was stale: the objects are listed afresh and the rest of the
/// writes decided again.
///
/// With `keep_revision` (a periodic resync of a cluster whose directory did not change) the Cluster
/// keeps the revision it has, so an unchanged cluster is not rewritten.
pub async fn apply_cluster_from(
    client: &Client,
    namespace: &str,
    desired: &DesiredCluster,
    live: Option<Live>,
    keep_revision: bool,
) -> Result<Applied, ApplyError> {
    let apis = Apis::new(client, namespace);
    let live = match live {
        Some(live) => live,
        None => {
            let mut live = apis.live(&desired.name).await?;
            read_shared(client, namespace, desired, &mut live).await?;
            live
        }
    };
    let kept;
    let desired = match (&live.cluster, keep_revision) {
        (Some(c), true) => {
            kept = super::render::with_revision(desired, &c.spec.source.revision);
            &kept
        }
        _ => desired,
    };
    let applied = with_retries(&apis, &desired.name, Some(live), |live| {
        let writes = decide_cluster(live, desired, Timestamp::now());
        (writes, Some(desired))
    })
    .await?;
    debug!(cluster = %desired.name, stats = ?applied.stats, "cluster reconciled");
    Ok(applied)
}

/// Decides and makes writes from `live` (or three lists), listing afresh and deciding again after
/// each conflict, at most [`CONFLICT_RETRIES`] times.
async fn with_retries<'d>(
    apis: &Apis,
    cluster: &str,
    live: Option<Live>,
    decide: impl Fn(&Live) -> (Vec<Write>, Option<&'d DesiredCluster>),
) -> Result<Applied, ApplyError> {
    let mut live = match live {
        Some(live) => live,
        None => apis.live(cluster).await?,
    };
    let mut applied = Applied::default();
    let mut attempt = 0;
    loop {
        let (writes, desired) = decide(&live);
        match make_writes(apis, desired, &writes, &mut applied).await {
            Ok(()) => return Ok(applied),
            Err(e) if attempt < CONFLICT_RETRIES && e.is_conflict() => {
                attempt += 1;
                debug!(%cluster, error = %e, "live objects changed meanwhile; reading them again");
                let shared: Vec<(String, ConfigMap)> =
                    live.shared().map(|(n, cm)| (n.clone(), cm.clone())).collect();
                live = apis.live(cluster).await?;
                live.config_maps.extend(shared);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Makes `writes` in order, counting them and noting what they left behind in `applied`. `desired`
/// holds the bodies of the objects created or applied.
async fn make_writes(
    apis: &Apis,
    desired: Option<&DesiredCluster>,
    writes: &[Write],
    applied: &mut Applied,
) -> Result<(), ApplyError> {
    let mut writer = Writer {
        apis,
        desired,
        applied,
        gone: BTreeSet::new(),
    };
    for write in writes {
        if writer.make(write).await? {
            writer.applied.stats.writes += 1;
        }
    }
    Ok(())
}

/// The state of one run of [`make_writes`]: the operations found gone.
struct Writer<'a> {
    apis: &'a Apis,
    desired: Option<&'a DesiredCluster>,
    applied: &'a mut Applied,
    gone: BTreeSet<String>,
}

impl Writer<'_> {
    /// Makes one write; false when it was skipped (nothing to write, or its object is gone).
    async fn make(&mut self, write: &Write) -> Result<bool, ApplyError> {
        match write {
            Write::ApplyCluster { name, exists } => self.apply_cluster(name, *exists).await,
            Write::CreateOperation { name, body } => self.create_operation(name, body.as_deref()).await,
            Write::LabelOperation { name, current } => self.label_operation(name, *current).await,
            Write::LabelWave { name, wave } => {
                let patch = json!({"metadata": {"labels": {LABEL_WAVE: wave}}});
                let op = self
                    .apis
                    .operations
                    .patch(name, &crate::api::kok_params(), &Patch::Merge(&patch))
                    .await
                    .map_err(self.apis.op_err(name))?;
                self.applied.written.push(Written::of("ClusterOperation", &op));
                self.applied.stats.updated += 1;
                Ok(true)
            }
            Write::CancelOperation {
                name,
                patch,
                reference,
            } => self.cancel_operation(name, patch, reference).await,
            Write::CreateConfigMap { name } => self.create_config_map(name).await,
            Write::PatchConfigMap {
                name,
                resource_version,
                owners,
                current,
            } => {
                self.patch_config_map(name, resource_version, owners, *current)
                    .await
            }
            Write::DeleteConfigMap {
                name,
                resource_version,
            } => {
                delete_config_map(self.apis, name, resource_version.clone()).await?;
                self.applied.written.push(Written::gone("ConfigMap", name));
                self.applied.stats.deleted += 1;
                Ok(true)
            }
            Write::DeleteCluster { name } => self.delete_cluster(name).await,
        }
    }

    async fn apply_cluster(&mut self, name: &str, exists: bool) -> Result<bool, ApplyError> {
        let Some(desired) = self.desired else {
            return Ok(false);
        };
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        let applied = self
            .apis
            .clusters
            .patch(name, &pp, &Patch::Apply(&desired.cluster))
            .await
            .map_err(|source| ApplyError::ApplyCluster {
                name: name.to_string(),
                namespace: self.apis.namespace.clone(),
                source: Box::new(source),
            })?;
        self.applied.written.push(Written::of("Cluster", &applied));
        if exists {
            self.applied.stats.updated += 1;
        } else {
            self.applied.stats.created += 1;
        }
        info!(cluster = %name, revision = %desired.cluster.spec.source.revision, "cluster applied");
        Ok(true)
    }

    async fn create_operation(
        &mut self,
        name: &str,
        body: Option<&ClusterOperation>,
    ) -> Result<bool, ApplyError> {
        let apis = self.apis;
        let found = || {
            self.desired
                .and_then(|d| d.operations.iter().find(|o| o.name_any() == name))
        };
        let Some(op) = body.or_else(found) else {
            return Ok(false);
        };
        let mut obj = op.clone();
        obj.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(LABEL_CURRENT.into(), "true".into());
        obj.status = None;
        // Server-side apply creates it with kok's field manager. It exists when the view was stale: then the
        // API server keeps it as it is (same fields) or refuses the edit of its immutable spec (another
        // pre-flight, say), and the run found is the one that stays.
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        // Of the answer only the name and resourceVersion are read (not the run's managed fields).
        let answered = patch_answered(
            &apis.client,
            &apis.operations,
            name,
            false,
            &pp,
            &Patch::Apply(&obj),
        )
        .await;
        let created = match answered {
            Ok(answer) => Written::answered("ClusterOperation", name, answer),
            Err(e) if is_conflict(&e) || is_invalid(&e) => {
                let found = apis.operations.get(name).await.map_err(apis.op_err(name))?;
                Written::of("ClusterOperation", &found)
            }
            Err(e) => return Err(apis.op_err(name)(e)),
        };
        self.applied.written.push(created);
        self.applied.stats.created += 1;
        info!(operation = %name, "operation created");
        Ok(true)
    }

    async fn label_operation(&mut self, name: &str, current: bool) -> Result<bool, ApplyError> {
        if self.gone.contains(name) {
            return Ok(false);
        }
        match set_current_label(self.apis, name, current).await {
            Ok(op) => self.applied.written.push(Written::of("ClusterOperation", &op)),
            Err(ApplyError::WriteOperation { source, .. }) if !current && is_not_found(&source) => {
                return Ok(false)
            }
            Err(e) => return Err(e),
        }
        self.applied.stats.updated += 1;
        Ok(true)
    }

    async fn cancel_operation(
        &mut self,
        name: &str,
        patch: &serde_json::Value,
        reference: &k8s_openapi::api::core::v1::ObjectReference,
    ) -> Result<bool, ApplyError> {
        let apis = self.apis;
        match apis
            .operations
            .patch_status(name, &crate::api::kok_params(), &Patch::Merge(patch))
            .await
        {
            Ok(op) => {
                let message = patch["status"]["message"].as_str().unwrap_or_default();
                self.applied.stats.canceled += 1;
                self.applied.written.push(Written::of("ClusterOperation", &op));
                info!(operation = %name, "operation canceled: {message}");
                publish_canceled(&apis.client, name, message, reference).await;
                Ok(true)
            }
            // Gone meanwhile: its label is not dropped either. A conflict (started meanwhile, perhaps) is
            // decided again from what it is now.
            Err(e) if is_not_found(&e) => {
                self.gone.insert(name.to_string());
                Ok(false)
            }
            Err(e) => Err(apis.op_err(name)(e)),
        }
    }

    async fn create_config_map(&mut self, name: &str) -> Result<bool, ApplyError> {
        let apis = self.apis;
        let Some(cm) = self
            .desired
            .and_then(|d| d.config_maps.iter().find(|c| c.name_any() == name))
        else {
            return Ok(false);
        };
        // Compressed here, when it is created, not when its cluster is rendered.
        let mut obj = super::render::written_config_map(cm).into_owned();
        if !super::render::is_shared(cm) {
            obj.metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .insert(LABEL_CURRENT.into(), "true".into());
        }
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        match apis.config_maps.patch(name, &pp, &Patch::Apply(&obj)).await {
            Ok(cm) => self.applied.written.push(Written::of("ConfigMap", &cm)),
            // Created concurrently: the next apply labels it current if it is not.
            Err(e) if is_conflict(&e) => {}
            Err(e) => return Err(apis.cm_err(name)(e)),
        }
        self.applied.stats.created += 1;
        Ok(true)
    }

    async fn patch_config_map(
        &mut self,
        name: &str,
        resource_version: &Option<String>,
        owners: &[OwnerReference],
        current: bool,
    ) -> Result<bool, ApplyError> {
        let patch = json!({
            "metadata": {
                "resourceVersion": resource_version,
                "ownerReferences": owners,
                "labels": {LABEL_CURRENT: current.then_some("true")},
            }
        });
        let cm = self
            .apis
            .config_maps
            .patch(name, &crate::api::kok_params(), &Patch::Merge(&patch))
            .await
            .map_err(self.apis.cm_err(name))?;
        self.applied.written.push(Written::of("ConfigMap", &cm));
        self.applied.stats.updated += 1;
        Ok(true)
    }

    async fn delete_cluster(&mut self, name: &str) -> Result<bool, ApplyError> {
        match self.apis.clusters.delete(name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(source) => {
                return Err(ApplyError::Delete {
                    kind: "Cluster",
                    name: name.to_string(),
                    namespace: self.apis.namespace.clone(),
                    source: Box::new(source),
                })
            }
        }
        self.applied.written.push(Written::gone("Cluster", name));
        self.applied.stats.deleted += 1;
        info!(cluster = %name, "cluster removed");
        Ok(true)
    }
}

impl Written {
    fn of<K: Resource>(kind: &'static str, obj: &K) -> Self {
        Written {
            kind,
            name: obj.meta().name.clone().unwrap_or_default(),
            resource_version: obj.meta().resource_version.clone(),
        }
    }

    /// The object as an API server answered its write; `name` when the answer has none.
    fn answered(kind: &'static str, name: &str, answer: crate::api::watched::Written) -> Self {
        Written {
            kind,
            name: answer.metadata.name.unwrap_or_else(|| name.to_string()),
            resource_version: answer.metadata.resource_version,
        }
    }

    fn gone(kind: &'static str, name: &str) -> Self {
        Written {
            kind,
            name: name.to_string(),
            resource_version: None,
        }
    }
}

impl ApplyError {
    /// True when the API server refused a write because the object changed since it was read.
    pub fn is_conflict(&self) -> bool {
        match self {
            ApplyError::ApplyCluster { source, .. }
            | ApplyError::WriteConfigMap { source, .. }
            | ApplyError::WriteOperation { source, .. }
            | ApplyError::WriteRollout { source, .. }
            | ApplyError::Delete { source, .. } => is_conflict(source),
            ApplyError::List { .. } => false,
        }
    }
}

async fn set_current_label(apis: &Apis, name: &str, current: bool) -> Result<ClusterOperation, ApplyError> {
    let value = if current {
        json!("true")
    } else {
        serde_json::Value::Null
    };
    let patch = json!({"metadata": {"labels": {LABEL_CURRENT: value}}});
    apis.operations
        .patch(name, &crate::api::kok_params(), &Patch::Merge(&patch))
        .await
        .map_err(apis.op_err(name))
}

async fn delete_config_map(
    apis: &Apis,
    name: &str,
    resource_version: Option<String>,
) -> Result<(), ApplyError> {
    let mut params = DeleteParams::background();
    if resource_version.is_some() {
        params = params.preconditions(kube::api::Preconditions {
            resource_version,
            uid: None,
        });
    }
    match apis.config_maps.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(source) => Err(ApplyError::Delete {
            kind: "ConfigMap",
            name: name.to_string(),
            namespace: apis.namespace.clone(),
            source: Box::new(source),
        }),
    }
}

/// The status patch that cancels `op` with `message`: phase, message, end time and the commit status it
/// should show (`canceled: <message>` on its run's context, as the reporter maps a Canceled phase), guarded
/// by the resourceVersion it was read at so that a concurrent start wins.
pub fn cancel_patch(op: &ClusterOperation, message: &str, now: Timestamp) -> serde_json::Value {
    let desired = CommitStatus {
        context: run_context(&op.spec.cluster, &op.spec.id, op.spec.scheduled_time.as_deref()),
        state: StatusState::Failure,
        description: format!("canceled: {message}"),
        target_url: None,
        run: Some(RunRecord {
            operation: Some(OperationRecord::of(op, Phase::Canceled, Some(message))),
            ..RunRecord::default()
        }),
    };
    json!({
        "metadata": {"resourceVersion": op.resource_version()},
        "status": {
            "phase": Phase::Canceled,
            "message": message,
            "endTime": Time(now),
            "desiredStatus": desired,
        }
    })
}

async fn publish_canceled(
    client: &Client,
    name: &str,
    message: &str,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
) {
    let recorder = crate::events::Publisher::new(client);
    let ev = Event {
        type_: EventType::Normal,
        reason: "Canceled".into(),
        note: Some(format!("canceled: {message}")),
        action: "Cancel".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&ev, reference).await {
        warn!(operation = %name, error = %e, "event not published");
    }
}

/// Removes a cluster whose directory is gone: cancels its operations that have not started, drops the
/// current label of the others (they stay, running ones finish), deletes its ConfigMaps that no operation
/// pins, and deletes the Cluster.
pub async fn remove_cluster(
    client: &Client,
    namespace: &str,
    cluster: &str,
) -> Result<ApplyStats, ApplyError> {
    Ok(remove_cluster_from(client, namespace, cluster, None).await?.stats)
}

/// Removes a cluster, deciding from `live` (a watch cache's view) when given, else from three lists;
/// conflicts are handled as in [`apply_cluster_from`].
pub async fn remove_cluster_from(
    client: &Client,
    namespace: &str,
    cluster: &str,
    live: Option<Live>,
) -> Result<Applied, ApplyError> {
    let apis = Apis::new(client, namespace);
    with_retries(&apis, cluster, live, |live| {
        (decide_removal(live, cluster, Timestamp::now()), None)
    })
    .await
}
