//! Forges at fleet size: a commit with more operations than `--status-max-contexts` shows one
//! `kok/summary` context (plus one per failed operation) on a forge while the git notes keep every
//! context; a rate-limited forge pauses alone and delivers the newest statuses after the pause.

use crate::common::git;
use crate::common::operation;
use crate::forge;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use forge::{ForgeServer, Reply};
use git::git;
use kok::api::{ClusterOperation, CommitStatus, StatusState};
use kok::metrics::Metrics;
use kok::report::{
    note_fingerprints, read_notes, status_fingerprint, Backoff, Forge, ForgeSink, NotesSink, Reporter, Sink,
    Sinks, Token,
};
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use operation::{operation, NS};
use tokio::sync::oneshot;

fn status(name: &str, state: StatusState) -> CommitStatus {
    CommitStatus {
        context: format!("kok/prod-bj/{name}"),
        state,
        description: format!("{state:?}").to_lowercase(),
        target_url: None,
        run: None,
    }
}

/// A testkit API server, a bare repository with one commit for the notes, and a metrics registry.
struct Harness {
    api: testkit::ApiServer,
    _dir: tempfile::TempDir,
    cache: std::path::PathBuf,
    sha: String,
    metrics: Metrics,
}

impl Harness {
    async fn start() -> Self {
        let api = testkit::ApiServer::start().await.unwrap();
        api.install_crds(&kok::api::crds()).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        git(&work, &["init", "-q", "-b", "main"]);
        std::fs::write(work.join("hosts.yml"), "all: {}\n").unwrap();
        git(&work, &["add", "."]);
        git(&work, &["commit", "-q", "-m", "add hosts"]);
        git(dir.path(), &["clone", "-q", "--bare", "work", "cache.git"]);
        let sha = git(&work, &["rev-parse", "HEAD"]);
        Harness {
            api,
            cache: dir.path().join("cache.git"),
            _dir: dir,
            sha,
            metrics: Metrics::new(),
        }
    }

    fn ops(&self) -> Api<ClusterOperation> {
        Api::namespaced(self.api.client(), NS)
    }

    fn notes(&self) -> Arc<dyn Sink> {
        Arc::new(NotesSink::new(&self.cache))
    }

    /// Starts a reporter over `sinks`; dropping the sender stops it.
    fn reporter(&self, sinks: Sinks) -> oneshot::Sender<()> {
        self.start_reporter(sinks).1
    }

    fn start_reporter(&self, sinks: Sinks) -> (Arc<Reporter>, oneshot::Sender<()>) {
        let (reporter, tx, _) = self.spawn_reporter(sinks);
        (reporter, tx)
    }

    /// Starts a reporter over `sinks`; dropping the sender stops it, and the task ends once it did.
    fn spawn_reporter(
        &self,
        sinks: Sinks,
    ) -> (Arc<Reporter>, oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
        let reporter = Reporter::new(self.api.client(), NS, sinks, fast());
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(reporter.clone().run(async move {
            let _ = rx.await;
        }));
        (reporter, tx, task)
    }

    async fn create(&self, name: &str, desired: Option<StatusState>) {
        self.ops()
            .create(&PostParams::default(), &operation(name, &self.sha))
            .await
            .unwrap();
        if let Some(state) = desired {
            self.set(name, state).await;
        }
    }

    async fn set(&self, name: &str, state: StatusState) {
        let patch = serde_json::json!({"status": {"desiredStatus": status(name, state)}});
        self.ops()
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Context → state of the notes on the commit.
    fn note_states(&self) -> BTreeMap<String, StatusState> {
        read_notes(&self.cache, &self.sha)
            .unwrap()
            .into_iter()
            .map(|e| (e.context, e.state))
            .collect()
    }

    /// Waits (bounded) until every named operation reported its desired status.
    async fn wait_all_reported(&self, names: &[&str]) {
        for _ in 0..800 {
            let mut done = true;
            for name in names {
                let op = self.ops().get(name).await.unwrap();
                done &= kok::report::status::desired_is_reported(&op, None, NS);
            }
            if done {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("not every operation of {names:?} reported its status");
    }

    /// Waits (bounded) until every named operation of a commit above the budget has its desired status
    /// delivered: recorded on the operation, or, when only the notes take it, in the note of the commit.
    async fn wait_all_delivered(&self, names: &[&str]) {
        for _ in 0..800 {
            let held = note_fingerprints(&self.cache, &self.sha).unwrap();
            let mut done = true;
            for name in names {
                let op = self.ops().get(name).await.unwrap();
                let desired = op.status.as_ref().and_then(|s| s.desired_status.as_deref());
                done &= kok::report::status::desired_is_reported(&op, None, NS)
                    || desired.is_some_and(|d| held.contains(&status_fingerprint(d)));
            }
            if done {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("not every operation of {names:?} reported its status");
    }
}

/// Waits (bounded) until `check` holds.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..800 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("never happened: {what}");
}

fn github(server: &ForgeServer) -> Arc<dyn Sink> {
    Arc::new(ForgeSink::new(Forge::GitHub, Some(&server.url()), "acme/infra", &Token::new("t")).unwrap())
}

fn gitlab(server: &ForgeServer) -> Arc<dyn Sink> {
    Arc::new(ForgeSink::new(Forge::GitLab, Some(&server.url()), "42", &Token::new("t")).unwrap())
}

/// Context → (state, description) of the newest status per context a forge received on `sha`.
fn newest(server: &ForgeServer, sha: &str) -> BTreeMap<String, (String, String)> {
    server
        .statuses()
        .into_iter()
        .filter(|(commit, ..)| commit == sha)
        .map(|(_, context, state, description)| (context, (state, description)))
        .collect()
}

#[tokio::test]
async fn a_commit_above_the_budget_shows_one_summary_and_its_failures_while_the_notes_hold_all() {
    let h = Harness::start().await;
    let server = ForgeServer::start().await;
    let names = ["op1", "op2", "op3", "op4", "op5"];
    for name in names {
        h.create(name, Some(StatusState::Pending)).await;
    }
    let sinks = Sinks::new(vec![h.notes(), github(&server)], h.metrics.clone()).with_max_contexts(3);
    let _stop = h.reporter(sinks);
    h.wait_all_delivered(&names).await;
    for name in ["op1", "op2", "op3"] {
        h.set(name, StatusState::Success).await;
    }
    h.set("op4", StatusState::Failure).await;
    h.set("op5", StatusState::Running).await;
    h.wait_all_delivered(&names).await;
    h.set("op5", StatusState::Success).await;
    h.wait_all_delivered(&names).await;

    let sha = h.sha.clone();
    eventually("the final summary on the forge", || {
        newest(&server, &sha)
            .get("kok/summary")
            .map(|(state, _)| state.as_str())
            == Some("failure")
    })
    .await;
    let shown = newest(&server, &sha);
    assert_eq!(
        shown.keys().map(String::as_str).collect::<Vec<_>>(),
        ["kok/prod-bj/op4", "kok/summary"],
        "only the summary and the failed operation's context reach the forge: {shown:#?}"
    );
    assert_eq!(
        shown["kok/summary"],
        ("failure".to_string(), "4/5 succeeded, 1 failed".to_string())
    );
    assert_eq!(shown["kok/prod-bj/op4"].0, "failure");
    let summaries: Vec<_> = server
        .statuses()
        .into_iter()
        .filter(|(_, context, ..)| context == "kok/summary")
        .collect();
    assert!(
        summaries.len() <= 2,
        "between the first and the final summary the updates wait a minute: {summaries:#?}"
    );
    assert_eq!(
        summaries[0].2, "pending",
        "the first summary says the operations are under way"
    );

    let notes = h.note_states();
    let expected: BTreeMap<String, StatusState> = names
        .iter()
        .map(|n| {
            let state = if *n == "op4" {
                StatusState::Failure
            } else {
                StatusState::Success
            };
            (format!("kok/prod-bj/{n}"), state)
        })
        .collect();
    assert_eq!(
        notes, expected,
        "the notes hold every operation's context, and no summary"
    );
}

#[tokio::test]
async fn statuses_only_the_notes_take_are_recorded_in_the_notes_alone_and_not_sent_again_after_a_restart() {
    let h = Harness::start().await;
    let server = ForgeServer::start().await;
    let names = ["op1", "op2", "op3", "op4", "op5"];
    for name in names {
        h.create(name, Some(StatusState::Pending)).await;
    }
    // The sinks `kok run` has: the notes, a forge, and the notifications' sink, which takes only
    // finished and held runs.
    let sinks = |metrics: &Metrics| {
        let notifier = kok::report::notify::Notifier::new(h.api.client(), NS, metrics.clone());
        Sinks::new(vec![h.notes(), github(&server)], metrics.clone())
            .with_max_contexts(3)
            .with_sink(notifier.sink())
    };
    let (_, first, task) = h.spawn_reporter(sinks(&h.metrics));
    eventually("every queued status in the notes", || h.note_states().len() == 5).await;
    h.set("op4", StatusState::Failure).await;
    h.wait_all_delivered(&names).await;
    for name in names {
        let st = h.ops().get(name).await.unwrap().status.unwrap();
        let desired = st.desired_status.as_deref().unwrap();
        if name == "op4" {
            assert_eq!(
                st.reported_digest.as_deref(),
                Some(desired.digest().as_str()),
                "a failure goes to the forge too, and is recorded on its operation"
            );
        } else {
            assert_eq!(
                st.reported_digest, None,
                "{name}: the notes alone took it, and are its record"
            );
        }
    }
    let versions = |ops: Vec<ClusterOperation>| -> Vec<Option<String>> {
        ops.into_iter().map(|op| op.metadata.resource_version).collect()
    };
    let list = || async { h.ops().list(&Default::default()).await.unwrap().items };
    let before = versions(list().await);
    drop(first);
    task.await.unwrap();

    // A restarted reporter lists the operations, reads the note back and sends nothing again.
    let metrics = Metrics::new();
    let forge_before = server.statuses().len();
    let (_reporter, _stop) = h.start_reporter(sinks(&metrics));
    eventually("the restarted reporter's summary", || {
        server.statuses().len() > forge_before
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        metrics.status_deliveries("git-notes", "delivered"),
        0,
        "the note held every status; none was sent to it again"
    );
    assert_eq!(
        versions(list().await),
        before,
        "no operation was written after the restart"
    );

    // A status that changes after the restart goes to the notes as before; a finished run's is taken
    // by the notifications too, which keep no record kok can read back: it is recorded on the run.
    h.set("op2", StatusState::Success).await;
    h.wait_all_reported(&["op2"]).await;
    assert_eq!(
        h.note_states().get("kok/prod-bj/op2"),
        Some(&StatusState::Success)
    );
    assert_eq!(metrics.status_deliveries("git-notes", "delivered"), 1);
}

fn fast() -> Backoff {
    Backoff {
        initial: Duration::from_millis(10),
        max: Duration::from_millis(200),
    }
}

#[tokio::test]
async fn a_commit_within_the_budget_shows_every_operation_on_the_forge() {
    let h = Harness::start().await;
    let server = ForgeServer::start().await;
    let names = ["op1", "op2", "op3"];
    for name in names {
        h.create(name, Some(StatusState::Pending)).await;
    }
    let sinks = Sinks::new(vec![h.notes(), gitlab(&server)], h.metrics.clone()).with_max_contexts(3);
    let _stop = h.reporter(sinks);
    h.wait_all_reported(&names).await;
    for name in names {
        h.set(name, StatusState::Success).await;
    }
    h.wait_all_reported(&names).await;

    let shown = newest(&server, &h.sha);
    let expected: BTreeMap<String, (String, String)> = names
        .iter()
        .map(|n| {
            (
                format!("kok/prod-bj/{n}"),
                ("success".to_string(), "success".to_string()),
            )
        })
        .collect();
    assert_eq!(shown, expected, "one context per operation and no summary");
    assert_eq!(h.note_states().len(), 3);
}

#[tokio::test]
async fn a_rate_limited_forge_pauses_alone_and_sends_the_newest_statuses_after() {
    let h = Harness::start().await;
    let limited = ForgeServer::start().await;
    let other = ForgeServer::start().await;
    let reset = (jiff::Timestamp::now().as_second() + 4).to_string();
    limited.script([
        Reply::new(403, r#"{"message": "API rate limit exceeded"}"#)
            .header("x-ratelimit-remaining", "0")
            .header("x-ratelimit-reset", &reset),
        Reply::new(429, r#"{"message": "You have exceeded a secondary rate limit"}"#)
            .header("retry-after", "1"),
    ]);
    let sinks = Sinks::new(
        vec![github(&limited), h.notes(), gitlab(&other)],
        h.metrics.clone(),
    );
    let _stop = h.reporter(sinks);

    h.create("a", Some(StatusState::Pending)).await;
    let sha = h.sha.clone();
    eventually("the first status refused by the rate limit", || {
        !limited.requests().is_empty()
    })
    .await;
    // While the GitHub sink is paused, the other sinks take every status at once, and the paused
    // sink will get only the newest status of each context.
    let ctx = |n: &str| format!("kok/prod-bj/{n}");
    h.set("a", StatusState::Running).await;
    eventually("the running status on the other forge", || {
        newest(&other, &sha).get(&ctx("a")).map(|s| s.0.as_str()) == Some("running")
    })
    .await;
    h.set("a", StatusState::Success).await;
    h.create("b", Some(StatusState::Pending)).await;
    eventually("every status on the other forge", || {
        let shown = newest(&other, &sha);
        shown.get(&ctx("a")).map(|s| s.0.as_str()) == Some("success")
            && shown.get(&ctx("b")).map(|s| s.0.as_str()) == Some("pending")
    })
    .await;
    // The sinks take a status at once, not in order: the notes may write it a moment after.
    eventually("every status in the notes", || {
        let notes = h.note_states();
        notes.get(&ctx("a")) == Some(&StatusState::Success)
            && notes.get(&ctx("b")) == Some(&StatusState::Pending)
    })
    .await;

    h.wait_all_reported(&["a", "b"]).await;
    let paused: Vec<_> = limited.requests();
    let other_requests = other.requests();
    let last_other = other_requests.iter().map(|r| r.at).max().unwrap();
    assert!(
        paused.iter().skip(1).all(|r| r.at > last_other),
        "the paused sink was asked nothing before the other sinks had every status"
    );
    let sent: Vec<(String, String)> = limited
        .statuses()
        .into_iter()
        .map(|(_, context, state, _)| (context, state))
        .collect();
    assert_eq!(
        sent[0],
        (ctx("a"), "pending".to_string()),
        "the first request was refused: {sent:?}"
    );
    assert!(
        !sent.contains(&(ctx("a"), "running".to_string())),
        "statuses superseded during the pause are not sent: {sent:?}"
    );
    assert_eq!(
        sent.len(),
        4,
        "refused (403); after the pause the newest of a and b, one refused (429) and sent again: {sent:?}"
    );
    let shown = newest(&limited, &sha);
    let expected: BTreeSet<(String, String)> = [
        (ctx("a"), "success".to_string()),
        (ctx("b"), "pending".to_string()),
    ]
    .into();
    let got: BTreeSet<(String, String)> = shown.into_iter().map(|(c, (s, _))| (c, s)).collect();
    assert_eq!(
        got, expected,
        "no status is lost: the newest of each context went out after the pause"
    );
}

#[tokio::test]
async fn a_commit_growing_past_the_budget_shows_no_operation_context_once_its_pass_finished() {
    let h = Harness::start().await;
    let server = ForgeServer::start().await;
    let sinks = Sinks::new(vec![h.notes(), github(&server)], h.metrics.clone())
        .with_max_contexts(2)
        .with_settle_quiet(Duration::from_secs(3600));
    let (reporter, _stop) = h.start_reporter(sinks);
    let names = ["op1", "op2", "op3"];
    for name in names {
        h.create(name, Some(StatusState::Pending)).await;
    }
    eventually("every queued status in the notes", || h.note_states().len() == 3).await;
    assert!(
        server.statuses().is_empty(),
        "the forge waits while the commit's operations may still grow"
    );
    // The reconcile pass that created the operations finished.
    reporter.settle();
    let sha = h.sha.clone();
    eventually("the summary of the queued operations", || {
        newest(&server, &sha).get("kok/summary").map(|s| s.1.as_str()) == Some("0/3 succeeded, 3 queued")
    })
    .await;
    for name in names {
        h.set(name, StatusState::Success).await;
    }
    eventually("the final summary", || {
        newest(&server, &sha).get("kok/summary")
            == Some(&("success".to_string(), "3/3 succeeded".to_string()))
    })
    .await;
    h.wait_all_delivered(&names).await;
    let shown = newest(&server, &sha);
    assert_eq!(
        shown.keys().map(String::as_str).collect::<Vec<_>>(),
        ["kok/summary"],
        "no operation's own context reached the forge: {shown:#?}"
    );
    assert_eq!(
        h.metrics.status_deliveries("git-notes", "delivered"),
        6,
        "the notes took each status once, held ones included"
    );
}

#[tokio::test]
async fn statuses_held_until_the_commit_settles_reach_the_forge_in_order() {
    let h = Harness::start().await;
    let server = ForgeServer::start().await;
    let sinks = Sinks::new(vec![h.notes(), github(&server)], h.metrics.clone())
        .with_settle_quiet(Duration::from_secs(3600));
    let (reporter, _stop) = h.start_reporter(sinks);
    h.create("a", Some(StatusState::Pending)).await;
    eventually("the queued status in the notes", || {
        h.note_states().get("kok/prod-bj/a") == Some(&StatusState::Pending)
    })
    .await;
    h.set("a", StatusState::Running).await;
    eventually("the running status in the notes", || {
        h.note_states().get("kok/prod-bj/a") == Some(&StatusState::Running)
    })
    .await;
    assert!(
        server.statuses().is_empty(),
        "held for the forge until the commit settles"
    );
    reporter.settle();
    h.wait_all_reported(&["a"]).await;
    h.set("a", StatusState::Success).await;
    h.wait_all_reported(&["a"]).await;
    let descriptions: Vec<String> = server.statuses().into_iter().map(|(_, _, _, d)| d).collect();
    assert_eq!(
        descriptions,
        ["pending", "running", "success"],
        "every status, in order, each once"
    );
}

#[tokio::test]
async fn operations_the_watch_shows_after_the_first_summary_are_counted_without_waiting_a_minute() {
    let h = Harness::start().await;
    let server = ForgeServer::start().await;
    let sinks = Sinks::new(vec![h.notes(), github(&server)], h.metrics.clone())
        .with_max_contexts(2)
        .with_settle_quiet(Duration::from_millis(200));
    let (reporter, _stop) = h.start_reporter(sinks);
    for name in ["op1", "op2", "op3"] {
        h.create(name, Some(StatusState::Pending)).await;
    }
    eventually("every queued status in the notes", || h.note_states().len() == 3).await;
    reporter.settle();
    let sha = h.sha.clone();
    eventually("the first summary", || {
        newest(&server, &sha).get("kok/summary").map(|s| s.1.as_str()) == Some("0/3 succeeded, 3 queued")
    })
    .await;
    // The pass's last operations reach the watch after the pass said it finished.
    for name in ["op4", "op5"] {
        h.create(name, Some(StatusState::Pending)).await;
    }
    // The wait is bounded well under the minute between updates of the same operations.
    eventually("a summary counting all five", || {
        newest(&server, &sha).get("kok/summary").map(|s| s.1.as_str()) == Some("0/5 succeeded, 5 queued")
    })
    .await;
    let summaries = server
        .statuses()
        .into_iter()
        .filter(|(_, context, ..)| context == "kok/summary")
        .count();
    assert_eq!(
        summaries, 2,
        "one summary once the last operations stopped appearing"
    );
}
