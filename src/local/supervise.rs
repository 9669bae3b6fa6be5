//! A Job's host process from its start to its end: started in its own session behind the exit-status wrapper
//! ([`super::rundir`]), or picked up again from an earlier kok; watched until it exits, its deadline passes or
//! it is stopped; its output copied into the log as it comes; and what it leaves (process-group members, ssh
//! masters) ended with it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tracing::{info, warn};

use super::logs::{self, LogWriter};
use super::rundir::{self, Record, RunDir, Tail};
use super::status::{self, Outcome};
use crate::controller::summary;

/// How often an adopted process (not kok's child) is looked at, and a run's output copied into its log.
const POLL: Duration = Duration::from_millis(200);
/// The shell the exit-status wrapper runs in.
const SHELL: &str = "/bin/sh";
/// The program that starts the wrapper in a session of its own (util-linux).
const SETSID: &str = "setsid";

/// Why a running Job is stopped from outside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stop {
    /// The runner is stopping.
    Shutdown,
    /// The Job was deleted.
    Deleted,
}

/// How a Job's process ended, as its pod would show it.
pub(super) struct Finished {
    pub outcome: Outcome,
    /// The exit code, when the process exited by itself.
    pub exit_code: Option<i32>,
    /// The termination message the kubelet would keep.
    pub message: Option<String>,
}

impl Finished {
    pub fn setup_failed(message: String) -> Finished {
        Finished {
            outcome: Outcome::failed(status::REASON_RUNNER_SETUP_FAILED, message),
            exit_code: None,
            message: None,
        }
    }
}

/// A run's process: this runner's child, or one an earlier kok started.
pub(super) struct Process {
    pid: u32,
    ticks: u64,
    child: Option<tokio::process::Child>,
}

impl Process {
    /// The process an earlier kok started, as its run's record names it.
    pub fn adopted(record: &Record) -> Process {
        Process {
            pid: record.pid,
            ticks: record.start_ticks,
            child: None,
        }
    }

    /// Resolves once the process has ended.
    async fn ended(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.wait().await;
            return;
        }
        while rundir::same_process(self.pid, self.ticks) {
            tokio::time::sleep(POLL).await;
        }
    }

    /// Sends `signal` to the process's group, while the group is still the run's: the process has not been
    /// reaped (kok's child) or is still the one that started at `ticks` (adopted).
    fn signal_group(&mut self, signal: rustix::process::Signal) {
        // kok's own child keeps its group id until reaped; an adopted process is checked by its start time.
        let ours = self.child.is_some() || rundir::same_process(self.pid, self.ticks);
        if ours {
            signal_group(self.pid, signal);
        }
    }
}

/// Sends `signal` to the process group `pgid`; a group that is already gone is fine.
fn signal_group(pgid: u32, signal: rustix::process::Signal) {
    let Some(pid) = i32::try_from(pgid).ok().and_then(rustix::process::Pid::from_raw) else {
        return;
    };
    if let Err(err) = rustix::process::kill_process_group(pid, signal) {
        if err != rustix::io::Errno::SRCH {
            warn!(pgid, %err, "could not signal a Job's process group");
        }
    }
}

/// `program` as the `PATH` in `env` finds it (a path with a `/` is taken as it is, relative to `cwd`).
pub(super) fn find_program(program: &str, env: &[(String, String)], cwd: &Path) -> Option<PathBuf> {
    if program.contains('/') {
        let path = cwd.join(program);
        return path.is_file().then_some(path);
    }
    let path = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())?;
    std::env::split_paths(path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// Starts `argv` in `cwd` with exactly `env`, behind the exit-status wrapper, in a session of its own (so it
/// outlives kok), its stdout and stderr appended to the run's `output`; records its pid and start time in
/// `run.json`, and only then lets the wrapper start the command.
pub(super) async fn launch(
    run: &RunDir,
    record: &mut Record,
    cwd: &Path,
    argv: &[String],
    env: &[(String, String)],
) -> std::io::Result<Process> {
    use tokio::io::AsyncWriteExt;

    let out = run.open_output()?;
    let err = out.try_clone()?;
    let setsid = find_program(SETSID, env, cwd).or_else(|| find_program(SETSID, &host_path(), cwd));
    let mut cmd = match &setsid {
        Some(setsid) => {
            let mut cmd = tokio::process::Command::new(setsid);
            cmd.arg(SHELL);
            cmd
        }
        None => {
            // Without setsid the process still has a group of its own, which outlives kok too.
            warn!(
                "setsid (util-linux) is not installed; a Job's process gets only a process group of its own"
            );
            let mut cmd = tokio::process::Command::new(SHELL);
            cmd.process_group(0);
            cmd
        }
    };
    cmd.arg("-c")
        .arg(rundir::WRAPPER)
        .arg(run.root())
        .args(argv)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err));
    let mut child = cmd.spawn()?;
    let pid = child
        .id()
        .ok_or_else(|| std::io::Error::other("the process ended before its pid was read"))?;
    // The start time is set at fork and kept through exec; an unreaped child still has it.
    let ticks = rundir::start_ticks(pid)
        .ok_or_else(|| std::io::Error::other(format!("/proc/{pid}/stat could not be read")))?;
    record.pid = pid;
    record.start_ticks = ticks;
    let mut go = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("no stdin to the wrapper"))?;
    if let Err(err) = run.write_record(record) {
        // Closing stdin without `go` ends the wrapper before the command starts.
        drop(go);
        let _ = child.wait().await;
        return Err(err);
    }
    go.write_all(b"go\n").await?;
    drop(go);
    Ok(Process {
        pid,
        ticks,
        child: Some(child),
    })
}

fn host_path() -> Vec<(String, String)> {
    std::env::var("PATH")
        .map(|p| vec![("PATH".to_string(), p)])
        .unwrap_or_default()
}

/// A run being watched.
pub(super) struct Running {
    pub name: String,
    pub run: RunDir,
    pub process: Process,
    pub writer: Arc<Mutex<LogWriter>>,
    pub log_path: PathBuf,
    /// Between SIGTERM and SIGKILL.
    pub grace: Duration,
    pub deadline: Option<tokio::time::Instant>,
    /// The log already has this run's end line (kok stopped after writing it): nothing more is written.
    pub ended: bool,
}

impl Running {
    /// Appends a line of kok's own to the log (nothing once the log has the run's end line).
    pub fn log(&self, line: &str) {
        if self.ended {
            return;
        }
        if let Ok(mut w) = self.writer.lock() {
            if let Err(err) = w.write_line(line.as_bytes()) {
                warn!(path = %self.log_path.display(), %err, "could not write the log file");
            }
        }
    }
}

/// Copies the run's output into its log every [`POLL`] until `done` turns true, then a last time.
fn spawn_tail(
    run: &RunDir,
    writer: Arc<Mutex<LogWriter>>,
    mut done: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let mut tail = Tail::new(run);
    tokio::spawn(async move {
        loop {
            let last = *done.borrow();
            if let Ok(mut w) = writer.lock() {
                if let Err(err) = tail.pump(&mut w, last) {
                    warn!(%err, "could not copy a Job's output into its log");
                }
            }
            if last {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(POLL) => {}
                changed = done.changed() => {
                    // The watch was abandoned (the runner is going away): the next kok copies the rest.
                    if changed.is_err() {
                        return;
                    }
                }
            }
        }
    })
}

enum End {
    Exited,
    Deadline,
    Stopped(Stop),
}

/// Watches the run to its end and ends what it leaves behind. `None` when the Job must not get a finished
/// status (runner stopping, Job deleted).
pub(super) async fn supervise(mut r: Running, stop: &mut watch::Receiver<Option<Stop>>) -> Option<Finished> {
    let (done_tx, done_rx) = watch::channel(false);
    let tail = spawn_tail(&r.run, r.writer.clone(), done_rx);
    let deadline = r.deadline;
    let sleep_deadline = async {
        match deadline {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    let end = tokio::select! {
        () = r.process.ended() => End::Exited,
        () = sleep_deadline => End::Deadline,
        stopped = stop.wait_for(Option::is_some) => End::Stopped(stopped.ok().and_then(|s| *s).unwrap_or(Stop::Shutdown)),
    };
    match end {
        // What is left of the group goes with the "container".
        End::Exited => r.process.signal_group(rustix::process::Signal::KILL),
        End::Deadline | End::Stopped(_) => {
            r.process.signal_group(rustix::process::Signal::TERM);
            if tokio::time::timeout(r.grace, r.process.ended()).await.is_err() {
                r.process.signal_group(rustix::process::Signal::KILL);
            }
            r.process.ended().await;
            r.process.signal_group(rustix::process::Signal::KILL);
        }
    }
    let run = r.run.clone();
    match tokio::task::spawn_blocking(move || rundir::end_leftovers(&run)).await {
        Ok(0) => {}
        Ok(killed) => {
            info!(job = %r.name, killed, "ended what the Job's process left running (ssh masters, children)")
        }
        Err(err) => warn!(job = %r.name, %err, "could not end what the Job's process left running"),
    }
    let _ = done_tx.send(true);
    let _ = tail.await;
    conclude(&r, end)
}

/// The outcome of a run that ended with `end`, its end line written to the log.
fn conclude(r: &Running, end: End) -> Option<Finished> {
    let exit_code = match end {
        End::Exited => r.run.exit_status(),
        _ => None,
    };
    let message = match r.writer.lock() {
        Ok(mut w) => {
            let tail = w.take_tail();
            let written = std::fs::read_to_string(r.run.termination_log()).unwrap_or_default();
            termination_message_for(&written, exit_code != Some(0), &tail, &w)
        }
        Err(_) => None,
    };
    let now = jiff::Timestamp::now().to_string();
    let failed = || {
        Outcome::failed(
            status::REASON_BACKOFF_LIMIT_EXCEEDED,
            status::MESSAGE_BACKOFF_LIMIT_EXCEEDED,
        )
    };
    let (outcome, result) = match end {
        End::Exited if exit_code == Some(0) => {
            r.log(&logs::end_line(
                &now,
                logs::RESULT_SUCCEEDED,
                status::REASON_COMPLETIONS_REACHED,
                exit_code,
            ));
            (Some(Outcome::Succeeded), "succeeded")
        }
        End::Exited => {
            r.log(&logs::end_line(
                &now,
                logs::RESULT_FAILED,
                status::REASON_BACKOFF_LIMIT_EXCEEDED,
                exit_code,
            ));
            (Some(failed()), "failed")
        }
        End::Deadline => {
            r.log("kok: the Job ran longer than its activeDeadlineSeconds; its processes were killed");
            r.log(&logs::end_line(
                &now,
                logs::RESULT_FAILED,
                status::REASON_DEADLINE_EXCEEDED,
                None,
            ));
            (
                Some(Outcome::failed(
                    status::REASON_DEADLINE_EXCEEDED,
                    status::MESSAGE_DEADLINE_EXCEEDED,
                )),
                "deadline exceeded",
            )
        }
        End::Stopped(Stop::Deleted) => {
            r.log("kok: the Job was deleted while it ran; its processes were killed");
            r.log(&logs::end_line(&now, logs::RESULT_DELETED, "-", None));
            (None, "deleted")
        }
        End::Stopped(Stop::Shutdown) => {
            r.log("kok: kok stopped while the Job ran; its processes were killed");
            r.log(&logs::end_line(
                &now,
                logs::RESULT_INTERRUPTED,
                status::REASON_RUNNER_RESTARTED,
                None,
            ));
            (None, "interrupted")
        }
    };
    info!(job = %r.name, result, "Job process ended");
    outcome.map(|outcome| Finished {
        outcome,
        exit_code,
        message,
    })
}

/// The termination message the kubelet would keep: the file the process wrote, or, when it wrote none and
/// failed (`FallbackToLogsOnError`), the tail of its output. Secret content is redacted either way.
fn termination_message_for(
    written: &str,
    failed: bool,
    tail: &[String],
    writer: &LogWriter,
) -> Option<String> {
    let written = summary::termination_message(&writer.redact(written));
    if !written.trim().is_empty() {
        return Some(written);
    }
    (failed && !tail.is_empty()).then(|| summary::log_tail(tail))
}
