//! Local mode keeps its meta-cluster across restarts: `kok run --local` stopped and started again
//! on the same `--state-dir` runs no operation twice, refuses damaged or busy state, and stops when
//! its store can no longer be written.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

#[path = "common/git.rs"]
mod git_cli;
#[path = "common/kok.rs"]
mod kok_process;
use git_cli::git;

use k8s_openapi::api::batch::v1::Job;
use kok::api::{ClusterOperation, Phase};
use kube::api::ListParams;
use kube::{Api, ResourceExt};

const NS: &str = "kok-system";
const CLUSTER: &str = "local";
/// Longest wait for kok to do something.
const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(200);
/// Header line the local runner writes at the start of each run.
const RUN_HEADER: &str = "# kok-local-runner start=";

/// The script of every operation: appends a line to the file named by its first argument.
const SCRIPT: &str = "#!/bin/sh\necho \"run of $1\"\necho run >> \"$1\"\n";

/// A work tree with a `local` cluster and `run.sh`, plus kok's state dir and a marks dir, in one temp dir.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let f = Fixture {
            dir: tempfile::tempdir().expect("temp dir"),
        };
        std::fs::create_dir_all(f.repo().join("clusters").join(CLUSTER)).expect("mkdir");
        std::fs::create_dir_all(f.marks()).expect("mkdir");
        f.write(
            "clusters/local/hosts.yml",
            "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n",
        );
        f.write("clusters/local/vars.yml", "greeting: hello\n");
        f.write("run.sh", SCRIPT);
        git(&f.repo(), &["init", "-q", "-b", "main"]);
        f.commit("local cluster");
        f
    }

    fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn marks(&self) -> PathBuf {
        self.dir.path().join("marks")
    }

    fn write(&self, relative: &str, content: &str) {
        std::fs::write(self.repo().join(relative), content).expect("write repository file");
    }

    fn commit(&self, message: &str) -> String {
        git(&self.repo(), &["add", "-A"]);
        git(&self.repo(), &["commit", "-q", "-m", message]);
        git(&self.repo(), &["rev-parse", "HEAD"])
    }

    /// Commits operations.yml with one shell operation per id, each counting its runs in `<marks>/<id>`.
    fn commit_operations(&self, ids: &[&str]) -> String {
        let mut text = String::new();
        for id in ids {
            let marks = self.marks().join(id);
            text.push_str(&format!(
                "- id: {id}\n  type: shell\n  action: run.sh\n  extraArgs: [\"{}\"]\n",
                marks.display()
            ));
        }
        self.write("clusters/local/operations.yml", &text);
        self.commit(&format!("operations: {}", ids.join(", ")))
    }

    /// The `refs/notes/kok` note of `sha` (kok's commit statuses), as git shows it.
    fn note(&self, sha: &str) -> String {
        git(&self.repo(), &["log", "--notes=kok", "--format=%N", "-1", sha])
    }

    /// How many times the operation `id` ran.
    fn runs(&self, id: &str) -> usize {
        std::fs::read_to_string(self.marks().join(id))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    /// `kok logs local/<id>`.
    fn logs(&self, id: &str) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_kok"))
            .args(["logs", &format!("{CLUSTER}/{id}"), "--state-dir"])
            .arg(self.state())
            .stdin(Stdio::null())
            .output()
            .expect("kok logs runs");
        assert!(
            out.status.success(),
            "kok logs failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// `kok run --local` as a child process; dropping it sends SIGTERM, then kills it.
struct Kok {
    child: Option<Child>,
    log: PathBuf,
}

impl Kok {
    fn start(f: &Fixture, name: &str) -> Kok {
        Kok::start_with_env(f, name, &[])
    }

    fn start_with_env(f: &Fixture, name: &str, env: &[(&str, &str)]) -> Kok {
        let _ = std::fs::remove_file(f.state().join("kubeconfig"));
        let log = f.dir.path().join(format!("{name}.log"));
        let out = File::create(&log).expect("kok log");
        let child = Command::new(env!("CARGO_BIN_EXE_kok"))
            .args(["run", "--local", "--interval", "1s", "--repo"])
            .arg(f.repo())
            .arg("--state-dir")
            .arg(f.state())
            .env("KOK_LOG", "info,kok=debug")
            .env_remove("KOK_STATUS")
            .env_remove("KOK_WORKDIR")
            .env_remove("KOK_PATH")
            .env_remove("KOK_NAMESPACE")
            .env_remove("KOK_API_PORT")
            .envs(env.iter().copied())
            .current_dir(f.dir.path())
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("clone log"))
            .stderr(out)
            .spawn()
            .expect("kok starts");
        Kok {
            child: Some(child),
            log,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `GLIBC_TUNABLES` in the environment of the running kok process.
    fn glibc_tunables(&self) -> Option<String> {
        kok_process::glibc_tunables(self.child.as_ref().expect("kok runs").id())
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// Waits for kok to exit by itself; returns its status.
    fn wait_exit(&mut self) -> ExitStatus {
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

    /// SIGTERM, then waits; true when kok exited by itself with success.
    fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return false;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
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

    /// Polls `check` until it yields, kok exits, or [`WAIT`] passes (panicking with kok's log).
    async fn wait_for<T, Fut>(&mut self, what: &str, mut check: impl FnMut() -> Fut) -> T
    where
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(v) = check().await {
                return v;
            }
            if let Some(status) = self.exited() {
                panic!(
                    "kok exited with {status} while waiting for {what}; its log:\n{}",
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; kok's log:\n{}",
                self.log()
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// A client from `<state-dir>/kubeconfig`, once the embedded API server answers.
    async fn client(&mut self, f: &Fixture) -> kube::Client {
        let path = f.state().join("kubeconfig");
        self.wait_for("the embedded API server", || {
            let path = path.clone();
            async move {
                let kubeconfig = kube::config::Kubeconfig::read_from(&path).ok()?;
                let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                    .await
                    .ok()?;
                let client = kube::Client::try_from(config).ok()?;
                let ops: Api<ClusterOperation> = Api::namespaced(client.clone(), NS);
                ops.list(&ListParams::default()).await.ok()?;
                Some(client)
            }
        })
        .await
    }
}

impl Drop for Kok {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn operation(client: &kube::Client, id: &str) -> Option<ClusterOperation> {
    let ops: Api<ClusterOperation> = Api::namespaced(client.clone(), NS);
    let list = ops.list(&ListParams::default()).await.ok()?;
    list.items
        .into_iter()
        .find(|op| op.spec.cluster == CLUSTER && op.spec.id == id)
}

async fn succeeded(kok: &mut Kok, client: &kube::Client, id: &str) -> ClusterOperation {
    let op = kok
        .wait_for(&format!("operation {id} to finish"), || async {
            operation(client, id)
                .await
                .filter(|op| op.status.as_ref().is_some_and(|s| s.phase.is_terminal()))
        })
        .await;
    let status = op.status.clone().unwrap_or_default();
    assert_eq!(
        status.phase,
        Phase::Succeeded,
        "{id}: {:?}; kok's log:\n{}",
        status.message,
        kok.log()
    );
    op
}

/// Waits until the note of `sha` has a line starting with `prefix`: kok has delivered that status,
/// so a stop does not interrupt its delivery.
async fn delivered(kok: &mut Kok, f: &Fixture, sha: &str, prefix: &str) {
    kok.wait_for(&format!("status {prefix:?} on {sha}"), || async {
        f.note(sha).lines().any(|l| l.starts_with(prefix)).then_some(())
    })
    .await
}

async fn jobs(client: &kube::Client) -> Vec<Job> {
    let api: Api<Job> = Api::namespaced(client.clone(), NS);
    api.list(&ListParams::default()).await.expect("list Jobs").items
}

/// Runs kok until it has reconciled the first commit, stops it, and returns its store's database.
async fn synced_once(f: &Fixture) -> PathBuf {
    let sha = git(&f.repo(), &["rev-parse", "HEAD"]);
    let mut kok = Kok::start(f, "kok-1");
    kok.client(f).await;
    delivered(&mut kok, f, &sha, "kok/sync: success").await;
    assert!(kok.stop(), "kok exits 0 on SIGTERM; its log:\n{}", kok.log());
    f.state().join("api").join("store.db")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_on_the_same_state_dir_keeps_finished_operations_and_runs_none_twice() {
    let f = Fixture::new();
    let sha = f.commit_operations(&["first"]);
    let mut kok = Kok::start(&f, "kok-1");
    let client = kok.client(&f).await;
    // Local mode keeps glibc's malloc defaults (its embedded server runs slower with one arena):
    // it neither starts itself again with kok's tunables nor logs them.
    assert_eq!(kok.glibc_tunables(), std::env::var("GLIBC_TUNABLES").ok());
    assert!(!kok.log().contains("malloc settings"), "{}", kok.log());
    let before = succeeded(&mut kok, &client, "first").await;
    delivered(&mut kok, &f, &sha, "kok/local/first: success").await;
    let jobs_before = jobs(&client).await;
    assert_eq!(jobs_before.len(), 1, "{jobs_before:?}");
    assert_eq!(f.runs("first"), 1);
    assert!(kok.stop(), "kok exits 0 on SIGTERM; its log:\n{}", kok.log());

    let mut kok = Kok::start(&f, "kok-2");
    let client = kok.client(&f).await;
    let restored = operation(&client, "first")
        .await
        .expect("the ClusterOperation is still there when kok answers again");
    assert_eq!(restored.uid(), before.uid());
    assert_eq!(restored.status.as_ref().map(|s| s.phase), Some(Phase::Succeeded));

    // A second operation after the restart: once it has run, kok has reconciled the first one too
    // (operations of a cluster run in commit order).
    f.commit_operations(&["first", "second"]);
    succeeded(&mut kok, &client, "second").await;

    let after = operation(&client, "first").await.expect("first is still there");
    assert_eq!(
        after.uid(),
        before.uid(),
        "the ClusterOperation was not re-created"
    );
    assert_eq!(after.status.as_ref().map(|s| s.phase), Some(Phase::Succeeded));
    let jobs_after = jobs(&client).await;
    assert_eq!(jobs_after.len(), 2, "one Job per operation: {jobs_after:?}");
    let first_job = jobs_after
        .iter()
        .find(|j| j.name_any() == jobs_before[0].name_any())
        .expect("the first Job is still there");
    assert_eq!(
        first_job.uid(),
        jobs_before[0].uid(),
        "the first Job was not re-created"
    );
    assert_eq!(f.runs("first"), 1, "the first operation ran once");
    assert_eq!(f.runs("second"), 1);
    let log = f.logs("first");
    assert_eq!(log.matches(RUN_HEADER).count(), 1, "one run in the log:\n{log}");
    assert!(kok.stop(), "kok exits 0 on SIGTERM; its log:\n{}", kok.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_store_stops_kok_naming_the_file_instead_of_starting_empty() {
    let f = Fixture::new();
    let db = synced_once(&f).await;
    let mut bytes = std::fs::read(&db).expect("the store has a database");
    for b in bytes.iter_mut().skip(4096).take(64) {
        *b = 0xA5;
    }
    std::fs::write(&db, &bytes).expect("damage the database");

    let mut kok = Kok::start(&f, "kok-2");
    let status = kok.wait_exit();
    let log = kok.log();
    assert!(
        !status.success(),
        "kok started on a damaged store; its log:\n{log}"
    );
    assert!(log.contains(&db.display().to_string()), "{log}");
    assert!(log.contains("damaged"), "{log}");
    assert_eq!(
        std::fs::read(&db).expect("read the database"),
        bytes,
        "the database was rewritten"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_kok_on_a_state_dir_in_use_is_refused() {
    let f = Fixture::new();
    let sha = git(&f.repo(), &["rev-parse", "HEAD"]);
    let mut first = Kok::start(&f, "kok-1");
    first.client(&f).await;
    delivered(&mut first, &f, &sha, "kok/sync: success").await;
    let mut second = Kok::start(&f, "kok-2");
    let status = second.wait_exit();
    let log = second.log();
    assert!(
        !status.success(),
        "a second kok shared the state dir; its log:\n{log}"
    );
    assert!(log.contains("in use by another process"), "{log}");
    assert!(
        first.exited().is_none(),
        "the first kok still runs; its log:\n{}",
        first.log()
    );
    assert!(first.stop(), "kok exits 0 on SIGTERM; its log:\n{}", first.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_store_that_cannot_be_written_stops_kok_naming_the_state_dir() {
    let f = Fixture::new();
    let db = synced_once(&f).await;
    let pages = std::fs::metadata(&db).expect("the store has a database").len() / 4096;

    // The database may grow by two pages: as on a nearly full disk, the operations below do not fit.
    let limit = (pages + 2).to_string();
    let mut kok = Kok::start_with_env(&f, "kok-2", &[("KOK_TEST_API_DB_PAGE_LIMIT", &limit)]);
    kok.client(&f).await;
    let ids: Vec<String> = (0..30).map(|i| format!("op-{i:02}")).collect();
    f.commit_operations(&ids.iter().map(String::as_str).collect::<Vec<_>>());
    let status = kok.wait_exit();
    let log = kok.log();
    assert!(
        !status.success(),
        "kok kept running without its store; its log:\n{log}"
    );
    let dir = f.state().canonicalize().expect("state dir").join("api");
    assert!(
        log.contains(&format!("could not write its store in {}", dir.display())),
        "{log}"
    );
    assert!(log.contains("Free disk space"), "{log}");

    // With room again, kok starts on the same store.
    let mut kok = Kok::start(&f, "kok-3");
    kok.client(&f).await;
    assert!(kok.stop(), "kok exits 0 on SIGTERM; its log:\n{}", kok.log());
}
