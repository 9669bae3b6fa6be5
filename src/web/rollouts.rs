//! What the rollout pages show: each rollout's waves with their clusters' progress, a rollout's line on
//! the fleet page, and the rollouts a cluster takes part in (pure, from the view's snapshots).

use std::collections::BTreeMap;

use jiff::Timestamp;
use kube::ResourceExt;
use serde::Serialize;

use super::pages::{reason_words, segments, Count};
use super::view::View;
use crate::api::{ClusterOperation, FleetRollout, Phase, RolloutPhase, LABEL_ROLLOUT, LABEL_WAVE};
use crate::controller::queue::{format_duration, phase};

/// A cluster's part in a rollout, by its latest run: the words the bars and the counts use.
fn run_word(op: Option<&ClusterOperation>) -> &'static str {
    match op.map(phase) {
        Some(Phase::Running) => "running",
        Some(Phase::Succeeded) => "succeeded",
        Some(Phase::Failed | Phase::Canceled) => "failed",
        Some(Phase::Pending | Phase::Queued) | None => "pending",
    }
}

/// The fleet page's state word (its colour) of a rollout phase.
fn phase_class(p: RolloutPhase) -> &'static str {
    match p {
        RolloutPhase::Progressing => "running",
        RolloutPhase::Baking | RolloutPhase::WaitingForPromotion => "waiting",
        RolloutPhase::Halted => "failed",
        RolloutPhase::Completed => "succeeded",
    }
}

/// One rollout in a list.
#[derive(Clone, Debug, Serialize)]
pub struct RolloutRow {
    /// Its name (the page's address).
    pub name: String,
    /// The operation every cluster of it runs.
    pub operation: String,
    /// Its phase in words: `waiting for promotion`.
    pub phase: String,
    /// The fleet's state word of that phase (its colour).
    pub class: &'static str,
    /// Clusters succeeded.
    pub done: u32,
    /// Clusters in all.
    pub total: usize,
    /// The same in percent, for the small bar.
    pub percent: f64,
    /// Why the next wave has not opened, or why it halted.
    pub why: Option<String>,
}

/// Clusters succeeded and in all from the status's wave counts (what the controller last wrote; all from
/// the spec when it has written none yet), and the share in percent.
fn progress_of(r: &FleetRollout) -> (u32, usize, f64) {
    let waves = r.status.as_ref().map(|s| s.waves.as_slice()).unwrap_or_default();
    let done: u32 = waves.iter().map(|w| w.succeeded).sum();
    let counted: u32 = waves
        .iter()
        .map(|w| w.pending + w.running + w.succeeded + w.failed)
        .sum();
    let all = if counted > 0 {
        counted as usize
    } else {
        r.spec.waves.iter().map(|w| w.clusters.len()).sum()
    };
    let percent = if all == 0 {
        0.0
    } else {
        (10_000.0 * f64::from(done) / all as f64).round() / 100.0
    };
    (done, all, percent)
}

/// The line of rollout `r`.
pub fn rollout_row(r: &FleetRollout) -> RolloutRow {
    let status = r.status.clone().unwrap_or_default();
    let (done, total, percent) = progress_of(r);
    RolloutRow {
        name: r.name_any(),
        operation: r.spec.operation_id.clone(),
        phase: reason_words(&format!("{:?}", status.phase)),
        class: phase_class(status.phase),
        done,
        total,
        percent,
        why: status.message,
    }
}

/// Every rollout of `view`, by name.
pub fn rollout_rows(view: &dyn View) -> Vec<RolloutRow> {
    let mut rows: Vec<RolloutRow> = view.rollouts().iter().map(rollout_row).collect();
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    rows
}

/// A cluster of a wave.
#[derive(Clone, Debug, Serialize)]
pub struct WaveCluster {
    /// Cluster name (its page's address).
    pub name: String,
    /// succeeded, running, failed or pending.
    pub state: &'static str,
    /// Its latest run of the rollout, when there is one.
    pub operation: Option<String>,
}

/// One wave with its clusters' progress.
#[derive(Clone, Debug, Serialize)]
pub struct WaveLine {
    /// Wave name.
    pub name: String,
    /// At most this many run at once, as written (`2`, `25%`).
    pub max_parallel: Option<String>,
    /// It is the rollout's furthest open wave.
    pub current: bool,
    /// Its clusters by state, as bar segments: succeeded, running, failed, pending.
    pub segments: Vec<Count>,
    /// Its clusters, each with its state.
    pub clusters: Vec<WaveCluster>,
}

/// `/rollouts/<name>`: one rollout.
#[derive(Clone, Debug, Serialize)]
pub struct RolloutPage {
    /// Its line as the fleet page shows it.
    pub row: RolloutRow,
    /// The playbook (or script) it runs.
    pub action: String,
    /// Its file in the repository.
    pub path: String,
    /// The commit that introduced or last changed it.
    pub commit: Option<String>,
    /// That commit's first 8 characters.
    pub short: Option<String>,
    /// Its progress in one line, as its commit status says it.
    pub summary: Option<String>,
    /// When the next wave may open (RFC 3339), and how long until then.
    pub next_wave: Option<(String, String)>,
    /// Its rules: bake time, failures tolerated, the last wave that may open.
    pub rules: Vec<String>,
    /// The waves in order.
    pub waves: Vec<WaveLine>,
}

/// The order of a wave's bar: done first, then what runs, what failed, what waits.
const WAVE_STATES: [&str; 4] = ["succeeded", "running", "failed", "pending"];

/// The page of rollout `name`, `None` when the view has no such rollout.
pub fn rollout(view: &dyn View, name: &str, now: Timestamp) -> Option<RolloutPage> {
    let r = view.rollouts().into_iter().find(|r| r.name_any() == name)?;
    let runs = view.rollout_runs(name);
    let status = r.status.clone().unwrap_or_default();
    let waves = r
        .spec
        .waves
        .iter()
        .map(|w| {
            let clusters: Vec<WaveCluster> = w
                .clusters
                .iter()
                .map(|c| WaveCluster {
                    name: c.clone(),
                    state: run_word(runs.get(c)),
                    operation: runs.get(c).map(|op| op.name_any()),
                })
                .collect();
            let parts = WAVE_STATES.map(|s| (s, clusters.iter().filter(|c| c.state == s).count()));
            WaveLine {
                name: w.name.clone(),
                max_parallel: w.max_parallel.clone(),
                current: status.current_wave.as_deref() == Some(w.name.as_str()),
                segments: segments(&parts),
                clusters,
            }
        })
        .collect();
    let spec = &r.spec;
    let mut rules = Vec::new();
    if spec.bake_seconds > 0 {
        rules.push(format!(
            "each wave bakes {} after it succeeded",
            format_duration(spec.bake_seconds)
        ));
    }
    rules.push(match spec.max_failures {
        0 => "halts at the first failed run".to_string(),
        n => format!("halts after more than {n} failed runs"),
    });
    if let Some(last) = &spec.stop_after {
        rules.push(format!(
            "opens no wave after {last} until a commit moves stopAfter"
        ));
    }
    let next_wave = status.next_wave_time.as_ref().map(|t| {
        let within = (t.0.as_second() - now.as_second()).max(0);
        (t.0.to_string(), format_duration(within))
    });
    Some(RolloutPage {
        row: rollout_row(&r),
        action: spec.action.clone(),
        path: spec.source.path.clone(),
        short: status.commit.as_ref().map(|c| c.chars().take(8).collect()),
        commit: status.commit.clone(),
        summary: status.summary.clone(),
        next_wave,
        rules,
        waves,
    })
}

/// A rollout a cluster takes part in, as its page lists it.
#[derive(Clone, Debug, Serialize)]
pub struct Part {
    /// The rollout (its page's address).
    pub rollout: String,
    /// The wave the cluster is in.
    pub wave: Option<String>,
    /// The cluster's latest run of it.
    pub operation: String,
    /// That run's phase.
    pub phase: String,
    /// The rollout's line, while the rollout exists.
    pub row: Option<RolloutRow>,
}

/// The rollouts `ops` (a cluster's operations) are runs of, by their `kok.dev/rollout` and
/// `kok.dev/wave` labels: the latest run of each, by rollout name.
pub fn parts(view: &dyn View, ops: &[ClusterOperation]) -> Vec<Part> {
    let mut latest: BTreeMap<&str, &ClusterOperation> = BTreeMap::new();
    let key = |o: &ClusterOperation| (o.metadata.creation_timestamp.clone().map(|t| t.0), o.name_any());
    for op in ops {
        let Some(rollout) = op.labels().get(LABEL_ROLLOUT) else {
            continue;
        };
        if latest.get(rollout.as_str()).is_none_or(|old| key(op) > key(old)) {
            latest.insert(rollout, op);
        }
    }
    if latest.is_empty() {
        return Vec::new();
    }
    let rollouts = view.rollouts();
    latest
        .into_iter()
        .map(|(rollout, op)| Part {
            rollout: rollout.to_string(),
            wave: op.labels().get(LABEL_WAVE).cloned(),
            operation: op.name_any(),
            phase: phase(op).as_str().to_string(),
            row: rollouts.iter().find(|r| r.name_any() == rollout).map(rollout_row),
        })
        .collect()
}
