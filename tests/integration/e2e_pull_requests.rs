//! The pull-request story end to end: `kok run` as a separate process against testkit, a bare remote
//! holding `refs/pull/1/head` and a GitHub fake with statuses and comments. The reviewer sees on the
//! pull request what the merge will do; the merge then does exactly that, and nothing ran before it.

use crate::e2e;
use crate::forge;

use e2e::{
    assert_pending_then, git, github_args, hosts, job_name, meta_cluster, posted, posted_for, wait_for, Kok,
    Objects, Remote, NS, TOKEN,
};
use forge::comments::{Comments, Kind};
use forge::ForgeServer;

const OPS_INSTALL: &str = "- id: install\n  action: cluster.yml\n";
const OPS_SCALE: &str = "- id: install\n  action: cluster.yml\n\
                         - id: add-node7\n  action: scale.yml\n  extraArgs: [--limit=node7]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_request_shows_the_plan_and_its_merge_runs_exactly_that() {
    let api = meta_cluster().await;
    let forge = ForgeServer::start().await;
    let comments = Comments::serve(&forge, Kind::GitHub, TOKEN);
    let remote = Remote::new();
    remote.cluster("prod-bj");
    remote.write("clusters/prod-bj/operations.yml", OPS_INSTALL);
    let first = remote.push("prod-bj: install");
    let mut args = github_args(&forge.url());
    args.push("--pr-comments".to_string());
    let kok = Kok::run(&api, &remote, &args);
    let objects = &Objects::new(&api);
    let install = wait_for("the install Job", Some(&kok), || {
        objects.job_of("prod-bj", "install")
    })
    .await;
    api.complete_job(NS, &job_name(&install)).await.unwrap();
    wait_for("install succeeded on GitHub", Some(&kok), || async {
        posted_for(&forge.requests(), &first, "kok/prod-bj/install")
            .iter()
            .any(|p| p.state == "success")
            .then_some(())
    })
    .await;
    let writes_before = objects.operations().await.len();

    // The pull request adds node7 and the operation that scales it in.
    git(&remote.work(), &["checkout", "-q", "-b", "add-node7"]);
    remote.write("clusters/prod-bj/hosts.yml", &hosts(true));
    remote.write("clusters/prod-bj/operations.yml", OPS_SCALE);
    let head = remote.push_to("add-node7", "prod-bj: add node7");
    git(&remote.bare(), &["update-ref", "refs/pull/1/head", &head]);

    let plan = wait_for("kok/plan on the pull request head", Some(&kok), || async {
        posted_for(&forge.requests(), &head, "kok/plan").pop()
    })
    .await;
    assert_eq!(plan.state, "success");
    assert_eq!(plan.description, "prod-bj: add-node7 (scale.yml) would run");
    assert_eq!(plan.authorization, format!("Bearer {TOKEN}"));
    let comment = wait_for("the plan comment", Some(&kok), || async {
        comments.on(1).pop().map(|(_, body)| body)
    })
    .await;
    assert!(comment.starts_with("<!-- kok/plan -->\n"), "{comment}");
    assert!(comment.contains("#### prod-bj"), "{comment}");
    assert!(
        comment.contains("| create | ConfigMap | `prod-bj-hosts-"),
        "the new inventory is in the plan:\n{comment}"
    );
    let planned_row = comment
        .lines()
        .find(|l| l.starts_with("| run | ClusterOperation |"))
        .unwrap_or_else(|| panic!("the plan lists the operation that would run:\n{comment}"))
        .to_string();
    assert!(
        planned_row.contains(&format!(
            "`add-node7` (`scale.yml` after `playbooks/facts.yml` without --limit) from `{}`",
            &head[..8]
        )),
        "{planned_row}"
    );

    // Nothing of the pull request was written or run.
    assert_eq!(objects.operations().await.len(), writes_before);
    assert!(objects.operation("prod-bj", "add-node7").await.is_none());
    assert_eq!(objects.jobs().await.len(), 1, "only install ever had a Job");
    assert!(
        remote.note(&head).lines().all(|l| !l.starts_with("kok/prod-bj/")),
        "no operation status on the pull request head: {}",
        remote.note(&head)
    );
    assert!(
        remote
            .note(&head)
            .lines()
            .any(|l| l.starts_with("kok/plan: success ")),
        "the notes record the plan too: {}",
        remote.note(&head)
    );

    // The merge: the same operation runs, on the merge commit.
    git(&remote.work(), &["checkout", "-q", "main"]);
    git(
        &remote.work(),
        &[
            "merge",
            "-q",
            "--no-ff",
            "add-node7",
            "-m",
            "Merge pull request #1",
        ],
    );
    git(&remote.work(), &["push", "-q", "origin", "main"]);
    let merge = git(&remote.work(), &["rev-parse", "HEAD"]);
    let scale = wait_for("the add-node7 operation", Some(&kok), || {
        objects.operation("prod-bj", "add-node7")
    })
    .await;
    let name = scale.metadata.name.clone().unwrap();
    assert!(
        planned_row.contains(&format!("`{name}`")),
        "the plan named the ClusterOperation the merge created ({name}): {planned_row}"
    );
    assert_eq!(scale.spec.source.commit, merge);
    let job = wait_for("the add-node7 Job", Some(&kok), || {
        objects.job_of("prod-bj", "add-node7")
    })
    .await;
    api.complete_job(NS, &job_name(&job)).await.unwrap();
    let statuses = wait_for("add-node7 success on the merge commit", Some(&kok), || async {
        let statuses = posted_for(&forge.requests(), &merge, "kok/prod-bj/add-node7");
        statuses.iter().any(|p| p.state == "success").then_some(statuses)
    })
    .await;
    assert_pending_then(&statuses, "success");
    for p in posted(&forge.requests()) {
        assert!(
            p.sha != head || p.context == "kok/plan",
            "only kok/plan is ever posted on the pull request head: {p:?}"
        );
    }
    assert_eq!(
        posted_for(&forge.requests(), &head, "kok/plan").len(),
        1,
        "the merged head is not planned again"
    );
    for op in objects.operations().await {
        assert_ne!(op.spec.source.commit, head, "no operation belongs to the head");
    }
    assert!(!kok.log().contains(TOKEN), "the forge token appears in kok's log");
}
