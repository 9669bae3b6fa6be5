//! Rollouts in the controller: the wave decision taken before a run of a rollout starts, the wakes
//! when a run finishes, and the `FleetRollout` status.
//!
//! Everything is decided from the rollout's object (the controller's `FleetRollout` store) and the
//! per-rollout index of the operation cache ([`super::op_cache::OpCache::rollout_runs`]): no decision
//! lists or scans all operations.
//!
//! - Before a run starts: [`wave_decision`] ([`super::wave::Rollouts::may_start`]); a run Job this
//!   process is starting (a claim the cache does not show as Running yet) counts as running, so two
//!   reconciles never both take the last place of a wave's `maxParallel`. A run its wave holds says
//!   so even when no Job slot is free either, and does not wait for a slot: the end of a Job elsewhere
//!   does not wake it, so a closed wave's runs are not reconciled (nor their status rewritten) at each
//!   end in the wave before.
//! - A run that finishes wakes ([`wake_rollout`]) the waiting runs of its wave (as many as the wave has
//!   free places and a few more) and, once its wave finished, those of the waves after it; a change of the rollout's
//!   object wakes every waiting run of it. A bake's end wakes its waiting runs by a timer (the
//!   reconcile of a waiting run requeues at that instant, as maintenance windows do).
//! - The status ([`reconcile_status`]): phase, per-wave counts, the furthest open wave, when the next
//!   opens and why not yet; written only when it differs from the one the object has.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch};
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;
use serde_json::json;
use tracing::{info, warn};

use super::queue::Wait;
use super::runner::Action;
use super::wave::{RunState, WaveWait};
use super::Context;
use crate::api::{ClusterOperation, FleetRollout};
use crate::layout::rollouts::{MaxParallel, Rollout, Wave};
use crate::layout::Operation;

/// Waiting runs woken beyond a wave's free places when a run finishes: a woken run may still wait for
/// its own cluster (another operation runs there) or a window, and leave its place to the next.
/// Runs not woken look again at the queue's resync.
pub const WAKE_SPARE: usize = 8;

/// The rollout as the wave decisions read it, from its object's spec.
pub fn rollout_of_spec(r: &FleetRollout) -> Rollout {
    let spec = &r.spec;
    let waves: Vec<Wave> = spec
        .waves
        .iter()
        .map(|w| Wave {
            name: w.name.clone(),
            clusters: w.clusters.clone(),
            max_parallel: w.max_parallel.as_deref().and_then(parse_max_parallel),
            line: 0,
        })
        .collect();
    Rollout {
        name: r.name_any(),
        path: spec.source.path.clone(),
        operation: Operation::playbook(&spec.operation_id, &spec.action, 0),
        stop_after: spec
            .stop_after
            .as_ref()
            .and_then(|s| waves.iter().position(|w| w.name == *s)),
        waves,
        bake: SignedDuration::from_secs(spec.bake_seconds),
        max_failures: spec.max_failures,
        rerun: spec.rerun,
    }
}

/// `2` or `25%`, as the object carries a wave's `maxParallel`.
fn parse_max_parallel(text: &str) -> Option<MaxParallel> {
    match text.strip_suffix('%') {
        Some(p) => p.trim().parse().ok().map(MaxParallel::Percent),
        None => text.trim().parse().ok().map(MaxParallel::Count),
    }
}

/// The sha of a revision `<ref>@sha1:<sha>`.
pub fn commit_of(revision: &str) -> Option<&str> {
    revision.rsplit_once("@sha1:").map(|(_, sha)| sha)
}

/// The rollout object `name`, from the store.
fn rollout_object(ctx: &Context, name: &str) -> Option<Arc<FleetRollout>> {
    ctx.rollouts
        .get(&ObjectRef::new(name).within(&ctx.config.namespace))
}

/// The state of each cluster's latest run of `rollout`, runs this process is starting counted as running.
fn run_states(ctx: &Context, rollout: &str) -> BTreeMap<String, RunState> {
    let claims = ctx.claims.lock().map(|c| c.clone()).unwrap_or_default();
    ctx.operations
        .rollout_runs(rollout)
        .into_iter()
        .map(|(cluster, (name, state))| {
            let state = match state {
                RunState::Pending if claims.contains_key(&name) => RunState::Running,
                s => s,
            };
            (cluster, state)
        })
        .collect()
}

/// Whether `op`, a cluster's run of a rollout, may start now as far as its rollout's waves say.
pub fn wave_decision(ctx: &Context, op: &ClusterOperation, now: Timestamp) -> Result<(), Wait> {
    let Some(of) = &op.spec.rollout else {
        return Ok(());
    };
    let Some(object) = rollout_object(ctx, &of.name) else {
        return Err(Wait::Wave {
            rollout: of.name.clone(),
            wave: crate::materialize::rollout::wave_of(op)
                .unwrap_or_default()
                .to_string(),
            why: WaveWait::Closed {
                detail: "its FleetRollout object is not there".to_string(),
                opens: None,
            },
        });
    };
    let rollout = rollout_of_spec(&object);
    let runs = run_states(ctx, &of.name);
    super::wave::Rollouts::new(&rollout, &runs, now).may_start(&op.spec.cluster)
}

/// Whether a run that says `said` and now waits `why` (saying `message`) waits for the same closed
/// wave behind the same unfinished wave, only that wave's counts moved: such a run keeps its status
/// (true when written), so the successes of the wave before do not each rewrite every run behind it.
/// A wait for a bake's end or a promotion, or for another wave, is written again.
pub fn only_counts_moved(why: &Wait, said: Option<&str>, message: &str) -> bool {
    // `waiting for wave ring-2 of rollout bench (ring-1: 120/250 succeeded)`: all but the counts.
    fn behind(m: &str) -> Option<&str> {
        let (head, counts) = m.rsplit_once(": ")?;
        let (done, all) = counts.strip_suffix(" succeeded)")?.split_once('/')?;
        let number = |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
        (number(done) && number(all)).then_some(head)
    }
    let closed = matches!(
        why,
        Wait::Wave {
            why: WaveWait::Closed { opens: None, .. },
            ..
        }
    );
    closed && behind(message).is_some() && said.and_then(behind) == behind(message)
}

/// Wakes the runs of rollout `name` that a change may let start: with `finished` (a run of that
/// cluster finished), the waiting runs of its wave up to its free places (and [`WAKE_SPARE`] more)
/// and, when the wave finished, those of the later waves; without, every waiting run of the rollout.
/// Also looks at the status.
pub fn wake_rollout(ctx: &Context, name: &str, finished: Option<&str>) {
    ctx.rollout_queue.trigger(name);
    let Some(object) = rollout_object(ctx, name) else {
        return;
    };
    let rollout = rollout_of_spec(&object);
    let runs = ctx.operations.rollout_runs(name);
    let waiting = |cluster: &String| {
        runs.get(cluster)
            .filter(|(_, s)| *s == RunState::Pending)
            .map(|(n, _)| n.clone())
    };
    let from = finished
        .and_then(|c| {
            rollout
                .waves
                .iter()
                .position(|w| w.clusters.iter().any(|x| x == c))
        })
        .unwrap_or(0);
    for wave in rollout.waves.iter().skip(from) {
        let states = wave.clusters.iter().filter_map(|c| runs.get(c).map(|(_, s)| s));
        let running = states.clone().filter(|s| **s == RunState::Running).count();
        let unfinished = states
            .filter(|s| matches!(s, RunState::Pending | RunState::Running))
            .count()
            + wave.clusters.iter().filter(|c| !runs.contains_key(*c)).count();
        let free = match (finished, wave.max_parallel) {
            (Some(_), Some(m)) => m
                .limit(wave.clusters.len())
                .saturating_sub(running)
                .saturating_add(WAKE_SPARE),
            _ => usize::MAX,
        };
        for op in wave.clusters.iter().filter_map(waiting).take(free) {
            ctx.queue.trigger(&op);
        }
        if finished.is_some() && unfinished > 0 {
            break;
        }
    }
}

/// Writes the status of rollout `name` when it differs from the one its object has; requeues at the end
/// of a bake, when the phase changes by itself.
pub async fn reconcile_status(ctx: Arc<Context>, name: Arc<str>) -> Action {
    let Some(object) = rollout_object(&ctx, &name) else {
        return Action::await_change();
    };
    let rollout = rollout_of_spec(&object);
    let runs = run_states(&ctx, &name);
    let now = ctx.config.clock.now();
    let progress = super::wave::Rollouts::new(&rollout, &runs, now).progress();
    let mut status = progress.status();
    status.commit = commit_of(&object.spec.source.revision).map(str::to_string);
    status.desired_status = Some(progress.commit_status(&name, ctx.config.rollout_url.as_deref()));
    // `reported` is the reporter's: compared as it is, never written here.
    status.reported = object.status.as_ref().and_then(|s| s.reported.clone());
    let next = progress
        .next_open
        .map(|t| Duration::try_from(now.duration_until(t)).unwrap_or_default());
    let after = |next: Option<Duration>| next.map_or(Action::await_change(), Action::requeue);
    if object.status.as_ref() == Some(&status) {
        return after(next);
    }
    let api: Api<FleetRollout> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let mut patch = json!({"status": status});
    if let Some(s) = patch["status"].as_object_mut() {
        s.remove("reported");
    }
    match api
        .patch_status(&name, &crate::api::kok_params(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            info!(rollout = %name, phase = ?status.phase, summary = status.summary.as_deref().unwrap_or(""), "rollout status");
            after(next)
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Action::await_change(),
        Err(e) => {
            warn!(rollout = %name, error = %e, "writing the rollout's status failed; retrying");
            Action::requeue(Duration::from_secs(1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closed(wave: &str, detail: &str, opens: Option<Timestamp>) -> (Wait, String) {
        let why = Wait::Wave {
            rollout: "bench".into(),
            wave: wave.into(),
            why: WaveWait::Closed {
                detail: detail.into(),
                opens,
            },
        };
        let message = why.to_string();
        (why, message)
    }

    #[test]
    fn a_wait_behind_the_same_unfinished_wave_is_not_rewritten_for_its_counts_alone() {
        let (_, said) = closed("ring-3", "ring-1: 100/250 succeeded", None);
        let said = Some(said.as_str());
        let (why, message) = closed("ring-3", "ring-1: 120/250 succeeded", None);
        assert!(only_counts_moved(&why, said, &message));
        let (why, message) = closed("ring-3", "ring-2: 0/250 succeeded", None);
        assert!(!only_counts_moved(&why, said, &message), "behind another wave");
        let (why, message) = closed(
            "ring-3",
            "ring-1: 250/250 succeeded; baking until 14:30 UTC",
            None,
        );
        assert!(!only_counts_moved(&why, said, &message), "baking");
        let full = Wait::Wave {
            rollout: "bench".into(),
            wave: "ring-3".into(),
            why: WaveWait::Full { running: 5, max: 5 },
        };
        assert!(
            !only_counts_moved(&full, said, &full.to_string()),
            "its wave opened"
        );
        assert!(!only_counts_moved(&why, None, &message), "nothing said yet");
    }
}
