//! Writing desired clusters into the meta-cluster, and pruning what is no longer desired.
//!
//! Each call reads only the objects of the cluster it handles (one list per kind, by label), so the cost
//! follows the change, not the repository. What is written, and how:
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
//! An unchanged cluster therefore costs three reads and no write.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tracing::{debug, info, warn};

use super::DesiredCluster;
use crate::api::{
    Cluster, ClusterOperation, Phase, ANNOTATION_CONTENT_HASH, FIELD_MANAGER, LABEL_CLUSTER, LABEL_CURRENT,
    LABEL_MANAGED_BY, MANAGED_BY,
};
use crate::report::status::operation_status;

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
    /// Objects already as desired.
    pub unchanged: usize,
}

impl std::ops::AddAssign for ApplyStats {
    fn add_assign(&mut self, o: Self) {
        self.writes += o.writes;
        self.created += o.created;
        self.updated += o.updated;
        self.deleted += o.deleted;
        self.canceled += o.canceled;
        self.unchanged += o.unchanged;
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
    /// An object read back from the API server had no uid.
    #[error("{kind} {name} in namespace {namespace} has no uid; is the API server a real one?")]
    NoUid {
        /// Kind of the object.
        kind: &'static str,
        /// Its name.
        name: String,
        /// Namespace.
        namespace: String,
    },
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
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

/// The live objects of one cluster, read with one list per kind.
struct Live {
    cluster: Option<Cluster>,
    config_maps: BTreeMap<String, ConfigMap>,
    operations: BTreeMap<String, ClusterOperation>,
}

/// The three API handles of a namespace.
struct Apis {
    namespace: String,
    clusters: Api<Cluster>,
    config_maps: Api<ConfigMap>,
    operations: Api<ClusterOperation>,
}

impl Apis {
    fn new(client: &Client, namespace: &str) -> Self {
        Apis {
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

    fn uid<K: Resource>(&self, obj: &K, kind: &'static str) -> Result<String, ApplyError> {
        obj.meta().uid.clone().ok_or_else(|| ApplyError::NoUid {
            kind,
            name: obj.meta().name.clone().unwrap_or_default(),
            namespace: self.namespace.clone(),
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

/// A non-controller owner reference, as ConfigMaps carry for the objects that use them.
fn usage_ref<K: Resource<DynamicType = ()>>(obj: &K, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).to_string(),
        kind: K::kind(&()).to_string(),
        name: obj.meta().name.clone().unwrap_or_default(),
        uid: uid.to_string(),
        ..OwnerReference::default()
    }
}

/// Applies one desired cluster: Cluster, ConfigMaps and ClusterOperations, and cancels the operations of
/// this cluster that left operations.yml before they started. Writes nothing when everything matches.
pub async fn apply_cluster(
    client: &Client,
    namespace: &str,
    desired: &DesiredCluster,
) -> Result<ApplyStats, ApplyError> {
    let apis = Apis::new(client, namespace);
    let live = apis.live(&desired.name).await?;
    let mut stats = ApplyStats::default();

    // The Cluster first: ConfigMaps need its uid as their owner.
    let cluster_uid = match &live.cluster {
        Some(c) if hash_of(c).is_some() && hash_of(c) == hash_of(&desired.cluster) => {
            stats.unchanged += 1;
            apis.uid(c, "Cluster")?
        }
        _ => {
            let pp = PatchParams::apply(FIELD_MANAGER).force();
            let applied = apis
                .clusters
                .patch(&desired.name, &pp, &Patch::Apply(&desired.cluster))
                .await
                .map_err(|source| ApplyError::ApplyCluster {
                    name: desired.name.clone(),
                    namespace: namespace.to_string(),
                    source: Box::new(source),
                })?;
            stats.writes += 1;
            if live.cluster.is_some() {
                stats.updated += 1;
            } else {
                stats.created += 1;
            }
            info!(cluster = %desired.name, revision = %desired.cluster.spec.source.revision, "cluster applied");
            apis.uid(&applied, "Cluster")?
        }
    };

    // Operations: created once, never updated in spec; uids collected for ConfigMap ownership.
    let mut op_uids: BTreeMap<String, (String, &ClusterOperation)> = BTreeMap::new();
    let desired_ops: BTreeSet<String> = desired.operations.iter().map(|o| o.name_any()).collect();
    for op in &desired.operations {
        let name = op.name_any();
        match live.operations.get(&name) {
            Some(existing) => {
                if !has_label(existing, LABEL_CURRENT) {
                    set_current_label(&apis, &name, true).await?;
                    stats.writes += 1;
                    stats.updated += 1;
                } else {
                    stats.unchanged += 1;
                }
                op_uids.insert(name, (apis.uid(existing, "ClusterOperation")?, op));
            }
            None => {
                let mut obj = op.clone();
                obj.metadata
                    .labels
                    .get_or_insert_with(BTreeMap::new)
                    .insert(LABEL_CURRENT.into(), "true".into());
                obj.status = None;
                let created = match apis.operations.create(&PostParams::default(), &obj).await {
                    Ok(o) => o,
                    Err(e) if is_conflict(&e) => {
                        apis.operations.get(&name).await.map_err(apis.op_err(&name))?
                    }
                    Err(e) => return Err(apis.op_err(&name)(e)),
                };
                stats.writes += 1;
                stats.created += 1;
                info!(cluster = %desired.name, operation = %name, "operation created");
                op_uids.insert(name, (apis.uid(&created, "ClusterOperation")?, op));
            }
        }
    }

    // Current ConfigMaps: created once with their users as owners; missing owners added.
    let current: BTreeSet<String> = desired.config_maps.iter().map(|c| c.name_any()).collect();
    for cm in &desired.config_maps {
        let name = cm.name_any();
        let mut wanted = vec![usage_ref(&desired.cluster, &cluster_uid)];
        for (uid, op) in op_uids.values() {
            if op.spec.hosts_conf_ref.name == name || op.spec.vars_conf_ref.name == name {
                wanted.push(usage_ref(*op, uid));
            }
        }
        match live.config_maps.get(&name) {
            None => {
                let mut obj = cm.clone();
                obj.metadata
                    .labels
                    .get_or_insert_with(BTreeMap::new)
                    .insert(LABEL_CURRENT.into(), "true".into());
                obj.metadata.owner_references = Some(wanted);
                match apis.config_maps.create(&PostParams::default(), &obj).await {
                    Ok(_) => {}
                    // Created concurrently: the next apply adds whatever owner is missing.
                    Err(e) if is_conflict(&e) => {}
                    Err(e) => return Err(apis.cm_err(&name)(e)),
                }
                stats.writes += 1;
                stats.created += 1;
            }
            Some(existing) => {
                let have: BTreeSet<&str> = existing
                    .owner_references()
                    .iter()
                    .map(|r| r.uid.as_str())
                    .collect();
                let missing: Vec<OwnerReference> = wanted
                    .into_iter()
                    .filter(|r| !have.contains(r.uid.as_str()))
                    .collect();
                if missing.is_empty() && has_label(existing, LABEL_CURRENT) {
                    stats.unchanged += 1;
                    continue;
                }
                let mut owners = existing.owner_references().to_vec();
                owners.extend(missing);
                patch_config_map_meta(&apis, existing, &owners, Some("true")).await?;
                stats.writes += 1;
                stats.updated += 1;
            }
        }
    }

    // ConfigMaps no longer current: the Cluster stops using them; unused ones are deleted.
    let pinned: BTreeSet<&str> = live
        .operations
        .values()
        .flat_map(|o| {
            [
                o.spec.hosts_conf_ref.name.as_str(),
                o.spec.vars_conf_ref.name.as_str(),
            ]
        })
        .collect();
    for (name, cm) in &live.config_maps {
        if current.contains(name) || !has_label(cm, LABEL_CURRENT) {
            continue;
        }
        let owners: Vec<OwnerReference> = cm
            .owner_references()
            .iter()
            .filter(|r| r.uid != cluster_uid)
            .cloned()
            .collect();
        if owners.is_empty() && !pinned.contains(name.as_str()) {
            delete_config_map(&apis, name).await?;
            stats.deleted += 1;
        } else {
            patch_config_map_meta(&apis, cm, &owners, None).await?;
            stats.updated += 1;
        }
        stats.writes += 1;
    }

    // Operations that left operations.yml.
    for (name, op) in &live.operations {
        if desired_ops.contains(name) || !has_label(op, LABEL_CURRENT) {
            continue;
        }
        stats += retire_operation(client, &apis, op).await?;
    }
    debug!(cluster = %desired.name, ?stats, "cluster reconciled");
    Ok(stats)
}

async fn set_current_label(apis: &Apis, name: &str, current: bool) -> Result<(), ApplyError> {
    let value = if current {
        json!("true")
    } else {
        serde_json::Value::Null
    };
    let patch = json!({"metadata": {"labels": {LABEL_CURRENT: value}}});
    apis.operations
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(apis.op_err(name))?;
    Ok(())
}

/// Sets a ConfigMap's owner references and current label, guarded by its resourceVersion.
async fn patch_config_map_meta(
    apis: &Apis,
    cm: &ConfigMap,
    owners: &[OwnerReference],
    current: Option<&str>,
) -> Result<(), ApplyError> {
    let name = cm.name_any();
    let patch = json!({
        "metadata": {
            "resourceVersion": cm.resource_version(),
            "ownerReferences": owners,
            "labels": {LABEL_CURRENT: current},
        }
    });
    apis.config_maps
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(apis.cm_err(&name))?;
    Ok(())
}

async fn delete_config_map(apis: &Apis, name: &str) -> Result<(), ApplyError> {
    match apis.config_maps.delete(name, &DeleteParams::background()).await {
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

/// The status patch that cancels `op`: phase, message, end time and the desired commit status, guarded by
/// the resourceVersion it was read at so that a concurrent start wins.
pub fn cancel_patch(op: &ClusterOperation, now: Timestamp) -> serde_json::Value {
    let desired = operation_status(
        op,
        Phase::Canceled,
        Some(CANCELED_MESSAGE),
        None,
        &op.namespace().unwrap_or_default(),
    );
    json!({
        "metadata": {"resourceVersion": op.resource_version()},
        "status": {
            "phase": Phase::Canceled,
            "message": CANCELED_MESSAGE,
            "endTime": Time(now),
            "desiredStatus": desired,
        }
    })
}

/// An operation left operations.yml: cancel it if it has not started, and drop its current label.
async fn retire_operation(
    client: &Client,
    apis: &Apis,
    op: &ClusterOperation,
) -> Result<ApplyStats, ApplyError> {
    let name = op.name_any();
    let mut stats = ApplyStats::default();
    let phase = op.status.as_ref().map(|s| s.phase).unwrap_or_default();
    if matches!(phase, Phase::Pending | Phase::Queued) {
        let patch = cancel_patch(op, Timestamp::now());
        match apis
            .operations
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                stats.canceled += 1;
                info!(operation = %name, "operation canceled: {CANCELED_MESSAGE}");
                publish_canceled(client, op).await;
            }
            // Started or changed meanwhile: it is history now, not something to cancel.
            Err(e) if is_conflict(&e) => {
                warn!(operation = %name, "not canceled: it changed while being canceled")
            }
            Err(e) if is_not_found(&e) => return Ok(stats),
            Err(e) => return Err(apis.op_err(&name)(e)),
        }
        stats.writes += 1;
    }
    match set_current_label(apis, &name, false).await {
        Ok(()) => {}
        Err(ApplyError::WriteOperation { source, .. }) if is_not_found(&source) => return Ok(stats),
        Err(e) => return Err(e),
    }
    stats.writes += 1;
    stats.updated += 1;
    Ok(stats)
}

/// The reporter of Events kok publishes.
pub fn reporter() -> Reporter {
    Reporter {
        controller: FIELD_MANAGER.to_string(),
        instance: std::env::var("HOSTNAME").ok(),
    }
}

async fn publish_canceled(client: &Client, op: &ClusterOperation) {
    let recorder = Recorder::new(client.clone(), reporter());
    let ev = Event {
        type_: EventType::Normal,
        reason: "Canceled".into(),
        note: Some(format!("canceled: {CANCELED_MESSAGE}")),
        action: "Cancel".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&ev, &op.object_ref(&())).await {
        warn!(operation = %op.name_any(), error = %e, "event not published");
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
    let apis = Apis::new(client, namespace);
    let live = apis.live(cluster).await?;
    let mut stats = ApplyStats::default();
    for op in live.operations.values() {
        if has_label(op, LABEL_CURRENT) {
            stats += retire_operation(client, &apis, op).await?;
        }
    }
    let cluster_uid = live.cluster.as_ref().and_then(|c| c.uid());
    for (name, cm) in &live.config_maps {
        let users: Vec<OwnerReference> = cm
            .owner_references()
            .iter()
            .filter(|r| Some(&r.uid) != cluster_uid.as_ref())
            .cloned()
            .collect();
        let pinned = live
            .operations
            .values()
            .any(|o| o.spec.hosts_conf_ref.name == *name || o.spec.vars_conf_ref.name == *name);
        if users.is_empty() && !pinned {
            delete_config_map(&apis, name).await?;
            stats.deleted += 1;
            stats.writes += 1;
        }
    }
    if live.cluster.is_some() {
        match apis.clusters.delete(cluster, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(source) => {
                return Err(ApplyError::Delete {
                    kind: "Cluster",
                    name: cluster.to_string(),
                    namespace: namespace.to_string(),
                    source: Box::new(source),
                })
            }
        }
        stats.deleted += 1;
        stats.writes += 1;
        info!(%cluster, "cluster removed");
    }
    Ok(stats)
}

/// Prunes after a full resync: every live Cluster kok manages whose name is not in `desired` is removed
/// with [`remove_cluster`]. Clusters that failed validation must be in `desired` (their last good state stays).
pub async fn prune(
    client: &Client,
    namespace: &str,
    desired: &BTreeSet<String>,
) -> Result<ApplyStats, ApplyError> {
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), namespace);
    let lp = ListParams::default().labels(&crate::api::managed_selector());
    let live = clusters.list(&lp).await.map_err(|source| ApplyError::List {
        kind: "Cluster",
        cluster: "*".to_string(),
        namespace: namespace.to_string(),
        source: Box::new(source),
    })?;
    let mut stats = ApplyStats::default();
    for c in live.items {
        let name = c.name_any();
        if !desired.contains(&name) {
            stats += remove_cluster(client, namespace, &name).await?;
        }
    }
    Ok(stats)
}
