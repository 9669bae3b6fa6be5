//! Pre-flight before each Job, end to end: `kok run` as a process against testkit and a bare remote. An
//! operation whose inputs break one of kubespray's rules fails without a Job, says the rule on its status,
//! its Event and its commit, and holds its cluster's queue; `preflight: false` lets the same entry run. A
//! cluster installed by hand (`installed:` in cluster.yml) starts with `scale.yml`; one not said installed is
//! refused.

use crate::e2e;
use crate::forge;

use e2e::{github_args, job_name, meta_cluster, posted_for, wait_for, Kok, Objects, Remote, NS};
use forge::ForgeServer;
use k8s_openapi::api::events::v1::Event;
use kok::api::Phase;
use kube::api::{Api, ListParams};

/// prod-bj: node1..node3 the control plane and etcd, node4 a worker; with `fourth`, node4 is a fourth etcd
/// member.
fn hosts(fourth: bool) -> String {
    let etcd_extra = if fourth { "        node4:\n" } else { "" };
    format!(
        "all:\n  hosts:\n    node1:\n    node2:\n    node3:\n    node4:\n  children:\n    kube_control_plane:\n      \
         hosts:\n        node1:\n        node2:\n        node3:\n    etcd:\n      hosts:\n        node1:\n        \
         node2:\n        node3:\n{etcd_extra}    kube_node:\n      hosts:\n        node4:\n"
    )
}

const INSTALL: &str = "- id: install\n  action: cluster.yml\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_breaking_a_rule_fails_without_a_job_holds_the_queue_and_preflight_false_runs_it() {
    let api = meta_cluster().await;
    let forge = ForgeServer::start().await;
    let remote = Remote::new();
    remote.write("clusters/prod-bj/hosts.yml", &hosts(false));
    remote.write("clusters/prod-bj/vars.yml", "kube_version: v1.29.10\n");
    remote.write("clusters/prod-bj/operations.yml", INSTALL);
    remote.push("prod-bj: install");
    let kok = Kok::run(&api, &remote, &github_args(&forge.url()));
    let objects = &Objects::new(&api);
    let install = wait_for("the install Job", Some(&kok), || {
        objects.job_of("prod-bj", "install")
    })
    .await;
    assert!(
        objects
            .operation("prod-bj", "install")
            .await
            .unwrap()
            .spec
            .preflight
            .is_none(),
        "nothing to say about a valid install"
    );
    api.complete_job(NS, &job_name(&install)).await.unwrap();
    wait_for("install succeeded", Some(&kok), || async {
        (objects.phase("prod-bj", "install").await? == Phase::Succeeded).then_some(())
    })
    .await;

    // node4 joins etcd, a fourth member, and a shell step is queued behind it.
    remote.write("clusters/prod-bj/hosts.yml", &hosts(true));
    remote.write(
        "clusters/prod-bj/operations.yml",
        &format!(
            "{INSTALL}- id: add-etcd\n  action: cluster.yml\n- id: nodes\n  type: shell\n  action: kubectl-get-nodes\n"
        ),
    );
    let commit = remote.push("prod-bj: node4 joins etcd");
    let refused = wait_for("add-etcd refused", Some(&kok), || async {
        let op = objects.operation("prod-bj", "add-etcd").await?;
        (op.status.as_ref()?.phase == Phase::Failed).then_some(op)
    })
    .await;
    let finding = &refused
        .spec
        .preflight
        .as_ref()
        .expect("the pinned findings")
        .findings[0];
    assert_eq!(
        (finding.rule.as_str(), finding.path.as_str(), finding.line),
        ("etcd-odd", "clusters/prod-bj/hosts.yml", 13)
    );
    let status = refused.status.clone().unwrap();
    let message = status.message.unwrap_or_default();
    assert!(
        message
            .starts_with("pre-flight: etcd-odd: etcd has 4 hosts: kubespray v2.27.0 stops on an even number")
            && message.ends_with("(clusters/prod-bj/hosts.yml:13)"),
        "{message}"
    );
    assert_eq!(status.job_ref, None, "no Job");
    assert!(status.start_time.is_none() && status.end_time.is_some());
    assert!(
        objects.job_of("prod-bj", "add-etcd").await.is_none() && objects.jobs().await.len() == 1,
        "only install ever had a Job"
    );
    // The failure holds the queue.
    let held = wait_for("nodes held", Some(&kok), || async {
        let op = objects.operation("prod-bj", "nodes").await?;
        let message = op.status.as_ref()?.message.clone()?;
        message
            .starts_with("held: prod-bj/add-etcd failed")
            .then_some(message)
    })
    .await;
    assert!(held.contains("bump its rerun or remove it"), "{held}");
    // The commit says so, on the forge and in the notes, and an Event says which rule.
    let failure = wait_for("the failure on the forge", Some(&kok), || async {
        posted_for(&forge.requests(), &commit, "kok/prod-bj/add-etcd")
            .into_iter()
            .find(|p| p.state == "failure")
    })
    .await;
    assert!(
        failure
            .description
            .starts_with("failed: pre-flight: etcd-odd: etcd has 4 hosts"),
        "{failure:?}"
    );
    wait_for("the failure in the notes", Some(&kok), || async {
        remote
            .note(&commit)
            .lines()
            .any(|l| l.starts_with("kok/prod-bj/add-etcd: failure ") && l.contains("pre-flight: etcd-odd"))
            .then_some(())
    })
    .await;
    let events: Api<Event> = Api::namespaced(api.client(), NS);
    let event = wait_for("the PreflightFailed Event", Some(&kok), || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("PreflightFailed"))
    })
    .await;
    assert!(
        event.note.unwrap_or_default().contains("pre-flight: etcd-odd"),
        "the Event names the rule"
    );

    // A person who knows better: the same entry with preflight: false is a new run, and it starts.
    remote.write(
        "clusters/prod-bj/operations.yml",
        &format!(
            "{INSTALL}- id: add-etcd\n  action: cluster.yml\n  preflight: false\n- id: nodes\n  type: \
             shell\n  action: kubectl-get-nodes\n"
        ),
    );
    remote.push("prod-bj: add node4 to etcd anyway");
    let job = wait_for("the add-etcd Job", Some(&kok), || async {
        let ops = objects.operations().await;
        let rerun = ops
            .iter()
            .find(|o| o.spec.id == "add-etcd" && o.spec.preflight.as_ref().is_some_and(|p| p.skipped))?;
        let name = rerun.status.as_ref()?.job_ref.clone()?;
        Api::<k8s_openapi::api::batch::v1::Job>::namespaced(api.client(), NS)
            .get_opt(&name)
            .await
            .ok()
            .flatten()
    })
    .await;
    let script = serde_json::to_string(&job).unwrap();
    assert!(
        script.contains("pre-flight skipped (preflight: false in operations.yml)"),
        "the run's log says so first"
    );
    api.complete_job(NS, &job_name(&job)).await.unwrap();
    // Its success lifts the hold: the shell step queued behind it runs (a shell step is no kubespray run,
    // so the cluster's even etcd never refused it).
    let nodes = wait_for("the nodes Job", Some(&kok), || objects.job_of("prod-bj", "nodes")).await;
    let op = objects.operation("prod-bj", "nodes").await.unwrap();
    assert_eq!(op.spec.preflight, None, "{:?}", op.spec.preflight);
    assert_eq!(op.status.unwrap().job_ref, Some(job_name(&nodes)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_installed_by_hand_starts_with_scale_yml_and_one_not_said_installed_is_refused() {
    let api = meta_cluster().await;
    let remote = Remote::new();
    let scale = "- id: add-node4\n  action: scale.yml\n  extraArgs: [--limit=node4]\n";
    for cluster in ["prod-bj", "prod-sh"] {
        remote.write(&format!("clusters/{cluster}/hosts.yml"), &hosts(false));
        remote.write(
            &format!("clusters/{cluster}/vars.yml"),
            "kube_version: v1.29.10\n",
        );
        remote.write(&format!("clusters/{cluster}/operations.yml"), scale);
    }
    // prod-bj was installed by hand with kubespray and runs v1.29.10; nothing says so of prod-sh.
    remote.write(
        "clusters/prod-bj/cluster.yml",
        "installed:\n  kubeVersion: v1.29.10\n",
    );
    remote.push("prod-bj, prod-sh: add node4");
    let kok = Kok::run(&api, &remote, &[]);
    let objects = &Objects::new(&api);

    let job = wait_for("prod-bj's scale Job", Some(&kok), || {
        objects.job_of("prod-bj", "add-node4")
    })
    .await;
    let adopted = objects.operation("prod-bj", "add-node4").await.unwrap();
    assert_eq!(adopted.spec.preflight, None, "nothing refuses it");
    let cluster = objects.cluster("prod-bj").await.unwrap();
    assert_eq!(
        cluster.spec.kubernetes.unwrap().kube_version.as_deref(),
        Some("v1.29.10")
    );
    api.complete_job(NS, &job_name(&job)).await.unwrap();
    wait_for("prod-bj's scale succeeded", Some(&kok), || async {
        (objects.phase("prod-bj", "add-node4").await? == Phase::Succeeded).then_some(())
    })
    .await;

    let refused = wait_for("prod-sh's scale refused", Some(&kok), || async {
        let op = objects.operation("prod-sh", "add-node4").await?;
        (op.status.as_ref()?.phase == Phase::Failed).then_some(op)
    })
    .await;
    let findings = &refused
        .spec
        .preflight
        .as_ref()
        .expect("the pinned findings")
        .findings;
    assert_eq!(
        (
            findings[0].rule.as_str(),
            findings[0].path.as_str(),
            findings[0].line
        ),
        ("operation-order", "clusters/prod-sh/operations.yml", 1)
    );
    let message = refused.status.unwrap().message.unwrap_or_default();
    assert!(
        message.contains("installed: true"),
        "the refusal says what to write: {message}"
    );
    assert!(objects.job_of("prod-sh", "add-node4").await.is_none(), "no Job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_playbook_kept_in_the_repository_gets_a_job_on_a_kubespray_cluster_and_one_in_neither_is_refused() {
    let api = meta_cluster().await;
    let forge = ForgeServer::start().await;
    let remote = Remote::new();
    remote.write("clusters/prod-bj/hosts.yml", &hosts(false));
    remote.write("clusters/prod-bj/vars.yml", "kube_version: v1.29.10\n");
    remote.write(
        "playbooks/ok.yml",
        "- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.ping:\n",
    );
    remote.write(
        "clusters/prod-bj/operations.yml",
        "- id: ok\n  action: playbooks/ok.yml\n- id: absent\n  action: playbooks/absent.yml\n",
    );
    remote.push("prod-bj: a playbook of the repository, and one of nowhere");
    let kok = Kok::run(&api, &remote, &github_args(&forge.url()));
    let objects = &Objects::new(&api);
    let job = wait_for("the ok Job", Some(&kok), || objects.job_of("prod-bj", "ok")).await;
    let ok = objects.operation("prod-bj", "ok").await.unwrap();
    assert_eq!(ok.spec.preflight, None, "the repository's playbook exists");
    let pinned: Vec<&str> = ok.spec.repository_files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(pinned, ["playbooks/ok.yml"]);
    let spec = serde_json::to_string(&job).unwrap();
    assert!(
        spec.contains("/kok/repository") && spec.contains(&ok.spec.repository_files[0].config_map),
        "the Job mounts the pinned playbook: {spec}"
    );
    api.complete_job(NS, &job_name(&job)).await.unwrap();
    let refused = wait_for("absent refused", Some(&kok), || async {
        let op = objects.operation("prod-bj", "absent").await?;
        (op.status.as_ref()?.phase == Phase::Failed).then_some(op)
    })
    .await;
    let message = refused.status.unwrap().message.unwrap_or_default();
    assert!(
        message.starts_with(
            "pre-flight: playbook-exists: action playbooks/absent.yml is not a playbook of kubespray v2.27.0"
        ),
        "{message}"
    );
    assert!(objects.job_of("prod-bj", "absent").await.is_none(), "no Job");
}
