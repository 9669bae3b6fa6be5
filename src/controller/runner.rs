//! The work queue of a reconciler: names to reconcile, each by one worker at a time, with delayed
//! looks and a bound on how many run at once.
//!
//! A name triggered while it waits is queued once; triggered while it is reconciled, it is reconciled
//! again once that reconcile ends. A delayed look keeps the earliest time asked for, and a trigger
//! meanwhile makes it due at once. The queue holds names only: each reconcile reads its object from
//! the cache when it starts, so a fleet-size burst costs a name per object, not a copy of it.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

/// What a reconcile asks for next: nothing until something changes, or another look after a while.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action(Option<Duration>);

impl Action {
    /// Looks again after `delay`, unless a change triggers a reconcile before.
    pub const fn requeue(delay: Duration) -> Action {
        Action(Some(delay))
    }

    /// Waits for a change (a watch event or a wake) before looking again.
    pub const fn await_change() -> Action {
        Action(None)
    }

    /// The delay of the next look, if any.
    pub fn requeue_after(self) -> Option<Duration> {
        self.0
    }
}

#[derive(Debug, Default)]
struct State {
    /// Names due now, in the order they became due.
    ready: VecDeque<Arc<str>>,
    /// The names in `ready`.
    queued: HashSet<Arc<str>>,
    /// Names being reconciled.
    active: HashSet<Arc<str>>,
    /// Names triggered while being reconciled: reconciled again once that ends.
    again: HashSet<Arc<str>>,
    /// Delayed looks by time, and the time of each name's.
    timers: BTreeSet<(Instant, Arc<str>)>,
    due: HashMap<Arc<str>, Instant>,
}

impl State {
    /// Makes `name` due now unless it is already queued or being reconciled (then it runs again after).
    /// True when it went into `ready`.
    fn make_ready(&mut self, name: Arc<str>) -> bool {
        if let Some(at) = self.due.remove(&name) {
            self.timers.remove(&(at, name.clone()));
        }
        if self.active.contains(&name) {
            self.again.insert(name);
            return false;
        }
        if !self.queued.insert(name.clone()) {
            return false;
        }
        self.ready.push_back(name);
        true
    }

    /// The queue's own copy of `name` when it holds one, so a name is allocated once however often it is
    /// triggered.
    fn known(&self, name: &str) -> Arc<str> {
        self.queued
            .get(name)
            .or_else(|| self.active.get(name))
            .or_else(|| self.due.get_key_value(name).map(|(k, _)| k))
            .cloned()
            .unwrap_or_else(|| Arc::from(name))
    }

    /// Frees what a burst grew once the queue is empty again.
    fn shrink_when_idle(&mut self) {
        if self.ready.is_empty() && self.active.is_empty() {
            self.ready.shrink_to_fit();
            self.queued.shrink_to_fit();
            self.active.shrink_to_fit();
            self.again.shrink_to_fit();
        }
        if self.timers.is_empty() {
            self.due.shrink_to_fit();
        }
    }
}

/// Names waiting to be reconciled; see the module docs.
#[derive(Debug)]
pub struct WorkQueue {
    state: Mutex<State>,
    /// One permit per name in `ready`.
    ready: Semaphore,
    /// Wakes the timer when an earlier delayed look is asked for.
    timer: Notify,
}

impl Default for WorkQueue {
    fn default() -> Self {
        WorkQueue {
            state: Mutex::default(),
            ready: Semaphore::new(0),
            timer: Notify::new(),
        }
    }
}

impl WorkQueue {
    /// Reconciles `name` as soon as a worker is free (or again after its running reconcile).
    pub fn trigger(&self, name: &str) {
        let Ok(mut state) = self.state.lock() else { return };
        let name = state.known(name);
        if state.make_ready(name) {
            self.ready.add_permits(1);
        }
    }

    /// Reconciles `name` after `delay`, or earlier when something triggers it.
    pub fn trigger_after(&self, name: &str, delay: Duration) {
        let at = Instant::now() + delay;
        let Ok(mut state) = self.state.lock() else { return };
        let name = state.known(name);
        if state.queued.contains(&name) {
            return;
        }
        match state.due.get(&name) {
            Some(&earlier) if earlier <= at => return,
            Some(&later) => {
                state.timers.remove(&(later, name.clone()));
            }
            None => {}
        }
        state.due.insert(name.clone(), at);
        let first = state.timers.first().is_none_or(|(t, _)| at < *t);
        state.timers.insert((at, name));
        drop(state);
        if first {
            self.timer.notify_one();
        }
    }

    /// How many names wait (due now or later) or are being reconciled.
    pub fn len(&self) -> usize {
        self.state
            .lock()
            .map(|s| s.queued.len() + s.active.len() + s.due.len())
            .unwrap_or_default()
    }

    /// True when nothing waits or runs.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn take(&self) -> Option<Arc<str>> {
        let mut state = self.state.lock().ok()?;
        let name = state.ready.pop_front()?;
        state.queued.remove(&name);
        state.active.insert(name.clone());
        Some(name)
    }

    fn finish(&self, name: Arc<str>, next: Action) {
        let Ok(mut state) = self.state.lock() else { return };
        state.active.remove(&name);
        if state.again.remove(&name) {
            if state.make_ready(name) {
                self.ready.add_permits(1);
            }
        } else if let Some(delay) = next.requeue_after() {
            drop(state);
            self.trigger_after(&name, delay);
            return;
        }
        state.shrink_when_idle();
    }

    /// Moves the delayed looks that are due into `ready`; returns when the next one is due.
    fn fire_due(&self) -> Option<Instant> {
        let Ok(mut state) = self.state.lock() else {
            return None;
        };
        let now = Instant::now();
        while let Some((at, _)) = state.timers.first() {
            if *at > now {
                return Some(*at);
            }
            let Some((_, name)) = state.timers.pop_first() else {
                break;
            };
            state.due.remove(&name);
            if state.make_ready(name) {
                self.ready.add_permits(1);
            }
        }
        state.shrink_when_idle();
        None
    }

    /// Runs `reconcile` on the names that become due, at most `workers` at once, until `stopped`;
    /// reconciles under way then finish first.
    pub async fn run<F, Fut>(&self, workers: usize, reconcile: F, stopped: impl Future<Output = ()>)
    where
        F: Fn(Arc<str>) -> Fut,
        Fut: Future<Output = Action>,
    {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let worker = |_| {
            let mut stop = stop_rx.clone();
            let reconcile = &reconcile;
            async move {
                loop {
                    tokio::select! {
                        biased;
                        _ = stop.wait_for(|s| *s) => return,
                        permit = self.ready.acquire() => match permit {
                            Ok(p) => p.forget(),
                            Err(_) => return,
                        },
                    }
                    let Some(name) = self.take() else { continue };
                    let next = reconcile(name.clone()).await;
                    self.finish(name, next);
                }
            }
        };
        let workers = futures::future::join_all((0..workers.max(1)).map(worker));
        let mut timer_stop = stop_rx.clone();
        let timer = async {
            loop {
                let next = self.fire_due();
                let wait = async {
                    match next {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = timer_stop.wait_for(|s| *s) => return,
                    () = wait => {}
                    () = self.timer.notified() => {}
                }
            }
        };
        let stop = async {
            stopped.await;
            let _ = stop_tx.send(true);
        };
        futures::join!(workers, timer, stop);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn runs() -> Arc<Mutex<Vec<String>>> {
        Arc::new(Mutex::new(Vec::new()))
    }

    #[tokio::test(start_paused = true)]
    async fn a_name_triggered_while_it_waits_is_reconciled_once_and_while_it_runs_once_more() {
        let queue = Arc::new(WorkQueue::default());
        let seen = runs();
        queue.trigger("a");
        queue.trigger("a");
        queue.trigger("b");
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let q = queue.clone();
        let s = seen.clone();
        let task = tokio::spawn(async move {
            q.run(
                1,
                |name| {
                    let (q, s) = (q.clone(), s.clone());
                    async move {
                        let first = {
                            let mut s = s.lock().unwrap();
                            s.push(name.to_string());
                            s.len() == 1
                        };
                        if first {
                            // Triggered while running: runs again after this one.
                            q.trigger(&name);
                            q.trigger(&name);
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        Action::await_change()
                    }
                },
                async move {
                    let _ = stop_rx.await;
                },
            )
            .await
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(*seen.lock().unwrap(), ["a", "b", "a"]);
        assert!(queue.is_empty());
        let _ = stop_tx.send(());
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_requeue_comes_after_its_delay_and_a_trigger_makes_it_due_at_once() {
        let queue = Arc::new(WorkQueue::default());
        let count = Arc::new(AtomicUsize::new(0));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let q = queue.clone();
        let c = count.clone();
        let task = tokio::spawn(async move {
            q.run(
                4,
                |_name| {
                    let c = c.clone();
                    async move {
                        c.fetch_add(1, Ordering::SeqCst);
                        Action::requeue(Duration::from_secs(60))
                    }
                },
                async move {
                    let _ = stop_rx.await;
                },
            )
            .await
        });
        queue.trigger("a");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(count.load(Ordering::SeqCst), 1);
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(count.load(Ordering::SeqCst), 1, "not before its delay");
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(count.load(Ordering::SeqCst), 2, "after it");
        queue.trigger("a");
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(
            count.load(Ordering::SeqCst),
            3,
            "a trigger does not wait for the delay"
        );
        assert_eq!(queue.len(), 1, "one delayed look left, not two");
        // An earlier delayed look replaces a later one.
        queue.trigger_after("a", Duration::from_secs(5));
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(count.load(Ordering::SeqCst), 4);
        let _ = stop_tx.send(());
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn no_more_than_the_bound_run_at_once_and_a_stop_lets_them_finish() {
        let queue = Arc::new(WorkQueue::default());
        let (now, most, done) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        for i in 0..20 {
            queue.trigger(&format!("op{i}"));
        }
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let q = queue.clone();
        let (n, m, d) = (now.clone(), most.clone(), done.clone());
        let task = tokio::spawn(async move {
            q.run(
                3,
                |_name| {
                    let (n, m, d) = (n.clone(), m.clone(), d.clone());
                    async move {
                        let running = n.fetch_add(1, Ordering::SeqCst) + 1;
                        m.fetch_max(running, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        n.fetch_sub(1, Ordering::SeqCst);
                        d.fetch_add(1, Ordering::SeqCst);
                        Action::await_change()
                    }
                },
                async move {
                    let _ = stop_rx.await;
                },
            )
            .await
        });
        tokio::time::sleep(Duration::from_millis(150)).await;
        let _ = stop_tx.send(());
        task.await.unwrap();
        assert_eq!(most.load(Ordering::SeqCst), 3);
        assert_eq!(now.load(Ordering::SeqCst), 0, "the reconciles under way finished");
        assert_eq!(
            done.load(Ordering::SeqCst),
            6,
            "and no new one started after the stop"
        );
    }
}
