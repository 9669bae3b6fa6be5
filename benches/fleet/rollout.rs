//! A rollout at fleet size (mode `rollout`): the fleet's clusters (five hosts each, no operations of
//! their own, labelled `ring: r1` to `r4` in four equal parts) are reconciled, then one commit adds
//! `rollouts/bench.yml`: four waves, one per ring, `maxParallel: 50`, no bake. The bench plays the
//! kubelet: it watches the Jobs and completes each one as soon as it appears (a playbook that succeeds
//! at once).
//!
//! It measures, per wave, how long after the last success of the wave before it the wave's first Job
//! appears (target ≤ 1 s), the most Jobs of a wave seen at once, the whole rollout's time, the
//! `kok/rollout/bench` statuses the fake GitHub received against the distinct updates they carry (target:
//! at most one status per update), kok's API requests while the rollout ran, and kok's peak RSS beside
//! the service mode's target for the size (issue 10's, plus 8 MiB).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use serde::Serialize;

use super::e2e::{Kok, KokOptions, Remote, NS};
use super::{
    fmt_opt, mark, peak_rss_mib, play_kubelet, secs, write_cluster, Config, Counts, Meta, FORGE_BUDGET, POLL,
};
use kok::api::{ClusterOperation, LABEL_CLUSTER};

/// The rollout's name (and its status context's tail).
const ROLLOUT: &str = "bench";
/// Waves of the rollout, one per ring.
const WAVES: usize = 4;
/// Each wave's `maxParallel`.
const MAX_PARALLEL: usize = 50;

/// What the rollout round measured.
#[derive(Debug, Default, Serialize)]
pub struct RolloutRun {
    pub clusters: usize,
    /// The fleet's commit reconciled, from kok's start.
    pub reconciled_secs: Option<f64>,
    /// From the rollout's push until its first Job.
    pub first_job_secs: Option<f64>,
    /// From the rollout's push until its last Job succeeded.
    pub rollout_secs: Option<f64>,
    /// Per wave: Jobs seen.
    pub wave_jobs: Vec<usize>,
    /// Per wave: the most of its Jobs not yet completed at once.
    pub wave_max_running: Vec<usize>,
    /// Per wave after the first: from the last success of the wave before (the bench completing its
    /// last Job) until the wave's first Job.
    pub wave_open_secs: Vec<Option<f64>>,
    /// The same from the moment the bench saw the last ClusterOperation of the wave before Succeeded
    /// (kok's own success: the Job's end read, the status written).
    pub wave_open_after_succeeded_secs: Vec<Option<f64>>,
    /// `kok/rollout/bench` statuses the fake GitHub received.
    pub rollout_statuses: usize,
    /// The distinct (state, description) updates among them, in order (consecutive repeats folded).
    pub rollout_updates: usize,
    /// Every `kok/rollout/bench` status received, in order: `state: description`.
    pub rollout_status_sequence: Vec<String>,
    /// Per-cluster statuses the fake GitHub received on the rollout's commit.
    pub cluster_statuses: usize,
    /// kok's API requests from the rollout's push until its last success, by verb and resource (the
    /// bench's own watch of Jobs included: one list and one watch).
    pub rollout_requests: Option<BTreeMap<String, usize>>,
    /// FleetRollout phase once the last Job succeeded (and kok settled).
    pub phase: Option<String>,
    pub peak_rss_mib: Option<f64>,
    pub problems: Vec<String>,
}

/// The ring (1 to [`WAVES`]) of cluster `i` of `clusters`.
fn ring(i: usize, clusters: usize) -> usize {
    i * WAVES / clusters.max(1) + 1
}

/// Writes the fleet (labelled by ring, no operations) and pushes it; returns the commit.
fn generate(remote: &Remote, clusters: usize) -> String {
    for i in 0..clusters {
        let labels = format!("labels: {{fleet: bench, ring: r{}}}\n", ring(i, clusters));
        write_cluster(remote, i, &labels);
    }
    remote.push(&format!("{clusters} clusters in {WAVES} rings"))
}

/// The rollout file: one wave per ring.
fn rollout_yml() -> String {
    let mut text = String::from(
        "operation: {id: bump, action: playbooks/facts.yml}\nclusters: {selector: {fleet: bench}}\nwaves:\n",
    );
    for w in 1..=WAVES {
        text.push_str(&format!(
            "  - {{name: ring-{w}, selector: {{ring: r{w}}}, maxParallel: {MAX_PARALLEL}}}\n"
        ));
    }
    text.push_str("bake: 0s\n");
    text
}

/// One wave as the kubelet saw it.
#[derive(Default)]
struct WaveSeen {
    first_job: Option<Instant>,
    last_success: Option<Instant>,
    /// When the last of its ClusterOperations was seen Succeeded.
    last_succeeded: Option<Instant>,
    jobs: usize,
    running: usize,
    max_running: usize,
}

/// The ring of the cluster named `cluster` (`c00042`).
fn ring_of(cluster: &str, clusters: usize) -> usize {
    ring(
        cluster.trim_start_matches('c').parse().unwrap_or_default(),
        clusters,
    )
}

/// The benchmark's kubelet over the rollout: what each wave did, until `expected` ClusterOperations are
/// seen Succeeded or `limit` passed.
async fn play_waves(
    api: &testkit::ApiServer,
    clusters: usize,
    expected: usize,
    limit: Duration,
) -> anyhow::Result<Vec<WaveSeen>> {
    let waves: Vec<WaveSeen> = (0..WAVES).map(|_| WaveSeen::default()).collect();
    let waves = std::cell::RefCell::new(waves);
    let wave_of = |cluster: &str| ring_of(cluster, clusters) - 1;
    play_kubelet(
        api,
        expected,
        limit,
        |job: &Job, completed| {
            let cluster = job.metadata.labels.as_ref().and_then(|l| l.get(LABEL_CLUSTER));
            let mut waves = waves.borrow_mut();
            let wave = &mut waves[wave_of(cluster.map_or("", String::as_str))];
            if completed {
                wave.running -= 1;
                wave.last_success = Some(Instant::now());
            } else {
                wave.first_job.get_or_insert_with(Instant::now);
                wave.jobs += 1;
                wave.running += 1;
                wave.max_running = wave.max_running.max(wave.running);
            }
        },
        |op: &ClusterOperation| {
            waves.borrow_mut()[wave_of(&op.spec.cluster)].last_succeeded = Some(Instant::now());
        },
    )
    .await?;
    Ok(waves.into_inner())
}

/// `kok/rollout/bench` statuses on `sha` in order, and how many distinct updates they carry
/// (consecutive equal ones folded); and the per-cluster statuses on `sha`.
fn rollout_statuses(forge: &super::forge::ForgeServer, sha: &str) -> (Vec<String>, usize, usize) {
    let posted = super::e2e::posted(&forge.requests());
    let context = format!("kok/rollout/{ROLLOUT}");
    let mine: Vec<String> = posted
        .iter()
        .filter(|p| p.sha == sha && p.context == context)
        .map(|p| format!("{}: {}", p.state, p.description))
        .collect();
    let mut updates = mine.clone();
    updates.dedup();
    let clusters = posted
        .iter()
        .filter(|p| p.sha == sha && p.context != context && p.context != "kok/sync")
        .count();
    (mine, updates.len(), clusters)
}

/// Phase of the FleetRollout, read without a request.
fn phase(api: &testkit::ApiServer) -> Option<String> {
    let resource = kube::core::ApiResource::erase::<kok::api::FleetRollout>(&());
    let obj = api.object(&resource, NS, ROLLOUT)?;
    obj["status"]["phase"].as_str().map(str::to_string)
}

pub async fn run(cfg: &Config, clusters: usize) -> anyhow::Result<RolloutRun> {
    let mut run = RolloutRun {
        clusters,
        ..RolloutRun::default()
    };
    let remote = Remote::new();
    let fleet = generate(&remote, clusters);
    let api = testkit::ApiServer::start_with(testkit::Options {
        event_window: 200_000,
        ..testkit::Options::default()
    })
    .await?;
    api.install_crds(&kok::api::crds()).await?;
    let forge = super::forge::ForgeServer::start().await;
    let mut args = super::e2e::github_args(&forge.url());
    args.extend(["--status-max-contexts".to_string(), FORGE_BUDGET.to_string()]);
    args.extend(["--max-concurrent-jobs".to_string(), MAX_PARALLEL.to_string()]);
    let mut kok = Kok::start(&KokOptions {
        kubeconfig: api.kubeconfig_path().to_path_buf(),
        repo: remote.bare(),
        cache: remote.scratch("cache"),
        log: remote.scratch("logs").join("kok.log"),
        args,
        env: vec![("KOK_LOG".into(), "info".into())],
    });
    let mut meta = Meta::Service(api);
    let started = Instant::now();
    while meta.reconciled_commit().await.as_deref() != Some(fleet.as_str()) {
        if started.elapsed() > cfg.timeout || kok.try_wait().is_some() {
            run.problems
                .push("the fleet's commit was not reconciled".to_string());
            kok.kill();
            return Ok(run);
        }
        tokio::time::sleep(POLL).await;
    }
    run.reconciled_secs = Some(secs(started.elapsed()));
    let Meta::Service(api) = meta else {
        unreachable!("the rollout round runs in service mode")
    };
    eprintln!(
        "[rollout {clusters}] fleet reconciled in {:?} s",
        run.reconciled_secs
    );

    let before = Counts::of(&api.requests());
    remote.write(&format!("rollouts/{ROLLOUT}.yml"), &rollout_yml());
    let pushed = Instant::now();
    let sha = remote.push("rollout: bench");
    let waves = play_waves(&api, clusters, clusters, cfg.timeout).await?;
    let last = waves.iter().filter_map(|w| w.last_success).max();
    run.rollout_secs = last.map(|t| secs(t.duration_since(pushed)));
    run.rollout_requests = Some(Counts::of(&api.requests()).since(&before).0);
    run.first_job_secs = waves[0].first_job.map(|t| secs(t.duration_since(pushed)));
    run.wave_jobs = waves.iter().map(|w| w.jobs).collect();
    run.wave_max_running = waves.iter().map(|w| w.max_running).collect();
    let gaps = |end: fn(&WaveSeen) -> Option<Instant>| -> Vec<Option<f64>> {
        waves
            .windows(2)
            .map(|pair| match (end(&pair[0]), pair[1].first_job) {
                (Some(done), Some(open)) => Some(secs(open.saturating_duration_since(done))),
                _ => None,
            })
            .collect()
    };
    run.wave_open_secs = gaps(|w| w.last_success);
    run.wave_open_after_succeeded_secs = gaps(|w| w.last_succeeded);
    let succeeded: usize = run.wave_jobs.iter().sum();
    if succeeded < clusters {
        run.problems.push(format!(
            "{succeeded} of {clusters} Jobs within {} s",
            cfg.timeout.as_secs()
        ));
    }
    // The last statuses: until the rollout says Completed and the forge has its final success.
    let settle_deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let sequence;
        (sequence, run.rollout_updates, run.cluster_statuses) = rollout_statuses(&forge, &sha);
        run.rollout_statuses = sequence.len();
        run.rollout_status_sequence = sequence;
        run.phase = phase(&api);
        let complete = run.phase.as_deref() == Some("Completed");
        let reported = run
            .rollout_status_sequence
            .last()
            .is_some_and(|s| s.starts_with("success:"));
        if (complete && reported) || Instant::now() > settle_deadline {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    run.peak_rss_mib = peak_rss_mib(kok.pid());
    kok.kill();
    eprintln!(
        "[rollout {clusters}] waves {:?} Jobs, opened {:?} s after the wave before's last Job ended ({:?} s after its \
         last run Succeeded), rollout {:?} s, phase {:?}, {} rollout statuses for {} updates, peak RSS {:?} MiB",
        run.wave_jobs,
        run.wave_open_secs,
        run.wave_open_after_succeeded_secs,
        run.rollout_secs,
        run.phase,
        run.rollout_statuses,
        run.rollout_updates,
        run.peak_rss_mib
    );
    Ok(run)
}

/// Issue 10's peak-RSS target of the service mode for a fleet of `clusters` (1,000 clusters: 64 MiB;
/// 10,000: 128 MiB); `None` for the sizes it names no target for.
fn service_rss_target(clusters: usize) -> Option<f64> {
    match clusters {
        1000 => Some(64.0),
        10000 => Some(128.0),
        _ => None,
    }
}

/// The table and the targets beside the figures; `service_rss` gives the service mode's peak
/// RSS measured in the same bench run for a fleet size, if it ran.
pub fn report(runs: &[RolloutRun], service_rss: impl Fn(usize) -> Option<f64>) -> String {
    let mut out = String::from(
        "| clusters | fleet reconciled | first Job | wave opened after the wave before's last Job ended (its last run Succeeded) | Jobs per wave (most at once) | rollout | rollout statuses / updates | peak RSS | phase |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in runs {
        let opens: Vec<String> = r
            .wave_open_secs
            .iter()
            .zip(&r.wave_open_after_succeeded_secs)
            .map(|(job, op)| format!("{} ({})", fmt_opt(*job, " s"), fmt_opt(*op, " s")))
            .collect();
        let jobs: Vec<String> = r
            .wave_jobs
            .iter()
            .zip(&r.wave_max_running)
            .map(|(j, m)| format!("{j} ({m})"))
            .collect();
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} / {} | {} | {} |\n",
            r.clusters,
            fmt_opt(r.reconciled_secs, " s"),
            fmt_opt(r.first_job_secs, " s"),
            opens.join(", "),
            jobs.join(", "),
            fmt_opt(r.rollout_secs, " s"),
            r.rollout_statuses,
            r.rollout_updates,
            fmt_opt(r.peak_rss_mib, " MiB"),
            r.phase.as_deref().unwrap_or("—"),
        ));
    }
    out.push_str("\nRollout targets:\n");
    for r in runs {
        let slowest = |gaps: &[Option<f64>]| gaps.iter().flatten().copied().reduce(f64::max);
        let all_opened = r.wave_open_after_succeeded_secs.iter().all(Option::is_some);
        let after_op = slowest(&r.wave_open_after_succeeded_secs);
        out.push_str(&format!(
            "{:>6} each wave opens ≤ 1 s after the last success (a run Succeeded) of the one before: slowest {} ({} after the Job ended) {}\n",
            r.clusters,
            fmt_opt(after_op, " s"),
            fmt_opt(slowest(&r.wave_open_secs), " s"),
            mark(after_op.map(|s| all_opened && s <= 1.0))
        ));
        out.push_str(&format!(
            "{:>6} at most one forge status per rollout update: {} statuses for {} updates {}\n",
            r.clusters,
            r.rollout_statuses,
            r.rollout_updates,
            mark((r.rollout_statuses > 0).then_some(r.rollout_statuses == r.rollout_updates))
        ));
        let reads = r.rollout_requests.as_ref().map(|m| {
            ["get clusteroperations", "list clusteroperations"]
                .iter()
                .map(|k| m.get(*k).copied().unwrap_or(0))
                .sum::<usize>()
        });
        out.push_str(&format!(
            "{:>6} deciding never lists or reads the operations (GET+LIST of clusteroperations while rolling out, the bench's own watch's list included): {} {}\n",
            r.clusters,
            reads.map(|n| n.to_string()).unwrap_or_else(|| "—".into()),
            mark(reads.map(|n| n <= 1))
        ));
        let measured = service_rss(r.clusters).map(|m| m + 8.0);
        let target = service_rss_target(r.clusters).map(|t| t + 8.0);
        out.push_str(&format!(
            "{:>6} peak RSS ≤ the service mode's target + 8 MiB ({}): {}{} {}\n",
            r.clusters,
            fmt_opt(target, " MiB"),
            fmt_opt(r.peak_rss_mib, " MiB"),
            measured
                .map(|m| format!(" (the service mode's peak here + 8 MiB: {m:.1} MiB)"))
                .unwrap_or_default(),
            mark(target.zip(r.peak_rss_mib).map(|(t, p)| p <= t))
        ));
        for p in &r.problems {
            out.push_str(&format!("{:>6} {p}\n", r.clusters));
        }
    }
    out
}
