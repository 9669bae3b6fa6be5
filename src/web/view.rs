//! The read-only view the pages are rendered from: snapshots of the controller's watch caches.
//!
//! A page asks the view, never the API server; the view hands out copies, so nothing a handler does
//! reaches back into the caches. Health and maintenance windows come with the Clusters (their status
//! and spec); what only git knows (a commit's author and subject, the statuses kok noted on it, a
//! revision's inventory) is read from the source's local cache repository ([`GitRecords`]), each answer
//! kept, so a page view costs no request to anything but the local disk, and that once. A pull
//! request head's plan comes from the index the service keeps beside its watch caches.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use kube::ResourceExt;
use serde::Serialize;

use crate::api::{
    CertificateExpiry, CertificateSource, Cluster, ClusterOperation, ClusterOperationSpec,
    ClusterOperationStatus, ClusterSource, ClusterSpec, ClusterStatus, ConfigMapRef, FleetRollout,
    NodeCounts, OperationSource, Phase,
};
use crate::controller::live::LiveCache;
use crate::layout::Inventory;
use crate::report::notes::{read_notes, NoteEntry};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// A commit as the changelog shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CommitMeta {
    /// Author name.
    pub author: String,
    /// First line of the message.
    pub subject: String,
    /// Commit time, RFC 3339 in UTC.
    pub date: String,
}

/// What the pages may read.
pub trait View: Send + Sync {
    /// Every Cluster kok manages.
    fn clusters(&self) -> Vec<Cluster>;
    /// The operations of `cluster`, in no particular order.
    fn operations_of(&self, cluster: &str) -> Vec<ClusterOperation>;
    /// One operation by name.
    fn operation(&self, name: &str) -> Option<ClusterOperation>;
    /// Every rollout's `FleetRollout`, in no particular order.
    fn rollouts(&self) -> Vec<FleetRollout> {
        Vec::new()
    }
    /// The latest run of rollout `rollout` on each cluster that has one, by cluster.
    fn rollout_runs(&self, _rollout: &str) -> BTreeMap<String, ClusterOperation> {
        BTreeMap::new()
    }
    /// A number that changes whenever what the view shows may have changed (0 when it cannot tell).
    fn version(&self) -> u64 {
        0
    }
    /// Author, subject and time of commit `sha`, when the repository has it.
    fn commit_meta(&self, _sha: &str) -> Option<CommitMeta> {
        None
    }
    /// The statuses kok noted on commit `sha` (`refs/notes/kok`), in the order they first appeared.
    fn notes(&self, _sha: &str) -> Vec<NoteEntry> {
        Vec::new()
    }
    /// The inventory (`hosts.yml`) of cluster directory `dir` at commit `sha`.
    fn inventory(&self, _sha: &str, _dir: &str) -> Option<Arc<Inventory>> {
        None
    }
    /// The plan kok made of commit `sha` as a pull request's head, as text, while it keeps it.
    fn plan(&self, _sha: &str) -> Option<String> {
        None
    }
}

/// Most answers [`GitRecords`] keeps of each kind; past it, it starts over.
const KEPT: usize = 4096;

/// What the pages read of the source's cache repository, each answer kept: commits never change, and a
/// revision's inventory neither. Notes do change, and are read each time (one blob, on a commit's page).
#[derive(Debug, Default)]
pub struct GitRecords {
    repo: PathBuf,
    commits: Mutex<HashMap<String, CommitMeta>>,
    inventories: Mutex<HashMap<(String, String), Arc<Inventory>>>,
}

fn kept<K: std::hash::Hash + Eq, V: Clone>(
    cache: &Mutex<HashMap<K, V>>,
    key: K,
    read: impl FnOnce() -> Option<V>,
) -> Option<V> {
    if let Some(v) = cache.lock().ok()?.get(&key) {
        return Some(v.clone());
    }
    // Read outside the lock; a miss is not kept (the commit may arrive with the next fetch).
    let v = read()?;
    if let Ok(mut cache) = cache.lock() {
        if cache.len() >= KEPT {
            cache.clear();
        }
        cache.insert(key, v.clone());
    }
    Some(v)
}

impl GitRecords {
    /// Records read from the repository at `repo` (bare or not).
    pub fn new(repo: impl Into<PathBuf>) -> GitRecords {
        GitRecords {
            repo: repo.into(),
            ..GitRecords::default()
        }
    }

    fn open(&self) -> Option<git2::Repository> {
        git2::Repository::open(&self.repo).ok()
    }

    fn commit_meta(&self, sha: &str) -> Option<CommitMeta> {
        kept(&self.commits, sha.to_string(), || {
            let repo = self.open()?;
            let commit = repo.find_commit(git2::Oid::from_str(sha).ok()?).ok()?;
            let author = commit.author();
            let date = jiff::Timestamp::from_second(commit.time().seconds())
                .map(|t| t.to_string())
                .unwrap_or_default();
            Some(CommitMeta {
                author: String::from_utf8_lossy(author.name_bytes()).into_owned(),
                subject: String::from_utf8_lossy(commit.summary_bytes().unwrap_or_default()).into_owned(),
                date,
            })
        })
    }

    fn inventory(&self, sha: &str, dir: &str) -> Option<Arc<Inventory>> {
        kept(&self.inventories, (sha.to_string(), dir.to_string()), || {
            let repo = self.open()?;
            let tree = crate::source::GitTree::at_commit(&repo, git2::Oid::from_str(sha).ok()?).ok()?;
            let files = crate::layout::read_inventory_dir_at(&tree, dir)?;
            files.inventory().map(Arc::new)
        })
    }
}

/// Where the service hands its watch caches to the view once it has made them.
pub type CacheSlot = Arc<OnceLock<Arc<LiveCache>>>;

/// The view over the service's watch caches; empty until the service has filled the slot.
#[derive(Clone, Debug, Default)]
pub struct CacheView {
    slot: CacheSlot,
    git: Option<Arc<GitRecords>>,
}

impl CacheView {
    /// A view whose caches the service fills through [`CacheView::slot`].
    pub fn new() -> Self {
        CacheView::default()
    }

    /// The slot the service puts its caches in.
    pub fn slot(&self) -> CacheSlot {
        self.slot.clone()
    }

    /// This view, reading commits, notes and inventories from the source's cache repository `repo`.
    pub fn with_repository(mut self, repo: impl Into<PathBuf>) -> Self {
        self.git = Some(Arc::new(GitRecords::new(repo)));
        self
    }
}

impl View for CacheView {
    fn clusters(&self) -> Vec<Cluster> {
        let Some(live) = self.slot.get() else {
            return Vec::new();
        };
        live.clusters.state().iter().map(|c| Cluster::clone(c)).collect()
    }

    fn operations_of(&self, cluster: &str) -> Vec<ClusterOperation> {
        self.slot
            .get()
            .map(|live| live.operations.operations_in(cluster))
            .unwrap_or_default()
    }

    fn operation(&self, name: &str) -> Option<ClusterOperation> {
        self.slot.get()?.operations.get(name)
    }

    fn rollouts(&self) -> Vec<FleetRollout> {
        let Some(live) = self.slot.get() else {
            return Vec::new();
        };
        live.rollouts
            .state()
            .iter()
            .map(|r| FleetRollout::clone(r))
            .collect()
    }

    fn rollout_runs(&self, rollout: &str) -> BTreeMap<String, ClusterOperation> {
        let Some(live) = self.slot.get() else {
            return BTreeMap::new();
        };
        live.operations
            .rollout_runs(rollout)
            .into_iter()
            .filter_map(|(cluster, (name, _))| Some((cluster, live.operations.get(&name)?)))
            .collect()
    }

    fn version(&self) -> u64 {
        self.slot.get().map(|live| live.progress()).unwrap_or(0)
    }

    fn commit_meta(&self, sha: &str) -> Option<CommitMeta> {
        self.git.as_ref()?.commit_meta(sha)
    }

    fn notes(&self, sha: &str) -> Vec<NoteEntry> {
        let Some(git) = &self.git else {
            return Vec::new();
        };
        read_notes(&git.repo, sha).unwrap_or_default()
    }

    fn inventory(&self, sha: &str, dir: &str) -> Option<Arc<Inventory>> {
        self.git.as_ref()?.inventory(sha, dir)
    }

    fn plan(&self, sha: &str) -> Option<String> {
        self.slot.get()?.plans.get(sha).map(|p| p.to_string())
    }
}

/// A fixed set of objects as a view: tests and the benchmark.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The Clusters.
    pub clusters: Vec<Cluster>,
    /// The operations of every cluster.
    pub operations: Vec<ClusterOperation>,
    /// Commits by sha.
    pub commits: HashMap<String, CommitMeta>,
    /// Noted statuses by commit sha.
    pub notes: HashMap<String, Vec<NoteEntry>>,
    /// Inventories by commit sha and cluster directory.
    pub inventories: HashMap<(String, String), Arc<Inventory>>,
    /// Pull-request plans by head sha.
    pub plans: HashMap<String, String>,
    /// The rollouts.
    pub rollouts: Vec<FleetRollout>,
}

impl View for Snapshot {
    fn clusters(&self) -> Vec<Cluster> {
        self.clusters.clone()
    }

    fn operations_of(&self, cluster: &str) -> Vec<ClusterOperation> {
        self.operations
            .iter()
            .filter(|op| op.spec.cluster == cluster)
            .cloned()
            .collect()
    }

    fn operation(&self, name: &str) -> Option<ClusterOperation> {
        self.operations.iter().find(|op| op.name_any() == name).cloned()
    }

    fn rollouts(&self) -> Vec<FleetRollout> {
        self.rollouts.clone()
    }

    /// The newest run (by creation, then name) of each cluster among the operations that are runs of
    /// `rollout`.
    fn rollout_runs(&self, rollout: &str) -> BTreeMap<String, ClusterOperation> {
        let mut runs: BTreeMap<String, ClusterOperation> = BTreeMap::new();
        let of_it = |op: &&ClusterOperation| op.spec.rollout.as_ref().is_some_and(|r| r.name == rollout);
        for op in self.operations.iter().filter(of_it) {
            let newer = |old: &ClusterOperation| {
                let key =
                    |o: &ClusterOperation| (o.metadata.creation_timestamp.clone().map(|t| t.0), o.name_any());
                key(op) > key(old)
            };
            if runs.get(&op.spec.cluster).is_none_or(newer) {
                runs.insert(op.spec.cluster.clone(), op.clone());
            }
        }
        runs
    }

    fn commit_meta(&self, sha: &str) -> Option<CommitMeta> {
        self.commits.get(sha).cloned()
    }

    fn notes(&self, sha: &str) -> Vec<NoteEntry> {
        self.notes.get(sha).cloned().unwrap_or_default()
    }

    fn inventory(&self, sha: &str, dir: &str) -> Option<Arc<Inventory>> {
        self.inventories.get(&(sha.to_string(), dir.to_string())).cloned()
    }

    fn plan(&self, sha: &str) -> Option<String> {
        self.plans.get(sha).cloned()
    }
}

/// The instant the sample operations start at: 2026-01-01T00:00:00Z.
const SAMPLE_START: i64 = 1_767_225_600;

impl Snapshot {
    /// A fleet of `clusters` clusters as the fleet page's size test and the benchmark measure it: each
    /// with a label, health conditions, a version and Node counts, and one to four operations (succeeded,
    /// failed, running, queued) whose messages are as long as the ones kok writes.
    pub fn sample_fleet(clusters: usize) -> Snapshot {
        let mut view = Snapshot::default();
        for i in 0..clusters {
            let name = format!("prod-region-{i:04}");
            let mut cluster = Cluster::new(&name, Snapshot::sample_spec(&name));
            cluster.metadata.labels = Some([("region".to_string(), format!("r{}", i % 8))].into());
            cluster.status = Some(Snapshot::sample_health(i % 10 != 0));
            view.clusters.push(cluster);
            let phases = [Phase::Succeeded, Phase::Failed, Phase::Running, Phase::Queued];
            for (j, phase) in phases.into_iter().enumerate().take(i % 4 + 1) {
                let message = match phase {
                    Phase::Failed => "failed at TASK [kubernetes/control-plane : Kubeadm | Initialize first \
                                      control plane node] on node1: non-zero return code"
                        .to_string(),
                    Phase::Queued => {
                        format!(
                            "waiting for running operation {name}-operation-2-0123abcd of the same cluster"
                        )
                    }
                    _ => "succeeded in 3m12s: 5 hosts, 41 changed".to_string(),
                };
                let id = format!("operation-{j}");
                view.operations
                    .push(Snapshot::sample_operation(&name, &id, phase, message));
            }
        }
        view
    }

    /// The spec of sample cluster `name`: its ConfigMaps named after it, nothing else set.
    pub fn sample_spec(name: &str) -> ClusterSpec {
        ClusterSpec {
            hosts_conf_ref: ConfigMapRef {
                name: format!("{name}-hosts"),
            },
            vars_conf_ref: Some(ConfigMapRef {
                name: format!("{name}-vars"),
            }),
            inventory_file: None,
            vars_files: Vec::new(),
            vars_files_ref: None,
            vault_password_ref: None,
            ssh_auth_ref: None,
            defaults: Default::default(),
            source: ClusterSource::default(),
            kubeconfig_secret_ref: None,
            maintenance: None,
            certificate_window_days: None,
            kubernetes: None,
        }
    }

    /// A Cluster status as the health checks leave it: every check held (5 of 5 Nodes Ready), or a Node
    /// is not Ready (4 of 5); its Ready condition says it names no ssh Secret.
    pub fn sample_health(held: bool) -> ClusterStatus {
        let condition = |type_: &str, ok: bool, reason: &str| Condition {
            type_: type_.into(),
            status: if ok { "True" } else { "False" }.into(),
            reason: reason.into(),
            message: format!("{type_} message"),
            last_transition_time: Time(jiff::Timestamp::from_second(SAMPLE_START).unwrap_or_default()),
            observed_generation: None,
        };
        let (nodes, healthy) = if held {
            ("AllNodesReady", "AllChecksPassed")
        } else {
            ("NodesNotReady", "ChecksFailed")
        };
        ClusterStatus {
            conditions: vec![
                condition("Ready", true, "NoSecret"),
                condition("Reachable", true, "ApiServerAnswers"),
                condition("NodesReady", held, nodes),
                condition("Healthy", held, healthy),
                condition(
                    "CertificatesValid",
                    held,
                    if held {
                        "CertificatesValid"
                    } else {
                        "CertificateExpiresSoon"
                    },
                ),
            ],
            kubernetes_version: Some("v1.31.4".into()),
            nodes: Some(NodeCounts {
                ready: if held { 5 } else { 4 },
                total: 5,
                summary: String::new(),
            }),
            certificates: vec![CertificateExpiry {
                source: CertificateSource::ApiServer,
                subject: "kube-apiserver".into(),
                not_after: Time(
                    jiff::Timestamp::from_second(SAMPLE_START + if held { 300 } else { 10 } * 86_400)
                        .unwrap_or_default(),
                ),
            }],
            ..Default::default()
        }
    }

    /// Operation `id` of `cluster` (named `<cluster>-<id>-0123abcd`, from commit [`SAMPLE_COMMIT`]) in
    /// `phase` with `message`: started at 2026-01-01T00:00:00Z unless it waits, and run for 3m12s if it
    /// finished.
    pub fn sample_operation(cluster: &str, id: &str, phase: Phase, message: String) -> ClusterOperation {
        let mut op = ClusterOperation::new(
            &format!("{cluster}-{id}-0123abcd"),
            ClusterOperationSpec {
                cluster: cluster.into(),
                id: id.into(),
                action: "cluster.yml".into(),
                source: OperationSource {
                    commit: SAMPLE_COMMIT.into(),
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        let start = jiff::Timestamp::from_second(SAMPLE_START).unwrap_or_default();
        op.status = Some(ClusterOperationStatus {
            phase,
            start_time: (!matches!(phase, Phase::Queued | Phase::Pending)).then_some(Time(start)),
            end_time: phase
                .is_terminal()
                .then(|| Time(start + jiff::SignedDuration::from_secs(192))),
            message: Some(message),
            ..Default::default()
        });
        op
    }
}

/// The commit of the sample operations.
pub const SAMPLE_COMMIT: &str = "c0ffee0123456789";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_s_author_and_subject_and_its_inventory_are_read_from_the_repository_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let sha = commit_with_inventory(dir.path());

        let view = CacheView::new().with_repository(dir.path());
        let meta = view.commit_meta(&sha).expect("the commit");
        assert_eq!(
            meta,
            CommitMeta {
                author: "Ada Lovelace".into(),
                subject: "Add prod".into(),
                date: "2026-01-01T00:00:00Z".into(),
            }
        );
        let inventory = view.inventory(&sha, "clusters/prod").expect("the inventory");
        assert_eq!(inventory.hosts.iter().collect::<Vec<_>>(), ["node1"]);
        assert!(view.inventory(&sha, "clusters/other").is_none());
        assert!(view.commit_meta(&"0".repeat(40)).is_none());
        assert!(view.notes(&sha).is_empty());

        // Kept: the answers stay when the repository goes.
        dir.close().unwrap();
        assert_eq!(
            view.commit_meta(&sha).map(|m| m.author),
            Some("Ada Lovelace".into())
        );
        assert!(view.inventory(&sha, "clusters/prod").is_some());
    }

    /// A bare repository at `path` with one commit holding `clusters/prod/hosts.yml`; its sha.
    fn commit_with_inventory(path: &std::path::Path) -> String {
        let repo = git2::Repository::init_bare(path).unwrap();
        let hosts = repo
            .blob(b"all:\n  hosts:\n    node1:\n      ansible_host: 10.0.0.1\n")
            .unwrap();
        let mut cluster = repo.treebuilder(None).unwrap();
        cluster.insert("hosts.yml", hosts, 0o100644).unwrap();
        let cluster = cluster.write().unwrap();
        let mut clusters = repo.treebuilder(None).unwrap();
        clusters.insert("prod", cluster, 0o040000).unwrap();
        let clusters = clusters.write().unwrap();
        let mut root = repo.treebuilder(None).unwrap();
        root.insert("clusters", clusters, 0o040000).unwrap();
        let tree = repo.find_tree(root.write().unwrap()).unwrap();
        let who = git2::Signature::new(
            "Ada Lovelace",
            "ada@example.com",
            &git2::Time::new(1_767_225_600, 0),
        )
        .unwrap();
        let sha = repo
            .commit(None, &who, &who, "Add prod\n\nwith one node", &tree, &[])
            .unwrap();
        sha.to_string()
    }
}
