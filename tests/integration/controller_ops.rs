//! The embedded controller against testkit: Jobs, phases, order, concurrency, restarts, Secrets, faults.

use crate::controller_support;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams};
use kube::ResourceExt;

use controller_support::*;
use kok::api::{Cluster, ClusterOperation, Phase, StatusState};
use kok::controller::job::job_name;
use kok::materialize::apply::{apply_cluster, remove_cluster};

const HOSTS: &str = "all:\n  hosts:\n    node1: {}\n";

async fn events_for(client: &kube::Client, name: &str) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(client.clone(), NS);
    let mut evs: Vec<Event> = api
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect();
    evs.sort_by_key(|e| {
        (
            e.event_time.clone().map(|t| t.0),
            e.metadata.resource_version.clone(),
        )
    });
    evs.into_iter().filter_map(|e| e.reason).collect()
}

#[tokio::test]
async fn a_completed_job_marks_the_operation_succeeded_with_times_status_and_events() {
    let server = server().await;
    let client = server.client();
    let d = apply_prod_install(&client).await;
    let ctl = start(&client, config(4));
    let name = op_name(&d, "install");
    let running = wait_phase(&client, &name, Phase::Running).await;
    let status = running.status.clone().unwrap();
    assert_eq!(status.job_ref.as_deref(), Some(job_name(&name).as_str()));
    assert!(status.start_time.is_some());
    assert_eq!(desired(&running).state, StatusState::Running);
    assert_eq!(
        status.desired_status, None,
        "computed by the reporter, not stored"
    );

    server.complete_job(NS, &job_name(&name)).await.unwrap();
    let done = wait_phase(&client, &name, Phase::Succeeded).await;
    assert_eq!(desired(&done).state, StatusState::Success);
    let status = done.status.unwrap();
    assert!(status.end_time.is_some() && status.duration.is_some());
    let reasons = wait_for("two events", || async {
        Some(events_for(&client, &name).await).filter(|r| r.len() >= 2)
    })
    .await;
    assert_eq!(reasons, ["Started", "Succeeded"]);
    let cluster = wait_for("the cluster to show the last operation", || async {
        let c = Api::<Cluster>::namespaced(client.clone(), NS)
            .get("prod")
            .await
            .ok()?;
        let s = c.status?;
        (s.last_operation.as_ref()?.phase == Phase::Succeeded).then_some(s)
    })
    .await;
    let ready = cluster.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready.status, "True");
    // What `kok status` reads instead of the runs: nothing running or next, and the run that finished.
    assert_eq!(cluster.current_operation, None);
    let last = cluster.last_finished.expect("the last finished run");
    assert_eq!((last.name.as_str(), last.id.as_str()), (name.as_str(), "install"));
    assert_eq!(last.phase, Phase::Succeeded);
    assert_eq!(last.commit, d.operations[0].spec.source.commit);
    assert_eq!(last.start_time, status.start_time);
    assert_eq!(last.end_time, status.end_time);
    ctl.stop().await;
}

#[tokio::test]
async fn a_job_past_its_deadline_marks_the_operation_failed_with_the_reason() {
    let server = server().await;
    let client = server.client();
    let d = apply_prod_install(&client).await;
    let ctl = start(&client, config(4));
    let name = op_name(&d, "install");
    wait_phase(&client, &name, Phase::Running).await;
    server
        .fail_job(
            NS,
            &job_name(&name),
            "DeadlineExceeded",
            "Job was active longer than specified deadline",
        )
        .await
        .unwrap();
    let failed = wait_phase(&client, &name, Phase::Failed).await;
    let status = failed.status.clone().unwrap();
    assert_eq!(
        status.message.as_deref(),
        Some("DeadlineExceeded: the Job exceeded its deadline of 12h0m (activeDeadlineSeconds 43200)")
    );
    let desired = desired(&failed);
    assert_eq!(desired.state, StatusState::Failure);
    assert!(
        desired.description.contains("DeadlineExceeded"),
        "{}",
        desired.description
    );
    let stalled = wait_for("Stalled", || async {
        let c = Api::<Cluster>::namespaced(client.clone(), NS)
            .get("prod")
            .await
            .ok()?;
        c.status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Stalled" && c.status == "True")
    })
    .await;
    assert_eq!(stalled.reason, "LastOperationFailed");
    ctl.stop().await;
}

#[tokio::test]
async fn a_job_deleted_while_running_fails_the_operation_saying_so() {
    let server = server().await;
    let client = server.client();
    let d = apply_prod_install(&client).await;
    let ctl = start(&client, config(4));
    let name = op_name(&d, "install");
    wait_phase(&client, &name, Phase::Running).await;
    Api::<Job>::namespaced(client.clone(), NS)
        .delete(&job_name(&name), &DeleteParams::background())
        .await
        .unwrap();
    let failed = wait_phase(&client, &name, Phase::Failed).await;
    assert_eq!(
        failed.status.unwrap().message.as_deref(),
        Some("Job was deleted while running")
    );
    assert!(jobs(&client).await.is_empty(), "no second Job was made");
    ctl.stop().await;
}

#[tokio::test]
async fn two_operations_of_one_cluster_run_in_order_and_two_clusters_in_parallel() {
    let server = server().await;
    let client = server.client();
    let a = render(
        &cluster_dir(
            "a",
            HOSTS,
            vec![entry("first", "one.yml", &[]), entry("second", "two.yml", &[])],
            None,
        ),
        1,
        &[],
    );
    let b = render(
        &cluster_dir("b", HOSTS, vec![entry("only", "one.yml", &[])], None),
        1,
        &[],
    );
    apply_cluster(&client, NS, &a).await.unwrap();
    apply_cluster(&client, NS, &b).await.unwrap();
    let ctl = start(&client, config(4));
    let (first, second, only) = (op_name(&a, "first"), op_name(&a, "second"), op_name(&b, "only"));

    wait_phase(&client, &first, Phase::Running).await;
    wait_phase(&client, &only, Phase::Running).await;
    let queued = wait_phase(&client, &second, Phase::Queued).await;
    assert!(queued.status.unwrap().message.unwrap().contains(&first));
    assert_eq!(jobs(&client).await, [job_name(&first), job_name(&only)].to_vec());

    server.complete_job(NS, &job_name(&first)).await.unwrap();
    wait_phase(&client, &second, Phase::Running).await;
    assert_eq!(phase(&client, &first).await, Some(Phase::Succeeded));
    assert_eq!(jobs(&client).await.len(), 3);
    // Waiting is in the status, not an Event: the Events mark the start (and the end).
    let reasons = wait_for("the second operation's Started Event", || async {
        Some(events_for(&client, &second).await).filter(|r| !r.is_empty())
    })
    .await;
    assert_eq!(reasons, ["Started"]);
    ctl.stop().await;
}

#[tokio::test]
async fn a_new_clusters_first_status_counts_the_operations_its_pass_created() {
    let server = server().await;
    let client = server.client();
    let ctl = start(&client, config(4));
    let ids = ["one", "two", "three", "four", "five"];
    let entries = ids.iter().map(|id| entry(id, "one.yml", &[])).collect();
    let d = render(&cluster_dir("fresh", HOSTS, entries, None), 1, &[]);
    apply_cluster(&client, NS, &d).await.unwrap();
    let clusters = Api::<Cluster>::namespaced(client.clone(), NS);
    let first = wait_for("the new Cluster's first status", || async {
        clusters.get("fresh").await.ok()?.status
    })
    .await;
    let counts = first.operations.unwrap_or_default();
    assert_eq!(
        counts.pending + counts.running,
        ids.len() as u32,
        "the first status written already counts every operation: {counts:?}"
    );
    // One write for the burst (two when the runs' own transitions land after the settle time), not one
    // for the bare Cluster and more as its runs appear and queue (three here before).
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let writes = server.requests().count("patch", "clusters/status");
    assert!(
        writes <= 2,
        "{writes} status writes for a new Cluster and its runs"
    );
    ctl.stop().await;
}

#[tokio::test]
async fn the_job_limit_holds_across_clusters() {
    let server = server().await;
    let client = server.client();
    let mut names = Vec::new();
    for c in ["a", "b", "c"] {
        let d = render(
            &cluster_dir(c, HOSTS, vec![entry("install", "cluster.yml", &[])], None),
            1,
            &[],
        );
        apply_cluster(&client, NS, &d).await.unwrap();
        names.push(op_name(&d, "install"));
    }
    let ctl = start(&client, config(2));
    wait_for("two Jobs", || async {
        (jobs(&client).await.len() == 2).then_some(())
    })
    .await;
    let waiting = wait_for("one operation waiting for a slot", || async {
        for n in &names {
            let o = op(&client, n).await?;
            let s = o.status?;
            if s.phase == Phase::Queued && s.message.as_deref().unwrap_or("").contains("Job slot") {
                return Some(n.clone());
            }
        }
        None
    })
    .await;
    let running: Vec<&String> = names.iter().filter(|n| **n != waiting).collect();
    server.complete_job(NS, &job_name(running[0])).await.unwrap();
    wait_phase(&client, &waiting, Phase::Running).await;
    assert_eq!(jobs(&client).await.len(), 3);
    ctl.stop().await;
}

#[tokio::test]
async fn a_restart_mid_run_makes_no_second_job() {
    let server = server().await;
    let client = server.client();
    let d = render(
        &cluster_dir(
            "prod",
            HOSTS,
            vec![entry("install", "cluster.yml", &[]), entry("next", "n.yml", &[])],
            None,
        ),
        1,
        &[],
    );
    apply_cluster(&client, NS, &d).await.unwrap();
    let name = op_name(&d, "install");
    let ctl = start(&client, config(4));
    wait_phase(&client, &name, Phase::Running).await;
    ctl.kill();

    server.requests().reset();
    let ctl = start(&client, config(4));
    wait_phase(&client, &op_name(&d, "next"), Phase::Queued).await;
    assert_eq!(server.requests().count("create", "jobs"), 0);
    assert_eq!(jobs(&client).await, [job_name(&name)]);
    server.complete_job(NS, &job_name(&name)).await.unwrap();
    wait_phase(&client, &name, Phase::Succeeded).await;
    wait_phase(&client, &op_name(&d, "next"), Phase::Running).await;
    ctl.stop().await;
}

#[tokio::test]
async fn a_job_created_before_a_crash_is_adopted_not_duplicated() {
    let server = server().await;
    let client = server.client();
    let d = apply_prod_install(&client).await;
    let name = op_name(&d, "install");
    // The crash window: the Job exists, the operation still says Pending.
    let live = op(&client, &name).await.unwrap();
    let job = kok::controller::job::build_job(&live, &kok::controller::JobConfig::default());
    Api::<Job>::namespaced(client.clone(), NS)
        .create(&Default::default(), &job)
        .await
        .unwrap();

    server.requests().reset();
    let ctl = start(&client, config(4));
    let running = wait_phase(&client, &name, Phase::Running).await;
    assert!(running
        .status
        .unwrap()
        .message
        .unwrap_or_default()
        .contains("adopted"));
    assert_eq!(server.requests().count("create", "jobs"), 0);
    ctl.stop().await;
}

#[tokio::test]
async fn a_missing_secret_gives_no_job_and_a_clear_condition_until_it_exists() {
    let server = server().await;
    let client = server.client();
    let d = render(
        &cluster_dir(
            "prod",
            HOSTS,
            vec![entry("install", "cluster.yml", &[])],
            Some("prod-ssh"),
        ),
        1,
        &[],
    );
    apply_cluster(&client, NS, &d).await.unwrap();
    let ctl = start(&client, config(4));
    let name = op_name(&d, "install");
    let queued = wait_phase(&client, &name, Phase::Queued).await;
    assert!(queued.status.unwrap().message.unwrap().contains("prod-ssh"));
    let ready = wait_for("Ready=False", || async {
        let c = Api::<Cluster>::namespaced(client.clone(), NS)
            .get("prod")
            .await
            .ok()?;
        c.status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready" && c.status == "False")
    })
    .await;
    assert_eq!(ready.reason, "SecretNotFound");
    assert!(ready.message.contains("prod-ssh") && ready.message.contains(NS));
    assert!(ready
        .message
        .contains("kubectl -n kok-system create secret generic prod-ssh --type=kubernetes.io/ssh-auth"));
    assert!(jobs(&client).await.is_empty());

    // Waiting is event-driven: once the Cluster's status caught up with its queued operation, nothing
    // changes, and the waiting operation and Cluster make no requests.
    let log = server.requests();
    wait_for("the Cluster's status to count the queued operation", || async {
        let c = Api::<Cluster>::namespaced(client.clone(), NS)
            .get("prod")
            .await
            .ok()?;
        let status = c.status?;
        (status.last_operation?.phase == Phase::Queued).then_some(())?;
        // The queued run is what `kok status` shows next, with why it waits.
        let next = status.current_operation?;
        assert_eq!((next.name.as_str(), next.phase), (name.as_str(), Phase::Queued));
        assert!(next.outcome.starts_with("waiting for its Secret"), "{next:?}");
        Some(())
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    log.reset();
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let made: Vec<_> = log
        .snapshot()
        .into_iter()
        .filter(|((verb, _), _)| verb != "watch")
        .collect();
    assert!(made.is_empty(), "requests while waiting for the Secret: {made:?}");

    create_secret(&client, "prod-ssh").await;
    wait_phase(&client, &name, Phase::Running).await;
    let job: Job = Api::namespaced(client.clone(), NS)
        .get(&job_name(&name))
        .await
        .unwrap();
    let spec = job.spec.unwrap().template.spec.unwrap();
    let auth = spec
        .volumes
        .unwrap()
        .into_iter()
        .find(|v| v.name == "auth")
        .unwrap();
    assert_eq!(auth.secret.unwrap().default_mode, Some(0o400));
    ctl.stop().await;
}

#[tokio::test]
async fn injected_conflicts_and_server_errors_are_retried_without_duplicates() {
    let server = server().await;
    let client = server.client();
    let d = apply_prod_install(&client).await;
    let name = op_name(&d, "install");
    server.inject_fault(testkit::Fault::on("create", "jobs", 500, 2));
    server.inject_fault(testkit::Fault::on("patch", "clusteroperations/status", 409, 2));
    let ctl = start(&client, config(4));
    wait_phase(&client, &name, Phase::Running).await;
    assert_eq!(jobs(&client).await, [job_name(&name)]);
    server.inject_fault(testkit::Fault::on("patch", "clusteroperations/status", 500, 1));
    server.complete_job(NS, &job_name(&name)).await.unwrap();
    wait_phase(&client, &name, Phase::Succeeded).await;
    assert_eq!(jobs(&client).await, [job_name(&name)]);
    ctl.stop().await;
}

#[tokio::test]
async fn a_removed_cluster_is_pruned_while_its_running_operation_finishes() {
    let server = server().await;
    let client = server.client();
    let d = render(
        &cluster_dir(
            "gone",
            HOSTS,
            vec![entry("install", "cluster.yml", &[]), entry("later", "l.yml", &[])],
            None,
        ),
        1,
        &[],
    );
    apply_cluster(&client, NS, &d).await.unwrap();
    let ctl = start(&client, config(4));
    let (install, later) = (op_name(&d, "install"), op_name(&d, "later"));
    wait_phase(&client, &install, Phase::Running).await;
    wait_phase(&client, &later, Phase::Queued).await;

    remove_cluster(&client, NS, "gone").await.unwrap();
    assert!(Api::<Cluster>::namespaced(client.clone(), NS)
        .get_opt("gone")
        .await
        .unwrap()
        .is_none());
    assert_eq!(phase(&client, &later).await, Some(Phase::Canceled));
    assert_eq!(phase(&client, &install).await, Some(Phase::Running));
    server.complete_job(NS, &job_name(&install)).await.unwrap();
    wait_phase(&client, &install, Phase::Succeeded).await;
    assert_eq!(
        jobs(&client).await,
        [job_name(&install)],
        "the canceled one never got a Job"
    );
    ctl.stop().await;
}

#[tokio::test]
async fn the_history_limit_deletes_the_oldest_finished_operations_no_longer_in_the_file() {
    let server = server().await;
    let client = server.client();
    let mut dir = cluster_dir("prod", HOSTS, vec![entry("r", "run.yml", &["1"])], None);
    dir.settings.defaults.history_limit = Some(1);
    let ctl = start(&client, config(4));
    let mut names = Vec::new();
    for i in 1..=3u32 {
        dir.operations = vec![entry("r", "run.yml", &[&i.to_string()])];
        let d = render(&dir, i, &[]);
        apply_cluster(&client, NS, &d).await.unwrap();
        let n = op_name(&d, "r");
        wait_phase(&client, &n, Phase::Running).await;
        server.complete_job(NS, &job_name(&n)).await.unwrap();
        wait_phase(&client, &n, Phase::Succeeded).await;
        names.push(n);
    }
    // Runs 1 and 2 left the file; with a limit of 1 only the newest of them may stay besides the current.
    wait_for("the oldest run to be deleted", || async {
        op(&client, &names[0]).await.is_none().then_some(())
    })
    .await;
    assert!(
        op(&client, &names[2]).await.is_some(),
        "the current entry is never deleted"
    );
    let remaining: Vec<String> = Api::<kok::api::ClusterOperation>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|o| o.name_any())
        .collect();
    assert!(!remaining.contains(&names[0]));
    ctl.stop().await;
}

#[tokio::test]
async fn the_history_limit_applies_as_soon_as_finished_operations_leave_the_file() {
    let server = server().await;
    let client = server.client();
    let ids = ["a", "b", "c", "d", "e"];
    let entries = ids.iter().map(|id| entry(id, "run.yml", &[])).collect();
    let mut dir = cluster_dir("prod", HOSTS, entries, None);
    dir.settings.defaults.history_limit = Some(2);
    let d = render(&dir, 1, &[]);
    apply_cluster(&client, NS, &d).await.unwrap();
    let ctl = start(&client, config(4));
    let names: Vec<String> = ids.iter().map(|id| op_name(&d, id)).collect();
    for n in &names {
        wait_phase(&client, n, Phase::Running).await;
        server.complete_job(NS, &job_name(n)).await.unwrap();
        wait_phase(&client, n, Phase::Succeeded).await;
    }
    // Finished but still entries of the file: all kept.
    for n in &names {
        assert!(op(&client, n).await.is_some(), "{n} is current and kept");
    }

    // All five leave operations.yml: only the two that finished last stay, without a restart.
    dir.operations.clear();
    apply_cluster(&client, NS, &render(&dir, 2, &[])).await.unwrap();
    wait_for("the history limit to leave two operations", || async {
        let left: Vec<String> = Api::<kok::api::ClusterOperation>::namespaced(client.clone(), NS)
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .iter()
            .map(|o| o.name_any())
            .collect();
        (left.len() == 2).then_some(left)
    })
    .await;
    for n in &names[..3] {
        assert!(
            op(&client, n).await.is_none(),
            "{n} finished first and is deleted"
        );
    }
    for n in &names[3..] {
        assert!(
            op(&client, n).await.is_some(),
            "{n} is among the newest two and kept"
        );
    }
    ctl.stop().await;
}

#[tokio::test]
async fn an_unedited_operation_never_runs_again_across_repolls_and_restarts() {
    let server = server().await;
    let client = server.client();
    let dir = cluster_dir("prod", HOSTS, vec![entry("install", "cluster.yml", &[])], None);
    let d = render(&dir, 1, &[]);
    apply_cluster(&client, NS, &d).await.unwrap();
    let name = op_name(&d, "install");
    let ctl = start(&client, config(4));
    wait_phase(&client, &name, Phase::Running).await;
    server.complete_job(NS, &job_name(&name)).await.unwrap();
    wait_phase(&client, &name, Phase::Succeeded).await;
    ctl.stop().await;

    // Later commits that leave the entry alone, and a restarted controller.
    for n in 2..=3 {
        apply_cluster(&client, NS, &render(&dir, n, &[("install", 1)]))
            .await
            .unwrap();
    }
    server.requests().reset();
    let ctl = start(&client, config(4));
    wait_for("the cluster to be reconciled after the restart", || async {
        let c = Api::<Cluster>::namespaced(client.clone(), NS)
            .get("prod")
            .await
            .ok()?;
        (c.status?.observed_revision? == format!("main@sha1:{}", sha(3))).then_some(())
    })
    .await;
    assert_eq!(server.requests().count("create", "jobs"), 0);
    assert_eq!(jobs(&client).await, [job_name(&name)]);
    assert_eq!(phase(&client, &name).await, Some(Phase::Succeeded));
    ctl.stop().await;
}

#[tokio::test]
async fn a_burst_of_operation_changes_makes_one_cluster_status_write_not_one_each() {
    let server = server().await;
    let client = server.client();
    let empty = render(&cluster_dir("prod", HOSTS, vec![], Some("prod-ssh")), 1, &[]);
    apply_cluster(&client, NS, &empty).await.unwrap();
    let ctl = start(&client, config(4));
    let counted = |n: u32| {
        let client = client.clone();
        async move {
            let c = Api::<Cluster>::namespaced(client, NS).get("prod").await.ok()?;
            let s = c.status?;
            let last = s.last_operation.map(|l| l.phase);
            (s.operations?.pending == n && (n == 0 || last == Some(Phase::Queued))).then_some(())
        }
    };
    wait_for("the Cluster's status without operations", || counted(0)).await;

    // A commit adds ten operations at once; each is created, then queued on the missing Secret.
    let log = server.requests();
    log.reset();
    let ops = (0..10)
        .map(|i| entry(&format!("op{i}"), "run.yml", &[]))
        .collect();
    let d = render(&cluster_dir("prod", HOSTS, ops, Some("prod-ssh")), 2, &[]);
    apply_cluster(&client, NS, &d).await.unwrap();
    wait_for("the Cluster's status to count ten queued operations", || {
        counted(10)
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let created = Api::<ClusterOperation>::namespaced(client.clone(), NS)
        .list(&Default::default())
        .await
        .unwrap();
    assert_eq!(created.items.len(), 10);
    assert!(
        log.count("patch", "clusteroperations") >= 10,
        "created by server-side apply"
    );
    assert!(
        log.count("patch", "clusteroperations/status") >= 10,
        "each is queued"
    );
    let writes = log.count("patch", "clusters/status");
    assert!(
        (1..=3).contains(&writes),
        "{writes} status writes for 20 changes of its operations: {:?}",
        log.snapshot()
    );
    ctl.stop().await;
}

#[tokio::test]
async fn a_start_whose_status_write_meets_a_conflict_is_recorded_as_a_start_not_an_adoption() {
    let server = server().await;
    let client = server.client();
    let d = apply_prod_install(&client).await;
    let name = op_name(&d, "install");
    // The first status write is the start, right after the Job's create: it loses a race.
    server.inject_fault(testkit::Fault::on("patch", "clusteroperations/status", 409, 1));
    let ctl = start(&client, config(4));
    let op = wait_phase(&client, &name, Phase::Running).await;
    let message = op.status.and_then(|s| s.message).unwrap_or_default();
    assert!(
        !message.contains("adopted"),
        "a Job this kok just created is not an adopted one: {message:?}"
    );
    assert_eq!(jobs(&client).await, [job_name(&name)]);
    ctl.stop().await;
}

/// Cluster `prod` with one operation, `install`, rendered at revision 1 and applied.
async fn apply_prod_install(client: &kube::Client) -> kok::materialize::DesiredCluster {
    let d = render(
        &cluster_dir("prod", HOSTS, vec![entry("install", "cluster.yml", &[])], None),
        1,
        &[],
    );
    apply_cluster(client, NS, &d).await.unwrap();
    d
}

/// Plays the Job controller and the kubelet for Job `job`: creates its pod `pod` (the Job's pod labels, owned
/// by the Job) and gives it `status`.
async fn play_pod(client: &kube::Client, job: &str, pod: &str, status: serde_json::Value) {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Patch, PatchParams, PostParams};
    let j = Api::<Job>::namespaced(client.clone(), NS).get(job).await.unwrap();
    let template = j.spec.unwrap().template;
    let mut labels = template.metadata.and_then(|m| m.labels).unwrap_or_default();
    labels.insert("job-name".into(), job.into());
    let body: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": pod, "namespace": NS, "labels": labels, "ownerReferences": [{
            "apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": j.metadata.uid,
            "controller": true, "blockOwnerDeletion": true}]},
        "spec": template.spec,
    }))
    .unwrap();
    let pods = Api::<Pod>::namespaced(client.clone(), NS);
    pods.create(&PostParams::default(), &body).await.unwrap();
    let patch = serde_json::json!({"status": status});
    pods.patch_status(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// Records the Job controller's `FailedCreate` Event on Job `job`, as it does when the pod cannot be made.
async fn failed_create(client: &kube::Client, job: &str, message: &str) {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    let j = Api::<Job>::namespaced(client.clone(), NS).get(job).await.unwrap();
    let now = jiff::Timestamp::now().to_string();
    let ev: CoreEvent = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{job}.failedcreate"), "namespace": NS},
        "involvedObject": {"apiVersion": "batch/v1", "kind": "Job", "name": job, "namespace": NS,
                           "uid": j.metadata.uid},
        "reason": "FailedCreate", "message": message, "type": "Warning",
        "source": {"component": "job-controller"}, "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    }))
    .unwrap();
    Api::<CoreEvent>::namespaced(client.clone(), NS)
        .create(&Default::default(), &ev)
        .await
        .unwrap();
}

/// A cluster `name` with one operation `install`, whose pod may fail to start for `start_timeout` seconds.
async fn apply_with_start_timeout(client: &kube::Client, name: &str, start_timeout: i64) -> String {
    let mut dir = cluster_dir(name, HOSTS, vec![entry("install", "cluster.yml", &[])], None);
    dir.settings.defaults.start_timeout = Some(start_timeout);
    let d = render(&dir, 1, &[]);
    apply_cluster(client, NS, &d).await.unwrap();
    op_name(&d, "install")
}

fn waiting(key: &str, reason: &str, message: &str) -> serde_json::Value {
    serde_json::json!({"phase": "Pending", key: [{
        "name": "ansible", "image": "registry.example/nope:v1", "imageID": "", "ready": false,
        "restartCount": 0, "state": {"waiting": {"reason": reason, "message": message}}}]})
}

#[tokio::test]
async fn a_run_whose_pod_cannot_start_fails_after_its_start_timeout_with_the_reason_and_its_job_goes() {
    const START_TIMEOUT: i64 = 2;
    let server = server().await;
    let client = server.client();
    let unschedulable = serde_json::json!({"phase": "Pending", "conditions": [{"type": "PodScheduled",
        "status": "False", "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 Insufficient memory."}]});
    let pull = r#"Back-off pulling image "registry.example/nope:v1""#;
    // (cluster, the pod's status or none for a pod that cannot be made, what the message says)
    let cases: Vec<(&str, Option<serde_json::Value>, Vec<&str>)> = vec![
        (
            "pull",
            Some(waiting("containerStatuses", "ErrImagePull", "manifest unknown")),
            vec!["ErrImagePull", "registry.example/nope:v1", "manifest unknown"],
        ),
        (
            "backoff",
            Some(waiting("containerStatuses", "ImagePullBackOff", pull)),
            vec!["ImagePullBackOff", pull],
        ),
        (
            "invalid",
            Some(waiting(
                "containerStatuses",
                "InvalidImageName",
                "couldn't parse image name",
            )),
            vec!["InvalidImageName", "couldn't parse image name"],
        ),
        (
            "config",
            Some(waiting(
                "initContainerStatuses",
                "CreateContainerConfigError",
                r#"secret "x" not found"#,
            )),
            vec!["CreateContainerConfigError", r#"secret "x" not found"#],
        ),
        (
            "create",
            Some(waiting(
                "containerStatuses",
                "CreateContainerError",
                "no command specified",
            )),
            vec!["CreateContainerError", "no command specified"],
        ),
        (
            "sched",
            Some(unschedulable),
            vec!["Unschedulable", "0/3 nodes are available: 3 Insufficient memory."],
        ),
        (
            "nopod",
            None,
            vec!["FailedCreate", r#"serviceaccount "kok-nopod" not found"#],
        ),
    ];
    let mut names = Vec::new();
    for (cluster, _, _) in &cases {
        names.push(apply_with_start_timeout(&client, cluster, START_TIMEOUT).await);
    }
    let ctl = start(&client, config(cases.len()));
    for ((cluster, status, _), name) in cases.iter().zip(&names) {
        wait_phase(&client, name, Phase::Running).await;
        let job = job_name(name);
        match status {
            Some(status) => play_pod(&client, &job, &format!("{job}-abcde"), status.clone()).await,
            None => {
                let message = format!(
                    r#"Error creating: pods "{job}-" is forbidden: error looking up service account {NS}/kok-{cluster}: serviceaccount "kok-{cluster}" not found"#
                );
                failed_create(&client, &job, &message).await
            }
        }
    }
    let begun = std::time::Instant::now();
    for ((cluster, _, says), name) in cases.iter().zip(&names) {
        let failed = wait_phase(&client, name, Phase::Failed).await;
        let status = failed.status.clone().unwrap();
        let message = status.message.unwrap_or_default();
        assert!(message.starts_with("StartFailed: "), "{cluster}: {message}");
        assert!(
            message.ends_with("; not started within 2s (startTimeout 2)"),
            "{cluster}: {message}"
        );
        for part in says {
            assert!(message.contains(part), "{cluster}: {message} does not say {part}");
        }
        let desired = desired(&failed);
        assert_eq!(desired.state, StatusState::Failure, "{cluster}");
        assert!(
            desired
                .description
                .starts_with(&format!("failed: StartFailed: {}", says[0])),
            "{cluster}: {}",
            desired.description
        );
        let job = job_name(name);
        wait_for(&format!("Job {job} to be deleted"), || async {
            (!jobs(&client).await.contains(&job)).then_some(())
        })
        .await;
        let reasons = wait_for("the StartFailed event", || async {
            Some(events_for(&client, name).await).filter(|r| r.contains(&"StartFailed".to_string()))
        })
        .await;
        assert_eq!(reasons, ["Started", "StartFailed"], "{cluster}");
    }
    assert!(
        begun.elapsed() < std::time::Duration::from_secs(START_TIMEOUT as u64 + 8),
        "every run failed within its start timeout and a few seconds: {:?}",
        begun.elapsed()
    );
    ctl.stop().await;
}

#[tokio::test]
async fn a_run_whose_pod_is_slow_to_start_without_a_reason_is_left_to_its_deadline() {
    let server = server().await;
    let client = server.client();
    let name = apply_with_start_timeout(&client, "slow", 1).await;
    let ctl = start(&client, config(4));
    wait_phase(&client, &name, Phase::Running).await;
    let job = job_name(&name);
    let creating = waiting("containerStatuses", "ContainerCreating", "");
    play_pod(&client, &job, &format!("{job}-abcde"), creating).await;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(phase(&client, &name).await, Some(Phase::Running));
    assert!(jobs(&client).await.contains(&job));
    ctl.stop().await;
}

#[tokio::test]
async fn a_run_whose_pod_is_evicted_or_deleted_fails_saying_so() {
    use k8s_openapi::api::core::v1::Pod;
    let server = server().await;
    let client = server.client();
    let running = serde_json::json!({"phase": "Running", "containerStatuses": [{"name": "ansible",
        "image": "i", "imageID": "", "ready": true, "restartCount": 0,
        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]});
    // (cluster, the pod's status after it ran, or none when it is deleted; what the message says)
    let cases: Vec<(&str, Option<serde_json::Value>, Vec<&str>)> = vec![
        (
            "drained",
            Some(
                serde_json::json!({"conditions": [{"type": "DisruptionTarget", "status": "True",
                "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"}]}),
            ),
            vec!["was evicted", "EvictionByEvictionAPI: Eviction API: evicting"],
        ),
        (
            "pressure",
            Some(serde_json::json!({"phase": "Failed", "reason": "Evicted",
                "message": "The node was low on resource: memory."})),
            vec![
                "was evicted",
                "by the kubelet: The node was low on resource: memory.",
            ],
        ),
        ("deleted", None, vec!["was deleted before it finished"]),
    ];
    let mut names = Vec::new();
    for (cluster, _, _) in &cases {
        names.push(apply_with_start_timeout(&client, cluster, 600).await);
    }
    let ctl = start(&client, config(cases.len()));
    let pods = Api::<Pod>::namespaced(client.clone(), NS);
    for ((_, after, _), name) in cases.iter().zip(&names) {
        wait_phase(&client, name, Phase::Running).await;
        let job = job_name(name);
        let pod = format!("{job}-abcde");
        play_pod(&client, &job, &pod, running.clone()).await;
        // The pod ran a while: the operation goes on.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert_eq!(phase(&client, name).await, Some(Phase::Running));
        match after {
            Some(status) => {
                let patch = serde_json::json!({"status": status});
                pods.patch_status(&pod, &Default::default(), &kube::api::Patch::Merge(&patch))
                    .await
                    .unwrap();
            }
            None => {
                pods.delete(&pod, &DeleteParams::default()).await.unwrap();
            }
        }
    }
    for ((cluster, _, says), name) in cases.iter().zip(&names) {
        let failed = wait_phase(&client, name, Phase::Failed).await;
        let message = failed.status.unwrap().message.unwrap_or_default();
        assert!(message.starts_with("PodLost: pod kok-"), "{cluster}: {message}");
        for part in says {
            assert!(message.contains(part), "{cluster}: {message} does not say {part}");
        }
        let job = job_name(name);
        wait_for(&format!("Job {job} to be deleted"), || async {
            (!jobs(&client).await.contains(&job)).then_some(())
        })
        .await;
    }
    ctl.stop().await;
}

#[tokio::test]
async fn the_examples_repository_playbook_gets_a_job_that_mounts_its_pinned_files_and_runs_them() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kok::controller::job::REPOSITORY_DIR;
    let server = server().await;
    let client = server.client();
    // The example repository as it is: its local cluster runs hello, kept in playbooks/ beside clusters/.
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/repo-layout");
    let parsed = kok::layout::parse_repo(&kok::layout::DiskTree::new(&example), "clusters");
    let local = parsed.clusters.iter().find(|c| c.name == "local").unwrap();
    let d = render(local, 1, &[]);
    apply_cluster(&client, NS, &d).await.unwrap();
    let ctl = start(&client, config(4));
    let name = op_name(&d, "hello");
    wait_phase(&client, &name, Phase::Running).await;

    let job = Api::<Job>::namespaced(client.clone(), NS)
        .get(&job_name(&name))
        .await
        .unwrap();
    let pod = job.spec.clone().unwrap().template.spec.unwrap();
    let container = &pod.containers[0];
    let mount = container
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == REPOSITORY_DIR)
        .expect("the repository files are mounted");
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .unwrap();
    // Every ConfigMap the volume needs exists, immutable, holding the key it names: the kubelet can mount it.
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), NS);
    let mut paths = Vec::new();
    for source in volume.projected.as_ref().unwrap().sources.iter().flatten() {
        let projection = source.config_map.as_ref().unwrap();
        let cm = config_maps.get(&projection.name).await.unwrap();
        assert_eq!(cm.immutable, Some(true));
        for item in projection.items.iter().flatten() {
            let in_data = cm.data.as_ref().is_some_and(|d| d.contains_key(&item.key));
            let in_binary = cm.binary_data.as_ref().is_some_and(|d| d.contains_key(&item.key));
            assert!(in_data || in_binary, "{} lacks {}", projection.name, item.key);
            paths.push(item.path.clone());
        }
    }
    assert_eq!(
        paths,
        ["playbooks/hello.yml.gz"],
        "hello.yml, over 1 KiB, is pinned compressed"
    );
    let script = &container.command.as_ref().unwrap()[2];
    assert!(
        script.contains("(cd \"$KOK_REPOSITORY\" && ansible-playbook -i \"$KOK_INVENTORY/hosts.yml\" -b 'playbooks/hello.yml')"),
        "{script}"
    );

    // The Job controller's part: its pod, from the template as it is, is accepted by the API server.
    play_pod(
        &client,
        &job_name(&name),
        "hello-pod",
        serde_json::json!({"phase": "Running"}),
    )
    .await;
    server.complete_job(NS, &job_name(&name)).await.unwrap();
    wait_phase(&client, &name, Phase::Succeeded).await;
    ctl.stop().await;
}

#[tokio::test]
async fn a_succeeded_runs_job_goes_after_the_time_kept_and_a_failed_runs_job_stays() {
    let server = server().await;
    let client = server.client();
    let dir = cluster_dir(
        "prod",
        HOSTS,
        vec![entry("ok", "ok.yml", &[]), entry("bad", "bad.yml", &[])],
        None,
    );
    let d = render(&dir, 1, &[]);
    apply_cluster(&client, NS, &d).await.unwrap();
    let mut cfg = config(4);
    cfg.keep_succeeded_jobs = Some(std::time::Duration::from_secs(2));
    let ctl = start(&client, cfg);
    let (ok, bad) = (op_name(&d, "ok"), op_name(&d, "bad"));
    wait_phase(&client, &ok, Phase::Running).await;
    server.complete_job(NS, &job_name(&ok)).await.unwrap();
    wait_phase(&client, &ok, Phase::Succeeded).await;
    // Kept for the time set: still there at once.
    assert!(jobs(&client).await.contains(&job_name(&ok)));
    wait_phase(&client, &bad, Phase::Running).await;
    server
        .fail_job(
            NS,
            &job_name(&bad),
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        )
        .await
        .unwrap();
    wait_phase(&client, &bad, Phase::Failed).await;
    wait_for("the succeeded run's Job to be deleted", || async {
        (!jobs(&client).await.contains(&job_name(&ok))).then_some(())
    })
    .await;
    // The run keeps its record; the failed run keeps its Job (and its log) a while longer.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(jobs(&client).await, vec![job_name(&bad)]);
    let done = op(&client, &ok).await.unwrap().status.unwrap();
    assert_eq!(done.phase, Phase::Succeeded);
    assert_eq!(done.job_ref.as_deref(), Some(job_name(&ok).as_str()));
    ctl.stop().await;
}
