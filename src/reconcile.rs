//! One reconciliation pass: a commit of the source becomes objects in the meta-cluster.
//!
//! The pass diffs the new commit against the last reconciled one, parses only the clusters whose
//! subtrees changed, renders them, checks the operations it creates against kubespray's pre-flight rules
//! (pinning the errors into their specs, which the controller refuses), applies them, removes the
//! clusters whose directories are gone, records the commit as reconciled and queues the commit's
//! `kok/sync` status. A cluster that fails validation is left exactly as it was (its last good state) and
//! does not stop the others.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::{stream, StreamExt, TryStreamExt};
use git2::Oid;
use kube::{Client, ResourceExt};
use tracing::{info, instrument, warn};

use crate::api::{run_context, StatusState, ANNOTATION_RECORDED, HELD_PREFIX};
use crate::controller::live::LiveCache;
use crate::layout::{self, Diagnostic};
use crate::materialize::preflight::{self as pinning, Seen};
use crate::materialize::{self, apply, fleet, rollout, state, RenderContext};
use crate::metrics::Metrics;
use crate::report::record::{Lookup, RecordBook, RecordError};
use crate::source::read::{CommitChanges, RolloutsRead};
use crate::source::verify::{self, RangeVerdict, Verification};
use crate::source::{self, Source, SourceError};

/// What a pass needs besides the source and the client.
#[derive(Clone, Debug)]
pub struct PassConfig {
    /// kok's namespace in the meta-cluster.
    pub namespace: String,
    /// Root directory of the cluster directories (`--path`).
    pub root: String,
    /// `--status-url` template, for the `kok/sync` status.
    pub status_url: Option<String>,
    /// The watch caches the writes are decided from; without them each cluster's objects are listed.
    pub live: Option<Arc<LiveCache>>,
    /// Local mode: the checked-out kubespray trees the runs use, whose own files pre-flight reads.
    pub trees: Arc<crate::preflight::Trees>,
    /// Where the record of what ran is read back, so an entry whose ClusterOperation is gone is restored
    /// rather than run again; `None`: nothing is read back.
    pub records: Option<Arc<RecordBook>>,
    /// Says when kok has begun to stop: a pass then starts no more clusters (see [`pass`]).
    pub stopping: Stopping,
}

/// Whether kok has begun to stop, for a pass in flight; never, by default.
#[derive(Clone, Debug, Default)]
pub struct Stopping(Option<tokio::sync::watch::Receiver<bool>>);

impl Stopping {
    /// Stopping once `stop` holds true.
    pub fn on(stop: tokio::sync::watch::Receiver<bool>) -> Stopping {
        Stopping(Some(stop))
    }

    /// True once kok has begun to stop.
    pub fn begun(&self) -> bool {
        self.0.as_ref().is_some_and(|stop| *stop.borrow())
    }

    /// Waits until kok begins to stop (forever when it never does).
    pub async fn wait(&self) {
        let Some(stop) = &self.0 else {
            return std::future::pending().await;
        };
        let mut stop = stop.clone();
        // A sender gone without saying true leaves the flag as it was: not stopping.
        if stop.wait_for(|stopping| *stopping).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// How long a pass of a few clusters waits for the watch caches' first list before it lists each
/// cluster itself; a longer wait is logged at this interval.
pub const CACHES_READY: std::time::Duration = std::time::Duration::from_secs(10);
/// How long a pass of more than [`FEW_CLUSTERS`] clusters waits for the watch caches' first list.
const FLEET_CACHES_READY: std::time::Duration = std::time::Duration::from_secs(600);
/// The most clusters a pass lists one by one rather than wait longer for the watch caches.
pub const FEW_CLUSTERS: usize = 100;

/// Most clusters applied or removed at once.
pub const CONCURRENT_CLUSTERS: usize = 16;

/// Most clusters parsed at once by a pass (see [`pass`]).
const PARSE_PART: usize = 256;

/// What the parts of a pass found: the clusters applied, the invalid ones and the diagnostics.
#[derive(Default)]
struct Found {
    applied: Vec<String>,
    invalid: Vec<String>,
    diagnostics: Vec<Diagnostic>,
}

/// The result of one pass.
#[derive(Clone, Debug, Default)]
pub struct PassOutcome {
    /// The commit reconciled.
    pub commit: String,
    /// Whether every cluster was considered (first pass, force push, periodic resync).
    pub full_resync: bool,
    /// Clusters rendered and applied.
    pub applied: Vec<String>,
    /// Clusters refused by validation (left at their last good state).
    pub invalid: Vec<String>,
    /// Clusters removed from the meta-cluster.
    pub removed: Vec<String>,
    /// Objects written.
    pub writes: usize,
    /// Errors and warnings found in the changed clusters.
    pub diagnostics: Vec<Diagnostic>,
}

/// Where a pass spends its time, summed over its clusters (their applies overlap, [`CONCURRENT_CLUSTERS`]
/// at once, so the sums of the parts after `parse` can exceed the pass), logged as "pass phases".
#[derive(Debug, Default)]
struct PhaseTimes {
    /// Reading the commit: the diff, what changed.
    read: std::sync::atomic::AtomicU64,
    /// Reading, parsing and validating the clusters' files (git blobs, YAML, inventories).
    parse: std::sync::atomic::AtomicU64,
    /// Rendering the desired objects.
    render: std::sync::atomic::AtomicU64,
    /// The live objects from the caches (or lists).
    live: std::sync::atomic::AtomicU64,
    /// Pre-flight of the new operations, and recalling recorded outcomes.
    preflight: std::sync::atomic::AtomicU64,
    /// Deciding and making the writes.
    apply: std::sync::atomic::AtomicU64,
    /// Removing the clusters that went, and the sweep of shared ConfigMaps.
    remove: std::sync::atomic::AtomicU64,
}

impl PhaseTimes {
    fn add(counter: &std::sync::atomic::AtomicU64, since: Instant) {
        let nanos = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        counter.fetch_add(nanos, std::sync::atomic::Ordering::Relaxed);
    }

    fn ms(counter: &std::sync::atomic::AtomicU64) -> u64 {
        counter.load(std::sync::atomic::Ordering::Relaxed) / 1_000_000
    }

    fn log(&self, total: std::time::Duration) {
        info!(
            total_ms = total.as_millis() as u64,
            read_ms = Self::ms(&self.read),
            parse_ms = Self::ms(&self.parse),
            render_ms = Self::ms(&self.render),
            live_ms = Self::ms(&self.live),
            preflight_ms = Self::ms(&self.preflight),
            apply_ms = Self::ms(&self.apply),
            remove_ms = Self::ms(&self.remove),
            "pass phases"
        );
    }
}

/// Failures of a pass; the pass is retried at the next trigger, and the last reconciled commit is
/// only moved forward once a pass has fully succeeded.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    /// Reading the repository failed.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// Applying or removing objects failed.
    #[error(transparent)]
    Apply(#[from] apply::ApplyError),
    /// Loading or saving the last reconciled commit failed.
    #[error(transparent)]
    State(#[from] state::StateError),
    /// The trust material for signature verification could not be read.
    #[error("signature verification: {0}")]
    Trust(#[from] verify::TrustError),
    /// The blocking git work panicked or was cancelled.
    #[error("the git worker stopped unexpectedly: {0}")]
    Worker(String),
    /// The record of what ran could not be read.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// kok began to stop: the pass ended after the clusters it had started, and did not record the commit.
    #[error("kok is stopping; the commit is reconciled again at the next start")]
    Stopped,
}

/// The source shared between passes; git2 work runs on the blocking pool under this lock.
pub type SharedSource = Arc<Mutex<Source>>;

/// Runs `f` with the source on the blocking pool.
pub async fn with_source<T, F>(source: &SharedSource, f: F) -> Result<T, PassError>
where
    T: Send + 'static,
    F: FnOnce(&mut Source) -> Result<T, SourceError> + Send + 'static,
{
    let source = source.clone();
    tokio::task::spawn_blocking(move || {
        let mut guard = source.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut guard)
    })
    .await
    .map_err(|e| PassError::Worker(e.to_string()))?
    .map_err(PassError::from)
}

/// Verifies the signatures of the commits reconciling `new` would accept: `new` alone, or with
/// [`verify::VerifyMode::All`] every commit since `old`. Reads the trust material afresh.
#[instrument(skip_all, fields(commit = %new))]
pub async fn verify_signatures(
    source: &SharedSource,
    verification: &Verification,
    old: Option<Oid>,
    new: Oid,
) -> Result<RangeVerdict, PassError> {
    let files = verification.files.clone();
    let trust = tokio::task::spawn_blocking(move || verify::Trust::load(&files))
        .await
        .map_err(|e| PassError::Worker(e.to_string()))??;
    let mode = verification.mode;
    let now = jiff::Timestamp::now().as_second();
    with_source(source, move |s| {
        let repo = s.repository();
        let commits = verify::commits_to_verify(repo, old, new, mode).map_err(SourceError::git(format!(
            "list the commits between {old:?} and {new}"
        )))?;
        verify::verify_range(repo, &commits, &trust, now).map_err(SourceError::git("read commit signatures"))
    })
    .await
}

/// A queue base that sorts after every earlier pass: milliseconds since the epoch, zero-padded.
pub fn queue_base(now: jiff::Timestamp) -> String {
    format!("{:015}", now.as_millisecond().max(0))
}

/// Reconciles `new`, diffing against `old` (or every cluster when `full` or `old` is unusable).
#[instrument(skip_all, fields(commit = %new, full))]
pub async fn pass(
    client: &Client,
    source: &SharedSource,
    cfg: &PassConfig,
    old: Option<Oid>,
    new: Oid,
    full: bool,
    metrics: &Metrics,
) -> Result<PassOutcome, PassError> {
    let started = Instant::now();
    let times = PhaseTimes::default();
    let root = cfg.root.clone();
    let read = with_source(source, move |s| {
        source::read::read_changes(s.repository(), old, new, &root, full)
    })
    .await?;
    PhaseTimes::add(&times.read, started);
    let (ref_name, repo_url) = ref_and_url(source);
    let commit = new.to_string();
    let mut base_ctx = RenderContext::new(&cfg.namespace, &ref_name, &commit);
    base_ctx.queue_base = queue_base(jiff::Timestamp::now());

    let mut outcome = PassOutcome {
        commit: commit.clone(),
        full_resync: read.changes.full_resync,
        ..PassOutcome::default()
    };
    // Stopping ends the wait for the caches' first lists, which a stopping controller never makes.
    let live = tokio::select! {
        biased;
        () = cfg.stopping.wait() => return Err(PassError::Stopped),
        live = ready_caches(cfg, read.names.len()) => live,
    };
    let (rollouts, rollout_writes) = read_rollouts(client, source, cfg, old, new, &read, &base_ctx).await?;
    outcome.writes += rollout_writes;
    let mut read = read;
    widen_to_rollouts(&mut read, rollouts.as_ref());
    let found = Mutex::new(Found::default());
    let clusters = parsed_clusters(source, cfg, (old, new), &read.names, &base_ctx, &found, &times);
    let memberships = rollouts
        .as_ref()
        .map(|r| rollout::memberships(&r.rollouts))
        .unwrap_or_default();
    let applying = Applying {
        client,
        namespace: &cfg.namespace,
        live,
        trees: &cfg.trees,
        lookup: cfg.records.as_deref().map(RecordBook::lookup),
        untouched: &read.untouched,
        memberships: &memberships,
        broken: rollouts.as_ref().map(|r| &r.broken),
        times: &times,
    };
    // Once kok begins to stop, the clusters being applied finish and no more start; the commit is not
    // recorded, so the next start reconciles it again (what was applied then writes nothing).
    outcome.writes += applying
        .apply_all(clusters.take_until(cfg.stopping.wait()))
        .await?;
    if cfg.stopping.begun() {
        metrics.objects_written(outcome.writes as u64);
        return Err(PassError::Stopped);
    }
    outcome.add_found(found, rollouts.as_ref());
    let removing = Instant::now();
    remove_gone(client, &cfg.namespace, live, &read, &mut outcome).await?;
    if let Some(l) = live {
        // Shared ConfigMaps nothing names any more (their runs went with the history limit, their clusters
        // changed or went): a failed sweep is tried again after a later pass.
        match l.sweep_shared(client).await {
            Ok(deleted) => outcome.writes += deleted,
            Err(e) => warn!(error = %e, "sweeping the shared ConfigMaps failed"),
        }
    }
    PhaseTimes::add(&times.remove, removing);
    log_diagnostics(&outcome.diagnostics);
    if old != Some(new) {
        record_commit(client, &cfg.namespace, repo_url, ref_name, commit).await?;
        outcome.writes += 1;
    }
    reconciled(metrics, started, &outcome);
    times.log(started.elapsed());
    Ok(outcome)
}

/// Records `commit` of `ref_name` in `repo` as the last one reconciled.
async fn record_commit(
    client: &Client,
    namespace: &str,
    repo: String,
    ref_name: String,
    commit: String,
) -> Result<(), PassError> {
    let record = state::ReconcileState {
        repo,
        ref_name,
        commit,
        time: jiff::Timestamp::now().to_string(),
    };
    state::save_state(client, namespace, &record).await?;
    Ok(())
}

/// The short name of the reference the source follows (as resolved, when it is) and the repository's URL.
fn ref_and_url(source: &SharedSource) -> (String, String) {
    let s = source.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let reference = s.resolved_ref().unwrap_or(&s.config().reference).to_string();
    (short_ref(&reference), s.config().url.clone())
}

/// Counts a finished pass in `metrics` and logs what it did.
fn reconciled(metrics: &Metrics, started: Instant, outcome: &PassOutcome) {
    metrics.objects_written(outcome.writes as u64);
    metrics.observe_reconcile(started.elapsed());
    metrics.set_last_reconciled_commit_time(jiff::Timestamp::now().as_second());
    info!(
        commit = %outcome.commit,
        applied = outcome.applied.len(),
        invalid = outcome.invalid.len(),
        removed = outcome.removed.len(),
        writes = outcome.writes,
        "commit reconciled"
    );
}

/// How long a pass of `clusters` clusters waits for the watch caches' first list before it lists each
/// cluster's objects itself. A few LISTs cost less than a wait; a fleet's cost far more than the
/// caches' own list (at 10,000 clusters, 10,000 LISTs, each of which the API server answers by
/// filtering every run), so a pass over a fleet, such as the first resync of a restarted kok, waits.
fn caches_wait(clusters: usize) -> std::time::Duration {
    if clusters <= FEW_CLUSTERS {
        CACHES_READY
    } else {
        FLEET_CACHES_READY
    }
}

/// The watch caches, once they have listed; `None` (each cluster's objects are listed) without them
/// within [`caches_wait`] of a pass of `clusters` clusters.
async fn ready_caches(cfg: &PassConfig, clusters: usize) -> Option<&LiveCache> {
    let live = cfg.live.as_deref()?;
    let within = caches_wait(clusters);
    let started = Instant::now();
    loop {
        if live.ready(CACHES_READY).await {
            return Some(live);
        }
        if started.elapsed() >= within {
            warn!(
                clusters,
                "the watch caches have not listed yet; this pass lists each cluster's objects"
            );
            return None;
        }
        info!(
            clusters,
            waited_secs = started.elapsed().as_secs(),
            "waiting for the watch caches' first list: listing each of this pass's clusters would cost more"
        );
    }
}

/// The clusters `names` at `new`, each with its render context, parsed [`PARSE_PART`] at a time as
/// the stream is read; what each part found goes into `found`.
///
/// The clusters are parsed a part at a time, as the applies need them, and each cluster's parse is
/// dropped once it is applied: a fleet-size pass never holds the whole parsed commit, nor a part
/// beside caches already full of what earlier passes wrote.
fn parsed_clusters<'a>(
    source: &'a SharedSource,
    cfg: &'a PassConfig,
    (old, new): (Option<Oid>, Oid),
    names: &'a [String],
    base_ctx: &'a RenderContext,
    found: &'a Mutex<Found>,
    times: &'a PhaseTimes,
) -> impl futures::Stream<Item = Result<(Arc<RenderContext>, layout::ClusterDir), PassError>> + 'a {
    let parts = names.chunks(PARSE_PART).map(<[String]>::to_vec);
    stream::iter(parts)
        .then(move |part| {
            let root = cfg.root.clone();
            async move {
                let parsing = Instant::now();
                let (parsed, introduced) = with_source(source, move |s| {
                    source::read::read_clusters(s.repository(), old, new, &root, &part)
                })
                .await?;
                PhaseTimes::add(&times.parse, parsing);
                let mut ctx = base_ctx.clone();
                ctx.attribution = source::attribution::to_render_attribution(&introduced);
                let ctx = Arc::new(ctx);
                let mut found = found.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                found
                    .applied
                    .extend(parsed.clusters.iter().map(|c| c.name.clone()));
                found.invalid.extend(parsed.invalid);
                found.diagnostics.extend(parsed.diagnostics);
                let clusters = parsed.clusters.into_iter().map(move |c| Ok((ctx.clone(), c)));
                Ok::<_, PassError>(stream::iter(clusters))
            }
        })
        .try_flatten()
}

/// What applying one cluster of a pass needs besides the cluster.
struct Applying<'a> {
    client: &'a Client,
    namespace: &'a str,
    live: Option<&'a LiveCache>,
    trees: &'a crate::preflight::Trees,
    lookup: Option<Lookup<'a>>,
    untouched: &'a BTreeSet<String>,
    memberships: &'a BTreeMap<String, Vec<(&'a layout::rollouts::Rollout, &'a str)>>,
    broken: Option<&'a BTreeSet<String>>,
    times: &'a PhaseTimes,
}

impl Applying<'_> {
    /// Applies `clusters`, [`CONCURRENT_CLUSTERS`] at once; returns the writes.
    async fn apply_all(
        &self,
        clusters: impl futures::Stream<Item = Result<(Arc<RenderContext>, layout::ClusterDir), PassError>>,
    ) -> Result<usize, PassError> {
        clusters
            .map_ok(|(ctx, cluster)| self.apply(ctx, cluster))
            .try_buffered(CONCURRENT_CLUSTERS)
            .try_fold(0, |sum, writes| async move { Ok(sum + writes) })
            .await
    }

    /// Renders `cluster` with its rollouts' runs, checks and pins its new operations, and applies it
    /// against its live objects; returns the writes.
    async fn apply(&self, ctx: Arc<RenderContext>, cluster: layout::ClusterDir) -> Result<usize, PassError> {
        let rendering = Instant::now();
        let mut desired = materialize::render_cluster(&cluster, &ctx);
        if let Some(broken) = self.broken {
            let of = self.memberships.get(&cluster.name).map_or(&[][..], Vec::as_slice);
            rollout::add_rollouts(&mut desired, &cluster, of, broken, &ctx);
        }
        PhaseTimes::add(&self.times.render, rendering);
        let reading = Instant::now();
        let view = match cached(self.live, &cluster.name).await {
            Some(mut view) => {
                if let Some(cache) = self.live {
                    view.see_shared(&desired, |name| cache.has_config_map(name));
                }
                view
            }
            None => {
                let mut view = apply::read_live(self.client, self.namespace, &cluster.name).await?;
                apply::read_shared(self.client, self.namespace, &desired, &mut view).await?;
                view
            }
        };
        PhaseTimes::add(&self.times.live, reading);
        let checking = Instant::now();
        preflight(&mut desired, &cluster, &view, self.trees);
        if let Some(lookup) = &self.lookup {
            recall(&mut desired, &view, lookup).await?;
        }
        PhaseTimes::add(&self.times.preflight, checking);
        let name = cluster.name;
        let keep = self.untouched.contains(&name);
        let applying = Instant::now();
        let applied =
            apply::apply_cluster_from(self.client, self.namespace, &desired, Some(view), keep).await?;
        PhaseTimes::add(&self.times.apply, applying);
        Ok(noted(self.live, &name, applied))
    }
}

impl PassOutcome {
    /// Takes what the parts found, with the rollout files' problems, each said once.
    fn add_found(&mut self, found: Mutex<Found>, rollouts: Option<&RolloutsRead>) {
        let found = found
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        self.applied = found.applied;
        // Each part reads kok.yml again: its problems are said once.
        self.invalid = found.invalid;
        self.invalid.sort();
        self.invalid.dedup();
        self.diagnostics = found.diagnostics;
        if let Some(r) = rollouts {
            self.diagnostics.extend(r.diagnostics.iter().cloned());
        }
        self.diagnostics.sort();
        self.diagnostics.dedup();
    }
}

/// Removes the clusters whose directories are gone and, on a full resync, every live cluster the tree no
/// longer has; counts the writes in `outcome`.
async fn remove_gone(
    client: &Client,
    ns: &str,
    live: Option<&LiveCache>,
    read: &CommitChanges,
    outcome: &mut PassOutcome,
) -> Result<(), PassError> {
    outcome.writes += remove_clusters(client, ns, live, &read.changes.removed).await?;
    outcome.removed = read.changes.removed.clone();
    if read.changes.full_resync {
        // Everything still in the tree is desired, valid or not: an invalid cluster keeps its last good state.
        let desired: BTreeSet<String> = outcome
            .applied
            .iter()
            .cloned()
            .chain(outcome.invalid.iter().cloned())
            .collect();
        let names = match live {
            Some(l) => l.cluster_names(),
            None => apply::live_cluster_names(client, ns).await?,
        };
        let gone: Vec<String> = names.into_iter().filter(|n| !desired.contains(n)).collect();
        outcome.writes += remove_clusters(client, ns, live, &gone).await?;
    }
    Ok(())
}

/// Logs each of a pass's diagnostics: a refused cluster as a warning, a warning as information.
fn log_diagnostics(diagnostics: &[Diagnostic]) {
    for d in diagnostics {
        match d.severity {
            layout::Severity::Error => warn!(diagnostic = %d, "cluster refused"),
            layout::Severity::Warning => info!(diagnostic = %d, "warning"),
        }
    }
}

/// Checks the operations `desired` creates against kubespray's pre-flight rules, seen from the cluster's
/// live objects (the values its Cluster recorded, what health saw), and pins the errors into their specs:
/// the controller refuses them. Nothing is checked when the commit creates no operation of the cluster.
fn preflight(
    desired: &mut materialize::DesiredCluster,
    cluster: &layout::ClusterDir,
    live: &apply::Live,
    trees: &crate::preflight::Trees,
) {
    let checked = match pinning::creates_operations(desired, live) {
        true => {
            let seen = Seen {
                base: crate::preflight::Base::LastReconciled,
                simulated: false,
                tree: trees.for_image(&crate::preflight::release_source(cluster).image.value),
                before: None,
            };
            pinning::check(cluster, desired, live, &seen)
        }
        false => pinning::Checked::default(),
    };
    pinning::pin(desired, cluster, live, &checked);
    let runs = desired.rollouts.iter().map(|r| &r.operation);
    for op in pinning::new_operations(desired, live).chain(runs) {
        let Some(first) = op.spec.preflight.as_ref().and_then(|p| p.findings.first()) else {
            continue;
        };
        info!(cluster = %cluster.name, operation = %op.spec.id, rule = %first.rule, message = %first.message, "pre-flight refuses the operation");
    }
}

/// Marks the operations `desired` creates whose outcome the record in git already holds (their
/// ClusterOperation is gone: a lost meta-cluster, a new namespace, a deleted object) with that record
/// ([`ANNOTATION_RECORDED`]): the controller restores them as they ended instead of running them.
async fn recall(
    desired: &mut materialize::DesiredCluster,
    live: &apply::Live,
    lookup: &Lookup<'_>,
) -> Result<(), PassError> {
    for op in desired.operations.iter_mut() {
        if live.operations.contains_key(&op.name_any()) || op.spec.scheduled_time.is_some() {
            continue;
        }
        let context = run_context(&op.spec.cluster, &op.spec.id, None);
        let Some(recorded) = lookup
            .find(&op.spec.source.commit, &context, &op.spec.digest)
            .await?
        else {
            continue;
        };
        if recorded.status.state == StatusState::Pending
            && recorded.status.description.starts_with(HELD_PREFIX)
        {
            // Held by an earlier failure, so never started: created as it was, the restored failure
            // holds it again.
            continue;
        }
        info!(
            operation = %op.name_any(),
            commit = %op.spec.source.commit,
            from = %recorded.from,
            state = ?recorded.status.state,
            "the record in git holds this run: restored, not run again"
        );
        let json = serde_json::to_string(&recorded).map_err(|e| RecordError {
            sink: recorded.from.clone(),
            commit: op.spec.source.commit.clone(),
            reason: e.to_string(),
        })?;
        op.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(ANNOTATION_RECORDED.to_string(), json);
    }
    Ok(())
}

/// Reads the rollout files when a rollouts directory exists and something changed, and writes their
/// `FleetRollout` objects; returns them and the writes made.
async fn read_rollouts(
    client: &Client,
    source: &SharedSource,
    cfg: &PassConfig,
    old: Option<Oid>,
    new: Oid,
    read: &CommitChanges,
    ctx: &RenderContext,
) -> Result<(Option<RolloutsRead>, usize), PassError> {
    let (root, changes) = (cfg.root.clone(), read.clone());
    let rollouts = with_source(source, move |s| {
        source::read::read_rollouts(s.repository(), old, new, &root, &changes)
    })
    .await?;
    let Some(mut rollouts) = rollouts else {
        return Ok((None, 0));
    };
    let desired: Vec<_> = rollouts
        .rollouts
        .iter()
        .map(|r| rollout::render_rollout(r, ctx))
        .collect();
    let live = fleet::live_rollouts(client, &cfg.namespace).await?;
    let mut writes = fleet::decide_rollouts(&live, &desired, &rollouts.broken);
    let made = fleet::apply_rollouts(client, &cfg.namespace, &writes).await?;
    rollouts.touched = std::mem::take(&mut writes.touched);
    Ok((Some(rollouts), made))
}

/// Adds to the clusters a pass applies those whose runs of a rollout may change (the clusters of a
/// rollout that changed, before and after); they keep the revision they have.
fn widen_to_rollouts(read: &mut CommitChanges, rollouts: Option<&RolloutsRead>) {
    let Some(rollouts) = rollouts else { return };
    let removed: BTreeSet<&String> = read.changes.removed.iter().collect();
    let known: BTreeSet<String> = read.names.iter().cloned().collect();
    for name in &rollouts.touched {
        if !known.contains(name) && !removed.contains(name) {
            read.names.push(name.clone());
            read.untouched.insert(name.clone());
        }
    }
    read.names.sort();
}

/// The live objects of `cluster` from the caches, when there are caches and they vouch for it.
async fn cached(live: Option<&LiveCache>, cluster: &str) -> Option<apply::Live> {
    match live {
        Some(l) => l.live(cluster).await,
        None => None,
    }
}

/// Tells the caches what a cluster's writes left behind, so the next pass waits until they show it;
/// returns the number of writes.
fn noted(live: Option<&LiveCache>, cluster: &str, applied: apply::Applied) -> usize {
    if let Some(l) = live {
        l.wrote(cluster, applied.written);
    }
    applied.stats.writes
}

/// Removes the clusters `names` (their directories are gone), several at once; returns the writes.
async fn remove_clusters(
    client: &Client,
    namespace: &str,
    live: Option<&LiveCache>,
    names: &[String],
) -> Result<usize, PassError> {
    stream::iter(names)
        .map(|name| async move {
            let view = cached(live, name).await;
            let applied = apply::remove_cluster_from(client, namespace, name, view).await?;
            Ok::<_, PassError>(noted(live, name, applied))
        })
        .buffered(CONCURRENT_CLUSTERS)
        .try_fold(0, |sum, writes| async move { Ok(sum + writes) })
        .await
}

/// `main` for `refs/heads/main` and `refs/tags/main`; other names unchanged.
pub fn short_ref(reference: &str) -> String {
    reference
        .strip_prefix("refs/heads/")
        .or_else(|| reference.strip_prefix("refs/tags/"))
        .unwrap_or(reference)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_over_a_fleet_waits_for_the_watch_caches_rather_than_list_each_cluster() {
        assert_eq!(caches_wait(0), CACHES_READY);
        assert_eq!(
            caches_wait(1),
            CACHES_READY,
            "a one-cluster change lists its cluster after 10 s"
        );
        assert_eq!(caches_wait(FEW_CLUSTERS), CACHES_READY);
        assert_eq!(caches_wait(FEW_CLUSTERS + 1), FLEET_CACHES_READY);
        assert_eq!(caches_wait(10_000), FLEET_CACHES_READY);
        // 200,000 runs list in well under a minute; a fleet's pass waits that out many times over.
        assert!(FLEET_CACHES_READY >= CACHES_READY * 60);
    }

    #[test]
    fn short_ref_drops_heads_and_tags_prefixes() {
        assert_eq!(short_ref("refs/heads/main"), "main");
        assert_eq!(short_ref("refs/tags/v1"), "v1");
        assert_eq!(short_ref("refs/pull/1/head"), "refs/pull/1/head");
    }

    #[test]
    fn queue_bases_of_later_passes_sort_after_earlier_ones() {
        let a = queue_base(jiff::Timestamp::from_second(1_700_000_000).unwrap());
        let b = queue_base(jiff::Timestamp::from_second(1_800_000_000).unwrap());
        assert_eq!(a.len(), b.len());
        assert!(a < b);
    }
}
