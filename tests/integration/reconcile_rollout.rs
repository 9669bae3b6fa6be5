//! The service's pass with rollout files: the FleetRollout and each participating cluster's run are
//! written from git, a pass that changes another cluster leaves the runs alone, a cluster that joins
//! the selection later gets its run in its wave, moving `stopAfter` runs nothing again, and removing the
//! file deletes the object and cancels the runs that had not started.

use crate::controller_support;
use crate::gitkit;

use std::sync::{Arc, Mutex};

use git2::Oid;
use kube::api::{Api, ListParams};
use kube::ResourceExt;

use controller_support::{fleet_rollout, server, NS};
use gitkit::RepoBuilder;
use kok::api::{ClusterOperation, Phase, LABEL_ROLLOUT, LABEL_WAVE};
use kok::metrics::Metrics;
use kok::reconcile::{pass, PassConfig};
use kok::source::{Source, SourceConfig};

const ROLLOUT: &str = "operation: {id: up, action: up.yml}\n\
clusters: {selector: {env: prod}}\n\
waves:\n  - {name: canary, clusters: [a]}\n  - {name: rest}\n";

fn labelled(repo: &mut RepoBuilder, cluster: &str, env: &str) {
    repo.cluster(cluster).file(
        &format!("clusters/{cluster}/cluster.yml"),
        &format!("labels: {{env: {env}}}\n"),
    );
}

/// The runs of rollout `up`, as `(cluster, wave, phase, current)`, sorted, and their names.
async fn runs(client: &kube::Client) -> (Vec<(String, String, Phase, bool)>, Vec<String>) {
    let api: Api<ClusterOperation> = Api::namespaced(client.clone(), NS);
    let lp = ListParams::default().labels(&format!("{LABEL_ROLLOUT}=up"));
    let mut ops = api.list(&lp).await.unwrap().items;
    ops.sort_by_key(|o| o.name_any());
    let names = ops.iter().map(|o| o.name_any()).collect();
    let mut out: Vec<_> = ops
        .iter()
        .map(|o| {
            let labels = o.labels();
            (
                o.spec.cluster.clone(),
                labels.get(LABEL_WAVE).cloned().unwrap_or_default(),
                o.status.as_ref().map(|s| s.phase).unwrap_or_default(),
                labels.get("kok.dev/current").is_some(),
            )
        })
        .collect();
    out.sort_by(|x, y| (&x.0, &x.1).cmp(&(&y.0, &y.1)));
    (out, names)
}

struct Service {
    server: testkit::ApiServer,
    source: Arc<Mutex<Source>>,
    last: Option<Oid>,
    _cache: tempfile::TempDir,
}

impl Service {
    async fn start(repo: &RepoBuilder) -> Service {
        let cache = tempfile::tempdir().unwrap();
        let source = Source::open(SourceConfig::new(repo.url(), "main", cache.path())).unwrap();
        Service {
            server: server().await,
            source: Arc::new(Mutex::new(source)),
            last: None,
            _cache: cache,
        }
    }

    async fn reconcile(&mut self) -> kok::reconcile::PassOutcome {
        let source = self.source.clone();
        let tip = tokio::task::spawn_blocking(move || source.lock().unwrap().fetch().unwrap())
            .await
            .unwrap();
        let cfg = PassConfig {
            namespace: NS.into(),
            root: "clusters".into(),
            status_url: None,
            live: None,
            trees: Default::default(),
            records: None,
            stopping: Default::default(),
        };
        let client = self.server.client();
        let outcome = pass(
            &client,
            &self.source,
            &cfg,
            self.last,
            tip,
            false,
            &Metrics::new(),
        )
        .await
        .unwrap();
        self.last = Some(tip);
        outcome
    }
}

fn row(cluster: &str, wave: &str, phase: Phase, current: bool) -> (String, String, Phase, bool) {
    (cluster.into(), wave.into(), phase, current)
}

#[tokio::test]
async fn a_rollout_file_becomes_its_object_and_runs_in_each_participating_clusters_queue() {
    let mut repo = RepoBuilder::new();
    labelled(&mut repo, "a", "prod");
    labelled(&mut repo, "b", "prod");
    labelled(&mut repo, "c", "dev");
    repo.file("rollouts/up.yml", ROLLOUT);
    let first = repo.commit("rollout up");
    let mut service = Service::start(&repo).await;
    let client = service.server.client();
    let outcome = service.reconcile().await;
    assert!(outcome.diagnostics.is_empty(), "{:?}", outcome.diagnostics);

    let object = fleet_rollout(&client, "up").await.expect("the FleetRollout");
    let waves: Vec<(String, Vec<String>)> = object
        .spec
        .waves
        .iter()
        .map(|w| (w.name.clone(), w.clusters.clone()))
        .collect();
    assert_eq!(
        waves,
        [
            ("canary".into(), vec!["a".into()]),
            ("rest".into(), vec!["b".into()])
        ]
    );
    assert_eq!(object.spec.source.revision, format!("main@sha1:{first}"));
    let (state, names) = runs(&client).await;
    assert_eq!(
        state,
        [
            row("a", "canary", Phase::Pending, true),
            row("b", "rest", Phase::Pending, true)
        ]
    );
    let op = Api::<ClusterOperation>::namespaced(client.clone(), NS)
        .get(&names[0])
        .await
        .unwrap();
    assert_eq!(
        op.spec.source.commit, first,
        "its status goes to the rollout's commit"
    );

    // Another cluster changes: the runs stay as they are.
    repo.op("c", "install", "cluster.yml");
    repo.commit("c gains an operation");
    service.reconcile().await;
    assert_eq!(runs(&client).await.1, names, "no run created or replaced");
    assert_eq!(runs(&client).await.0, state);

    // c joins the selection: it gets a run in the wave that takes it; the others keep theirs.
    labelled(&mut repo, "c", "prod");
    repo.commit("c is prod now");
    service.reconcile().await;
    let (joined, joined_names) = runs(&client).await;
    assert_eq!(
        joined,
        [
            row("a", "canary", Phase::Pending, true),
            row("b", "rest", Phase::Pending, true),
            row("c", "rest", Phase::Pending, true)
        ]
    );
    assert!(names.iter().all(|n| joined_names.contains(n)));
    let unchanged = fleet_rollout(&client, "up").await.unwrap();

    // stopAfter moves: nothing runs again; the object records the change at the new commit.
    repo.file("rollouts/up.yml", &format!("{ROLLOUT}stopAfter: canary\n"));
    let promoted = repo.commit("stop after the canary");
    service.reconcile().await;
    assert_eq!(runs(&client).await.1, joined_names, "no new run");
    let moved = fleet_rollout(&client, "up").await.unwrap();
    assert_eq!(moved.spec.stop_after.as_deref(), Some("canary"));
    assert_eq!(moved.spec.source.revision, format!("main@sha1:{promoted}"));
    assert_ne!(
        moved.metadata.resource_version,
        unchanged.metadata.resource_version
    );

    // The file is removed: the object goes, the runs not started are canceled and stay as the record.
    repo.remove("rollouts/up.yml");
    repo.commit("no more rollout");
    service.reconcile().await;
    assert!(fleet_rollout(&client, "up").await.is_none());
    let (gone, _) = runs(&client).await;
    assert_eq!(
        gone,
        [
            row("a", "canary", Phase::Canceled, false),
            row("b", "rest", Phase::Canceled, false),
            row("c", "rest", Phase::Canceled, false)
        ]
    );
}

#[tokio::test]
async fn a_broken_rollout_file_is_refused_alone_and_its_runs_stay() {
    let mut repo = RepoBuilder::new();
    labelled(&mut repo, "a", "prod");
    labelled(&mut repo, "b", "prod");
    repo.file("rollouts/up.yml", ROLLOUT);
    repo.commit("rollout up");
    let mut service = Service::start(&repo).await;
    let client = service.server.client();
    service.reconcile().await;
    let before = runs(&client).await;

    repo.file("rollouts/up.yml", &format!("{ROLLOUT}bake: soon\n"));
    repo.op("a", "install", "cluster.yml");
    repo.commit("a broken bake, and a changes");
    let outcome = service.reconcile().await;
    assert!(
        outcome.diagnostics.iter().any(|d| d.path == "rollouts/up.yml"),
        "{:?}",
        outcome.diagnostics
    );
    assert!(outcome.applied.contains(&"a".to_string()), "the cluster goes on");
    assert!(fleet_rollout(&client, "up").await.is_some(), "the object stays");
    assert_eq!(runs(&client).await, before, "the runs stay as they are");
}
