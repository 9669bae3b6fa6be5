//! The `kok/rollout/<name>` commit status of each rollout: the controller writes the status the
//! rollout's commit should show into its `FleetRollout`'s `status.desiredStatus` (at most once per
//! change of the rollout, see [`crate::controller::rollout`]); this loop watches the rollouts and delivers
//! each desired status that differs from `status.reported` to every sink (one context per rollout, so
//! it is outside the per-commit budget), then records it as reported. A failed delivery is retried with
//! the reporter's backoff; a newer desired status replaces one waiting for its retry (level-based), so
//! a rollout update makes at most one status per sink.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, Patch};
use kube::runtime::{watcher, WatchStreamExt};
use kube::ResourceExt;

use super::deliver::{patch_params, Reporter};
use crate::api::{managed_selector, CommitStatus, FleetRollout};

/// A rollout whose desired status is not delivered yet.
#[derive(Clone, Debug, PartialEq)]
struct Undelivered {
    commit: String,
    desired: CommitStatus,
    attempts: u32,
}

/// What a rollout's status asks to deliver, if anything.
fn undelivered(r: &FleetRollout) -> Option<Undelivered> {
    let status = r.status.as_ref()?;
    let desired = status.desired_status.clone()?;
    if status.reported.as_ref() == Some(&desired) {
        return None;
    }
    Some(Undelivered {
        commit: status.commit.clone().filter(|c| !c.is_empty())?,
        desired,
        attempts: 0,
    })
}

impl Reporter {
    /// Watches the rollouts and delivers each `kok/rollout/<name>` status that differs from the one
    /// reported, until `shutdown` completes.
    pub async fn run_rollouts(
        self: Arc<Self>,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let api: Api<FleetRollout> = Api::namespaced(self.client.clone(), &self.namespace);
        let events = watcher(
            api.clone(),
            watcher::Config::default().labels(&managed_selector()),
        )
        .default_backoff();
        tokio::pin!(events);
        tokio::pin!(shutdown);
        let mut pending: BTreeMap<String, Undelivered> = BTreeMap::new();
        // What this loop delivered last per rollout: the watch may still show an object from before the
        // `reported` write that recorded it, which must not deliver the same status again.
        let mut delivered: BTreeMap<String, CommitStatus> = BTreeMap::new();
        loop {
            let mut next: Option<Duration> = None;
            let names: Vec<String> = pending.keys().cloned().collect();
            for name in names {
                let desired = pending.get(&name).map(|p| p.desired.clone());
                match self.deliver_rollout(&api, &name, &mut pending).await {
                    Some(wait) => next = Some(next.map_or(wait, |n| n.min(wait))),
                    None => {
                        if let Some(desired) = desired.filter(|_| !pending.contains_key(&name)) {
                            delivered.insert(name, desired);
                        }
                    }
                }
            }
            let sleep = tokio::time::sleep(next.unwrap_or(self.backoff.max));
            tokio::select! {
                _ = &mut shutdown => return,
                event = events.next() => match event {
                    Some(Ok(watcher::Event::Apply(r) | watcher::Event::InitApply(r))) => {
                        let name = r.name_any();
                        match undelivered(&r).filter(|u| delivered.get(&name) != Some(&u.desired)) {
                            Some(u) => {
                                let same = pending.get(&name).is_some_and(|p| p.desired == u.desired);
                                if !same {
                                    pending.insert(name, u);
                                }
                            }
                            None => {
                                pending.remove(&name);
                            }
                        }
                    }
                    Some(Ok(watcher::Event::Delete(r))) => {
                        pending.remove(&r.name_any());
                        delivered.remove(&r.name_any());
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => tracing::warn!(error = %e, "watching FleetRollouts for commit statuses failed; retrying"),
                    None => return,
                },
                _ = sleep => {}
            }
        }
    }

    /// Delivers rollout `name`'s status unless it waits for a retry; returns the wait left, if any.
    async fn deliver_rollout(
        &self,
        api: &Api<FleetRollout>,
        name: &str,
        pending: &mut BTreeMap<String, Undelivered>,
    ) -> Option<Duration> {
        let key = format!("rollout/{name}");
        let job = pending.get(name)?.clone();
        if let Some(wait) = self.wait_for(&key, &job.desired) {
            return Some(wait);
        }
        match self.sinks.deliver(&job.commit, &job.desired).await {
            Ok(()) => {
                self.clear_wait(&key);
                let patch = serde_json::json!({"status": {"reported": job.desired}});
                match api
                    .patch_status(name, &patch_params(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => {
                        pending.remove(name);
                        None
                    }
                    Err(kube::Error::Api(s)) if s.code == 404 => {
                        pending.remove(name);
                        None
                    }
                    Err(e) => {
                        tracing::warn!(rollout = %name, error = %e, "recording the delivered rollout status failed; retrying");
                        Some(self.backoff.initial)
                    }
                }
            }
            Err(err) => {
                let attempts = job.attempts.saturating_add(1);
                if let Some(p) = pending.get_mut(name) {
                    p.attempts = attempts;
                }
                tracing::warn!(rollout = %name, error = %err, "delivering the rollout's commit status failed; retrying");
                Some(self.schedule(&key, &job.desired, attempts, &err))
            }
        }
    }
}
