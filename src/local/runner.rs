//! The local Job runner: plays the kubelet and the Job controller for kok's Jobs, running each as a host process.
//!
//! It watches the Jobs labelled `app.kubernetes.io/managed-by=kok` in one namespace. A Job that is neither
//! finished nor started is run once:
//!
//! 1. its status gets `startTime` and `active: 1` (status subresource), as the Job controller would set, and
//!    it gets its pod, bound to this machine ([`super::pod`]): `Running` once the process runs, terminated as
//!    it ended (exit code, `Completed` or `Error`, the termination message), its log the run's log file;
//! 2. it gets a directory of its own, `<state dir>/run/<key>/` ([`super::rundir`]), holding its volumes
//!    ([`super::volumes`]), temporary files, fact cache and ssh control sockets, removed once it has ended;
//! 3. the working directory is the directory `--image-workdir` maps the container's image to; else
//!    `--workdir`; else a fresh export of the Job's `KOK_COMMIT` from the repository ([`super::checkout`]),
//!    entered at the directory holding kok.yml and the cluster root ([`crate::layout::layout_root`]), so actions
//!    kept in the repository run as pinned. The log says which directory ran the image and why; for an image no
//!    `--image-workdir` maps, the Job's status says so too. The container's `workingDir` names a directory
//!    inside the runner image, which local mode replaces, so it is not used;
//! 4. the container's `command` + `args` run (no shell unless the command is one) behind a small wrapper that
//!    records their exit status, in a session of their own (`setsid`), with the runner's environment minus its
//!    `KOK_*` variables, `PYTHONUNBUFFERED=1` (so ansible's output reaches the log as it happens), then the
//!    Job's env, then `KOK_CONF_DIR` / `KOK_AUTH_DIR` pointing at the host copies of `/conf` and `/auth`,
//!    `KOK_TERMINATION_LOG`, and the run directory's `TMPDIR`, `ANSIBLE_LOCAL_TEMP`,
//!    `ANSIBLE_CACHE_PLUGIN_CONNECTION`, `ANSIBLE_SSH_CONTROL_PATH_DIR` (and `ANSIBLE_SSH_CONTROL_PATH` when an
//!    ansible.cfg sets a control path) and `KOK_RUN_DIR`. Arguments and env values that point into a mount are
//!    rewritten to the host copy (see [`super::volumes`]);
//! 5. stdout and stderr go to one file in the run's directory, which the runner copies into the log file
//!    (`<state dir>/logs/<operation>.log`) line by line, Secret content redacted ([`super::supervise`]);
//! 6. `activeDeadlineSeconds`, counted from `startTime`, is enforced by sending SIGTERM to the process group,
//!    then SIGKILL after the pod's grace period (at most 30 s);
//! 7. the status is finished the way the Job controller does (see [`super::status`]): exit 0 is `Complete`,
//!    another exit `Failed`/`BackoffLimitExceeded`, the deadline `Failed`/`DeadlineExceeded`. When the process
//!    exits, what is left of its process group is killed, as a container's teardown would, and so are the ssh
//!    masters it started and any other process carrying its `KOK_RUN_DIR`.
//!
//! A run outlives kok as a pod outlives its controller. One attempt is a promise (DESIGN.md §1.4): a Job found
//! *started but unfinished* by a runner that did not start it is never run again. When its run's process still
//! runs (the same pid and start time) the runner watches it again, deadline included; when the process recorded
//! its exit status, that outcome is reported; otherwise it was lost, and the Job is marked `Failed` with reason
//! `RunnerRestarted` and a message saying to bump `rerun` (unless its log recorded how the process ended). Run
//! directories no unfinished Job owns (the Job was deleted while kok was stopped) have their processes killed.
//! When the runner stops (its `shutdown` future completes: kok's graceful stop) it kills the processes it runs,
//! says so, and leaves their Jobs as they are, for the next start to report. A Job deleted while it runs has
//! its process killed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Container, EnvVar, PodSpec, Secret};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use super::logs::{self, LogWriter};
use super::pod::{self, container, Exit};
use super::rundir::{self, Record, RunDir};
use super::status::{self, Outcome};
use super::supervise::{self, supervise, Finished, Process, Running, Stop};
use super::volumes::{self, Materialized, Sources};
use crate::api::{managed_selector, LABEL_CLUSTER, LABEL_CLUSTER_OPERATION, LABEL_OPERATION};
use crate::controller::job::{AUTH_DIR, CONF_DIR, ENV_AUTH_DIR, ENV_COMMIT, ENV_CONF_DIR};
use crate::controller::summary::ENV_TERMINATION_LOG;

/// Field manager of the runner's status writes.
pub const FIELD_MANAGER: &str = "kok-local-runner";
/// Longest wait between SIGTERM and SIGKILL, whatever the pod's `terminationGracePeriodSeconds`.
const MAX_GRACE: Duration = Duration::from_secs(30);
/// How long a missing ConfigMap of a Job's volumes is waited for before the run fails (the kubelet waits).
const CONFIG_MAP_WAIT: Duration = Duration::from_secs(30);
/// How often a missing ConfigMap is looked for again.
const CONFIG_MAP_POLL: Duration = Duration::from_millis(250);
/// Attempts at writing a finished status before giving up.
const STATUS_ATTEMPTS: u32 = 8;
/// Environment variable with the API server's URL for the Job's own requests.
pub const ENV_API_URL: &str = "KOK_API_URL";
/// Env var set to `1` for every Job (the Job's own env may override it).
const PYTHON_UNBUFFERED: &str = "PYTHONUNBUFFERED";

/// Where actions run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Workdir {
    /// Always in this directory (`--workdir`).
    Fixed(PathBuf),
    /// In a fresh export of the Job's `KOK_COMMIT` from this git repository (bare or not).
    Checkout {
        /// The repository holding the commits.
        repo_path: PathBuf,
    },
}

/// Settings of the local runner.
#[derive(Clone, Debug)]
pub struct RunnerConfig {
    /// Namespace whose Jobs are run.
    pub namespace: String,
    /// State directory; logs go to `<state_dir>/logs/<operation>.log`.
    pub state_dir: PathBuf,
    /// Where actions run.
    pub workdir: Workdir,
    /// Most Jobs running at once (at least 1).
    pub max_parallel: usize,
    /// URL of the API server for the Jobs' own requests (saving their cluster's credentials): what a pod
    /// reaches through its service account. `None`: the Jobs get none.
    pub api_url: Option<String>,
    /// Directories that run pinned images (`--image-workdir IMAGE=DIR`): a Job whose container image is a key
    /// runs in its directory; any other image runs in [`RunnerConfig::workdir`], and its log and status say so.
    pub image_workdirs: BTreeMap<String, PathBuf>,
}

/// Errors that stop the runner.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The state directory could not be created.
    #[error("could not create the state directory {path}: {source}")]
    StateDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Why a Job could not be run; becomes the message of a `RunnerSetupFailed` status (never holds Secret content).
#[derive(Debug, thiserror::Error)]
enum SetupError {
    #[error("could not read {kind} {name:?}: {source}")]
    Fetch {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("the Job has no pod spec or no container")]
    NoContainer,
    #[error("the container has no command; the local runner cannot use an image's entrypoint")]
    NoCommand,
    #[error(transparent)]
    Volumes(#[from] volumes::Error),
    #[error("the Job has no {ENV_COMMIT} env, so there is no commit to check out; pass --workdir")]
    NoCommit,
    #[error(transparent)]
    Checkout(#[from] super::checkout::Error),
    #[error("the checkout task failed: {0}")]
    CheckoutTask(#[from] tokio::task::JoinError),
    #[error("env {name}: {problem}")]
    Env { name: String, problem: String },
    #[error("could not create the Jobs' working directory {path}: {source}")]
    RunDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("could not open the log file {path}: {source}")]
    Log {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "could not start {program:?} in {cwd}: {source}; install it on this machine or fix the operation"
    )]
    Spawn {
        program: String,
        cwd: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

struct Ctx {
    client: Client,
    jobs: Api<Job>,
    cfg: RunnerConfig,
    slots: Semaphore,
}

/// Runs kok's Jobs in `cfg.namespace` on this machine until `shutdown` completes; then kills the processes it
/// runs and returns once they are gone.
pub async fn run(client: Client, cfg: RunnerConfig, shutdown: impl Future<Output = ()>) -> Result<(), Error> {
    let logs_dir = super::logs_dir(&cfg.state_dir);
    std::fs::create_dir_all(&logs_dir).map_err(|source| Error::StateDir {
        path: logs_dir.clone(),
        source,
    })?;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &cfg.namespace);
    let ctx = Arc::new(Ctx {
        client,
        jobs: jobs.clone(),
        slots: Semaphore::new(cfg.max_parallel.max(1)),
        cfg,
    });
    info!(namespace = %ctx.cfg.namespace, "local Job runner started");

    let stream = watcher(jobs, watcher::Config::default().labels(&managed_selector())).default_backoff();
    tokio::pin!(stream);
    tokio::pin!(shutdown);

    // Jobs this runner has taken: started, or reported as lost. Never considered again.
    let mut taken: HashSet<String> = HashSet::new();
    // Names and stop signals of the Jobs whose tasks are still going, by uid.
    let mut running: Tasks = HashMap::new();
    let mut listed: HashSet<String> = HashSet::new();
    // Run directories are swept once, after the first listing: those no task owns are left from Jobs that
    // finished or were deleted while kok was stopped.
    let mut swept = false;
    // Each task returns its Job's uid and whether the Job may be considered again (nothing ran).
    let mut tasks: JoinSet<(String, bool)> = JoinSet::new();

    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(done) = tasks.join_next() => {
                match done {
                    Ok((uid, release)) => {
                        running.remove(&uid);
                        if release {
                            taken.remove(&uid);
                        }
                    }
                    Err(err) => warn!(%err, "a Job task ended abnormally"),
                }
            }
            event = stream.next() => match event {
                Some(Ok(watcher::Event::Apply(job))) => consider(&ctx, job, &mut taken, &mut running, &mut tasks),
                Some(Ok(watcher::Event::InitApply(job))) => {
                    if let Some(uid) = job.uid() {
                        listed.insert(uid);
                    }
                    consider(&ctx, job, &mut taken, &mut running, &mut tasks);
                }
                Some(Ok(watcher::Event::Init)) => listed.clear(),
                Some(Ok(watcher::Event::InitDone)) => {
                    for (uid, (_, stop)) in &running {
                        if !listed.contains(uid) {
                            let _ = stop.send(Some(Stop::Deleted));
                        }
                    }
                    if !swept {
                        swept = true;
                        let owned: HashSet<String> = running.keys().map(|uid| rundir::key(uid)).collect();
                        let state_dir = ctx.cfg.state_dir.clone();
                        tokio::task::spawn_blocking(move || sweep(&state_dir, &owned));
                    }
                }
                Some(Ok(watcher::Event::Delete(job))) => {
                    if let Some((_, stop)) = job.uid().and_then(|uid| running.get(&uid)) {
                        info!(job = %job.name_any(), "Job deleted while running: killing its process");
                        let _ = stop.send(Some(Stop::Deleted));
                    }
                }
                Some(Err(err)) => warn!(%err, "watching Jobs failed; retrying"),
                None => break,
            },
        }
    }

    if running.is_empty() {
        info!("local Job runner stopping; no Job is running");
    } else {
        let names: Vec<&str> = running.values().map(|(name, _)| name.as_str()).collect();
        warn!(
            running = running.len(),
            jobs = %names.join(", "),
            "kok is stopping: killing the processes of the Jobs it runs; their logs say so, and at its next \
             start kok marks them failed (RunnerRestarted); bump `rerun` to run them again. Only a crash of kok \
             leaves them running, for the next start to pick up"
        );
    }
    for (_, stop) in running.values() {
        let _ = stop.send(Some(Stop::Shutdown));
    }
    while let Some(done) = tasks.join_next().await {
        if let Err(err) = done {
            warn!(%err, "a Job task ended abnormally");
        }
    }
    Ok(())
}

/// The Jobs whose tasks are going: their names and stop signals, by uid.
type Tasks = HashMap<String, (String, watch::Sender<Option<Stop>>)>;

fn consider(
    ctx: &Arc<Ctx>,
    job: Job,
    taken: &mut HashSet<String>,
    running: &mut Tasks,
    tasks: &mut JoinSet<(String, bool)>,
) {
    let Some(uid) = job.uid() else { return };
    if taken.contains(&uid) || status::is_finished(&job) {
        return;
    }
    if job.spec.as_ref().and_then(|s| s.suspend) == Some(true) {
        debug!(job = %job.name_any(), "Job is suspended; not running it");
        return;
    }
    taken.insert(uid.clone());
    let (stop_tx, stop_rx) = watch::channel(None);
    running.insert(uid.clone(), (job.name_any(), stop_tx));
    let ctx = ctx.clone();
    match status::start_time(&job) {
        Some(start) => {
            tasks.spawn(async move {
                let written = resume(&ctx, &job, start, stop_rx).await;
                (uid, !written)
            });
        }
        None => {
            tasks.spawn(async move {
                let ran = run_job(&ctx, &job, stop_rx).await;
                (uid, !ran)
            });
        }
    }
}

/// What the header and the log file of a Job are named after.
fn identity(job: &Job) -> logs::Header {
    let label = |key: &str| job.labels().get(key).cloned().unwrap_or_default();
    let operation = Some(label(LABEL_CLUSTER_OPERATION))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| job.name_any());
    let commit = container(job)
        .and_then(|c| c.env.as_ref())
        .and_then(|env| env.iter().find(|v| v.name == ENV_COMMIT))
        .and_then(|v| v.value.clone())
        .unwrap_or_default();
    logs::Header {
        start: String::new(),
        job: job.name_any(),
        operation,
        cluster: label(LABEL_CLUSTER),
        id: label(LABEL_OPERATION),
        commit,
    }
}

fn pod_spec(job: &Job) -> Option<&PodSpec> {
    job.spec.as_ref().and_then(|s| s.template.spec.as_ref())
}

/// Takes up a Job a previous runner started. Its run is picked up again when its process still runs (the same
/// pid and start time) or recorded its exit status. A run whose command never started (kok stopped before it
/// let the wrapper go, or before the run had a directory and a log) is started now. Otherwise, when the log
/// recorded how the process ended (kok stopped between the end of the process and the status write), that
/// outcome is reported; otherwise the Job is marked failed with `RunnerRestarted`, and the log says so. False
/// when the status could not be written (or, for a run started now, when it could not be started).
async fn resume(
    ctx: &Ctx,
    job: &Job,
    start: jiff::Timestamp,
    mut stop: watch::Receiver<Option<Stop>>,
) -> bool {
    let name = job.name_any();
    let uid = job.uid().unwrap_or_default();
    let found = RunDir::open(&ctx.cfg.state_dir, &uid).map(|run| {
        let record = run.record().filter(|r| r.uid == uid);
        (run, record)
    });
    let (run, record) = match found {
        Some((run, Some(record)))
            if run.exit_status().is_some() || rundir::same_process(record.pid, record.start_ticks) =>
        {
            (run, record)
        }
        Some((run, _)) => {
            let started = run.started();
            let cleanup = run.clone();
            let _ = tokio::task::spawn_blocking(move || {
                rundir::end_leftovers(&cleanup);
                remove_run_dir(&cleanup);
            })
            .await;
            if started {
                return report_lost(ctx, job, start, stop).await;
            }
            info!(job = %name, "the Job's command never started before kok stopped; starting it now");
            return run_job(ctx, job, stop).await;
        }
        None => {
            let path = logs::log_path(&ctx.cfg.state_dir, &identity(job).operation);
            if !logs::has_run(&path, &name) {
                info!(job = %name, "the Job's command never started before kok stopped; starting it now");
                return run_job(ctx, job, stop).await;
            }
            return report_lost(ctx, job, start, stop).await;
        }
    };
    let ended = logs::last_end(&record.log, &name).is_some();
    let writer = match LogWriter::open(&record.log, record.redactions.clone()) {
        Ok(w) => w,
        Err(err) => {
            warn!(job = %name, path = %record.log.display(), %err, "could not open the log file of a run kok picks up again");
            return false;
        }
    };
    let running = Running {
        name: name.clone(),
        process: Process::adopted(&record),
        writer: Arc::new(Mutex::new(writer)),
        log_path: record.log.clone(),
        grace: grace(job),
        deadline: deadline(job, start),
        ended,
        run: run.clone(),
    };
    let state = match run.exit_status() {
        Some(code) => format!("it had ended with exit status {code}"),
        None => format!("its process {} still runs", record.pid),
    };
    info!(job = %name, pid = record.pid, "kok picks up a run an earlier kok started: {state}");
    if !ended {
        running.log(&format!(
            "kok: kok restarted and picked this run up again: {state}"
        ));
    }
    let finished = supervise(running, &mut stop).await;
    complete(ctx, job, &run, finished, record.note.as_deref(), start, stop).await
}

/// Marks a started Job whose process is gone: its recorded outcome, else `RunnerRestarted`.
async fn report_lost(
    ctx: &Ctx,
    job: &Job,
    start: jiff::Timestamp,
    stop: watch::Receiver<Option<Stop>>,
) -> bool {
    let name = job.name_any();
    let path = logs::log_path(&ctx.cfg.state_dir, &identity(job).operation);
    let recorded = logs::last_end(&path, &name).and_then(|end| {
        let outcome = match end.result.as_str() {
            logs::RESULT_SUCCEEDED => Outcome::Succeeded,
            logs::RESULT_FAILED => Outcome::failed(&end.reason, status::message_for(&end.reason)),
            _ => return None,
        };
        let exit = match end.exit {
            Some(code) => Exit::exited(code, None),
            None if end.reason == status::REASON_DEADLINE_EXCEEDED => Exit::killed(None),
            None => Exit::lost(),
        };
        Some((outcome, exit))
    });
    let (outcome, exit) = match recorded {
        Some((outcome, exit)) => {
            info!(job = %name, ?outcome, "Job's process ended before kok stopped; reporting its recorded outcome");
            (outcome, exit)
        }
        None => {
            warn!(job = %name, "Job was started by an earlier run of kok and did not finish; marking it failed");
            let note = format!("kok: {}", status::MESSAGE_RUNNER_RESTARTED);
            let now = jiff::Timestamp::now().to_string();
            let end = logs::end_line(&now, logs::RESULT_FAILED, status::REASON_RUNNER_RESTARTED, None);
            let written = LogWriter::open(&path, Vec::new()).and_then(|mut w| {
                w.write_line(note.as_bytes())
                    .and_then(|()| w.write_line(end.as_bytes()))
            });
            if let Err(err) = written {
                warn!(job = %name, path = %path.display(), %err, "could not append to the log file");
            }
            let outcome = Outcome::failed(status::REASON_RUNNER_RESTARTED, status::MESSAGE_RUNNER_RESTARTED);
            (outcome, Exit::lost())
        }
    };
    let patch = pod::terminated(container(job), start, jiff::Timestamp::now(), &exit);
    pod::set_status(&ctx.client, job, &patch).await;
    write_finished(ctx, &name, &outcome, None, start, stop).await
}

/// Ends and removes the run directories no task owns (`owned`: their keys): left by Jobs that finished, or
/// were deleted, while kok was stopped. A process still running is killed, and its log says why. Blocking.
fn sweep(state_dir: &Path, owned: &HashSet<String>) {
    for run in RunDir::list(state_dir) {
        let key = run.root().file_name().map(|n| n.to_string_lossy().into_owned());
        if key.is_some_and(|k| owned.contains(&k)) {
            continue;
        }
        if let Some(record) = run.record() {
            if rundir::same_process(record.pid, record.start_ticks) {
                warn!(job = %record.job, pid = record.pid, "the Job of a run kok left running is gone: killing its processes");
                if let Some(pid) = i32::try_from(record.pid)
                    .ok()
                    .and_then(rustix::process::Pid::from_raw)
                {
                    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
                }
                let note = "kok: the Job was deleted while kok was stopped; its processes were killed";
                let end = logs::end_line(
                    &jiff::Timestamp::now().to_string(),
                    logs::RESULT_DELETED,
                    "-",
                    None,
                );
                let written = LogWriter::open(&record.log, Vec::new()).and_then(|mut w| {
                    w.write_line(note.as_bytes())
                        .and_then(|()| w.write_line(end.as_bytes()))
                });
                if let Err(err) = written {
                    warn!(path = %record.log.display(), %err, "could not append to the log file");
                }
            }
        }
        rundir::end_leftovers(&run);
        remove_run_dir(&run);
    }
}

fn remove_run_dir(run: &RunDir) {
    if let Err(err) = run.remove() {
        warn!(path = %run.root().display(), %err, "could not remove a run's directory");
    }
}

/// The Job's `activeDeadlineSeconds` as an instant, counted from `start` (its `startTime`).
fn deadline(job: &Job, start: jiff::Timestamp) -> Option<tokio::time::Instant> {
    let seconds = job.spec.as_ref()?.active_deadline_seconds?;
    let end = start.checked_add(jiff::SignedDuration::from_secs(seconds)).ok()?;
    let left = jiff::Timestamp::now().duration_until(end);
    let left = Duration::try_from(left).unwrap_or(Duration::ZERO);
    Some(tokio::time::Instant::now() + left)
}

/// The pod's grace period between SIGTERM and SIGKILL, at most [`MAX_GRACE`].
fn grace(job: &Job) -> Duration {
    pod_spec(job)
        .and_then(|p| p.termination_grace_period_seconds)
        .and_then(|s| u64::try_from(s).ok())
        .map_or(MAX_GRACE, |s| Duration::from_secs(s).min(MAX_GRACE))
}

/// Writes the finished status of a run that ended (when `finished`: not stopped from outside) and removes
/// its directory, unless the status could not be written: the next start finds the run there again.
async fn complete(
    ctx: &Ctx,
    job: &Job,
    run: &RunDir,
    finished: Option<Finished>,
    note: Option<&str>,
    start: jiff::Timestamp,
    stop: watch::Receiver<Option<Stop>>,
) -> bool {
    let written = match finished {
        Some(finished) => {
            let killed = matches!(&finished.outcome,
                Outcome::Failed { reason, .. } if reason == status::REASON_DEADLINE_EXCEEDED);
            let exit = match finished.exit_code {
                Some(code) => Some(Exit::exited(code, finished.message.clone())),
                None if killed => Some(Exit::killed(finished.message.clone())),
                None => None,
            };
            if let Some(exit) = exit {
                let patch = pod::terminated(container(job), start, jiff::Timestamp::now(), &exit);
                pod::set_status(&ctx.client, job, &patch).await;
            }
            write_finished(ctx, &job.name_any(), &finished.outcome, note, start, stop).await
        }
        None => true,
    };
    if written {
        let run = run.clone();
        let _ = tokio::task::spawn_blocking(move || remove_run_dir(&run)).await;
    }
    written
}

/// Writes the finished status (its condition messages ending with `note`, when given), retrying for a while;
/// gives up when the Job is gone or the runner stops. True when written, or when the Job is gone.
async fn write_finished(
    ctx: &Ctx,
    name: &str,
    outcome: &Outcome,
    note: Option<&str>,
    start: jiff::Timestamp,
    stop: watch::Receiver<Option<Stop>>,
) -> bool {
    let patch = status::finished_with(outcome, note, start, jiff::Timestamp::now());
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    let mut delay = Duration::from_millis(200);
    for attempt in 1..=STATUS_ATTEMPTS {
        match ctx.jobs.patch_status(name, &params, &Patch::Merge(&patch)).await {
            Ok(_) => {
                info!(job = %name, outcome = ?outcome, "Job finished");
                return true;
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {
                debug!(job = %name, "Job is gone; its status is not written");
                return true;
            }
            Err(err) => {
                warn!(job = %name, attempt, %err, "could not write the Job's finished status");
                if stop.borrow().is_some() {
                    return false;
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
    false
}

/// Runs one Job from start to finished status. False when it was not started (no slot before the runner
/// stopped, or its start could not be recorded), so that it may be considered again.
async fn run_job(ctx: &Ctx, job: &Job, mut stop: watch::Receiver<Option<Stop>>) -> bool {
    let name = job.name_any();
    let permit = tokio::select! {
        permit = ctx.slots.acquire() => permit,
        _ = stop.wait_for(Option::is_some) => return false,
    };
    let Ok(_permit) = permit else { return false };

    let start = jiff::Timestamp::now();
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    if let Err(err) = ctx
        .jobs
        .patch_status(&name, &params, &Patch::Merge(&status::started(start)))
        .await
    {
        // Not started: the next event about this Job considers it again.
        warn!(job = %name, %err, "could not mark the Job started; not running it yet");
        return false;
    }
    info!(job = %name, "running Job on this machine");
    pod::create(&ctx.client, job).await;

    let mut id = identity(job);
    id.start = start.to_string();
    let log_path = logs::log_path(&ctx.cfg.state_dir, &id.operation);
    let setup_failed = |run: Option<RunDir>, message: String| {
        warn!(job = %name, %message, "Job setup failed");
        if let Some(run) = run {
            remove_run_dir(&run);
        }
        Finished::setup_failed(message)
    };
    let finished = match prepare(ctx, job).await {
        Err((run, err)) => {
            let message = format!("the local runner could not start the Job: {err}");
            append_failure(&log_path, &id, &message);
            setup_failed(run, message)
        }
        Ok(prepared) => {
            let run = prepared.run.clone();
            let note = prepared.note.clone();
            match start_process(job, prepared, &log_path, &id, start).await {
                Err(message) => setup_failed(Some(run), message),
                Ok(running) => {
                    pod::set_status(&ctx.client, job, &pod::running(container(job), start)).await;
                    let finished = supervise(running, &mut stop).await;
                    complete(ctx, job, &run, finished, note.as_deref(), start, stop).await;
                    return true;
                }
            }
        }
    };
    if let Outcome::Failed { message, .. } = &finished.outcome {
        let exit = Exit::start_error(message);
        let patch = pod::terminated(container(job), start, jiff::Timestamp::now(), &exit);
        pod::set_status(&ctx.client, job, &patch).await;
    }
    write_finished(ctx, &name, &finished.outcome, None, start, stop).await;
    true
}

/// Opens the log, writes the run's header and workdir lines, and starts the prepared command. The error is
/// the message of a `RunnerSetupFailed` status, already in the log.
async fn start_process(
    job: &Job,
    prepared: Prepared,
    log_path: &Path,
    id: &logs::Header,
    start: jiff::Timestamp,
) -> Result<Running, String> {
    let Prepared {
        run,
        volumes,
        cwd,
        argv,
        env,
        redactions,
        workdir_line,
        note,
    } = prepared;
    let mut writer = LogWriter::open(log_path, redactions.clone()).map_err(|source| {
        let err = SetupError::Log {
            path: log_path.to_path_buf(),
            source,
        };
        format!("the local runner could not start the Job: {err}")
    })?;
    let header = [id.line(&cwd, &argv), format!("kok: {workdir_line}")];
    for line in &header {
        if let Err(err) = writer.write_line(line.as_bytes()) {
            warn!(path = %log_path.display(), %err, "could not write the log file");
        }
    }
    // The header is kok's, not the process's output.
    writer.take_tail();
    let mut record = Record {
        job: job.name_any(),
        uid: job.uid().unwrap_or_default(),
        log: log_path.to_path_buf(),
        redactions,
        note,
        ..Record::default()
    };
    let spawned = match supervise::find_program(&argv[0], &env, &cwd) {
        Some(_) => supervise::launch(&run, &mut record, &cwd, &argv, &env).await,
        None => Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "not found on the Job's PATH",
        )),
    };
    let process = spawned.map_err(|source| {
        let err = SetupError::Spawn {
            program: argv[0].clone(),
            cwd: cwd.clone(),
            source,
        };
        let message = format!("the local runner could not start the Job: {err}");
        let end = logs::end_line(
            &jiff::Timestamp::now().to_string(),
            logs::RESULT_FAILED,
            status::REASON_RUNNER_SETUP_FAILED,
            None,
        );
        for line in [format!("kok: {message}"), end] {
            let _ = writer.write_line(line.as_bytes());
        }
        message
    })?;
    // The volumes stay until the run's directory goes: a restarted kok may still be watching the process.
    volumes.keep();
    Ok(Running {
        name: job.name_any(),
        run,
        process,
        writer: Arc::new(Mutex::new(writer)),
        log_path: log_path.to_path_buf(),
        grace: grace(job),
        deadline: deadline(job, start),
        ended: false,
    })
}

fn append_failure(path: &Path, id: &logs::Header, message: &str) {
    let result = LogWriter::open(path, Vec::new()).and_then(|mut w| {
        w.write_line(id.line(Path::new("-"), &[]).as_bytes())?;
        w.write_line(format!("kok: {message}").as_bytes())?;
        let end = logs::end_line(
            &jiff::Timestamp::now().to_string(),
            logs::RESULT_FAILED,
            status::REASON_RUNNER_SETUP_FAILED,
            None,
        );
        w.write_line(end.as_bytes())
    });
    if let Err(err) = result {
        warn!(path = %path.display(), %err, "could not write the log file");
    }
}

/// A Job ready to run: its run directory, volumes, working directory, argv and env.
struct Prepared {
    run: RunDir,
    volumes: Materialized,
    cwd: PathBuf,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    redactions: Vec<String>,
    /// Which directory runs the Job's image, and why (see [`RunnerConfig::image_workdirs`]).
    workdir_line: String,
    /// What the Job's status says of it: the same line, for an image no `--image-workdir` maps.
    note: Option<String>,
}

async fn fetch_sources(ctx: &Ctx, pod: &PodSpec) -> Result<Sources, SetupError> {
    let refs = volumes::references(pod);
    let mut sources = Sources::default();
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.cfg.namespace);
    for name in refs.config_maps {
        // The kubelet retries a mount until its ConfigMap exists; a Job can come a moment before the apply
        // that writes the ConfigMaps it pins.
        let deadline = tokio::time::Instant::now() + CONFIG_MAP_WAIT;
        loop {
            let found = cms.get_opt(&name).await.map_err(|source| SetupError::Fetch {
                kind: "ConfigMap",
                name: name.clone(),
                source,
            })?;
            match found {
                Some(cm) => {
                    sources.config_maps.insert(name, cm);
                    break;
                }
                None if tokio::time::Instant::now() < deadline => tokio::time::sleep(CONFIG_MAP_POLL).await,
                None => break,
            }
        }
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.cfg.namespace);
    for name in refs.secrets {
        let found = secrets.get_opt(&name).await.map_err(|source| SetupError::Fetch {
            kind: "Secret",
            name: name.clone(),
            source,
        })?;
        if let Some(secret) = found {
            sources.secrets.insert(name, secret);
        }
    }
    Ok(sources)
}

/// Prepares the Job's run: its directory, volumes and working directory. On error, the run directory made so
/// far comes back for removal.
async fn prepare(ctx: &Ctx, job: &Job) -> Result<Prepared, (Option<RunDir>, SetupError)> {
    let pod = pod_spec(job).ok_or((None, SetupError::NoContainer))?;
    let container = container(job).ok_or((None, SetupError::NoContainer))?;
    let argv: Vec<String> = container
        .command
        .iter()
        .flatten()
        .chain(container.args.iter().flatten())
        .cloned()
        .collect();
    if argv.is_empty() {
        return Err((None, SetupError::NoCommand));
    }
    let sources = fetch_sources(ctx, pod).await.map_err(|e| (None, e))?;
    let plan = volumes::plan(pod, container, &sources).map_err(|e| (None, e.into()))?;
    let uid = job.uid().unwrap_or_default();
    let run = RunDir::create(&ctx.cfg.state_dir, &uid).map_err(|source| {
        let path = rundir::path(&ctx.cfg.state_dir, &uid);
        (None, SetupError::RunDir { path, source })
    })?;
    match fill(ctx, job, pod, container, argv, &sources, &plan, &run).await {
        Ok(prepared) => Ok(prepared),
        Err(err) => Err((Some(run), err)),
    }
}

/// The rest of [`prepare`], inside the run's directory.
#[allow(clippy::too_many_arguments)]
async fn fill(
    ctx: &Ctx,
    job: &Job,
    pod: &PodSpec,
    container: &Container,
    mut argv: Vec<String>,
    sources: &Sources,
    plan: &volumes::Plan,
    run: &RunDir,
) -> Result<Prepared, SetupError> {
    let mut redactions = volumes::redactions(plan);
    let dir = volumes::materialize(run.root(), &job.name_any(), plan)?;
    let image = container.image.clone().unwrap_or_default();
    let (cwd, workdir_line, mapped) = workdir(ctx, job, &image, &dir).await?;

    let mut env: Vec<(String, String)> = std::env::vars().filter(|(k, _)| !k.starts_with("KOK_")).collect();
    // Python (ansible) buffers a piped stdout in blocks; the log should follow the run line by line.
    env.push((PYTHON_UNBUFFERED.to_string(), "1".to_string()));
    for var in container.env.iter().flatten() {
        let (value, secret) = env_value(job, pod, var, sources)?;
        if secret {
            redactions.extend(crate::redact::secret_file_fragments(&value));
        }
        env.push((var.name.clone(), dir.rewrite(&value)));
    }
    for (mount, var) in [(CONF_DIR, ENV_CONF_DIR), (AUTH_DIR, ENV_AUTH_DIR)] {
        if let Some(host) = dir.host_dir(mount) {
            env.push((var.to_string(), host.display().to_string()));
        }
    }
    env.push((
        ENV_TERMINATION_LOG.to_string(),
        run.termination_log().display().to_string(),
    ));
    if let Some(url) = &ctx.cfg.api_url {
        env.push((ENV_API_URL.to_string(), url.clone()));
    }
    // Temporary files (the writable inventory with the cluster's credentials), the fact cache and the ssh
    // control sockets live in the run's directory, whatever the environment or an ansible.cfg says.
    let control_path = rundir::control_path_configured(&cwd, &env);
    env.extend(run.env(control_path));
    for arg in argv.iter_mut() {
        *arg = dir.rewrite(arg);
    }
    if argv[0].contains('/') && Path::new(&argv[0]).is_relative() {
        argv[0] = cwd.join(&argv[0]).display().to_string();
    }
    Ok(Prepared {
        run: run.clone(),
        volumes: dir,
        cwd,
        argv,
        env,
        redactions,
        note: (!mapped).then(|| workdir_line.clone()),
        workdir_line,
    })
}

/// The directory the Job's `image` runs in, the log line saying which and why, and whether `--image-workdir`
/// maps the image: the directory it maps the image to, else `--workdir`, else a checkout of the operation's
/// commit.
async fn workdir(
    ctx: &Ctx,
    job: &Job,
    image: &str,
    dir: &Materialized,
) -> Result<(PathBuf, String, bool), SetupError> {
    if let Some(mapped) = ctx.cfg.image_workdirs.get(image) {
        let line = format!("image {image} ran in {} (--image-workdir)", mapped.display());
        return Ok((mapped.clone(), line, true));
    }
    let (cwd, source) = match &ctx.cfg.workdir {
        Workdir::Fixed(path) => (path.clone(), format!("{} (--workdir)", path.display())),
        Workdir::Checkout { repo_path } => {
            let commit = identity(job).commit;
            if commit.is_empty() {
                return Err(SetupError::NoCommit);
            }
            let dest = dir.root().join("checkout");
            let repo = repo_path.clone();
            let target = dest.clone();
            let exported = commit.clone();
            tokio::task::spawn_blocking(move || super::checkout::export(&repo, &exported, &target)).await??;
            // Actions are paths from the directory holding kok.yml and the cluster root.
            let source_path = job
                .annotations()
                .get(crate::api::ANNOTATION_SOURCE_PATH)
                .map(String::as_str)
                .unwrap_or_default();
            let cwd = dest.join(crate::layout::layout_root(source_path));
            (cwd, format!("a checkout of the repository at commit {commit}"))
        }
    };
    let line = format!("image {image} is not mapped by --image-workdir; ran in {source}");
    Ok((cwd, line, false))
}

/// The value of one env var, and whether it came from a Secret.
fn env_value(
    job: &Job,
    pod: &PodSpec,
    var: &EnvVar,
    sources: &Sources,
) -> Result<(String, bool), SetupError> {
    let problem = |p: String| SetupError::Env {
        name: var.name.clone(),
        problem: p,
    };
    let Some(from) = &var.value_from else {
        return Ok((var.value.clone().unwrap_or_default(), false));
    };
    if let Some(field) = &from.field_ref {
        let path = field.field_path.as_str();
        let template_meta = job.spec.as_ref().and_then(|s| s.template.metadata.as_ref());
        let map_key = |prefix: &str, map: Option<&BTreeMap<String, String>>| {
            let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
            Some(map.and_then(|m| m.get(key)).cloned().unwrap_or_default())
        };
        let value = match path {
            "metadata.name" => Some(job.name_any()),
            "metadata.namespace" => Some(job.namespace().unwrap_or_default()),
            "metadata.uid" => Some(job.uid().unwrap_or_default()),
            "spec.serviceAccountName" => Some(pod.service_account_name.clone().unwrap_or_default()),
            "spec.nodeName" => Some(pod::NODE_NAME.to_string()),
            "status.hostIP" | "status.podIP" => Some(pod::HOST_IP.to_string()),
            _ => map_key("metadata.labels['", template_meta.and_then(|m| m.labels.as_ref())).or_else(|| {
                map_key(
                    "metadata.annotations['",
                    template_meta.and_then(|m| m.annotations.as_ref()),
                )
            }),
        };
        return value
            .map(|v| (v, false))
            .ok_or_else(|| problem(format!("fieldRef {path} is not supported by the local runner")));
    }
    if let Some(r) = &from.config_map_key_ref {
        let value = sources
            .config_maps
            .get(&r.name)
            .and_then(|cm| cm.data.as_ref())
            .and_then(|d| d.get(&r.key))
            .cloned();
        return match value {
            Some(v) => Ok((v, false)),
            None if r.optional == Some(true) => Ok((String::new(), false)),
            None => Err(problem(format!("ConfigMap {:?} has no key {:?}", r.name, r.key))),
        };
    }
    if let Some(r) = &from.secret_key_ref {
        let value = sources
            .secrets
            .get(&r.name)
            .and_then(|s| s.data.as_ref())
            .and_then(|d| d.get(&r.key))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned());
        return match value {
            Some(v) => Ok((v, true)),
            None if r.optional == Some(true) => Ok((String::new(), true)),
            None => Err(problem(format!("Secret {:?} has no key {:?}", r.name, r.key))),
        };
    }
    Err(problem(
        "only value, fieldRef, configMapKeyRef and secretKeyRef are supported by the local runner"
            .to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::batch::v1::JobSpec;
    use k8s_openapi::api::core::v1::{EnvVarSource, ObjectFieldSelector, PodTemplateSpec, SecretKeySelector};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_openapi::ByteString;

    use super::*;

    fn job() -> Job {
        let labels: BTreeMap<String, String> = [("kok.dev/cluster".to_string(), "a".to_string())].into();
        Job {
            metadata: ObjectMeta {
                name: Some("kok-a-x-1".into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            spec: Some(JobSpec {
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(labels),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(PodSpec::default()),
                },
                ..JobSpec::default()
            }),
            status: None,
        }
    }

    fn field(name: &str, path: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: path.into(),
                    api_version: None,
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        }
    }

    #[test]
    fn field_refs_resolve_against_the_job_and_its_pod_template() {
        let job = job();
        let pod = PodSpec::default();
        let sources = Sources::default();
        let value = |var: EnvVar| env_value(&job, &pod, &var, &sources).map(|(v, _)| v).unwrap();
        assert_eq!(value(field("N", "metadata.name")), "kok-a-x-1");
        assert_eq!(value(field("NS", "metadata.namespace")), "ns");
        assert_eq!(value(field("C", "metadata.labels['kok.dev/cluster']")), "a");
        let err = env_value(&job, &pod, &field("X", "status.phase"), &sources)
            .unwrap_err()
            .to_string();
        assert!(err.contains("fieldRef status.phase is not supported"), "{err}");
    }

    #[test]
    fn secret_key_refs_are_marked_as_secret() {
        let secret = Secret {
            data: Some([("token".to_string(), ByteString(b"s3cr3t-value".to_vec()))].into()),
            ..Secret::default()
        };
        let sources = Sources {
            secrets: [("creds".to_string(), secret)].into(),
            ..Sources::default()
        };
        let var = EnvVar {
            name: "TOKEN".into(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: "creds".into(),
                    key: "token".into(),
                    optional: None,
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        };
        let got = env_value(&job(), &PodSpec::default(), &var, &sources).unwrap();
        assert_eq!(got, ("s3cr3t-value".to_string(), true));
    }
}
