//! `kok run` as a service process: probes and metrics on its listener, and graceful shutdown.

use crate::e2e;

use e2e::{meta_cluster, wait_for, Kok, Objects, Remote};

async fn status_of(http: &reqwest::Client, url: &str) -> Option<u16> {
    http.get(url).send().await.ok().map(|r| r.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_answer_and_readyz_turns_ready_after_the_first_reconcile() {
    let api = meta_cluster().await;
    // The branch kok follows does not exist yet: nothing can be reconciled.
    let remote = Remote::new();
    remote.push_to("other", "unrelated branch");
    let kok = Kok::run(&api, &remote, &["--status".to_string(), "notes".to_string()]);
    let http = reqwest::Client::new();
    wait_for("/healthz to answer 200", Some(&kok), || async {
        (status_of(&http, &kok.url("/healthz")).await == Some(200)).then_some(())
    })
    .await;
    wait_for("a failed poll of the missing branch", Some(&kok), || async {
        let metrics = http
            .get(kok.url("/metrics"))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        metrics
            .contains("kok_polls_total{result=\"error\"}")
            .then_some(())
    })
    .await;
    assert_eq!(
        status_of(&http, &kok.url("/readyz")).await,
        Some(503),
        "not ready before any reconcile"
    );

    remote.cluster("prod-bj");
    remote.push("first cluster");
    wait_for("/readyz to answer 200", Some(&kok), || async {
        (status_of(&http, &kok.url("/readyz")).await == Some(200)).then_some(())
    })
    .await;
    let objects = Objects::new(&api);
    assert!(
        objects.cluster("prod-bj").await.is_some(),
        "ready means the commit was applied"
    );
    let metrics = http
        .get(kok.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "kok_polls_total",
        "kok_fetches_total",
        "kok_reconcile_duration_seconds_bucket",
        "kok_objects_written_total",
        "kok_operations",
        "kok_status_deliveries_total",
        "kok_last_reconciled_commit_timestamp_seconds",
    ] {
        assert!(metrics.contains(name), "/metrics lacks {name}:\n{metrics}");
    }
    assert!(
        metrics.contains("kok_polls_total{result=\"changed\"}"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_kok_promptly_with_exit_code_zero() {
    let api = meta_cluster().await;
    let remote = Remote::new();
    remote.cluster("prod-bj");
    remote.write(
        "clusters/prod-bj/operations.yml",
        "- id: install\n  action: cluster.yml\n",
    );
    remote.push("install");
    let mut kok = Kok::run(&api, &remote, &["--status".to_string(), "notes".to_string()]);
    let objects = &Objects::new(&api);
    let job = wait_for("the install Job", Some(&kok), || {
        objects.job_of("prod-bj", "install")
    })
    .await;
    kok.assert_running();

    kok.terminate();
    let mut exited = None;
    for _ in 0..200 {
        exited = kok.try_wait();
        if exited.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let status =
        exited.unwrap_or_else(|| panic!("kok still runs 20s after SIGTERM; its log:\n{}", kok.log()));
    assert!(
        status.success(),
        "kok exited with {status}; its log:\n{}",
        kok.log()
    );
    assert!(
        kok.log().contains("stopped"),
        "kok logs that it stopped:\n{}",
        kok.log()
    );
    // Jobs keep running in the cluster: shutting kok down deletes nothing.
    let name = e2e::job_name(&job);
    assert!(objects.jobs().await.iter().any(|j| e2e::job_name(j) == name));
}

/// Promise 9's one gap, said once at start: without a sink that keeps a record (`--status none`), a lost
/// namespace would run every current entry again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kok_without_a_record_says_once_at_start_that_a_lost_namespace_would_rerun_everything() {
    let api = meta_cluster().await;
    let remote = Remote::new();
    remote.cluster("prod-bj");
    remote.push("first cluster");
    let warning = "no status sink keeps a record of what ran (--status none)";
    let kok = Kok::run(&api, &remote, &["--status".to_string(), "none".to_string()]);
    let http = reqwest::Client::new();
    wait_for("/readyz to answer 200", Some(&kok), || async {
        (status_of(&http, &kok.url("/readyz")).await == Some(200)).then_some(())
    })
    .await;
    // Polls after the first pass: the warning is not said again.
    wait_for("two more polls", Some(&kok), || async {
        let metrics = http
            .get(kok.url("/metrics"))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        let line = metrics
            .lines()
            .find(|l| l.starts_with("kok_polls_total{result=\"unchanged\"}"))?;
        let polls: f64 = line.rsplit(' ').next()?.parse().ok()?;
        (polls >= 2.0).then_some(())
    })
    .await;
    assert_eq!(kok.log().matches(warning).count(), 1, "{}", kok.log());

    drop(kok);
    let noted = Kok::run(&api, &remote, &["--status".to_string(), "notes".to_string()]);
    wait_for("the record's sinks named at start", Some(&noted), || async {
        noted
            .log()
            .contains("the record of what ran is read back from these sinks")
            .then_some(())
    })
    .await;
    // Both write to one log: the warning is still the first kok's alone.
    assert_eq!(noted.log().matches(warning).count(), 1, "{}", noted.log());
}
