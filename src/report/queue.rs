//! The reporter's queue in memory: the operations whose status is not delivered yet (the newest
//! desired status of each, its failed attempts, when it may go again, and what was held for the forges),
//! and each commit's operations by state, for the forges' budget and the commit's `kok/summary`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::runtime::watcher;
use kube::ResourceExt;

use super::sinks::Route;
use super::status::{summary_status, Tally};
use crate::api::{ClusterOperation, CommitStatus, StatusState};

/// An operation whose desired status is not delivered yet.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Pending {
    pub(super) commit: String,
    pub(super) desired: CommitStatus,
    /// Failed attempts so far (from `status.reportAttempts`, so they survive restarts).
    pub(super) attempts: u32,
    /// The sinks took it; only recording it on the object is left.
    pub(super) delivered: bool,
    /// The sinks without a budget took it; the budgeted ones wait until the operations of its commit
    /// are all known ([`CommitOps::settled`]).
    pub(super) held: bool,
    /// Older statuses of the operation that only the sinks without a budget took while it was held:
    /// the budgeted sinks get them first, in order, when it is sent to every sink.
    pub(super) backlog: Vec<CommitStatus>,
    pub(super) not_before: Instant,
}

/// A delivery task's result.
#[derive(Debug)]
pub(super) enum Done {
    /// An operation's status, by ClusterOperation name.
    Operation(String, Outcome),
    /// A commit's `kok/summary` status; `retry` is the wait before the next attempt when it failed.
    Summary {
        commit: String,
        status: CommitStatus,
        retry: Option<Duration>,
    },
}

/// A `kok/summary` status to deliver, and the failed attempts before it.
#[derive(Debug)]
pub(super) struct SummaryJob {
    pub(super) status: CommitStatus,
    pub(super) attempts: u32,
}

/// How one delivery task ended.
#[derive(Debug)]
pub(super) enum Outcome {
    /// Delivered and recorded as `status.reportedDigest`.
    Recorded { desired: CommitStatus },
    /// Delivered to sinks that keep their own record of it (git notes): not recorded on the object
    /// ([`Queue::noted`]).
    Noted { desired: CommitStatus },
    /// Delivered to the sinks without a budget; the others wait until its commit is settled.
    Held { desired: CommitStatus },
    /// Delivered, but recording it failed: only the record is retried.
    DeliveredNotRecorded { desired: CommitStatus, delay: Duration },
    /// Not delivered; retried after `delay`.
    Failed {
        desired: CommitStatus,
        attempts: u32,
        delay: Duration,
    },
}

/// The operations with undelivered statuses, fed by watch events and delivery outcomes.
#[derive(Debug, Default)]
pub(super) struct Queue {
    /// Boxed: a fleet's first pass can have every operation pending at once (200,000 at 10,000 × 20),
    /// and a table of the whole statuses is allocated twice as it grows (the new one beside the old)
    /// and stays that size once they are delivered.
    pub(super) pending: HashMap<String, Box<Pending>>,
    /// Names with a delivery task running.
    pub(super) busy: HashSet<String>,
    /// The pending operations that may be taken (neither held nor busy), by `not_before`: what
    /// [`Queue::take_due`] and [`Queue::next_due`] read, so neither walks every pending operation.
    due: BTreeSet<(Instant, String)>,
    /// Statuses this loop recorded as reported that the watch has not shown back yet: an older event
    /// of the same object must not queue them again.
    pub(super) recorded: HashMap<String, Box<CommitStatus>>,
    /// Names seen since the watch (re)started listing; the others are dropped when the list is done.
    pub(super) relisting: Option<HashSet<String>>,
    /// Every operation: its phase, and what [`Queue::commits`] counts of it.
    pub(super) ops: HashMap<Box<str>, Tracked>,
    /// Per commit: its operations by state, and its `kok/summary` bookkeeping. The key is the one copy
    /// of the commit the operations' entries share.
    pub(super) commits: HashMap<Arc<str>, CommitOps>,
    /// How long without a new operation settles a commit.
    pub(super) settle_quiet: Duration,
    /// Per operation: older statuses the budgeted sinks have not had because they were held.
    pub(super) backlog: HashMap<String, Vec<CommitStatus>>,
    /// What a run's commit status is computed with: `--status-url` and the namespace.
    pub(super) status_url: Option<String>,
    pub(super) namespace: String,
}

/// What the loop keeps of every operation.
#[derive(Debug, Default)]
pub(super) struct Tracked {
    /// Its commit and the state of its desired status, as counted in [`Queue::commits`].
    pub(super) counted: Option<(Arc<str>, Option<StatusState>)>,
    /// The status its sinks hold by their own record, not recorded on the object ([`Queue::noted`]), by
    /// its [`status_key`].
    noted: Option<NonZeroU64>,
}

/// What the loop knows of one commit's operations.
#[derive(Debug)]
pub(super) struct CommitOps {
    /// The commit's operations by state; finished operations stay counted after they are deleted
    /// (history limit), unfinished ones leave with their object.
    pub(super) tally: Tally,
    /// Operations of the commit that still exist; the entry goes when none is left.
    pub(super) live: usize,
    /// Per-operation contexts sent to every sink: they keep being updated there even once the commit
    /// has grown above the budget, so none is left stale.
    pub(super) shown: HashSet<String>,
    /// The `kok/summary` status last delivered, and when.
    pub(super) summary_sent: Option<(CommitStatus, Instant)>,
    /// How many operations the summary last delivered counted, and the one in flight counts.
    pub(super) sent_total: usize,
    pub(super) busy_total: usize,
    /// When the last operation was added to the count (also after the commit settled: the watch may
    /// show a pass's last operations after the pass ended).
    pub(super) grown: Instant,
    /// Failed attempts at delivering the current summary, and when the next may start.
    pub(super) summary_retry: Option<(u32, Instant)>,
    /// A summary delivery is in flight.
    pub(super) summary_busy: bool,
    /// Every operation of the commit is known: a reconcile pass finished since it appeared, the watch
    /// listed it, or no new operation of it appeared for [`SETTLE_QUIET`]. Until then the budgeted
    /// sinks get neither its operations' statuses nor its summary (its count may still grow).
    pub(super) settled: bool,
    /// When the last new operation of the commit appeared.
    pub(super) last_new: Instant,
}

impl Default for CommitOps {
    fn default() -> Self {
        CommitOps {
            tally: Tally::default(),
            live: 0,
            shown: HashSet::new(),
            summary_sent: None,
            sent_total: 0,
            busy_total: 0,
            grown: Instant::now(),
            summary_retry: None,
            summary_busy: false,
            settled: false,
            last_new: Instant::now(),
        }
    }
}

impl CommitOps {
    /// The summary to send and when it may go, when it differs from the one delivered. The first and
    /// the final summary (nothing running or queued) go at once; so does one that counts operations
    /// the last one did not (the watch showed some of the commit's operations after it went), once no
    /// new one appeared for `quiet`; the updates between at most once per `interval`; a failed one
    /// waits for its retry.
    pub(super) fn summary_due(
        &self,
        now: Instant,
        interval: Duration,
        quiet: Duration,
    ) -> Option<(CommitStatus, Instant)> {
        if self.summary_busy {
            return None;
        }
        let wanted = summary_status(&self.tally);
        let mut at = match &self.summary_sent {
            Some((sent, _)) if *sent == wanted => return None,
            None => now,
            Some(_) if self.tally.finished() => now,
            Some(_) if self.tally.total() != self.sent_total => self.grown + quiet,
            Some((_, at)) => *at + interval,
        };
        if let Some((_, retry)) = self.summary_retry {
            at = at.max(retry);
        }
        Some((wanted, at))
    }
}

impl Queue {
    pub(super) fn new(settle_quiet: Duration) -> Self {
        Queue {
            settle_quiet,
            ..Queue::default()
        }
    }

    pub(super) fn observe(&mut self, event: watcher::Event<ClusterOperation>) {
        match event {
            watcher::Event::Init => self.relisting = Some(HashSet::new()),
            watcher::Event::InitApply(op) => {
                if let Some(seen) = self.relisting.as_mut() {
                    seen.insert(op.name_any());
                }
                self.apply(&op);
            }
            watcher::Event::InitDone => {
                if let Some(seen) = self.relisting.take() {
                    let gone: Vec<String> = self
                        .ops
                        .keys()
                        .map(|name| &**name)
                        .chain(self.pending.keys().map(String::as_str))
                        .filter(|name| !seen.contains(*name))
                        .map(str::to_string)
                        .collect();
                    for name in gone {
                        self.forget(&name);
                    }
                }
                self.settle(true, Instant::now());
            }
            watcher::Event::Apply(op) => self.apply(&op),
            watcher::Event::Delete(op) => self.forget(&op.name_any()),
        }
    }

    /// True while the watch (re)lists the operations.
    pub(super) fn listing(&self) -> bool {
        self.relisting.is_some()
    }

    /// Drops an operation that no longer exists.
    pub(super) fn forget(&mut self, name: &str) {
        self.remove_pending(name);
        self.backlog.remove(name);
        self.remove_recorded(name);
        let Some(tracked) = self.ops.remove(name) else {
            return;
        };
        let Some((commit, state)) = tracked.counted else {
            return;
        };
        let Some(ops) = self.commits.get_mut(&commit) else {
            return;
        };
        if !matches!(
            state,
            Some(StatusState::Success | StatusState::Failure | StatusState::Error)
        ) {
            let slot = ops.tally.slot(state);
            *slot = slot.saturating_sub(1);
        }
        ops.live = ops.live.saturating_sub(1);
        if ops.live == 0 {
            self.commits.remove(&commit);
        }
    }

    /// Counts `name` on `commit` with the state of its desired status.
    pub(super) fn count(&mut self, name: &str, commit: &str, state: Option<StatusState>) {
        let old = self.ops.get(name).and_then(|t| t.counted.clone());
        let added = old.as_ref().is_none_or(|(c, _)| &**c != commit);
        if let Some((old_commit, old_state)) = old {
            if &*old_commit == commit && old_state == state {
                return;
            }
            self.forget_count(name, &old_commit, old_state);
            if &*old_commit != commit && self.commits.get(&old_commit).is_some_and(|o| o.live == 0) {
                self.commits.remove(&old_commit);
            }
        }
        let key = match self.commits.get_key_value(commit) {
            Some((key, _)) => key.clone(),
            None => Arc::from(commit),
        };
        let ops = self.commits.entry(key.clone()).or_default();
        *ops.tally.slot(state) += 1;
        ops.live += 1;
        if added {
            ops.grown = Instant::now();
        }
        if !ops.settled {
            ops.last_new = Instant::now();
        }
        self.tracked(name).counted = Some((key, state));
    }

    /// Takes `name` out of `commit`'s counts (its state changes, or its commit does).
    pub(super) fn forget_count(&mut self, name: &str, commit: &str, state: Option<StatusState>) {
        if let Some(tracked) = self.ops.get_mut(name) {
            tracked.counted = None;
        }
        if let Some(ops) = self.commits.get_mut(commit) {
            let slot = ops.tally.slot(state);
            *slot = slot.saturating_sub(1);
            ops.live = ops.live.saturating_sub(1);
        }
    }

    /// The sinks `job`'s status goes to: every sink while its commit has at most `budget` operations,
    /// when it failed, or when its context was already sent to every sink; else only the sinks without
    /// a budget (the budgeted ones show the commit's `kok/summary` instead).
    pub(super) fn route(&mut self, job: &Pending, budget: usize) -> Route {
        let Some(ops) = self.commits.get_mut(job.commit.as_str()) else {
            return Route::All;
        };
        let context = &job.desired.context;
        let failed = matches!(job.desired.state, StatusState::Failure | StatusState::Error);
        if budget == usize::MAX || failed || ops.shown.contains(context) {
            return Route::All;
        }
        if !ops.settled && ops.tally.total() <= budget {
            return Route::Hold;
        }
        if ops.tally.total() <= budget {
            ops.shown.insert(context.clone());
            return Route::All;
        }
        Route::Unbudgeted
    }

    /// The held statuses of `name` that go to the budgeted sinks before its current one, when it goes
    /// by `route`: all of them for every sink, none (dropped) when only the other sinks get it.
    pub(super) fn take_backlog(&mut self, name: &str, route: Route) -> Vec<CommitStatus> {
        match route {
            Route::All => self.backlog.remove(name).unwrap_or_default(),
            Route::Unbudgeted => {
                self.backlog.remove(name);
                Vec::new()
            }
            Route::Budgeted | Route::Hold => Vec::new(),
        }
    }

    /// Marks every commit known now as settled (a reconcile pass finished, or the watch listed them), and
    /// those without a new operation for the quiet time; their held statuses become due.
    pub(super) fn settle(&mut self, all: bool, now: Instant) {
        let mut settled = Vec::new();
        for (commit, ops) in self.commits.iter_mut() {
            if !ops.settled && (all || ops.last_new + self.settle_quiet <= now) {
                ops.settled = true;
                settled.push(commit.clone());
            }
        }
        if settled.is_empty() {
            return;
        }
        for (name, p) in self.pending.iter_mut() {
            if p.held && settled.iter().any(|c: &Arc<str>| **c == *p.commit) {
                p.held = false;
                p.not_before = now;
                if !self.busy.contains(name) {
                    self.due.insert((now, name.clone()));
                }
            }
        }
    }

    /// The commits above `budget` whose `kok/summary` is due, marked busy.
    pub(super) fn due_summaries(
        &mut self,
        now: Instant,
        budget: usize,
        interval: Duration,
    ) -> Vec<(String, SummaryJob)> {
        let mut due = Vec::new();
        for (commit, ops) in self.commits.iter_mut() {
            if !ops.settled || ops.tally.total() <= budget {
                continue;
            }
            let Some((status, at)) = ops.summary_due(now, interval, self.settle_quiet) else {
                continue;
            };
            if at <= now {
                ops.summary_busy = true;
                ops.busy_total = ops.tally.total();
                let attempts = ops.summary_retry.map_or(0, |(n, _)| n);
                due.push((commit.to_string(), SummaryJob { status, attempts }));
            }
        }
        due
    }

    /// When the earliest summary not due yet becomes due.
    pub(super) fn next_summary(&self, now: Instant, budget: usize, interval: Duration) -> Option<Instant> {
        self.commits
            .values()
            .filter(|ops| ops.settled && ops.tally.total() > budget)
            .filter_map(|ops| {
                ops.summary_due(now, interval, self.settle_quiet)
                    .map(|(_, at)| at)
            })
            .min()
    }

    pub(super) fn finish_summary(
        &mut self,
        commit: &str,
        status: CommitStatus,
        retry: Option<Duration>,
        now: Instant,
    ) {
        let Some(ops) = self.commits.get_mut(commit) else {
            return;
        };
        ops.summary_busy = false;
        match retry {
            None => {
                ops.summary_sent = Some((status, now));
                ops.sent_total = ops.busy_total;
                ops.summary_retry = None;
            }
            Some(delay) => {
                let attempts = ops.summary_retry.map_or(0, |(n, _)| n).saturating_add(1);
                ops.summary_retry = Some((attempts, now + delay));
            }
        }
    }

    /// `name`'s entry in [`Queue::ops`], made when new: a known name allocates no key (every watch event
    /// of a fleet-size commit comes here).
    fn tracked(&mut self, name: &str) -> &mut Tracked {
        if !self.ops.contains_key(name) {
            self.ops.insert(name.into(), Tracked::default());
        }
        self.ops.get_mut(name).expect("inserted above")
    }

    pub(super) fn apply(&mut self, op: &ClusterOperation) {
        let name = op.name_any();
        let status = op.status.as_ref();
        let noted = self.tracked(&name).noted;
        let desired = crate::report::status::desired_status(op, self.status_url.as_deref(), &self.namespace);
        let desired = desired.as_ref();
        let reported = |d: &CommitStatus| {
            status.is_some_and(|s| s.has_reported(d)) || noted.is_some_and(|n| n == status_key(d))
        };
        if !op.spec.source.commit.is_empty() {
            self.count(&name, &op.spec.source.commit, desired.map(|d| d.state));
        }
        if let Some(memo) = self.recorded.get(&name) {
            if reported(memo) || desired != Some(&**memo) {
                self.remove_recorded(&name); // the watch caught up, or there is a newer desired status
            } else {
                return; // an event older than our own record
            }
        }
        let Some(desired) = desired.filter(|d| !reported(d)) else {
            self.remove_pending(&name);
            return;
        };
        let commit = &op.spec.source.commit;
        if commit.is_empty() {
            tracing::warn!(operation = %name, "ClusterOperation has no spec.source.commit; its commit status cannot be delivered");
            self.remove_pending(&name);
            return;
        }
        let attempts = status.and_then(|s| s.report_attempts).unwrap_or(0);
        match self.pending.get_mut(&name) {
            Some(p) if p.desired == *desired => p.attempts = p.attempts.max(attempts),
            _ => {
                let pending = Box::new(Pending {
                    commit: commit.clone(),
                    desired: desired.clone(),
                    attempts,
                    delivered: false,
                    held: false,
                    backlog: Vec::new(),
                    not_before: Instant::now(),
                });
                // A held status that is superseded still goes to the budgeted sinks, before this one.
                if let Some(old) = self.remove_pending(&name) {
                    if old.held {
                        self.backlog.entry(name.clone()).or_default().push(old.desired);
                    }
                }
                self.pending.insert(name.clone(), pending);
                self.index(&name);
            }
        }
    }

    /// Takes `name`'s pending status `desired` as delivered to sinks that keep their own record of it
    /// (git notes): it is not recorded on the object but remembered here, by its key, and after a
    /// restart read back from the sinks while the watch lists ([`super::deliver::Reporter`]).
    pub(super) fn noted(&mut self, name: &str, desired: &CommitStatus) {
        if self.pending.get(name).is_some_and(|p| p.desired == *desired) {
            self.remove_pending(name);
            self.backlog.remove(name);
        }
        if let Some(tracked) = self.ops.get_mut(name) {
            tracked.noted = Some(status_key(desired));
        }
    }

    /// The route `job` will take by [`Queue::route`]'s rules, when it is sure while the operations are
    /// still being counted: every sink when no sink has a budget, the sinks without one when its
    /// commit already counts more operations than `budget` and it did not fail; `None` otherwise (the
    /// commit may still be within the budget, or the forges get it). A restarted loop has shown no
    /// context one by one yet, so [`CommitOps::shown`] does not matter here.
    pub(super) fn sure_route(&self, job: &Pending, budget: usize) -> Option<Route> {
        if budget == usize::MAX {
            return Some(Route::All);
        }
        let failed = matches!(job.desired.state, StatusState::Failure | StatusState::Error);
        let above = self
            .commits
            .get(job.commit.as_str())
            .is_some_and(|ops| ops.tally.total() > budget);
        (above && !failed).then_some(Route::Unbudgeted)
    }

    /// Up to `limit` due operations not already being delivered, the earliest first, marked busy.
    pub(super) fn take_due(&mut self, now: Instant, limit: usize) -> Vec<(String, Pending)> {
        let mut taken = Vec::new();
        while taken.len() < limit {
            let Some((at, _)) = self.due.first() else { break };
            if *at > now {
                break;
            }
            let Some((_, name)) = self.due.pop_first() else {
                break;
            };
            if let Some(p) = self.pending.get(&name) {
                taken.push((name.clone(), Pending::clone(p)));
                self.busy.insert(name);
            }
        }
        taken
    }

    /// When the earliest waiting operation becomes due.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.due
            .first()
            .map(|(at, _)| *at)
            .into_iter()
            .chain(
                self.commits
                    .values()
                    .filter(|ops| !ops.settled)
                    .map(|ops| ops.last_new + self.settle_quiet),
            )
            .min()
    }

    /// Takes `name` out of the pending operations (and out of [`Queue::due`]).
    fn remove_pending(&mut self, name: &str) -> Option<Box<Pending>> {
        let p = self.pending.remove(name)?;
        self.due.remove(&(p.not_before, name.to_string()));
        shrink_when_sparse(&mut self.pending);
        Some(p)
    }

    /// Drops the record of `name`'s status this loop wrote.
    fn remove_recorded(&mut self, name: &str) {
        self.recorded.remove(name);
        shrink_when_sparse(&mut self.recorded);
    }

    /// Puts pending `name` in [`Queue::due`] when it may be taken: not held, not busy.
    fn index(&mut self, name: &str) {
        if let Some(p) = self.pending.get(name) {
            if !p.held && !self.busy.contains(name) {
                self.due.insert((p.not_before, name.to_string()));
            }
        }
    }

    /// Delays pending `name` until `at` (tests).
    #[cfg(test)]
    pub(super) fn delay(&mut self, name: &str, at: Instant) {
        if let Some(mut p) = self.remove_pending(name) {
            p.not_before = at;
            self.pending.insert(name.to_string(), p);
            self.index(name);
        }
    }

    pub(super) fn finish(&mut self, name: &str, outcome: Outcome, now: Instant) {
        self.busy.remove(name);
        self.take_outcome(name, outcome, now);
        // Not in `due` while it was busy: it goes back with its new time, unless held or done.
        self.index(name);
    }

    /// What `outcome` changes of pending `name`.
    fn take_outcome(&mut self, name: &str, outcome: Outcome, now: Instant) {
        let Some(p) = self.pending.get_mut(name) else {
            return;
        };
        match outcome {
            Outcome::Recorded { desired } => {
                if p.desired == desired {
                    self.remove_pending(name);
                    self.recorded.insert(name.to_string(), Box::new(desired));
                }
            }
            Outcome::Noted { desired } => self.noted(name, &desired),
            Outcome::Held { desired } => {
                if p.desired != desired {
                    self.backlog.entry(name.to_string()).or_default().push(desired);
                } else if self.commits.get(p.commit.as_str()).is_some_and(|c| !c.settled) {
                    p.held = true;
                } else {
                    p.not_before = now; // the commit settled meanwhile
                }
            }
            Outcome::DeliveredNotRecorded { desired, delay } => {
                if p.desired == desired {
                    p.delivered = true;
                    p.not_before = now + delay;
                }
            }
            Outcome::Failed {
                desired,
                attempts,
                delay,
            } => {
                if p.desired == desired {
                    p.attempts = p.attempts.max(attempts);
                    p.not_before = now + delay;
                }
            }
        }
    }
}

/// A status's key in [`Tracked::noted`]: its digest ([`CommitStatus::digest`]) as a number.
fn status_key(status: &CommitStatus) -> NonZeroU64 {
    let digest = u64::from_str_radix(&status.digest(), 16).unwrap_or_default();
    NonZeroU64::new(digest).unwrap_or(NonZeroU64::MIN)
}

/// Gives back most of `map`'s table once it holds under a quarter of what it has room for: a first
/// pass's statuses leave a table sized for all of them at once.
fn shrink_when_sparse<V>(map: &mut HashMap<String, V>) {
    const SMALLEST: usize = 1024;
    if map.capacity() > SMALLEST && map.len() < map.capacity() / 4 {
        map.shrink_to(map.len() * 2);
    }
}

pub(super) async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::deliver::SETTLE_QUIET;

    fn op(name: &str, desired: Option<&str>, reported: Option<&str>) -> ClusterOperation {
        let st = |d: &str| CommitStatus {
            context: "kok/c/x".into(),
            state: crate::api::StatusState::Pending,
            description: d.into(),
            target_url: None,
            run: None,
        };
        let status = (desired.is_some() || reported.is_some()).then(|| {
            serde_json::json!({
                "desiredStatus": desired.map(st),
                "reportedDigest": reported.map(|r| st(r).digest()),
            })
        });
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {
                "cluster": "c", "id": "x", "digest": "d", "action": "a.yml", "image": "i",
                "hostsConfRef": {"name": "h"}, "varsConfRef": {"name": "v"},
                "source": {"commit": "abc", "revision": "main@sha1:abc", "path": "clusters/c"},
                "queuePosition": "0",
            },
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn the_tables_of_a_burst_of_statuses_are_given_back_once_they_are_delivered() {
        let mut q = Queue::new(SETTLE_QUIET);
        let names: Vec<String> = (0..5000).map(|i| format!("op-{i}")).collect();
        for name in &names {
            q.apply(&op(name, Some("waiting"), None));
        }
        assert_eq!(q.pending.len(), 5000);
        let burst = q.pending.capacity();
        for name in &names {
            q.apply(&op(name, Some("waiting"), Some("waiting")));
        }
        assert!(q.pending.is_empty());
        assert!(
            q.pending.capacity() <= 2048 && q.pending.capacity() < burst / 2,
            "the table still has room for {} statuses after a burst of 5,000 (room for {burst})",
            q.pending.capacity()
        );
    }

    #[test]
    fn queue_keeps_only_undelivered_statuses_and_the_newest_desired() {
        let mut q = Queue::default();
        q.observe(watcher::Event::Apply(op("a", Some("queued"), None)));
        q.observe(watcher::Event::Apply(op("b", Some("done"), Some("done"))));
        q.observe(watcher::Event::Apply(op("c", None, None)));
        assert_eq!(q.pending.keys().collect::<Vec<_>>(), ["a"]);
        q.observe(watcher::Event::Apply(op("a", Some("running"), None)));
        assert_eq!(q.pending["a"].desired.description, "running");
        q.observe(watcher::Event::Apply(op("a", Some("running"), Some("running"))));
        assert!(q.pending.is_empty());
        assert_eq!(q.ops.len(), 3, "every operation is tracked, delivered or not");
        q.observe(watcher::Event::Delete(op("c", None, None)));
        assert_eq!(q.ops.len(), 2);
    }

    #[test]
    fn a_status_computed_from_the_run_is_queued_until_its_digest_is_recorded_and_an_earlier_kok_s_record_counts(
    ) {
        let mut q = Queue::default();
        // No stored desiredStatus: the status is computed from the run's phase and message.
        let mut running = op("r", None, None);
        running.status = Some(crate::api::ClusterOperationStatus {
            phase: crate::api::Phase::Running,
            ..Default::default()
        });
        q.observe(watcher::Event::Apply(running.clone()));
        let computed = q.pending["r"].desired.clone();
        assert_eq!(computed.state, crate::api::StatusState::Running);
        assert_eq!(computed.description, "running: a.yml");
        running.status.as_mut().unwrap().reported_digest = Some(computed.digest());
        q.observe(watcher::Event::Apply(running));
        assert!(q.pending.is_empty(), "delivered: never sent again");

        // An earlier kok stored the status and its delivery in full: delivered too.
        let mut old = op("old", Some("done"), None);
        let st = old.status.as_mut().unwrap();
        st.reported = st.desired_status.clone();
        q.observe(watcher::Event::Apply(old));
        assert!(
            q.pending.is_empty(),
            "an earlier kok's full record counts as delivered"
        );
    }

    #[test]
    fn queue_retries_failures_later_and_forgets_objects_gone_after_a_relist() {
        let mut q = Queue::default();
        q.observe(watcher::Event::Apply(op("a", Some("queued"), None)));
        q.observe(watcher::Event::Apply(op("gone", Some("queued"), None)));
        let now = Instant::now();
        let due = q.take_due(now, 1);
        assert_eq!(due.len(), 1, "the in-flight limit holds");
        let (name, job) = due.into_iter().next().unwrap();
        assert!(
            q.take_due(now, 8).iter().all(|(n, _)| *n != name),
            "a busy operation is not started twice"
        );
        q.finish(
            &name,
            Outcome::Failed {
                desired: job.desired,
                attempts: 1,
                delay: Duration::from_secs(60),
            },
            now,
        );
        assert!(
            q.take_due(now, 8).iter().all(|(n, _)| *n != name),
            "a failed one waits for its delay"
        );
        assert_eq!(q.pending[&name].attempts, 1);

        let mut q = Queue::default();
        q.observe(watcher::Event::Apply(op("a", Some("queued"), None)));
        q.observe(watcher::Event::Apply(op("gone", Some("queued"), None)));
        q.observe(watcher::Event::Init);
        q.observe(watcher::Event::InitApply(op("a", Some("queued"), None)));
        q.observe(watcher::Event::InitDone);
        assert_eq!(q.pending.keys().collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn the_earliest_due_statuses_are_taken_first_and_a_full_loop_takes_none() {
        let mut q = Queue::default();
        let now = Instant::now();
        for (i, name) in ["e", "b", "d", "a", "c"].iter().enumerate() {
            q.observe(watcher::Event::Apply(op(name, Some("queued"), None)));
            q.delay(name, now - Duration::from_secs(10 - i as u64));
        }
        assert!(q.take_due(now, 0).is_empty(), "no free slot");
        let names = |due: Vec<(String, Pending)>| due.into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        assert_eq!(names(q.take_due(now, 2)), ["e", "b"]);
        assert_eq!(
            names(q.take_due(now, 8)),
            ["d", "a", "c"],
            "the busy ones are not taken again"
        );
    }

    /// `q.due` is exactly its pending operations that are neither held nor busy, at their times.
    fn assert_due_is_what_may_be_taken(q: &Queue, when: &str) {
        let want: BTreeSet<(Instant, String)> = q
            .pending
            .iter()
            .filter(|(name, p)| !p.held && !q.busy.contains(*name))
            .map(|(name, p)| (p.not_before, name.clone()))
            .collect();
        assert_eq!(q.due, want, "{when}");
    }

    #[test]
    fn the_due_index_follows_every_change_of_the_pending_operations() {
        let mut q = Queue::new(Duration::from_secs(3600));
        let now = Instant::now();
        for name in ["a", "b", "c", "d", "e"] {
            q.observe(watcher::Event::Apply(op_in(
                name,
                crate::api::StatusState::Pending,
            )));
        }
        assert_due_is_what_may_be_taken(&q, "five new");
        let taken = q.take_due(now + Duration::from_secs(1), 3);
        assert_eq!(taken.len(), 3);
        assert_due_is_what_may_be_taken(&q, "three busy");
        // A newer status of a busy one, one delivered, one held, one failed, one gone.
        let (a, b, c) = (&taken[0], &taken[1], &taken[2]);
        q.observe(watcher::Event::Apply(op_in(
            &a.0,
            crate::api::StatusState::Running,
        )));
        assert_due_is_what_may_be_taken(&q, "a busy one's newer status");
        q.finish(
            &a.0,
            Outcome::Recorded {
                desired: a.1.desired.clone(),
            },
            now,
        );
        q.finish(
            &b.0,
            Outcome::Held {
                desired: b.1.desired.clone(),
            },
            now,
        );
        let retry = Outcome::Failed {
            desired: c.1.desired.clone(),
            attempts: 1,
            delay: Duration::from_secs(60),
        };
        q.finish(&c.0, retry, now);
        assert_due_is_what_may_be_taken(&q, "finished three ways");
        assert!(q.pending[&b.0].held, "{:?}", q.pending[&b.0]);
        assert_eq!(q.next_due(), q.due.first().map(|(at, _)| *at));
        q.forget("d");
        q.observe(watcher::Event::Delete(op_in(
            "e",
            crate::api::StatusState::Pending,
        )));
        assert_due_is_what_may_be_taken(&q, "two gone");
        q.settle(true, now);
        assert_due_is_what_may_be_taken(&q, "the held one goes once its commit settles");
        assert!(q.due.iter().any(|(_, name)| *name == b.0));
        let later = q.take_due(now + Duration::from_secs(61), 8);
        assert!(
            later.iter().any(|(name, _)| *name == c.0),
            "the failed one after its delay"
        );
        assert!(q.due.is_empty());
        assert_due_is_what_may_be_taken(&q, "all busy");
    }

    fn op_in(name: &str, state: crate::api::StatusState) -> ClusterOperation {
        let mut op = op(name, Some("d"), None);
        let desired = op.status.as_mut().unwrap().desired_status.as_mut().unwrap();
        desired.context = format!("kok/c/{name}");
        desired.state = state;
        op
    }

    #[test]
    fn above_the_budget_only_failures_and_contexts_already_shown_reach_every_sink() {
        use crate::api::StatusState::*;
        let mut q = Queue::new(SETTLE_QUIET);
        q.observe(watcher::Event::Apply(op_in("a", Pending)));
        let job_a = q.pending["a"].clone();
        assert_eq!(
            q.route(&job_a, 2),
            Route::Hold,
            "the forges wait until the commit's operations are all known"
        );
        assert_eq!(
            q.route(&job_a, usize::MAX),
            Route::All,
            "no budgeted sink: nothing waits"
        );
        let (name, job) = q.take_due(Instant::now(), 8).remove(0);
        q.finish(&name, Outcome::Held { desired: job.desired }, Instant::now());
        assert!(
            q.take_due(Instant::now(), 8).is_empty(),
            "a held status waits for the commit"
        );
        let now = Instant::now();
        q.settle(false, now);
        assert!(q.take_due(now, 8).is_empty(), "operations may still appear");
        q.settle(false, now + SETTLE_QUIET);
        assert_eq!(
            q.take_due(now + SETTLE_QUIET, 8).len(),
            1,
            "settled once none appeared for a while"
        );
        assert_eq!(q.route(&job_a, 2), Route::All, "within the budget");
        q.observe(watcher::Event::Apply(op_in("b", Pending)));
        q.observe(watcher::Event::Apply(op_in("c", Failure)));
        assert_eq!(q.commits["abc"].tally.total(), 3);
        assert_eq!(q.route(&q.pending["b"].clone(), 2), Route::Unbudgeted);
        assert_eq!(
            q.route(&q.pending["c"].clone(), 2),
            Route::All,
            "failures always show"
        );
        assert_eq!(
            q.route(&job_a, 2),
            Route::All,
            "a context already shown keeps its updates"
        );
        q.observe(watcher::Event::Delete(op_in("c", Failure)));
        q.observe(watcher::Event::Delete(op_in("b", Pending)));
        let tally = q.commits["abc"].tally;
        assert_eq!(
            (tally.failed, tally.queued),
            (1, 1),
            "a finished operation deleted stays counted"
        );
        q.observe(watcher::Event::Delete(op_in("a", Pending)));
        assert!(
            q.commits.is_empty(),
            "the commit is forgotten with its last operation"
        );
    }

    #[test]
    fn held_statuses_reach_the_forges_in_order_and_none_stays_held_once_settled() {
        use crate::api::StatusState::*;
        let mut q = Queue::new(SETTLE_QUIET);
        let now = Instant::now();
        q.observe(watcher::Event::Apply(op_in("a", Pending)));
        let (name, job) = q.take_due(Instant::now(), 8).remove(0);
        assert_eq!(q.route(&job, 50), Route::Hold);
        q.finish(&name, Outcome::Held { desired: job.desired }, now);
        q.observe(watcher::Event::Apply(op_in("a", Running)));
        let (name, job) = q.take_due(Instant::now(), 8).remove(0);
        assert_eq!(q.route(&job, 50), Route::Hold);
        // Superseded while its delivery runs.
        q.observe(watcher::Event::Apply(op_in("a", Failure)));
        q.finish(&name, Outcome::Held { desired: job.desired }, now);
        let (name, job) = q.take_due(Instant::now(), 8).remove(0);
        let route = q.route(&job, 50);
        assert_eq!(route, Route::All, "a failure is not held");
        let states: Vec<_> = q.take_backlog(&name, route).iter().map(|s| s.state).collect();
        assert_eq!(states, [Pending, Running], "the held statuses first, in order");
        assert!(q.take_backlog(&name, route).is_empty());

        q.observe(watcher::Event::Apply(op_in("b", Pending)));
        let (name, job) = q.take_due(Instant::now(), 8).remove(0);
        assert_eq!(q.route(&job, 50), Route::Hold);
        q.settle(true, now);
        q.finish(&name, Outcome::Held { desired: job.desired }, now);
        assert_eq!(
            q.take_due(Instant::now(), 8).len(),
            1,
            "settled while its delivery ran: due at once, not held"
        );
    }

    #[test]
    fn summaries_go_first_and_final_at_once_and_between_at_most_once_per_interval() {
        use crate::api::StatusState::*;
        let interval = Duration::from_secs(60);
        let mut q = Queue::default();
        for name in ["a", "b", "c"] {
            q.observe(watcher::Event::Apply(op_in(name, Pending)));
        }
        let now = Instant::now();
        assert!(
            q.due_summaries(now, 2, interval).is_empty(),
            "not before the commit is settled"
        );
        q.settle(true, now);
        assert!(
            q.due_summaries(now, 3, interval).is_empty(),
            "within the budget: no summary"
        );
        let first = q.due_summaries(now, 2, interval);
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].1.status.description, "0/3 succeeded, 3 queued");
        assert!(
            q.due_summaries(now, 2, interval).is_empty(),
            "one delivery at a time"
        );
        q.finish_summary("abc", first[0].1.status.clone(), None, now);
        q.observe(watcher::Event::Apply(op_in("a", Success)));
        assert!(
            q.due_summaries(now, 2, interval).is_empty(),
            "an update waits for the interval"
        );
        assert_eq!(q.next_summary(now, 2, interval), Some(now + interval));
        q.observe(watcher::Event::Apply(op_in("b", Success)));
        q.observe(watcher::Event::Apply(op_in("c", Error)));
        let last = q.due_summaries(now, 2, interval);
        assert_eq!(last.len(), 1, "the final summary is not held back");
        assert_eq!(last[0].1.status.description, "2/3 succeeded, 1 failed");
        assert_eq!(last[0].1.status.state, Failure);
        q.finish_summary("abc", last[0].1.status.clone(), Some(Duration::from_secs(5)), now);
        assert!(
            q.due_summaries(now, 2, interval).is_empty(),
            "a failed delivery waits for its retry"
        );
        assert_eq!(
            q.due_summaries(now + Duration::from_secs(5), 2, interval).len(),
            1
        );
    }

    #[test]
    fn a_summary_counting_operations_the_last_one_missed_goes_once_they_stop_appearing() {
        use crate::api::StatusState::*;
        let (interval, quiet) = (Duration::from_secs(60), Duration::from_secs(2));
        let mut q = Queue::new(quiet);
        for name in ["a", "b", "c"] {
            q.observe(watcher::Event::Apply(op_in(name, Pending)));
        }
        let now = Instant::now();
        q.settle(true, now);
        let first = q.due_summaries(now, 2, interval);
        assert_eq!(first[0].1.status.description, "0/3 succeeded, 3 queued");
        q.finish_summary("abc", first[0].1.status.clone(), None, now);
        // The watch shows one more operation of the commit after its pass ended.
        q.observe(watcher::Event::Apply(op_in("d", Pending)));
        let later = Instant::now();
        let due = q.next_summary(later, 2, interval).expect("a summary is due");
        assert!(due <= later + quiet, "not a minute later: {:?}", due - later);
        let grown = q.due_summaries(later + quiet, 2, interval);
        assert_eq!(grown.len(), 1);
        assert_eq!(grown[0].1.status.description, "0/4 succeeded, 4 queued");
        q.finish_summary("abc", grown[0].1.status.clone(), None, later + quiet);
        q.observe(watcher::Event::Apply(op_in("a", Success)));
        assert!(
            q.due_summaries(later + quiet, 2, interval).is_empty(),
            "an update of the same operations still waits for the interval"
        );
        for name in ["b", "c", "d"] {
            q.observe(watcher::Event::Apply(op_in(name, Success)));
        }
        let last = q.due_summaries(later + quiet, 2, interval);
        assert_eq!(last.len(), 1, "the final summary goes at once");
        assert_eq!(last[0].1.status.description, "4/4 succeeded");
    }

    #[test]
    fn an_event_older_than_our_own_record_does_not_queue_the_status_again() {
        let mut q = Queue::default();
        q.observe(watcher::Event::Apply(op("a", Some("queued"), None)));
        let (name, job) = q.take_due(Instant::now(), 8).remove(0);
        q.finish(&name, Outcome::Recorded { desired: job.desired }, Instant::now());
        q.observe(watcher::Event::Apply(op("a", Some("queued"), None)));
        assert!(q.pending.is_empty(), "a stale event re-queued a delivered status");
        q.observe(watcher::Event::Apply(op("a", Some("queued"), Some("queued"))));
        assert!(
            q.recorded.is_empty(),
            "the memo is dropped once the watch shows the record"
        );
        q.observe(watcher::Event::Apply(op("a", Some("running"), Some("queued"))));
        assert_eq!(q.pending["a"].desired.description, "running");
    }
}
