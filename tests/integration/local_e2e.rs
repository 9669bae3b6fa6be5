//! Local mode end to end: `kok run --local` on a git work tree runs real ansible on this machine and
//! reports outcomes in the work tree's git notes, `kok history` and `kok logs`, across a restart.

use crate::local_e2e_support;

use k8s_openapi::api::core::v1::Secret;
use kok::api::{Cluster, Phase};
use kube::api::Api;
use local_e2e_support::{
    ansible_or_skip, finished, note_line, wait_for, LocalKok, LocalRepo, CLUSTER, FAILURE_MESSAGE, GREETING,
};

/// Marker of the header line the runner writes at the start of each run.
const RUN_HEADER: &str = "# kok-local-runner start=";

/// `kok logs <cluster>/<id> --state-dir <state>`: its stdout, panicking when it fails.
fn logs(repo: &LocalRepo, id: &str) -> String {
    let state = repo.state_dir();
    let target = format!("{CLUSTER}/{id}");
    let (ok, stdout, stderr) = repo.kok(&["logs", &target, "--state-dir", &state.to_string_lossy()]);
    assert!(ok, "kok logs {target} failed: {stderr}");
    stdout
}

fn phase_and_message(op: &kok::api::ClusterOperation) -> (Phase, String) {
    let status = op.status.clone().unwrap_or_default();
    (status.phase, status.message.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_committed_operation_runs_with_real_ansible_and_its_success_reaches_the_note_and_history() {
    if !ansible_or_skip("a_committed_operation_runs_with_real_ansible") {
        return;
    }
    let repo = LocalRepo::new();
    let mut kok = LocalKok::start(&repo);
    let client = kok.client(&repo).await;

    let sha = repo.commit_operations(&[("hello", "mark.yml", "hello")]);
    let op = finished(&mut kok, &client, "hello").await;
    let (phase, message) = phase_and_message(&op);
    assert_eq!(
        phase,
        Phase::Succeeded,
        "{message}; the run's log:\n{}",
        logs(&repo, "hello")
    );
    assert_eq!(
        repo.mark("hello").as_deref(),
        Some(format!("{GREETING} at {sha}\n").as_str())
    );
    assert_eq!(
        message,
        format!(
            "image {} is not mapped by --image-workdir; ran in a checkout of the repository at commit {sha}",
            kok::api::DEFAULT_IMAGE
        ),
        "the status says which directory ran the image"
    );
    assert_eq!(repo.runs("hello"), 1);

    let note = note_line(&mut kok, &repo, &sha, "kok/local/hello: success ").await;
    let line = note
        .lines()
        .find(|l| l.starts_with("kok/local/hello: success "))
        .unwrap();
    assert!(
        line.contains(" - succeeded in ")
            && line.ends_with(": 1 host, 2 changed; not verified: no kubeconfig"),
        "the status says what ansible did: {line}"
    );
    assert_eq!(
        op.status
            .as_ref()
            .and_then(|s| s.summary.as_ref())
            .map(|s| s.total.changed),
        Some(2)
    );
    assert!(
        note.lines().any(|l| l.starts_with("kok/sync: success ")),
        "{note}"
    );

    let history = repo.history(CLUSTER, &[]);
    assert!(
        history.contains(&sha[..7]),
        "the commit is in the history:\n{history}"
    );
    assert!(history.contains("operations: hello"), "{history}");
    assert!(history.contains("kok/local/hello: success "), "{history}");
    assert!(
        history.contains(": 1 host, 2 changed"),
        "history prints the summary:\n{history}"
    );
    let json = repo.history(CLUSTER, &["--output", "json"]);
    let json: serde_json::Value = serde_json::from_str(&json).expect("history JSON");
    let hello = &json[0]["operations"][0];
    assert_eq!(hello["operation"], "hello", "{json:#}");
    assert_eq!(
        hello["run"]["summary"]["hosts"]["localhost"]["changed"], 2,
        "the summary, whole: {json:#}"
    );
    let changed = local_e2e_support::git(&repo.path(), &["status", "--porcelain", "--ignored"]);
    assert_eq!(changed, "", "kok leaves the work tree's files alone");
    assert!(kok.stop(), "kok exits 0 on SIGTERM; its log:\n{}", kok.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_playbook_fails_its_operation_and_its_log_holds_the_failure() {
    if !ansible_or_skip("a_failing_playbook_fails_its_operation") {
        return;
    }
    let repo = LocalRepo::new();
    let mut kok = LocalKok::start(&repo);
    let client = kok.client(&repo).await;

    let sha = repo.commit_operations(&[("broken", "fail.yml", "broken")]);
    let op = finished(&mut kok, &client, "broken").await;
    let (phase, message) = phase_and_message(&op);
    assert_eq!(phase, Phase::Failed, "{message}");

    let log = logs(&repo, "broken");
    assert!(
        log.contains(FAILURE_MESSAGE),
        "the ansible output is in the log:\n{log}"
    );
    assert!(log.contains("result=Failed"), "{log}");
    assert_eq!(log.matches(RUN_HEADER).count(), 1, "{log}");
    let note = note_line(&mut kok, &repo, &sha, "kok/local/broken: failure ").await;
    assert!(
        note.contains(&format!(
            " - failed at TASK [Fail on purpose] on localhost: {FAILURE_MESSAGE}"
        )),
        "the status says what failed, in ansible's words:\n{note}"
    );
    let failure = op
        .status
        .and_then(|s| s.failure)
        .expect("the failure is in the status");
    assert_eq!(failure.task.as_deref(), Some("Fail on purpose"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_cut_by_a_restart_is_not_run_again_and_holds_later_operations_until_it_is_removed() {
    if !ansible_or_skip("a_run_cut_by_a_restart_is_not_run_again") {
        return;
    }
    let repo = LocalRepo::new();
    let mut kok = LocalKok::start(&repo);
    kok.client(&repo).await;

    let slow = ("slow", "sleep.yml", "slow");
    let sha = repo.commit_operations(&[slow]);
    wait_for("the sleeping playbook to start", &mut kok, || async {
        (repo.runs("slow") == 1).then_some(())
    })
    .await;
    assert!(kok.stop(), "kok exits 0 on SIGTERM; its log:\n{}", kok.log());

    let mut kok = LocalKok::start(&repo);
    let client = kok.client(&repo).await;
    let op = finished(&mut kok, &client, "slow").await;
    let (phase, message) = phase_and_message(&op);
    assert_eq!(phase, Phase::Failed, "{message}");
    assert!(message.starts_with("RunnerRestarted"), "{message}");
    assert!(
        message.contains("rerun"),
        "the message says how to run it again: {message}"
    );
    note_line(&mut kok, &repo, &sha, "kok/local/slow: failure ").await;

    let after = ("after", "mark.yml", "after");
    let held = repo.commit_operations(&[slow, after]);
    let note = note_line(&mut kok, &repo, &held, "kok/local/after: pending ").await;
    assert!(
        note.contains(&format!(
            " - held: local/slow failed at {}; bump its rerun or remove it from operations.yml to go on",
            &sha[..7]
        )),
        "{note}"
    );
    assert_eq!(repo.runs("after"), 0, "a held operation does not run");

    let later = repo.commit_operations(&[after]);
    let op = finished(&mut kok, &client, "after").await;
    let (phase, message) = phase_and_message(&op);
    assert_eq!(
        phase,
        Phase::Succeeded,
        "{message}; the run's log:\n{}",
        logs(&repo, "after")
    );
    assert_eq!(
        repo.mark("after").as_deref(),
        Some(format!("{GREETING} at {held}\n").as_str()),
        "the run is pinned to the commit that created it, not {later}"
    );

    assert_eq!(repo.runs("slow"), 1, "the interrupted playbook ran once");
    let log = logs(&repo, "slow");
    assert_eq!(log.matches(RUN_HEADER).count(), 1, "one run in the log:\n{log}");
    assert!(log.contains("RunnerRestarted"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn kubespray_credentials_survive_between_runs_and_the_kubeconfig_becomes_a_secret() {
    if !ansible_or_skip("kubespray_credentials_survive_between_runs") {
        return;
    }
    let repo = LocalRepo::new();
    let mut kok = LocalKok::start(&repo);
    let client = kok.client(&repo).await;

    let first = ("first", "credentials.yml", "first");
    let sha = repo.commit_operations(&[first]);
    let op = finished(&mut kok, &client, "first").await;
    let (phase, message) = phase_and_message(&op);
    assert_eq!(
        phase,
        Phase::Succeeded,
        "{message}; the run's log:\n{}",
        logs(&repo, "first")
    );
    let key = repo.mark("first").expect("the first run wrote its key");
    assert_eq!(key.len(), 64, "{key}");
    let note = note_line(&mut kok, &repo, &sha, "kok/local/first: success ").await;
    assert!(
        note.contains("; kubeconfig saved to Secret local-kubeconfig"),
        "the status says the kubeconfig changed:\n{note}"
    );

    let second = repo.commit_operations(&[first, ("second", "credentials.yml", "second")]);
    let op = finished(&mut kok, &client, "second").await;
    assert_eq!(
        phase_and_message(&op).0,
        Phase::Succeeded,
        "{}",
        logs(&repo, "second")
    );
    assert_eq!(
        repo.mark("second"),
        Some(key.clone()),
        "the second run saw the first run's key"
    );
    let note = note_line(&mut kok, &repo, &second, "kok/local/second: success ").await;
    assert!(
        !note.contains("kubeconfig saved"),
        "an unchanged kubeconfig is not news:\n{note}"
    );

    let secrets: Api<Secret> = Api::namespaced(client.clone(), "kok-system");
    let data = |s: Secret| s.data.unwrap_or_default();
    let credentials = data(
        secrets
            .get("local-credentials")
            .await
            .expect("credentials Secret"),
    );
    assert_eq!(
        credentials
            .get("kubeadm_certificate_key.creds")
            .map(|v| String::from_utf8_lossy(&v.0).trim().to_string()),
        Some(key.clone())
    );
    let kubeconfig = data(secrets.get("local-kubeconfig").await.expect("kubeconfig Secret"));
    assert_eq!(
        kubeconfig.get("value").map(|v| v.0.clone()),
        Some(b"kind: Config".to_vec())
    );
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "kok-system");
    let named = clusters
        .get("local")
        .await
        .unwrap()
        .status
        .and_then(|s| s.kubeconfig_ref);
    assert_eq!(named.map(|r| r.name).as_deref(), Some("local-kubeconfig"));

    // A failed run still saves the credential it made, and its key never reaches the log or the note.
    let late = repo.commit_operations(&[
        first,
        ("second", "credentials.yml", "second"),
        ("late", "late.yml", "late"),
    ]);
    let op = finished(&mut kok, &client, "late").await;
    assert_eq!(phase_and_message(&op).0, Phase::Failed);
    let credentials = data(secrets.get("local-credentials").await.unwrap());
    let late_key = credentials
        .get("late.creds")
        .expect("the failed run's credential was saved");
    let late_key = String::from_utf8_lossy(&late_key.0).trim().to_string();
    assert_eq!(late_key.len(), 16);
    assert!(
        credentials.contains_key("kubeadm_certificate_key.creds"),
        "earlier credentials stay"
    );
    let note = note_line(&mut kok, &repo, &late, "kok/local/late: failure ").await;
    for text in [note, logs(&repo, "late"), logs(&repo, "first"), kok.log()] {
        assert!(
            !text.contains(&key) && !text.contains(&late_key),
            "a credential leaked:\n{text}"
        );
    }
    assert!(kok.stop(), "kok exits 0 on SIGTERM; its log:\n{}", kok.log());
}
