//! The product's stories end to end: `kok run` as a separate process against testkit, a bare git
//! remote on disk and a recording GitHub server, with commit statuses checked on both sinks.

mod e2e;
mod forge;

use e2e::{
    assert_pending_then, github_args, hosts, job_name, meta_cluster, posted_for, wait_for, Kok, Objects,
    Remote, NS, TOKEN,
};
use forge::ForgeServer;
use kok::api::Phase;

const OPS_INSTALL: &str = "- id: install\n  action: cluster.yml\n";
const OPS_SCALE: &str = "- id: install\n  action: cluster.yml\n\
                         - id: add-node7\n  action: scale.yml\n  extraArgs: [--limit=node7]\n";

/// A remote with one valid cluster `prod-bj` running `install`; returns the remote and the first sha.
fn one_cluster_remote() -> (Remote, String) {
    let remote = Remote::new();
    remote.cluster("prod-bj");
    remote.write("clusters/prod-bj/operations.yml", OPS_INSTALL);
    let sha = remote.push("prod-bj: install");
    (remote, sha)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_adding_a_host_and_a_scale_operation_runs_it_on_the_new_inventory_and_reports_success() {
    let api = meta_cluster().await;
    let forge = ForgeServer::start().await;
    let (remote, first) = one_cluster_remote();
    let kok = Kok::run(&api, &remote, &github_args(&forge.url()));
    let objects = &Objects::new(&api);

    let install_job = wait_for("the install Job", Some(&kok), || {
        objects.job_of("prod-bj", "install")
    })
    .await;
    let install_job = job_name(&install_job);
    api.start_job(NS, &install_job).await.unwrap();

    // The pull request is merged while install is still running.
    remote.write("clusters/prod-bj/hosts.yml", &hosts(true));
    remote.write("clusters/prod-bj/operations.yml", OPS_SCALE);
    let merge = remote.push("prod-bj: add node7");

    let scale = wait_for("add-node7 queued behind install", Some(&kok), || async {
        let op = objects.operation("prod-bj", "add-node7").await?;
        (op.status.as_ref()?.phase == Phase::Queued).then_some(op)
    })
    .await;
    assert_eq!(
        scale.status.as_ref().unwrap().job_ref,
        None,
        "one operation at a time per cluster"
    );
    assert_eq!(
        objects.jobs().await.len(),
        1,
        "only install has a Job while it runs"
    );
    assert_eq!(
        scale.spec.source.commit, merge,
        "the operation belongs to the merge commit"
    );
    assert_eq!(scale.spec.extra_args, vec!["--limit=node7".to_string()]);

    // Inputs are pinned: the new operation has the new inventory, install keeps the old one.
    let install = objects.operation("prod-bj", "install").await.unwrap();
    assert_eq!(install.spec.source.commit, first);
    let new_hosts = scale.spec.hosts_conf_ref.name.clone();
    let old_hosts = install.spec.hosts_conf_ref.name.clone();
    assert_ne!(new_hosts, old_hosts);
    assert!(objects.hosts_of(&new_hosts).await.unwrap().contains("node7"));
    assert!(!objects.hosts_of(&old_hosts).await.unwrap().contains("node7"));

    api.complete_job(NS, &install_job).await.unwrap();
    let scale_job = wait_for("the add-node7 Job", Some(&kok), || {
        objects.job_of("prod-bj", "add-node7")
    })
    .await;
    let scale_job_json = serde_json::to_string(&scale_job).unwrap();
    assert!(
        scale_job_json.contains(&new_hosts),
        "the Job mounts the pinned inventory {new_hosts}"
    );
    assert!(!scale_job_json.contains(&old_hosts));
    api.complete_job(NS, &job_name(&scale_job)).await.unwrap();

    let context = "kok/prod-bj/add-node7";
    let note = wait_for("the success note on the merge commit", Some(&kok), || async {
        let note = remote.note(&merge);
        note.lines()
            .any(|l| l.starts_with(&format!("{context}: success ")))
            .then_some(note)
    })
    .await;
    assert!(
        note.lines().any(|l| l.starts_with("kok/sync: success ")),
        "the merge commit also records kok/sync: {note}"
    );
    let statuses = wait_for("success on GitHub", Some(&kok), || async {
        let statuses = posted_for(&forge.requests(), &merge, context);
        statuses.iter().any(|p| p.state == "success").then_some(statuses)
    })
    .await;
    assert_pending_then(&statuses, "success");
    let install_statuses = posted_for(&forge.requests(), &first, "kok/prod-bj/install");
    assert_pending_then(&install_statuses, "success");
    assert!(
        posted_for(&forge.requests(), &first, context).is_empty(),
        "add-node7 is reported on the commit that introduced it only"
    );
    for p in statuses.iter().chain(&install_statuses) {
        assert_eq!(p.authorization, format!("Bearer {TOKEN}"));
    }
    assert!(!kok.log().contains(TOKEN), "the forge token appears in kok's log");
}
