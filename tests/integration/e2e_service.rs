//! `kok run` as a service process: probes and metrics on its listener, graceful shutdown, and the first
//! pass of a restarted kok, which waits for its watch caches' first list rather than list a fleet's
//! clusters one by one.

use crate::e2e;

use std::time::{Duration, Instant};

use e2e::{hosts, meta_cluster, wait_for, Kok, Objects, Remote, NS};
use k8s_openapi::api::core::v1::ConfigMap;
use kok::api::Cluster;
use kok::reconcile::{CACHES_READY, FEW_CLUSTERS};
use testkit::{ApiServer, Delay};

async fn status_of(http: &reqwest::Client, url: &str) -> Option<u16> {
    http.get(url).send().await.ok().map(|r| r.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_answer_and_readyz_turns_ready_after_the_first_reconcile() {
    let api = meta_cluster().await;
    // The branch kok follows does not exist yet: nothing can be reconciled.
    let remote = Remote::new();
    remote.push_to("other", "unrelated branch");
    let kok = Kok::run(&api, &remote, &["--status".to_string(), "notes".to_string()]);
    let http = reqwest::Client::new();
    wait_for("/healthz to answer 200", Some(&kok), || async {
        (status_of(&http, &kok.url("/healthz")).await == Some(200)).then_some(())
    })
    .await;
    wait_for("a failed poll of the missing branch", Some(&kok), || async {
        let metrics = http
            .get(kok.url("/metrics"))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        metrics
            .contains("kok_polls_total{result=\"error\"}")
            .then_some(())
    })
    .await;
    assert_eq!(
        status_of(&http, &kok.url("/readyz")).await,
        Some(503),
        "not ready before any reconcile"
    );

    remote.cluster("prod-bj");
    remote.push("first cluster");
    wait_for("/readyz to answer 200", Some(&kok), || async {
        (status_of(&http, &kok.url("/readyz")).await == Some(200)).then_some(())
    })
    .await;
    let objects = Objects::new(&api);
    assert!(
        objects.cluster("prod-bj").await.is_some(),
        "ready means the commit was applied"
    );
    let metrics = http
        .get(kok.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "kok_polls_total",
        "kok_fetches_total",
        "kok_reconcile_duration_seconds_bucket",
        "kok_objects_written_total",
        "kok_operations",
        "kok_status_deliveries_total",
        "kok_last_reconciled_commit_timestamp_seconds",
    ] {
        assert!(metrics.contains(name), "/metrics lacks {name}:\n{metrics}");
    }
    assert!(
        metrics.contains("kok_polls_total{result=\"changed\"}"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_kok_promptly_with_exit_code_zero() {
    let api = meta_cluster().await;
    let remote = Remote::new();
    remote.cluster("prod-bj");
    remote.write(
        "clusters/prod-bj/operations.yml",
        "- id: install\n  action: cluster.yml\n",
    );
    remote.push("install");
    let mut kok = Kok::run(&api, &remote, &["--status".to_string(), "notes".to_string()]);
    let objects = &Objects::new(&api);
    let job = wait_for("the install Job", Some(&kok), || {
        objects.job_of("prod-bj", "install")
    })
    .await;
    kok.assert_running();

    kok.stop().await;
    assert!(
        kok.log().contains("stopped"),
        "kok logs that it stopped:\n{}",
        kok.log()
    );
    // Jobs keep running in the cluster: shutting kok down deletes nothing.
    let name = e2e::job_name(&job);
    assert!(objects.jobs().await.iter().any(|j| e2e::job_name(j) == name));
}

/// Promise 9's one gap, said once at start: without a sink that keeps a record (`--status none`), a lost
/// namespace would run every current entry again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kok_without_a_record_says_once_at_start_that_a_lost_namespace_would_rerun_everything() {
    let api = meta_cluster().await;
    let remote = Remote::new();
    remote.cluster("prod-bj");
    remote.push("first cluster");
    let warning = "no status sink keeps a record of what ran (--status none)";
    let kok = Kok::run(&api, &remote, &["--status".to_string(), "none".to_string()]);
    let http = reqwest::Client::new();
    wait_for("/readyz to answer 200", Some(&kok), || async {
        (status_of(&http, &kok.url("/readyz")).await == Some(200)).then_some(())
    })
    .await;
    // Polls after the first pass: the warning is not said again.
    wait_for("two more polls", Some(&kok), || async {
        let metrics = http
            .get(kok.url("/metrics"))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        let line = metrics
            .lines()
            .find(|l| l.starts_with("kok_polls_total{result=\"unchanged\"}"))?;
        let polls: f64 = line.rsplit(' ').next()?.parse().ok()?;
        (polls >= 2.0).then_some(())
    })
    .await;
    assert_eq!(kok.log().matches(warning).count(), 1, "{}", kok.log());

    drop(kok);
    let noted = Kok::run(&api, &remote, &["--status".to_string(), "notes".to_string()]);
    wait_for("the record's sinks named at start", Some(&noted), || async {
        noted
            .log()
            .contains("the record of what ran is read back from these sinks")
            .then_some(())
    })
    .await;
    // Both write to one log: the warning is still the first kok's alone.
    assert_eq!(noted.log().matches(warning).count(), 1, "{}", noted.log());
}

/// How long the restarted kok's first lists of the runs are held back: past [`CACHES_READY`].
const LIST_HELD: Duration = Duration::from_secs(CACHES_READY.as_secs() + 5);
/// The watches of the runs a kok starts, each with a first list: its caches' and its reporter's.
const RUN_WATCHES: usize = 2;
/// What the first pass of a restarted kok logs while it waits for the caches.
const WAITS: &str = "waiting for the watch caches' first list";
/// What it logs when it lists each cluster's objects instead.
const LISTS: &str = "the watch caches have not listed yet; this pass lists each cluster's objects";
/// What a pass without the caches lists once per cluster (with a label selector), and the first lists
/// the watches of each make: kok's caches of Clusters and ConfigMaps, and the [`RUN_WATCHES`].
const PER_CLUSTER: [&str; 3] = ["clusters", "configmaps", "clusteroperations"];
const WATCH_LISTS: [usize; 3] = [1, 1, RUN_WATCHES];

fn cluster(i: usize) -> String {
    format!("c{i:03}")
}

/// The commit kok last recorded as reconciled, read without a request (the log counts kok's alone).
fn recorded(api: &ApiServer) -> Option<String> {
    let cm = api.object("v1/configmaps", NS, kok::api::STATE_CONFIG_MAP)?;
    let cm: ConfigMap = serde_json::from_value(cm).ok()?;
    Some(kok::materialize::state::state_from(&cm)?.commit)
}

/// A kok restarted onto a new commit, once its first pass recorded the commit.
struct Restarted {
    kok: Kok,
    api: ApiServer,
    _remote: Remote,
    /// The new commit.
    commit: String,
    /// What the restarted kok logged up to then.
    log: String,
    /// From the restart to the commit recorded.
    took: Duration,
}

/// `clusters` clusters kok reconciled; then, with kok stopped, a commit adding node7 to each, and kok
/// started again with its first lists of the runs held back [`LIST_HELD`]. Returns once the restarted
/// kok's first pass (over every cluster) recorded the commit, the request log counting the restarted
/// kok's requests alone.
async fn restarted_onto_a_change_of(clusters: usize) -> Restarted {
    let api = meta_cluster().await;
    let remote = Remote::new();
    for i in 0..clusters {
        remote.cluster(&cluster(i));
    }
    let first = remote.push("a fleet");
    let args = ["--status".to_string(), "notes".to_string()];
    let mut kok = Kok::run(&api, &remote, &args);
    wait_for("the fleet reconciled", Some(&kok), || async {
        (recorded(&api)? == first).then_some(())
    })
    .await;
    kok.stop().await;

    for i in 0..clusters {
        remote.write(&format!("clusters/{}/hosts.yml", cluster(i)), &hosts(true));
    }
    let commit = remote.push("node7 joins every cluster");
    // Both koks write to one log: the restarted one's part starts here.
    let earlier = kok.log().len();
    let since = |log: String| log.get(earlier..).unwrap_or_default().to_string();
    api.inject_delay(Delay::on("list", "clusteroperations", LIST_HELD, RUN_WATCHES));
    api.requests().reset();
    let restart = Instant::now();
    let kok = Kok::run(&api, &remote, &args);
    // After 10 s the pass says whether it waits on or lists each cluster; then it applies the commit.
    wait_for("the pass's word on the watch caches", Some(&kok), || async {
        let log = since(kok.log());
        (log.contains(WAITS) || log.contains(LISTS)).then_some(())
    })
    .await;
    wait_for("the restarted kok's pass recorded", Some(&kok), || async {
        (recorded(&api)? == commit).then_some(())
    })
    .await;
    let took = restart.elapsed();
    let log = since(kok.log());
    Restarted {
        kok,
        api,
        _remote: remote,
        commit,
        log,
        took,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_koks_pass_over_a_fleet_waits_for_the_watch_caches_instead_of_listing_each_cluster() {
    let fleet = FEW_CLUSTERS + 1;
    let mut r = restarted_onto_a_change_of(fleet).await;
    let requests = r.api.requests();
    assert_eq!(
        PER_CLUSTER.map(|resource| requests.count("list", resource)),
        WATCH_LISTS,
        "the watches' first lists of {PER_CLUSTER:?}, no list per cluster: {:?}",
        requests.snapshot()
    );
    for resource in PER_CLUSTER {
        // kok's own reads (its state, its reporter's records), never one per cluster.
        assert!(
            requests.count("get", resource) < fleet / 10,
            "gets of {resource}: {:?}",
            requests.snapshot()
        );
    }
    assert!(
        r.took >= LIST_HELD,
        "the pass waited for the held list, yet recorded the commit {:?} after the restart",
        r.took
    );
    assert!(r.log.contains(WAITS) && !r.log.contains(LISTS), "{}", r.log);
    // Once the list came, the pass applied the commit to every cluster, from the caches.
    for i in 0..fleet {
        let name = cluster(i);
        let live = r
            .api
            .object((kok::api::GROUP, kok::api::VERSION, "clusters"), NS, &name);
        let c: Cluster = serde_json::from_value(live.expect("the Cluster")).unwrap();
        assert!(
            c.spec.source.revision.ends_with(&r.commit),
            "{name} at {}",
            c.spec.source.revision
        );
        let hosts = r.api.object("v1/configmaps", NS, &c.spec.hosts_conf_ref.name);
        let hosts: ConfigMap = serde_json::from_value(hosts.expect("its hosts ConfigMap")).unwrap();
        let text = hosts.data.unwrap_or_default().remove(kok::api::HOSTS_KEY);
        assert!(text.unwrap_or_default().contains("node7"), "{name}'s inventory");
    }
    r.kok.assert_running();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_koks_pass_over_a_few_clusters_lists_each_of_them_after_ten_seconds_without_the_caches() {
    let few = 2;
    let r = restarted_onto_a_change_of(few).await;
    let requests = r.api.requests();
    assert_eq!(
        PER_CLUSTER.map(|resource| requests.count("list", resource)),
        WATCH_LISTS.map(|watches| watches + few),
        "the watches' first lists of {PER_CLUSTER:?}, and one list per cluster: {:?}",
        requests.snapshot()
    );
    assert!(r.took >= CACHES_READY, "the pass listed after {:?}", r.took);
    assert!(r.log.contains(LISTS) && !r.log.contains(WAITS), "{}", r.log);
}
