//! The ConfigMap cache: kok's own record of each ConfigMap it manages, not the API object.
//!
//! Apply reads a cached ConfigMap's name, resourceVersion, cluster and current labels and owner
//! references, nothing else. A `ConfigMap` kept in a reflector store costs about 2 KiB even without
//! its data (the object's metadata struct, a B-tree node for two labels, a key copying name,
//! namespace, uid and resourceVersion), and each owner reference (one per operation that uses the
//! ConfigMap) a quarter KiB more. A record keeps those fields alone, the owners' API version and kind
//! held once for all, and a snapshot turns it back into a `ConfigMap` for apply.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::ObjectMeta;
use kube::runtime::watcher;

use super::cache::{LabelIndex, Listed, Words};
use crate::api::{LABEL_CLUSTER, LABEL_CURRENT};
use crate::materialize::shared::SharedConfigMap;

/// What the cache keeps of one ConfigMap.
#[derive(Debug, PartialEq)]
struct Record {
    resource_version: Option<Box<str>>,
    /// The `kok.dev/cluster` label.
    cluster: Option<Box<str>>,
    /// The `kok.dev/current` label.
    current: Option<Box<str>>,
    owners: Box<[Owner]>,
    /// Kept only while named (shared by the fleet, or a cluster's input without owners, see
    /// `materialize::shared`): its creation time, seconds since the epoch, for the sweep.
    collectable: Option<Option<i64>>,
    /// A shared file list (`varsFilesRef`): the file ConfigMaps it names, for the sweep.
    lists: Box<[Arc<str>]>,
}

#[derive(Debug, PartialEq)]
struct Owner {
    api_version: Arc<str>,
    kind: Arc<str>,
    /// The owner's name and uid, held once for the ConfigMaps it owns (an operation owns two).
    name: Arc<str>,
    uid: Arc<str>,
    controller: Option<bool>,
    block_owner_deletion: Option<bool>,
}

#[derive(Debug, Default)]
struct Records {
    by_name: HashMap<Box<str>, Record>,
    /// While the watch lists: the list so far, which replaces `by_name` once whole.
    listing: Option<HashMap<Box<str>, Record>>,
    /// Owner API versions, kinds, names and uids, each held once.
    words: Words,
}

impl Records {
    fn word(&mut self, word: &str) -> Arc<str> {
        self.words.get(word)
    }

    fn record(&mut self, cm: &ConfigMap) -> Record {
        let meta = &cm.metadata;
        let label = |key: &str| {
            meta.labels
                .as_ref()
                .and_then(|l| l.get(key))
                .map(|v| Box::from(v.as_str()))
        };
        let owners = meta
            .owner_references
            .iter()
            .flatten()
            .map(|r| Owner {
                api_version: self.word(&r.api_version),
                kind: self.word(&r.kind),
                name: self.word(&r.name),
                uid: self.word(&r.uid),
                controller: r.controller,
                block_owner_deletion: r.block_owner_deletion,
            })
            .collect();
        Record {
            resource_version: meta.resource_version.as_deref().map(Box::from),
            cluster: label(LABEL_CLUSTER),
            current: label(LABEL_CURRENT),
            owners,
            collectable: crate::materialize::shared::is_collectable(meta)
                .then(|| meta.creation_timestamp.as_ref().map(|t| t.0.as_second())),
            lists: crate::materialize::shared::listed_names(cm)
                .iter()
                .map(|name| self.word(name))
                .collect(),
        }
    }
}

/// The ConfigMaps kok manages, as records, with their names by cluster.
#[derive(Debug, Default)]
pub struct ConfigMapCache {
    records: Mutex<Records>,
    index: LabelIndex,
    listed: Listed,
}

impl ConfigMapCache {
    /// Follows one event of the ConfigMap watch: an applied or listed ConfigMap replaces its record, a
    /// deleted one goes, and a finished list replaces every record.
    pub fn observe(&self, event: &watcher::Event<ConfigMap>) {
        self.index.observe(event);
        let Ok(mut records) = self.records.lock() else {
            return;
        };
        let name = |cm: &ConfigMap| Box::<str>::from(cm.metadata.name.as_deref().unwrap_or_default());
        match event {
            watcher::Event::Apply(cm) => {
                let record = records.record(cm);
                records.by_name.insert(name(cm), record);
            }
            watcher::Event::Delete(cm) => {
                records.by_name.remove(&name(cm));
            }
            watcher::Event::Init => records.listing = Some(HashMap::new()),
            watcher::Event::InitApply(cm) => {
                let record = records.record(cm);
                records.listing.get_or_insert_default().insert(name(cm), record);
            }
            watcher::Event::InitDone => {
                if let Some(listed) = records.listing.take() {
                    records.by_name = listed;
                }
                records.words.sweep();
                drop(records);
                self.listed.set();
            }
        }
    }

    /// Waits until the watch has listed once.
    pub async fn wait_until_listed(&self) {
        self.listed.wait().await;
    }

    /// How many ConfigMaps the cache holds.
    pub fn len(&self) -> usize {
        self.records.lock().map(|r| r.by_name.len()).unwrap_or_default()
    }

    /// The resourceVersion of `name`, when cached.
    pub fn resource_version(&self, name: &str) -> Option<String> {
        let records = self.records.lock().ok()?;
        records
            .by_name
            .get(name)?
            .resource_version
            .as_deref()
            .map(str::to_string)
    }

    /// The ConfigMaps kept only while named, as the sweep sees them.
    pub fn collectable(&self) -> Vec<SharedConfigMap> {
        let Ok(records) = self.records.lock() else {
            return Vec::new();
        };
        records
            .by_name
            .iter()
            .filter_map(|(name, r)| {
                Some(SharedConfigMap {
                    name: name.to_string(),
                    resource_version: r.resource_version.as_deref().map(str::to_string),
                    created: r.collectable?,
                    lists: r.lists.iter().map(|n| n.to_string()).collect(),
                })
            })
            .collect()
    }

    /// The ConfigMaps labelled with `cluster`, by name, as apply reads them: name, namespace,
    /// resourceVersion, the cluster and current labels and the owner references.
    pub fn of_cluster(&self, namespace: &str, cluster: &str) -> Vec<(String, ConfigMap)> {
        let names = self.index.names_in(cluster);
        let Ok(records) = self.records.lock() else {
            return Vec::new();
        };
        names
            .into_iter()
            .filter_map(|name| {
                let record = records.by_name.get(name.as_str())?;
                let cm = rebuild(&name, namespace, record);
                Some((name, cm))
            })
            .collect()
    }
}

fn rebuild(name: &str, namespace: &str, record: &Record) -> ConfigMap {
    let labels: std::collections::BTreeMap<String, String> =
        [(LABEL_CLUSTER, &record.cluster), (LABEL_CURRENT, &record.current)]
            .into_iter()
            .filter_map(|(key, value)| Some((key.to_string(), value.as_deref()?.to_string())))
            .collect();
    let owners: Vec<OwnerReference> = record
        .owners
        .iter()
        .map(|o| OwnerReference {
            api_version: o.api_version.to_string(),
            kind: o.kind.to_string(),
            name: o.name.to_string(),
            uid: o.uid.to_string(),
            controller: o.controller,
            block_owner_deletion: o.block_owner_deletion,
        })
        .collect();
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            resource_version: record.resource_version.as_deref().map(str::to_string),
            labels: (!labels.is_empty()).then_some(labels),
            owner_references: (!owners.is_empty()).then_some(owners),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(name: &str, cluster: &str, rv: &str, owners: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("kok".into()),
                uid: Some(format!("uid-{name}")),
                resource_version: Some(rv.into()),
                labels: Some(
                    [
                        (LABEL_CLUSTER, cluster),
                        (LABEL_CURRENT, "true"),
                        ("kok.dev/content", "hosts"),
                    ]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ),
                annotations: Some([("a".to_string(), "b".to_string())].into()),
                owner_references: Some(
                    owners
                        .iter()
                        .map(|(kind, owner)| OwnerReference {
                            api_version: "kok.dev/v1".into(),
                            kind: kind.to_string(),
                            name: owner.to_string(),
                            uid: format!("uid-{owner}"),
                            controller: None,
                            block_owner_deletion: Some(true),
                        })
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            data: Some([("hosts.yml".to_string(), "all: {}".to_string())].into()),
            ..ConfigMap::default()
        }
    }

    #[test]
    fn a_cached_config_map_comes_back_with_what_apply_reads() {
        let cache = ConfigMapCache::default();
        let full = cm(
            "a-hosts-1",
            "a",
            "7",
            &[("Cluster", "a"), ("ClusterOperation", "a-install")],
        );
        cache.observe(&watcher::Event::Apply(full.clone()));
        let [(name, back)] = &cache.of_cluster("kok", "a")[..] else {
            panic!("one ConfigMap of a")
        };
        assert_eq!(name, "a-hosts-1");
        assert_eq!(back.metadata.name, full.metadata.name);
        assert_eq!(back.metadata.namespace, full.metadata.namespace);
        assert_eq!(back.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(back.metadata.owner_references, full.metadata.owner_references);
        let labels: Vec<(&str, &str)> = back
            .metadata
            .labels
            .iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(labels, [(LABEL_CLUSTER, "a"), (LABEL_CURRENT, "true")]);
        assert!(back.data.is_none() && back.metadata.annotations.is_none());
        assert_eq!(cache.resource_version("a-hosts-1").as_deref(), Some("7"));
        assert!(cache.of_cluster("kok", "b").is_empty());

        // The owners' API version, kinds, names and uids are held once for every ConfigMap.
        cache.observe(&watcher::Event::Apply(cm(
            "a-vars-1",
            "a",
            "8",
            &[("Cluster", "a")],
        )));
        assert_eq!(cache.records.lock().unwrap().words.len(), 7);
    }

    #[test]
    fn the_cache_follows_applies_deletes_and_relists() {
        let cache = ConfigMapCache::default();
        cache.observe(&watcher::Event::Apply(cm("a-1", "a", "1", &[])));
        cache.observe(&watcher::Event::Apply(cm("b-1", "b", "2", &[])));
        cache.observe(&watcher::Event::Apply(cm("a-1", "a", "3", &[("Cluster", "a")])));
        assert_eq!(cache.resource_version("a-1").as_deref(), Some("3"));
        assert_eq!(cache.len(), 2);
        cache.observe(&watcher::Event::Delete(cm("a-1", "a", "3", &[])));
        assert_eq!(cache.resource_version("a-1"), None);
        assert!(cache.of_cluster("kok", "a").is_empty());

        // A relist replaces the records once whole: until then the earlier ones stay.
        cache.observe(&watcher::Event::Init);
        cache.observe(&watcher::Event::InitApply(cm("c-1", "c", "9", &[])));
        assert_eq!(cache.resource_version("b-1").as_deref(), Some("2"));
        assert_eq!(cache.resource_version("c-1"), None);
        cache.observe(&watcher::Event::InitDone);
        assert_eq!(cache.resource_version("b-1"), None);
        assert_eq!(cache.resource_version("c-1").as_deref(), Some("9"));
        assert_eq!(cache.of_cluster("kok", "c").len(), 1);
        assert!(cache.of_cluster("kok", "b").is_empty());
        assert_eq!(
            cache.records.lock().unwrap().words.len(),
            0,
            "no owner left, no word kept"
        );
    }

    #[test]
    fn the_sweep_sees_ownerless_inputs_and_shared_lists_with_their_files_and_nothing_else() {
        let cache = ConfigMapCache::default();
        cache.observe(&watcher::Event::Apply(cm("a-hosts-1", "a", "1", &[])));
        cache.observe(&watcher::Event::Apply(cm(
            "a-hosts-0",
            "a",
            "2",
            &[("ClusterOperation", "r")],
        )));
        let mut state = cm("kok-state", "a", "3", &[]);
        state.metadata.labels.as_mut().unwrap().remove("kok.dev/content");
        cache.observe(&watcher::Event::Apply(state));
        let mut list = cm("kok-files-1", "a", "4", &[]);
        let labels = list.metadata.labels.as_mut().unwrap();
        labels.remove(LABEL_CLUSTER);
        labels.insert(crate::api::LABEL_SHARED.into(), "true".into());
        list.data = Some(
            [(
                crate::api::FILES_KEY.to_string(),
                r#"[{"path":"group_vars/all.yml","configMap":"kok-file-1"}]"#.to_string(),
            )]
            .into(),
        );
        cache.observe(&watcher::Event::Apply(list));
        let mut seen: Vec<(String, Vec<String>)> = cache
            .collectable()
            .into_iter()
            .map(|c| (c.name, c.lists))
            .collect();
        seen.sort();
        assert_eq!(
            seen,
            [
                ("a-hosts-1".to_string(), vec![]),
                ("kok-files-1".to_string(), vec!["kok-file-1".to_string()]),
            ],
            "an earlier kok's owned inventory is the garbage collector's, kok-state is no input"
        );
    }

    #[tokio::test]
    async fn waiting_for_the_list_ends_once_it_is_whole() {
        let cache = Arc::new(ConfigMapCache::default());
        let waiting = tokio::spawn({
            let cache = cache.clone();
            async move { cache.wait_until_listed().await }
        });
        cache.observe(&watcher::Event::Init);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        cache.observe(&watcher::Event::InitDone);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("listed")
            .unwrap();
    }
}
