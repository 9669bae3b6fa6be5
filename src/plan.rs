//! What a commit range would make kok do: the plan (objects created, updated and deleted per
//! cluster, operations that would run, what kubespray's pre-flight rules find), decided by the functions
//! that decide apply's writes, its `kok/plan` status and its text and markdown renderings. Shared by
//! `kok plan` and the service's pull-request plans.

mod rollouts;

use std::collections::{BTreeMap, BTreeSet};

use git2::Oid;
use serde::Serialize;

use kube::ResourceExt;

use crate::api::{ClusterOperation, FactsPlaybook, FleetRollout, Phase, LABEL_CURRENT, LABEL_ROLLOUT};
use crate::controller::live::LiveCache;
use crate::controller::wave::RunState;
use crate::layout::{self, Diagnostic};
use crate::materialize::apply::{self, decide_cluster, decide_removal, Change, Live, Write};
use crate::materialize::preflight::{self as pinning, Seen};
use crate::materialize::render::with_revision;
use crate::materialize::rollout::wave_of;
use crate::materialize::{fleet, DesiredCluster, RenderContext};
use crate::source::attribution::to_render_attribution;
use crate::source::verify::CommitSignature;
use crate::source::{read_commit, CommitRead, GitTree, SourceError};

pub use rollouts::{
    rollouts_at, PlannedRerun, PlannedRollouts, PlannedWave, RolloutChange, RolloutFiles, RolloutPlan,
};

/// Why a plan could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// Reading the commits of the range failed.
    #[error(transparent)]
    Read(#[from] SourceError),
    /// Reading the live objects of the meta-cluster failed.
    #[error("reading the live objects the plan starts from: {0}")]
    Live(#[from] apply::ApplyError),
    /// Listing the runs of a rollout whose `rerun` the range bumps failed.
    #[error("listing the ClusterOperations of rollout {rollout} in namespace {namespace} failed: {source}")]
    RolloutRuns {
        /// Rollout name.
        rollout: String,
        /// Namespace.
        namespace: String,
        /// What the API server said.
        #[source]
        source: Box<kube::Error>,
    },
}

/// One write, by the kind and name of its object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct ObjectRef {
    /// Kubernetes kind.
    pub kind: String,
    /// Object name.
    pub name: String,
    /// What the write does.
    pub what: String,
}

/// An operation that would run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedOperation {
    /// Operation id.
    pub id: String,
    /// ClusterOperation name.
    pub name: String,
    /// Playbook or script.
    pub action: String,
    /// Full sha of the commit that introduced it.
    pub commit: String,
    /// Subject of that commit.
    pub subject: String,
    /// Position of that commit in the range, oldest first.
    pub commit_index: usize,
    /// The playbook run first without `--limit` (a playbook step limits its hosts), from `factsPlaybook`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub facts_playbook: Option<FactsPlaybook>,
    /// For a cluster's run of a rollout: the rollout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout: Option<String>,
    /// For a cluster's run of a rollout: the wave that took the cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wave: Option<String>,
    /// `preflight: false` in operations.yml: kubespray's pre-flight rules are not checked for it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub preflight_skipped: bool,
    /// `allowReleaseSkip: true` in operations.yml: it may move the cluster over a kubespray minor release.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub allow_release_skip: bool,
}

impl PlannedOperation {
    /// `scale.yml`, or `playbooks/facts.yml (without --limit), then scale.yml` when a facts step runs first.
    pub fn steps(&self) -> String {
        match &self.facts_playbook {
            Some(f) => format!("{} (without --limit), then {}", f.path, self.action),
            None => self.action.clone(),
        }
    }

    /// ` in wave canary of rollout upgrade-1-31`, or nothing for an entry of operations.yml.
    pub fn rollout_text(&self) -> String {
        match (&self.rollout, &self.wave) {
            (Some(rollout), Some(wave)) => format!(" in wave {wave} of rollout {rollout}"),
            (Some(rollout), None) => format!(" of rollout {rollout}"),
            _ => String::new(),
        }
    }

    /// ` [preflight: false, allowReleaseSkip: true]` for the switches it sets, or nothing.
    pub fn switches_text(&self) -> String {
        let mut set = Vec::new();
        if self.preflight_skipped {
            set.push("preflight: false");
        }
        if self.allow_release_skip {
            set.push("allowReleaseSkip: true");
        }
        match set.is_empty() {
            true => String::new(),
            false => format!(" [{}]", set.join(", ")),
        }
    }
}

/// One finding of kubespray's pre-flight rules (see [`crate::preflight`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlannedFinding {
    /// The rule's stable id, e.g. `etcd-odd`.
    pub rule: String,
    /// An error fails the plan and refuses the operations it is about; a warning is shown.
    pub severity: layout::Severity,
    /// The file of the repository it is about, relative to the root.
    pub path: String,
    /// 1-based line; 0 for the file as a whole.
    pub line: usize,
    /// The operation it is about, if one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    /// What is wrong and what to do.
    pub message: String,
    /// What the rule comes from: a kubespray file and line at a release, or a document.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cites: Option<String>,
    /// For a refused version jump: the commits of the whole upgrade path, ready to paste.
    #[serde(rename = "upgradePath", skip_serializing_if = "Option::is_none")]
    pub upgrade_path: Option<String>,
}

impl PlannedFinding {
    fn of(finding: &crate::preflight::Finding) -> PlannedFinding {
        PlannedFinding {
            rule: finding.rule.id().to_string(),
            severity: finding.severity,
            path: finding.path.clone(),
            line: finding.line,
            operation: finding.operation.clone(),
            message: finding.message.clone(),
            cites: finding.cites.as_ref().map(ToString::to_string),
            upgrade_path: finding.upgrade_path.clone(),
        }
    }

    /// `clusters/prod-bj/hosts.yml:12`, or the path alone for the file as a whole.
    pub fn location(&self) -> String {
        match self.line {
            0 => self.path.clone(),
            line => format!("{}:{line}", self.path),
        }
    }

    /// `error` or `warning`.
    pub fn severity_word(&self) -> &'static str {
        match self.severity {
            layout::Severity::Error => "error",
            layout::Severity::Warning => "warning",
        }
    }
}

/// The plan of one cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ClusterPlan {
    /// Cluster name.
    pub name: String,
    /// Objects created, one write each.
    pub created: Vec<ObjectRef>,
    /// Objects written again, one entry per write (a canceled operation is two: its status and its
    /// label).
    pub updated: Vec<ObjectRef>,
    /// Objects deleted.
    pub deleted: Vec<ObjectRef>,
    /// Operations that would run, in commit order then file order.
    pub operations: Vec<PlannedOperation>,
    /// Scale-down order problems (promise 7): a new operation naming a host the range removes from
    /// hosts.yml, or a host removed that no new operation names.
    pub warnings: Vec<String>,
    /// The cluster's labels (`labels` in cluster.yml and kok.yml), as its Cluster object carries them.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// What kubespray's pre-flight rules find: about the cluster at the end of the range, and about the
    /// operations that would run. An error refuses those operations before their Job.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub preflight: Vec<PlannedFinding>,
}

impl ClusterPlan {
    /// `env=prod, region=bj`.
    pub fn labels_text(&self) -> String {
        let pairs: Vec<String> = self.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        pairs.join(", ")
    }
}

/// A cluster that is invalid at `to`: nothing of it changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InvalidCluster {
    /// Cluster name.
    pub name: String,
    /// Its diagnostics at `to`.
    pub diagnostics: Vec<Diagnostic>,
}

/// What a commit range would change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    /// Start of the range (exclusive); `None` when `to` has no parent.
    pub from: Option<String>,
    /// End of the range.
    pub to: String,
    /// Commits in the range on the first-parent path.
    pub commits: usize,
    /// True when `from` is not an ancestor of `to`: every cluster was compared.
    pub full_resync: bool,
    /// Clusters with changes, sorted by name.
    pub clusters: Vec<ClusterPlan>,
    /// Clusters left at their last good state because they are invalid at `to`.
    pub invalid: Vec<InvalidCluster>,
    /// Rollouts the range adds, changes, removes or breaks, with their waves as the merge makes them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rollouts: Vec<RolloutPlan>,
    /// Repository-wide diagnostics at `to` (kok.yml).
    pub repo_diagnostics: Vec<Diagnostic>,
    /// The signature state of every commit of the range, newest first.
    pub signatures: Vec<CommitSignature>,
}

impl Plan {
    /// True when the merge would write an object or run an operation.
    pub fn has_changes(&self) -> bool {
        !self.clusters.is_empty() || self.rollouts.iter().any(|r| r.change != RolloutChange::Invalid)
    }

    /// True when a cluster, kok.yml or a rollout file is invalid at `to`, or a pre-flight rule fails.
    pub fn has_errors(&self) -> bool {
        !self.invalid.is_empty()
            || !self.repo_diagnostics.is_empty()
            || self.rollouts.iter().any(RolloutPlan::has_errors)
            || self.first_preflight_error().is_some()
    }

    /// The first pre-flight error of the plan, with its cluster.
    pub fn first_preflight_error(&self) -> Option<(&str, &PlannedFinding)> {
        self.clusters.iter().find_map(|c| {
            c.preflight
                .iter()
                .find(|f| f.severity == layout::Severity::Error)
                .map(|f| (c.name.as_str(), f))
        })
    }
}

/// What a plan reads of git: the commit `to` as the service's pass reads it against `from`, rendered as
/// the pass renders it, and (for a plan without a meta-cluster) the clusters as `from` renders them.
pub struct Prepared {
    from: Option<Oid>,
    to: Oid,
    commits: usize,
    read: CommitRead,
    desired: Vec<DesiredCluster>,
    at_from: BTreeMap<String, DesiredCluster>,
    hosts_at_from: BTreeMap<String, BTreeSet<String>>,
    /// Per cluster at `from`, its inventory and fixed settings (pre-flight's rules 11 and 12).
    before_at_from: BTreeMap<String, crate::preflight::Before>,
    subjects: BTreeMap<String, String>,
    /// Clusters unchanged in the range whose runs of a changed rollout may change, parsed at `to`.
    widened: Vec<layout::ClusterDir>,
    rollouts: PlannedRollouts,
}

impl Prepared {
    /// The clusters whose live objects the plan compares against.
    pub fn cluster_names(&self) -> BTreeSet<String> {
        self.desired
            .iter()
            .map(|d| d.name.clone())
            .chain(self.read.changes.removed.iter().cloned())
            .collect()
    }

    /// True when `from` is not an ancestor of `to`: every cluster is compared and the others pruned.
    pub fn full_resync(&self) -> bool {
        self.read.changes.full_resync
    }

    /// The rollouts whose `rerun` the range bumps and whose operation it leaves alone: the plan
    /// names the clusters they run again from the runs the meta-cluster holds.
    pub fn rerun_bumps(&self) -> Vec<String> {
        self.rollouts.rerun_bumps()
    }

    /// True when either end of the range has rollout files: the plan reads the live rollout objects.
    pub fn has_rollouts(&self) -> bool {
        self.rollouts.to.is_some() || self.rollouts.from.is_some()
    }

    /// The parsed cluster `name` at `to`, changed in the range or widened to by a rollout.
    fn cluster(&self, name: &str) -> Option<&layout::ClusterDir> {
        self.read
            .parsed
            .clusters
            .iter()
            .chain(&self.widened)
            .find(|c| c.name == name)
    }

    /// The live objects as the service would have left them after reconciling `from`, none of its
    /// operations started: for a plan without a meta-cluster.
    pub fn simulated_baseline(&self) -> Baseline {
        let clusters = self
            .at_from
            .iter()
            .map(|(n, d)| (n.clone(), simulate_live(d)))
            .collect();
        Baseline {
            clusters,
            names: self.at_from.keys().cloned().collect(),
            rollouts: self.rollouts.at_from.clone(),
            rollout_runs: BTreeMap::new(),
            simulated: true,
        }
    }
}

/// The live objects a plan starts from: per cluster, and the names of every Cluster kok manages.
#[derive(Clone, Debug, Default)]
pub struct Baseline {
    /// Live objects of the clusters the plan compares.
    pub clusters: BTreeMap<String, Live>,
    /// Names of every managed Cluster (read only for a full resync).
    pub names: BTreeSet<String>,
    /// The `FleetRollout` objects (read only when either end of the range has rollout files).
    pub rollouts: Vec<FleetRollout>,
    /// Per rollout whose `rerun` the range bumps, the latest run of each of its clusters (read only
    /// from a meta-cluster: without one, which runs failed is not known).
    pub rollout_runs: BTreeMap<String, BTreeMap<String, RunState>>,
    /// True when the live objects are the render of the range's start (no meta-cluster): none of its
    /// operations ran, and a `cluster.yml` entry there counts as the cluster installed for pre-flight.
    pub simulated: bool,
}

/// Reads the baseline from the meta-cluster: three lists per cluster compared, one more on a full resync.
pub async fn live_baseline(
    client: &kube::Client,
    namespace: &str,
    prepared: &Prepared,
) -> Result<Baseline, PlanError> {
    baseline_from(client, namespace, None, prepared).await
}

/// [`live_baseline`] from the service's watch caches: no request, but for a cluster whose last writes
/// the caches do not show yet (that one is listed).
pub async fn cached_baseline(
    client: &kube::Client,
    namespace: &str,
    cache: &LiveCache,
    prepared: &Prepared,
) -> Result<Baseline, PlanError> {
    baseline_from(client, namespace, Some(cache), prepared).await
}

async fn baseline_from(
    client: &kube::Client,
    namespace: &str,
    cache: Option<&LiveCache>,
    prepared: &Prepared,
) -> Result<Baseline, PlanError> {
    let mut baseline = Baseline::default();
    if prepared.full_resync() {
        baseline.names = match cache {
            Some(cache) => cache.cluster_names(),
            None => apply::live_cluster_names(client, namespace).await?,
        };
    }
    let names: BTreeSet<String> = prepared
        .cluster_names()
        .into_iter()
        .chain(baseline.names.clone())
        .collect();
    for name in names {
        let cached = match cache {
            Some(cache) => cache.live(&name).await,
            None => None,
        };
        let live = match cached {
            Some(live) => live,
            None => apply::read_live(client, namespace, &name).await?,
        };
        baseline.clusters.insert(name, live);
    }
    if prepared.has_rollouts() {
        baseline.rollouts = fleet::live_rollouts(client, namespace).await?;
    }
    for rollout in prepared.rerun_bumps() {
        let runs = rollout_runs(client, namespace, &rollout).await?;
        baseline.rollout_runs.insert(rollout, runs);
    }
    Ok(baseline)
}

/// The latest run of each cluster of `rollout`: its ClusterOperations (labelled with the rollout's
/// name), one list.
async fn rollout_runs(
    client: &kube::Client,
    namespace: &str,
    rollout: &str,
) -> Result<BTreeMap<String, RunState>, PlanError> {
    let api: kube::Api<ClusterOperation> = kube::Api::namespaced(client.clone(), namespace);
    let params = kube::api::ListParams::default().labels(&format!("{LABEL_ROLLOUT}={rollout}"));
    let list = api.list(&params).await.map_err(|source| PlanError::RolloutRuns {
        rollout: rollout.to_string(),
        namespace: namespace.to_string(),
        source: Box::new(source),
    })?;
    Ok(latest_runs(&list.items))
}

/// The state of the latest of `operations` (by creation) of each cluster, as the wave decisions see it.
fn latest_runs(operations: &[ClusterOperation]) -> BTreeMap<String, RunState> {
    let mut latest: BTreeMap<&str, &ClusterOperation> = BTreeMap::new();
    for op in operations {
        let created = |o: &ClusterOperation| o.metadata.creation_timestamp.clone().map(|t| t.0);
        match latest.get(op.spec.cluster.as_str()) {
            Some(known) if created(known) >= created(op) => {}
            _ => {
                latest.insert(&op.spec.cluster, op);
            }
        }
    }
    latest
        .into_iter()
        .map(|(cluster, op)| {
            let status = op.status.clone().unwrap_or_default();
            let message = status.message.unwrap_or_default();
            let state = match status.phase {
                Phase::Pending | Phase::Queued => RunState::Pending,
                Phase::Running => RunState::Running,
                Phase::Succeeded => RunState::Succeeded {
                    at: status.end_time.map(|t| t.0).unwrap_or_default(),
                },
                Phase::Failed => RunState::Failed(message),
                Phase::Canceled => RunState::Canceled(message),
            };
            (cluster.to_string(), state)
        })
        .collect()
}

/// `desired` as it would stand in the meta-cluster: every object current, no operation started.
fn simulate_live(desired: &DesiredCluster) -> Live {
    let with_uid = |meta: &mut kube::api::ObjectMeta, current: bool| {
        meta.uid = Some(format!("plan-{}", meta.name.clone().unwrap_or_default()));
        if current {
            meta.labels
                .get_or_insert_with(BTreeMap::new)
                .insert(LABEL_CURRENT.to_string(), "true".to_string());
        }
    };
    let mut cluster = desired.cluster.clone();
    with_uid(&mut cluster.metadata, false);
    let operations: BTreeMap<String, ClusterOperation> = desired
        .operations
        .iter()
        .chain(desired.rollouts.iter().map(|r| &r.operation))
        .map(|op| {
            let mut op = op.clone();
            with_uid(&mut op.metadata, true);
            op.status = None;
            (op.name_any(), op)
        })
        .collect();
    let config_maps = desired
        .config_maps
        .iter()
        .map(|cm| {
            let mut cm = cm.clone();
            with_uid(&mut cm.metadata, true);
            (cm.name_any(), cm)
        })
        .collect();
    Live {
        cluster: Some(cluster),
        config_maps,
        operations,
    }
}

/// Reads `(from, to]` under `root` as the service's pass reads it, and renders it as the pass would
/// render it with `ref_name` as the branch.
pub fn prepare(
    repo: &git2::Repository,
    from: Option<Oid>,
    to: Oid,
    root: &str,
    namespace: &str,
    ref_name: &str,
) -> Result<Prepared, PlanError> {
    let from = from.filter(|f| repo.find_commit(*f).is_ok());
    let read = read_commit(repo, from, to, root, false)?;
    let to_sha = to.to_string();
    let mut ctx = RenderContext::new(namespace, ref_name, &to_sha);
    ctx.queue_base = crate::reconcile::queue_base(jiff::Timestamp::now());
    ctx.attribution = to_render_attribution(&read.introduced);
    let from_sha = from.map(|f| f.to_string()).unwrap_or_default();
    let from_ctx = RenderContext::new(namespace, ref_name, &from_sha);
    let rollouts = PlannedRollouts::read(repo, from, to, root, &ctx, &from_ctx)?;
    // Clusters whose runs of a changed rollout may change are applied too, as the pass applies them.
    let known: BTreeSet<&String> = read
        .parsed
        .clusters
        .iter()
        .map(|c| &c.name)
        .chain(&read.parsed.invalid)
        .chain(&read.changes.removed)
        .collect();
    let widen: Vec<String> = rollouts
        .touched
        .iter()
        .filter(|n| !known.contains(n))
        .cloned()
        .collect();
    let widened = match widen.is_empty() {
        true => Vec::new(),
        false => layout::parse_clusters(&GitTree::at_commit(repo, to)?, root, &widen).clusters,
    };
    let desired = rollouts.render_at_to(read.parsed.clusters.iter().chain(&widened), &ctx);
    let mut at_from = BTreeMap::new();
    let mut hosts_at_from = BTreeMap::new();
    let mut before_at_from = BTreeMap::new();
    if let Some(from) = from {
        let names: Vec<String> = if read.changes.full_resync {
            crate::source::diff::diff(repo, None, from, root)?.added
        } else {
            let mut names: Vec<String> = desired
                .iter()
                .map(|d| d.name.clone())
                .chain(read.changes.removed.iter().cloned())
                .collect();
            names.sort();
            names
        };
        let tree = GitTree::at_commit(repo, from)?;
        let parsed = layout::parse_clusters(&tree, root, &names);
        let rendered = rollouts.render_at_from(parsed.clusters.iter(), &from_ctx);
        for (cluster, desired) in parsed.clusters.iter().zip(rendered) {
            at_from.insert(cluster.name.clone(), desired);
            hosts_at_from.insert(cluster.name.clone(), cluster.inventory.hosts.clone());
            before_at_from.insert(
                cluster.name.clone(),
                crate::preflight::before_of(cluster, crate::preflight::Base::PullRequest),
            );
        }
    }
    let path = crate::source::attribution::first_parent_path(repo, from, to)?;
    let mut subjects = BTreeMap::new();
    for commit in read.introduced.iter().map(|op| &op.commit).chain([&to_sha]) {
        let subject = Oid::from_str(commit)
            .ok()
            .and_then(|id| repo.find_commit(id).ok())
            .and_then(|c| c.summary().ok().flatten().map(str::to_string))
            .unwrap_or_default();
        subjects.insert(commit.clone(), subject);
    }
    Ok(Prepared {
        from,
        to,
        commits: path.len(),
        read,
        desired,
        at_from,
        hosts_at_from,
        before_at_from,
        subjects,
        widened,
        rollouts,
    })
}

/// The plan: the writes the service's pass would make on `baseline` for `prepared`, decided by the
/// same functions that decide apply's writes.
pub fn decide(prepared: &Prepared, baseline: &Baseline) -> Plan {
    let (writes, mut findings) = decide_writes(prepared, baseline);
    let clusters = writes
        .into_iter()
        .filter(|(_, writes)| !writes.is_empty())
        .map(|(name, writes)| {
            let shown = findings.remove(&name).unwrap_or_default();
            cluster_plan(prepared, name, &writes, shown)
        })
        .collect();
    let parsed = &prepared.read.parsed;
    Plan {
        from: prepared.from.map(|f| f.to_string()),
        to: prepared.to.to_string(),
        commits: prepared.commits,
        full_resync: prepared.full_resync(),
        clusters,
        invalid: invalid_clusters(parsed),
        rollouts: prepared.rollouts.plan(&baseline.rollouts, &baseline.rollout_runs),
        repo_diagnostics: parsed
            .diagnostics
            .iter()
            .filter(|d| d.cluster.is_none())
            .cloned()
            .collect(),
        signatures: Vec::new(),
    }
}

/// The writes of every cluster the pass would touch, by cluster name, and the pre-flight findings
/// shown for each desired cluster.
fn decide_writes(
    prepared: &Prepared,
    baseline: &Baseline,
) -> (
    BTreeMap<String, Vec<Write>>,
    BTreeMap<String, Vec<PlannedFinding>>,
) {
    let now = jiff::Timestamp::now();
    let empty = Live::default();
    let live = |name: &str| baseline.clusters.get(name).unwrap_or(&empty);
    let mut writes: BTreeMap<String, Vec<Write>> = BTreeMap::new();
    let mut findings: BTreeMap<String, Vec<PlannedFinding>> = BTreeMap::new();
    let widened: BTreeSet<&String> = prepared.widened.iter().map(|c| &c.name).collect();
    let seen = Seen {
        base: crate::preflight::Base::PullRequest,
        simulated: baseline.simulated,
        tree: None,
        before: None,
    };
    for desired in &prepared.desired {
        let live = live(&desired.name);
        // A cluster applied only for its runs of a rollout keeps its revision, as in the pass.
        let kept = match (&live.cluster, widened.contains(&desired.name)) {
            (Some(c), true) => Some(with_revision(desired, &c.spec.source.revision)),
            _ => None,
        };
        let desired = kept.as_ref().unwrap_or(desired);
        let checked = checked_desired(prepared, desired, live, &seen).map(|(pinned, shown)| {
            findings.insert(desired.name.clone(), shown);
            pinned
        });
        let desired = checked.as_ref().unwrap_or(desired);
        writes.insert(desired.name.clone(), decide_cluster(live, desired, now));
    }
    for name in &prepared.read.changes.removed {
        writes.insert(name.clone(), decide_removal(live(name), name, now));
    }
    if prepared.full_resync() {
        let kept: BTreeSet<&String> = prepared
            .desired
            .iter()
            .map(|d| &d.name)
            .chain(&prepared.read.parsed.invalid)
            .chain(&prepared.read.changes.removed)
            .collect();
        for name in baseline.names.iter().filter(|n| !kept.contains(n)) {
            writes.insert(name.clone(), decide_removal(live(name), name, now));
        }
    }
    (writes, findings)
}

/// `desired` with pre-flight's findings pinned into the operations it creates, and the findings the
/// plan shows (those of its new operations and rollout runs, and the cluster's own), as the pass pins
/// them; `None` when `prepared` holds no cluster directory of that name.
fn checked_desired(
    prepared: &Prepared,
    desired: &DesiredCluster,
    live: &Live,
    seen: &Seen,
) -> Option<(DesiredCluster, Vec<PlannedFinding>)> {
    let cluster = prepared.cluster(&desired.name)?;
    let seen = Seen {
        before: prepared.before_at_from.get(&desired.name).cloned(),
        ..seen.clone()
    };
    let checked = pinning::check(cluster, desired, live, &seen);
    let new: BTreeSet<&str> = pinning::new_operations(desired, live)
        .map(|o| o.spec.id.as_str())
        .chain(desired.rollouts.iter().map(|r| r.entry.id.as_str()))
        .collect();
    let shown = checked
        .all()
        .filter(|f| f.operation.as_deref().is_none_or(|id| new.contains(id)))
        .map(PlannedFinding::of)
        .collect();
    let mut pinned = desired.clone();
    pinning::pin(&mut pinned, cluster, live, &checked);
    Some((pinned, shown))
}

/// The plan of cluster `name` from its `writes`: the objects created, updated and deleted, the
/// operations that would run, the scale-down warnings, the pre-flight findings `shown` and labels.
fn cluster_plan(
    prepared: &Prepared,
    name: String,
    writes: &[Write],
    shown: Vec<PlannedFinding>,
) -> ClusterPlan {
    let mut plan = ClusterPlan {
        name,
        ..ClusterPlan::default()
    };
    for write in writes {
        let (change, kind, object) = write.target();
        let entry = ObjectRef {
            kind: kind.to_string(),
            name: object.to_string(),
            what: write.describe().to_string(),
        };
        match change {
            Change::Create => plan.created.push(entry),
            Change::Update => plan.updated.push(entry),
            Change::Delete => plan.deleted.push(entry),
        }
    }
    plan.operations = planned_operations(prepared, &plan.name, writes);
    plan.warnings = scale_down_warnings(prepared, &plan.name, &plan.operations);
    plan.preflight = shown;
    if let Some(c) = prepared.cluster(&plan.name) {
        plan.labels = c.settings.labels.clone();
        for op in plan.operations.iter_mut().filter(|o| o.rollout.is_none()) {
            if let Some(entry) = c.operations.iter().find(|e| e.id == op.id) {
                op.preflight_skipped = !entry.preflight;
                op.allow_release_skip = entry.allow_release_skip;
            }
        }
    }
    plan
}

/// The invalid clusters of `parsed`, each with the diagnostics that name it.
fn invalid_clusters(parsed: &layout::Parsed) -> Vec<InvalidCluster> {
    parsed
        .invalid
        .iter()
        .map(|n| InvalidCluster {
            name: n.clone(),
            diagnostics: parsed
                .diagnostics
                .iter()
                .filter(|d| d.cluster.as_deref() == Some(n))
                .cloned()
                .collect(),
        })
        .collect()
}

/// The scale-down warnings of cluster `name`: `remove-node.yml` must run while the node is still in
/// hosts.yml, and a node left out of hosts.yml without one stays in the cluster.
fn scale_down_warnings(prepared: &Prepared, name: &str, operations: &[PlannedOperation]) -> Vec<String> {
    let Some(before) = prepared.hosts_at_from.get(name) else {
        return Vec::new();
    };
    let cluster = prepared.cluster(name);
    let after = cluster.map(|c| c.inventory.hosts.clone()).unwrap_or_default();
    let removed: BTreeSet<&String> = before.difference(&after).collect();
    let mut named: BTreeSet<String> = BTreeSet::new();
    let mut warnings = Vec::new();
    for planned in operations.iter().filter(|p| p.rollout.is_none()) {
        let Some(op) = cluster.and_then(|c| c.operations.iter().find(|o| o.id == planned.id)) else {
            continue;
        };
        for host in layout::host_references(&op.extra_args) {
            if removed.contains(&host.name) {
                warnings.push(format!(
                    "{name}: operation {} names {}, which this change removes from hosts.yml: \
                     {} must run while the node is still in hosts.yml; remove the host in a later commit",
                    op.id, host.name, op.action
                ));
            }
            named.insert(host.name);
        }
    }
    for host in removed.iter().filter(|h| !named.contains(h.as_str())) {
        warnings.push(format!(
            "{name}: {host} leaves hosts.yml and no operation names it, so it stays in the cluster; \
             run remove-node.yml with -e node={host} in an earlier commit"
        ));
    }
    warnings
}

/// The operations the writes of cluster `name` create, in commit order then file order.
fn planned_operations(prepared: &Prepared, name: &str, writes: &[Write]) -> Vec<PlannedOperation> {
    let Some(desired) = prepared.desired.iter().find(|d| d.name == name) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for write in writes {
        let Write::CreateOperation { name: op_name, body } = write else {
            continue;
        };
        // A run of a rollout: created by the commit reconciled, after the entries of operations.yml.
        if let Some(run) = body {
            let commit = prepared.to.to_string();
            out.push((
                prepared.commits,
                out.len(),
                PlannedOperation {
                    id: run.spec.id.clone(),
                    name: op_name.clone(),
                    action: run.spec.action.clone(),
                    facts_playbook: run.spec.facts_playbook.clone(),
                    subject: prepared.subjects.get(&commit).cloned().unwrap_or_default(),
                    commit,
                    commit_index: prepared.commits.saturating_sub(1),
                    rollout: run.spec.rollout.as_ref().map(|r| r.name.clone()),
                    wave: wave_of(run).map(str::to_string),
                    preflight_skipped: false,
                    allow_release_skip: false,
                },
            ));
            continue;
        }
        let Some((file_index, op)) = desired
            .operations
            .iter()
            .enumerate()
            .find(|(_, o)| o.name_any() == *op_name)
        else {
            continue;
        };
        let introduced = prepared
            .read
            .introduced
            .iter()
            .find(|i| i.cluster == name && i.id == op.spec.id);
        let commit = introduced
            .map(|i| i.commit.clone())
            .unwrap_or_else(|| prepared.to.to_string());
        let commit_index = introduced
            .map(|i| i.commit_index)
            .unwrap_or(prepared.commits.saturating_sub(1));
        out.push((
            commit_index,
            file_index,
            PlannedOperation {
                id: op.spec.id.clone(),
                name: op_name.clone(),
                action: op.spec.action.clone(),
                facts_playbook: op.spec.facts_playbook.clone(),
                subject: prepared.subjects.get(&commit).cloned().unwrap_or_default(),
                commit,
                commit_index,
                rollout: None,
                wave: None,
                preflight_skipped: false,
                allow_release_skip: false,
            },
        ));
    }
    out.sort_by_key(|(c, f, _)| (*c, *f));
    out.into_iter().map(|(_, _, p)| p).collect()
}

/// Context of the status a pull-request head gets.
pub const PLAN_CONTEXT: &str = "kok/plan";

/// The `kok/plan` status of a pull-request head: `error` naming the file and line of the first
/// problem when a cluster or kok.yml is invalid; `failure` with the first pre-flight error's cluster, rule,
/// text and place (`prod-bj: etcd-odd: etcd has 4 hosts: ... at clusters/prod-bj/hosts.yml:44`) when a
/// kubespray rule fails; else `success` saying what would run (and the scale-down warnings),
/// e.g. `prod-bj: add-node8 (scale.yml) would run`, after the first pre-flight warning when there is one
/// (`warning: prod-bj: host-not-reached: node8 is new in kube_node ...`). Forges cut the description to their limits.
pub fn plan_status(plan: &Plan) -> (crate::api::StatusState, String) {
    let first_error = plan
        .repo_diagnostics
        .iter()
        .chain(plan.invalid.iter().flat_map(|i| &i.diagnostics))
        .chain(plan.rollouts.iter().flat_map(|r| &r.diagnostics))
        .find(|d| d.severity == layout::Severity::Error);
    if let Some(d) = first_error {
        return (crate::api::StatusState::Error, d.to_string());
    }
    if let Some((cluster, f)) = plan.first_preflight_error() {
        let errors = plan
            .clusters
            .iter()
            .flat_map(|c| &c.preflight)
            .filter(|f| f.severity == layout::Severity::Error)
            .count();
        let more = match errors {
            1 => String::new(),
            n => format!(" (1 of {n} pre-flight errors)"),
        };
        return (
            crate::api::StatusState::Failure,
            format!("{cluster}: {}: {}{more} at {}", f.rule, f.message, f.location()),
        );
    }
    let mut parts: Vec<String> = plan
        .clusters
        .iter()
        .filter(|c| !c.operations.is_empty())
        .map(|c| {
            let ops: Vec<String> = c
                .operations
                .iter()
                .map(|o| format!("{} ({})", o.id, o.action))
                .collect();
            format!("{}: {} would run", c.name, ops.join(", "))
        })
        .chain(plan.rollouts.iter().map(RolloutPlan::headline))
        .collect();
    if parts.is_empty() {
        let writes: usize = plan
            .clusters
            .iter()
            .map(|c| c.created.len() + c.updated.len() + c.deleted.len())
            .sum();
        parts.push(if writes == 0 {
            "no changes".to_string()
        } else {
            format!("no operation would run; {writes} object writes")
        });
    }
    let warnings: usize = plan.clusters.iter().map(|c| c.warnings.len()).sum();
    let mut description = parts.join("; ");
    if let Some(first) = plan.clusters.iter().flat_map(|c| &c.warnings).next() {
        description.push_str(&format!("; {warnings} warning(s): {first}"));
    }
    // A pre-flight warning leads: it names what to add, and forges cut descriptions short.
    let preflight_warning = plan.clusters.iter().find_map(|c| {
        c.preflight
            .iter()
            .find(|f| f.severity == layout::Severity::Warning && f.rule != "release-known")
            .map(|f| (c, f))
    });
    if let Some((cluster, f)) = preflight_warning {
        description = format!(
            "warning: {}: {}: {}; {description}",
            cluster.name, f.rule, f.message
        );
    }
    (crate::api::StatusState::Success, description)
}

/// The first eight characters of a commit id.
fn short(sha: &str) -> String {
    sha.chars().take(8).collect()
}

/// The start of the plan, shortened, or `(root)` when there is none.
fn short_from(plan: &Plan) -> String {
    plan.from
        .as_deref()
        .map(short)
        .unwrap_or_else(|| "(root)".to_string())
}

/// The plan for humans.
pub fn text(plan: &Plan) -> String {
    let mut out = text_head(plan);
    for cluster in &plan.clusters {
        out.push_str(&text_cluster(cluster));
    }
    for invalid in &plan.invalid {
        out.push_str(&format!(
            "\ncluster {}: invalid, it would be left at its last good state\n",
            invalid.name
        ));
        for d in &invalid.diagnostics {
            out.push_str(&format!("  {d}\n"));
        }
    }
    if !plan.signatures.is_empty() {
        out.push_str("\nsignatures:\n");
        for signature in &plan.signatures {
            out.push_str(&format!("  {signature}\n"));
        }
    }
    out
}

/// The text plan's opening: the range, the repository's diagnostics and the rollouts.
fn text_head(plan: &Plan) -> String {
    let mut out = String::new();
    let from = short_from(plan);
    let commits = if plan.commits == 1 {
        "1 commit".to_string()
    } else {
        format!("{} commits", plan.commits)
    };
    out.push_str(&format!("plan {from}..{} ({commits})\n", short(&plan.to)));
    if plan.full_resync {
        out.push_str(
            "full resync: the start is not an ancestor of the end (or is unknown); every cluster compared\n",
        );
    }
    for d in &plan.repo_diagnostics {
        out.push_str(&format!("{d}\n"));
    }
    if !plan.has_changes() && !plan.has_errors() {
        out.push_str("no changes\n");
    }
    for rollout in &plan.rollouts {
        out.push_str(&format!(
            "\nrollout {} ({}, {}){}\n",
            rollout.name,
            rollout.change_word(),
            rollout.path,
            rollout.object_text()
        ));
        for line in rollout.lines() {
            out.push_str(&format!("  {line}\n"));
        }
    }
    out
}

/// One cluster of the text plan: its labels, object changes, warnings, findings and operations.
fn text_cluster(cluster: &ClusterPlan) -> String {
    let mut out = format!("\ncluster {}\n", cluster.name);
    if !cluster.labels.is_empty() {
        out.push_str(&format!("  labels: {}\n", cluster.labels_text()));
    }
    for (sign, list) in [
        ("+", &cluster.created),
        ("~", &cluster.updated),
        ("-", &cluster.deleted),
    ] {
        for o in list {
            out.push_str(&format!("  {sign} {} {} ({})\n", o.kind, o.name, o.what));
        }
    }
    for w in &cluster.warnings {
        out.push_str(&format!("  warning: {w}\n"));
    }
    out.push_str(&text_findings(&cluster.preflight));
    if !cluster.operations.is_empty() {
        out.push_str("  operations that would run:\n");
        for op in &cluster.operations {
            out.push_str(&format!(
                "    {} ({}) from {} {:?}{}{}\n",
                op.id,
                op.steps(),
                short(&op.commit),
                op.subject,
                op.rollout_text(),
                op.switches_text()
            ));
        }
    }
    out
}

/// A cluster's pre-flight findings as text, with what each cites and the upgrade path it proposes;
/// nothing when there are none.
fn text_findings(findings: &[PlannedFinding]) -> String {
    let mut out = String::new();
    if findings.is_empty() {
        return out;
    }
    out.push_str("  pre-flight:\n");
    for f in findings {
        let about = f
            .operation
            .as_ref()
            .map(|id| format!(" (operation {id})"))
            .unwrap_or_default();
        out.push_str(&format!(
            "    {}: {}: {}{about}: {}\n",
            f.severity_word(),
            f.rule,
            f.location(),
            f.message
        ));
        if let Some(cites) = &f.cites {
            out.push_str(&format!("      from {cites}\n"));
        }
        if let Some(path) = &f.upgrade_path {
            out.push_str("      the upgrade, one commit each (paste each entry into operations.yml):\n");
            for line in path.lines() {
                out.push_str(&format!("        {line}\n"));
            }
        }
    }
    out
}

/// `text` with `prefix` before each line.
fn indent(text: &str, prefix: &str) -> String {
    text.lines().map(|l| format!("{prefix}{l}\n")).collect()
}

/// A markdown table cell: pipes escaped, line breaks folded.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The plan as markdown, one table per cluster, fit for a pull-request comment.
pub fn markdown(plan: &Plan) -> String {
    let mut out = format!("### kok plan `{}..{}`\n\n", short_from(plan), short(&plan.to));
    if plan.full_resync {
        out.push_str("Full resync: the start is not an ancestor of the end; every cluster compared.\n\n");
    }
    for d in &plan.repo_diagnostics {
        out.push_str(&format!("- :x: `{}`\n", cell(&d.to_string())));
    }
    if !plan.has_changes() && !plan.has_errors() {
        out.push_str("No changes.\n");
    }
    out.push_str(&rollouts::markdown(&plan.rollouts, cell));
    for cluster in &plan.clusters {
        out.push_str(&markdown_cluster(cluster));
    }
    for invalid in &plan.invalid {
        out.push_str(&format!(
            "#### {} (invalid: left at its last good state)\n\n",
            invalid.name
        ));
        for d in &invalid.diagnostics {
            out.push_str(&format!("- `{}`\n", cell(&d.to_string())));
        }
        out.push('\n');
    }
    if !plan.signatures.is_empty() {
        out.push_str("#### Signatures\n\n");
        for signature in &plan.signatures {
            out.push_str(&format!("- {}\n", cell(&signature.to_string())));
        }
    }
    out
}

/// One cluster of the markdown plan: its labels, a table of its changes and runs, its warnings and
/// findings.
fn markdown_cluster(cluster: &ClusterPlan) -> String {
    let mut out = format!("#### {}\n\n", cluster.name);
    if !cluster.labels.is_empty() {
        out.push_str(&format!("Labels: `{}`\n\n", cell(&cluster.labels_text())));
    }
    out.push_str("| change | kind | name | detail |\n|---|---|---|---|\n");
    for (change, list) in [
        ("create", &cluster.created),
        ("update", &cluster.updated),
        ("delete", &cluster.deleted),
    ] {
        for o in list {
            out.push_str(&format!(
                "| {change} | {} | `{}` | {} |\n",
                o.kind, o.name, o.what
            ));
        }
    }
    for op in &cluster.operations {
        out.push_str(&format!(
            "| run | ClusterOperation | `{}` | `{}` (`{}`{}) from `{}` {}{}{} |\n",
            op.name,
            cell(&op.id),
            cell(&op.action),
            op.facts_playbook
                .as_ref()
                .map(|f| format!(" after `{}` without --limit", cell(&f.path)))
                .unwrap_or_default(),
            short(&op.commit),
            cell(&op.subject),
            cell(&op.rollout_text()),
            cell(&op.switches_text())
        ));
    }
    out.push('\n');
    for w in &cluster.warnings {
        out.push_str(&format!("> :warning: {w}\n"));
    }
    if !cluster.warnings.is_empty() {
        out.push('\n');
    }
    out.push_str(&markdown_findings(&cluster.preflight));
    out
}

/// A cluster's pre-flight findings as a markdown list, with what each cites and the upgrade path
/// it proposes; nothing when there are none.
fn markdown_findings(findings: &[PlannedFinding]) -> String {
    let mut out = String::new();
    if findings.is_empty() {
        return out;
    }
    out.push_str("Pre-flight (kubespray's rules):\n\n");
    for f in findings {
        let sign = match f.severity {
            layout::Severity::Error => ":x:",
            layout::Severity::Warning => ":warning:",
        };
        let about = f
            .operation
            .as_ref()
            .map(|id| format!(" (operation `{}`)", cell(id)))
            .unwrap_or_default();
        let cites = f
            .cites
            .as_ref()
            .map(|c| format!(" — from {}", cell(c)))
            .unwrap_or_default();
        out.push_str(&format!(
            "- {sign} `{}` at `{}`{about}: {}{cites}\n",
            f.rule,
            cell(&f.location()),
            cell(&f.message)
        ));
        if let Some(path) = &f.upgrade_path {
            out.push_str(&format!("\n  ```yaml\n{}  ```\n\n", indent(path, "  ")));
        }
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::StatusState;

    fn plan_with(clusters: Vec<ClusterPlan>) -> Plan {
        Plan {
            from: None,
            to: "b".repeat(40),
            commits: 1,
            full_resync: false,
            clusters,
            invalid: Vec::new(),
            rollouts: Vec::new(),
            repo_diagnostics: Vec::new(),
            signatures: Vec::new(),
        }
    }

    fn op(id: &str, action: &str) -> PlannedOperation {
        PlannedOperation {
            id: id.into(),
            name: format!("prod-bj-{id}-12345678"),
            action: action.into(),
            commit: "b".repeat(40),
            subject: "scale".into(),
            commit_index: 0,
            facts_playbook: None,
            rollout: None,
            wave: None,
            preflight_skipped: false,
            allow_release_skip: false,
        }
    }

    #[test]
    fn a_cluster_shows_its_labels_in_text_markdown_and_json() {
        let bj = ClusterPlan {
            name: "prod-bj".into(),
            labels: [("env", "prod"), ("region", "bj")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..ClusterPlan::default()
        };
        let plan = plan_with(vec![
            bj,
            ClusterPlan {
                name: "dev".into(),
                ..ClusterPlan::default()
            },
        ]);
        let text = text(&plan);
        assert!(
            text.contains("cluster prod-bj\n  labels: env=prod, region=bj\n"),
            "{text}"
        );
        assert!(
            text.contains("cluster dev\n") && !text.contains("cluster dev\n  labels"),
            "{text}"
        );
        assert!(markdown(&plan).contains("#### prod-bj\n\nLabels: `env=prod, region=bj`\n\n| change"));
        let json = serde_json::to_value(&plan).unwrap();
        assert_eq!(json["clusters"][0]["labels"]["region"], "bj");
        assert!(json["clusters"][1].get("labels").is_none());
    }

    #[test]
    fn an_operation_with_a_facts_step_shows_it_in_text_and_markdown() {
        let mut add = op("add-node8", "scale.yml");
        add.facts_playbook = Some(FactsPlaybook {
            path: "playbooks/facts.yml".into(),
            optional: true,
        });
        let bj = ClusterPlan {
            name: "prod-bj".into(),
            operations: vec![add, op("install", "cluster.yml")],
            ..ClusterPlan::default()
        };
        let plan = plan_with(vec![bj]);
        let text = text(&plan);
        assert!(
            text.contains(
                "    add-node8 (playbooks/facts.yml (without --limit), then scale.yml) from bbbbbbbb"
            ),
            "{text}"
        );
        assert!(text.contains("    install (cluster.yml) from bbbbbbbb"), "{text}");
        let md = markdown(&plan);
        assert!(
            md.contains(
                "`add-node8` (`scale.yml` after `playbooks/facts.yml` without --limit) from `bbbbbbbb`"
            ),
            "{md}"
        );
        let json = serde_json::to_value(&plan).unwrap();
        let ops = &json["clusters"][0]["operations"];
        assert_eq!(ops[0]["factsPlaybook"]["path"], "playbooks/facts.yml");
        assert!(ops[1].get("factsPlaybook").is_none());
    }

    #[test]
    fn plan_status_says_what_would_run_and_the_warnings() {
        let bj = ClusterPlan {
            name: "prod-bj".into(),
            operations: vec![op("add-node8", "scale.yml")],
            warnings: vec!["prod-bj: node3 leaves hosts.yml and no operation names it".into()],
            ..ClusterPlan::default()
        };
        let (state, description) = plan_status(&plan_with(vec![bj]));
        assert_eq!(state, StatusState::Success);
        assert_eq!(
            description,
            "prod-bj: add-node8 (scale.yml) would run; 1 warning(s): prod-bj: node3 leaves hosts.yml and no \
             operation names it"
        );
        assert_eq!(plan_status(&plan_with(Vec::new())).1, "no changes");
    }

    fn finding(rule: &str, severity: layout::Severity, line: usize) -> PlannedFinding {
        PlannedFinding {
            rule: rule.into(),
            severity,
            path: "clusters/prod-bj/hosts.yml".into(),
            line,
            operation: None,
            message: format!("{rule} is broken"),
            cites: Some("kubespray v2.27.0 roles/x.yml:80".into()),
            upgrade_path: None,
        }
    }

    #[test]
    fn a_preflight_error_fails_the_plan_with_its_rule_and_every_finding_is_listed() {
        let mut add = op("add-etcd", "cluster.yml");
        add.preflight_skipped = true;
        add.allow_release_skip = true;
        let bj = ClusterPlan {
            name: "prod-bj".into(),
            operations: vec![add],
            preflight: vec![
                finding("release-known", layout::Severity::Warning, 0),
                finding("etcd-odd", layout::Severity::Error, 13),
                finding("setting-accepted", layout::Severity::Error, 2),
            ],
            ..ClusterPlan::default()
        };
        let plan = plan_with(vec![bj]);
        assert!(plan.has_errors());
        let (state, description) = plan_status(&plan);
        assert_eq!(state, StatusState::Failure);
        assert_eq!(
            description,
            "prod-bj: etcd-odd: etcd-odd is broken (1 of 2 pre-flight errors) at clusters/prod-bj/hosts.yml:13"
        );
        let text = text(&plan);
        assert!(
            text.contains(
                "  pre-flight:\n    warning: release-known: clusters/prod-bj/hosts.yml: release-known is broken\n      \
                 from kubespray v2.27.0 roles/x.yml:80\n    error: etcd-odd: clusters/prod-bj/hosts.yml:13: "
            ),
            "{text}"
        );
        assert!(
            text.contains("    add-etcd (cluster.yml) from bbbbbbbb \"scale\" [preflight: false, allowReleaseSkip: true]\n"),
            "{text}"
        );
        let md = markdown(&plan);
        assert!(
            md.contains(
                "- :x: `etcd-odd` at `clusters/prod-bj/hosts.yml:13`: etcd-odd is broken — from kubespray v2.27.0 \
                 roles/x.yml:80\n"
            ),
            "{md}"
        );
        assert!(
            md.contains("- :warning: `release-known` at `clusters/prod-bj/hosts.yml`"),
            "{md}"
        );
        assert!(
            md.contains("[preflight: false, allowReleaseSkip: true] |"),
            "{md}"
        );
        let json = serde_json::to_value(&plan).unwrap();
        assert_eq!(json["clusters"][0]["preflight"][1]["rule"], "etcd-odd");
        assert_eq!(json["clusters"][0]["operations"][0]["preflightSkipped"], true);
    }

    #[test]
    fn plan_status_of_an_invalid_cluster_is_an_error_naming_file_and_line() {
        let mut plan = plan_with(Vec::new());
        let diagnostic = Diagnostic {
            cluster: Some("prod-bj".into()),
            path: "clusters/prod-bj/hosts.yml".into(),
            line: 3,
            column: 1,
            severity: layout::Severity::Error,
            message: "hosts must be a mapping".into(),
        };
        plan.invalid.push(InvalidCluster {
            name: "prod-bj".into(),
            diagnostics: vec![diagnostic],
        });
        let (state, description) = plan_status(&plan);
        assert_eq!(state, StatusState::Error);
        assert!(
            description.starts_with("clusters/prod-bj/hosts.yml:3"),
            "{description}"
        );
    }
}
