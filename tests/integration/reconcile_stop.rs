//! A pass when kok begins to stop: one still waiting for the watch caches' first lists ends at once and
//! writes nothing, one that is applying finishes the clusters it started and starts no more; neither
//! records the commit, so the next start reconciles it again and what was applied writes nothing then.

use crate::controller_support;
use crate::gitkit;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use git2::Oid;
use kube::api::{Api, ListParams};
use kube::ResourceExt;
use tokio::sync::watch;

use controller_support::{server, NS};
use gitkit::RepoBuilder;
use kok::api::{Cluster, ClusterOperation};
use kok::controller::live::caches;
use kok::materialize::state::load_state;
use kok::metrics::Metrics;
use kok::reconcile::{pass, PassConfig, PassError, PassOutcome, SharedSource, Stopping};
use kok::source::{Source, SourceConfig};

const CLUSTERS: usize = 48;

/// A repository of [`CLUSTERS`] clusters with one operation each, its source and its tip.
fn fleet() -> (RepoBuilder, SharedSource, Oid, tempfile::TempDir) {
    let mut repo = RepoBuilder::new();
    for i in 0..CLUSTERS {
        let name = format!("c{i:02}");
        repo.cluster(&name).op(&name, "install", "cluster.yml");
    }
    repo.commit("a fleet");
    let cache = tempfile::tempdir().unwrap();
    let mut source = Source::open(SourceConfig::new(repo.url(), "main", cache.path())).unwrap();
    let tip = source.fetch().unwrap();
    (repo, Arc::new(Mutex::new(source)), tip, cache)
}

fn config(live: Option<Arc<kok::controller::live::LiveCache>>, stopping: Stopping) -> PassConfig {
    PassConfig {
        namespace: NS.into(),
        root: "clusters".into(),
        status_url: None,
        live,
        trees: Default::default(),
        records: None,
        stopping,
    }
}

/// Each Cluster in the namespace and the ids of its ClusterOperations.
async fn applied(client: &kube::Client) -> Vec<(String, Vec<String>)> {
    let clusters = Api::<Cluster>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap();
    let ops = Api::<ClusterOperation>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap();
    let mut out: Vec<(String, Vec<String>)> = clusters
        .iter()
        .map(|c| {
            let name = c.name_any();
            let ids = ops
                .iter()
                .filter(|o| o.spec.cluster == name)
                .map(|o| o.spec.id.clone())
                .collect();
            (name, ids)
        })
        .collect();
    out.sort();
    out
}

fn stopped(result: &Result<PassOutcome, PassError>) -> bool {
    matches!(result, Err(PassError::Stopped))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_waiting_for_the_caches_ends_when_kok_stops_and_writes_nothing() {
    let (_repo, source, tip, _cache) = fleet();
    let server = server().await;
    // Caches nothing feeds: they never list, as when the controller that would fill them is stopping.
    let live = caches(NS).live;
    let (stop, stopping) = watch::channel(false);
    let cfg = config(Some(live), Stopping::on(stopping));
    let client = server.client();
    let log = server.requests();
    log.reset();
    let metrics = Metrics::new();
    let running = pass(&client, &source, &cfg, None, tip, false, &metrics);
    tokio::pin!(running);
    tokio::select! {
        result = &mut running => panic!("the pass did not wait for the caches' first lists: {result:?}"),
        () = tokio::time::sleep(Duration::from_millis(300)) => {}
    }
    stop.send(true).unwrap();
    let result = running.await;
    assert!(stopped(&result), "the pass ends as kok stops: {result:?}");
    assert_eq!(log.writes(), 0, "nothing was written: {:?}", log.snapshot());
    assert!(load_state(&server.client(), NS).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_stopped_while_applying_finishes_the_clusters_it_started_and_the_next_one_the_rest() {
    let (_repo, source, tip, _cache) = fleet();
    let server = server().await;
    let client = server.client();
    // Slow answers keep the pass applying while the test watches it.
    server.set_latency(Duration::from_millis(15));
    let (stop, stopping) = watch::channel(false);
    let cfg = config(None, Stopping::on(stopping));
    let metrics = Metrics::new();
    let running = pass(&client, &source, &cfg, None, tip, false, &metrics);
    let clusters = (kok::api::GROUP, kok::api::VERSION, "clusters");
    let stopper = async {
        for _ in 0..2000 {
            if server.count(clusters) > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        stop.send(true).unwrap();
    };
    let (result, ()) = tokio::join!(running, stopper);
    assert!(stopped(&result), "the pass ends as kok stops: {result:?}");
    server.set_latency(Duration::ZERO);

    let first = applied(&client).await;
    assert!(
        !first.is_empty() && first.len() < CLUSTERS,
        "the pass stopped part way: {} of {CLUSTERS} clusters",
        first.len()
    );
    for (cluster, ids) in &first {
        assert_eq!(ids, &["install"], "cluster {cluster} was applied whole");
    }
    assert!(
        load_state(&client, NS).await.unwrap().is_none(),
        "a stopped pass does not record the commit"
    );

    // The next start reconciles the same commit: the rest of the fleet, and the commit recorded; what the
    // stopped pass applied is not written again.
    let cfg = config(None, Stopping::default());
    let log = server.requests();
    log.reset();
    let outcome = pass(&client, &source, &cfg, None, tip, false, &Metrics::new())
        .await
        .unwrap();
    let all = applied(&client).await;
    assert_eq!(all.len(), CLUSTERS);
    assert!(all.iter().all(|(_, ids)| ids == &["install"]), "{all:?}");
    let state = load_state(&client, NS)
        .await
        .unwrap()
        .expect("the commit is recorded");
    assert_eq!(state.commit, tip.to_string());
    assert_eq!(outcome.applied.len(), CLUSTERS);
    assert_eq!(
        log.writes_to("clusters"),
        CLUSTERS - first.len(),
        "only the clusters the stopped pass had not applied are written: {:?}",
        log.snapshot()
    );
}
