//! Object storage: objects by resource, a global resourceVersion, and the event history watches replay.
//!
//! Every change goes through [`Store::put`] or [`Store::remove`], which assign the next
//! resourceVersion, append one [`WatchEvent`] to its resource's history and broadcast it. That single
//! path is where the database of [`crate::persist`] is written, when the server has a data directory.
//!
//! Like the real API server's watch cache, the history is kept per resource and bounded: each
//! resource keeps its last `window` events, so a busy resource never pushes a quiet one's events out.
//!
//! Objects are kept as their serialized JSON ([`Stored`]), with the labels, uid and owners that
//! selectors and the indexes read; reads parse them. An event shares the [`Stored`] version it
//! produced (sent to every watcher as is) and keeps only the labels of the version before, which is
//! all selector transitions need.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use axum::body::Bytes;
use serde_json::Value;
use tokio::sync::broadcast;

use crate::errors::ApiError;
use crate::persist::{Db, Durability, Record};
use crate::resources::ResourceKey;

/// Namespace (empty for cluster-scoped objects) and name.
pub type ObjectKey = (String, String);

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// Created.
    Added,
    /// Changed.
    Modified,
    /// Removed.
    Deleted,
}

impl EventKind {
    /// The watch event type string.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Added => "ADDED",
            EventKind::Modified => "MODIFIED",
            EventKind::Deleted => "DELETED",
        }
    }
}

/// An object's labels, as selectors read them.
pub type Labels = Vec<(String, String)>;

/// The labels of an object (`metadata.labels`, string values only).
pub fn labels_of(obj: &Value) -> Labels {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// The value of one label.
pub fn label<'a>(labels: &'a Labels, key: &str) -> Option<&'a str> {
    labels.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// An object as stored: its JSON, and what selectors, watches and the uid and owner indexes read
/// without parsing it.
#[derive(Debug)]
pub struct Stored {
    /// The object, serialized.
    pub json: Bytes,
    /// Its `apiVersion` (a read at another version rewrites it).
    pub api_version: String,
    /// Its labels.
    pub labels: Labels,
    /// Its `metadata.uid`, if set.
    uid: Option<String>,
    /// The uids its ownerReferences name.
    owners: Vec<String>,
}

impl Stored {
    /// Keeps `obj`, already serialized as `json`.
    fn new(obj: &Value, json: String) -> Stored {
        // Serializing grows the buffer by doubling; kept for long, it holds only the JSON.
        let mut json = json.into_bytes();
        json.shrink_to_fit();
        Stored {
            json: Bytes::from(json),
            api_version: obj["apiVersion"].as_str().unwrap_or("").to_string(),
            labels: labels_of(obj),
            uid: obj
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .map(str::to_string),
            owners: owner_uids(obj),
        }
    }

    /// The object, parsed. The JSON was written from a `Value`, so it parses.
    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.json).unwrap_or(Value::Null)
    }
}

/// One change, as kept in its resource's history and sent to watchers.
#[derive(Debug, Clone)]
pub struct WatchEvent {
    /// The resourceVersion this change produced.
    pub rv: u64,
    /// Kind of change.
    pub kind: EventKind,
    /// Which resource changed.
    pub resource: ResourceKey,
    /// Namespace ("" for cluster-scoped objects) and name of the object.
    pub key: ObjectKey,
    /// The object after the change (for deletions: its last state, with the deletion's rv); shared
    /// with the store while it is the current version.
    pub object: Arc<Stored>,
    /// Labels of the object before the change (for selector transitions); `None` for creations.
    pub previous_labels: Option<Labels>,
}

/// The kept events of one resource.
#[derive(Debug, Default)]
struct History {
    /// The last events, oldest first.
    events: VecDeque<Arc<WatchEvent>>,
    /// The resourceVersion of the newest event dropped from `events`.
    compacted: u64,
}

/// The in-memory object store.
#[derive(Debug)]
pub struct Store {
    objects: HashMap<ResourceKey, BTreeMap<ObjectKey, Arc<Stored>>>,
    rv: u64,
    history: HashMap<ResourceKey, History>,
    window: usize,
    /// Watches of any resource from before this resourceVersion get 410 Gone (start, restart).
    floor: u64,
    tx: broadcast::Sender<Arc<WatchEvent>>,
    uids: HashMap<String, (ResourceKey, ObjectKey)>,
    dependents: HashMap<String, BTreeSet<(ResourceKey, ObjectKey)>>,
    /// Owner uids that may be missing (an owner was removed, or an object named an absent one), so
    /// finding orphans never scans every owner.
    maybe_missing: BTreeSet<String>,
    db: Option<Db>,
}

/// Namespace and name of an object.
pub fn object_key(obj: &Value) -> ObjectKey {
    let meta = &obj["metadata"];
    (
        meta["namespace"].as_str().unwrap_or("").to_string(),
        meta["name"].as_str().unwrap_or("").to_string(),
    )
}

fn owner_uids(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r["uid"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Stored objects in key order, with their keys.
pub type Objects<'a> = Box<dyn Iterator<Item = (&'a ObjectKey, &'a Arc<Stored>)> + 'a>;

impl Store {
    /// An empty store keeping the last `window` events of each resource for watches.
    pub fn new(window: usize) -> Store {
        let (tx, _) = broadcast::channel(16384);
        Store {
            objects: HashMap::new(),
            rv: 1,
            history: HashMap::new(),
            window: window.max(1),
            floor: 1,
            tx,
            uids: HashMap::new(),
            dependents: HashMap::new(),
            maybe_missing: BTreeSet::new(),
            db: None,
        }
    }

    /// The latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// Watches of `resource` starting before this resourceVersion get 410 Gone: events after it
    /// are all kept.
    pub fn compacted(&self, resource: &ResourceKey) -> u64 {
        self.history
            .get(resource)
            .map_or(self.floor, |h| h.compacted.max(self.floor))
    }

    /// Reads one object, parsed.
    pub fn get(&self, resource: &ResourceKey, key: &ObjectKey) -> Option<Arc<Value>> {
        self.stored(resource, key).map(|s| Arc::new(s.value()))
    }

    /// Reads one object as stored.
    pub fn stored(&self, resource: &ResourceKey, key: &ObjectKey) -> Option<&Arc<Stored>> {
        self.objects.get(resource).and_then(|m| m.get(key))
    }

    /// Whether an object exists.
    pub fn contains(&self, resource: &ResourceKey, key: &ObjectKey) -> bool {
        self.stored(resource, key).is_some()
    }

    /// Objects of a resource, in namespace/name order, optionally within one namespace.
    pub fn list<'a>(&'a self, resource: &ResourceKey, namespace: Option<&'a str>) -> Objects<'a> {
        let Some(map) = self.objects.get(resource) else {
            return Box::new(std::iter::empty());
        };
        match namespace {
            Some(ns) => Box::new(
                map.range((ns.to_string(), String::new())..)
                    .take_while(move |((n, _), _)| n == ns),
            ),
            None => Box::new(map.iter()),
        }
    }

    /// Objects after `after` (exclusive) in key order, for paginated lists.
    pub fn list_after<'a>(
        &'a self,
        resource: &ResourceKey,
        namespace: Option<&'a str>,
        after: &ObjectKey,
    ) -> Objects<'a> {
        use std::ops::Bound;
        let Some(map) = self.objects.get(resource) else {
            return Box::new(std::iter::empty());
        };
        let it = map.range((Bound::Excluded(after.clone()), Bound::Unbounded));
        match namespace {
            Some(ns) => Box::new(it.take_while(move |((n, _), _)| n == ns)),
            None => Box::new(it),
        }
    }

    /// Number of objects of a resource.
    pub fn count(&self, resource: &ResourceKey) -> usize {
        self.objects.get(resource).map_or(0, BTreeMap::len)
    }

    /// Where an object with this uid lives, if it exists.
    pub fn by_uid(&self, uid: &str) -> Option<&(ResourceKey, ObjectKey)> {
        self.uids.get(uid)
    }

    /// Objects whose ownerReferences name this uid.
    pub fn dependents_of(&self, uid: &str) -> Vec<(ResourceKey, ObjectKey)> {
        self.dependents
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Owner uids referenced by some object but not present in the store.
    pub fn missing_owners(&mut self) -> Vec<String> {
        let (uids, dependents) = (&self.uids, &self.dependents);
        self.maybe_missing
            .retain(|u| dependents.contains_key(u) && !uids.contains_key(u));
        self.maybe_missing.iter().cloned().collect()
    }

    /// New receiver of every future event.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<WatchEvent>> {
        self.tx.subscribe()
    }

    /// Kept events of `resource` with a resourceVersion above `rv`.
    pub fn events_since(&self, resource: &ResourceKey, rv: u64) -> impl Iterator<Item = &Arc<WatchEvent>> {
        let events = self.history.get(resource).map(|h| &h.events);
        let start = events.map_or(0, |e| e.partition_point(|e| e.rv <= rv));
        events.into_iter().flat_map(move |e| e.range(start..))
    }

    /// Stores an object (created or replaced), assigning the next resourceVersion; returns it as
    /// stored. With a database, the write is committed before it is applied (and synced before anyone
    /// is shown it: see [`crate::persist`]); if it cannot be written, nothing changes and
    /// [`Store::persist_failure`] says why.
    pub fn put(&mut self, resource: &ResourceKey, mut obj: Value) -> Value {
        obj["metadata"]["resourceVersion"] = Value::String((self.rv + 1).to_string());
        let key = object_key(&obj);
        let json = obj.to_string();
        let record = Record::Put {
            rv: self.rv + 1,
            group: &resource.group,
            resource: &resource.resource,
            namespace: &key.0,
            name: &key.1,
            json: &json,
        };
        if !self.persist(&record) {
            return obj;
        }
        self.rv += 1;
        let stored = Arc::new(Stored::new(&obj, json));
        let previous = self
            .objects
            .entry(resource.clone())
            .or_default()
            .insert(key.clone(), stored.clone());
        if let Some(prev) = &previous {
            self.unindex(resource, &key, prev);
        }
        self.index(resource, &key, &stored);
        let kind = if previous.is_some() {
            EventKind::Modified
        } else {
            EventKind::Added
        };
        self.emit(WatchEvent {
            rv: self.rv,
            kind,
            resource: resource.clone(),
            key,
            object: stored,
            previous_labels: previous.map(|p| p.labels.clone()),
        });
        obj
    }

    /// Removes an object, returning its last state stamped with the deletion's resourceVersion.
    /// Persisted like [`Store::put`]; `None` also when the removal could not be persisted.
    pub fn remove(&mut self, resource: &ResourceKey, key: &ObjectKey) -> Option<Value> {
        self.stored(resource, key)?;
        let record = Record::Remove {
            rv: self.rv + 1,
            group: &resource.group,
            resource: &resource.resource,
            namespace: &key.0,
            name: &key.1,
        };
        if !self.persist(&record) {
            return None;
        }
        let prev = self.objects.get_mut(resource)?.remove(key)?;
        self.unindex(resource, key, &prev);
        self.rv += 1;
        let mut last = prev.value();
        last["metadata"]["resourceVersion"] = Value::String(self.rv.to_string());
        let json = last.to_string();
        self.emit(WatchEvent {
            rv: self.rv,
            kind: EventKind::Deleted,
            resource: resource.clone(),
            key: key.clone(),
            object: Arc::new(Stored::new(&last, json)),
            previous_labels: Some(prev.labels.clone()),
        });
        Some(last)
    }

    /// Removes every object of a resource (when its CRD goes away), emitting deletions.
    pub fn remove_all(&mut self, resource: &ResourceKey) {
        let keys: Vec<ObjectKey> = self
            .objects
            .get(resource)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        for k in keys {
            self.remove(resource, &k);
        }
    }

    /// Writes to the database, if there is one; false when it could not be persisted.
    fn persist(&mut self, record: &Record<'_>) -> bool {
        let Some(db) = self.db.as_mut() else {
            return true;
        };
        if let Err(e) = db.write(record) {
            tracing::error!(error = %e, "write refused");
            return false;
        }
        true
    }

    /// Every object with its resource and key, as stored.
    pub fn iter_all(&self) -> impl Iterator<Item = (&ResourceKey, &ObjectKey, &Arc<Stored>)> {
        self.objects
            .iter()
            .flat_map(|(rk, m)| m.iter().map(move |(k, o)| (rk, k, o)))
    }

    /// Restores an object as it was stored (its resourceVersion kept), without an event or a log record.
    pub fn load(&mut self, resource: &ResourceKey, obj: Value) {
        let key = object_key(&obj);
        let json = obj.to_string();
        let stored = Arc::new(Stored::new(&obj, json));
        if let Some(prev) = self
            .objects
            .entry(resource.clone())
            .or_default()
            .insert(key.clone(), stored.clone())
        {
            self.unindex(resource, &key, &prev);
        }
        self.index(resource, &key, &stored);
    }

    /// Sets the latest resourceVersion of a restored store.
    pub fn restore_resource_version(&mut self, rv: u64) {
        self.rv = rv;
    }

    /// Drops the event history: watches from any earlier resourceVersion get 410 Gone.
    pub fn forget_events(&mut self) {
        self.history.clear();
        self.floor = self.rv;
    }

    /// Persists every later write to this database.
    pub fn attach_db(&mut self, db: Db) {
        self.db = Some(db);
    }

    /// Closes the database (releasing its directory); later writes are refused.
    pub fn close_db(&mut self) {
        if let Some(db) = self.db.as_mut() {
            db.close();
        }
    }

    /// Follows the persistence failure of a store with a database (`None` without one).
    pub fn persist_failed(&self) -> Option<tokio::sync::watch::Receiver<Option<String>>> {
        self.db.as_ref().map(Db::failed)
    }

    /// The group sync of the database's WAL (`None` without a database): answers wait on it.
    pub fn durability(&self) -> Option<Durability> {
        self.db.as_ref().map(|db| db.durability().clone())
    }

    /// Why writes are refused (a write could not be persisted, or the server stopped), as a 503.
    pub fn persist_failure(&self) -> Option<ApiError> {
        let why = self.db.as_ref()?.failure()?;
        Some(ApiError::new(503, why))
    }

    fn index(&mut self, resource: &ResourceKey, key: &ObjectKey, obj: &Stored) {
        if let Some(uid) = &obj.uid {
            self.uids.insert(uid.clone(), (resource.clone(), key.clone()));
        }
        for owner in &obj.owners {
            self.dependents
                .entry(owner.clone())
                .or_default()
                .insert((resource.clone(), key.clone()));
            if !self.uids.contains_key(owner) {
                self.maybe_missing.insert(owner.clone());
            }
        }
    }

    fn unindex(&mut self, resource: &ResourceKey, key: &ObjectKey, obj: &Stored) {
        if let Some(uid) = &obj.uid {
            self.uids.remove(uid);
            if self.dependents.contains_key(uid) {
                self.maybe_missing.insert(uid.clone());
            }
        }
        for owner in &obj.owners {
            if let Some(set) = self.dependents.get_mut(owner) {
                set.remove(&(resource.clone(), key.clone()));
                if set.is_empty() {
                    self.dependents.remove(owner);
                }
            }
        }
    }

    fn emit(&mut self, event: WatchEvent) {
        let event = Arc::new(event);
        let history = self.history.entry(event.resource.clone()).or_default();
        history.events.push_back(event.clone());
        while history.events.len() > self.window {
            if let Some(old) = history.events.pop_front() {
                history.compacted = old.rv;
            }
        }
        // No receivers is fine: nobody watches.
        let _ = self.tx.send(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rk() -> ResourceKey {
        ResourceKey {
            group: String::new(),
            resource: "configmaps".into(),
        }
    }

    #[test]
    fn put_and_remove_advance_the_version_and_log_events() {
        let mut s = Store::new(2);
        let a = s.put(
            &rk(),
            json!({"metadata": {"name": "a", "namespace": "n", "uid": "u1"}}),
        );
        assert_eq!(a["metadata"]["resourceVersion"], "2");
        s.put(
            &rk(),
            json!({"metadata": {"name": "b", "namespace": "n", "ownerReferences": [{"uid": "u1"}]}}),
        );
        assert_eq!(s.dependents_of("u1").len(), 1);
        s.remove(&rk(), &("n".into(), "a".into()));
        assert_eq!(s.missing_owners(), vec!["u1".to_string()]);
        assert_eq!(s.events_since(&rk(), 0).count(), 2, "window keeps two events");
        assert_eq!(s.compacted(&rk()), 2);
        assert_eq!(s.list(&rk(), Some("n")).count(), 1);
    }

    #[test]
    fn an_owner_is_missing_once_removed_or_never_created_and_no_longer_once_it_exists() {
        let mut s = Store::new(10);
        let owned_by = |name: &str, uid: &str| json!({"metadata": {"name": name, "namespace": "n", "ownerReferences": [{"uid": uid}]}});
        s.put(&rk(), owned_by("early", "u2"));
        assert_eq!(
            s.missing_owners(),
            vec!["u2".to_string()],
            "named before it exists"
        );
        s.put(
            &rk(),
            json!({"metadata": {"name": "owner", "namespace": "n", "uid": "u2"}}),
        );
        s.put(
            &rk(),
            json!({"metadata": {"name": "owner", "namespace": "n", "uid": "u2", "labels": {"a": "b"}}}),
        );
        assert!(
            s.missing_owners().is_empty(),
            "created, and still there after an update"
        );
        s.remove(&rk(), &("n".into(), "owner".into()));
        assert_eq!(s.missing_owners(), vec!["u2".to_string()], "removed");
        s.remove(&rk(), &("n".into(), "early".into()));
        assert!(s.missing_owners().is_empty(), "no dependents left");
    }
}
