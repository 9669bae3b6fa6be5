//! Apply and prune against testkit: content hashes, immutable inputs, operations created once, cancel on
//! removal, cluster removal, ConfigMap ownership and the persisted state.

use crate::controller_support;

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kube::ResourceExt;

use controller_support::*;
use kok::api::{Cluster, ClusterOperation, Phase, LABEL_CURRENT};
use kok::materialize::apply::{apply_cluster, live_cluster_names, remove_cluster, ApplyStats};
use kok::materialize::state::{load_state, save_state, ReconcileState};

const HOSTS: &str = "all:\n  hosts:\n    node1: {}\n";
const HOSTS2: &str = "all:\n  hosts:\n    node1: {}\n    node7: {}\n";

async fn config_maps(client: &kube::Client) -> Vec<ConfigMap> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    api.list(&ListParams::default().labels("app.kubernetes.io/managed-by=kok"))
        .await
        .unwrap()
        .items
}

async fn operations(client: &kube::Client) -> Vec<ClusterOperation> {
    Api::<ClusterOperation>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

#[tokio::test]
async fn an_unchanged_repoll_writes_nothing() {
    let server = server().await;
    let client = server.client();
    let dir = cluster_dir("prod", HOSTS, vec![entry("install", "cluster.yml", &[])], None);
    let desired = render(&dir, 1, &[]);
    let first = apply_cluster(&client, NS, &desired).await.unwrap();
    assert_eq!(
        first.writes, 4,
        "Cluster, one operation, two ConfigMaps: {first:?}"
    );

    server.requests().reset();
    let again = apply_cluster(&client, NS, &render(&dir, 1, &[])).await.unwrap();
    assert_eq!(again.writes, 0);
    assert_eq!(
        server.requests().writes(),
        0,
        "requests: {:?}",
        server.requests().snapshot()
    );
}

#[tokio::test]
async fn an_edited_operation_makes_a_new_run_and_an_unedited_one_never_does() {
    let server = server().await;
    let client = server.client();
    let v1 = cluster_dir(
        "prod",
        HOSTS,
        vec![
            entry("install", "cluster.yml", &[]),
            entry("scale", "scale.yml", &["--limit=node1"]),
        ],
        None,
    );
    let d1 = render(&v1, 1, &[]);
    apply_cluster(&client, NS, &d1).await.unwrap();
    let v2 = cluster_dir(
        "prod",
        HOSTS2,
        vec![
            entry("install", "cluster.yml", &[]),
            entry("scale", "scale.yml", &["--limit=node7"]),
        ],
        None,
    );
    let d2 = render(&v2, 2, &[("install", 1), ("scale", 2)]);
    server.requests().reset();
    let stats = apply_cluster(&client, NS, &d2).await.unwrap();

    let names: BTreeSet<String> = operations(&client).await.iter().map(|o| o.name_any()).collect();
    assert_eq!(op_name(&d1, "install"), op_name(&d2, "install"));
    assert_ne!(op_name(&d1, "scale"), op_name(&d2, "scale"));
    assert_eq!(names.len(), 3, "install once, scale twice: {names:?}");
    // Created by server-side apply (a patch), with the old run's cancel and label patches: three in all.
    assert_eq!(server.requests().count("patch", "clusteroperations"), 3);
    assert_eq!(server.requests().count("create", "clusteroperations"), 0);
    // Cluster, new run, new hosts ConfigMap, the old hosts no longer current (the install pins it), cancel
    // + unlabel the old run; no owner to add to vars.
    assert_eq!(stats.writes, 6, "{stats:?}");
    assert_eq!(
        stats.canceled, 1,
        "the edited-away run had not started: {stats:?}"
    );
}

#[tokio::test]
async fn a_removed_pending_operation_is_canceled_with_a_failure_status() {
    let server = server().await;
    let client = server.client();
    let v1 = cluster_dir(
        "prod",
        HOSTS,
        vec![
            entry("install", "cluster.yml", &[]),
            entry("extra", "extra.yml", &[]),
        ],
        None,
    );
    let d1 = render(&v1, 1, &[]);
    apply_cluster(&client, NS, &d1).await.unwrap();
    let v2 = cluster_dir("prod", HOSTS, vec![entry("install", "cluster.yml", &[])], None);
    let stats = apply_cluster(&client, NS, &render(&v2, 2, &[("install", 1)]))
        .await
        .unwrap();
    assert_eq!(stats.canceled, 1);

    let extra = op(&client, &op_name(&d1, "extra"))
        .await
        .expect("the canceled operation stays as a record");
    let status = extra.status.clone().unwrap();
    assert_eq!(status.phase, Phase::Canceled);
    let desired = status.desired_status.expect("a commit status is desired");
    assert_eq!(desired.state, kok::api::StatusState::Failure);
    assert!(
        desired.description.contains("removed from operations.yml"),
        "{}",
        desired.description
    );
    assert!(!extra.labels().contains_key(LABEL_CURRENT));
    assert_eq!(
        phase(&client, &op_name(&d1, "install")).await,
        Some(Phase::Pending)
    );
}

#[tokio::test]
async fn config_maps_are_created_once_without_owners_kept_while_pinned_and_swept_once_nothing_names_them() {
    use kok::materialize::shared::sweep_listing;
    use std::time::Duration;
    let server = server().await;
    let client = server.client();
    let v1 = cluster_dir("prod", HOSTS, vec![], None);
    let d1 = render(&v1, 1, &[]);
    apply_cluster(&client, NS, &d1).await.unwrap();
    let cms = config_maps(&client).await;
    assert_eq!(cms.len(), 2);
    assert!(cms.iter().all(|c| c.immutable == Some(true)));
    // No owner references: one per run that pins an inventory would be 20 in every inventory of a
    // cluster with 20 runs kept; kok deletes what nothing names.
    assert!(cms.iter().all(|c| c.owner_references().is_empty()), "{cms:?}");

    // hosts.yml changes with a new operation: the new hosts ConfigMap is created; the old one, which no
    // run pins, is deleted; vars stays.
    let v2 = cluster_dir("prod", HOSTS2, vec![entry("scale", "scale.yml", &[])], None);
    let d2 = render(&v2, 2, &[]);
    server.requests().reset();
    let stats = apply_cluster(&client, NS, &d2).await.unwrap();
    assert!(
        stats.writes <= 5,
        "a one-cluster change is at most 5 writes: {stats:?}"
    );
    let cms = config_maps(&client).await;
    let names: BTreeSet<String> = cms.iter().map(|c| c.name_any()).collect();
    let wanted: BTreeSet<String> = d2.config_maps.iter().map(|c| c.name_any()).collect();
    assert_eq!(names, wanted);
    assert!(cms.iter().all(|c| c.owner_references().is_empty()), "{cms:?}");

    // A third hosts.yml: the second one is still pinned by the operation, so it stays, no longer current.
    let v3 = cluster_dir(
        "prod",
        "all:\n  hosts:\n    node9: {}\n",
        vec![entry("scale", "scale.yml", &[])],
        None,
    );
    apply_cluster(&client, NS, &render(&v3, 3, &[("scale", 2)]))
        .await
        .unwrap();
    let pinned = d2.config_maps[0].name_any();
    let cm = config_maps(&client)
        .await
        .into_iter()
        .find(|c| c.name_any() == pinned)
        .expect("pinned stays");
    assert!(!cm.labels().contains_key(LABEL_CURRENT));
    // The sweep keeps it while the run names it, and deletes it once the run is gone (the history limit
    // took it); the Cluster's current inputs stay.
    assert_eq!(sweep_listing(&client, NS, Duration::ZERO).await.unwrap(), 0);
    Api::<ClusterOperation>::namespaced(client.clone(), NS)
        .delete(&op_name(&d2, "scale"), &Default::default())
        .await
        .unwrap();
    assert_eq!(sweep_listing(&client, NS, Duration::ZERO).await.unwrap(), 1);
    let left: BTreeSet<String> = config_maps(&client).await.iter().map(|c| c.name_any()).collect();
    assert!(!left.contains(&pinned), "{left:?}");
    assert_eq!(left.len(), 2, "the current inventory and vars.yml: {left:?}");
}

#[tokio::test]
async fn a_removed_cluster_loses_its_cluster_and_unused_config_maps_but_keeps_its_history() {
    let server = server().await;
    let client = server.client();
    let dir = cluster_dir("gone", HOSTS, vec![entry("install", "cluster.yml", &[])], None);
    let d = render(&dir, 1, &[]);
    apply_cluster(&client, NS, &d).await.unwrap();
    let keep = cluster_dir("kept", HOSTS, vec![], None);
    apply_cluster(&client, NS, &render(&keep, 1, &[])).await.unwrap();

    // A full resync removes every live Cluster whose directory is gone.
    let desired = BTreeSet::from(["kept".to_string()]);
    let mut stats = ApplyStats::default();
    for name in live_cluster_names(&client, NS).await.unwrap() {
        if !desired.contains(&name) {
            stats += remove_cluster(&client, NS, &name).await.unwrap();
        }
    }
    assert_eq!(stats.canceled, 1, "the pending install is canceled: {stats:?}");
    let clusters: Vec<String> = Api::<Cluster>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|c| c.name_any())
        .collect();
    assert_eq!(clusters, ["kept"]);
    assert_eq!(
        phase(&client, &op_name(&d, "install")).await,
        Some(Phase::Canceled)
    );
    // The canceled operation pins its ConfigMaps, so they stay as long as it does.
    let gone_cms = config_maps(&client)
        .await
        .into_iter()
        .filter(|c| c.name_any().starts_with("gone-"))
        .count();
    assert_eq!(gone_cms, 2);
    // Removing it again is a no-op.
    assert_eq!(remove_cluster(&client, NS, "gone").await.unwrap().writes, 0);
}

#[tokio::test]
async fn the_last_reconciled_commit_survives_a_restart() {
    let server = server().await;
    let client = server.client();
    assert_eq!(load_state(&client, NS).await.unwrap(), None);
    let state = ReconcileState {
        repo: "file:///srv/infra.git".into(),
        ref_name: "main".into(),
        commit: sha(7),
        time: "2026-01-01T00:00:00Z".into(),
    };
    save_state(&client, NS, &state).await.unwrap();
    let other_client = server.client();
    assert_eq!(load_state(&other_client, NS).await.unwrap(), Some(state));
}

#[tokio::test]
async fn an_apply_failing_on_injected_errors_is_retried_without_duplicates() {
    let server = server().await;
    let client = server.client();
    let dir = cluster_dir("prod", HOSTS, vec![entry("install", "cluster.yml", &[])], None);
    let desired = render(&dir, 1, &[]);
    // A conflict means the objects changed since they were read: they are read again and the writes
    // decided again, a few times; a conflict that persists surfaces.
    server.inject_fault(testkit::Fault::on("patch", "clusters", 409, 4));
    let err = apply_cluster(&client, NS, &desired)
        .await
        .expect_err("the injected 409 surfaces");
    assert!(err.to_string().contains("Cluster prod"), "{err}");
    server.inject_fault(testkit::Fault::on("patch", "configmaps", 500, 1));
    let err = apply_cluster(&client, NS, &desired)
        .await
        .expect_err("the injected 500 surfaces");
    assert!(err.to_string().contains("ConfigMap"), "{err}");

    let stats = apply_cluster(&client, NS, &desired).await.unwrap();
    assert!(stats.writes > 0);
    assert_eq!(operations(&client).await.len(), 1);
    assert_eq!(config_maps(&client).await.len(), 2);
    assert_eq!(
        apply_cluster(&client, NS, &desired).await.unwrap().writes,
        0,
        "converged"
    );

    // A single conflict is decided again from a fresh read and made.
    let next = render(&dir, 2, &[("install", 1)]);
    server.inject_fault(testkit::Fault::on("patch", "clusters", 409, 1));
    server.requests().reset();
    let stats = apply_cluster(&client, NS, &next).await.unwrap();
    assert_eq!(
        stats.updated, 1,
        "the Cluster is written after the conflict: {stats:?}"
    );
    assert_eq!(
        server.requests().count("list", "clusters"),
        2,
        "read again after the conflict"
    );
}

/// A cluster in kubespray's layout: `k8s-cluster.yml` with `kube_version`, and `addons.yml` with `helm`.
fn kubespray_dir(kube_version: &str, ops: Vec<kok::layout::Operation>) -> kok::layout::ClusterDir {
    let mut dir = cluster_dir("ks", HOSTS, ops, None);
    dir.inventory_dir.vars_yml = None;
    dir.inventory_dir.vars_files = vec![
        (
            "group_vars/k8s_cluster/addons.yml".into(),
            "helm_enabled: false\n".into(),
        ),
        (
            "group_vars/k8s_cluster/k8s-cluster.yml".into(),
            format!("kube_version: {kube_version}\n"),
        ),
    ];
    dir
}

#[tokio::test]
async fn a_queued_run_keeps_the_group_vars_file_of_its_commit_also_when_its_cluster_is_removed() {
    let server = server().await;
    let client = server.client();
    let d1 = render(
        &kubespray_dir("v1.31.4", vec![entry("install", "cluster.yml", &[])]),
        1,
        &[],
    );
    apply_cluster(&client, NS, &d1).await.unwrap();
    let install = op(&client, &op_name(&d1, "install")).await.unwrap();
    let list_then = install
        .spec
        .vars_files_ref
        .clone()
        .expect("named through a file list");
    let pinned_then = files_of(&client, &install.spec).await;
    assert_eq!(pinned_then.len(), 2, "{pinned_then:?}");

    // A later commit edits k8s-cluster.yml and adds an upgrade: the queued install keeps its pins, the
    // upgrade pins the new file and shares the unchanged one.
    let ops = vec![
        entry("install", "cluster.yml", &[]),
        entry("upgrade", "upgrade-cluster.yml", &[]),
    ];
    let d2 = render(&kubespray_dir("v1.32.0", ops), 2, &[("install", 1)]);
    apply_cluster(&client, NS, &d2).await.unwrap();
    let install = op(&client, &op_name(&d1, "install")).await.unwrap();
    assert_eq!(
        install.spec.vars_files_ref.as_ref(),
        Some(&list_then),
        "an operation is never updated"
    );
    let upgrade = op(&client, &op_name(&d2, "upgrade")).await.unwrap();
    let upgrade_files = files_of(&client, &upgrade.spec).await;
    let changed: Vec<_> = upgrade_files
        .iter()
        .zip(&pinned_then)
        .map(|(new, old)| (new.path.as_str(), new.config_map == old.config_map))
        .collect();
    assert_eq!(
        changed,
        [
            ("group_vars/k8s_cluster/addons.yml", true),
            ("group_vars/k8s_cluster/k8s-cluster.yml", false)
        ]
    );
    let live: BTreeSet<String> = config_maps(&client).await.iter().map(|c| c.name_any()).collect();
    assert!(live.contains(&list_then.name), "the install's file list is kept");
    for pin in pinned_then.iter().chain(&upgrade_files) {
        assert!(
            live.contains(&pin.config_map),
            "{} is kept while pinned",
            pin.config_map
        );
    }

    // The directory goes: the Cluster is removed and its pending runs canceled; every pin stays while a run
    // names it.
    remove_cluster(&client, NS, "ks").await.unwrap();
    let live: BTreeSet<String> = config_maps(&client).await.iter().map(|c| c.name_any()).collect();
    assert!(live.contains(&list_then.name), "the install's file list is kept");
    for pin in pinned_then.iter().chain(&upgrade_files) {
        assert!(
            live.contains(&pin.config_map),
            "{} is pinned by a canceled run",
            pin.config_map
        );
    }
    let clusters = Api::<Cluster>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(clusters.items.is_empty(), "the Cluster is gone");
}

/// The group_vars/host_vars files `spec` pins, read through its file list as the API server holds it.
async fn files_of(client: &kube::Client, spec: &dyn kok::api::PinnedInventory) -> Vec<kok::api::PinnedFile> {
    let list = spec.vars_files_ref().expect("a file list");
    let cm = Api::<ConfigMap>::namespaced(client.clone(), NS)
        .get(&list.name)
        .await
        .unwrap();
    kok::api::file_list(&cm).expect("a readable file list")
}

/// The shared ConfigMaps' names, as the API server lists them.
async fn shared_names(client: &kube::Client) -> BTreeSet<String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    api.list(&ListParams::default().labels(&kok::materialize::shared::shared_selector()))
        .await
        .unwrap()
        .items
        .iter()
        .map(|c| c.name_any())
        .collect()
}

#[tokio::test]
async fn two_clusters_with_identical_group_vars_share_their_config_maps_and_a_queued_run_keeps_them() {
    use kok::materialize::shared::sweep_listing;
    use std::time::Duration;
    let server = server().await;
    let client = server.client();
    let dir = |name: &str, kube_version: &str| {
        let mut d = kubespray_dir(kube_version, vec![entry("install", "cluster.yml", &[])]);
        d.name = name.into();
        d.path = format!("clusters/{name}");
        d
    };
    let a = render(&dir("a", "v1.31.4"), 1, &[]);
    let b = render(&dir("b", "v1.31.4"), 1, &[]);
    apply_cluster(&client, NS, &a).await.unwrap();
    server.requests().reset();
    apply_cluster(&client, NS, &b).await.unwrap();
    let a_install = op(&client, &op_name(&a, "install")).await.unwrap();
    let b_install = op(&client, &op_name(&b, "install")).await.unwrap();
    assert_eq!(
        a_install.spec.vars_files_ref, b_install.spec.vars_files_ref,
        "the same file list, so the same ConfigMaps"
    );
    assert_eq!(files_of(&client, &a_install.spec).await.len(), 2);
    let shared = shared_names(&client).await;
    assert_eq!(
        shared.len(),
        3,
        "one per file and one list for both clusters: {shared:?}"
    );
    let managed_fields = Api::<ConfigMap>::namespaced(client.clone(), NS)
        .get(shared.first().unwrap())
        .await
        .unwrap()
        .metadata
        .managed_fields
        .unwrap_or_default();
    assert!(
        managed_fields
            .iter()
            .all(|m| m.manager.as_deref() == Some("kok") && m.operation.as_deref() == Some("Apply")),
        "written by kok's server-side apply: {managed_fields:?}"
    );

    // b edits its k8s-cluster.yml: a new shared ConfigMap and a new list; a's queued run and b's keep
    // theirs.
    let b2 = render(&dir("b", "v1.32.0"), 2, &[("install", 1)]);
    apply_cluster(&client, NS, &b2).await.unwrap();
    assert_eq!(shared_names(&client).await.len(), 5);
    // Then b goes; its unstarted run is canceled and stays as the record, naming its inputs.
    remove_cluster(&client, NS, "b").await.unwrap();
    let swept = sweep_listing(&client, NS, Duration::ZERO).await.unwrap();
    assert_eq!(
        swept, 2,
        "only b's edited file and the list naming it, which nothing names any more, go"
    );
    let kept = shared_names(&client).await;
    assert!(kept.contains(&a_install.spec.vars_files_ref.as_ref().unwrap().name));
    for pin in &files_of(&client, &a_install.spec).await {
        assert!(
            kept.contains(&pin.config_map),
            "{} is a queued run's input",
            pin.config_map
        );
    }
    // a's queued run reads back exactly the directory it was created from.
    let cms = Api::<ConfigMap>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| (c.name_any(), c))
        .collect();
    let a_install = op(&client, &op_name(&a, "install")).await.unwrap();
    let inputs = kok::materialize::pinned::inventory_dir(&a_install.spec, &cms).unwrap();
    assert_eq!(inputs, dir("a", "v1.31.4").inventory_dir);

    // A young ConfigMap nothing names is kept (a pass creates it before the runs that pin it).
    remove_cluster(&client, NS, "a").await.unwrap();
    let ops = Api::<ClusterOperation>::namespaced(client.clone(), NS);
    for name in [op_name(&a, "install"), op_name(&b, "install")] {
        ops.delete(&name, &Default::default()).await.unwrap();
    }
    assert_eq!(
        sweep_listing(&client, NS, Duration::from_secs(600))
            .await
            .unwrap(),
        0
    );
    // Once no run names them (the history limit took the runs), they go: the list, and with it its files,
    // and each cluster's inventory.
    assert_eq!(sweep_listing(&client, NS, Duration::ZERO).await.unwrap(), 5);
    assert!(config_maps(&client).await.is_empty());
    assert!(shared_names(&client).await.is_empty());
}
