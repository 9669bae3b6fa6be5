//! Rollout waves as start decisions (pure): which waves are open, whether a cluster's run of the
//! rollout's operation may start ([`Wait::Wave`] when not), the rollout's phase and counts, and which
//! clusters a `rerun` bump runs again.
//!
//! The decisions read only the rollout file (its waves, in order, each with its clusters) and the state
//! of each participating cluster's latest run, so they are cheap to take again at every change:
//!
//! - A wave opens when every cluster of the earlier waves has finished (succeeded, or failed within
//!   `maxFailures`), `bake` has passed since the last of their successes, `stopAfter` allows it and
//!   the rollout is not halted. A wave one of whose clusters (or a later wave's) has started stays
//!   open, so a cluster that joins an earlier wave later runs without closing the waves past it;
//!   `stopAfter` and a halt still hold every cluster that has not started.
//! - Inside an open wave at most `maxParallel` of its clusters run at once.
//! - More failed or canceled latest runs than `maxFailures` halt the rollout: nothing of it starts,
//!   running ones finish. Raising `maxFailures`, or a `rerun` bump (the failed clusters' new runs are
//!   no longer failed), lets it go on.

use std::collections::BTreeMap;

use jiff::Timestamp;

use super::queue::Wait;
use crate::api::{rollout_context, CommitStatus, FleetRolloutStatus, RolloutPhase, StatusState, WaveStatus};
use crate::layout::rollouts::{Rollout, Wave};
use crate::report::status::{cut, MAX_STORED_DESCRIPTION};

/// The state of a cluster's latest run of the rollout's operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunState {
    /// Created (or not yet), not started.
    Pending,
    /// Its Job runs.
    Running,
    /// Succeeded (and verified, where the cluster can be), at `at`.
    Succeeded {
        /// When it succeeded.
        at: Timestamp,
    },
    /// Failed, with what went wrong: `failed at TASK [...] on node2: ...`.
    Failed(String),
    /// Canceled after it started, with why.
    Canceled(String),
}

impl RunState {
    fn started(&self) -> bool {
        !matches!(self, RunState::Pending)
    }

    fn failed(&self) -> Option<&str> {
        match self {
            RunState::Failed(m) | RunState::Canceled(m) => Some(m),
            _ => None,
        }
    }
}

/// Why a wave keeps a cluster waiting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaveWait {
    /// The wave has not opened: `detail` says why (`canary: 1/1 succeeded; baking until 14:30 UTC`),
    /// `opens` when a bake will have passed.
    Closed {
        /// The earlier wave's progress and what else holds it.
        detail: String,
        /// When the bake ends, if that is all it waits for.
        opens: Option<Timestamp>,
    },
    /// `maxParallel` of the wave's clusters run already.
    Full {
        /// Running in the wave.
        running: usize,
        /// The wave's limit.
        max: usize,
    },
    /// The rollout halted: `halted at wave beijing: prod-bj-2 failed at TASK [...]`.
    Halted(String),
}

/// Counts of one wave's clusters by the state of their latest run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WaveCounts {
    /// Wave name.
    pub name: String,
    /// Not started.
    pub pending: usize,
    /// Running.
    pub running: usize,
    /// Succeeded.
    pub succeeded: usize,
    /// Failed or canceled.
    pub failed: usize,
}

impl WaveCounts {
    fn total(&self) -> usize {
        self.pending + self.running + self.succeeded + self.failed
    }

    /// Every cluster finished: succeeded or failed.
    fn finished(&self) -> bool {
        self.pending == 0 && self.running == 0
    }
}

/// What the decisions say about a whole rollout: its phase, per-wave counts, the furthest open wave, and
/// when and why the next one opens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    /// The phase.
    pub phase: RolloutPhase,
    /// Counts per wave, in order.
    pub waves: Vec<WaveCounts>,
    /// Index of the furthest open wave.
    pub current: usize,
    /// When the next wave may open (a bake's end).
    pub next_open: Option<Timestamp>,
    /// Why the next wave has not opened, or why the rollout halted.
    pub why_not: Option<String>,
}

impl Progress {
    /// `wave 2/3 beijing: 5/8 succeeded, 0 failed`, for the commit status of the rollout.
    pub fn summary(&self) -> String {
        let w = &self.waves[self.current];
        format!(
            "wave {}/{} {}: {}/{} succeeded, {} failed",
            self.current + 1,
            self.waves.len(),
            w.name,
            w.succeeded,
            w.total(),
            w.failed
        )
    }

    /// `12/40`: clusters succeeded of all, for a printer column.
    pub fn progress(&self) -> String {
        let done: usize = self.waves.iter().map(|w| w.succeeded).sum();
        let all: usize = self.waves.iter().map(WaveCounts::total).sum();
        format!("{done}/{all}")
    }

    /// The `kok/rollout/<name>` commit status: pending while it goes on (the summary), success once
    /// completed, failure with the halt's reason once halted; linked to `url_template` with `{rollout}`
    /// replaced (the web view's rollout page, with `--web-url`).
    pub fn commit_status(&self, rollout: &str, url_template: Option<&str>) -> CommitStatus {
        let (state, description) = match self.phase {
            RolloutPhase::Completed => (StatusState::Success, self.summary()),
            RolloutPhase::Halted => (
                StatusState::Failure,
                self.why_not.clone().unwrap_or_else(|| self.summary()),
            ),
            _ => (StatusState::Pending, self.summary()),
        };
        CommitStatus {
            context: rollout_context(rollout),
            state,
            description: cut(&description, MAX_STORED_DESCRIPTION),
            target_url: url_template.map(|t| t.replace("{rollout}", rollout)),
            run: None,
        }
    }

    /// The status of the rollout's object.
    pub fn status(&self) -> FleetRolloutStatus {
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        FleetRolloutStatus {
            phase: self.phase,
            waves: self
                .waves
                .iter()
                .map(|w| WaveStatus {
                    name: w.name.clone(),
                    pending: count(w.pending),
                    running: count(w.running),
                    succeeded: count(w.succeeded),
                    failed: count(w.failed),
                })
                .collect(),
            current_wave: Some(self.waves[self.current].name.clone()),
            progress: Some(self.progress()),
            next_wave_time: self
                .next_open
                .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time),
            message: self.why_not.clone(),
            summary: Some(self.summary()),
            ..FleetRolloutStatus::default()
        }
    }
}

/// The decisions over one rollout and the latest run of each of its clusters (absent: Pending).
pub struct Rollouts<'a> {
    rollout: &'a Rollout,
    runs: &'a BTreeMap<String, RunState>,
    now: Timestamp,
}

const PENDING: RunState = RunState::Pending;

impl<'a> Rollouts<'a> {
    /// The decisions for `rollout` at `now`.
    pub fn new(rollout: &'a Rollout, runs: &'a BTreeMap<String, RunState>, now: Timestamp) -> Self {
        Rollouts { rollout, runs, now }
    }

    fn state(&self, cluster: &str) -> &RunState {
        self.runs.get(cluster).unwrap_or(&PENDING)
    }

    fn counts(&self, wave: &Wave) -> WaveCounts {
        let mut c = WaveCounts {
            name: wave.name.clone(),
            ..WaveCounts::default()
        };
        for cluster in &wave.clusters {
            match self.state(cluster) {
                RunState::Pending => c.pending += 1,
                RunState::Running => c.running += 1,
                RunState::Succeeded { .. } => c.succeeded += 1,
                RunState::Failed(_) | RunState::Canceled(_) => c.failed += 1,
            }
        }
        c
    }

    /// `halted at wave beijing: prod-bj-2 failed at ...` when more runs failed than `maxFailures`: the
    /// failure in the furthest wave names it.
    pub fn halted(&self) -> Option<String> {
        let failures: Vec<(&Wave, &String, &str)> = self
            .rollout
            .waves
            .iter()
            .flat_map(|w| w.clusters.iter().map(move |c| (w, c)))
            .filter_map(|(w, c)| Some((w, c, self.state(c).failed()?)))
            .collect();
        if failures.len() <= self.rollout.max_failures as usize {
            return None;
        }
        let (wave, cluster, message) = failures.last()?;
        Some(format!("halted at wave {}: {cluster} {message}", wave.name))
    }

    /// When the bake after the waves before `k` ends: the last of their successes plus `bake`.
    fn bake_end(&self, k: usize) -> Option<Timestamp> {
        let last = self.rollout.waves[..k]
            .iter()
            .flat_map(|w| &w.clusters)
            .filter_map(|c| match self.state(c) {
                RunState::Succeeded { at } => Some(*at),
                _ => None,
            })
            .max()?;
        last.checked_add(self.rollout.bake).ok()
    }

    /// Why wave `k` is not open, when it is not (a halt aside).
    fn closed(&self, k: usize) -> Option<WaveWait> {
        if k == 0 {
            return None;
        }
        let before = self.counts(&self.rollout.waves[k - 1]);
        let progress = format!(
            "{}: {}/{} succeeded",
            before.name,
            before.succeeded,
            before.total()
        );
        if self.rollout.stop_after.is_some_and(|s| k > s) {
            let stop = &self.rollout.waves[self.rollout.stop_after.unwrap_or_default()].name;
            return Some(WaveWait::Closed {
                detail: format!("{progress}; stopAfter: {stop}, waiting for a commit that promotes it"),
                opens: None,
            });
        }
        let started_here = self.rollout.waves[k..]
            .iter()
            .flat_map(|w| &w.clusters)
            .any(|c| self.state(c).started());
        if started_here {
            return None;
        }
        if let Some(unfinished) = self.rollout.waves[..k]
            .iter()
            .map(|w| self.counts(w))
            .find(|c| !c.finished())
        {
            return Some(WaveWait::Closed {
                detail: format!(
                    "{}: {}/{} succeeded",
                    unfinished.name,
                    unfinished.succeeded,
                    unfinished.total()
                ),
                opens: None,
            });
        }
        let end = self.bake_end(k).filter(|end| *end > self.now)?;
        Some(WaveWait::Closed {
            detail: format!("{progress}; baking until {}", self.clock_text(end)),
            opens: Some(end),
        })
    }

    /// `14:30 UTC` today, else `2026-11-28 14:30 UTC`.
    fn clock_text(&self, t: Timestamp) -> String {
        if t.strftime("%F").to_string() == self.now.strftime("%F").to_string() {
            t.strftime("%H:%M UTC").to_string()
        } else {
            t.strftime("%Y-%m-%d %H:%M UTC").to_string()
        }
    }

    /// Whether `cluster`'s run may start now, as far as the rollout is concerned (its cluster's queue,
    /// windows and Job slots are decided apart).
    pub fn may_start(&self, cluster: &str) -> Result<(), Wait> {
        let Some((k, wave)) = self
            .rollout
            .waves
            .iter()
            .enumerate()
            .find(|(_, w)| w.clusters.iter().any(|c| c == cluster))
        else {
            return Ok(());
        };
        let wait = |why| Wait::Wave {
            rollout: self.rollout.name.clone(),
            wave: wave.name.clone(),
            why,
        };
        if let Some(message) = self.halted() {
            return Err(wait(WaveWait::Halted(message)));
        }
        if let Some(why) = self.closed(k) {
            return Err(wait(why));
        }
        if let Some(limit) = wave.max_parallel.map(|m| m.limit(wave.clusters.len())) {
            let running = self.counts(wave).running;
            if running >= limit {
                return Err(wait(WaveWait::Full { running, max: limit }));
            }
        }
        Ok(())
    }

    /// The rollout's phase, counts and next opening.
    pub fn progress(&self) -> Progress {
        let waves: Vec<WaveCounts> = self.rollout.waves.iter().map(|w| self.counts(w)).collect();
        let halted = self.halted();
        let first_closed = (0..waves.len()).find(|k| self.closed(*k).is_some());
        let current = first_closed.map_or(waves.len() - 1, |k| k - 1);
        let (phase, next_open, why_not) = if let Some(message) = halted {
            (RolloutPhase::Halted, None, Some(message))
        } else if waves.iter().all(WaveCounts::finished) {
            (RolloutPhase::Completed, None, None)
        } else {
            match first_closed.and_then(|k| self.closed(k)) {
                Some(WaveWait::Closed { detail, opens })
                    if waves[..current + 1].iter().all(WaveCounts::finished) =>
                {
                    let phase = match opens {
                        Some(_) => RolloutPhase::Baking,
                        None => RolloutPhase::WaitingForPromotion,
                    };
                    (phase, opens, Some(detail))
                }
                _ => (RolloutPhase::Progressing, None, None),
            }
        };
        Progress {
            phase,
            waves,
            current,
            next_open,
            why_not,
        }
    }

    /// The clusters a `rerun` bump runs again: those whose latest run failed or was canceled, in wave
    /// order. A cluster that succeeded never runs again.
    pub fn rerun_clusters(&self) -> Vec<String> {
        self.rollout
            .waves
            .iter()
            .flat_map(|w| &w.clusters)
            .filter(|c| self.state(c).failed().is_some())
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::rollouts::MaxParallel;
    use jiff::SignedDuration;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    /// The example: canary (prod-sh-1), beijing (prod-bj-1..3, 2 at once), rest (25%).
    fn upgrade() -> Rollout {
        let mut r = Rollout::of_waves(
            "upgrade-1-31",
            "upgrade-cluster.yml",
            &[
                ("canary", &["prod-sh-1"], None),
                (
                    "beijing",
                    &["prod-bj-1", "prod-bj-2", "prod-bj-3"],
                    Some(MaxParallel::Count(2)),
                ),
                (
                    "rest",
                    &["prod-sh-2", "prod-sh-3"],
                    Some(MaxParallel::Percent(25)),
                ),
            ],
        );
        r.bake = SignedDuration::from_mins(30);
        r
    }

    fn runs(states: &[(&str, RunState)]) -> BTreeMap<String, RunState> {
        states.iter().map(|(c, s)| (c.to_string(), s.clone())).collect()
    }

    fn ok(t: &str) -> RunState {
        RunState::Succeeded { at: at(t) }
    }

    fn says(r: &Rollout, runs: &BTreeMap<String, RunState>, now: &str, cluster: &str) -> String {
        match Rollouts::new(r, runs, at(now)).may_start(cluster) {
            Ok(()) => "start".into(),
            Err(w) => w.to_string(),
        }
    }

    #[test]
    fn the_first_wave_starts_and_the_next_waits_for_it_with_a_status_that_says_why() {
        let r = upgrade();
        let none = runs(&[]);
        assert_eq!(says(&r, &none, "2026-11-28T14:00:00Z", "prod-sh-1"), "start");
        assert_eq!(
            says(&r, &none, "2026-11-28T14:00:00Z", "prod-bj-1"),
            "waiting for wave beijing of rollout upgrade-1-31 (canary: 0/1 succeeded)"
        );
        assert_eq!(
            says(&r, &none, "2026-11-28T14:00:00Z", "prod-sh-2"),
            "waiting for wave rest of rollout upgrade-1-31 (canary: 0/1 succeeded)",
            "the earliest unfinished wave is named"
        );
        let p = Rollouts::new(&r, &none, at("2026-11-28T14:00:00Z")).progress();
        assert_eq!((p.phase, p.current), (RolloutPhase::Progressing, 0));
        assert_eq!(p.progress(), "0/6");
    }

    #[test]
    fn a_wave_opens_when_the_bake_after_the_last_success_has_passed() {
        let r = upgrade();
        let done = runs(&[("prod-sh-1", ok("2026-11-28T14:00:00Z"))]);
        let wait = Rollouts::new(&r, &done, at("2026-11-28T14:10:00Z"))
            .may_start("prod-bj-1")
            .unwrap_err();
        assert_eq!(
            wait.to_string(),
            "waiting for wave beijing of rollout upgrade-1-31 (canary: 1/1 succeeded; baking until 14:30 UTC)"
        );
        assert_eq!(
            wait.wake_at(),
            Some(at("2026-11-28T14:30:00Z")),
            "a timer wakes it"
        );
        let p = Rollouts::new(&r, &done, at("2026-11-28T14:10:00Z")).progress();
        assert_eq!(p.phase, RolloutPhase::Baking);
        assert_eq!(p.next_open, Some(at("2026-11-28T14:30:00Z")));
        let status = p.status();
        assert_eq!(status.phase, RolloutPhase::Baking);
        assert_eq!(
            status.next_wave_time.map(|t| t.0),
            Some(at("2026-11-28T14:30:00Z"))
        );
        assert_eq!(
            status.message.as_deref(),
            Some("canary: 1/1 succeeded; baking until 14:30 UTC")
        );
        assert_eq!(
            status.summary.as_deref(),
            Some("wave 1/3 canary: 1/1 succeeded, 0 failed")
        );
        assert_eq!(says(&r, &done, "2026-11-28T14:30:00Z", "prod-bj-1"), "start");
        let late = Rollouts::new(&r, &done, at("2026-11-27T23:50:00Z")).may_start("prod-bj-1");
        assert!(late
            .unwrap_err()
            .to_string()
            .contains("baking until 2026-11-28 14:30 UTC"));
    }

    #[test]
    fn stop_after_holds_the_next_wave_until_a_commit_moves_it() {
        let mut r = upgrade();
        r.stop_after = Some(0);
        let done = runs(&[("prod-sh-1", ok("2026-11-28T14:00:00Z"))]);
        assert_eq!(
            says(&r, &done, "2026-11-28T18:00:00Z", "prod-bj-1"),
            "waiting for wave beijing of rollout upgrade-1-31 (canary: 1/1 succeeded; stopAfter: canary, \
             waiting for a commit that promotes it)"
        );
        let p = Rollouts::new(&r, &done, at("2026-11-28T18:00:00Z")).progress();
        assert_eq!((p.phase, p.next_open), (RolloutPhase::WaitingForPromotion, None));
        r.stop_after = Some(1);
        assert_eq!(says(&r, &done, "2026-11-28T18:00:00Z", "prod-bj-1"), "start");
    }

    #[test]
    fn inside_a_wave_at_most_max_parallel_run_as_a_number_or_a_percentage() {
        let r = upgrade();
        let mut state = runs(&[
            ("prod-sh-1", ok("2026-11-28T14:00:00Z")),
            ("prod-bj-1", RunState::Running),
            ("prod-bj-2", RunState::Running),
        ]);
        assert_eq!(
            says(&r, &state, "2026-11-28T15:00:00Z", "prod-bj-3"),
            "waiting for wave beijing of rollout upgrade-1-31 (maxParallel: 2 of 2 running)"
        );
        state.insert("prod-bj-1".into(), ok("2026-11-28T15:10:00Z"));
        assert_eq!(says(&r, &state, "2026-11-28T15:10:00Z", "prod-bj-3"), "start");
        // rest: 25% of 2 clusters rounds up to 1.
        for c in ["prod-bj-2", "prod-bj-3"] {
            state.insert(c.into(), ok("2026-11-28T15:20:00Z"));
        }
        state.insert("prod-sh-2".into(), RunState::Running);
        assert_eq!(
            says(&r, &state, "2026-11-28T16:00:00Z", "prod-sh-3"),
            "waiting for wave rest of rollout upgrade-1-31 (maxParallel: 1 of 1 running)"
        );
    }

    #[test]
    fn one_failure_more_than_max_failures_halts_the_rollout_and_raising_it_or_a_rerun_goes_on() {
        let mut r = upgrade();
        let failed =
            RunState::Failed("failed at TASK [kubernetes/control-plane : join] on node2: timeout".into());
        let state = runs(&[
            ("prod-sh-1", ok("2026-11-28T14:00:00Z")),
            ("prod-bj-1", RunState::Running),
            ("prod-bj-2", failed),
            ("prod-bj-3", RunState::Pending),
        ]);
        let halted = "halted at wave beijing: prod-bj-2 failed at TASK [kubernetes/control-plane : join] on node2: timeout";
        let d = Rollouts::new(&r, &state, at("2026-11-28T16:00:00Z"));
        assert_eq!(d.halted().as_deref(), Some(halted));
        assert_eq!(
            d.may_start("prod-bj-3").unwrap_err().to_string(),
            format!("rollout upgrade-1-31 {halted}")
        );
        assert!(d.may_start("prod-sh-2").is_err());
        let p = d.progress();
        assert_eq!(
            (p.phase, p.why_not.as_deref()),
            (RolloutPhase::Halted, Some(halted))
        );
        let said = p.commit_status("upgrade-1-31", None);
        assert_eq!(
            (said.state, said.description.as_str()),
            (StatusState::Failure, halted)
        );
        assert_eq!(
            p.waves[1],
            WaveCounts {
                name: "beijing".into(),
                pending: 1,
                running: 1,
                succeeded: 0,
                failed: 1
            }
        );
        assert_eq!(
            d.rerun_clusters(),
            vec!["prod-bj-2"],
            "only the failed one runs again"
        );

        r.max_failures = 1;
        let d = Rollouts::new(&r, &state, at("2026-11-28T16:00:00Z"));
        assert_eq!(d.halted(), None);
        assert_eq!(
            d.may_start("prod-bj-3"),
            Ok(()),
            "raising maxFailures lets it go on"
        );

        r.max_failures = 0;
        let mut rerun = state.clone();
        rerun.insert("prod-bj-2".into(), RunState::Pending);
        assert_eq!(
            Rollouts::new(&r, &rerun, at("2026-11-28T16:00:00Z")).halted(),
            None,
            "a rerun's new run"
        );
    }

    #[test]
    fn a_cluster_that_joins_an_earlier_wave_later_runs_without_closing_the_waves_past_it() {
        let mut r = upgrade();
        let mut state = runs(&[
            ("prod-sh-1", ok("2026-11-28T14:00:00Z")),
            ("prod-bj-1", ok("2026-11-28T15:00:00Z")),
            ("prod-bj-2", ok("2026-11-28T15:00:00Z")),
            ("prod-bj-3", ok("2026-11-28T15:00:00Z")),
            ("prod-sh-2", RunState::Running),
        ]);
        r.waves[1].clusters.push("prod-bj-4".into());
        assert_eq!(says(&r, &state, "2026-11-28T16:00:00Z", "prod-bj-4"), "start");
        state.insert("prod-sh-2".into(), ok("2026-11-28T16:10:00Z"));
        assert_eq!(
            says(&r, &state, "2026-11-28T16:10:00Z", "prod-sh-3"),
            "start",
            "rest stays open"
        );
    }

    #[test]
    fn a_finished_rollout_is_completed_and_summarized_by_its_last_wave() {
        let r = upgrade();
        let all = [
            "prod-sh-1",
            "prod-bj-1",
            "prod-bj-2",
            "prod-bj-3",
            "prod-sh-2",
            "prod-sh-3",
        ];
        let state: BTreeMap<String, RunState> = all
            .iter()
            .map(|c| (c.to_string(), ok("2026-11-28T14:00:00Z")))
            .collect();
        let p = Rollouts::new(&r, &state, at("2026-11-28T18:00:00Z")).progress();
        assert_eq!(p.phase, RolloutPhase::Completed);
        assert_eq!(p.summary(), "wave 3/3 rest: 2/2 succeeded, 0 failed");
        assert_eq!(p.progress(), "6/6");
        let status = p.status();
        assert_eq!(status.phase, RolloutPhase::Completed);
        assert_eq!(status.current_wave.as_deref(), Some("rest"));
        assert_eq!(status.progress.as_deref(), Some("6/6"));
        assert_eq!(status.waves[1].succeeded, 3);
        let mid = runs(&[
            ("prod-sh-1", ok("2026-11-28T14:00:00Z")),
            ("prod-bj-1", RunState::Running),
        ]);
        let p = Rollouts::new(&r, &mid, at("2026-11-28T18:00:00Z")).progress();
        assert_eq!(p.summary(), "wave 2/3 beijing: 0/3 succeeded, 0 failed");
        let pending = p.commit_status("upgrade-1-31", Some("https://kok.example/rollouts/{rollout}"));
        assert_eq!(
            (
                pending.context.as_str(),
                pending.state,
                pending.description.as_str()
            ),
            (
                "kok/rollout/upgrade-1-31",
                StatusState::Pending,
                "wave 2/3 beijing: 0/3 succeeded, 0 failed"
            )
        );
        assert_eq!(
            pending.target_url.as_deref(),
            Some("https://kok.example/rollouts/upgrade-1-31")
        );
        let done = Rollouts::new(&r, &state, at("2026-11-28T18:00:00Z")).progress();
        let done = done.commit_status("upgrade-1-31", None);
        assert_eq!((done.state, done.target_url), (StatusState::Success, None));
    }
}
