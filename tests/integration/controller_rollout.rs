//! Rollouts against testkit, with the controller running in-process: a later wave waits for the earlier
//! one with a status that says why, `maxParallel` bounds a wave, a bake's end starts the next wave by a
//! timer, a failure past `maxFailures` halts the rollout and a `rerun` bump runs again only the failed
//! cluster, editing the operation is a new run everywhere while editing waves runs nothing again, and a
//! cluster leaving the rollout has its run canceled before it starts; the FleetRollout's status follows.

use crate::controller_support;
use crate::forge;

use std::time::Duration;

use jiff::SignedDuration;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};

use controller_support::*;
use kok::api::{FleetRollout, Phase, RolloutPhase, LABEL_ROLLOUT, LABEL_WAVE};
use kok::controller::job::job_name;
use kok::layout::rollouts::{MaxParallel, Rollout};
use kok::materialize::apply::apply_cluster;
use kok::materialize::DesiredCluster;

const HOSTS: &str = "all:\n  hosts:\n    node1: {}\n";

/// The rollout `up` of `up.yml`: canary [a], then rest [b, c] one at a time.
fn up() -> Rollout {
    Rollout::of_waves(
        "up",
        "up.yml",
        &[
            ("canary", &["a"], None),
            ("rest", &["b", "c"], Some(MaxParallel::Count(1))),
        ],
    )
}

/// The rollout `up` of `up.yml`: canary [a], then rest [`rest`], no limits.
fn canary_then(rest: &[&str]) -> Rollout {
    Rollout::of_waves("up", "up.yml", &[("canary", &["a"], None), ("rest", rest, None)])
}

/// Waits until the canary's run `a` runs, and lets its Job succeed.
async fn run_canary(server: &testkit::ApiServer, a: &str) {
    wait_phase(&server.client(), a, Phase::Running).await;
    server.complete_job(NS, &job_name(a)).await.unwrap();
}

fn wave_of(r: &Rollout, cluster: &str) -> String {
    let w = r.waves.iter().find(|w| w.clusters.iter().any(|c| c == cluster));
    w.map(|w| w.name.clone()).unwrap_or_default()
}

/// Clusters `a`, `b` and `c` rendered at commit `n` in rollout `r` (a cluster no wave takes has no run).
fn fleet(r: &Rollout, n: u32) -> Vec<DesiredCluster> {
    ["a", "b", "c"]
        .iter()
        .map(|c| {
            let wave = wave_of(r, c);
            let of: Vec<(&Rollout, &str)> = if wave.is_empty() {
                vec![]
            } else {
                vec![(r, wave.as_str())]
            };
            render_in_rollouts(&cluster_dir(c, HOSTS, vec![], None), n, &of)
        })
        .collect()
}

/// The names of the runs of `a`, `b` and `c` (empty for a cluster no wave takes).
fn runs_of(d: &[DesiredCluster]) -> [String; 3] {
    let name = |i: usize| {
        let run = d[i].rollouts.first();
        run.and_then(|r| r.operation.metadata.name.clone())
            .unwrap_or_default()
    };
    [name(0), name(1), name(2)]
}

/// A testkit server with rollout `r` and its runs written at commit 1, the names of the runs of `a`,
/// `b` and `c`, and the controller started with `cfg`.
async fn started(
    r: &Rollout,
    cfg: kok::controller::ControllerConfig,
) -> (testkit::ApiServer, kube::Client, [String; 3], Running) {
    let server = server().await;
    let client = server.client();
    let d = apply(&client, r, 1).await;
    let ctl = start(&client, cfg);
    (server, client, runs_of(&d), ctl)
}

/// Writes the rollout and the clusters' runs of it, as a pass of commit `n` does.
async fn apply(client: &kube::Client, r: &Rollout, n: u32) -> Vec<DesiredCluster> {
    apply_rollouts(client, n, &[r]).await;
    let desired = fleet(r, n);
    for d in &desired {
        apply_cluster(client, NS, d).await.unwrap();
    }
    desired
}

/// The run of cluster `i` (0: a, 1: b, 2: c) that is current in the meta-cluster.
async fn current_run(client: &kube::Client, cluster: &str) -> Option<kok::api::ClusterOperation> {
    let api: Api<kok::api::ClusterOperation> = Api::namespaced(client.clone(), NS);
    let lp = kube::api::ListParams::default().labels(&format!(
        "{LABEL_ROLLOUT}=up,kok.dev/cluster={cluster},kok.dev/current=true"
    ));
    api.list(&lp).await.ok()?.items.into_iter().next()
}

/// Waits until one of runs `x` and `y` of `wave` runs; returns it and the other.
async fn one_starts(client: &kube::Client, wave: &str, x: &str, y: &str) -> (String, String) {
    wait_for(&format!("one run of {wave} to start"), || async {
        match (phase(client, x).await, phase(client, y).await) {
            (Some(Phase::Running), _) => Some((x.to_string(), y.to_string())),
            (_, Some(Phase::Running)) => Some((y.to_string(), x.to_string())),
            _ => None,
        }
    })
    .await
}

async fn message(client: &kube::Client, name: &str) -> String {
    op(client, name)
        .await
        .and_then(|o| o.status?.message)
        .unwrap_or_default()
}

async fn wait_message(client: &kube::Client, name: &str, want: &str) {
    wait_for(&format!("{name} to say {want:?}"), || async {
        (message(client, name).await == want).then_some(())
    })
    .await
}

async fn wait_status(
    client: &kube::Client,
    what: &str,
    check: impl Fn(&FleetRollout) -> bool,
) -> FleetRollout {
    wait_for(what, || async {
        fleet_rollout(client, "up").await.filter(|r| check(r))
    })
    .await
}

fn summary(r: &FleetRollout) -> Option<&str> {
    r.status.as_ref()?.summary.as_deref()
}

fn phase_of(r: &FleetRollout) -> Option<RolloutPhase> {
    r.status.as_ref().map(|s| s.phase)
}

/// Writes the pod a failed Job leaves, with ansible's summary as its termination message, and fails
/// the Job.
async fn fail(server: &testkit::ApiServer, op: &str) {
    let client = server.client();
    let job = job_name(op);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{job}-pod"), "labels": {"batch.kubernetes.io/job-name": job}},
        "spec": {"containers": [{"name": "ansible", "image": "x"}]},
    }))
    .unwrap();
    pod.metadata.namespace = Some(NS.into());
    let _ = pods.create(&PostParams::default(), &pod).await;
    server
        .fail_job(
            NS,
            &job,
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_later_wave_waits_for_the_earlier_one_with_a_status_that_says_why_and_max_parallel_bounds_it() {
    let (server, client, [a, b, c], ctl) = started(&up(), config(4)).await;
    let created = op(&client, &b).await.unwrap();
    let labels = created.metadata.labels.unwrap();
    assert_eq!(
        (labels[LABEL_ROLLOUT].as_str(), labels[LABEL_WAVE].as_str()),
        ("up", "rest")
    );

    wait_phase(&client, &a, Phase::Running).await;
    wait_message(
        &client,
        &b,
        "waiting for wave rest of rollout up (canary: 0/1 succeeded)",
    )
    .await;
    wait_message(
        &client,
        &c,
        "waiting for wave rest of rollout up (canary: 0/1 succeeded)",
    )
    .await;
    assert_eq!(jobs(&client).await, vec![job_name(&a)], "only the canary runs");
    let status = wait_status(&client, "the rollout to be progressing in its canary", |r| {
        summary(r) == Some("wave 1/2 canary: 0/1 succeeded, 0 failed")
    })
    .await;
    assert_eq!(phase_of(&status), Some(RolloutPhase::Progressing));
    assert_eq!(status.status.as_ref().unwrap().progress.as_deref(), Some("0/3"));

    server.complete_job(NS, &job_name(&a)).await.unwrap();
    wait_phase(&client, &a, Phase::Succeeded).await;
    // maxParallel 1: one of b and c starts, the other waits for it.
    let (first, second) = one_starts(&client, "the rest wave", &b, &c).await;
    wait_message(
        &client,
        &second,
        "waiting for wave rest of rollout up (maxParallel: 1 of 1 running)",
    )
    .await;
    assert_eq!(phase(&client, &second).await, Some(Phase::Queued));
    server.complete_job(NS, &job_name(&first)).await.unwrap();
    wait_phase(&client, &second, Phase::Running).await;
    server.complete_job(NS, &job_name(&second)).await.unwrap();
    let done = wait_status(&client, "the rollout to complete", |r| {
        phase_of(r) == Some(RolloutPhase::Completed)
    })
    .await;
    assert_eq!(summary(&done), Some("wave 2/2 rest: 2/2 succeeded, 0 failed"));
    let waves = &done.status.unwrap().waves;
    assert_eq!(
        (waves[0].succeeded, waves[1].succeeded, waves[1].pending),
        (1, 2, 0)
    );
    ctl.stop().await;
}

#[tokio::test]
async fn the_next_wave_waits_for_the_bake_and_a_timer_starts_it_when_the_bake_ends() {
    let server = server().await;
    let client = server.client();
    let mut r = canary_then(&["b"]);
    r.bake = SignedDuration::from_secs(3);
    let d = apply(&client, &r, 1).await;
    let [a, b, _] = runs_of(&d);
    let mut cfg = config(4);
    cfg.queue_resync = Duration::from_secs(3600);
    let ctl = start(&client, cfg);
    run_canary(&server, &a).await;
    wait_phase(&client, &a, Phase::Succeeded).await;
    let said = wait_for("b to wait for the bake", || async {
        let said = message(&client, &b).await;
        said.contains("baking until").then_some(said)
    })
    .await;
    assert!(
        said.starts_with("waiting for wave rest of rollout up (canary: 1/1 succeeded; baking until "),
        "{said}"
    );
    let baking = wait_status(&client, "the rollout to bake", |r| {
        phase_of(r) == Some(RolloutPhase::Baking)
    })
    .await;
    let status = baking.status.unwrap();
    assert!(
        status.next_wave_time.is_some(),
        "the status says when the next wave opens"
    );
    assert!(status.message.unwrap().contains("baking until"));
    // Nothing changes in the meta-cluster meanwhile: only the timer set for the bake's end can start it.
    wait_phase(&client, &b, Phase::Running).await;
    ctl.stop().await;
}

#[tokio::test]
async fn a_failure_halts_the_rollout_and_a_rerun_bump_runs_again_only_the_failed_cluster() {
    let server = server().await;
    let client = server.client();
    let mut r = Rollout::of_waves(
        "up",
        "up.yml",
        &[("first", &["a", "b"], None), ("rest", &["c"], None)],
    );
    let d = apply(&client, &r, 1).await;
    let [a, b, c] = runs_of(&d);
    let ctl = start(&client, config(4));
    wait_phase(&client, &a, Phase::Running).await;
    wait_phase(&client, &b, Phase::Running).await;
    server.complete_job(NS, &job_name(&a)).await.unwrap();
    fail(&server, &b).await;
    wait_phase(&client, &b, Phase::Failed).await;
    let halted = wait_status(&client, "the rollout to halt", |r| {
        phase_of(r) == Some(RolloutPhase::Halted)
    })
    .await;
    let why = halted.status.unwrap().message.unwrap();
    assert!(why.starts_with("halted at wave first: b failed"), "{why}");
    wait_for("c to say the rollout halted", || async {
        message(&client, &c)
            .await
            .starts_with("rollout up halted at wave first: b failed")
            .then_some(())
    })
    .await;
    assert_eq!(phase(&client, &c).await, Some(Phase::Queued));

    r.rerun = 1;
    let again = apply(&client, &r, 2).await;
    let [_, b2, _] = runs_of(&again);
    assert_ne!(b2, b, "the failed cluster runs again");
    let current = |cluster: &'static str| {
        let client = client.clone();
        async move { current_run(&client, cluster).await.and_then(|o| o.metadata.name) }
    };
    assert_eq!(
        current("a").await,
        Some(a.clone()),
        "a succeeded: it never runs again"
    );
    assert_eq!(
        current("c").await,
        Some(c.clone()),
        "c's run had not failed: it is kept"
    );
    assert_eq!(current("b").await, Some(b2.clone()));
    wait_phase(&client, &b2, Phase::Running).await;
    server.complete_job(NS, &job_name(&b2)).await.unwrap();
    wait_phase(&client, &c, Phase::Running).await;
    server.complete_job(NS, &job_name(&c)).await.unwrap();
    wait_status(&client, "the rollout to complete", |r| {
        phase_of(r) == Some(RolloutPhase::Completed)
    })
    .await;
    assert_eq!(
        phase(&client, &b).await,
        Some(Phase::Failed),
        "history is left alone"
    );
    ctl.stop().await;
}

#[tokio::test]
async fn editing_the_operation_is_a_new_run_everywhere_and_editing_waves_or_limits_runs_nothing_again() {
    let server = server().await;
    let client = server.client();
    let r = up();
    let first: Vec<String> = apply(&client, &r, 1)
        .await
        .iter()
        .map(|d| run_name(d, "up"))
        .collect();

    let mut reshaped = Rollout::of_waves(
        "up",
        "up.yml",
        &[
            ("canary", &["a", "b"], Some(MaxParallel::Percent(50))),
            ("rest", &["c"], None),
        ],
    );
    reshaped.bake = SignedDuration::from_mins(30);
    (reshaped.max_failures, reshaped.stop_after) = (2, Some(0));
    let same: Vec<String> = apply(&client, &reshaped, 2)
        .await
        .iter()
        .map(|d| run_name(d, "up"))
        .collect();
    assert_eq!(same, first, "the same runs");
    let moved = op(&client, &first[1]).await.unwrap();
    assert_eq!(
        moved.metadata.labels.unwrap()[LABEL_WAVE],
        "canary",
        "b's run follows it to its new wave"
    );
    assert_eq!(
        phase(&client, &first[1]).await,
        Some(Phase::Pending),
        "and is not canceled"
    );

    let mut edited = reshaped.clone();
    edited.operation.entry["extraArgs"] = serde_json::json!(["-e", "kube_version=v1.31.5"]);
    edited.operation.extra_args = vec!["-e".into(), "kube_version=v1.31.5".into()];
    let new: Vec<String> = apply(&client, &edited, 3)
        .await
        .iter()
        .map(|d| run_name(d, "up"))
        .collect();
    for (old, new) in first.iter().zip(&new) {
        assert_ne!(old, new, "a new run for every cluster");
        assert!(op(&client, new).await.is_some());
        let replaced = op(&client, old).await.unwrap();
        assert_eq!(
            replaced.status.map(|s| s.phase),
            Some(Phase::Canceled),
            "{old}: not started, canceled"
        );
    }
}

#[tokio::test]
async fn a_cluster_leaving_the_rollout_has_its_run_canceled_and_removing_the_file_leaves_history_alone() {
    let r = Rollout::of_waves(
        "up",
        "up.yml",
        &[
            ("canary", &["a"], None),
            ("rest", &["b"], None),
            ("last", &["c"], None),
        ],
    );
    let (server, client, [a, b, c], ctl) = started(&r, config(4)).await;
    run_canary(&server, &a).await;
    wait_phase(&client, &a, Phase::Succeeded).await;
    wait_phase(&client, &b, Phase::Running).await;

    // c leaves the selection: its run, not started, is canceled; b's run goes on.
    apply(&client, &canary_then(&["b"]), 2).await;
    let canceled = wait_phase(&client, &c, Phase::Canceled).await;
    assert_eq!(
        canceled.status.unwrap().message.as_deref(),
        Some("no longer a run of rollout up")
    );
    assert_eq!(phase(&client, &b).await, Some(Phase::Running));

    // The file is removed: the object goes, the runs stay as the record.
    apply_rollouts(&client, 3, &[]).await;
    for dir in ["a", "b", "c"] {
        apply_cluster(
            &client,
            NS,
            &render(&cluster_dir(dir, HOSTS, vec![], None), 3, &[]),
        )
        .await
        .unwrap();
    }
    assert!(fleet_rollout(&client, "up").await.is_none());
    assert_eq!(phase(&client, &a).await, Some(Phase::Succeeded));
    assert_eq!(
        phase(&client, &b).await,
        Some(Phase::Running),
        "a running run finishes"
    );
    server.complete_job(NS, &job_name(&b)).await.unwrap();
    wait_phase(&client, &b, Phase::Succeeded).await;
    ctl.stop().await;
}

#[tokio::test]
async fn a_cluster_that_joins_later_joins_its_wave() {
    let r = canary_then(&["b"]);
    let (server, client, [a, b, _], ctl) = started(&r, config(4)).await;
    run_canary(&server, &a).await;
    wait_phase(&client, &b, Phase::Running).await;
    let joined = canary_then(&["b", "c"]);
    let d = apply(&client, &joined, 2).await;
    let c = run_name(&d[2], "up");
    assert_eq!(run_name(&d[1], "up"), b);
    wait_phase(&client, &c, Phase::Running).await;
    ctl.stop().await;
}

#[tokio::test]
async fn opening_a_wave_is_decided_from_the_caches_without_listing_or_reading_operations_or_rollouts() {
    let r = canary_then(&["b"]);
    let (server, client, [a, b, _], ctl) = started(&r, config(4)).await;
    wait_phase(&client, &a, Phase::Running).await;
    wait_message(
        &client,
        &b,
        "waiting for wave rest of rollout up (canary: 0/1 succeeded)",
    )
    .await;
    let log = server.requests();
    log.reset();
    server.complete_job(NS, &job_name(&a)).await.unwrap();
    // Waits by listing Jobs only, so the log holds the controller's requests alone.
    wait_job(&client, &job_name(&b)).await;
    for resource in ["clusteroperations", "fleetrollouts"] {
        for verb in ["list", "get"] {
            assert_eq!(
                log.count(verb, resource),
                0,
                "{verb} {resource}: {:?}",
                log.snapshot()
            );
        }
    }
    ctl.stop().await;
}

#[tokio::test]
async fn the_rollouts_commit_gets_one_rollout_context_kept_current_one_status_per_update() {
    use kok::report::{Backoff, Forge, ForgeSink, Reporter, Sink, Sinks, Token};
    let server = server().await;
    let client = server.client();
    let github = forge::ForgeServer::start().await;
    let sink = ForgeSink::new(Forge::GitHub, Some(&github.url()), "acme/infra", &Token::new("t")).unwrap();
    let metrics = kok::metrics::Metrics::new();
    let sinks = Sinks::new(
        vec![std::sync::Arc::new(sink) as std::sync::Arc<dyn Sink>],
        metrics.clone(),
    );
    let reporter = Reporter::new(client.clone(), NS, sinks, Backoff::default());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let reporting = tokio::spawn(reporter.run(async move {
        let _ = stopped.await;
    }));

    let r = canary_then(&["b"]);
    let d = apply(&client, &r, 1).await;
    let [a, b, _] = runs_of(&d);
    let ctl = start(&client, config(4));
    run_canary(&server, &a).await;
    wait_phase(&client, &b, Phase::Running).await;
    server.complete_job(NS, &job_name(&b)).await.unwrap();
    let rollout_statuses = || {
        github
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST")
            .filter_map(|r| serde_json::from_slice::<serde_json::Value>(&r.body).ok())
            .filter(|b| b["context"] == "kok/rollout/up")
            .map(|b| {
                let state = b["state"].as_str().unwrap_or_default().to_string();
                (state, b["description"].as_str().unwrap_or_default().to_string())
            })
            .collect::<Vec<_>>()
    };
    let sent = wait_for("the rollout's final status", || async {
        let sent = rollout_statuses();
        sent.last()
            .is_some_and(|(state, _)| state == "success")
            .then_some(sent)
    })
    .await;
    eprintln!("kok/rollout/up statuses sent: {sent:?}");
    let done = wait_for("the delivered status to be recorded", || async {
        let status = fleet_rollout(&client, "up").await?.status?;
        (status.reported.is_some() && status.reported == status.desired_status).then_some(status)
    })
    .await;
    assert_eq!(
        done.commit.as_deref(),
        Some(sha(1).as_str()),
        "on the rollout's commit"
    );
    assert_eq!(sent.last().unwrap().1, "wave 2/2 rest: 1/1 succeeded, 0 failed");
    assert!(
        sent.windows(2).all(|w| w[0] != w[1]),
        "no status sent twice: {sent:?}"
    );
    assert!(
        github.requests().iter().all(|r| !r.path.contains(&sha(2))),
        "nothing on another commit"
    );
    ctl.stop().await;
    let _ = stop.send(());
    let _ = reporting.await;
}

#[tokio::test]
async fn a_commit_that_moves_stop_after_promotes_the_next_wave_at_once() {
    let server = server().await;
    let client = server.client();
    let mut r = canary_then(&["b"]);
    r.stop_after = Some(0);
    let d = apply(&client, &r, 1).await;
    let [a, b, _] = runs_of(&d);
    let mut cfg = config(4);
    cfg.queue_resync = Duration::from_secs(3600);
    let ctl = start(&client, cfg);
    run_canary(&server, &a).await;
    wait_message(
        &client,
        &b,
        "waiting for wave rest of rollout up (canary: 1/1 succeeded; stopAfter: canary, waiting for a commit that promotes it)",
    )
    .await;
    let waiting = wait_status(&client, "the rollout to wait for its promotion", |r| {
        phase_of(r) == Some(RolloutPhase::WaitingForPromotion)
    })
    .await;
    assert_eq!(
        summary(&waiting),
        Some("wave 1/2 canary: 1/1 succeeded, 0 failed")
    );

    r.stop_after = None;
    assert_eq!(run_name(&fleet(&r, 2)[1], "up"), b, "the same run");
    apply_rollouts(&client, 2, &[&r]).await;
    // Only the rollout's object changed: its watch wakes b (the queue's own resync is an hour).
    wait_phase(&client, &b, Phase::Running).await;
    ctl.stop().await;
}

#[tokio::test]
async fn a_run_whose_wave_is_closed_is_not_rewritten_by_the_ends_of_the_wave_before_it() {
    // canary [a, b], rest [c]; one Job slot: the canary's runs take it in turn, c waits for its wave.
    let r = Rollout::of_waves(
        "up",
        "up.yml",
        &[("canary", &["a", "b"], None), ("rest", &["c"], None)],
    );
    let server = server().await;
    let client = server.client();
    let [a, b, c] = runs_of(&apply(&client, &r, 1).await);
    let mut cfg = config(1);
    cfg.queue_resync = Duration::from_secs(3600);
    let ctl = start(&client, cfg);
    let (first, second) = one_starts(&client, "the canary", &a, &b).await;
    // A change of c while the only Job slot is taken: c looks again, and still says it waits for its
    // wave (not for the slot, which would make the end of every Job wake it).
    let ops: Api<kok::api::ClusterOperation> = Api::namespaced(client.clone(), NS);
    let touch = serde_json::json!({"metadata": {"annotations": {"touched": "yes"}}});
    ops.patch(
        &c,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&touch),
    )
    .await
    .unwrap();
    let waiting = "waiting for wave rest of rollout up (canary: 0/2 succeeded)";
    wait_message(&client, &c, waiting).await;
    let version = |o: Option<kok::api::ClusterOperation>| o.and_then(|o| o.metadata.resource_version);
    let before = version(op(&client, &c).await);

    server.complete_job(NS, &job_name(&first)).await.unwrap();
    wait_phase(&client, &first, Phase::Succeeded).await;
    wait_phase(&client, &second, Phase::Running).await;
    assert_eq!(
        version(op(&client, &c).await),
        before,
        "c was written while the canary's first run ended and its second started"
    );
    assert_eq!(message(&client, &c).await, waiting);

    server.complete_job(NS, &job_name(&second)).await.unwrap();
    wait_phase(&client, &c, Phase::Running).await;
    ctl.stop().await;
}
