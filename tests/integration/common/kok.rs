//! The `kok` binary as a one-shot process (plan, history, ...) with its git cache in a temp dir,
//! `kok run --local` as a child process ([`LocalKok`]), and what a running kok process shows of itself.

use std::ffi::OsString;
use std::fs::File;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kok::api::ClusterOperation;
use kube::api::{Api, ListParams};

/// Longest wait for anything that involves an ansible run.
pub const WAIT: Duration = Duration::from_secs(60);
/// Time between two looks while waiting.
const POLL: Duration = Duration::from_millis(200);
/// Longest wait for kok to exit after SIGTERM before it is killed. A pass in flight stops after the
/// clusters it started, but a controller stopped before its watches' first lists gets a 10 s grace, and a
/// busy machine adds to that: the wait leaves room above it.
const STOP_WAIT: Duration = Duration::from_secs(30);

/// Runs `kok args...` with `KOK_CACHE_DIR=cache`; returns (success, stdout, stderr).
pub fn kok(args: &[&str], cache: &Path) -> (bool, String, String) {
    let (code, stdout, stderr) = kok_code(args, cache);
    (code == 0, stdout, stderr)
}

/// Runs `kok args...` with `KOK_CACHE_DIR=cache`; returns (exit code, stdout, stderr).
pub fn kok_code(args: &[&str], cache: &Path) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kok"))
        .args(args)
        .env("KOK_CACHE_DIR", cache)
        .env("KOK_LOG", "error")
        .output()
        .expect("kok runs");
    (
        out.status.code().expect("kok exits"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `kok plan --repo <repo> extra...`; returns the exit code and stdout.
pub fn plan(repo: &Path, extra: &[&str], cache: &Path) -> (i32, String) {
    let here = repo.display().to_string();
    let args: Vec<&str> = ["plan", "--repo", here.as_str()]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    let (code, stdout, _) = kok_code(&args, cache);
    (code, stdout)
}

/// Variable `name` in the environment of process `pid`, as `/proc/<pid>/environ` shows it.
pub fn environ_var(pid: u32, name: &str) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("read the process environment");
    let prefix = format!("{name}=");
    environ
        .split(|b| *b == 0)
        .filter_map(|var| std::str::from_utf8(var).ok())
        .find_map(|var| var.strip_prefix(prefix.as_str()).map(str::to_string))
}

/// `kok run --local` as a child process. Dropping it stops kok with SIGTERM (so it ends the ansible
/// runs it started), and kills it when it does not exit in time.
pub struct LocalKok {
    child: Option<Child>,
    log: PathBuf,
}

impl LocalKok {
    /// Starts `kok run --local --repo . --state-dir <state> --interval 1s` in `work_tree`, with `path` as its
    /// PATH, output appended to `log`, and `args` added. An earlier kubeconfig is removed, so
    /// [`LocalKok::client_of`] waits for this one.
    pub fn spawn_with(
        work_tree: &Path,
        state: &Path,
        log_path: &Path,
        path: OsString,
        args: &[&str],
    ) -> LocalKok {
        LocalKok::spawn_env(work_tree, state, log_path, path, args, &[])
    }

    /// [`LocalKok::spawn_with`] with more environment variables.
    pub fn spawn_env(
        work_tree: &Path,
        state: &Path,
        log_path: &Path,
        path: OsString,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> LocalKok {
        let _ = std::fs::remove_file(state.join("kubeconfig"));
        let log = File::options()
            .create(true)
            .append(true)
            .open(log_path)
            .expect("open kok log");
        let child = Command::new(env!("CARGO_BIN_EXE_kok"))
            .args(["run", "--local", "--interval", "1s", "--repo", "."])
            .arg("--state-dir")
            .arg(state)
            .args(args)
            .env("KOK_LOG", "info,kok=debug")
            .env("PATH", path)
            .env_remove("KOK_STATUS")
            .env_remove("KOK_WORKDIR")
            .env_remove("KOK_PATH")
            .env_remove("KOK_NAMESPACE")
            .env_remove("KOK_API_PORT")
            .envs(env.iter().copied())
            .current_dir(work_tree)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log"))
            .stderr(log)
            .spawn()
            .expect("kok starts");
        LocalKok {
            child: Some(child),
            log: log_path.to_path_buf(),
        }
    }

    /// Everything kok wrote so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The kok process's id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("kok runs").id()
    }

    /// kok's exit status, once it has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// Waits for kok to exit by itself (for up to [`WAIT`]); returns its status.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "kok did not exit within {WAIT:?}; its log:\n{}",
                self.log()
            );
            std::thread::sleep(POLL);
        }
    }

    /// Panics with kok's log when it has exited.
    pub fn assert_running(&mut self) {
        if let Some(child) = self.child.as_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("kok exited early with {status}; its log:\n{}", self.log());
            }
        }
    }

    /// Kills kok with SIGKILL, as a crash would: it ends nothing it started.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends SIGTERM and waits for kok to exit (killing it after a while); returns whether it exited
    /// by itself with success.
    pub fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return false;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + STOP_WAIT;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return status.success(),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return false;
                }
            }
        }
    }

    /// A client of the embedded API server, from `<state-dir>/kubeconfig`, once it answers.
    pub async fn client_of(&mut self, state: &Path) -> kube::Client {
        let path = state.join("kubeconfig");
        wait_for(
            "the embedded API server's kubeconfig and a first answer",
            self,
            || {
                let path = path.clone();
                async move {
                    let config = kube::config::Kubeconfig::read_from(&path).ok()?;
                    let options = kube::config::KubeConfigOptions::default();
                    let config = kube::Config::from_custom_kubeconfig(config, &options)
                        .await
                        .ok()?;
                    let client = kube::Client::try_from(config).ok()?;
                    let ops: Api<ClusterOperation> = Api::namespaced(client.clone(), "kok-system");
                    ops.list(&ListParams::default()).await.ok()?;
                    Some(client)
                }
            },
        )
        .await
    }
}

impl Drop for LocalKok {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Polls `check` every 200 ms for up to [`WAIT`]; panics naming `what`, with kok's log, when it never
/// yields a value or kok exits.
pub async fn wait_for<T, F, Fut>(what: &str, kok: &mut LocalKok, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    wait_within(WAIT, what, kok, check).await
}

/// [`wait_for`] for up to `patience`.
pub async fn wait_within<T, F, Fut>(patience: Duration, what: &str, kok: &mut LocalKok, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + patience;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        kok.assert_running();
        if Instant::now() > deadline {
            panic!(
                "timed out after {patience:?} waiting for {what}; kok's log:\n{}",
                kok.log()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}
