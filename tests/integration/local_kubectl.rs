//! Local mode through a person's kubectl habits, as docs/local-mode.md sends them there
//! (`KUBECONFIG=.kok/kubeconfig kubectl -n kok-system ...`): `get pods` and `get jobs` show how a run
//! went in a real server's columns, `kubectl logs job/<job>` prints the run's ansible output (the file
//! `kok logs` prints) and `-f` follows a running one to its end, and `get events`, `kubectl events --for`
//! and `describe clusterop` show the Events kok publishes.

use crate::local_e2e_support;

use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use local_e2e_support::{
    ansible_or_skip, command, finished, kubectl_or_skip, kubectl_table, operation, run_log, wait_for,
    LocalKok, LocalRepo, NS,
};
use tokio::io::{AsyncBufReadExt, BufReader};

/// Runs `kubectl -n kok-system <args>` against local mode's embedded API server: success, stdout, stderr.
fn kubectl(repo: &LocalRepo, args: &[&str]) -> (bool, String, String) {
    let out = kubectl_command(repo, args).output().expect("kubectl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn kubectl_command(repo: &LocalRepo, args: &[&str]) -> std::process::Command {
    let mut cmd = command("kubectl");
    cmd.env("KUBECONFIG", repo.state_dir().join("kubeconfig"))
        .arg("--cache-dir")
        .arg(repo.scratch("kube-cache"))
        .args(["-n", NS])
        .args(args)
        .stdin(Stdio::null());
    cmd
}

/// `kubectl` that must succeed: its stdout.
fn kubectl_ok(repo: &LocalRepo, args: &[&str]) -> String {
    let (ok, out, err) = kubectl(repo, args);
    assert!(ok, "kubectl {args:?} failed: {err}{out}");
    out
}

/// The Job of operation `id`, from its ClusterOperation's status.
async fn job_of(kok: &mut LocalKok, client: &kube::Client, id: &str) -> String {
    wait_for(&format!("the Job of operation {id}"), kok, || async {
        operation(client, id).await?.status?.job_ref
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_shows_a_finished_local_run_its_log_and_its_events() {
    let test = "kubectl_shows_a_finished_local_run_its_log_and_its_events";
    if !ansible_or_skip(test) || !kubectl_or_skip(test) {
        return;
    }
    let repo = LocalRepo::new();
    let mut kok = LocalKok::start(&repo);
    let client = kok.client(&repo).await;
    repo.commit_operations(&[("hello", "mark.yml", "hello")]);
    let op = finished(&mut kok, &client, "hello").await;
    let op_name = op.metadata.name.clone().unwrap();
    let job = job_of(&mut kok, &client, "hello").await;

    let pods = kubectl_table(&kubectl_ok(&repo, &["get", "pods"]));
    assert_eq!(
        pods[0],
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        "{pods:?}"
    );
    assert_eq!(
        pods[1][..4],
        [
            format!("{job}-local"),
            "0/1".into(),
            "Completed".into(),
            "0".into()
        ]
    );
    let wide = kubectl_table(&kubectl_ok(&repo, &["get", "pods", "-o", "wide"]));
    assert_eq!(
        wide[0][5..],
        ["IP", "NODE", "NOMINATED NODE", "READINESS GATES"],
        "{wide:?}"
    );
    assert_eq!(wide[1][5..7], ["127.0.0.1", "localhost"], "{wide:?}");
    let jobs = kubectl_table(&kubectl_ok(&repo, &["get", "jobs"]));
    assert_eq!(
        jobs[0],
        ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"],
        "{jobs:?}"
    );
    assert_eq!(
        jobs[1][..3],
        [job.clone(), "Complete".into(), "1/1".into()],
        "{jobs:?}"
    );

    let printed = kubectl_ok(&repo, &["logs", &format!("job/{job}")]);
    assert!(
        printed.contains("PLAY [Leave a mark]") && printed.contains("PLAY RECAP"),
        "kubectl logs prints the ansible run: {printed}"
    );
    assert_eq!(printed, run_log(&repo, "hello"), "the same log as kok logs");
    assert_eq!(kubectl_ok(&repo, &["logs", &format!("pod/{job}-local")]), printed);
    let tail = kubectl_ok(&repo, &["logs", &format!("job/{job}"), "--tail=1"]);
    assert!(
        tail.starts_with("# kok-local-runner end=") && tail.lines().count() == 1,
        "{tail}"
    );

    let events = kubectl_ok(&repo, &["get", "events"]);
    let object = format!("clusteroperation/{op_name}");
    assert!(
        events
            .lines()
            .any(|l| l.contains(&object) && l.contains("Succeeded")),
        "kubectl get events lists kok's Events: {events}"
    );
    let selected = kubectl_ok(
        &repo,
        &[
            "get",
            "events",
            "--field-selector",
            &format!("involvedObject.name={op_name}"),
        ],
    );
    assert!(
        selected.contains("Started") && selected.contains("Succeeded"),
        "{selected}"
    );
    let for_op = kubectl_ok(&repo, &["events", "--for", &format!("clusterop/{op_name}")]);
    assert!(
        for_op.contains(&format!("ClusterOperation/{op_name}")) && for_op.contains("Succeeded"),
        "{for_op}"
    );
    let described = kubectl_ok(&repo, &["describe", "clusterop", &op_name]);
    let section = described
        .rsplit_once("Events:")
        .map(|(_, s)| s)
        .unwrap_or_default();
    assert!(
        section.contains("Started") && section.contains("Succeeded") && section.contains("kok"),
        "describe ends with kok's Events, not <none>: {described}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_logs_follows_a_running_local_run_to_its_end() {
    let test = "kubectl_logs_follows_a_running_local_run_to_its_end";
    if !ansible_or_skip(test) || !kubectl_or_skip(test) {
        return;
    }
    let repo = LocalRepo::new();
    let mut kok = LocalKok::start(&repo);
    let client = kok.client(&repo).await;
    repo.write(
        "clusters/local/operations.yml",
        "- id: nap\n  action: playbooks/nap.yml\n  extraArgs: [\"-e\", \"mark=nap\", \"-e\", \"nap=6\"]\n",
    );
    repo.commit("a napping operation");
    let job = job_of(&mut kok, &client, "nap").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    wait_for("the run's pod to be Running", &mut kok, || async {
        let list = pods.list(&ListParams::default()).await.ok()?;
        let phase = list.items.first()?.status.as_ref()?.phase.clone()?;
        (phase == "Running").then_some(())
    })
    .await;
    let running = kubectl_table(&kubectl_ok(&repo, &["get", "pods"]));
    assert_eq!(running[1][1..3], ["1/1", "Running"], "{running:?}");
    let jobs = kubectl_table(&kubectl_ok(&repo, &["get", "jobs"]));
    assert_eq!(jobs[1][1..3], ["Running", "0/1"], "{jobs:?}");

    let mut follow =
        tokio::process::Command::from(kubectl_command(&repo, &["logs", "-f", &format!("job/{job}")]))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("kubectl logs -f starts");
    let mut lines = BufReader::new(follow.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("kubectl logs -f prints the run's first line")
        .unwrap()
        .unwrap_or_default();
    assert!(first.starts_with("# kok-local-runner start="), "{first}");
    let phase = operation(&client, "nap")
        .await
        .and_then(|op| op.status)
        .map(|s| s.phase);
    assert_eq!(
        phase,
        Some(kok::api::Phase::Running),
        "kubectl logs -f started while the run went on"
    );
    let mut seen = vec![first];
    let read = async {
        while let Some(line) = lines.next_line().await.expect("reading kubectl's output") {
            seen.push(line);
        }
    };
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .expect("kubectl logs -f ends when the run ends");
    let status = follow.wait().await.unwrap();
    assert!(status.success(), "{status}");
    let text = seen.join("\n");
    assert!(
        text.contains("TASK [Nap]") && text.contains("PLAY RECAP"),
        "followed to the end: {text}"
    );
    assert!(
        seen.last()
            .is_some_and(|l| l.starts_with("# kok-local-runner end=")),
        "{text}"
    );
    let op = finished(&mut kok, &client, "nap").await;
    assert_eq!(op.status.unwrap().phase, kok::api::Phase::Succeeded);
    assert_eq!(format!("{}\n", seen.join("\n")), run_log(&repo, "nap"));
}
