//! Scheduled operations against testkit: one run per firing, idempotent across restarts.

use crate::controller_support;

use kube::api::{Api, ListParams};
use kube::ResourceExt;

use controller_support::*;
use kok::api::{ClusterOperation, ANNOTATION_LAST_FIRED};
use kok::controller::schedule::{fire, plan};
use kok::materialize::apply::apply_cluster;

const HOSTS: &str = "all:\n  hosts:\n    node1: {}\n";

fn scheduled(schedule: &str) -> kok::layout::Operation {
    let mut e = entry("backup", "backup.yml", &[]);
    e.schedule = Some(schedule.into());
    e.entry["schedule"] = serde_json::json!(schedule);
    e
}

async fn runs(client: &kube::Client) -> Vec<ClusterOperation> {
    Api::<ClusterOperation>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|o| o.spec.scheduled_time.is_some())
        .collect()
}

#[tokio::test]
async fn firing_the_same_time_twice_makes_one_run_and_records_the_firing() {
    let server = server().await;
    let client = server.client();
    let d = render(
        &cluster_dir("prod", HOSTS, vec![scheduled("0 0 3 * * *")], None),
        1,
        &[],
    );
    apply_cluster(&client, NS, &d).await.unwrap();
    let api: Api<ClusterOperation> = Api::namespaced(client.clone(), NS);
    let base = api.get(&op_name(&d, "backup")).await.unwrap();
    let firing: jiff::Timestamp = "2026-01-02T03:00:00Z".parse().unwrap();

    let first = fire(&api, &base, firing).await.unwrap();
    let second = fire(&api, &base, firing).await.unwrap();
    assert_eq!(first, second);
    assert_eq!(first, format!("{}-202601020300", base.name_any()));
    assert_eq!(runs(&client).await.len(), 1);

    // After a restart the recorded firing is not due again.
    let base = api.get(&base.name_any()).await.unwrap();
    assert_eq!(
        base.annotations().get(ANNOTATION_LAST_FIRED).map(String::as_str),
        Some("2026-01-02T03:00:00Z")
    );
    let (due, _) = plan(&[&base], "2026-01-02T03:00:30Z".parse().unwrap());
    assert!(due.is_empty(), "{due:?}");
}

#[tokio::test]
async fn the_running_controller_creates_a_run_when_the_schedule_fires() {
    let server = server().await;
    let client = server.client();
    let d = render(
        &cluster_dir("prod", HOSTS, vec![scheduled("* * * * * *")], None),
        1,
        &[],
    );
    apply_cluster(&client, NS, &d).await.unwrap();
    let ctl = start(&client, config(4));
    let run = wait_for("a scheduled run", || async {
        runs(&client).await.into_iter().next()
    })
    .await;
    assert!(run.name_any().starts_with(&op_name(&d, "backup")));
    assert_eq!(run.spec.schedule, None);
    ctl.stop().await;
}
