//! The rollouts of a plan: each rollout the range adds, changes or removes (or breaks), with its waves
//! and their clusters as the merge would make them, what the change runs again and what it only makes
//! wait differently (decided from the rollout files at both ends, as the pass reads them, and the runs
//! the meta-cluster shows).

use std::collections::{BTreeMap, BTreeSet};

use jiff::SignedDuration;
use serde::Serialize;

use git2::{Oid, Repository};

use crate::api::FleetRollout;
use crate::controller::wave::{Rollouts, RunState};
use crate::layout::rollouts::{rollouts_dir, MaxParallel, Rollout, Wave};
use crate::layout::{ClusterDir, Diagnostic, Severity};
use crate::materialize::fleet::decide_rollouts;
use crate::materialize::rollout::{add_rollouts, memberships, render_rollout};
use crate::materialize::{render_cluster, DesiredCluster, RenderContext};
pub use crate::source::read::rollouts_at;
use crate::source::read::{has_dir, RolloutsRead};
use crate::source::SourceError;

/// The rollouts at both ends of a plan's range, read and rendered as the service's pass reads and
/// renders them.
pub struct PlannedRollouts {
    /// The rollout files at the start (none without a rollouts directory, or without a start).
    pub from: Option<RolloutsRead>,
    /// The rollout files at the end (none when neither end has a rollouts directory).
    pub to: Option<RolloutsRead>,
    /// The `FleetRollout` objects the end renders.
    pub desired: Vec<FleetRollout>,
    /// The `FleetRollout` objects the start renders: the live ones of a plan without a meta-cluster.
    pub at_from: Vec<FleetRollout>,
    /// Clusters whose runs of a rollout may change: those of every rollout that changed, before and
    /// after.
    pub touched: BTreeSet<String>,
    files_from: RolloutFiles,
    files_to: RolloutFiles,
}

impl PlannedRollouts {
    /// Reads the rollout files at `from` and `to` under the cluster root `root` and renders their
    /// objects with `from_ctx` and `ctx`.
    pub fn read(
        repo: &Repository,
        from: Option<Oid>,
        to: Oid,
        root: &str,
        ctx: &RenderContext,
        from_ctx: &RenderContext,
    ) -> Result<PlannedRollouts, SourceError> {
        let dir = rollouts_dir(root);
        let at_to = match rollouts_at(repo, Some(to), root)? {
            None if from.is_some_and(|f| has_dir(repo, f, &dir)) => Some(RolloutsRead::default()),
            read => read,
        };
        let at_from = rollouts_at(repo, from, root)?;
        let render = |read: Option<&RolloutsRead>, ctx: &RenderContext| -> Vec<FleetRollout> {
            read.map(|r| r.rollouts.iter().map(|r| render_rollout(r, ctx)).collect())
                .unwrap_or_default()
        };
        let desired = render(at_to.as_ref(), ctx);
        let rendered_from = render(at_from.as_ref(), from_ctx);
        let broken = at_to.as_ref().map(|r| r.broken.clone()).unwrap_or_default();
        Ok(PlannedRollouts {
            touched: decide_rollouts(&rendered_from, &desired, &broken).touched,
            files_from: RolloutFiles::of(at_from.as_ref(), &dir),
            files_to: RolloutFiles::of(at_to.as_ref(), &dir),
            desired,
            at_from: rendered_from,
            from: at_from,
            to: at_to,
        })
    }

    /// `clusters` rendered at the end, each with its runs of the end's rollouts.
    pub fn render_at_to<'c>(
        &self,
        clusters: impl Iterator<Item = &'c ClusterDir>,
        ctx: &RenderContext,
    ) -> Vec<DesiredCluster> {
        render_with_runs(clusters, self.to.as_ref(), ctx)
    }

    /// `clusters` rendered at the start, each with its runs of the start's rollouts.
    pub fn render_at_from<'c>(
        &self,
        clusters: impl Iterator<Item = &'c ClusterDir>,
        ctx: &RenderContext,
    ) -> Vec<DesiredCluster> {
        render_with_runs(clusters, self.from.as_ref(), ctx)
    }

    /// The rollouts whose `rerun` the range bumps and whose operation it leaves alone.
    pub fn rerun_bumps(&self) -> Vec<String> {
        self.files_to
            .valid
            .values()
            .filter(|to| {
                self.files_from
                    .valid
                    .get(&to.name)
                    .is_some_and(|from| from.rerun != to.rerun && from.operation.entry == to.operation.entry)
            })
            .map(|r| r.name.clone())
            .collect()
    }

    /// The rollouts the range adds, changes, removes or breaks, with the writes of their objects
    /// decided against `live`; `runs` as for [`plan_rollouts`].
    pub fn plan(
        &self,
        live: &[FleetRollout],
        runs: &BTreeMap<String, BTreeMap<String, RunState>>,
    ) -> Vec<RolloutPlan> {
        let mut plans = plan_rollouts(&self.files_from, &self.files_to, runs);
        let broken = self.to.as_ref().map(|r| r.broken.clone()).unwrap_or_default();
        let writes = decide_rollouts(live, &self.desired, &broken);
        for plan in &mut plans {
            plan.object = if writes
                .apply
                .iter()
                .any(|r| r.metadata.name.as_deref() == Some(&plan.name))
            {
                Some("applied".to_string())
            } else if writes.delete.contains(&plan.name) {
                Some("deleted".to_string())
            } else {
                None
            };
        }
        plans
    }
}

/// Whether `commit` has the directory `dir`.
/// `clusters` rendered with `ctx`, each with its runs of the rollouts of `read` (each in the wave that
/// took it), as the pass renders a cluster.
fn render_with_runs<'c>(
    clusters: impl Iterator<Item = &'c ClusterDir>,
    read: Option<&RolloutsRead>,
    ctx: &RenderContext,
) -> Vec<DesiredCluster> {
    let memberships = read.map(|r| memberships(&r.rollouts)).unwrap_or_default();
    clusters
        .map(|cluster| {
            let mut desired = render_cluster(cluster, ctx);
            if let Some(read) = read {
                let of = memberships.get(&cluster.name).map_or(&[][..], Vec::as_slice);
                add_rollouts(&mut desired, cluster, of, &read.broken, ctx);
            }
            desired
        })
        .collect()
}

/// What the range does to a rollout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum RolloutChange {
    /// The file is new (or was invalid at the start and is valid now).
    Added,
    /// The file, or the clusters its waves pick, changed.
    Changed,
    /// The file is gone: runs not yet started are canceled, history stays.
    Removed,
    /// The file is invalid at the end: the rollout is refused alone, its last good state stays.
    Invalid,
}

impl RolloutChange {
    /// `added`, `changed`, `removed` or `invalid`.
    pub fn word(self) -> &'static str {
        match self {
            RolloutChange::Added => "added",
            RolloutChange::Changed => "changed",
            RolloutChange::Removed => "removed",
            RolloutChange::Invalid => "invalid",
        }
    }
}

/// One wave as the merge would make it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedWave {
    /// Wave name.
    pub name: String,
    /// Its clusters, sorted.
    pub clusters: Vec<String>,
    /// Those of them that were not in this wave at the start of the range (for a changed rollout).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub joined: Vec<String>,
    /// `2` or `25%`; absent: no limit of the wave's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_parallel: Option<String>,
    /// The limit for this wave's size, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_parallel_clusters: Option<usize>,
    /// True when `stopAfter` names an earlier wave: it does not open until a commit moves it.
    pub held_by_stop_after: bool,
}

/// Which clusters a `rerun` bump runs again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedRerun {
    /// The counter at the start and the end of the range.
    pub from: u64,
    /// The counter at the end.
    pub to: u64,
    /// The clusters whose latest run failed or was canceled, in wave order; `None` when the plan has no
    /// meta-cluster to read the runs from.
    pub clusters: Option<Vec<String>>,
}

/// A rollout the range adds, changes, removes or breaks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutPlan {
    /// Rollout name (its file name).
    pub name: String,
    /// Path of its file.
    pub path: String,
    /// What the range does to it.
    pub change: RolloutChange,
    /// Id of the operation every cluster runs (at the end; at the start for a removed rollout).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub operation: String,
    /// Playbook or script of that operation.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub action: String,
    /// True when every cluster of it runs the operation (again): the rollout is new or its operation
    /// was edited.
    pub new_run: bool,
    /// The waves at the end, in order (empty for a removed or invalid rollout).
    pub waves: Vec<PlannedWave>,
    /// Clusters that took part at the start and no longer do: their runs not yet started are canceled.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left: Vec<String>,
    /// `bake` at the end, e.g. `30m`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub bake: String,
    /// `maxFailures` at the end.
    pub max_failures: u32,
    /// `stopAfter` at the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_after: Option<String>,
    /// The settings the range changed, each as `key: old → new` with what that does.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<String>,
    /// A `rerun` bump, when the range makes one (on a rollout whose operation it leaves alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rerun: Option<PlannedRerun>,
    /// Problems of the file at the end: errors (an invalid rollout) or warnings.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub diagnostics: Vec<Diagnostic>,
    /// The write of its `FleetRollout` object: `applied` or `deleted` (none: the object stays).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
}

impl RolloutPlan {
    /// `added`, `changed`, `removed` or `invalid`.
    pub fn change_word(&self) -> &'static str {
        self.change.word()
    }

    /// `: FleetRollout applied` or `: FleetRollout deleted`, or nothing when its object stays.
    pub fn object_text(&self) -> String {
        self.object
            .as_ref()
            .map(|w| format!(": FleetRollout {w}"))
            .unwrap_or_default()
    }

    /// Number of clusters taking part at the end.
    pub fn cluster_count(&self) -> usize {
        self.waves.iter().map(|w| w.clusters.len()).sum()
    }

    /// True when the file at the end has an error.
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(|d| d.severity == Severity::Error)
    }

    /// `rollout upgrade-1-31 added: 4 clusters in 3 waves would run it`, for the `kok/plan` status.
    pub fn headline(&self) -> String {
        let size = format!("{} clusters in {} waves", self.cluster_count(), self.waves.len());
        let what = match self.change {
            RolloutChange::Removed | RolloutChange::Invalid => {
                return format!("rollout {} {}", self.name, self.change.word())
            }
            RolloutChange::Added => format!("{size} would run it"),
            RolloutChange::Changed if self.new_run => format!("operation edited, {size} would run it again"),
            RolloutChange::Changed => match self.rerun.as_ref().map(|r| &r.clusters) {
                Some(Some(c)) if !c.is_empty() => format!("rerun would run {} again", c.join(", ")),
                Some(Some(_)) => "rerun would run nothing again".to_string(),
                Some(None) => "rerun would run the failed or canceled clusters again".to_string(),
                None => "nothing would run again".to_string(),
            },
        };
        format!("rollout {} {}: {what}", self.name, self.change.word())
    }

    /// What the rerun bump does, in words.
    fn rerun_text(rerun: &PlannedRerun) -> String {
        let who = match &rerun.clusters {
            Some(c) if c.is_empty() => "none: no cluster's run failed or was canceled".to_string(),
            Some(c) => c.join(", "),
            None => "the clusters whose run failed or was canceled (which ones is in the meta-cluster: \
                     plan with --kubeconfig to list them)"
                .to_string(),
        };
        format!(
            "rerun: {} → {}: runs again {who}; a cluster that succeeded never runs again",
            rerun.from, rerun.to
        )
    }

    /// The lines of the rollout for humans, each without indentation or line break: what the change
    /// does, then its waves, then who leaves and the file's problems.
    pub fn lines(&self) -> Vec<String> {
        let mut out = self.head_lines();
        out.extend((0..self.waves.len()).map(|i| self.wave_line(i)));
        out.extend(self.tail_lines());
        out
    }

    /// What the change does and the settings at the end.
    fn head_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        match self.change {
            RolloutChange::Removed => {
                out.push(
                    "its runs not yet started are canceled; runs that started finish and history stays"
                        .to_string(),
                );
                return out;
            }
            RolloutChange::Invalid => {
                out.push("refused: the rollout stays as it was; clusters and other rollouts go on".into());
                return out;
            }
            RolloutChange::Added | RolloutChange::Changed => {}
        }
        let run = match (self.new_run, self.change) {
            (true, RolloutChange::Added) => "every cluster runs it, wave by wave",
            (true, _) => "edited: a new run on every cluster, wave by wave",
            (false, _) => "unchanged: nothing runs again but what the changes below say",
        };
        out.push(format!("operation {} ({}): {run}", self.operation, self.action));
        out.extend(self.changes.iter().cloned());
        if let Some(rerun) = &self.rerun {
            out.push(Self::rerun_text(rerun));
        }
        let mut settings = vec![
            format!("bake {}", self.bake),
            format!("maxFailures {}", self.max_failures),
        ];
        if let Some(stop) = &self.stop_after {
            settings.push(format!("stopAfter {stop}"));
        }
        out.push(settings.join(", "));
        out
    }

    /// `wave 2/3 beijing (maxParallel 2: 2 at once): prod-bj-1, prod-bj-2; joins: prod-bj-2`.
    fn wave_line(&self, i: usize) -> String {
        let w = &self.waves[i];
        let mut line = format!("wave {}/{} {}", i + 1, self.waves.len(), w.name);
        if let (Some(m), Some(n)) = (&w.max_parallel, w.max_parallel_clusters) {
            line.push_str(&format!(" (maxParallel {m}: {n} at once)"));
        }
        line.push_str(": ");
        line.push_str(&if w.clusters.is_empty() {
            "no cluster".to_string()
        } else {
            w.clusters.join(", ")
        });
        if !w.joined.is_empty() {
            line.push_str(&format!("; joins: {}", w.joined.join(", ")));
        }
        if w.held_by_stop_after {
            line.push_str(" [held by stopAfter]");
        }
        line
    }

    /// The clusters that leave, and the file's problems.
    fn tail_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.left.is_empty() {
            out.push(format!(
                "leave: {} (runs not yet started are canceled)",
                self.left.join(", ")
            ));
        }
        out.extend(self.diagnostics.iter().map(Diagnostic::to_string));
        out
    }
}

/// The rollout files of one end of the range: the valid rollouts and the problems of every file.
#[derive(Clone, Debug, Default)]
pub struct RolloutFiles {
    /// Valid rollouts, by name.
    pub valid: BTreeMap<String, Rollout>,
    /// Problems by rollout name (errors make the rollout invalid), in file order.
    pub diagnostics: BTreeMap<String, Vec<Diagnostic>>,
}

impl RolloutFiles {
    /// The files `read` found under the rollouts directory `dir` (none without a read).
    pub fn of(read: Option<&RolloutsRead>, dir: &str) -> RolloutFiles {
        match read {
            Some(read) => RolloutFiles::new(read.rollouts.clone(), &read.diagnostics, dir),
            None => RolloutFiles::default(),
        }
    }

    /// The files of `rollouts` and `diagnostics` (the repository's; those of files under `dir` are
    /// kept).
    pub fn new(rollouts: Vec<Rollout>, diagnostics: &[Diagnostic], dir: &str) -> RolloutFiles {
        let prefix = format!("{dir}/");
        let mut by_name: BTreeMap<String, Vec<Diagnostic>> = BTreeMap::new();
        for d in diagnostics.iter().filter(|d| d.path.starts_with(&prefix)) {
            let file = &d.path[prefix.len()..];
            let name = file.strip_suffix(".yml").unwrap_or(file);
            by_name.entry(name.to_string()).or_default().push(d.clone());
        }
        RolloutFiles {
            valid: rollouts.into_iter().map(|r| (r.name.clone(), r)).collect(),
            diagnostics: by_name,
        }
    }

    fn invalid(&self, name: &str) -> bool {
        !self.valid.contains_key(name)
            && self
                .diagnostics
                .get(name)
                .is_some_and(|d| d.iter().any(|d| d.severity == Severity::Error))
    }
}

/// `30m`, `1h30m`, `0s`.
pub fn duration_text(d: SignedDuration) -> String {
    let secs = d.as_secs();
    if secs == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    let mut rest = secs;
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if rest >= size {
            out.push_str(&format!("{}{unit}", rest / size));
            rest %= size;
        }
    }
    out
}

fn max_parallel_text(m: MaxParallel) -> String {
    match m {
        MaxParallel::Count(n) => n.to_string(),
        MaxParallel::Percent(p) => format!("{p}%"),
    }
}

/// A rollout's settings and waves as compared: lines and positions aside.
fn same_waves(a: &[Wave], b: &[Wave]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(a, b)| a.name == b.name && a.clusters == b.clusters && a.max_parallel == b.max_parallel)
}

fn same_rollout(a: &Rollout, b: &Rollout) -> bool {
    a.operation.entry == b.operation.entry
        && same_waves(&a.waves, &b.waves)
        && a.bake == b.bake
        && a.max_failures == b.max_failures
        && a.stop_after == b.stop_after
        && a.rerun == b.rerun
}

fn stop_name(r: &Rollout) -> Option<String> {
    r.stop_after.and_then(|i| r.waves.get(i)).map(|w| w.name.clone())
}

/// The settings `before → after` changed, each with what it does: none of them runs anything again.
fn setting_changes(before: &Rollout, after: &Rollout) -> Vec<String> {
    let mut out = Vec::new();
    let names = |r: &Rollout| {
        r.waves
            .iter()
            .map(|w| w.name.clone())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if names(before) != names(after) {
        out.push(format!(
            "waves: {} → {}: changes what waits, runs nothing again",
            names(before),
            names(after)
        ));
    }
    for w in &after.waves {
        let Some(old) = before.waves.iter().find(|o| o.name == w.name) else {
            continue;
        };
        if old.max_parallel != w.max_parallel {
            let shown = |m: Option<MaxParallel>| m.map_or("none".to_string(), max_parallel_text);
            out.push(format!(
                "maxParallel of wave {}: {} → {}",
                w.name,
                shown(old.max_parallel),
                shown(w.max_parallel)
            ));
        }
    }
    if before.bake != after.bake {
        out.push(format!(
            "bake: {} → {}",
            duration_text(before.bake),
            duration_text(after.bake)
        ));
    }
    if before.max_failures != after.max_failures {
        let more = if after.max_failures > before.max_failures {
            ": a rollout halted by failures may go on"
        } else {
            ""
        };
        out.push(format!(
            "maxFailures: {} → {}{more}",
            before.max_failures, after.max_failures
        ));
    }
    let (old_stop, new_stop) = (stop_name(before), stop_name(after));
    if old_stop != new_stop {
        let shown = |s: &Option<String>| s.clone().unwrap_or_else(|| "(none)".to_string());
        let what = match (after.stop_after, before.stop_after) {
            (None, _) => "every wave may open".to_string(),
            (Some(new), Some(old)) if new > old => {
                let opened: Vec<&str> = after.waves[old + 1..=new]
                    .iter()
                    .map(|w| w.name.as_str())
                    .collect();
                format!("promotes: wave {} may open", opened.join(", "))
            }
            (Some(new), _) => format!("no wave after {} opens", after.waves[new].name),
        };
        out.push(format!(
            "stopAfter: {} → {}: {what}",
            shown(&old_stop),
            shown(&new_stop)
        ));
    }
    out
}

/// The waves of `after` with their clusters, the ones that joined since `before`, and the hold of
/// `stopAfter`.
fn planned_waves(after: &Rollout, before: Option<&Rollout>) -> Vec<PlannedWave> {
    after
        .waves
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let old: BTreeSet<&String> = before
                .and_then(|b| b.waves.iter().find(|o| o.name == w.name))
                .map(|o| o.clusters.iter().collect())
                .unwrap_or_default();
            PlannedWave {
                name: w.name.clone(),
                clusters: w.clusters.clone(),
                joined: match before {
                    Some(_) => w.clusters.iter().filter(|c| !old.contains(c)).cloned().collect(),
                    None => Vec::new(),
                },
                max_parallel: w.max_parallel.map(max_parallel_text),
                max_parallel_clusters: w.max_parallel.map(|m| m.limit(w.clusters.len())),
                held_by_stop_after: after.stop_after.is_some_and(|s| i > s),
            }
        })
        .collect()
}

fn members(r: &Rollout) -> BTreeSet<&String> {
    r.waves.iter().flat_map(|w| &w.clusters).collect()
}

/// The rollouts `from → to` adds, changes, removes or breaks, sorted by name. `runs` holds, per rollout
/// whose `rerun` the range bumps, the latest run of each of its clusters as the meta-cluster shows them
/// (absent: the plan has no meta-cluster).
pub fn plan_rollouts(
    from: &RolloutFiles,
    to: &RolloutFiles,
    runs: &BTreeMap<String, BTreeMap<String, RunState>>,
) -> Vec<RolloutPlan> {
    let names: BTreeSet<&String> = from
        .valid
        .keys()
        .chain(to.valid.keys())
        .chain(to.diagnostics.keys())
        .collect();
    let mut out = Vec::new();
    for name in names {
        let before = from.valid.get(name);
        let after = to.valid.get(name);
        let diagnostics = to.diagnostics.get(name).cloned().unwrap_or_default();
        if to.invalid(name) {
            if from.diagnostics.get(name) != Some(&diagnostics) {
                out.push(invalid_plan(name, before, diagnostics));
            }
            continue;
        }
        let plan = match (before, after) {
            (Some(b), None) => RolloutPlan {
                change: RolloutChange::Removed,
                ..base_plan(b, Vec::new())
            },
            (None, Some(a)) => RolloutPlan {
                change: RolloutChange::Added,
                new_run: true,
                waves: planned_waves(a, None),
                ..base_plan(a, diagnostics)
            },
            (Some(b), Some(a)) if !same_rollout(b, a) => changed_plan(b, a, diagnostics, runs.get(name)),
            _ => continue,
        };
        out.push(plan);
    }
    out
}

/// The fields every kind of rollout plan shares, from `r`.
fn base_plan(r: &Rollout, diagnostics: Vec<Diagnostic>) -> RolloutPlan {
    RolloutPlan {
        name: r.name.clone(),
        path: r.path.clone(),
        change: RolloutChange::Changed,
        operation: r.operation.id.clone(),
        action: r.operation.action.clone(),
        new_run: false,
        waves: Vec::new(),
        left: Vec::new(),
        bake: duration_text(r.bake),
        max_failures: r.max_failures,
        stop_after: stop_name(r),
        changes: Vec::new(),
        rerun: None,
        diagnostics,
        object: None,
    }
}

fn invalid_plan(name: &str, before: Option<&Rollout>, diagnostics: Vec<Diagnostic>) -> RolloutPlan {
    let path = diagnostics
        .first()
        .map(|d| d.path.clone())
        .unwrap_or_else(|| before.map(|b| b.path.clone()).unwrap_or_default());
    RolloutPlan {
        name: name.to_string(),
        path,
        change: RolloutChange::Invalid,
        operation: String::new(),
        action: String::new(),
        new_run: false,
        waves: Vec::new(),
        left: Vec::new(),
        bake: String::new(),
        max_failures: 0,
        stop_after: None,
        changes: Vec::new(),
        rerun: None,
        diagnostics,
        object: None,
    }
}

fn changed_plan(
    before: &Rollout,
    after: &Rollout,
    diagnostics: Vec<Diagnostic>,
    runs: Option<&BTreeMap<String, RunState>>,
) -> RolloutPlan {
    let new_run = before.operation.entry != after.operation.entry;
    let now_in = members(after);
    let rerun = (!new_run && after.rerun != before.rerun).then(|| PlannedRerun {
        from: before.rerun,
        to: after.rerun,
        clusters: runs.map(|runs| {
            // Decided on the rollout as it was: a cluster that failed there and still takes part.
            Rollouts::new(before, runs, jiff::Timestamp::now())
                .rerun_clusters()
                .into_iter()
                .filter(|c| now_in.contains(c))
                .collect()
        }),
    });
    RolloutPlan {
        new_run,
        waves: planned_waves(after, Some(before)),
        left: members(before)
            .into_iter()
            .filter(|c| !now_in.contains(c))
            .cloned()
            .collect(),
        changes: setting_changes(before, after),
        rerun,
        ..base_plan(after, diagnostics)
    }
}

/// The rollouts of a plan as markdown, one section per rollout: what changes as a list, the waves as
/// a table.
pub fn markdown(rollouts: &[RolloutPlan], cell: impl Fn(&str) -> String) -> String {
    let mut out = String::new();
    for r in rollouts {
        out.push_str(&format!(
            "#### rollout {} ({}, `{}`){}\n\n",
            r.name,
            r.change.word(),
            r.path,
            r.object_text()
        ));
        for line in r.head_lines().iter().chain(&r.tail_lines()) {
            out.push_str(&format!("- {}\n", cell(line)));
        }
        if !r.waves.is_empty() {
            out.push_str("\n| wave | maxParallel | clusters | joins |\n|---|---|---|---|\n");
            for w in &r.waves {
                let held = if w.held_by_stop_after {
                    " (held by stopAfter)"
                } else {
                    ""
                };
                out.push_str(&format!(
                    "| {}{held} | {} | {} | {} |\n",
                    w.name,
                    w.max_parallel.as_deref().unwrap_or("-"),
                    cell(&w.clusters.join(", ")),
                    cell(&w.joined.join(", "))
                ));
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rollout() -> Rollout {
        let mut r = Rollout::of_waves(
            "upgrade",
            "upgrade-cluster.yml",
            &[
                ("canary", &["a"], None),
                ("beijing", &["b", "c"], Some(MaxParallel::Count(1))),
                ("rest", &["d"], Some(MaxParallel::Percent(25))),
            ],
        );
        r.bake = SignedDuration::from_mins(30);
        r.stop_after = Some(0);
        r
    }

    fn files(rollouts: Vec<Rollout>) -> RolloutFiles {
        RolloutFiles::new(rollouts, &[], "rollouts")
    }

    fn plan(from: Vec<Rollout>, to: Vec<Rollout>) -> Vec<RolloutPlan> {
        plan_rollouts(&files(from), &files(to), &BTreeMap::new())
    }

    #[test]
    fn an_added_rollout_shows_every_wave_with_its_clusters_limits_and_the_stop_after_hold() {
        let p = plan(vec![], vec![rollout()]);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].change, RolloutChange::Added);
        assert_eq!(
            p[0].lines(),
            vec![
                "operation upgrade (upgrade-cluster.yml): every cluster runs it, wave by wave",
                "bake 30m, maxFailures 0, stopAfter canary",
                "wave 1/3 canary: a",
                "wave 2/3 beijing (maxParallel 1: 1 at once): b, c [held by stopAfter]",
                "wave 3/3 rest (maxParallel 25%: 1 at once): d [held by stopAfter]",
            ]
        );
        assert_eq!(
            p[0].headline(),
            "rollout upgrade added: 4 clusters in 3 waves would run it"
        );
    }

    #[test]
    fn an_unchanged_rollout_is_not_in_the_plan_and_a_removed_one_says_what_is_canceled() {
        assert!(plan(vec![rollout()], vec![rollout()]).is_empty());
        let mut moved = rollout();
        moved.waves[0].line = 9;
        assert!(
            plan(vec![rollout()], vec![moved]).is_empty(),
            "lines do not count"
        );
        let p = plan(vec![rollout()], vec![]);
        assert_eq!(p[0].change, RolloutChange::Removed);
        assert!(p[0].lines()[0].starts_with("its runs not yet started are canceled"));
    }

    #[test]
    fn promoting_with_stop_after_names_the_waves_it_opens_and_runs_nothing_again() {
        let mut promoted = rollout();
        promoted.stop_after = Some(1);
        let p = &plan(vec![rollout()], vec![promoted])[0];
        assert_eq!(p.change, RolloutChange::Changed);
        assert!(!p.new_run);
        assert_eq!(
            p.changes,
            vec!["stopAfter: canary → beijing: promotes: wave beijing may open"]
        );
        assert!(!p.waves[1].held_by_stop_after && p.waves[2].held_by_stop_after);
        let mut all = rollout();
        all.stop_after = None;
        all.bake = SignedDuration::from_secs(5400);
        let p = &plan(vec![rollout()], vec![all])[0];
        assert_eq!(
            p.changes,
            vec![
                "bake: 30m → 1h30m",
                "stopAfter: canary → (none): every wave may open"
            ]
        );
    }

    #[test]
    fn an_edited_operation_is_a_new_run_and_clusters_that_join_or_leave_are_named() {
        let mut edited = rollout();
        edited.operation.entry["extraArgs"] = serde_json::json!(["-e", "v=2"]);
        edited.waves[1].clusters = vec!["b".into(), "e".into()];
        let p = &plan(vec![rollout()], vec![edited])[0];
        assert!(p.new_run);
        assert_eq!(p.waves[1].joined, vec!["e"]);
        assert_eq!(p.left, vec!["c"]);
        let lines = p.lines();
        assert_eq!(
            lines[0],
            "operation upgrade (upgrade-cluster.yml): edited: a new run on every cluster, wave by wave"
        );
        assert!(
            lines.contains(
                &"wave 2/3 beijing (maxParallel 1: 1 at once): b, e; joins: e [held by stopAfter]"
                    .to_string()
            ),
            "{lines:#?}"
        );
        assert!(lines.contains(&"leave: c (runs not yet started are canceled)".to_string()));
    }

    #[test]
    fn a_rerun_bump_names_the_failed_clusters_when_the_runs_are_known_and_says_so_when_not() {
        let mut bumped = rollout();
        bumped.rerun = 1;
        let p = &plan(vec![rollout()], vec![bumped.clone()])[0];
        assert_eq!(p.rerun.as_ref().unwrap().clusters, None);
        assert!(
            p.lines()
                .iter()
                .any(|l| l.starts_with("rerun: 0 → 1: runs again the clusters whose run failed or was canceled (which ones is in the meta-cluster")),
            "{:#?}",
            p.lines()
        );
        let at: jiff::Timestamp = "2026-11-28T14:00:00Z".parse().unwrap();
        let runs = BTreeMap::from([(
            "upgrade".to_string(),
            BTreeMap::from([
                ("a".to_string(), RunState::Succeeded { at }),
                ("b".to_string(), RunState::Failed("failed at TASK [x]".into())),
                ("c".to_string(), RunState::Canceled("canceled".into())),
            ]),
        )]);
        let p = &plan_rollouts(&files(vec![rollout()]), &files(vec![bumped]), &runs)[0];
        assert_eq!(
            p.rerun.as_ref().unwrap().clusters,
            Some(vec!["b".to_string(), "c".to_string()])
        );
        assert!(p.lines().contains(
            &"rerun: 0 → 1: runs again b, c; a cluster that succeeded never runs again".to_string()
        ));
    }

    #[test]
    fn an_invalid_rollout_file_is_shown_with_its_problems_once() {
        let d = Diagnostic {
            path: "rollouts/upgrade.yml".into(),
            line: 3,
            column: 5,
            severity: Severity::Error,
            message: "stopAfter \"x\" names no wave".into(),
            cluster: None,
        };
        let broken = RolloutFiles::new(vec![], std::slice::from_ref(&d), "rollouts");
        let p = plan_rollouts(&files(vec![rollout()]), &broken, &BTreeMap::new());
        assert_eq!(p[0].change, RolloutChange::Invalid);
        assert!(p[0].has_errors());
        assert_eq!(
            p[0].lines()[1],
            "rollouts/upgrade.yml:3:5: stopAfter \"x\" names no wave"
        );
        assert!(
            plan_rollouts(&broken, &broken, &BTreeMap::new()).is_empty(),
            "still broken the same way: nothing new"
        );
    }
}
