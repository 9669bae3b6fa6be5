//! Fleet benchmark: the real `kok` binary as a process on generated fleets (every cluster with five
//! hosts, a `cluster.yml` naming an ssh Secret that does not exist, so no ansible runs), in service
//! mode against an in-process testkit API server and in local mode (`kok run --local`).
//!
//! For each fleet and mode it measures: time until the commit is reconciled (the `kok-state`
//! ConfigMap names it), time until every status is in the git notes and on a local fake GitHub, peak
//! RSS of kok, CPU and API requests during an idle window, one-cluster changes and a full resync
//! (kok restarted with a short `--resync-interval`). It prints a table and the targets beside
//! the figures, writes JSON, and asserts nothing about time.
//!
//! Environment: `KOK_FLEET_SIZES` (default `100x10,1000x10,10000x1`, clusters × operations),
//! `KOK_FLEET_MODES` (default `service,local`), `KOK_FLEET_IDLE_SECS` (default 30),
//! `KOK_FLEET_TIMEOUT_SECS` (longest wait of each phase, default 300), `KOK_FLEET_RESYNC_SECS`
//! (`--resync-interval` of the restarted kok, default 20), `KOK_FLEET_JSON` (default
//! `<target dir>/fleet.json`), `KOK_FLEET_SAMPLE_DIR` (mode `kubespray`: write there the first object of
//! each kind the byte count lists, as `<kind>.json`, to read where its bytes go). Mode `health` (not in the default modes) measures the periodic health
//! checks instead (see [`health`]); `KOK_FLEET_HEALTH_INTERVAL_SECS` (default 30) is its kok's
//! `--health-interval`. Mode `rollout` (not in the default modes either) runs a rollout over the fleet's
//! clusters in four waves (see [`rollout`]; the operations count of a size is not used). Mode
//! `kubespray` (not in the default modes) measures kok's ConfigMap bytes for a fleet in kubespray's
//! layout, then runs every operation and counts every object in kok's namespace by kind (the bytes etcd
//! keeps, beside its 2 GiB default quota), then a one-file edit in every cluster (see [`kubespray`]); it
//! runs once per distinct size of `KOK_FLEET_SIZES`, at 1,000 × 1 when that is not set. Every run also
//! measures the web view's fleet page at 1,000 clusters, in process ([`web`]), and `/metrics` at 1,000
//! clusters with every gauge set, in process ([`metrics`]); each fleet run also scrapes the real kok's
//! `/metrics` at rest.

// The integration tests' helpers, as their binary has them (`crate::common`, `crate::forge`).
#[allow(dead_code)]
#[path = "../tests/integration/common/mod.rs"]
mod common;
#[allow(dead_code)]
#[path = "../tests/integration/e2e/mod.rs"]
mod e2e;
#[allow(dead_code)]
#[path = "../tests/integration/forge/mod.rs"]
mod forge;
#[path = "fleet/health.rs"]
mod health;
#[path = "fleet/kubespray.rs"]
mod kubespray;
#[path = "fleet/metrics.rs"]
mod metrics;
#[path = "fleet/rollout.rs"]
mod rollout;
#[path = "fleet/web.rs"]
mod web;

use common::kubespray as kubespray_setup;
use common::tools;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use serde::Serialize;

use e2e::{Kok, KokOptions, Remote, NS};
use kok::api::STATE_CONFIG_MAP;

/// Time between two looks at the reconciled commit.
const POLL: Duration = Duration::from_millis(100);
/// Looks at the notes and the forge happen every this many polls.
const STATUS_POLL_EVERY: u32 = 3;
/// The Secret every cluster.yml names; it never exists.
const SSH_SECRET: &str = "fleet-ssh";
/// The Kubernetes version every cluster asks for: one kok's default runner image, kubespray v2.27.0,
/// installs, so pre-flight lets the operations through to their wait for the Secret.
const KUBE_VERSION: &str = "v1.31.4";
/// The operation budget of a forge sink above which one summary context stands for the commit.
const FORGE_BUDGET: usize = 50;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Mode {
    Service,
    Local,
    /// The health round ([`health`]), in service mode.
    Health,
    /// A rollout in four waves ([`rollout`]), in service mode.
    Rollout,
    /// kok's ConfigMaps for a fleet in kubespray's layout ([`kubespray`]), in service mode.
    Kubespray,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Service => "service",
            Mode::Local => "local",
            Mode::Health => "health",
            Mode::Rollout => "rollout",
            Mode::Kubespray => "kubespray",
        }
    }
}

struct Config {
    sizes: Vec<(usize, usize)>,
    modes: Vec<Mode>,
    /// Fleet sizes of the kubespray mode: the sizes of `KOK_FLEET_SIZES`, else 1,000 × 1.
    kubespray_sizes: Vec<(usize, usize)>,
    idle: Duration,
    timeout: Duration,
    resync_after: Duration,
    health_interval: Duration,
    json: PathBuf,
}

fn env_secs(name: &str, default: u64) -> anyhow::Result<Duration> {
    match std::env::var(name) {
        Ok(v) => Ok(Duration::from_secs(v.trim().parse().map_err(|_| {
            anyhow::anyhow!("{name}={v:?} is not a number of seconds")
        })?)),
        Err(_) => Ok(Duration::from_secs(default)),
    }
}

impl Config {
    fn from_env() -> anyhow::Result<Config> {
        let given = std::env::var("KOK_FLEET_SIZES").ok();
        let sizes = given.as_deref().unwrap_or("100x10,1000x10,10000x1");
        let sizes = sizes
            .split(',')
            .map(|s| {
                let (c, o) = s.trim().split_once('x').unwrap_or(("", ""));
                match (c.parse(), o.parse()) {
                    (Ok(c), Ok(o)) if c > 0 && o > 0 => Ok((c, o)),
                    _ => Err(anyhow::anyhow!(
                        "KOK_FLEET_SIZES: {s:?} is not <clusters>x<operations>, e.g. 100x10"
                    )),
                }
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let modes = std::env::var("KOK_FLEET_MODES").unwrap_or_else(|_| "service,local".into());
        let modes = modes
            .split(',')
            .map(|m| match m.trim() {
                "service" => Ok(Mode::Service),
                "local" => Ok(Mode::Local),
                "health" => Ok(Mode::Health),
                "rollout" => Ok(Mode::Rollout),
                "kubespray" => Ok(Mode::Kubespray),
                other => Err(anyhow::anyhow!(
                    "KOK_FLEET_MODES: {other:?} is not service, local, health, rollout or kubespray"
                )),
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut kubespray_sizes = Vec::new();
        if modes.contains(&Mode::Kubespray) {
            let counts = match given {
                Some(_) => sizes.clone(),
                None => vec![(1000, 1)],
            };
            for size in counts {
                if !kubespray_sizes.contains(&size) {
                    kubespray_sizes.push(size);
                }
            }
        }
        // The kok binary is <target>/<profile>/kok.
        let target = PathBuf::from(env!("CARGO_BIN_EXE_kok"))
            .parent()
            .and_then(|p| p.parent())
            .map(|p| p.to_path_buf())
            .unwrap_or_else(|| PathBuf::from("target"));
        let json = std::env::var_os("KOK_FLEET_JSON")
            .map(PathBuf::from)
            .unwrap_or_else(|| target.join("fleet.json"));
        Ok(Config {
            sizes,
            modes,
            kubespray_sizes,
            idle: env_secs("KOK_FLEET_IDLE_SECS", 30)?,
            timeout: env_secs("KOK_FLEET_TIMEOUT_SECS", 300)?,
            resync_after: env_secs("KOK_FLEET_RESYNC_SECS", 20)?,
            health_interval: env_secs("KOK_FLEET_HEALTH_INTERVAL_SECS", 30)?,
            json,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The generated repository

fn cluster_name(i: usize) -> String {
    format!("c{i:05}")
}

/// hosts.yml with `hosts` nodes, the first one the control plane and the etcd member.
fn hosts_yml(cluster: usize, hosts: usize) -> String {
    let mut text = String::from("all:\n  hosts:\n");
    for h in 1..=hosts {
        text.push_str(&format!(
            "    node{h}:\n      ansible_host: 10.{}.{}.{h}\n",
            cluster / 256,
            cluster % 256
        ));
    }
    text.push_str("  children:\n    kube_control_plane:\n      hosts:\n        node1:\n");
    text.push_str("    etcd:\n      hosts:\n        node1:\n");
    text.push_str("    kube_node:\n      hosts:\n");
    for h in 1..=hosts {
        text.push_str(&format!("        node{h}:\n"));
    }
    text
}

/// Writes the fleet into the work clone and pushes it; returns the commit.
fn generate(remote: &Remote, clusters: usize, ops: usize) -> String {
    let mut operations = String::new();
    for j in 0..ops {
        operations.push_str(&format!("- id: op{j:02}\n  action: cluster.yml\n"));
    }
    for i in 0..clusters {
        let name = write_cluster(remote, i, &format!("sshAuthSecret: {SSH_SECRET}\n"));
        remote.write(&format!("clusters/{name}/operations.yml"), &operations);
    }
    remote.push(&format!("{clusters} clusters x {ops} operations"))
}

/// Writes cluster `i` (five hosts) with `cluster_yml` into the work clone; returns its name.
fn write_cluster(remote: &Remote, i: usize, cluster_yml: &str) -> String {
    let name = cluster_name(i);
    remote
        .write(&format!("clusters/{name}/hosts.yml"), &hosts_yml(i, 5))
        .write(
            &format!("clusters/{name}/vars.yml"),
            &format!("cluster_name: {name}\nkube_version: {KUBE_VERSION}\n"),
        )
        .write(&format!("clusters/{name}/cluster.yml"), cluster_yml);
    name
}

// ---------------------------------------------------------------------------------------------
// Observing kok

/// Where kok's objects live: the bench's own testkit server, or kok's embedded one.
enum Meta {
    Service(testkit::ApiServer),
    Local {
        kubeconfig: PathBuf,
        client: Option<kube::Client>,
    },
}

impl Meta {
    /// The commit the `kok-state` ConfigMap names. The bench's server is read without a request, so
    /// the request counters hold kok's requests only.
    async fn reconciled_commit(&mut self) -> Option<String> {
        match self {
            Meta::Service(api) => {
                let cm = api.object("v1/configmaps", NS, STATE_CONFIG_MAP)?;
                cm["data"]["commit"].as_str().map(str::to_string)
            }
            Meta::Local { kubeconfig, client } => {
                if client.is_none() {
                    *client = local_client(kubeconfig).await;
                }
                let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone()?, NS);
                match api.get_opt(STATE_CONFIG_MAP).await {
                    Ok(cm) => cm?.data?.get("commit").cloned(),
                    Err(_) => {
                        // kok restarted: its embedded server listens on a new port.
                        *client = None;
                        None
                    }
                }
            }
        }
    }

    fn requests(&self) -> Option<Counts> {
        match self {
            Meta::Service(api) => Some(Counts::of(&api.requests())),
            Meta::Local { .. } => None,
        }
    }
}

/// A client of the embedded API server, once its kubeconfig is written.
async fn local_client(path: &std::path::Path) -> Option<kube::Client> {
    let config = kube::config::Kubeconfig::read_from(path).ok()?;
    let options = kube::config::KubeConfigOptions::default();
    let config = kube::Config::from_custom_kubeconfig(config, &options)
        .await
        .ok()?;
    kube::Client::try_from(config).ok()
}

/// API requests by `verb resource`.
#[derive(Clone, Debug, Default)]
struct Counts(BTreeMap<String, usize>);

impl Counts {
    fn of(log: &testkit::RequestLog) -> Counts {
        Counts(
            log.snapshot()
                .into_iter()
                .map(|((verb, resource), n)| (format!("{verb} {resource}"), n))
                .collect(),
        )
    }

    /// What happened between `earlier` and `self`.
    fn since(&self, earlier: &Counts) -> Counts {
        Counts(
            self.0
                .iter()
                .map(|(k, n)| (k.clone(), n - earlier.0.get(k).copied().unwrap_or(0)))
                .filter(|(_, n)| *n > 0)
                .collect(),
        )
    }

    fn total(&self) -> usize {
        self.0.values().sum()
    }

    fn by_verb(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for (k, n) in &self.0 {
            let verb = k.split(' ').next().unwrap_or_default().to_string();
            *out.entry(verb).or_default() += n;
        }
        out
    }

    fn verb(&self, verb: &str) -> usize {
        self.by_verb().get(verb).copied().unwrap_or(0)
    }

    fn writes(&self) -> usize {
        ["create", "update", "patch", "delete", "deletecollection"]
            .iter()
            .map(|v| self.verb(v))
            .sum()
    }

    fn summary(&self) -> String {
        let verbs = self.by_verb();
        if verbs.is_empty() {
            return "0".into();
        }
        verbs
            .iter()
            .map(|(v, n)| format!("{v} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// How long kok must be quiet to have settled.
const SETTLE_QUIET: Duration = Duration::from_secs(1);

/// Waits until kok has settled after a burst: [`SETTLE_QUIET`] with under 5 % of a core and, in service
/// mode, without an API request (a kok digesting what its watches listed makes no request but is not
/// at rest); at most `limit`. Returns how long it waited.
async fn settle(meta: &Meta, pid: u32, limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let (requests, cpu) = (meta.requests().map(|c| c.total()), cpu_seconds(pid));
        tokio::time::sleep(SETTLE_QUIET).await;
        let no_request = meta.requests().map(|now| now.total()) == requests;
        let idle_cpu = cpu
            .zip(cpu_seconds(pid))
            .is_some_and(|(a, b)| b - a < 0.05 * SETTLE_QUIET.as_secs_f64());
        let quiet = no_request && idle_cpu;
        if quiet || started.elapsed() >= limit {
            return started.elapsed();
        }
    }
}

/// utime + stime of a process, in seconds.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which is in parentheses and may contain spaces.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / clock_ticks())
}

fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// How many one-cluster changes a run measures; the figures are their medians.
const CHANGES: usize = 5;

/// The median of `values` (the upper one of an even count), `None` when there are none.
fn median(values: &mut [f64]) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

/// Peak resident set size (VmHWM) of a process, in MiB.
fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// How many times the fleet's `/metrics` is scraped for its time.
const SCRAPES: usize = 10;

/// The size of kok's `/metrics` and the median time of [`SCRAPES`] scrapes, asking for OpenMetrics as
/// Prometheus does.
/// Runs of `kok status` measured.
const STATUS_RUNS: usize = 3;

/// The median time of [`STATUS_RUNS`] runs of the real `kok status` against the meta-cluster of
/// `kubeconfig`, in milliseconds, and the bytes of its table.
fn kok_status(kubeconfig: &std::path::Path) -> anyhow::Result<(f64, usize)> {
    let mut times = Vec::new();
    let mut bytes = 0;
    for _ in 0..STATUS_RUNS {
        let started = Instant::now();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kok"))
            .args(["status", "--namespace", e2e::NS, "--kubeconfig"])
            .arg(kubeconfig)
            .output()?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(
            out.status.success(),
            "kok status exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        bytes = out.stdout.len();
    }
    Ok((median(&mut times).unwrap_or_default(), bytes))
}

/// [`SCRAPES`] scrapes of `/metrics` as Prometheus makes them (OpenMetrics, gzip): the text's bytes, the
/// bytes that travelled when they came gzipped, and the median time, request to last byte.
async fn scrape(http: &reqwest::Client, kok: &Kok) -> (Option<usize>, Option<usize>, Option<f64>) {
    let mut times = Vec::new();
    let mut bytes = None;
    for _ in 0..SCRAPES {
        let started = Instant::now();
        let response = http
            .get(kok.url("/metrics"))
            .header(
                "accept",
                "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
            )
            .header("accept-encoding", "gzip")
            .send()
            .await;
        let Ok((gzipped, body)) = (match response {
            Ok(r) => {
                let gzipped = r.headers().get("content-encoding").is_some_and(|e| e == "gzip");
                r.bytes().await.map(|body| (gzipped, body))
            }
            Err(e) => Err(e),
        }) else {
            continue;
        };
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        let mut text = Vec::new();
        bytes = match gzipped {
            true => std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&body[..]), &mut text)
                .ok()
                .map(|_| (text.len(), Some(body.len()))),
            false => Some((body.len(), None)),
        };
    }
    let ms = median(&mut times).map(|m| (m * 10.0).round() / 10.0);
    (bytes.map(|b| b.0), bytes.and_then(|b| b.1), ms)
}

/// The size of a fleet's `/metrics`: the text (what the target counts) and what travelled gzipped.
fn metrics_size(r: &Run) -> String {
    match (r.metrics_bytes, r.metrics_gzip_bytes) {
        (Some(text), Some(gzip)) => format!(
            "{:.0} KB ({:.0} KB gzip)",
            text as f64 / 1000.0,
            gzip as f64 / 1000.0
        ),
        (Some(text), None) => format!("{:.0} KB", text as f64 / 1000.0),
        _ => "—".into(),
    }
}

/// One value of kok's /metrics (the first series of that name).
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        let value = rest.strip_prefix(' ').or_else(|| {
            rest.starts_with('{')
                .then(|| rest.rsplit_once(' ').map(|(_, v)| v))
                .flatten()
        })?;
        value.trim().parse().ok()
    })
}

/// Passes so far and their summed seconds (`kok_reconcile_duration_seconds`).
fn pass_time(text: &str) -> Option<(f64, f64)> {
    Some((
        metric(text, "kok_reconcile_duration_seconds_count")?,
        metric(text, "kok_reconcile_duration_seconds_sum")?,
    ))
}

async fn metrics(http: &reqwest::Client, kok: &Kok) -> Option<String> {
    http.get(kok.url("/metrics")).send().await.ok()?.text().await.ok()
}

/// Contexts on `sha` in the remote's notes. `git notes show` runs off the runtime, which also
/// serves the API server.
async fn note_contexts(remote: &Remote, sha: &str, seen: &mut NotesSeen) -> usize {
    let bare = remote.bare();
    let sha = sha.to_string();
    let last = seen.clone();
    let (tip, count) = tokio::task::spawn_blocking(move || {
        // The notes ref first (a file read): the note itself, tens of MB at 10,000 × 20, is read only
        // when the ref moved, so that looking does not take the cores kok and its API server share.
        let tip = e2e::git_output(&bare, &["rev-parse", "--verify", "--quiet", "refs/notes/kok"]).stdout;
        if tip.is_empty() || tip == last.tip {
            return (tip, last.count);
        }
        let out = e2e::git_output(&bare, &["notes", "--ref=kok", "show", &sha]);
        let count = out
            .stdout
            .split(|&b| b == b'\n')
            .filter(|l| l.starts_with(b"kok/"))
            .count();
        (tip, count)
    })
    .await
    .unwrap_or_default();
    *seen = NotesSeen { tip, count };
    count
}

/// The notes ref the benchmark last looked at, and the contexts it counted on the commit then.
#[derive(Clone, Default)]
struct NotesSeen {
    tip: Vec<u8>,
    count: usize,
}

/// Contexts on `sha` the fake GitHub received, whether its newest `kok/summary` counts all
/// `operations`, and its request count.
fn forge_contexts(server: &forge::ForgeServer, sha: &str, operations: usize) -> (usize, bool, usize) {
    let requests = server.requests();
    let posted = e2e::posted(&requests);
    let contexts: BTreeSet<&str> = posted
        .iter()
        .filter(|p| p.sha == sha)
        .map(|p| p.context.as_str())
        .collect();
    let counted = format!("/{operations} succeeded");
    let summary = posted
        .iter()
        .rev()
        .find(|p| p.sha == sha && p.context == "kok/summary")
        .is_some_and(|p| p.description.contains(&counted));
    (contexts.len(), summary, requests.len())
}

/// Plays the Job controller and the kubelet for the benchmark: completes every Job once as it appears
/// (`job(job, false)` before, `job(job, true)` after) until `expected` ClusterOperations are Succeeded
/// (`succeeded(op)` once each) or `limit` passed; returns how many Succeeded.
async fn play_kubelet(
    api: &testkit::ApiServer,
    expected: usize,
    limit: Duration,
    mut job: impl FnMut(&k8s_openapi::api::batch::v1::Job, bool),
    mut succeeded: impl FnMut(&kok::api::ClusterOperation),
) -> anyhow::Result<usize> {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let jobs: kube::Api<k8s_openapi::api::batch::v1::Job> = kube::Api::namespaced(api.client(), NS);
    let ops: kube::Api<kok::api::ClusterOperation> = kube::Api::namespaced(api.client(), NS);
    let mut jobs = watcher(jobs, watcher::Config::default()).boxed();
    let mut ops = watcher(ops, watcher::Config::default()).boxed();
    let mut done = BTreeSet::new();
    let mut seen = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + limit;
    while seen.len() < expected {
        tokio::select! {
            event = jobs.next() => {
                let j = match event {
                    Some(Ok(watcher::Event::Apply(j) | watcher::Event::InitApply(j))) => j,
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return Err(e.into()),
                    None => break,
                };
                let Some(name) = j.metadata.name.clone() else { continue };
                if done.insert(name.clone()) {
                    job(&j, false);
                    api.complete_job(NS, &name).await?;
                    job(&j, true);
                }
            }
            event = ops.next() => {
                let op = match event {
                    Some(Ok(watcher::Event::Apply(op) | watcher::Event::InitApply(op))) => op,
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return Err(e.into()),
                    None => break,
                };
                let phase = op.status.as_ref().map(|s| s.phase);
                if phase == Some(kok::api::Phase::Succeeded) && seen.insert(op.metadata.name.clone().unwrap_or_default()) {
                    succeeded(&op);
                }
            }
            () = tokio::time::sleep_until(deadline) => break,
        }
    }
    Ok(seen.len())
}

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

// ---------------------------------------------------------------------------------------------
// One run

#[derive(Debug, Default, Serialize)]
struct Run {
    fleet: String,
    clusters: usize,
    operations_per_cluster: usize,
    mode: String,
    /// Statuses expected on the commit: one per operation plus kok/sync.
    statuses: usize,
    reconciled_secs: Option<f64>,
    /// API requests from kok's start until the commit was reconciled (service mode).
    reconcile_requests: Option<BTreeMap<String, usize>>,
    notes_secs: Option<f64>,
    notes_contexts: usize,
    /// Commits on refs/notes/kok in the remote once the statuses were delivered (or the wait ended).
    notes_commits: Option<usize>,
    forge_secs: Option<f64>,
    forge_contexts: usize,
    /// Requests the fake GitHub received (once the idle window is over, when the run got that far).
    forge_requests: usize,
    /// The same by method and kind of path (`POST statuses`).
    forge_request_kinds: BTreeMap<String, usize>,
    /// VmHWM of the kok process (in local mode it includes the embedded API server).
    peak_rss_mib: Option<f64>,
    /// From the last status delivered until kok settled (see [`settle`]), before the idle window.
    settle_secs: Option<f64>,
    idle_secs: f64,
    idle_cpu_percent: Option<f64>,
    idle_requests: Option<BTreeMap<String, usize>>,
    /// From the push until the reconciled commit names it, the poll's wait included.
    change_ms: Option<f64>,
    /// The pass itself (`kok_reconcile_duration_seconds`): the change's cost without the poll's wait
    /// and git's transfer.
    change_pass_ms: Option<f64>,
    change_api_writes: Option<usize>,
    change_kok_writes: Option<f64>,
    resync_secs: Option<f64>,
    resync_kok_writes: Option<f64>,
    /// API requests while the resync pass ran (service mode; anything else kok did then included).
    resync_requests: Option<BTreeMap<String, usize>>,
    /// The real kok's web view (local mode), after the idle window.
    web: Option<web::KokWebRun>,
    /// `/metrics` of the fleet at rest (OpenMetrics, as Prometheus asks for it): its size in bytes.
    metrics_bytes: Option<usize>,
    /// The same, gzip-compressed as it travels to Prometheus.
    metrics_gzip_bytes: Option<usize>,
    /// The median time of [`SCRAPES`] scrapes of it, request to last byte, in milliseconds.
    metrics_ms: Option<f64>,
    /// `kok status` of the fleet at rest (service mode): the median of [`STATUS_RUNS`] runs of the
    /// process, start to exit, in milliseconds, and the bytes of its table.
    status_ms: Option<f64>,
    status_bytes: Option<usize>,
    /// Timeouts and other things that went wrong.
    problems: Vec<String>,
}

struct Bench<'a> {
    cfg: &'a Config,
    http: reqwest::Client,
}

impl Bench<'_> {
    async fn run(&self, clusters: usize, ops: usize, mode: Mode) -> anyhow::Result<Run> {
        let mut run = Run {
            fleet: format!("{clusters}x{ops}"),
            clusters,
            operations_per_cluster: ops,
            mode: mode.as_str().into(),
            statuses: clusters * ops + 1,
            idle_secs: self.cfg.idle.as_secs_f64(),
            ..Run::default()
        };
        let remote = Remote::new();
        let generated = Instant::now();
        let sha = generate(&remote, clusters, ops);
        eprintln!(
            "[{} {}] fleet generated and pushed in {:.1} s",
            run.fleet,
            run.mode,
            generated.elapsed().as_secs_f64()
        );
        let forge = forge::ForgeServer::start().await;
        let state_dir = remote.scratch("state");
        let mut meta = match mode {
            // The health, rollout and kubespray modes run in [`health::run`], [`rollout::run`] and
            // [`kubespray::run`].
            Mode::Service | Mode::Health | Mode::Rollout | Mode::Kubespray => {
                let api = testkit::ApiServer::start_with(testkit::Options {
                    event_window: 200_000,
                    ..testkit::Options::default()
                })
                .await?;
                api.install_crds(&kok::api::crds()).await?;
                api.requests().reset();
                Meta::Service(api)
            }
            Mode::Local => Meta::Local {
                kubeconfig: state_dir.join("kubeconfig"),
                client: None,
            },
        };
        let kubeconfig = match &meta {
            Meta::Service(api) => api.kubeconfig_path().to_path_buf(),
            Meta::Local { kubeconfig, .. } => kubeconfig.clone(),
        };
        let options = |resync: Duration| {
            let mut args = e2e::github_args(&forge.url());
            args.extend(["--status-max-contexts".to_string(), FORGE_BUDGET.to_string()]);
            args.extend(["--resync-interval".to_string(), format!("{}s", resync.as_secs())]);
            if mode == Mode::Local {
                args.extend(["--local".to_string(), "--state-dir".to_string()]);
                args.push(state_dir.display().to_string());
            }
            KokOptions {
                kubeconfig: kubeconfig.clone(),
                repo: remote.bare(),
                cache: remote.scratch("cache"),
                log: remote.scratch("logs").join("kok.log"),
                args,
                env: vec![("KOK_LOG".into(), "info".into())],
            }
        };

        // Cold start: reconcile, then every status delivered.
        let before = meta.requests();
        let first = options(Duration::from_secs(24 * 3600));
        let started = Instant::now();
        let mut kok = Kok::start(&first);
        let deadline = started + self.cfg.timeout;
        let mut polls = 0u32;
        let mut forge_requests = 0;
        let mut notes_seen = NotesSeen::default();
        while run.reconciled_secs.is_none() || run.notes_secs.is_none() || run.forge_secs.is_none() {
            if let Some(status) = kok.try_wait() {
                run.problems.push(format!("kok exited with {status}"));
                break;
            }
            if run.reconciled_secs.is_none()
                && meta.reconciled_commit().await.as_deref() == Some(sha.as_str())
            {
                run.reconciled_secs = Some(secs(started.elapsed()));
                run.reconcile_requests = meta
                    .requests()
                    .zip(before.as_ref())
                    .map(|(now, before)| now.since(before).0);
            }
            if polls.is_multiple_of(STATUS_POLL_EVERY) {
                if run.notes_secs.is_none() {
                    run.notes_contexts = note_contexts(&remote, &sha, &mut notes_seen).await;
                    if run.notes_contexts >= run.statuses {
                        run.notes_secs = Some(secs(started.elapsed()));
                    }
                }
                if run.forge_secs.is_none() {
                    let (seen, summary, requests) = forge_contexts(&forge, &sha, clusters * ops);
                    run.forge_contexts = seen;
                    forge_requests = requests;
                    if seen >= run.statuses || summary {
                        run.forge_secs = Some(secs(started.elapsed()));
                    }
                }
            }
            polls += 1;
            if Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        let waited = self.cfg.timeout.as_secs();
        if run.reconciled_secs.is_none() {
            run.problems.push(format!(
                "commit reconciled: timed out after {waited} s (requests counted until then)"
            ));
            run.reconcile_requests = meta
                .requests()
                .zip(before.as_ref())
                .map(|(now, before)| now.since(before).0);
        }
        if run.notes_secs.is_none() {
            run.problems.push(format!(
                "notes: timed out after {waited} s ({} of {} statuses)",
                run.notes_contexts, run.statuses
            ));
        }
        if run.forge_secs.is_none() {
            run.problems.push(format!(
                "fake GitHub: timed out after {waited} s ({} of {} statuses)",
                run.forge_contexts, run.statuses
            ));
        }
        run.forge_requests = forge_requests;
        run.forge_request_kinds = forge.request_kinds();
        let counted = e2e::git_output(&remote.bare(), &["rev-list", "--count", "refs/notes/kok"]);
        run.notes_commits = String::from_utf8_lossy(&counted.stdout).trim().parse().ok();
        eprintln!(
            "[{} {}] reconciled {:?} s, notes {:?} s ({}/{}), fake GitHub {:?} s ({}/{})",
            run.fleet,
            run.mode,
            run.reconciled_secs,
            run.notes_secs,
            run.notes_contexts,
            run.statuses,
            run.forge_secs,
            run.forge_contexts,
            run.statuses
        );
        if run.reconciled_secs.is_none() {
            run.peak_rss_mib = peak_rss_mib(kok.pid());
            kok.kill();
            return Ok(run);
        }

        // Idle: nothing changes, once the last writes of the burst are done.
        let pid = kok.pid();
        run.settle_secs = Some(settle(&meta, pid, self.cfg.timeout).await.as_secs_f64());
        let cpu_before = cpu_seconds(pid);
        let requests_before = meta.requests();
        tokio::time::sleep(self.cfg.idle).await;
        let cpu_after = cpu_seconds(pid);
        run.idle_cpu_percent = cpu_before
            .zip(cpu_after)
            .map(|(a, b)| ((b - a) / self.cfg.idle.as_secs_f64().max(1e-9) * 1000.0).round() / 10.0);
        run.idle_requests = meta
            .requests()
            .zip(requests_before.as_ref())
            .map(|(now, before)| now.since(before).0);
        eprintln!(
            "[{} {}] settled {:?} s after the last status, then idle {} s: CPU {:?} %, requests {:?}",
            run.fleet,
            run.mode,
            run.settle_secs,
            self.cfg.idle.as_secs(),
            run.idle_cpu_percent,
            run.idle_requests
        );

        // Scraped as Prometheus scrapes it, after the idle window (the scrapes are not counted in it).
        let (bytes, gzipped, ms) = scrape(&self.http, &kok).await;
        run.metrics_bytes = bytes;
        run.metrics_gzip_bytes = gzipped;
        run.metrics_ms = ms;
        eprintln!(
            "[{} {}] /metrics {:?} bytes ({:?} gzip) in {:?} ms (median of {SCRAPES})",
            run.fleet, run.mode, bytes, gzipped, ms
        );

        if mode == Mode::Service {
            match kok_status(&kubeconfig) {
                Ok((ms, bytes)) => {
                    run.status_ms = Some(ms);
                    run.status_bytes = Some(bytes);
                    eprintln!(
                        "[{} {}] kok status: {bytes} bytes in {ms:.0} ms (median of {STATUS_RUNS})",
                        run.fleet, run.mode
                    );
                }
                Err(e) => run.problems.push(format!("kok status: {e:#}")),
            }
        }

        if mode == Mode::Local {
            let log = kok.log();
            let measured = web::against_kok(
                &self.http,
                &log,
                pid,
                self.cfg.idle,
                run.idle_cpu_percent,
                cpu_seconds,
            );
            match measured.await {
                Ok(w) => {
                    eprintln!("[{} {}] {}", run.fleet, run.mode, web::report_kok(&run.fleet, &w));
                    run.web = Some(w);
                }
                Err(e) => run.problems.push(format!("web view: {e:#}")),
            }
        }

        run.forge_requests = forge.requests().len();
        run.forge_request_kinds = forge.request_kinds();

        // Full resync of the unchanged fleet: kok restarted with a short resync interval; its first
        // pass is the resync. The first process's peak RSS is taken before it stops.
        run.peak_rss_mib = peak_rss_mib(pid);
        kok.terminate();
        let stop_deadline = Instant::now() + Duration::from_secs(30);
        while kok.try_wait().is_none() && Instant::now() < stop_deadline {
            tokio::time::sleep(POLL).await;
        }
        kok.kill();
        if let Meta::Local { kubeconfig, client } = &mut meta {
            let _ = std::fs::remove_file(kubeconfig);
            *client = None;
        }
        let second = options(self.cfg.resync_after);
        let restarted = Instant::now();
        kok = Kok::start(&second);
        let deadline = restarted + self.cfg.resync_after + self.cfg.timeout;
        let mut history: Vec<(Instant, Option<Counts>)> = Vec::new();
        loop {
            let now = Instant::now();
            history.push((now, meta.requests()));
            let text = metrics(&self.http, &kok).await.unwrap_or_default();
            if metric(&text, "kok_reconcile_duration_seconds_count").unwrap_or(0.0) >= 1.0 {
                let took = metric(&text, "kok_reconcile_duration_seconds_sum").unwrap_or(0.0);
                run.resync_secs = Some((took * 1000.0).round() / 1000.0);
                run.resync_kok_writes = metric(&text, "kok_objects_written_total");
                let began = now
                    .checked_sub(Duration::from_secs_f64(took) + POLL)
                    .unwrap_or(now);
                let at_start = history
                    .iter()
                    .rev()
                    .find(|(t, _)| *t <= began)
                    .or(history.first())
                    .and_then(|(_, c)| c.clone());
                run.resync_requests = meta
                    .requests()
                    .zip(at_start.as_ref())
                    .map(|(now, before)| now.since(before).0);
                break;
            }
            if Instant::now() > deadline || kok.try_wait().is_some() {
                run.problems.push(format!(
                    "full resync: none finished within {} s of the restart",
                    (self.cfg.resync_after + self.cfg.timeout).as_secs()
                ));
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        eprintln!(
            "[{} {}] full resync {:?} s, writes {:?}, requests {:?}",
            run.fleet, run.mode, run.resync_secs, run.resync_kok_writes, run.resync_requests
        );
        // One cluster changes (a sixth host), with kok restarted once more without a periodic resync (at
        // fleet size a resync takes a minute, and a change that meets one waits for it): [`CHANGES`] times
        // after one that warms its caches up, a different cluster each time, and the medians kept (a pass
        // of a few milliseconds is noisy alone).
        run.peak_rss_mib = match (run.peak_rss_mib, peak_rss_mib(kok.pid())) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        kok.kill();
        if let Meta::Local { kubeconfig, client } = &mut meta {
            let _ = std::fs::remove_file(kubeconfig);
            *client = None;
        }
        kok = Kok::start(&options(Duration::from_secs(24 * 3600)));
        let mut latencies = Vec::new();
        let mut passes = Vec::new();
        let mut api_writes = Vec::new();
        let mut kok_writes = Vec::new();
        'changes: for i in 0..=CHANGES {
            if i == 1 {
                latencies.clear();
                passes.clear();
                api_writes.clear();
                kok_writes.clear();
            }
            // A change to a kok at rest: the restarted one first digests what its watches listed (at
            // 10,000 × 20, 200,000 runs), and each change's own statuses are delivered before the next.
            settle(&meta, kok.pid(), self.cfg.timeout).await;
            let before = metrics(&self.http, &kok).await.unwrap_or_default();
            let written_before = metric(&before, "kok_objects_written_total");
            let passes_before = pass_time(&before);
            let requests_before = meta.requests();
            remote.write(&format!("clusters/c{i:05}/hosts.yml"), &hosts_yml(i, 6));
            // The clock starts at the push: committing in the benchmark's own clone of 10,000 cluster
            // directories (git add -A over every file) is not kok's time.
            let sha = remote.commit(&format!("c{i:05}: a sixth host"));
            let pushed = Instant::now();
            remote.push_head("main");
            let deadline = pushed + self.cfg.timeout;
            loop {
                if meta.reconciled_commit().await.as_deref() == Some(sha.as_str()) {
                    latencies.push((pushed.elapsed().as_secs_f64() * 1e4).round() / 10.0);
                    break;
                }
                if Instant::now() > deadline || kok.try_wait().is_some() {
                    run.problems
                        .push(format!("one-cluster change: not reconciled within {waited} s"));
                    break 'changes;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if let Some(writes) = meta
                .requests()
                .zip(requests_before.as_ref())
                .map(|(now, before)| now.since(before).writes())
            {
                api_writes.push(writes as f64);
            }
            let after = metrics(&self.http, &kok).await.unwrap_or_default();
            if let Some((a, b)) = metric(&after, "kok_objects_written_total").zip(written_before) {
                kok_writes.push(a - b);
            }
            if let (Some((count, sum)), Some((count0, sum0))) = (pass_time(&after), passes_before) {
                if count > count0 {
                    passes.push(((sum - sum0) / (count - count0) * 1e4).round() / 10.0);
                }
            }
        }
        run.change_ms = median(&mut latencies);
        run.change_pass_ms = median(&mut passes);
        run.change_api_writes = median(&mut api_writes).map(|w| w as usize);
        run.change_kok_writes = median(&mut kok_writes);
        run.peak_rss_mib = match (run.peak_rss_mib, peak_rss_mib(kok.pid())) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        eprintln!(
            "[{} {}] one-cluster change {:?} ms (the pass {:?} ms), API writes {:?} (by the pass {:?}); peak RSS {:?} MiB",
            run.fleet,
            run.mode,
            run.change_ms,
            run.change_pass_ms,
            run.change_api_writes,
            run.change_kok_writes,
            run.peak_rss_mib
        );

        kok.kill();
        Ok(run)
    }
}

// ---------------------------------------------------------------------------------------------
// Report

fn fmt_opt(v: Option<f64>, unit: &str) -> String {
    v.map(|v| format!("{v:.1}{unit}")).unwrap_or_else(|| "—".into())
}

fn counts(m: &Option<BTreeMap<String, usize>>) -> Option<Counts> {
    m.as_ref().map(|m| Counts(m.clone()))
}

/// ` (POST statuses: 3, …)`, or nothing without requests.
fn forge_kinds(kinds: &BTreeMap<String, usize>) -> String {
    if kinds.is_empty() {
        return String::new();
    }
    let listed: Vec<String> = kinds.iter().map(|(kind, n)| format!("{kind}: {n}")).collect();
    format!(" ({})", listed.join(", "))
}

fn table(runs: &[Run]) -> String {
    let mut out = String::new();
    out.push_str("| fleet | mode | commit reconciled | all statuses in notes | all statuses on fake GitHub | peak RSS | idle CPU | idle API requests | one-cluster change | full resync |\n");
    out.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
    for r in runs {
        let delivered = |at: Option<f64>, seen: usize| match at {
            Some(s) => format!("{s:.1} s ({seen})"),
            None => format!("timed out ({seen} of {})", r.statuses),
        };
        let notes_commits = r
            .notes_commits
            .map(|n| format!(", {n} notes commits"))
            .unwrap_or_default();
        let idle = match (counts(&r.idle_requests), r.idle_cpu_percent) {
            (Some(c), _) => format!(
                "{:.1}/s ({})",
                c.total() as f64 / r.idle_secs.max(1e-9),
                c.summary()
            ),
            (None, Some(_)) => "n/a".into(),
            (None, None) => "—".into(),
        };
        let change_writes = match (r.change_api_writes, r.change_kok_writes) {
            (Some(api), Some(pass)) => format!("{api} writes, {pass} by the pass"),
            (None, Some(pass)) => format!("{pass} writes by the pass"),
            (Some(api), None) => format!("{api} writes"),
            (None, None) => "—".into(),
        };
        let resync_requests = counts(&r.resync_requests)
            .map(|c| format!(", {} requests", c.total()))
            .unwrap_or_default();
        out.push_str(&format!(
            "| {} × {} | {} | {} | {}{} | {}, {} forge requests{} | {} | {} | {} | {} (pass {}, {}) | {} ({} writes{}) |\n",
            r.clusters,
            r.operations_per_cluster,
            r.mode,
            r.reconciled_secs
                .map(|s| format!("{s:.1} s"))
                .unwrap_or_else(|| "timed out".into()),
            delivered(r.notes_secs, r.notes_contexts),
            notes_commits,
            delivered(r.forge_secs, r.forge_contexts),
            r.forge_requests,
            forge_kinds(&r.forge_request_kinds),
            fmt_opt(r.peak_rss_mib, " MiB"),
            match (r.idle_cpu_percent, r.settle_secs) {
                (Some(cpu), Some(settle)) => format!("{cpu:.1} % (settled {settle:.1} s after the statuses)"),
                _ => fmt_opt(r.idle_cpu_percent, " %"),
            },
            idle,
            r.change_ms
                .map(|v| format!("{v:.0} ms"))
                .unwrap_or_else(|| "—".into()),
            r.change_pass_ms
                .map(|v| format!("{v:.0} ms"))
                .unwrap_or_else(|| "—".into()),
            change_writes,
            r.resync_secs
                .map(|v| format!("{v:.2} s"))
                .unwrap_or_else(|| "—".into()),
            r.resync_kok_writes
                .map(|w| format!("{w:.0}"))
                .unwrap_or_else(|| "—".into()),
            resync_requests,
        ));
    }
    out
}

/// A target of the issue beside a figure: met, missed, or not measurable here.
#[derive(Debug, Serialize)]
struct Verdict {
    fleet: String,
    mode: String,
    target: String,
    figure: String,
    met: Option<bool>,
}

fn verdicts(runs: &[Run]) -> Vec<Verdict> {
    let mut out = Vec::new();
    let find = |clusters: usize, ops: usize, mode: &str| {
        runs.iter()
            .find(|r| r.clusters == clusters && r.operations_per_cluster == ops && r.mode == mode)
    };
    for r in runs {
        let mut add = |target: String, figure: String, met: Option<bool>| {
            out.push(Verdict {
                fleet: r.fleet.clone(),
                mode: r.mode.clone(),
                target,
                figure,
                met,
            })
        };
        let service = r.mode == "service";
        let fleet = (r.clusters, r.operations_per_cluster);
        if fleet == (1000, 10) {
            add(
                "/metrics ≤ 1 MB".into(),
                metrics_size(r),
                r.metrics_bytes.map(|b| b <= 1_000_000),
            );
            add(
                "/metrics ≤ 100 ms".into(),
                fmt_opt(r.metrics_ms, " ms"),
                r.metrics_ms.map(|ms| ms <= 100.0),
            );
        }
        if fleet == (1000, 10) {
            let limit = if service { 10.0 } else { 15.0 };
            add(
                format!("commit reconciled ≤ {limit:.0} s"),
                fmt_opt(r.reconciled_secs, " s"),
                Some(r.reconciled_secs.is_some_and(|s| s <= limit)),
            );
        }
        if service && fleet == (10000, 20) {
            add(
                "commit reconciled ≤ 150 s".into(),
                fmt_opt(r.reconciled_secs, " s"),
                Some(r.reconciled_secs.is_some_and(|s| s <= 150.0)),
            );
            add(
                "one-cluster change, push to reconciled, ≤ 300 ms".into(),
                fmt_opt(r.change_ms, " ms"),
                Some(r.change_ms.is_some_and(|ms| ms <= 300.0)),
            );
            add(
                "full resync without a write".into(),
                fmt_opt(r.resync_kok_writes, " writes"),
                Some(r.resync_kok_writes == Some(0.0)),
            );
        }
        if service && r.clusters >= 10_000 {
            // The targets are set at 10,000 clusters; a larger fleet's figures show how the cost grows.
            let at_target = r.clusters == 10_000;
            let target = |set: &str, what: &str| match at_target {
                true => set.to_string(),
                false => format!("{what} (no target above 10,000 clusters)"),
            };
            add(
                target("/metrics at 10,000 clusters ≤ 2 MB and ≤ 1 s", "/metrics"),
                format!("{}, {}", metrics_size(r), fmt_opt(r.metrics_ms, " ms")),
                at_target.then(|| {
                    r.metrics_bytes.is_some_and(|b| b <= 2_000_000)
                        && r.metrics_ms.is_some_and(|ms| ms <= 1000.0)
                }),
            );
            add(
                target("kok status at 10,000 clusters ≤ 5 s", "kok status"),
                format!(
                    "{}, {}",
                    fmt_opt(r.status_ms, " ms"),
                    r.status_bytes
                        .map(|b| format!("{:.0} KB", b as f64 / 1000.0))
                        .unwrap_or_else(|| "—".into())
                ),
                at_target.then(|| r.status_ms.is_some_and(|ms| ms <= 5000.0)),
            );
        }
        if service && fleet == (1000, 10) {
            if let Some(small) = find(100, 10, "service").and_then(|s| s.reconciled_secs) {
                add(
                    "commit reconciled ≤ 12× the 100 × 10 figure".into(),
                    r.reconciled_secs
                        .map(|s| format!("{:.1}×", s / small.max(1e-9)))
                        .unwrap_or_else(|| "—".into()),
                    Some(r.reconciled_secs.is_some_and(|s| s <= 12.0 * small)),
                );
            }
        }
        if service && fleet == (10000, 1) {
            add(
                "commit reconciled ≤ 60 s".into(),
                fmt_opt(r.reconciled_secs, " s"),
                Some(r.reconciled_secs.is_some_and(|s| s <= 60.0)),
            );
        }
        if service {
            let reads = counts(&r.reconcile_requests).map(|c| c.verb("get") + c.verb("list"));
            add(
                format!(
                    "no GET or LIST per cluster while reconciling (< {} in all)",
                    r.clusters
                ),
                reads
                    .map(|n| format!("{n} GET+LIST"))
                    .unwrap_or_else(|| "—".into()),
                reads.map(|n| n < r.clusters),
            );
        }
        let after = r.notes_secs.zip(r.reconciled_secs).map(|(n, c)| n - c);
        add(
            "every status in the notes ≤ 10 s after the reconcile".into(),
            after
                .map(|s| format!("{s:.1} s after"))
                .unwrap_or_else(|| format!("{} of {}", r.notes_contexts, r.statuses)),
            Some(after.is_some_and(|s| s <= 10.0)),
        );
        if r.clusters * r.operations_per_cluster > FORGE_BUDGET {
            add(
                format!("fake GitHub: one summary context above {FORGE_BUDGET} operations"),
                format!("{} contexts, {} requests", r.forge_contexts, r.forge_requests),
                Some(r.forge_contexts <= FORGE_BUDGET + 1),
            );
        }
        if service {
            let idle = counts(&r.idle_requests).map(|c| c.total());
            add(
                "idle: no API requests (no Lease here: leader election off)".into(),
                idle.map(|n| format!("{n} requests"))
                    .unwrap_or_else(|| "—".into()),
                idle.map(|n| n == 0),
            );
            add(
                "idle: < 2 % of a core".into(),
                fmt_opt(r.idle_cpu_percent, " %"),
                r.idle_cpu_percent.map(|p| p < 2.0),
            );
        }
        if service && fleet == (1000, 10) {
            let requests = counts(&r.resync_requests).map(|c| c.total());
            add(
                "full resync: 0 writes, ≤ 1 s, no request per object".into(),
                format!(
                    "{}, {} writes, {} requests",
                    r.resync_secs
                        .map(|s| format!("{s:.2} s"))
                        .unwrap_or_else(|| "—".into()),
                    fmt_opt(r.resync_kok_writes, ""),
                    requests.map(|n| n.to_string()).unwrap_or_else(|| "—".into())
                ),
                Some(
                    r.resync_secs.is_some_and(|s| s <= 1.0)
                        && r.resync_kok_writes == Some(0.0)
                        && requests.is_some_and(|n| n < r.clusters),
                ),
            );
        }
        let rss_limit = match (r.mode.as_str(), fleet) {
            ("service", (1000, 10)) => Some(64.0),
            ("service", (10000, 1)) => Some(128.0),
            ("service", (10000, 20)) => Some(256.0),
            ("local", (1000, 10)) => Some(400.0),
            _ => None,
        };
        if let Some(limit) = rss_limit {
            add(
                format!("peak RSS ≤ {limit:.0} MiB"),
                fmt_opt(r.peak_rss_mib, " MiB"),
                Some(r.peak_rss_mib.is_some_and(|m| m <= limit)),
            );
        }
        if r.clusters > 100 {
            if let Some(small) = find(100, 10, &r.mode).and_then(|s| s.change_pass_ms) {
                add(
                    "one-cluster change (its pass) ≤ 2× the 100-cluster figure".into(),
                    r.change_pass_ms
                        .map(|c| format!("{c:.0} ms vs {small:.0} ms"))
                        .unwrap_or_else(|| "—".into()),
                    Some(r.change_pass_ms.is_some_and(|c| c <= 2.0 * small)),
                );
            }
        }
    }
    out
}

/// A target beside its figure: `met`, `MISSED`, or `n/a` when not measurable here.
fn mark(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "n/a",
    }
}

fn print_verdicts(verdicts: &[Verdict]) -> String {
    let mut out = String::new();
    for v in verdicts {
        let mark = mark(v.met);
        out.push_str(&format!(
            "{:>8} {:<7} {:<62} {:<40} {mark}\n",
            v.fleet, v.mode, v.target, v.figure
        ));
    }
    out
}

// The in-process API server's handlers wait on its store's lock on a worker thread, as a real API
// server's wait off its CPUs: more workers than cores keep one waiting handler from stalling the
// watches and the other requests.
#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> anyhow::Result<()> {
    let cfg = Config::from_env()?;
    let bench = Bench {
        cfg: &cfg,
        http: reqwest::Client::new(),
    };
    let mut runs = Vec::new();
    let mut health_runs = Vec::new();
    let mut rollout_runs = Vec::new();
    let mut kubespray_runs = Vec::new();
    for &(clusters, ops) in &cfg.sizes {
        for &mode in &cfg.modes {
            if mode == Mode::Kubespray {
                // Runs below, once per size of its own.
                continue;
            }
            if mode == Mode::Rollout {
                match rollout::run(&cfg, clusters).await {
                    Ok(run) => rollout_runs.push(run),
                    Err(e) => eprintln!("[{clusters} rollout] failed: {e:#}"),
                }
                continue;
            }
            if mode == Mode::Health {
                match health::run(&cfg, &bench.http, clusters, ops).await {
                    Ok(run) => health_runs.push(run),
                    Err(e) => eprintln!("[{clusters}x{ops} health] failed: {e:#}"),
                }
                continue;
            }
            match bench.run(clusters, ops, mode).await {
                Ok(run) => runs.push(run),
                Err(e) => eprintln!("[{clusters}x{ops} {}] failed: {e:#}", mode.as_str()),
            }
        }
    }
    for &(clusters, ops) in &cfg.kubespray_sizes {
        match kubespray::run(&cfg, clusters, ops).await {
            Ok(run) => kubespray_runs.push(run),
            Err(e) => eprintln!("[kubespray {clusters}x{ops}] failed: {e:#}"),
        }
    }
    let verdicts = verdicts(&runs);
    if !runs.is_empty() {
        println!("\n{}", table(&runs));
        println!("Peak RSS in local mode includes kok's embedded API server (one process); its API requests are not counted.");
        for r in &runs {
            for p in &r.problems {
                println!("{} {}: {p}", r.fleet, r.mode);
            }
        }
        println!("\nTargets:\n{}", print_verdicts(&verdicts));
    }
    for r in &runs {
        if let Some(w) = &r.web {
            println!("\nWeb view: {}", web::report_kok(&r.fleet, w));
        }
    }
    if !health_runs.is_empty() {
        println!("\nHealth round:\n{}", health::report(&health_runs));
    }
    if !rollout_runs.is_empty() {
        let service_rss = |clusters: usize| {
            runs.iter()
                .filter(|r| r.clusters == clusters && r.mode == "service")
                .find_map(|r| r.peak_rss_mib)
        };
        println!("\nRollout:\n{}", rollout::report(&rollout_runs, service_rss));
    }
    let every_gauge = metrics::run();
    println!("\n/metrics: {}", metrics::report(&every_gauge));
    if !kubespray_runs.is_empty() {
        println!("\nkubespray's layout:\n{}", kubespray::report(&kubespray_runs));
    }
    let mut web = Vec::new();
    for clusters in web::CLUSTERS {
        match web::run(&bench.http, clusters).await {
            Ok(run) => {
                println!("\nWeb view: {}", web::report(&run));
                web.push(run);
            }
            Err(e) => eprintln!("[web view {clusters}] failed: {e:#}"),
        }
    }
    let json = serde_json::json!({
        "runs": runs,
        "targets": verdicts,
        "health": health_runs,
        "rollout": rollout_runs,
        "kubespray": kubespray_runs,
        "web": web,
        "metrics_every_gauge": every_gauge,
    });
    std::fs::write(&cfg.json, serde_json::to_string_pretty(&json)?)
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", cfg.json.display()))?;
    println!("JSON written to {}", cfg.json.display());
    Ok(())
}
