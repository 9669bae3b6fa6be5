//! Against testkit, with the controller's clock moved to just before or inside a maintenance window: an
//! operation waits for its window and is woken by a timer at the opening (the queue's safety-net resync is
//! an hour), a freeze holds it, a closing window never stops a running Job, and `ignoreMaintenance` lets an
//! emergency through with a status that says so.

use crate::controller_support;

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};

use controller_support::*;
use kok::api::{Maintenance, MaintenanceFreeze, MaintenanceWindow, Phase};
use kok::controller::job::job_name;
use kok::controller::operation::IGNORED_MAINTENANCE;
use kok::controller::window::Clock;
use kok::controller::ControllerConfig;
use kok::layout::Operation;
use kok::materialize::apply::apply_cluster;
use kok::materialize::DesiredCluster;

const HOSTS: &str = "all:\n  hosts:\n    node1: {}\n";

/// A window every day from 02:00 for `duration`, in UTC.
fn daily_at_two(duration: &str) -> Maintenance {
    Maintenance {
        windows: vec![MaintenanceWindow {
            days: vec![],
            start: "02:00".into(),
            duration: duration.into(),
            time_zone: "UTC".into(),
        }],
        freezes: vec![],
    }
}

/// Controller settings whose clock reads `fake` now, and whose queue looks again by itself only hourly.
fn config_at(fake: &str) -> ControllerConfig {
    let fake: Timestamp = fake.parse().unwrap();
    let mut c = config(4);
    c.clock = Clock::offset(fake.duration_since(Timestamp::now()));
    c.queue_resync = Duration::from_secs(3600);
    c
}

fn cluster(maintenance: Maintenance, ops: Vec<Operation>) -> DesiredCluster {
    let mut dir = cluster_dir("prod", HOSTS, ops, None);
    dir.settings.maintenance = Some(maintenance);
    render(&dir, 1, &[])
}

async fn message(client: &kube::Client, name: &str) -> String {
    op(client, name)
        .await
        .and_then(|o| o.status?.message)
        .unwrap_or_default()
}

#[tokio::test]
async fn an_operation_outside_its_window_waits_and_a_timer_starts_it_when_the_window_opens() {
    let server = server().await;
    let client = server.client();
    let d = cluster(daily_at_two("1h"), vec![entry("upgrade", "upgrade.yml", &[])]);
    let name = op_name(&d, "upgrade");
    apply_cluster(&client, NS, &d).await.unwrap();
    let ctl = start(&client, config_at("2030-01-05T01:59:57Z"));

    let queued = wait_phase(&client, &name, Phase::Queued).await;
    let said = queued.status.unwrap().message.unwrap();
    assert!(
        said.starts_with("waiting for the maintenance window: Sat 2030-01-05 02:00 UTC (in "),
        "{said}"
    );
    assert!(jobs(&client).await.is_empty(), "no Job before the window opens");
    // Nothing changes in the meta-cluster: only the timer set for 02:00 can start it.
    wait_phase(&client, &name, Phase::Running).await;
    wait_job(&client, &job_name(&name)).await;
    ctl.stop().await;
}

#[tokio::test]
async fn a_window_closing_never_stops_a_running_job_and_the_next_operation_waits_for_tomorrow() {
    let server = server().await;
    let client = server.client();
    let d = cluster(
        daily_at_two("1h"),
        vec![
            entry("upgrade", "upgrade.yml", &[]),
            entry("check", "check.yml", &[]),
        ],
    );
    let (upgrade, check) = (op_name(&d, "upgrade"), op_name(&d, "check"));
    apply_cluster(&client, NS, &d).await.unwrap();
    // 02:59:58: two seconds of window left.
    let ctl = start(&client, config_at("2030-01-05T02:59:58Z"));
    wait_phase(&client, &upgrade, Phase::Running).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        phase(&client, &upgrade).await,
        Some(Phase::Running),
        "still running after 03:00"
    );
    assert_eq!(jobs(&client).await, vec![job_name(&upgrade)]);

    server.complete_job(NS, &job_name(&upgrade)).await.unwrap();
    wait_phase(&client, &upgrade, Phase::Succeeded).await;
    wait_for("check to wait for the next window", || async {
        let said = message(&client, &check).await;
        said.starts_with("waiting for the maintenance window: Sun 2030-01-06 02:00 UTC (in ")
            .then_some(())
    })
    .await;
    assert_eq!(jobs(&client).await, vec![job_name(&upgrade)]);
    ctl.stop().await;
}

#[tokio::test]
async fn a_freeze_holds_an_operation_inside_its_window_and_ignore_maintenance_lets_an_emergency_through() {
    let server = server().await;
    let client = server.client();
    let mut maintenance = daily_at_two("4h");
    maintenance.freezes.push(MaintenanceFreeze {
        from: "2029-12-20".into(),
        to: "2030-01-07".into(),
        time_zone: "UTC".into(),
        reason: Some("year-end".into()),
    });
    let mut emergency = entry("cve-fix", "cve.yml", &[]);
    emergency.entry["ignoreMaintenance"] = serde_json::json!(true);
    emergency.ignore_maintenance = true;
    let frozen = cluster(maintenance.clone(), vec![entry("upgrade", "upgrade.yml", &[])]);
    let mut other = cluster_dir("edge", HOSTS, vec![emergency], None);
    other.settings.maintenance = Some(maintenance);
    let urgent = render(&other, 1, &[]);
    let (upgrade, cve) = (op_name(&frozen, "upgrade"), op_name(&urgent, "cve-fix"));
    apply_cluster(&client, NS, &frozen).await.unwrap();
    apply_cluster(&client, NS, &urgent).await.unwrap();
    let ctl = start(&client, config_at("2030-01-05T03:00:00Z"));

    let running = wait_phase(&client, &cve, Phase::Running).await;
    let said = running.status.unwrap().message.unwrap();
    assert_eq!(
        said,
        format!("{IGNORED_MAINTENANCE}frozen until 2030-01-07 (year-end)")
    );
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    wait_for("a Started Event saying it ignored maintenance", || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("Started")
                    && e.note.as_deref().is_some_and(|n| n.contains(IGNORED_MAINTENANCE))
            })
            .then_some(())
    })
    .await;

    let queued = wait_phase(&client, &upgrade, Phase::Queued).await;
    assert_eq!(
        queued.status.unwrap().message.as_deref(),
        Some("frozen until 2030-01-07 (year-end)")
    );
    assert_eq!(jobs(&client).await, vec![job_name(&cve)]);
    ctl.stop().await;
}

#[test]
fn the_clock_offset_of_these_tests_is_what_the_controller_reads() {
    let c = config_at("2030-01-05T01:59:57Z");
    let off = c
        .clock
        .now()
        .duration_since("2030-01-05T01:59:57Z".parse().unwrap());
    assert!(
        off >= SignedDuration::ZERO && off < SignedDuration::from_secs(5),
        "{off:?}"
    );
}
