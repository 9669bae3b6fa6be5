//! Persistence: a server with a data directory keeps its objects, versions and CRDs across a
//! restart, and refuses to start on damaged or locked state.

mod common;

use std::path::Path;

use common::{cm, Widget, WidgetSpec, WidgetStatus};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{CustomResourceExt, Resource, ResourceExt};
use serde_json::json;
use testkit::{ApiServer, Options};

async fn start(dir: &Path) -> anyhow::Result<ApiServer> {
    ApiServer::start_with(Options {
        data_dir: Some(dir.to_path_buf()),
        ..Options::default()
    })
    .await
}

fn job(name: &str) -> Job {
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}
    }))
    .unwrap()
}

fn widget(name: &str, size: i64) -> Widget {
    Widget {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: WidgetSpec { size },
        status: None,
    }
}

/// Starts a server on `dir`, creates three ConfigMaps and stops it; returns the log's length.
async fn fill(dir: &Path) -> u64 {
    let server = start(dir).await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    for i in 0..3 {
        api.create(&PostParams::default(), &cm(&format!("c{i}"), "k", "v"))
            .await
            .unwrap();
    }
    drop(server);
    std::fs::metadata(dir.join("wal.log")).unwrap().len()
}

fn start_error(r: anyhow::Result<ApiServer>) -> String {
    match r {
        Ok(_) => panic!("the server started on damaged or locked state"),
        Err(e) => format!("{e:#}"),
    }
}

#[tokio::test]
async fn objects_survive_a_restart_with_their_uid_and_resource_version() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("api");
    let (config, widget_before, job_before, rv_before) = {
        let server = start(&data).await.unwrap();
        server.install_crds(&[Widget::crd()]).await.unwrap();
        let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
        let widgets: Api<Widget> = Api::default_namespaced(server.client());
        let jobs: Api<Job> = Api::default_namespaced(server.client());
        let config = cms
            .create(&PostParams::default(), &cm("config", "k", "v"))
            .await
            .unwrap();
        widgets
            .create(&PostParams::default(), &widget("w", 3))
            .await
            .unwrap();
        let status = json!({"status": WidgetStatus { phase: "Ready".into() }});
        let widget = widgets
            .patch_status("w", &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
        jobs.create(&PostParams::default(), &job("j")).await.unwrap();
        server.complete_job("default", "j").await.unwrap();
        let job = jobs.get("j").await.unwrap();
        (config, widget, job, server.resource_version())
    };

    let server = start(&data).await.unwrap();
    assert_eq!(server.resource_version(), rv_before);
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    let widgets: Api<Widget> = Api::default_namespaced(server.client());
    let jobs: Api<Job> = Api::default_namespaced(server.client());
    let config_after = cms.get("config").await.unwrap();
    assert_eq!(config_after.uid(), config.uid());
    assert_eq!(config_after.resource_version(), config.resource_version());
    assert_eq!(config_after.data, config.data);
    let widget_after = widgets
        .get("w")
        .await
        .expect("the CRD is served again after the restart");
    assert_eq!(widget_after.uid(), widget_before.uid());
    assert_eq!(widget_after.resource_version(), widget_before.resource_version());
    assert_eq!(widget_after.status, widget_before.status);
    assert_eq!(widget_after.spec, widget_before.spec);
    let job_after = jobs.get("j").await.unwrap();
    assert_eq!(job_after.uid(), job_before.uid());
    assert_eq!(job_after.resource_version(), job_before.resource_version());
    assert_eq!(job_after.status.as_ref().and_then(|s| s.succeeded), Some(1));
    assert_eq!(job_after.status, job_before.status);
}

#[tokio::test]
async fn installing_the_same_crds_on_a_restored_store_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    {
        let server = start(dir.path()).await.unwrap();
        server.install_crds(&[Widget::crd()]).await.unwrap();
        let widgets: Api<Widget> = Api::default_namespaced(server.client());
        widgets
            .create(&PostParams::default(), &widget("w", 1))
            .await
            .unwrap();
    }
    let server = start(dir.path()).await.unwrap();
    let rv = server.resource_version();
    server
        .install_crds(&[Widget::crd()])
        .await
        .expect("installing CRDs again is an update, not AlreadyExists");
    assert_eq!(
        server.resource_version(),
        rv,
        "an unchanged CRD is not written again"
    );
    let widgets: Api<Widget> = Api::default_namespaced(server.client());
    assert_eq!(widgets.get("w").await.unwrap().spec.size, 1);
}

#[tokio::test]
async fn resource_versions_keep_increasing_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let first = {
        let server = start(dir.path()).await.unwrap();
        let api: Api<ConfigMap> = Api::default_namespaced(server.client());
        let a = api
            .create(&PostParams::default(), &cm("a", "k", "v"))
            .await
            .unwrap();
        a.resource_version().unwrap().parse::<u64>().unwrap()
    };
    for round in 0..2 {
        let server = start(dir.path()).await.unwrap();
        let api: Api<ConfigMap> = Api::default_namespaced(server.client());
        let b = api
            .create(&PostParams::default(), &cm(&format!("b{round}"), "k", "v"))
            .await
            .unwrap();
        let rv: u64 = b.resource_version().unwrap().parse().unwrap();
        assert!(
            rv > first,
            "round {round}: resourceVersion {rv} is not above {first}"
        );
        assert_eq!(rv, server.resource_version());
    }
}

#[tokio::test]
async fn deletions_and_garbage_collection_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let server = start(dir.path()).await.unwrap();
        let api: Api<ConfigMap> = Api::default_namespaced(server.client());
        api.create(&PostParams::default(), &cm("gone", "k", "v"))
            .await
            .unwrap();
        let owner = api
            .create(&PostParams::default(), &cm("owner", "k", "v"))
            .await
            .unwrap();
        let mut owned = cm("owned", "k", "v");
        owned.metadata.owner_references = Some(vec![owner.controller_owner_ref(&()).unwrap()]);
        api.create(&PostParams::default(), &owned).await.unwrap();
        api.delete("gone", &DeleteParams::default()).await.unwrap();
    }
    let server = start(dir.path()).await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    assert!(
        api.get_opt("gone").await.unwrap().is_none(),
        "a deleted object came back"
    );
    assert!(api.get_opt("owned").await.unwrap().is_some());
    api.delete("owner", &DeleteParams::default()).await.unwrap();
    assert!(
        api.get_opt("owned").await.unwrap().is_none(),
        "the owner index was restored, so the dependent is collected with its owner"
    );
}

#[tokio::test]
async fn a_stop_between_the_new_snapshot_and_the_new_log_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path()).await;
    let old_log = std::fs::read(dir.path().join("wal.log")).unwrap();
    // The restart folds the log into a new snapshot, then replaces the log.
    drop(start(dir.path()).await.unwrap());
    // As if it had stopped before replacing the log: the new snapshot beside the old log.
    std::fs::write(dir.path().join("wal.log"), &old_log).unwrap();
    let server = start(dir.path())
        .await
        .expect("the records already in the snapshot are skipped");
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    for i in 0..3 {
        assert!(api.get_opt(&format!("c{i}")).await.unwrap().is_some());
    }
    let d = api
        .create(&PostParams::default(), &cm("d", "k", "v"))
        .await
        .unwrap();
    assert_eq!(d.resource_version(), Some(server.resource_version().to_string()));
}

#[tokio::test]
async fn a_truncated_log_stops_the_start_naming_the_file_and_changing_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let len = fill(dir.path()).await;
    let wal = dir.path().join("wal.log");
    let file = std::fs::OpenOptions::new().write(true).open(&wal).unwrap();
    file.set_len(len - 5).unwrap();
    drop(file);
    let before = std::fs::read(&wal).unwrap();
    let snapshot = std::fs::read(dir.path().join("snapshot")).unwrap();

    let msg = start_error(start(dir.path()).await);
    assert!(msg.contains(&wal.display().to_string()), "{msg}");
    assert!(msg.contains("truncated at byte"), "{msg}");
    assert!(
        msg.contains("truncate -s"),
        "the message says how to keep the earlier writes: {msg}"
    );
    assert_eq!(std::fs::read(&wal).unwrap(), before, "the log was rewritten");
    assert_eq!(std::fs::read(dir.path().join("snapshot")).unwrap(), snapshot);
}

#[tokio::test]
async fn cutting_a_truncated_log_back_to_the_named_offset_keeps_the_earlier_writes() {
    let dir = tempfile::tempdir().unwrap();
    let len = fill(dir.path()).await;
    let wal = dir.path().join("wal.log");
    let file = std::fs::OpenOptions::new().write(true).open(&wal).unwrap();
    file.set_len(len - 5).unwrap();
    let msg = start_error(start(dir.path()).await);
    let offset: u64 = msg
        .split("truncated at byte ")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no offset in {msg}"));
    file.set_len(offset).unwrap();
    drop(file);

    let server = start(dir.path()).await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    assert!(api.get_opt("c1").await.unwrap().is_some());
    assert!(
        api.get_opt("c2").await.unwrap().is_none(),
        "the cut write is the last one"
    );
}

#[tokio::test]
async fn a_flipped_byte_in_the_log_is_reported_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let len = fill(dir.path()).await;
    let wal = dir.path().join("wal.log");
    let mut bytes = std::fs::read(&wal).unwrap();
    bytes[len as usize - 20] ^= 0x01;
    std::fs::write(&wal, &bytes).unwrap();

    let msg = start_error(start(dir.path()).await);
    assert!(msg.contains(&wal.display().to_string()), "{msg}");
    assert!(msg.contains("corrupt at byte"), "{msg}");
    assert!(msg.contains("checksum"), "{msg}");
    assert!(msg.contains("move it aside"), "{msg}");
    assert_eq!(std::fs::read(&wal).unwrap(), bytes, "the log was rewritten");
}

#[tokio::test]
async fn a_flipped_byte_in_the_snapshot_is_reported_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path()).await;
    // Restarting folds the log into the snapshot.
    drop(start(dir.path()).await.unwrap());
    let snapshot = dir.path().join("snapshot");
    let mut bytes = std::fs::read(&snapshot).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    std::fs::write(&snapshot, &bytes).unwrap();

    let msg = start_error(start(dir.path()).await);
    assert!(msg.contains(&snapshot.display().to_string()), "{msg}");
    assert!(msg.contains("corrupt"), "{msg}");
}

#[tokio::test]
async fn a_log_without_its_snapshot_is_a_version_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path()).await;
    std::fs::remove_file(dir.path().join("snapshot")).unwrap();
    let msg = start_error(start(dir.path()).await);
    assert!(msg.contains("version mismatch"), "{msg}");
    assert!(msg.contains("snapshot"), "{msg}");
}

#[tokio::test]
async fn a_log_from_another_store_is_a_version_mismatch() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    fill(a.path()).await;
    fill(b.path()).await;
    // b restarted once more: its snapshot is newer than a's log expects.
    drop(start(b.path()).await.unwrap());
    {
        let server = start(b.path()).await.unwrap();
        let api: Api<ConfigMap> = Api::default_namespaced(server.client());
        api.create(&PostParams::default(), &cm("more", "k", "v"))
            .await
            .unwrap();
    }
    std::fs::copy(b.path().join("wal.log"), a.path().join("wal.log")).unwrap();
    let msg = start_error(start(a.path()).await);
    assert!(msg.contains("version mismatch"), "{msg}");
}

#[tokio::test]
async fn a_directory_in_use_is_refused_until_its_server_stops() {
    let dir = tempfile::tempdir().unwrap();
    let first = start(dir.path()).await.unwrap();
    let msg = start_error(start(dir.path()).await);
    assert!(msg.contains("in use by another process"), "{msg}");
    assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
    drop(first);
    start(dir.path())
        .await
        .expect("the lock is released when the server is dropped");
}

#[tokio::test]
async fn watches_from_before_a_restart_are_told_to_list_again() {
    let dir = tempfile::tempdir().unwrap();
    let old_rv = {
        let server = start(dir.path()).await.unwrap();
        let api: Api<ConfigMap> = Api::default_namespaced(server.client());
        api.create(&PostParams::default(), &cm("a", "k", "v"))
            .await
            .unwrap();
        let rv = server.resource_version();
        api.create(&PostParams::default(), &cm("b", "k", "v"))
            .await
            .unwrap();
        rv
    };
    let server = start(dir.path()).await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let mut events = api
        .watch(&kube::api::WatchParams::default().timeout(5), &old_rv.to_string())
        .await
        .unwrap()
        .boxed();
    let first = events.next().await.expect("an event").unwrap();
    match first {
        kube::api::WatchEvent::Error(e) => assert_eq!(e.code, 410),
        other => panic!("expected 410 Gone, got {other:?}"),
    }
}
