//! The embedded controller after a crash: every operation that had not finished is looked at again once
//! the caches have listed, however many there are, whether it waited for a Job slot or its Job was
//! created and not yet recorded.

use crate::controller_support;

use k8s_openapi::api::batch::v1::Job;
use kube::api::Api;

use controller_support::*;
use kok::api::Phase;
use kok::controller::job::{build_job, job_name};
use kok::controller::JobConfig;
use kok::materialize::apply::apply_cluster;

const HOSTS: &str = "all:\n  hosts:\n    node1: {}\n";

/// How many clusters, each with one operation: enough that many reconciles start at once after a restart.
const CLUSTERS: usize = 12;

/// Applies `CLUSTERS` clusters with one `install` operation each; returns the operations' names.
async fn clusters(client: &kube::Client) -> Vec<String> {
    let mut names = Vec::new();
    for i in 0..CLUSTERS {
        let d = render(
            &cluster_dir(
                &format!("c{i:02}"),
                HOSTS,
                vec![entry("install", "cluster.yml", &[])],
                None,
            ),
            1,
            &[],
        );
        apply_cluster(client, NS, &d).await.unwrap();
        names.push(op_name(&d, "install"));
    }
    names
}

async fn count_in(client: &kube::Client, names: &[String], want: Phase) -> usize {
    let mut n = 0;
    for name in names {
        if phase(client, name).await == Some(want) {
            n += 1;
        }
    }
    n
}

#[tokio::test]
async fn operations_waiting_for_a_job_slot_at_a_crash_start_once_slots_free_up_after_the_restart() {
    let server = server().await;
    let client = server.client();
    let names = clusters(&client).await;
    let ctl = start(&client, config(2));
    wait_for("two running and the others waiting for a Job slot", || async {
        let running = count_in(&client, &names, Phase::Running).await;
        let queued = count_in(&client, &names, Phase::Queued).await;
        (running == 2 && queued == CLUSTERS - 2).then_some(())
    })
    .await;
    ctl.kill();

    let ctl = start(&client, config(2));
    for job in jobs(&client).await {
        server.complete_job(NS, &job).await.unwrap();
    }
    wait_for("the two finished and two more started", || async {
        let done = count_in(&client, &names, Phase::Succeeded).await;
        let running = count_in(&client, &names, Phase::Running).await;
        (done == 2 && running == 2).then_some(())
    })
    .await;
    assert_eq!(jobs(&client).await.len(), 4, "one Job per started operation");
    ctl.stop().await;
}

#[tokio::test]
async fn operations_whose_jobs_were_created_but_not_recorded_before_a_crash_are_adopted_and_finish() {
    let server = server().await;
    let client = server.client();
    let names = clusters(&client).await;
    // The crash window of every operation: its Job exists, its status is still empty.
    let job_api: Api<Job> = Api::namespaced(client.clone(), NS);
    for name in &names {
        let live = op(&client, name).await.unwrap();
        assert!(live.status.is_none());
        let job = build_job(&live, &JobConfig::default());
        job_api.create(&Default::default(), &job).await.unwrap();
        server.complete_job(NS, &job_name(name)).await.unwrap();
    }

    server.requests().reset();
    let ctl = start(&client, config(2));
    wait_for("every operation to end as its Job did", || async {
        (count_in(&client, &names, Phase::Succeeded).await == CLUSTERS).then_some(())
    })
    .await;
    assert_eq!(server.requests().count("create", "jobs"), 0, "no second Job");
    ctl.stop().await;
}
