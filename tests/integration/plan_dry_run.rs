//! `kok plan` is apply's dry run: after every commit, the writes the plan lists are exactly the writes
//! testkit counts when the service's pass reconciles that commit — on the pull request that once
//! disagreed, and on random commit sequences. The pass decides from the watch caches the service
//! runs, the plan from lists: the two views must agree.

use crate::controller_support;
use crate::gitkit;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use git2::Oid;
use kube::api::{Api, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;

use controller_support::{server, NS};
use gitkit::RepoBuilder;
use k8s_openapi::api::core::v1::ConfigMap;
use kok::api::{Cluster, ClusterOperation, LABEL_CLUSTER};
use kok::cli::plan::{decide, live_baseline, prepare, Plan};
use kok::controller::live::{caches, LiveCache};
use kok::materialize::apply::{read_live, Live};
use kok::metrics::Metrics;
use kok::reconcile::{pass, PassConfig, PassOutcome, SharedSource};
use kok::source::{Source, SourceConfig};

/// The service's side: a source on the work repository and a testkit meta-cluster.
struct Service {
    server: testkit::ApiServer,
    source: SharedSource,
    repo: RepoBuilder,
    last: Option<Oid>,
    /// What the last pass returned.
    outcome: PassOutcome,
    live: Arc<LiveCache>,
    watches: tokio::task::JoinHandle<()>,
    _cache: tempfile::TempDir,
}

impl Drop for Service {
    fn drop(&mut self) {
        self.watches.abort();
    }
}

/// resourceVersions by kind and name: what a pass decides from.
fn versions(live: &Live) -> BTreeMap<(&'static str, String), Option<String>> {
    let rv = |m: &kube::api::ObjectMeta| m.resource_version.clone();
    let mut out = BTreeMap::new();
    if let Some(c) = &live.cluster {
        out.insert(("Cluster", c.name_any()), rv(&c.metadata));
    }
    for (name, cm) in &live.config_maps {
        out.insert(("ConfigMap", name.clone()), rv(&cm.metadata));
    }
    for (name, op) in &live.operations {
        out.insert(("ClusterOperation", name.clone()), rv(&op.metadata));
    }
    out
}

impl Service {
    async fn start(repo: RepoBuilder) -> Service {
        let cache = tempfile::tempdir().unwrap();
        let source = Source::open(SourceConfig::new(repo.url(), "main", cache.path())).unwrap();
        let server = server().await;
        let feeds = caches(NS);
        let live = feeds.live.clone();
        let watches = tokio::spawn(feeds.watch(server.client(), std::future::pending()));
        Service {
            server,
            source: Arc::new(Mutex::new(source)),
            repo,
            last: None,
            outcome: PassOutcome::default(),
            live,
            watches,
            _cache: cache,
        }
    }

    /// Waits until the watch caches show every cluster as lists do (the test's own status writes
    /// included), so that the pass and the plan decide from the same objects.
    async fn caches_caught_up(&self) {
        let client = self.server.client();
        for _ in 0..1000 {
            let mut clusters = std::collections::BTreeSet::new();
            let labels =
                |m: &kube::api::ObjectMeta| m.labels.as_ref().and_then(|l| l.get(LABEL_CLUSTER).cloned());
            for c in Api::<Cluster>::namespaced(client.clone(), NS)
                .list(&Default::default())
                .await
                .unwrap()
            {
                clusters.extend(labels(&c.metadata));
            }
            for c in Api::<ConfigMap>::namespaced(client.clone(), NS)
                .list(&Default::default())
                .await
                .unwrap()
            {
                clusters.extend(labels(&c.metadata));
            }
            for o in Api::<ClusterOperation>::namespaced(client.clone(), NS)
                .list(&Default::default())
                .await
                .unwrap()
            {
                clusters.extend(labels(&o.metadata));
            }
            let mut same = true;
            for name in &clusters {
                let listed = read_live(&client, NS, name).await.unwrap();
                let cached = self.live.live(name).await;
                same &= cached.is_some_and(|c| versions(&c) == versions(&listed));
            }
            if same {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("the watch caches never showed what lists show");
    }

    /// The plan of the repository's new tip against the live objects.
    async fn plan(&self) -> Plan {
        let tip = Oid::from_str(&self.repo.head()).unwrap();
        let prepared = {
            let repo = git2::Repository::open(self.repo.path()).unwrap();
            prepare(&repo, self.last, tip, "clusters", NS, "main").unwrap()
        };
        let baseline = live_baseline(&self.server.client(), NS, &prepared).await.unwrap();
        decide(&prepared, &baseline)
    }

    /// Reconciles the repository's tip; returns the writes counted, by kind and change.
    async fn reconcile(&mut self) -> BTreeMap<(String, &'static str), usize> {
        self.pass(false).await
    }

    /// Reconciles the repository's tip against the last commit, or every cluster when `full` (a
    /// periodic resync); returns the writes counted, by kind and change.
    async fn pass(&mut self, full: bool) -> BTreeMap<(String, &'static str), usize> {
        let source = self.source.clone();
        let tip = tokio::task::spawn_blocking(move || source.lock().unwrap().fetch().unwrap())
            .await
            .unwrap();
        let cfg = PassConfig {
            namespace: NS.into(),
            root: "clusters".into(),
            status_url: None,
            live: Some(self.live.clone()),
            trees: Default::default(),
            records: None,
            stopping: Default::default(),
        };
        self.caches_caught_up().await;
        let log = self.server.requests();
        log.reset();
        let client = self.server.client();
        self.outcome = pass(&client, &self.source, &cfg, self.last, tip, full, &Metrics::new())
            .await
            .unwrap();
        let moved = self.last != Some(tip);
        self.last = Some(tip);
        for resource in ["clusters", "configmaps", "clusteroperations"] {
            assert_eq!(
                log.count("list", resource),
                0,
                "the pass listed {resource}: {:?}",
                log.snapshot()
            );
            assert!(
                log.count("get", resource) <= 1,
                "the pass read {resource} one by one: {:?}",
                log.snapshot()
            );
        }
        let mut counted = BTreeMap::new();
        for (kind, resource) in [
            ("Cluster", "clusters"),
            ("ConfigMap", "configmaps"),
            ("ClusterOperation", "clusteroperations"),
        ] {
            let mut writes = log.writes_to(resource);
            if kind == "ConfigMap" && moved {
                writes -= 1; // the pass records a new commit in ConfigMap kok-state
            }
            let deletes = log.count("delete", resource);
            counted.insert((kind.to_string(), "writes"), writes);
            counted.insert((kind.to_string(), "deletes"), deletes);
        }
        counted
    }

    /// Sets the phase of the operation `name` as the controller would.
    async fn set_phase(&self, name: &str, phase: &str) {
        let api: Api<ClusterOperation> = Api::namespaced(self.server.client(), NS);
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": phase}})),
        )
        .await
        .unwrap();
    }

    async fn operations(&self) -> Vec<String> {
        let api: Api<ClusterOperation> = Api::namespaced(self.server.client(), NS);
        api.list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(|o| o.name_any())
            .collect()
    }
}

/// `kok plan` as a process, from `from` to the tip, against `kubeconfig` or from the render of `from`.
fn kok_plan(repo: &RepoBuilder, from: &str, kubeconfig: Option<&std::path::Path>) -> serde_json::Value {
    let here = repo.path().display().to_string();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_kok"));
    cmd.args([
        "plan", "--repo", &here, "--from", from, "--to", "HEAD", "--output", "json",
    ])
    .env_remove("KUBERNETES_SERVICE_HOST")
    .env("KOK_LOG", "error");
    if let Some(path) = kubeconfig {
        cmd.arg("--kubeconfig").arg(path);
    }
    let out = cmd.output().expect("kok runs");
    assert!(
        out.status.success(),
        "kok plan failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("plan is JSON")
}

/// The plan's writes, by kind and change, as [`Service::reconcile`] counts them.
fn planned(plan: &Plan) -> BTreeMap<(String, &'static str), usize> {
    let mut out: BTreeMap<(String, &'static str), usize> = BTreeMap::new();
    for kind in ["Cluster", "ConfigMap", "ClusterOperation"] {
        out.insert((kind.to_string(), "writes"), 0);
        out.insert((kind.to_string(), "deletes"), 0);
    }
    for cluster in &plan.clusters {
        for o in cluster.created.iter().chain(&cluster.updated) {
            *out.get_mut(&(o.kind.clone(), "writes")).unwrap() += 1;
        }
        for o in &cluster.deleted {
            *out.get_mut(&(o.kind.clone(), "writes")).unwrap() += 1;
            *out.get_mut(&(o.kind.clone(), "deletes")).unwrap() += 1;
        }
    }
    out
}

fn hosts(nodes: &[String]) -> String {
    let mut out = String::from("all:\n  hosts:\n");
    for (i, n) in nodes.iter().enumerate() {
        out.push_str(&format!("    {n}:\n      ansible_host: 10.0.0.{}\n", i + 1));
    }
    out
}

fn total(counted: &BTreeMap<(String, &'static str), usize>) -> usize {
    counted
        .iter()
        .filter(|((_, what), _)| *what == "writes")
        .map(|(_, n)| n)
        .sum()
}

#[tokio::test]
async fn a_periodic_resync_decides_from_the_caches_and_rewrites_only_what_changed() {
    let mut repo = RepoBuilder::new();
    for name in ["a", "b", "c"] {
        repo.cluster(name).op(name, "install", "cluster.yml");
    }
    repo.commit("three clusters");
    let mut service = Service::start(repo).await;
    let created = service.reconcile().await;
    assert_eq!(created[&("Cluster".to_string(), "writes")], 3, "{created:?}");
    let first = service.last.unwrap();

    // Nothing changed: no write at all (and, as every pass here, no list).
    assert_eq!(total(&service.pass(true).await), 0);

    // One cluster changes; the resync writes that cluster only, and the others keep their revision.
    service.repo.file(
        "clusters/b/hosts.yml",
        &hosts(&["node1".to_string(), "node2".to_string()]),
    );
    service.repo.commit("grow b");
    let wrote = service.pass(true).await;
    assert_eq!(wrote[&("Cluster".to_string(), "writes")], 1, "{wrote:?}");
    let clusters: Api<Cluster> = Api::namespaced(service.server.client(), NS);
    for (name, commit) in [("a", first), ("b", service.last.unwrap()), ("c", first)] {
        let revision = clusters.get(name).await.unwrap().spec.source.revision;
        assert_eq!(revision, format!("main@sha1:{commit}"), "cluster {name}");
    }
}

#[tokio::test]
async fn a_periodic_resync_removes_a_cluster_the_caches_show_and_the_tree_does_not_have() {
    let mut repo = RepoBuilder::new();
    for name in ["a", "b"] {
        repo.cluster(name).op(name, "install", "cluster.yml");
    }
    repo.commit("two clusters");
    let mut service = Service::start(repo).await;
    service.reconcile().await;
    // A Cluster of kok's that no directory of the tree has any more (its removal happened while
    // kok was away, say): only the resync's comparison with the cached Clusters finds it.
    let clusters: Api<Cluster> = Api::namespaced(service.server.client(), NS);
    let mut stray = clusters.get("a").await.unwrap();
    stray.metadata = kube::api::ObjectMeta {
        name: Some("z".into()),
        namespace: Some(NS.into()),
        labels: stray.metadata.labels.take().map(|mut labels| {
            labels.insert(LABEL_CLUSTER.into(), "z".into());
            labels
        }),
        ..Default::default()
    };
    stray.status = None;
    clusters.create(&Default::default(), &stray).await.unwrap();
    let stray_ref = kube::runtime::reflector::ObjectRef::new("z").within(NS);
    for _ in 0..1000 {
        if service.live.clusters.get(&stray_ref).is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(
        service.live.cluster_names(),
        ["a", "b", "z"].map(String::from).into(),
        "the cache holds kok's Clusters, labels or not"
    );

    service.pass(true).await;
    assert!(
        clusters.get_opt("z").await.unwrap().is_none(),
        "the stray Cluster is removed"
    );
    for name in ["a", "b"] {
        assert!(
            clusters.get_opt(name).await.unwrap().is_some(),
            "cluster {name} stays"
        );
    }
}

#[tokio::test]
async fn an_object_the_pass_wrote_and_someone_deleted_does_not_keep_its_cluster_off_the_caches() {
    let mut repo = RepoBuilder::new();
    repo.cluster("a").op("a", "install", "cluster.yml");
    repo.commit("one cluster");
    let mut service = Service::start(repo).await;
    service.reconcile().await;
    // The history limit (or a person) deletes the operation the pass just created.
    let name = service.operations().await.pop().expect("the install operation");
    let api: Api<ClusterOperation> = Api::namespaced(service.server.client(), NS);
    api.delete(&name, &Default::default()).await.unwrap();
    for _ in 0..1000 {
        if service.live.operations.get(&name).is_none() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(
        service.live.operations.get(&name).is_none(),
        "the watch shows the delete"
    );
    // The watch is past the write, so the cluster's view is trusted at once, without the operation.
    let view = service
        .live
        .live("a")
        .await
        .expect("the caches vouch for the cluster");
    assert!(view.operations.is_empty(), "{:?}", view.operations.keys());
}

// Two worker threads: testkit answers the `kok plan` process while the test waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pull_request_adding_node8_plans_exactly_what_the_merge_writes() {
    let mut repo = RepoBuilder::new();
    let nodes: Vec<String> = (1..=6).map(|i| format!("node{i}")).collect();
    repo.file("clusters/prod-bj/hosts.yml", &hosts(&nodes))
        .file("clusters/prod-bj/vars.yml", "cluster_name: prod-bj\n")
        .op("prod-bj", "install", "cluster.yml");
    repo.commit("prod-bj");
    let mut service = Service::start(repo).await;
    service.reconcile().await;
    let seven: Vec<String> = (1..=7).map(|i| format!("node{i}")).collect();
    service
        .repo
        .file("clusters/prod-bj/hosts.yml", &hosts(&seven))
        .op("prod-bj", "add-node7", "scale.yml");
    service.repo.commit("add node7");
    service.reconcile().await;
    let install = service
        .operations()
        .await
        .into_iter()
        .find(|n| n.contains("install"))
        .unwrap();
    service.set_phase(&install, "Succeeded").await;

    let eight: Vec<String> = (1..=8).map(|i| format!("node{i}")).collect();
    service
        .repo
        .file("clusters/prod-bj/hosts.yml", &hosts(&eight))
        .op("prod-bj", "add-node8", "scale.yml");
    service.repo.commit("add node8");
    let plan = service.plan().await;
    let from = service.last.unwrap().to_string();
    let live_cli = kok_plan(&service.repo, &from, Some(service.server.kubeconfig_path()));
    assert_eq!(
        live_cli["clusters"][0]["created"].as_array().unwrap().len(),
        plan.clusters[0].created.len()
    );
    assert_eq!(
        live_cli["clusters"][0]["updated"].as_array().unwrap().len(),
        plan.clusters[0].updated.len()
    );
    let rendered = kok_plan(&service.repo, &from, None);
    let bj = &rendered["clusters"][0];
    assert_eq!(
        bj["deleted"],
        json!([]),
        "from the render of --from too: {rendered:#}"
    );
    assert!(
        bj["updated"]
            .as_array()
            .unwrap()
            .iter()
            .all(|o| o["kind"] != "ClusterOperation"),
        "{rendered:#}"
    );
    assert_eq!(bj["operations"][0]["id"], "add-node8");
    let bj = &plan.clusters[0];
    assert!(
        bj.deleted.is_empty(),
        "the queued add-node7 still pins the old hosts: {plan:#?}"
    );
    assert!(
        bj.updated.iter().all(|o| o.kind != "ClusterOperation"),
        "no operation is rewritten: {plan:#?}"
    );
    let ops: Vec<&str> = bj.operations.iter().map(|o| o.id.as_str()).collect();
    assert_eq!(ops, ["add-node8"]);
    let wrote = service.reconcile().await;
    assert_eq!(planned(&plan), wrote, "{plan:#?}");
}

/// A small seeded generator (xorshift64*), so a failing case can be replayed from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// One cluster directory as the generator keeps it.
#[derive(Clone, Debug, Default)]
struct Dir {
    nodes: Vec<String>,
    ops: Vec<(String, String)>,
    broken: bool,
}

/// Writes `dirs` into the work tree (removing the directories that are gone) and commits.
fn write(repo: &mut RepoBuilder, dirs: &BTreeMap<String, Dir>, gone: &[String], message: &str) {
    for name in gone {
        if repo.path().join("clusters").join(name).exists() {
            repo.remove(&format!("clusters/{name}"));
        }
    }
    for (name, dir) in dirs {
        let hosts_yml = if dir.broken {
            "all: [not, a, mapping]\n".to_string()
        } else {
            hosts(&dir.nodes)
        };
        repo.file(&format!("clusters/{name}/hosts.yml"), &hosts_yml);
        repo.file(
            &format!("clusters/{name}/vars.yml"),
            &format!("cluster_name: {name}\n"),
        );
        let ops_path = format!("clusters/{name}/operations.yml");
        if dir.ops.is_empty() {
            if repo.path().join(&ops_path).exists() {
                repo.remove(&ops_path);
            }
        } else {
            let text: String = dir
                .ops
                .iter()
                .map(|(id, args)| format!("- id: {id}\n  action: scale.yml\n  extraArgs: [\"{args}\"]\n"))
                .collect();
            repo.file(&ops_path, &text);
        }
    }
    repo.commit(message);
}

/// One random change to the repository.
fn mutate(rng: &mut Rng, dirs: &mut BTreeMap<String, Dir>, gone: &mut Vec<String>, counter: &mut u32) {
    *counter += 1;
    let names = ["a", "b", "c"];
    let name = names[rng.below(names.len())].to_string();
    let Some(dir) = dirs.get_mut(&name) else {
        gone.retain(|g| *g != name);
        dirs.insert(
            name,
            Dir {
                nodes: vec!["node1".into()],
                ops: vec![("install".into(), "--limit=node1".into())],
                broken: false,
            },
        );
        return;
    };
    match rng.below(8) {
        0 => {
            dirs.remove(&name);
            gone.push(name);
        }
        1 => dir.nodes.push(format!("node{}", *counter + 1)),
        2 if dir.nodes.len() > 1 => {
            let i = rng.below(dir.nodes.len());
            dir.nodes.remove(i);
        }
        3 => dir
            .ops
            .push((format!("op{counter}"), format!("--limit={}", dir.nodes[0]))),
        4 if !dir.ops.is_empty() => {
            let i = rng.below(dir.ops.len());
            dir.ops.remove(i);
        }
        5 if !dir.ops.is_empty() => {
            let i = rng.below(dir.ops.len());
            dir.ops[i].1 = format!("--limit=node{counter}");
        }
        6 => dir.broken = !dir.broken,
        _ => dir.nodes.push(format!("node{}", *counter + 1)),
    }
}

#[tokio::test]
async fn on_random_commit_sequences_plan_lists_exactly_the_writes_the_pass_makes() {
    let cases: u64 = std::env::var("KOK_PLAN_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let mut seen: BTreeMap<(String, &'static str), usize> = BTreeMap::new();
    let mut invalid = 0;
    for case in 0..cases {
        let seed = 0x9e37_79b9_7f4a_7c15u64 ^ (case + 1).wrapping_mul(0x1000_0000_01b3);
        let mut rng = Rng(seed);
        let mut dirs: BTreeMap<String, Dir> = BTreeMap::new();
        let mut gone = Vec::new();
        let mut counter = 0;
        let mut repo = RepoBuilder::new();
        mutate(&mut rng, &mut dirs, &mut gone, &mut counter);
        write(&mut repo, &dirs, &gone, "start");
        let mut service = Service::start(repo).await;
        service.reconcile().await;
        for step in 0..5 {
            // The controller's side: some operations start, finish or wait in the queue.
            for name in service.operations().await {
                match rng.below(4) {
                    0 => service.set_phase(&name, "Queued").await,
                    1 => service.set_phase(&name, "Running").await,
                    2 => service.set_phase(&name, "Succeeded").await,
                    _ => {}
                }
            }
            for _ in 0..=rng.below(3) {
                mutate(&mut rng, &mut dirs, &mut gone, &mut counter);
            }
            write(&mut service.repo, &dirs, &gone, &format!("step {step}"));
            let plan = service.plan().await;
            let wrote = service.reconcile().await;
            assert_eq!(
                planned(&plan),
                wrote,
                "case {case} (seed {seed:#x}), step {step}: the plan differs from the pass\n{plan:#?}\n{dirs:#?}"
            );
            for (key, n) in wrote {
                *seen.entry(key).or_default() += n;
            }
            invalid += plan.invalid.len();
        }
    }
    // The sequences reach every kind of write apply makes (it never deletes an operation): the
    // comparison above is not between empty plans.
    for (key, n) in seen
        .iter()
        .filter(|(k, _)| **k != ("ClusterOperation".to_string(), "deletes"))
    {
        assert!(*n > 0, "no {key:?} in {cases} cases: {seen:?}");
    }
    assert!(invalid > 0, "no invalid cluster in {cases} cases");
}

#[tokio::test]
async fn an_entry_removed_is_canceled_by_a_pass_deciding_from_the_caches() {
    let mut repo = RepoBuilder::new();
    repo.cluster("a")
        .op("a", "install", "cluster.yml")
        .op("a", "upgrade", "upgrade-cluster.yml");
    repo.commit("two operations");
    let mut service = Service::start(repo).await;
    service.reconcile().await;

    // The cache keeps operations without most labels and annotations; what the pass needs of them (the
    // current label, the content hash) must still decide: the removed entry is canceled and loses its
    // current label, and the kept one is not written at all.
    service.repo.file(
        "clusters/a/operations.yml",
        "- id: install\n  action: cluster.yml\n",
    );
    service.repo.commit("drop upgrade");
    let wrote = service.pass(false).await;
    let ops: Api<ClusterOperation> = Api::namespaced(service.server.client(), NS);
    let mut seen = BTreeMap::new();
    for op in ops.list(&Default::default()).await.unwrap() {
        let phase = op
            .status
            .as_ref()
            .map(|s| s.phase.to_string())
            .unwrap_or_default();
        let current = op.labels().get(kok::api::LABEL_CURRENT).cloned();
        seen.insert(op.spec.id.clone(), (phase, current));
    }
    assert_eq!(
        seen["upgrade"],
        ("Canceled".to_string(), None),
        "{seen:?} after {wrote:?}"
    );
    assert_eq!(seen["install"].1.as_deref(), Some("true"), "{seen:?}");
    assert_eq!(
        wrote
            .get(&("ClusterOperation".to_string(), "writes"))
            .copied()
            .unwrap_or(0),
        2,
        "the cancel and the label of the removed entry, nothing for the kept one: {wrote:?}"
    );
}

#[tokio::test]
async fn a_pass_over_more_clusters_than_one_parse_part_applies_each_once_and_attributes_each_operation() {
    // A pass parses its clusters a few hundred at a time; 300 clusters make two.
    let names: Vec<String> = (0..300).map(|i| format!("c{i:04}")).collect();
    let mut repo = RepoBuilder::new();
    for name in &names {
        repo.cluster(name).op(name, "install", "cluster.yml");
    }
    repo.commit("300 clusters");
    let mut service = Service::start(repo).await;
    let created = service.reconcile().await;
    assert_eq!(created[&("Cluster".to_string(), "writes")], 300, "{created:?}");
    assert_eq!(
        service.outcome.applied, names,
        "each cluster applied once, in order"
    );
    assert!(
        service.outcome.invalid.is_empty(),
        "{:?}",
        service.outcome.invalid
    );

    // Two commits in one pass: operations new in each, one in each part, and a broken
    // cluster in each part.
    service.repo.op("c0010", "first", "scale.yml");
    let first = service.repo.commit("an operation early in the fleet");
    service
        .repo
        .op("c0290", "second", "scale.yml")
        .file("clusters/c0100/hosts.yml", "all:\n  hosts: [\n")
        .file("clusters/c0280/hosts.yml", "all:\n  hosts: [\n");
    let second = service
        .repo
        .commit("an operation late in the fleet, two clusters broken");
    let wrote = service.reconcile().await;
    assert_eq!(service.outcome.applied, ["c0010", "c0290"], "{wrote:?}");
    assert_eq!(service.outcome.invalid, ["c0100", "c0280"]);
    // Refused atomically: a broken cluster keeps what its last good commit materialized.
    let clusters: Api<Cluster> = Api::namespaced(service.server.client(), NS);
    let before = clusters.get("c0000").await.unwrap().spec.source.revision;
    for broken in ["c0100", "c0280"] {
        assert_eq!(
            clusters.get(broken).await.unwrap().spec.source.revision,
            before,
            "{broken}"
        );
    }
    let files: Vec<&str> = service
        .outcome
        .diagnostics
        .iter()
        .map(|d| d.path.as_str())
        .collect();
    assert_eq!(
        files,
        ["clusters/c0100/hosts.yml", "clusters/c0280/hosts.yml"],
        "{:?}",
        service.outcome.diagnostics
    );
    let ops: Api<ClusterOperation> = Api::namespaced(service.server.client(), NS);
    let listed = ops.list(&Default::default()).await.unwrap().items;
    assert_eq!(listed.len(), 302);
    for (cluster, id, commit) in [("c0010", "first", &first), ("c0290", "second", &second)] {
        let op = listed
            .iter()
            .find(|o| o.spec.cluster == cluster && o.spec.id == id)
            .unwrap_or_else(|| panic!("operation {id} of {cluster}"));
        assert_eq!(
            &op.spec.source.commit, commit,
            "{cluster}/{id} belongs to the commit that added it"
        );
    }

    // A broken kok.yml is read by every part; it is said once, and no cluster is applied.
    service
        .repo
        .file("kok.yml", "historyLimit: 3\nimagePullPolicy: Always\n");
    service.repo.commit("a key kok.yml does not have");
    service.reconcile().await;
    assert!(
        service.outcome.applied.is_empty(),
        "{:?}",
        service.outcome.applied
    );
    assert_eq!(service.outcome.invalid, names, "every cluster refused, each once");
    let said: Vec<String> = service
        .outcome
        .diagnostics
        .iter()
        .map(|d| format!("{}:{}", d.path, d.line))
        .collect();
    assert_eq!(
        said.iter().filter(|d| d.starts_with("kok.yml")).count(),
        1,
        "{said:?}"
    );
}

/// The rollout file of [`a_rollout_plans_exactly_what_the_pass_writes_through_promotion_rerun_join_and_removal`].
fn rollout_yml(stop_after: bool, rerun: u64) -> String {
    let mut text = "operation: {id: up, action: up.yml}\nclusters: {selector: {env: prod}}\n\
                    waves:\n  - {name: canary, clusters: [a]}\n  - {name: rest, maxParallel: 1}\n"
        .to_string();
    if stop_after {
        text.push_str("stopAfter: canary\n");
    }
    text.push_str(&format!("rerun: {rerun}\n"));
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_plans_exactly_what_the_pass_writes_through_promotion_rerun_join_and_removal() {
    let mut repo = RepoBuilder::new();
    for name in ["a", "b", "c"] {
        repo.cluster(name)
            .file(&format!("clusters/{name}/cluster.yml"), "labels: {env: prod}\n");
    }
    repo.commit("three clusters");
    let mut service = Service::start(repo).await;
    service.reconcile().await;
    // Each step: the plan against the live objects lists exactly the pass's writes, the rollout's
    // object included; returns the plan.
    async fn step(service: &mut Service, message: &str) -> Plan {
        service.repo.commit(message);
        let plan = service.plan().await;
        let wrote = service.reconcile().await;
        assert_eq!(planned(&plan), wrote, "{message}: {plan:#?}");
        let objects = plan.rollouts.iter().filter(|r| r.object.is_some()).count();
        assert_eq!(
            objects,
            service.server.requests().writes_to("fleetrollouts"),
            "{message}: {plan:#?}"
        );
        plan
    }
    let runs = |plan: &Plan| -> Vec<(String, Option<String>)> {
        plan.clusters
            .iter()
            .flat_map(|c| c.operations.iter().map(|o| (c.name.clone(), o.wave.clone())))
            .collect()
    };

    service.repo.file("rollouts/up.yml", &rollout_yml(true, 0));
    let plan = step(&mut service, "up: canary").await;
    let wave = |w: &str| Some(w.to_string());
    assert_eq!(
        runs(&plan),
        [
            ("a".to_string(), wave("canary")),
            ("b".to_string(), wave("rest")),
            ("c".to_string(), wave("rest"))
        ]
    );
    let canary = service
        .operations()
        .await
        .into_iter()
        .find(|n| n.starts_with("a-up-"))
        .expect("a's run");
    service.set_phase(&canary, "Failed").await;

    service.repo.file("rollouts/up.yml", &rollout_yml(false, 0));
    let plan = step(&mut service, "up: promote").await;
    assert!(
        runs(&plan).is_empty(),
        "a promotion runs nothing again: {plan:#?}"
    );
    assert_eq!(plan.rollouts[0].object.as_deref(), Some("applied"));

    service.repo.file("rollouts/up.yml", &rollout_yml(false, 1));
    let plan = step(&mut service, "up: rerun").await;
    assert_eq!(
        plan.rollouts[0].rerun.as_ref().and_then(|r| r.clusters.clone()),
        Some(vec!["a".to_string()]),
        "the failed canary, read from the meta-cluster"
    );
    assert_eq!(runs(&plan), [("a".to_string(), wave("canary"))]);

    service
        .repo
        .cluster("d")
        .file("clusters/d/cluster.yml", "labels: {env: prod}\n");
    let plan = step(&mut service, "d joins").await;
    assert_eq!(runs(&plan), [("d".to_string(), wave("rest"))]);
    assert_eq!(plan.rollouts[0].waves[1].joined, ["d"]);

    service.repo.remove("rollouts/up.yml");
    let plan = step(&mut service, "drop up").await;
    assert_eq!(plan.rollouts[0].object.as_deref(), Some("deleted"));
    assert!(
        plan.clusters
            .iter()
            .all(|c| c.updated.iter().any(|o| o.what.starts_with("canceled"))),
        "every run not yet started is canceled: {plan:#?}"
    );
}
