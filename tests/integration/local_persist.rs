//! Local mode keeps its meta-cluster across restarts: `kok run --local` stopped and started again
//! on the same `--state-dir` runs no operation twice, refuses damaged or busy state, and stops when
//! its store can no longer be written.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::common::git as git_cli;
use crate::common::kok as kok_process;
use git_cli::git;
use kok_process::{wait_for, LocalKok};

use k8s_openapi::api::batch::v1::Job;
use kok::api::{ClusterOperation, Phase};
use kube::api::ListParams;
use kube::{Api, ResourceExt};

const NS: &str = "kok-system";
const CLUSTER: &str = "local";
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

/// `kok run --local` on the fixture's repository and state dir, its output in `<name>.log`.
fn start(f: &Fixture, name: &str) -> LocalKok {
    start_with_env(f, name, &[])
}

fn start_with_env(f: &Fixture, name: &str, env: &[(&str, &str)]) -> LocalKok {
    let log = f.dir.path().join(format!("{name}.log"));
    let path = std::env::var_os("PATH").unwrap_or_default();
    LocalKok::spawn_env(&f.repo(), &f.state(), &log, path, &[], env)
}

async fn operation(client: &kube::Client, id: &str) -> Option<ClusterOperation> {
    let ops: Api<ClusterOperation> = Api::namespaced(client.clone(), NS);
    let list = ops.list(&ListParams::default()).await.ok()?;
    list.items
        .into_iter()
        .find(|op| op.spec.cluster == CLUSTER && op.spec.id == id)
}

async fn succeeded(kok: &mut LocalKok, client: &kube::Client, id: &str) -> ClusterOperation {
    let op = wait_for(&format!("operation {id} to finish"), kok, || async {
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
async fn delivered(kok: &mut LocalKok, f: &Fixture, sha: &str, prefix: &str) {
    wait_for(&format!("status {prefix:?} on {sha}"), kok, || async {
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
    let mut kok = start(f, "kok-1");
    kok.client_of(&f.state()).await;
    delivered(&mut kok, f, &sha, "kok/sync: success").await;
    assert!(kok.stop(), "kok exits 0 on SIGTERM; its log:\n{}", kok.log());
    f.state().join("api").join("store.db")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_on_the_same_state_dir_keeps_finished_operations_and_runs_none_twice() {
    let f = Fixture::new();
    let sha = f.commit_operations(&["first"]);
    let mut kok = start(&f, "kok-1");
    let client = kok.client_of(&f.state()).await;
    // Local mode takes mimalloc's settings but keeps glibc's malloc defaults (its embedded server
    // runs slower with one arena).
    assert_eq!(
        kok_process::environ_var(kok.pid(), "GLIBC_TUNABLES"),
        std::env::var("GLIBC_TUNABLES").ok()
    );
    assert_eq!(
        kok_process::environ_var(kok.pid(), "MIMALLOC_PURGE_DELAY").as_deref(),
        Some("0")
    );
    let logged = kok.log();
    let logged = logged
        .lines()
        .find(|line| line.contains("malloc settings"))
        .unwrap_or_else(|| panic!("kok logs its malloc settings; its log:\n{logged}"));
    assert!(logged.contains("MIMALLOC_ALLOW_THP=0"), "{logged}");
    let before = succeeded(&mut kok, &client, "first").await;
    delivered(&mut kok, &f, &sha, "kok/local/first: success").await;
    let jobs_before = jobs(&client).await;
    assert_eq!(jobs_before.len(), 1, "{jobs_before:?}");
    assert_eq!(f.runs("first"), 1);
    assert!(kok.stop(), "kok exits 0 on SIGTERM; its log:\n{}", kok.log());

    let mut kok = start(&f, "kok-2");
    let client = kok.client_of(&f.state()).await;
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

    let mut kok = start(&f, "kok-2");
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
    let mut first = start(&f, "kok-1");
    first.client_of(&f.state()).await;
    delivered(&mut first, &f, &sha, "kok/sync: success").await;
    let mut second = start(&f, "kok-2");
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
    let mut kok = start_with_env(&f, "kok-2", &[("KOK_TEST_API_DB_PAGE_LIMIT", &limit)]);
    kok.client_of(&f.state()).await;
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
    let mut kok = start(&f, "kok-3");
    kok.client_of(&f.state()).await;
    assert!(kok.stop(), "kok exits 0 on SIGTERM; its log:\n{}", kok.log());
}

/// Promise 8: git is the record. The state directory (local mode's whole meta-cluster) is deleted between
/// two starts on the same repository: the entry that succeeded is restored as succeeded, the one that
/// failed holds its queue again (and what it held stays held), the one that was running when the state
/// went holds with what to do, and nothing runs a second time.
#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_state_dir_reruns_nothing_a_failure_holds_again_and_a_running_entry_holds_with_what_to_do()
{
    let f = Fixture::new();
    std::fs::create_dir_all(f.repo().join("clusters/other")).expect("mkdir");
    f.write(
        "clusters/other/hosts.yml",
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n",
    );
    f.write("clusters/other/vars.yml", "greeting: hello\n");
    f.write(
        "fail.sh",
        "#!/bin/sh\necho run >> \"$1\"\necho 'it broke' >&2\nexit 1\n",
    );
    let release = f.dir.path().join("release");
    f.write(
        "slow.sh",
        "#!/bin/sh\necho run >> \"$1\"\nwhile [ ! -e \"$2\" ]; do sleep 0.1; done\n",
    );
    let mark = |id: &str| f.marks().join(id).display().to_string();
    f.write(
        "clusters/local/operations.yml",
        &format!(
            "- id: ok\n  type: shell\n  action: run.sh\n  extraArgs: [\"{}\"]\n\
             - id: bad\n  type: shell\n  action: fail.sh\n  extraArgs: [\"{}\"]\n\
             - id: after\n  type: shell\n  action: run.sh\n  extraArgs: [\"{}\"]\n",
            mark("ok"),
            mark("bad"),
            mark("after")
        ),
    );
    f.write(
        "clusters/other/operations.yml",
        &format!(
            "- id: slow\n  type: shell\n  action: slow.sh\n  extraArgs: [\"{}\", \"{}\"]\n",
            mark("slow"),
            release.display()
        ),
    );
    let sha = f.commit("operations that succeed, fail, wait behind the failure and run long");

    let mut kok = start(&f, "kok-1");
    kok.client_of(&f.state()).await;
    for line in [
        "kok/local/ok: success",
        "kok/local/bad: failure",
        "kok/other/slow: running",
    ] {
        delivered(&mut kok, &f, &sha, line).await;
    }
    wait_for("after held on the commit", &mut kok, || async {
        f.note(&sha)
            .lines()
            .any(|l| l.starts_with("kok/local/after: pending") && l.contains(" held: "))
            .then_some(())
    })
    .await;
    // A crash while slow runs, then the whole state directory is lost; the run goes on and ends.
    kok.kill();
    std::fs::remove_dir_all(f.state()).expect("delete the state directory");
    std::fs::write(&release, "").expect("release the slow run");

    let mut kok = start(&f, "kok-2");
    let client = kok.client_of(&f.state()).await;
    let phase_of = |id: &'static str| {
        let ops: Api<ClusterOperation> = Api::namespaced(client.clone(), NS);
        async move {
            let list = ops.list(&ListParams::default()).await.ok()?;
            let op = list.items.into_iter().find(|op| op.spec.id == id)?;
            op.status.map(|s| (s.phase, s.message.unwrap_or_default()))
        }
    };
    let (phase, message) = wait_for("ok restored", &mut kok, || async {
        phase_of("ok").await.filter(|(p, _)| p.is_terminal())
    })
    .await;
    assert_eq!(phase, Phase::Succeeded, "{message}");
    assert!(
        message.starts_with("restored from the record in git-notes"),
        "{message}; kok's log:\n{}",
        kok.log()
    );
    let (phase, message) = wait_for("bad restored", &mut kok, || async {
        phase_of("bad").await.filter(|(p, _)| p.is_terminal())
    })
    .await;
    assert_eq!(phase, Phase::Failed, "{message}");
    let (phase, message) = wait_for("after held again", &mut kok, || async {
        phase_of("after").await.filter(|(_, m)| m.starts_with("held: "))
    })
    .await;
    assert_eq!(phase, Phase::Queued, "{message}");
    assert!(message.contains("local/bad failed"), "{message}");
    let (phase, message) = wait_for("slow held with what to do", &mut kok, || async {
        phase_of("slow").await.filter(|(p, _)| p.is_terminal())
    })
    .await;
    assert_eq!(phase, Phase::Failed, "{message}");
    assert!(
        message.contains("was queued or running when kok's state was lost"),
        "{message}"
    );
    assert!(message.contains("bump its rerun"), "{message}");
    // The commit says so too, in place of "running".
    let line = wait_for("slow's failure on the commit", &mut kok, || async {
        f.note(&sha)
            .lines()
            .find(|l| l.starts_with("kok/other/slow: failure"))
            .map(str::to_string)
    })
    .await;
    assert!(line.contains("kok's state was lost"), "{line}");

    assert!(jobs(&client).await.is_empty(), "no run was started again");
    for (id, runs) in [("ok", 1), ("bad", 1), ("after", 0), ("slow", 1)] {
        assert_eq!(f.runs(id), runs, "{id} ran {} times", f.runs(id));
    }
    // The note still holds the success and the failure as they were, with the runs' identity.
    let note = f.note(&sha);
    assert!(note.contains("kok/local/ok: success"), "{note}");
    assert!(
        note.contains("\"digest\":"),
        "the record names each run's digest: {note}"
    );
    assert!(kok.stop(), "kok exits 0 on SIGTERM; its log:\n{}", kok.log());
}
