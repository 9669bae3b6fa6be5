//! The ConfigMaps the whole fleet shares, and who keeps them: one file's content, stored once however many
//! clusters and runs pin it, deleted only when nothing names it.
//!
//! A file of group_vars/, host_vars/ or the repository is pinned in ConfigMap `kok-file-<sha20>` (its name
//! is its content's address: the first 80 bits of sha256), labelled `kok.dev/shared: "true"` and
//! `kok.dev/content: file`, with no `kok.dev/cluster` label. A kubespray fleet made from one sample shares
//! most of its 86 KB of variables word for word, so 10,000 clusters keep one copy, not 10,000.
//!
//! Owner references cannot keep such an object: every Cluster and every run of every cluster pins it, and
//! 200,000 owner references would not fit in one object (etcd takes at most 1.5 MiB). So kok collects them
//! itself, mark and sweep: a shared ConfigMap is deleted when no Cluster and no ClusterOperation names it
//! (in `spec.varsFiles` or `spec.repositoryFiles`, or through the file list `spec.varsFilesRef` names,
//! itself a shared ConfigMap `kok-files-<sha20>`) and it is older than [`SHARED_GRACE`] (a pass creates a
//! ConfigMap before the runs that pin it, and the watches show those a moment later), guarded by the
//! resourceVersion it was decided at. A queued run keeps its inputs whatever happens to the clusters that
//! shared them: it names them until it is deleted itself (by the history limit, or with its namespace).
//! The service sweeps after a pass, at most once every [`SWEEP_EVERY`], from its watch caches; without
//! caches, [`sweep_listing`] lists.
//!
//! A cluster's own inputs (its inventory, its vars.yml) are kept the same way: created without owner
//! references (one per run that pins them would be 20 references, and their managedFields, in every
//! inventory of a cluster with 20 runs kept), deleted by the pass that stops using them when no run
//! pins them, and otherwise by the sweep once nothing names them. Those an earlier kok created with
//! owner references are left to the garbage collector.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Preconditions};
use kube::{Client, ResourceExt};
use tracing::info;

use super::apply::ApplyError;
use crate::api::{
    Cluster, ClusterOperation, PinnedInventory, LABEL_CONTENT, LABEL_MANAGED_BY, LABEL_SHARED, MANAGED_BY,
};

/// How old an unnamed shared ConfigMap must be before it is deleted (10 minutes).
pub const SHARED_GRACE: Duration = Duration::from_secs(600);
/// How often the service looks for shared ConfigMaps nothing names (at most, after a pass).
pub const SWEEP_EVERY: Duration = Duration::from_secs(300);

/// Selector of the ConfigMaps the fleet shares.
pub fn shared_selector() -> String {
    format!("{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_SHARED}=true")
}

/// One shared ConfigMap as the sweep sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedConfigMap {
    /// Its name.
    pub name: String,
    /// Its resourceVersion.
    pub resource_version: Option<String>,
    /// When it was created, in seconds since the epoch.
    pub created: Option<i64>,
    /// For a file list (`kok-files-<sha20>`, named by `varsFilesRef`): the file ConfigMaps it names.
    pub lists: Vec<String>,
}

/// The shared ConfigMaps to delete: those nothing names, created at least `grace` before `now` (seconds
/// since the epoch); one without a creation time is kept. Named are those in `named` and the files a file
/// list that stays names (a list that goes leaves its files to the next sweep's decision).
pub fn decide_sweep<'a>(
    shared: &'a [SharedConfigMap],
    named: &HashSet<String>,
    now: i64,
    grace: Duration,
) -> Vec<&'a SharedConfigMap> {
    let grace = i64::try_from(grace.as_secs()).unwrap_or(i64::MAX);
    let unnamed = |cm: &SharedConfigMap, named: &HashSet<String>| {
        !named.contains(&cm.name) && cm.created.is_some_and(|t| now.saturating_sub(t) >= grace)
    };
    let mut named = named.clone();
    for list in shared.iter().filter(|cm| !cm.lists.is_empty()) {
        if !unnamed(list, &named) {
            named.extend(list.lists.iter().cloned());
        }
    }
    shared.iter().filter(|cm| unnamed(cm, &named)).collect()
}

/// True for a ConfigMap kept only while a Cluster or ClusterOperation names it: one the fleet shares, or
/// a cluster's inventory or vars.yml without owner references (an earlier kok made the runs pinning it
/// its owners; the garbage collector deletes those once the runs are gone).
pub fn is_collectable(meta: &kube::api::ObjectMeta) -> bool {
    let label = |key: &str| meta.labels.as_ref().and_then(|l| l.get(key));
    label(LABEL_SHARED).is_some_and(|v| v == "true")
        || (label(LABEL_CONTENT).is_some() && meta.owner_references.as_ref().is_none_or(Vec::is_empty))
}

/// Adds the ConfigMaps `pinned` names to `named`.
pub fn add_named(named: &mut HashSet<String>, pinned: &dyn PinnedInventory) {
    let refs = [
        Some(pinned.hosts_ref()),
        pinned.vars_ref(),
        pinned.vars_files_ref(),
    ];
    for r in refs.into_iter().flatten() {
        if !named.contains(&r.name) {
            named.insert(r.name.clone());
        }
    }
    for f in pinned.vars_files().iter().chain(pinned.repository_files()) {
        if !named.contains(&f.config_map) {
            named.insert(f.config_map.clone());
        }
    }
}

/// The file ConfigMaps the file list `cm` names (none when it is no list).
pub fn listed_names(cm: &ConfigMap) -> Vec<String> {
    crate::api::file_list(cm)
        .unwrap_or_default()
        .into_iter()
        .map(|f| f.config_map)
        .collect()
}

/// Deletes `doomed`, each guarded by its resourceVersion (one that changed or went meanwhile stays, or is
/// gone already); returns how many were deleted.
pub async fn delete_shared(
    client: &Client,
    namespace: &str,
    doomed: &[&SharedConfigMap],
) -> Result<usize, ApplyError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let mut deleted = 0;
    for cm in doomed {
        let params = DeleteParams::background().preconditions(Preconditions {
            resource_version: cm.resource_version.clone(),
            uid: None,
        });
        match api.delete(&cm.name, &params).await {
            Ok(_) => deleted += 1,
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(source) => {
                return Err(ApplyError::Delete {
                    kind: "ConfigMap",
                    name: cm.name.clone(),
                    namespace: namespace.to_string(),
                    source: Box::new(source),
                })
            }
        }
    }
    if deleted > 0 {
        info!(deleted, "shared ConfigMaps nothing names deleted");
    }
    Ok(deleted)
}

/// One sweep from lists (the Clusters, the ClusterOperations, and the collectable ConfigMaps' metadata), for
/// callers without watch caches; returns how many ConfigMaps were deleted.
pub async fn sweep_listing(client: &Client, namespace: &str, grace: Duration) -> Result<usize, ApplyError> {
    let err = |kind: &'static str| {
        move |source| ApplyError::List {
            kind,
            cluster: "*".to_string(),
            namespace: namespace.to_string(),
            source: Box::new(source),
        }
    };
    let all = ListParams::default();
    let clusters = Api::<Cluster>::namespaced(client.clone(), namespace)
        .list(&all)
        .await
        .map_err(err("Cluster"))?;
    let ops = Api::<ClusterOperation>::namespaced(client.clone(), namespace)
        .list(&all)
        .await
        .map_err(err("ClusterOperation"))?;
    let cms = Api::<ConfigMap>::namespaced(client.clone(), namespace);
    let inputs = format!("{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_CONTENT}");
    let collectable = cms
        .list_metadata(&ListParams::default().labels(&inputs))
        .await
        .map_err(err("ConfigMap"))?;
    let file_lists = cms
        .list(&ListParams::default().labels(&format!("{},{LABEL_CONTENT}=files", shared_selector())))
        .await
        .map_err(err("ConfigMap"))?;
    let lists: HashMap<String, Vec<String>> = file_lists
        .items
        .iter()
        .map(|cm| (cm.name_any(), listed_names(cm)))
        .collect();
    let mut named = HashSet::new();
    for c in &clusters.items {
        add_named(&mut named, &c.spec);
    }
    for op in &ops.items {
        add_named(&mut named, &op.spec);
    }
    let shared: Vec<SharedConfigMap> = collectable
        .items
        .into_iter()
        .filter(|m| is_collectable(&m.metadata))
        .map(|m| {
            let name = m.metadata.name.unwrap_or_default();
            SharedConfigMap {
                lists: lists.get(&name).cloned().unwrap_or_default(),
                name,
                resource_version: m.metadata.resource_version,
                created: m.metadata.creation_timestamp.map(|t| t.0.as_second()),
            }
        })
        .collect();
    let doomed = decide_sweep(&shared, &named, jiff::Timestamp::now().as_second(), grace);
    delete_shared(client, namespace, &doomed).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(name: &str, created: Option<i64>) -> SharedConfigMap {
        SharedConfigMap {
            name: name.into(),
            resource_version: Some("1".into()),
            created,
            lists: Vec::new(),
        }
    }

    #[test]
    fn only_an_old_enough_config_map_nothing_names_is_swept() {
        let all = [
            cm("named", Some(0)),
            cm("old", Some(0)),
            cm("young", Some(1000)),
            cm("ageless", None),
        ];
        let named = HashSet::from(["named".to_string()]);
        let doomed = decide_sweep(&all, &named, 1200, Duration::from_secs(600));
        let names: Vec<&str> = doomed.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["old"]);
        assert!(decide_sweep(&all, &named, 1200, Duration::from_secs(1201)).is_empty());
    }

    #[test]
    fn a_file_list_keeps_its_files_while_it_stays_and_leaves_them_to_the_next_sweep_when_it_goes() {
        let list = |name: &str, files: &[&str]| SharedConfigMap {
            lists: files.iter().map(|f| f.to_string()).collect(),
            ..cm(name, Some(0))
        };
        let all = [
            list("kok-files-kept", &["a", "b"]),
            list("kok-files-gone", &["b", "c"]),
            cm("a", Some(0)),
            cm("b", Some(0)),
            cm("c", Some(0)),
            cm("d", Some(0)),
        ];
        let named = HashSet::from(["kok-files-kept".to_string()]);
        let doomed = decide_sweep(&all, &named, 1200, Duration::from_secs(600));
        let names: Vec<&str> = doomed.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["kok-files-gone", "c", "d"]);
        // A list young enough to stay keeps its files, named or not.
        let young = [
            SharedConfigMap {
                created: Some(1000),
                ..list("kok-files-new", &["c"])
            },
            cm("c", Some(0)),
        ];
        assert!(decide_sweep(&young, &HashSet::new(), 1200, Duration::from_secs(600)).is_empty());
    }
}
