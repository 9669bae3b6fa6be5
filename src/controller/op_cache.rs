//! The ClusterOperation cache: kok's own compact record of each operation it manages, its operations by
//! cluster and the running ones.
//!
//! A `ClusterOperation` kept as an object costs about 2 KiB even without the statuses the reporter
//! delivers: its struct alone is over 1 KiB (the metadata struct 360 bytes), each of its dozen strings
//! is an allocation of its own, and a reflector store keys it by a copy of its name, namespace, uid and
//! resourceVersion. Most of those strings are the same across a fleet (the image, the Secret, the commit
//! and revision, a wait message) or across a cluster's operations (its name, ConfigMaps and path). A
//! record holds each such string once for the whole cache, and the ones every operation of one commit of a
//! cluster has as one shared origin, and the fields of its `operations.yml` entry (the same in every
//! cluster that has the entry word for word) as one shared entry; it keeps its uid, resourceVersion and creation time as numbers
//! (a stamp), keeps the fields that are rarely set (hooks,
//! a facts playbook, resources, a schedule; a finished run's times and report) boxed apart, and turns back into the
//! object the decisions read ([`OpCache::get`]): the cached object of before, with the cluster and
//! current labels and the content hash put back.
//!
//! Beside the operations by cluster it keeps the per-rollout index: each rollout's current runs by
//! cluster ([`OpCache::rollout_runs`]), so a wave decision never lists or scans all operations.
//!
//! What it drops, as the reflector store did: `managedFields`, the commit statuses the reporter
//! watches itself, and owner references, labels and annotations other than the ones above (and the
//! record an operation was restored from, once it took it: [`super::restore`]). An
//! operation with a schedule keeps its whole metadata: the scheduler copies it into its runs.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::ObjectMeta;
use kube::runtime::watcher;

use super::cache::{list_in, unlist_in, Listed, NamesByCluster, Shared, Words};
use super::wave::RunState;
use crate::api::{
    ActionType, ClusterOperation, ClusterOperationSpec, ClusterOperationStatus, ConfigMapRef, OnFailure,
    OperationSource, Phase, PinnedFile, SecretRef, ANNOTATION_CONTENT_HASH, ANNOTATION_RECORDED,
    LABEL_CLUSTER, LABEL_CURRENT, LABEL_ROLLOUT, LABEL_WAVE,
};

/// The metadata a record keeps.
#[derive(Debug)]
enum Meta {
    /// What kok reads of an operation without a schedule.
    Slim {
        /// The uid, resourceVersion and creation time as numbers, when all three have the forms an API
        /// server gives them ([`Stamp::of`]); else they are kept as text in `marks`.
        stamp: Option<Stamp>,
        /// The `kok.dev/content-hash` annotation as its 16 bytes, when it is the 32 lower-case hex
        /// characters kok writes ([`parse_hash`]); else it is kept as text in `marks`.
        hash: Option<[u8; 16]>,
        /// Whether the `kok.dev/current` label is `true`: nearly every run has it, so it is kept here and
        /// not in `marks` (a label of another value is).
        current: bool,
        /// What few runs have, boxed apart: a rollout's wave label, the recorded outcome, and the uid,
        /// resourceVersion, creation time and content hash when they do not have the forms above.
        marks: Option<Box<Marks>>,
    },
    /// An operation with a schedule: all of it but `managedFields`.
    Whole(Box<ObjectMeta>),
}

/// A uid, resourceVersion and creation time as numbers: 32 bytes in the record instead of two strings of
/// their own and a time. Only values that read back as the same text are kept so.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Stamp {
    /// A UUID in its lower-case hyphenated form.
    uid: [u8; 16],
    resource_version: u64,
    /// Whole seconds since the epoch.
    created: i64,
}

impl Stamp {
    /// The stamp of `m`, when its uid is a lower-case hyphenated UUID, its resourceVersion a decimal number
    /// without leading zeros and its creation time a whole second.
    fn of(m: &ObjectMeta) -> Option<Stamp> {
        let uid = parse_uuid(m.uid.as_deref()?)?;
        let text = m.resource_version.as_deref()?;
        let resource_version: u64 = text.parse().ok()?;
        let created = m.creation_timestamp.as_ref()?.0;
        let stamp = Stamp {
            uid,
            resource_version,
            created: created.as_second(),
        };
        (resource_version.to_string() == text && created.subsec_nanosecond() == 0).then_some(stamp)
    }

    fn uid(&self) -> String {
        let hex = hex(&self.uid);
        format!(
            "{}-{}-{}-{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..32]
        )
    }

    fn created(&self) -> Option<Time> {
        jiff::Timestamp::from_second(self.created).ok().map(Time)
    }
}

/// The 16 bytes of `text` when it is 32 lower-case hex characters (as [`hex`] writes them).
fn parse_hash(text: &str) -> Option<[u8; 16]> {
    if text.len() != 32
        || !text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    let mut hash = [0u8; 16];
    for (i, byte) in hash.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(hash)
}

/// `bytes` as lower-case hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The 16 bytes of `text` when it is a UUID written as [`Stamp::uid`] writes it.
fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let groups: Vec<&str> = text.split('-').collect();
    let lengths: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    if lengths != [8, 4, 4, 4, 12] {
        return None;
    }
    parse_hash(&groups.concat())
}

/// The metadata few runs have.
#[derive(Debug, Default, PartialEq)]
struct Marks {
    /// The uid, resourceVersion and creation time, when they are not a [`Stamp`].
    uid: Option<Box<str>>,
    resource_version: Option<Box<str>>,
    creation_timestamp: Option<Time>,
    /// The `kok.dev/current` label when it is not `true`, and the `kok.dev/wave` label
    /// (`kok.dev/rollout` is `spec.rollout`'s name).
    current: Option<Arc<str>>,
    wave: Option<Arc<str>>,
    /// The `kok.dev/content-hash` annotation, when it is not 16 bytes in hex.
    hash: Option<Box<str>>,
    /// The `kok.dev/recorded` annotation, while the operation has not taken its recorded outcome.
    recorded: Option<Box<str>>,
}

/// Where an operation comes from and what it is given: the same for every operation of one commit of a
/// cluster, so held once for all of them ([`Shared`]).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Origin {
    cluster: Arc<str>,
    /// The `kok.dev/cluster` label (of a slim record: a whole one keeps its labels).
    cluster_label: Option<Arc<str>>,
    image: Arc<str>,
    hosts: Arc<str>,
    vars: Option<Arc<str>>,
    /// The pinned inventory's file name, when not hosts.yml.
    inventory_file: Option<Arc<str>>,
    /// The pinned group_vars/host_vars files as one word (see [`encode_files`]).
    files: Option<Arc<str>>,
    /// The shared file list ConfigMap (`varsFilesRef`).
    files_ref: Option<Arc<str>>,
    vault: Option<Arc<str>>,
    ssh: Option<Arc<str>>,
    commit: Arc<str>,
    revision: Arc<str>,
    path: Arc<str>,
}

/// The spec: its origin, its entry, and `rest` for the rarely set fields, the others empty.
#[derive(Debug)]
struct Spec {
    origin: Arc<Origin>,
    entry: Arc<Entry>,
    rest: Option<Box<ClusterOperationSpec>>,
}

/// Which entry of `operations.yml` an operation runs, and where it queues: the same for the runs of one
/// entry of one commit in every cluster that has it word for word (a fleet made from one template
/// upgrades all its clusters with the same entry), so held once for all of them ([`Shared`]).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Entry {
    id: Arc<str>,
    digest: Arc<str>,
    action: Arc<str>,
    action_type: ActionType,
    extra_args: Box<[Arc<str>]>,
    queue_position: Arc<str>,
    on_failure: OnFailure,
}

/// The status: phase and message, and the rest (a run's Job, times, report) boxed when set.
#[derive(Debug)]
struct Status {
    phase: Phase,
    message: Option<Arc<str>>,
    rest: Option<Box<ClusterOperationStatus>>,
}

/// What the cache keeps of one operation.
#[derive(Debug)]
struct Record {
    meta: Meta,
    spec: Spec,
    status: Option<Status>,
}

impl Record {
    fn new(
        op: &ClusterOperation,
        words: &mut Words,
        origins: &mut Shared<Origin>,
        entries: &mut Shared<Entry>,
    ) -> Record {
        let m = &op.metadata;
        let label = |key: &str| m.labels.as_ref().and_then(|l| l.get(key));
        let (meta, cluster_label) = if op.spec.schedule.is_some() {
            let mut whole = m.clone();
            whole.managed_fields = None;
            (Meta::Whole(Box::new(whole)), None)
        } else {
            let annotation = |key: &str| {
                m.annotations
                    .as_ref()
                    .and_then(|a| a.get(key))
                    .map(|v| Box::from(v.as_str()))
            };
            let stamp = Stamp::of(m);
            let text_hash = annotation(ANNOTATION_CONTENT_HASH);
            let hash = text_hash.as_deref().and_then(parse_hash);
            let current = label(LABEL_CURRENT);
            let marks = Marks {
                current: current.filter(|v| *v != "true").map(|v| words.get(v)),
                uid: m.uid.as_deref().filter(|_| stamp.is_none()).map(Box::from),
                resource_version: m
                    .resource_version
                    .as_deref()
                    .filter(|_| stamp.is_none())
                    .map(Box::from),
                creation_timestamp: m.creation_timestamp.clone().filter(|_| stamp.is_none()),
                wave: label(LABEL_WAVE).map(|v| words.get(v)),
                hash: text_hash.filter(|_| hash.is_none()),
                recorded: annotation(ANNOTATION_RECORDED)
                    .filter(|_| !op.status.as_ref().is_some_and(|s| s.phase.is_terminal())),
            };
            let marks = (marks != Marks::default()).then(|| Box::new(marks));
            (
                Meta::Slim {
                    stamp,
                    hash,
                    current: current.is_some_and(|v| v == "true"),
                    marks,
                },
                label(LABEL_CLUSTER).map(|v| words.get(v)),
            )
        };
        let s = &op.spec;
        let rest = ClusterOperationSpec {
            pre_hooks: s.pre_hooks.clone(),
            post_hooks: s.post_hooks.clone(),
            facts_playbook: s.facts_playbook.clone(),
            active_deadline_seconds: s.active_deadline_seconds,
            start_timeout: s.start_timeout,
            service_account: s.service_account.clone(),
            resources: s.resources.clone(),
            schedule: s.schedule.clone(),
            scheduled_time: s.scheduled_time.clone(),
            verify: s.verify,
            verify_timeout: s.verify_timeout.clone(),
            maintenance: s.maintenance.clone(),
            ignore_maintenance: s.ignore_maintenance,
            rollout: s.rollout.clone(),
            preflight: s.preflight.clone(),
            repository_files: s.repository_files.clone(),
            ..ClusterOperationSpec::default()
        };
        let origin = Origin {
            cluster: words.get(&s.cluster),
            cluster_label,
            image: words.get(&s.image),
            hosts: words.get(&s.hosts_conf_ref.name),
            vars: s.vars_conf_ref.as_ref().map(|r| words.get(&r.name)),
            inventory_file: s.inventory_file.as_deref().map(|f| words.get(f)),
            files: (!s.vars_files.is_empty()).then(|| words.get(&encode_files(&s.vars_files))),
            files_ref: s.vars_files_ref.as_ref().map(|r| words.get(&r.name)),
            vault: s.vault_password_ref.as_ref().map(|r| words.get(&r.name)),
            ssh: s.ssh_auth_ref.as_ref().map(|r| words.get(&r.name)),
            commit: words.get(&s.source.commit),
            revision: words.get(&s.source.revision),
            path: words.get(&s.source.path),
        };
        let entry = Entry {
            id: words.get(&s.id),
            digest: words.get(&s.digest),
            action: words.get(&s.action),
            action_type: s.action_type,
            extra_args: s.extra_args.iter().map(|a| words.get(a)).collect(),
            queue_position: words.get(&s.queue_position),
            on_failure: s.on_failure,
        };
        let spec = Spec {
            origin: origins.share(origin),
            entry: entries.share(entry),
            rest: (rest != ClusterOperationSpec::default()).then(|| Box::new(rest)),
        };
        let status = op.status.as_ref().map(|st| {
            let mut rest = st.clone();
            rest.phase = Phase::default();
            rest.desired_status = None;
            rest.reported = None;
            rest.reported_digest = None;
            let message = rest.message.take().map(|m| words.get(&m));
            Status {
                phase: st.phase,
                message,
                rest: (rest != ClusterOperationStatus::default()).then(|| Box::new(rest)),
            }
        });
        Record { meta, spec, status }
    }

    fn phase(&self) -> Phase {
        self.status.as_ref().map(|s| s.phase).unwrap_or_default()
    }

    /// `status.jobRef`, when set.
    fn job_ref(&self) -> Option<&str> {
        self.status.as_ref()?.rest.as_ref()?.job_ref.as_deref()
    }

    /// Whether its failure's hold on the operations behind it was released (its entry was removed).
    fn hold_released(&self) -> bool {
        let rest = self.status.as_ref().and_then(|s| s.rest.as_ref());
        rest.is_some_and(|r| r.hold_released.is_some())
    }

    /// The rollout this is a current run of, when it is one.
    fn rollout(&self) -> Option<&str> {
        let current = match &self.meta {
            Meta::Slim { current: true, .. } => Some("true"),
            Meta::Slim { marks, .. } => marks.as_ref().and_then(|m| m.current.as_deref()),
            Meta::Whole(m) => m
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_CURRENT))
                .map(String::as_str),
        };
        let rollout = self.spec.rest.as_ref()?.rollout.as_ref()?;
        (current == Some("true")).then_some(rollout.name.as_str())
    }

    /// The state of this run as the wave decisions read it.
    fn run_state(&self) -> RunState {
        let rest = self.status.as_ref().and_then(|s| s.rest.as_deref());
        let message = self.status.as_ref().and_then(|s| s.message.as_deref());
        let said = |word: &str| {
            rest.and_then(|r| r.result.clone())
                .or_else(|| message.map(|m| format!("{word}: {m}")))
                .unwrap_or_else(|| word.to_string())
        };
        match self.phase() {
            Phase::Pending | Phase::Queued => RunState::Pending,
            Phase::Running => RunState::Running,
            Phase::Succeeded => RunState::Succeeded {
                at: rest
                    .and_then(|r| r.end_time.as_ref())
                    .map(|t| t.0)
                    .unwrap_or_else(jiff::Timestamp::now),
            },
            Phase::Failed => RunState::Failed(said("failed")),
            Phase::Canceled => RunState::Canceled(said("canceled")),
        }
    }

    fn resource_version(&self) -> Option<String> {
        match &self.meta {
            Meta::Slim {
                stamp: Some(stamp), ..
            } => Some(stamp.resource_version.to_string()),
            Meta::Slim { marks, .. } => marks.as_ref()?.resource_version.as_deref().map(str::to_string),
            Meta::Whole(m) => m.resource_version.clone(),
        }
    }

    /// `metadata.creationTimestamp`, when set.
    fn created(&self) -> Option<Time> {
        match &self.meta {
            Meta::Slim {
                stamp: Some(stamp), ..
            } => stamp.created(),
            Meta::Slim { marks, .. } => marks.as_ref()?.creation_timestamp.clone(),
            Meta::Whole(m) => m.creation_timestamp.clone(),
        }
    }

    /// The operation as the decisions read it.
    fn operation(&self, name: &str, namespace: &str) -> ClusterOperation {
        let metadata = match &self.meta {
            Meta::Whole(m) => (**m).clone(),
            Meta::Slim {
                stamp,
                hash,
                current,
                marks,
            } => {
                let none = Marks::default();
                let marks = marks.as_deref().unwrap_or(&none);
                let hash_text = hash
                    .map(|h| hex(&h))
                    .or_else(|| marks.hash.as_deref().map(str::to_string));
                let rollout = self.spec.rest.as_ref().and_then(|r| r.rollout.as_ref());
                let rollout = rollout.map(|r| r.name.as_str());
                let pairs = |pairs: [(&str, Option<&str>); 4]| -> BTreeMap<String, String> {
                    pairs
                        .into_iter()
                        .filter_map(|(k, v)| Some((k.to_string(), v?.to_string())))
                        .collect()
                };
                let labels = pairs([
                    (LABEL_CLUSTER, self.spec.origin.cluster_label.as_deref()),
                    (
                        LABEL_CURRENT,
                        current.then_some("true").or(marks.current.as_deref()),
                    ),
                    (LABEL_ROLLOUT, rollout),
                    (LABEL_WAVE, marks.wave.as_deref()),
                ]);
                let annotations = pairs([
                    (ANNOTATION_CONTENT_HASH, hash_text.as_deref()),
                    (ANNOTATION_RECORDED, marks.recorded.as_deref()),
                    ("", None),
                    ("", None),
                ]);
                ObjectMeta {
                    name: Some(name.to_string()),
                    namespace: Some(namespace.to_string()),
                    uid: match stamp {
                        Some(stamp) => Some(stamp.uid()),
                        None => marks.uid.as_deref().map(str::to_string),
                    },
                    resource_version: self.resource_version(),
                    creation_timestamp: self.created(),
                    labels: (!labels.is_empty()).then_some(labels),
                    annotations: (!annotations.is_empty()).then_some(annotations),
                    ..ObjectMeta::default()
                }
            }
        };
        let s = &self.spec;
        let mut spec = s.rest.as_deref().cloned().unwrap_or_default();
        let origin = &s.origin;
        spec.cluster = origin.cluster.to_string();
        let entry = &s.entry;
        spec.id = entry.id.to_string();
        spec.digest = entry.digest.to_string();
        spec.action = entry.action.to_string();
        spec.action_type = entry.action_type;
        spec.extra_args = entry.extra_args.iter().map(|a| a.to_string()).collect();
        spec.image = origin.image.to_string();
        spec.hosts_conf_ref = ConfigMapRef {
            name: origin.hosts.to_string(),
        };
        spec.vars_conf_ref = origin.vars.as_ref().map(|n| ConfigMapRef { name: n.to_string() });
        spec.inventory_file = origin.inventory_file.as_ref().map(|f| f.to_string());
        spec.vars_files = origin.files.as_deref().map(decode_files).unwrap_or_default();
        spec.vars_files_ref = origin
            .files_ref
            .as_ref()
            .map(|n| ConfigMapRef { name: n.to_string() });
        spec.vault_password_ref = origin.vault.as_ref().map(|n| SecretRef { name: n.to_string() });
        spec.ssh_auth_ref = origin.ssh.as_ref().map(|n| SecretRef { name: n.to_string() });
        spec.source = OperationSource {
            commit: origin.commit.to_string(),
            revision: origin.revision.to_string(),
            path: origin.path.to_string(),
        };
        spec.queue_position = entry.queue_position.to_string();
        spec.on_failure = entry.on_failure;
        let status = self.status.as_ref().map(|st| {
            let mut status = st.rest.as_deref().cloned().unwrap_or_default();
            status.phase = st.phase;
            status.message = st.message.as_deref().map(str::to_string);
            status
        });
        ClusterOperation {
            metadata,
            spec,
            status,
        }
    }
}

/// The names of a rollout's current runs, by cluster.
type RunsByCluster = BTreeMap<Arc<str>, BTreeSet<Arc<str>>>;

#[derive(Debug, Default)]
struct Ops {
    by_name: HashMap<Arc<str>, Box<Record>>,
    /// Per cluster (its origin's word), the names of its operations, sorted: the keys of `by_name`, so
    /// the index holds no string of its own, and a record says which cluster's list its name is in.
    by_cluster: NamesByCluster,
    /// Names seen since the watch restarted (a relist), to drop the ones that are gone at its end.
    relisting: Option<HashSet<Arc<str>>>,
    running: BTreeSet<String>,
    /// Each rollout's current runs, by cluster.
    rollouts: HashMap<Arc<str>, RunsByCluster>,
    origins: Shared<Origin>,
    entries: Shared<Entry>,
    words: Words,
}

impl Ops {
    /// Keeps `op`; true when the change may let the operations waiting behind it go (see
    /// [`OpCache::observe`]).
    fn upsert(&mut self, op: &ClusterOperation) -> bool {
        let name = op.metadata.name.as_deref().unwrap_or_default();
        let record = Box::new(Record::new(
            op,
            &mut self.words,
            &mut self.origins,
            &mut self.entries,
        ));
        let lets_go = self.by_name.get(name).is_some_and(|old| {
            (!old.phase().is_terminal() && record.phase().is_terminal())
                || (!old.hold_released() && record.hold_released())
        });
        if record.phase() == Phase::Running {
            self.running.insert(name.to_string());
        } else {
            self.running.remove(name);
        }
        self.unindex(name);
        let cluster = record.spec.origin.cluster.clone();
        // The name is held once: the key of `by_name`, shared by the indexes.
        let (name, listed) = match self.by_name.get_key_value(name) {
            Some((known, old)) if old.spec.origin.cluster == cluster => (known.clone(), true),
            Some((known, old)) => {
                let (known, old) = (known.clone(), old.spec.origin.cluster.clone());
                self.forget_in(&old, &known);
                (known, false)
            }
            None => (Arc::from(name), false),
        };
        if !listed {
            list_in(&mut self.by_cluster, cluster.clone(), name.clone());
        }
        if let Some(rollout) = record.rollout() {
            let rollout = self.words.get(rollout);
            let runs = self.rollouts.entry(rollout).or_default();
            runs.entry(cluster).or_default().insert(name.clone());
        }
        if let Some(seen) = self.relisting.as_mut() {
            seen.insert(name.clone());
        }
        self.by_name.insert(name, record);
        lets_go
    }

    fn remove(&mut self, name: &str) {
        self.unindex(name);
        if let Some((name, old)) = self.by_name.remove_entry(name) {
            self.forget_in(&old.spec.origin.cluster, &name);
        }
        self.running.remove(name);
    }

    fn forget_in(&mut self, cluster: &str, name: &str) {
        unlist_in(&mut self.by_cluster, cluster, name);
    }

    /// The names of `cluster`'s operations, sorted.
    fn names_in(&self, cluster: &str) -> Vec<String> {
        self.by_cluster
            .get(cluster)
            .map(|names| names.iter().map(|n| n.to_string()).collect())
            .unwrap_or_default()
    }

    /// Drops `name` from the per-rollout index, as the record it replaces had it.
    fn unindex(&mut self, name: &str) {
        let Some(old) = self.by_name.get(name) else {
            return;
        };
        let Some(rollout) = old.rollout() else {
            return;
        };
        let Some(runs) = self.rollouts.get_mut(rollout) else {
            return;
        };
        if let Some(names) = runs.get_mut(&*old.spec.origin.cluster) {
            names.remove(name);
            if names.is_empty() {
                runs.remove(&*old.spec.origin.cluster);
            }
        }
        if runs.is_empty() {
            self.rollouts.remove(rollout);
        }
    }

    /// The latest of `names` (the highest `rerun`, then the name).
    fn latest<'n>(&self, names: &'n BTreeSet<Arc<str>>) -> Option<(&'n Arc<str>, &Record)> {
        names
            .iter()
            .filter_map(|n| Some((n, self.by_name.get(n)?.as_ref())))
            .max_by_key(|(n, r)| {
                (
                    r.spec
                        .rest
                        .as_ref()
                        .and_then(|x| x.rollout.as_ref())
                        .map(|x| x.rerun),
                    *n,
                )
            })
    }
}

/// One cluster's queue as the gauges show it ([`OpCache::queue_gauges`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueGauges {
    /// Operations by phase, in phase order; phases without any are left out.
    pub phases: Vec<(Phase, u64)>,
    /// The Pending or Queued operation created first.
    pub oldest: Option<OldestWaiting>,
    /// A run stopped on a failure, did not opt out, and no later run of its id succeeded: it may hold the
    /// cluster (`queue::holds` decides).
    pub any_failed: bool,
}

/// The operation of a cluster that has waited longest to start.
#[derive(Clone, Debug, PartialEq)]
pub struct OldestWaiting {
    /// Operation id.
    pub id: String,
    /// When it was created.
    pub created: jiff::Timestamp,
    /// Pending (not looked at yet) or Queued.
    pub phase: Phase,
    /// Its status message: why it waits.
    pub message: Option<String>,
}

/// The operations kok manages, as records, with their names by cluster and the running ones.
#[derive(Debug)]
pub struct OpCache {
    namespace: String,
    ops: Mutex<Ops>,
    listed: Listed,
}

impl OpCache {
    /// An empty cache of the operations in `namespace`.
    pub fn new(namespace: &str) -> OpCache {
        OpCache {
            namespace: namespace.to_string(),
            ops: Mutex::default(),
            listed: Listed::default(),
        }
    }

    /// Follows one event of the ClusterOperation watch. A relist shows its operations as it goes and
    /// drops, once whole, the ones it did not show.
    ///
    /// Returns true when the event shows a change that may let the operations waiting behind this one
    /// go: it finished, or the hold of its failure was released. Those are woken when the cache has the change, not when it is written: a look before
    /// the cache has it would wait behind the old state.
    pub fn observe(&self, event: &watcher::Event<ClusterOperation>) -> bool {
        let Ok(mut ops) = self.ops.lock() else {
            return false;
        };
        let ops = &mut *ops;
        let mut lets_go = false;
        match event {
            watcher::Event::Apply(op) => lets_go = ops.upsert(op),
            watcher::Event::InitApply(op) => {
                ops.upsert(op);
            }
            watcher::Event::Delete(op) => ops.remove(op.metadata.name.as_deref().unwrap_or_default()),
            watcher::Event::Init => ops.relisting = Some(HashSet::new()),
            watcher::Event::InitDone => {
                if let Some(seen) = ops.relisting.take() {
                    let gone: Vec<Arc<str>> = ops
                        .by_name
                        .keys()
                        .filter(|n| !seen.contains(*n))
                        .cloned()
                        .collect();
                    for name in gone {
                        ops.remove(&name);
                    }
                }
                // Origins and entries first: the words only the dropped ones held are dropped with them.
                ops.origins.sweep();
                ops.entries.sweep();
                ops.words.sweep();
                ops.by_name.shrink_to_fit();
                self.listed.set();
            }
        }
        lets_go
    }

    /// Waits until the watch has listed once.
    pub async fn wait_until_listed(&self) {
        self.listed.wait().await;
    }

    /// Adds to `named` the ConfigMaps some operation pins (its inventory, vars.yml, file list,
    /// group_vars/host_vars and repository files); the file lists operations share are read once.
    pub fn add_named(&self, named: &mut std::collections::HashSet<String>) {
        let Ok(ops) = self.ops.lock() else {
            return;
        };
        let mut lists: std::collections::HashSet<&Arc<str>> = std::collections::HashSet::new();
        for record in ops.by_name.values() {
            let s = &record.spec.origin;
            if let Some(files) = &s.files {
                lists.insert(files);
            }
            for name in [Some(&s.hosts), s.vars.as_ref(), s.files_ref.as_ref()]
                .into_iter()
                .flatten()
            {
                if !named.contains(&**name) {
                    named.insert(name.to_string());
                }
            }
            for f in record.spec.rest.iter().flat_map(|r| &r.repository_files) {
                if !named.contains(&f.config_map) {
                    named.insert(f.config_map.clone());
                }
            }
        }
        for list in lists {
            for f in decode_files(list) {
                named.insert(f.config_map);
            }
        }
    }

    /// How many operations the cache holds.
    pub fn len(&self) -> usize {
        self.ops.lock().map(|o| o.by_name.len()).unwrap_or_default()
    }

    /// True when it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The cached operation `name`, as the decisions read it.
    pub fn get(&self, name: &str) -> Option<ClusterOperation> {
        let ops = self.ops.lock().ok()?;
        Some(ops.by_name.get(name)?.operation(name, &self.namespace))
    }

    /// The phase of `name`, when cached.
    pub fn phase(&self, name: &str) -> Option<Phase> {
        Some(self.ops.lock().ok()?.by_name.get(name)?.phase())
    }

    /// The resourceVersion of `name`, when cached.
    pub fn resource_version(&self, name: &str) -> Option<String> {
        let ops = self.ops.lock().ok()?;
        ops.by_name.get(name)?.resource_version()
    }

    /// Names of the operations of `cluster`, sorted.
    pub fn names_in(&self, cluster: &str) -> Vec<String> {
        self.ops.lock().map(|o| o.names_in(cluster)).unwrap_or_default()
    }

    /// The operations of `cluster`, by name.
    pub fn of_cluster(&self, cluster: &str) -> Vec<(String, ClusterOperation)> {
        let Ok(ops) = self.ops.lock() else {
            return Vec::new();
        };
        ops.names_in(cluster)
            .into_iter()
            .filter_map(|name| {
                let op = ops.by_name.get(name.as_str())?.operation(&name, &self.namespace);
                Some((name, op))
            })
            .collect()
    }

    /// The operations of `cluster` (the decisions' siblings).
    pub fn operations_in(&self, cluster: &str) -> Vec<ClusterOperation> {
        self.of_cluster(cluster).into_iter().map(|(_, op)| op).collect()
    }

    /// Names of the operations of `cluster` in `phases`.
    pub fn names_in_phase(&self, cluster: &str, phases: &[Phase]) -> Vec<String> {
        let Ok(ops) = self.ops.lock() else {
            return Vec::new();
        };
        ops.names_in(cluster)
            .into_iter()
            .filter(|n| {
                ops.by_name
                    .get(n.as_str())
                    .is_some_and(|r| phases.contains(&r.phase()))
            })
            .collect()
    }

    /// The latest current run of rollout `rollout` on each cluster that has one: its name and state.
    /// Read from the per-rollout index, without looking at other operations.
    pub fn rollout_runs(&self, rollout: &str) -> BTreeMap<String, (String, RunState)> {
        let Ok(ops) = self.ops.lock() else {
            return BTreeMap::new();
        };
        let Some(runs) = ops.rollouts.get(rollout) else {
            return BTreeMap::new();
        };
        runs.iter()
            .filter_map(|(cluster, names)| {
                let (name, record) = ops.latest(names)?;
                Some((cluster.to_string(), (name.to_string(), record.run_state())))
            })
            .collect()
    }

    /// Names of the running operations, across clusters.
    pub fn running(&self) -> BTreeSet<String> {
        self.ops.lock().map(|o| o.running.clone()).unwrap_or_default()
    }

    /// Names of the operations not finished yet whose ssh Secret or vault password Secret is `secret`.
    pub fn waiting_on_secret(&self, secret: &str) -> Vec<String> {
        let Ok(ops) = self.ops.lock() else {
            return Vec::new();
        };
        ops.by_name
            .iter()
            .filter(|(_, r)| {
                (r.spec.origin.ssh.as_deref() == Some(secret)
                    || r.spec.origin.vault.as_deref() == Some(secret))
                    && !r.phase().is_terminal()
            })
            .map(|(n, _)| n.to_string())
            .collect()
    }

    /// Per cluster, what the queue gauges show: operations by phase, the longest-waiting one, and whether
    /// a failed run may hold it (only then are its holds worth working out: a run that stopped on a failure
    /// without opting out, and no later run of its id succeeded). Passes over the records, no copies.
    pub fn queue_gauges(&self) -> BTreeMap<String, QueueGauges> {
        let Ok(ops) = self.ops.lock() else {
            return BTreeMap::new();
        };
        // Per (cluster, id): the latest queue position at which a run of it succeeded.
        let mut succeeded: HashMap<(&str, &str), (&str, &str)> = HashMap::new();
        for (name, record) in &ops.by_name {
            if record.phase() == Phase::Succeeded {
                let key = (&*record.spec.origin.cluster, &*record.spec.entry.id);
                let at = (&*record.spec.entry.queue_position, &**name);
                let latest = succeeded.entry(key).or_insert(at);
                if at > *latest {
                    *latest = at;
                }
            }
        }
        let mut by_cluster: BTreeMap<String, QueueGauges> = BTreeMap::new();
        for (name, record) in &ops.by_name {
            let cluster: &str = &record.spec.origin.cluster;
            if !by_cluster.contains_key(cluster) {
                by_cluster.insert(cluster.to_string(), QueueGauges::default());
            }
            let Some(gauges) = by_cluster.get_mut(cluster) else {
                continue;
            };
            let phase = record.phase();
            if let Some(n) = gauges.phases.iter_mut().find(|(p, _)| *p == phase) {
                n.1 += 1;
            } else {
                gauges.phases.push((phase, 1));
            }
            let stopped = match phase {
                Phase::Failed => true,
                Phase::Canceled => record.job_ref().is_some(),
                _ => false,
            };
            if stopped && record.spec.entry.on_failure == OnFailure::Hold {
                let key = (&*record.spec.origin.cluster, &*record.spec.entry.id);
                let at = (&*record.spec.entry.queue_position, &**name);
                gauges.any_failed |= succeeded.get(&key).is_none_or(|later| *later < at);
            }
            if !matches!(phase, Phase::Pending | Phase::Queued) {
                continue;
            }
            let Some(created) = record.created().map(|t| t.0) else {
                continue;
            };
            if gauges.oldest.as_ref().is_none_or(|o| created < o.created) {
                gauges.oldest = Some(OldestWaiting {
                    id: record.spec.entry.id.to_string(),
                    created,
                    phase,
                    message: record
                        .status
                        .as_ref()
                        .and_then(|s| s.message.as_deref())
                        .map(str::to_string),
                });
            }
        }
        for gauges in by_cluster.values_mut() {
            gauges.phases.sort_by_key(|(p, _)| *p as u8);
        }
        by_cluster
    }

    /// The operations with a schedule, as the decisions read them.
    pub fn scheduled(&self) -> Vec<ClusterOperation> {
        let Ok(ops) = self.ops.lock() else {
            return Vec::new();
        };
        ops.by_name
            .iter()
            .filter(|(_, r)| matches!(r.meta, Meta::Whole(_)))
            .map(|(n, r)| r.operation(n, &self.namespace))
            .collect()
    }
}

/// Pinned files as one word: `path`, ConfigMap and `1` for gzip (else `0`), separated by NUL, one file a line.
/// Neither a path from git nor a ConfigMap name holds a NUL or a newline.
fn encode_files(files: &[PinnedFile]) -> String {
    let mut out = String::new();
    for f in files {
        out.push_str(&f.path);
        out.push('\0');
        out.push_str(&f.config_map);
        out.push('\0');
        out.push(if f.gzip { '1' } else { '0' });
        out.push('\n');
    }
    out
}

/// The files [`encode_files`] wrote.
fn decode_files(word: &str) -> Vec<PinnedFile> {
    word.lines()
        .filter_map(|line| {
            let mut parts = line.split('\0');
            Some(PinnedFile {
                path: parts.next()?.to_string(),
                config_map: parts.next()?.to_string(),
                gzip: parts.next()? == "1",
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Hook, LABEL_MANAGED_BY, LABEL_OPERATION};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::ResourceExt;

    fn op(name: &str, cluster: &str, phase: Phase) -> ClusterOperation {
        let mut o = ClusterOperation::new(
            name,
            ClusterOperationSpec {
                cluster: cluster.into(),
                id: "install".into(),
                image: "runner:1".into(),
                ssh_auth_ref: Some(SecretRef { name: "ssh".into() }),
                ..Default::default()
            },
        );
        o.metadata.namespace = Some("kok".into());
        o.metadata.uid = Some(format!("uid-{name}"));
        o.metadata.resource_version = Some("7".into());
        o.status = Some(ClusterOperationStatus {
            phase,
            message: Some("waiting for its Secret".into()),
            ..Default::default()
        });
        o
    }

    fn labelled(mut o: ClusterOperation) -> ClusterOperation {
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
    }

    /// A current run of rollout `up` in wave `rest` at `rerun`.
    fn run(name: &str, cluster: &str, rerun: u64, phase: Phase) -> ClusterOperation {
        let mut o = labelled(op(name, cluster, phase));
        o.spec.cluster = cluster.into();
        o.spec.rollout = Some(crate::api::OperationRollout {
            name: "up".into(),
            rerun,
        });
        let labels = o.metadata.labels.as_mut().unwrap();
        labels.insert(LABEL_CLUSTER.into(), cluster.into());
        labels.insert(LABEL_WAVE.into(), "rest".into());
        o
    }

    #[test]
    fn the_queue_gauges_count_phases_find_the_longest_wait_and_the_failures_that_may_hold() {
        let cache = OpCache::new("kok");
        let at = |o: &mut ClusterOperation, position: &str, created: &str| {
            o.spec.queue_position = position.into();
            o.metadata.creation_timestamp = Some(Time(created.parse().unwrap()));
        };
        let mut failed = labelled(op("a-install-1", "a", Phase::Failed));
        at(&mut failed, "0001", "2026-11-28T01:00:00Z");
        let mut waiting = labelled(op("a-scale-1", "a", Phase::Queued));
        waiting.spec.id = "scale".into();
        waiting.status.as_mut().unwrap().message = Some("held: a/install failed at 0123456".into());
        at(&mut waiting, "0002", "2026-11-28T01:05:00Z");
        let mut newer = waiting.clone();
        newer.metadata.name = Some("a-scale-2".into());
        at(&mut newer, "0003", "2026-11-28T01:10:00Z");
        let mut fixed_failure = labelled(op("b-install-1", "b", Phase::Failed));
        fixed_failure.spec.cluster = "b".into();
        at(&mut fixed_failure, "0001", "2026-11-28T01:00:00Z");
        let mut fixed = labelled(op("b-install-2", "b", Phase::Succeeded));
        fixed.spec.cluster = "b".into();
        at(&mut fixed, "0002", "2026-11-28T01:01:00Z");
        for o in [failed, waiting, newer, fixed_failure, fixed] {
            cache.observe(&watcher::Event::Apply(o));
        }
        let gauges = cache.queue_gauges();
        let a = &gauges["a"];
        assert_eq!(a.phases, [(Phase::Queued, 2), (Phase::Failed, 1)]);
        let oldest = a.oldest.as_ref().unwrap();
        assert_eq!((oldest.id.as_str(), oldest.phase), ("scale", Phase::Queued));
        assert_eq!(
            oldest.created,
            "2026-11-28T01:05:00Z".parse::<jiff::Timestamp>().unwrap()
        );
        assert!(a.any_failed);
        let b = &gauges["b"];
        assert!(
            !b.any_failed,
            "a later run of the failed id succeeded: nothing holds b"
        );
        assert_eq!(b.oldest, None);
    }

    #[test]
    fn the_rollout_index_holds_each_clusters_latest_current_run_and_follows_its_changes() {
        let cache = OpCache::new("kok");
        let seen = |op: ClusterOperation| cache.observe(&watcher::Event::Apply(op));
        seen(run("a-up-1", "a", 0, Phase::Failed));
        seen(run("b-up-1", "b", 0, Phase::Running));
        seen(labelled(op("a-install", "a", Phase::Pending)));
        let states = |c: &OpCache| -> Vec<(String, String, RunState)> {
            c.rollout_runs("up")
                .into_iter()
                .map(|(cluster, (name, state))| (cluster, name, state))
                .collect()
        };
        let failed = RunState::Failed("failed: waiting for its Secret".into());
        assert_eq!(
            states(&cache),
            [
                ("a".into(), "a-up-1".into(), failed.clone()),
                ("b".into(), "b-up-1".into(), RunState::Running)
            ]
        );
        // A rerun: the new run is the latest even before the old one loses its current label.
        seen(run("a-up-2", "a", 1, Phase::Pending));
        assert_eq!(
            states(&cache)[0],
            ("a".into(), "a-up-2".into(), RunState::Pending)
        );
        let mut retired = run("a-up-2", "a", 1, Phase::Canceled);
        retired.metadata.labels.as_mut().unwrap().remove(LABEL_CURRENT);
        seen(retired);
        assert_eq!(
            states(&cache)[0],
            ("a".into(), "a-up-1".into(), failed),
            "no longer current"
        );
        let back = cache.get("b-up-1").unwrap();
        assert_eq!(back.labels()[LABEL_ROLLOUT], "up");
        assert_eq!(back.labels()[LABEL_WAVE], "rest");
        cache.observe(&watcher::Event::Delete(run("b-up-1", "b", 0, Phase::Running)));
        assert_eq!(states(&cache).len(), 1);
        assert!(OpCache::new("kok").rollout_runs("up").is_empty());
    }

    #[test]
    fn a_record_gives_back_the_operation_without_what_kok_does_not_read() {
        let cache = OpCache::new("kok");
        let mut full = labelled(op("a1", "a", Phase::Succeeded));
        full.spec.extra_args = vec!["--limit=node7".into()];
        full.spec.pre_hooks = vec![Hook {
            action: "pre.yml".into(),
            action_type: ActionType::Playbook,
            extra_args: vec![],
        }];
        full.spec.facts_playbook = Some(crate::api::FactsPlaybook {
            path: "playbooks/facts.yml".into(),
            optional: true,
        });
        full.spec.maintenance = Some(crate::api::Maintenance {
            windows: vec![],
            freezes: vec![crate::api::MaintenanceFreeze {
                from: "2026-12-20".into(),
                to: "2027-01-04".into(),
                time_zone: "UTC".into(),
                reason: None,
            }],
        });
        full.spec.ignore_maintenance = true;
        full.spec.start_timeout = Some(120);
        full.spec.repository_files = vec![crate::api::PinnedFile {
            path: "playbooks/hello.yml".into(),
            config_map: "a-file-0123abcd".into(),
            gzip: true,
        }];
        let status = full.status.as_mut().unwrap();
        status.job_ref = Some("kok-a1".into());
        status.result = Some("succeeded".into());
        let delivered = crate::api::CommitStatus {
            context: "kok/a/install".into(),
            state: crate::api::StatusState::Success,
            description: "succeeded".into(),
            target_url: None,
            run: None,
        };
        status.reported_digest = Some(delivered.digest());
        status.desired_status = Some(Box::new(delivered.clone()));
        status.reported = Some(Box::new(delivered));
        cache.observe(&watcher::Event::Apply(full.clone()));

        let back = cache.get("a1").expect("cached");
        let mut want = full.clone();
        want.metadata.labels = Some(
            [(LABEL_CLUSTER, "a"), (LABEL_CURRENT, "true")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        want.metadata.annotations = Some([(ANNOTATION_CONTENT_HASH.to_string(), "h1".to_string())].into());
        want.metadata.owner_references = None;
        let st = want.status.as_mut().unwrap();
        st.desired_status = None;
        st.reported = None;
        st.reported_digest = None;
        assert_eq!(back, want);
        assert_eq!(cache.phase("a1"), Some(Phase::Succeeded));
        assert_eq!(cache.resource_version("a1").as_deref(), Some("7"));

        // A schedule keeps the whole metadata for its runs.
        let mut base = labelled(op("b1", "b", Phase::Pending));
        base.spec.schedule = Some("0 0 3 * * *".into());
        cache.observe(&watcher::Event::Apply(base.clone()));
        let scheduled = cache.scheduled();
        assert_eq!(scheduled.len(), 1);
        assert_eq!(scheduled[0].metadata, base.metadata);
        assert_eq!(scheduled[0].spec, base.spec);
    }

    #[test]
    fn records_share_the_strings_operations_have_in_common() {
        let cache = OpCache::new("kok");
        for i in 0..3 {
            cache.observe(&watcher::Event::Apply(op(&format!("a{i}"), "a", Phase::Queued)));
        }
        let ops = cache.ops.lock().unwrap();
        let images: Vec<&Arc<str>> = ops.by_name.values().map(|r| &r.spec.origin.image).collect();
        assert!(Arc::ptr_eq(images[0], images[1]) && Arc::ptr_eq(images[1], images[2]));
        let messages: Vec<&Arc<str>> = ops
            .by_name
            .values()
            .filter_map(|r| r.status.as_ref()?.message.as_ref())
            .collect();
        assert_eq!(messages.len(), 3);
        assert!(Arc::ptr_eq(messages[0], messages[2]));
        assert!(
            ops.by_name
                .values()
                .all(|r| r.status.as_ref().unwrap().rest.is_none()),
            "a waiting operation keeps nothing apart"
        );
    }

    #[test]
    fn a_commits_operations_share_one_origin_and_an_api_servers_stamp_is_kept_as_numbers() {
        let cache = OpCache::new("kok");
        let at =
            |second: i64, nanosecond: i32| Time(jiff::Timestamp::new(second, nanosecond).expect("a time"));
        let stamped = |name: &str, uid: &str, rv: &str, created: Time| {
            let mut o = op(name, "a", Phase::Queued);
            o.metadata.uid = Some(uid.into());
            o.metadata.resource_version = Some(rv.into());
            o.metadata.creation_timestamp = Some(created);
            o
        };
        let ops = [
            stamped(
                "a0",
                "0f8e2c4a-9b1d-4e3f-a5c7-d9e1f3a5b7c9",
                "1234567",
                at(1_790_000_000, 0),
            ),
            // What an API server would not write stays text: upper case, braces, a leading zero, a
            // fraction of a second.
            stamped(
                "a1",
                "0F8E2C4A-9B1D-4E3F-A5C7-D9E1F3A5B7C9",
                "7",
                at(1_790_000_000, 0),
            ),
            stamped(
                "a2",
                "0f8e2c4a9b1d4e3fa5c7d9e1f3a5b7c9",
                "7",
                at(1_790_000_000, 0),
            ),
            stamped(
                "a3",
                "0f8e2c4a-9b1d-4e3f-a5c7-d9e1f3a5b7c9",
                "07",
                at(1_790_000_000, 0),
            ),
            stamped(
                "a4",
                "0f8e2c4a-9b1d-4e3f-a5c7-d9e1f3a5b7c9",
                "8",
                at(1_790_000_000, 5),
            ),
            stamped("a5", "0f8e2c4a-9b1d-4e3f-a5c7-d9e1f3a5b7cg", "9", at(-5, 0)),
        ];
        for o in &ops {
            cache.observe(&watcher::Event::Apply(o.clone()));
        }
        for o in &ops {
            let name = o.metadata.name.as_deref().unwrap();
            let back = cache.get(name).expect("cached").metadata;
            assert_eq!(back.uid, o.metadata.uid, "{name}");
            assert_eq!(back.resource_version, o.metadata.resource_version, "{name}");
            assert_eq!(back.creation_timestamp, o.metadata.creation_timestamp, "{name}");
        }
        let held = cache.ops.lock().unwrap();
        let stamps: Vec<bool> = ops
            .iter()
            .map(|o| {
                let record = &held.by_name[o.metadata.name.as_deref().unwrap()];
                matches!(record.meta, Meta::Slim { stamp: Some(_), .. })
            })
            .collect();
        assert_eq!(stamps, [true, false, false, false, false, false]);
        let slim = &held.by_name["a0"];
        assert!(
            matches!(slim.meta, Meta::Slim { marks: None, .. }),
            "a run without a rollout or annotations keeps no marks"
        );
        // One origin for the commit's operations: the cluster, image, Secret and source held once.
        let origins: Vec<&Arc<Origin>> = held.by_name.values().map(|r| &r.spec.origin).collect();
        assert!(origins.iter().all(|o| Arc::ptr_eq(o, origins[0])));
        drop(held);

        // Another commit of the cluster is another origin; the first stays while a run names it.
        let mut next = op("a6", "a", Phase::Queued);
        next.spec.source.commit = "c2".into();
        cache.observe(&watcher::Event::Apply(next));
        let held = cache.ops.lock().unwrap();
        assert!(!Arc::ptr_eq(
            &held.by_name["a6"].spec.origin,
            &held.by_name["a0"].spec.origin
        ));
        assert_eq!(
            held.by_name["a6"].spec.origin.image,
            held.by_name["a0"].spec.origin.image
        );
        drop(held);

        // kok's own content hash is kept as its bytes and a current label of `true` as a flag beside
        // it, so a run needs no marks; a hash of another form and another label value stay text. All
        // read back as they were.
        let hashed = |name: &str, hash: &str, current: &str| {
            let mut o = stamped(
                name,
                "0f8e2c4a-9b1d-4e3f-a5c7-d9e1f3a5b7c9",
                "8",
                at(1_790_000_000, 0),
            );
            let pair = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
            o.metadata.labels = Some(pair(LABEL_CURRENT, current));
            o.metadata.annotations = Some(pair(ANNOTATION_CONTENT_HASH, hash));
            o
        };
        let own = hashed("a7", "0123456789abcdef0123456789abcdef", "true");
        let other = hashed("a8", "0123456789ABCDEF0123456789ABCDEF", "false");
        for o in [&own, &other] {
            cache.observe(&watcher::Event::Apply(o.clone()));
            let back = cache
                .get(o.metadata.name.as_deref().unwrap())
                .expect("cached")
                .metadata;
            assert_eq!(back.annotations, o.metadata.annotations);
            assert_eq!(back.labels, o.metadata.labels);
        }
        let held = cache.ops.lock().unwrap();
        assert!(matches!(
            held.by_name["a7"].meta,
            Meta::Slim {
                hash: Some(_),
                current: true,
                marks: None,
                ..
            }
        ));
        assert!(matches!(
            held.by_name["a8"].meta,
            Meta::Slim {
                hash: None,
                marks: Some(_),
                ..
            }
        ));
        drop(held);

        // The same entry of operations.yml in another cluster is held once for both.
        cache.observe(&watcher::Event::Apply(op("b0", "b", Phase::Queued)));
        let held = cache.ops.lock().unwrap();
        let (a0, b0) = (&held.by_name["a0"].spec, &held.by_name["b0"].spec);
        assert!(Arc::ptr_eq(&a0.entry, &b0.entry));
        assert!(!Arc::ptr_eq(&a0.origin, &b0.origin));
    }

    #[test]
    fn the_cache_follows_applies_deletes_and_relists_by_cluster_and_phase() {
        let cache = OpCache::new("kok");
        cache.observe(&watcher::Event::Apply(op("a1", "a", Phase::Running)));
        cache.observe(&watcher::Event::Apply(op("a2", "a", Phase::Queued)));
        cache.observe(&watcher::Event::Apply(op("b1", "b", Phase::Pending)));
        assert_eq!(cache.names_in("a"), ["a1", "a2"]);
        assert_eq!(cache.running(), BTreeSet::from(["a1".to_string()]));
        assert_eq!(cache.names_in_phase("a", &[Phase::Queued]), ["a2"]);
        let mut waiting = cache.waiting_on_secret("ssh");
        waiting.sort();
        assert_eq!(waiting, ["a1", "a2", "b1"]);

        cache.observe(&watcher::Event::Apply(op("a1", "a", Phase::Succeeded)));
        assert!(cache.running().is_empty());
        assert!(!cache.waiting_on_secret("ssh").contains(&"a1".to_string()));
        cache.observe(&watcher::Event::Delete(op("a2", "a", Phase::Queued)));
        assert_eq!(cache.names_in("a"), ["a1"]);
        assert!(cache.get("a2").is_none());

        // A relist that no longer shows b1 drops it, and the cache says it has listed.
        cache.observe(&watcher::Event::Init);
        cache.observe(&watcher::Event::InitApply(op("a1", "a", Phase::Succeeded)));
        assert_eq!(cache.len(), 2, "until the relist is whole, b1 stays");
        cache.observe(&watcher::Event::InitDone);
        assert!(cache.names_in("b").is_empty());
        assert!(cache.get("b1").is_none());
        assert_eq!(cache.len(), 1);
        assert!(cache.listed.is_set());
    }

    #[test]
    fn the_cluster_index_holds_the_records_own_names_and_follows_a_move() {
        let cache = OpCache::new("kok");
        cache.observe(&watcher::Event::Apply(op("a1", "a", Phase::Queued)));
        cache.observe(&watcher::Event::Apply(op("a2", "a", Phase::Queued)));
        cache.observe(&watcher::Event::Apply(op("a1", "a", Phase::Running)));
        {
            let held = cache.ops.lock().unwrap();
            let (key, _) = held.by_name.get_key_value("a1").unwrap();
            assert!(Arc::ptr_eq(key, &held.by_cluster["a"][0]), "one copy of the name");
            assert!(Arc::ptr_eq(
                held.by_cluster.keys().next().unwrap(),
                &held.by_name["a1"].spec.origin.cluster
            ));
        }
        // An object that names another cluster moves to its list; an emptied list goes.
        cache.observe(&watcher::Event::Apply(op("a2", "b", Phase::Queued)));
        assert_eq!(cache.names_in("a"), ["a1"]);
        assert_eq!(cache.names_in("b"), ["a2"]);
        cache.observe(&watcher::Event::Delete(op("a1", "a", Phase::Running)));
        assert!(cache.names_in("a").is_empty());
        assert!(cache.running().is_empty());
        assert_eq!(cache.ops.lock().unwrap().by_cluster.len(), 1);
    }

    #[test]
    fn a_change_lets_the_waiting_go_when_its_operation_finishes_or_its_hold_is_released() {
        let cache = OpCache::new("kok");
        let apply = |o: ClusterOperation| cache.observe(&watcher::Event::Apply(o));
        assert!(!apply(op("a1", "a", Phase::Queued)), "new, not finished");
        assert!(!apply(op("a1", "a", Phase::Running)));
        assert!(apply(op("a1", "a", Phase::Failed)), "finished");
        assert!(
            !apply(op("a1", "a", Phase::Failed)),
            "finished before: a later change of it is not"
        );
        let mut released = op("a1", "a", Phase::Failed);
        released.status.as_mut().unwrap().hold_released = Some("a/install removed".into());
        assert!(apply(released.clone()), "its hold released");
        assert!(!apply(released));
        // A relist shows what is there; the reconciles it triggers look at every operation anyway.
        cache.observe(&watcher::Event::Init);
        assert!(!cache.observe(&watcher::Event::InitApply(op("a2", "a", Phase::Succeeded))));
    }
}
