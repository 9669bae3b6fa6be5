//! Between operations: every `--health-interval` each cluster with a kubeconfig is checked against its
//! current inventory and vars, at most [`HEALTH_CONCURRENCY`] at once and each within the health timeout,
//! so an unreachable cluster never delays the others: a check without an answer after [`SLOW_CHECK`]
//! gives its place to the next cluster (and waits on until its timeout), and clusters that answered
//! the last round go first. The result goes into the
//! Cluster's status: the conditions of [`crate::health::conditions`], `kubernetesVersion`,
//! `kubeletVersions` and `nodes`, and the certificates read beside the checks with their
//! `CertificatesValid` ([`crate::health::certificates`]), written only when they changed, with one Event
//! per condition that changed (the `kok_cluster_condition` / `kok_cluster_nodes` /
//! `kok_cluster_certificate_expiry_timestamp_seconds` metrics read the status at each scrape, see
//! [`super::gauges`]). The Cluster reconciler keeps them ([`carry`]) when it writes its own
//! conditions. A cluster's pinned hosts and vars ConfigMaps are read once for as long as it uses them
//! ([`Expectations`]); its kubeconfig Secret is read every round, so a changed one counts at once.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use kube::api::{Api, Patch};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{debug, info, warn};

use super::cluster::keep_transition_times;
use super::verify::{access, expected};
use super::Context;
use crate::api::{Cluster, ClusterStatus, PinnedInventory, Verify};
use crate::health::certificates;
use crate::health::client::REQUEST_TIMEOUT;
use crate::health::conditions::{conditions, node_counts, HEALTH_CONDITIONS};
use crate::health::observe::observe;
use crate::health::{verify, Access, Expected};

pub use crate::health::observe::OBSERVE_TIMEOUT;

/// Most clusters checked at once.
pub const HEALTH_CONCURRENCY: usize = 16;
/// Longer than the health timeout a check may take to read its kubeconfig Secret and inputs and record.
const RECORD_MARGIN: Duration = Duration::from_secs(5);
/// How long a check holds its place among the [`HEALTH_CONCURRENCY`] before a silent API server lets the
/// next cluster go ahead.
pub const SLOW_CHECK: Duration = Duration::from_secs(2);

/// What each cluster's pinned inventory and vars expect of it, by the names of its hosts and vars
/// ConfigMaps. The names are content-addressed, so an entry never goes stale: a round reads a
/// cluster's two ConfigMaps only when its inputs changed. Inputs no cluster uses any more leave at the
/// next round's start.
type Expectations = Mutex<HashMap<String, Arc<Expected>>>;

/// Checks every cluster every `ctx.config.health_interval` until `stopped` (never when it is zero).
pub async fn run(ctx: Arc<Context>, stopped: impl Future<Output = ()>) {
    let interval = ctx.config.health_interval;
    if interval.is_zero() {
        return;
    }
    let expectations = Expectations::default();
    let rounds = async {
        // The first round one interval after the start: the caches are filled by then.
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            round(&ctx, &expectations).await;
        }
    };
    tokio::select! {
        () = rounds => {}
        () = stopped => {}
    }
}

/// One round: every cluster the cache holds (the metrics of those it no longer holds dropped), those that
/// answered last time first, [`HEALTH_CONCURRENCY`] at a time (a check silent for [`SLOW_CHECK`] gives its
/// place up; the semaphore is fair, so the order holds).
async fn round(ctx: &Context, expectations: &Expectations) {
    let started = std::time::Instant::now();
    let mut clusters = ctx.clusters.state();
    let count = clusters.len();
    let inputs: HashSet<String> = clusters.iter().map(|c| inputs_of(c)).collect();
    if let Ok(mut known) = expectations.lock() {
        known.retain(|k, _| inputs.contains(k));
    }
    drop(inputs);
    clusters.sort_by_key(|c| round_key(c));
    let limit = ctx.config.health_timeout + RECORD_MARGIN;
    in_places(clusters, HEALTH_CONCURRENCY, SLOW_CHECK, |cluster| async move {
        match tokio::time::timeout(limit, check(ctx, expectations, &cluster)).await {
            Ok(Ok(())) => {}
            Ok(Err(why)) => warn!(cluster = %cluster.name_any(), error = %why, "health check not recorded"),
            Err(_) => warn!(cluster = %cluster.name_any(), "health check timed out"),
        }
    })
    .await;
    let took = started.elapsed();
    ctx.config.metrics.observe_health_round(took);
    info!(
        clusters = count,
        took_ms = took.as_millis() as u64,
        "health round finished"
    );
}

/// Runs `work` on each of `items` in order, at most `places` at once; one still running after `slow`
/// gives its place to the next item and runs on (the semaphore is fair, so the order holds). An item's
/// work is made only once it has a place: a round over 10,000 clusters held a waiting check of about
/// 13 KB for each of them, 127 MB for the length of the round, where it now holds a few dozen.
async fn in_places<T, F, Fut>(items: Vec<T>, places: usize, slow: Duration, work: F)
where
    F: Fn(T) -> Fut,
    Fut: Future<Output = ()>,
{
    let places = tokio::sync::Semaphore::new(places);
    let work = &work;
    futures::stream::iter(items)
        .then(|item| {
            let places = &places;
            async move { (places.acquire().await.ok(), item) }
        })
        .for_each_concurrent(None, |(mut place, item)| async move {
            let done = work(item);
            tokio::pin!(done);
            tokio::select! {
                () = &mut done => {}
                () = tokio::time::sleep(slow) => {
                    place.take();
                    done.await
                }
            }
            drop(place);
        })
        .await;
}

/// Where a cluster goes in a round: those that answered last time first, then by name.
fn round_key(cluster: &Cluster) -> (bool, String) {
    (!answered(cluster), cluster.name_any())
}

/// Whether the cluster's API server answered the last health check (false before the first).
fn answered(cluster: &Cluster) -> bool {
    let conditions = cluster
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    conditions
        .iter()
        .any(|c| c.type_ == crate::health::checks::REACHABLE && c.status == "True")
}

/// The names of `cluster`'s pinned ConfigMaps, as one key: the hosts and vars ConfigMaps, its file list,
/// then the files it lists itself (a file's path is part of what it means).
fn inputs_of(cluster: &Cluster) -> String {
    let spec = &cluster.spec;
    let mut key = format!("{}\n{}", spec.hosts_conf_ref.name, spec.inventory_file());
    key.push('\n');
    key.push_str(spec.vars_conf_ref.as_ref().map_or("", |r| r.name.as_str()));
    key.push('\n');
    // A file list's name is its content's address: the paths and files it names.
    key.push_str(spec.vars_files_ref.as_ref().map_or("", |r| r.name.as_str()));
    for f in &spec.vars_files {
        key.push('\n');
        key.push_str(&f.path);
        key.push('\0');
        key.push_str(&f.config_map);
    }
    key
}

/// Checks one cluster and records what it found.
async fn check(ctx: &Context, expectations: &Expectations, cluster: &Cluster) -> Result<(), String> {
    let name = cluster.name_any();
    let (observed, certificates) = match access(ctx, &name).await {
        Ok(Access::NoKubeconfig) => return Ok(()),
        Ok(Access::Client(client, sources)) => {
            let timeout = ctx.config.health_timeout;
            let observed = async {
                tokio::time::timeout(timeout, observe(&client))
                    .await
                    .unwrap_or_else(|_| crate::health::Observed {
                        api: Err("unreachable: timed out".to_string()),
                        ..Default::default()
                    })
            };
            let read = certificates::read(&sources, timeout.min(REQUEST_TIMEOUT));
            futures::join!(observed, read)
        }
        Err(refused) => (
            crate::health::Observed {
                api: Err(format!("cannot be reached: {refused}")),
                ..Default::default()
            },
            certificates::Read::unread(format!("{refused}")),
        ),
    };
    let inputs = inputs_of(cluster);
    let known = expectations.lock().ok().and_then(|e| e.get(&inputs).cloned());
    let expected = match known {
        Some(expected) => expected,
        None => {
            let read = expected(ctx, &cluster.spec, "", &[])
                .await
                .map_err(|(cm, e)| format!("reading ConfigMap {cm}: {e}"))?;
            let read = Arc::new(read);
            if let Ok(mut known) = expectations.lock() {
                known.insert(inputs, read.clone());
            }
            read
        }
    };
    let verdict = verify(Verify::Full, &expected, &observed);
    let api: Api<Cluster> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let mut cluster = std::borrow::Cow::Borrowed(cluster);
    // A conflict means the Cluster changed meanwhile (its reconciler wrote its own conditions): the
    // health is written once more on top of what it is now.
    for last in [false, true] {
        let (old, new) = with_health(&cluster, &verdict, &observed, &certificates);
        if new == old {
            return Ok(());
        }
        debug!(cluster = %name, healthy = verdict.passed, message = %verdict.message, "health recorded");
        let patch = json!({
            "metadata": {"resourceVersion": cluster.resource_version()},
            "status": {
                "conditions": new.conditions,
                "kubernetesVersion": new.kubernetes_version,
                "kubeletVersions": new.kubelet_versions,
                "nodes": new.nodes,
                "certificates": new.certificates,
            }
        });
        match api
            .patch_status(&name, &crate::api::kok_params(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                publish_changes(ctx, &cluster, &old, &new).await;
                return Ok(());
            }
            Err(kube::Error::Api(s)) if s.code == 409 && !last => {
                let now = api.get(&name).await;
                cluster = std::borrow::Cow::Owned(now.map_err(|e| format!("reading the Cluster: {e}"))?);
            }
            Err(e) => return Err(format!("writing the Cluster's status: {e}")),
        }
    }
    Ok(())
}

/// The status of `cluster` now, and with what `verdict`, `observed` and the `certificates` read say of its
/// health.
fn with_health(
    cluster: &Cluster,
    verdict: &crate::health::Verdict,
    observed: &crate::health::Observed,
    certificates: &certificates::Read,
) -> (ClusterStatus, ClusterStatus) {
    let old = cluster.status.clone().unwrap_or_default();
    let mut new = old.clone();
    let now = Timestamp::now();
    new.conditions
        .retain(|c| !HEALTH_CONDITIONS.contains(&c.type_.as_str()));
    new.conditions
        .extend(conditions(verdict, cluster.metadata.generation, now));
    new.certificates = certificates.known(&old.certificates);
    let window = cluster
        .spec
        .certificate_window_days
        .unwrap_or(certificates::DEFAULT_WINDOW_DAYS);
    new.conditions.extend(certificates::condition(
        certificates,
        &new.certificates,
        window,
        cluster.metadata.generation,
        now,
    ));
    if observed.api.is_ok() {
        new.kubernetes_version = observed.version.clone();
        let mut versions: Vec<String> = observed.nodes.iter().map(|n| n.kubelet_version.clone()).collect();
        versions.sort();
        versions.dedup();
        new.kubelet_versions = versions;
        new.nodes = Some(node_counts(observed));
    }
    keep_transition_times(&mut new, Some(&old), now);
    (old, new)
}

/// One Event per health condition whose status changed (Warning unless it turned True).
async fn publish_changes(ctx: &Context, cluster: &Cluster, old: &ClusterStatus, new: &ClusterStatus) {
    for c in new
        .conditions
        .iter()
        .filter(|c| HEALTH_CONDITIONS.contains(&c.type_.as_str()))
    {
        let before = old.conditions.iter().find(|o| o.type_ == c.type_);
        if before.is_some_and(|b| b.status == c.status) {
            continue;
        }
        let ev = Event {
            type_: if c.status == "True" {
                EventType::Normal
            } else {
                EventType::Warning
            },
            reason: c.reason.clone(),
            note: Some(format!("{} is {}: {}", c.type_, c.status, c.message)),
            action: "HealthCheck".to_string(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&ev, &cluster.object_ref(&())).await {
            warn!(cluster = %cluster.name_any(), error = %e, "event not published");
        }
    }
}

/// Keeps in `new` (a status the Cluster reconciler made) what the last health check recorded in `old`.
pub fn carry(new: &mut ClusterStatus, old: Option<&ClusterStatus>) {
    let Some(old) = old else { return };
    let health = old
        .conditions
        .iter()
        .filter(|c| HEALTH_CONDITIONS.contains(&c.type_.as_str()));
    new.conditions.extend(health.cloned());
    new.kubernetes_version = old.kubernetes_version.clone();
    new.kubelet_versions = old.kubelet_versions.clone();
    new.nodes = old.nodes.clone();
    new.certificates = old.certificates.clone();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ClusterSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn cluster(name: &str, reachable: Option<&str>) -> Cluster {
        let spec = ClusterSpec::for_test();
        let mut c = Cluster::new(name, spec);
        c.status = reachable.map(|status| ClusterStatus {
            conditions: vec![Condition {
                type_: crate::health::checks::REACHABLE.into(),
                status: status.into(),
                reason: "R".into(),
                message: String::new(),
                last_transition_time: Time(Timestamp::UNIX_EPOCH),
                observed_generation: None,
            }],
            ..Default::default()
        });
        c
    }

    #[test]
    fn clusters_that_answered_last_round_are_checked_first() {
        let mut clusters = [
            cluster("a-silent", Some("False")),
            cluster("b-new", None),
            cluster("c-up", Some("True")),
            cluster("d-unknown", Some("Unknown")),
            cluster("e-up", Some("True")),
        ];
        clusters.sort_by_key(round_key);
        let order: Vec<String> = clusters.iter().map(|c| c.name_any()).collect();
        assert_eq!(order, ["c-up", "e-up", "a-silent", "b-new", "d-unknown"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_rounds_work_is_made_only_once_it_has_a_place_and_a_slow_one_gives_its_place_up() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let made = AtomicUsize::new(0);
        let finished = AtomicUsize::new(0);
        let most_unfinished = AtomicUsize::new(0);
        let order = Mutex::new(Vec::new());
        let started = tokio::time::Instant::now();
        in_places((0..100).collect(), 4, SLOW_CHECK, |item: u32| {
            let unfinished = made.fetch_add(1, Ordering::SeqCst) + 1 - finished.load(Ordering::SeqCst);
            most_unfinished.fetch_max(unfinished, Ordering::SeqCst);
            order.lock().unwrap().push(item);
            let (finished, took) = (&finished, if item == 0 { 60 } else { 1 });
            async move {
                tokio::time::sleep(Duration::from_secs(took)).await;
                finished.fetch_add(1, Ordering::SeqCst);
            }
        })
        .await;
        assert_eq!(made.load(Ordering::SeqCst), 100);
        assert_eq!(
            *order.lock().unwrap(),
            (0..100).collect::<Vec<_>>(),
            "the order holds"
        );
        // Four places and one item that runs 60 s: it holds its place for SLOW_CHECK, then four at a
        // time go on beside it. Made eagerly, all 100 would have been unfinished at once.
        assert_eq!(most_unfinished.load(Ordering::SeqCst), 5);
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(60),
            "the slow one did not hold up the rest"
        );
    }
}
