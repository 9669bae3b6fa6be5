//! `kok run --status-max-contexts`: a commit with more operations than the budget shows one
//! `kok/summary` context on the forge, while the git notes keep every operation's context.

use crate::e2e;
use crate::forge;

use std::collections::BTreeSet;

use e2e::{github_args, job_name, meta_cluster, posted, wait_for, Kok, Objects, Remote, NS};
use forge::ForgeServer;
use kok::api::Phase;

const OPS: &str = "- id: install\n  action: cluster.yml\n\
                   - id: upgrade\n  action: upgrade-cluster.yml\n\
                   - id: reset-cache\n  action: cluster.yml\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_above_the_budget_shows_a_summary_on_the_forge_and_every_context_in_the_notes() {
    let api = meta_cluster().await;
    let forge = ForgeServer::start().await;
    let remote = Remote::new();
    remote.cluster("prod-bj");
    remote.write("clusters/prod-bj/operations.yml", OPS);
    let sha = remote.push("prod-bj: three operations");
    let mut args = github_args(&forge.url());
    args.extend(["--status-max-contexts".to_string(), "2".to_string()]);
    let kok = Kok::run(&api, &remote, &args);
    let objects = &Objects::new(&api);

    // The operations of a cluster run one after the other: finish each Job as it appears.
    for id in ["install", "upgrade", "reset-cache"] {
        let job = wait_for(&format!("the {id} Job"), Some(&kok), || {
            objects.job_of("prod-bj", id)
        })
        .await;
        api.complete_job(NS, &job_name(&job)).await.unwrap();
        wait_for(&format!("{id} succeeded"), Some(&kok), || async {
            (objects.phase("prod-bj", id).await? == Phase::Succeeded).then_some(())
        })
        .await;
    }

    let summary = wait_for("the final summary on the forge", Some(&kok), || async {
        posted(&forge.requests())
            .into_iter()
            .rev()
            .find(|p| p.sha == sha && p.context == "kok/summary")
            .filter(|p| p.state == "success")
    })
    .await;
    assert_eq!(summary.description, "3/3 succeeded");
    let contexts: BTreeSet<String> = posted(&forge.requests())
        .into_iter()
        .filter(|p| p.sha == sha)
        .map(|p| p.context)
        .collect();
    assert_eq!(
        contexts,
        BTreeSet::from(["kok/summary".to_string(), "kok/sync".to_string()]),
        "no operation's own context on the forge"
    );
    let note = wait_for("every context in the notes", Some(&kok), || async {
        let note = remote.note(&sha);
        (note.lines().filter(|l| l.contains(": success ")).count() >= 4).then_some(note)
    })
    .await;
    for context in [
        "kok/sync",
        "kok/prod-bj/install",
        "kok/prod-bj/upgrade",
        "kok/prod-bj/reset-cache",
    ] {
        assert!(
            note.contains(&format!("{context}: success")),
            "{context} missing:\n{note}"
        );
    }
    assert!(
        !note.contains("kok/summary"),
        "the notes hold no summary:\n{note}"
    );
}
