//! Local mode survives its own crash as a meta-cluster does: `kok run --local` killed with SIGKILL while 40
//! clusters' operations run, wait for a Job slot or are being started, and started again each time, ends every
//! operation with its playbook's real outcome, runs each once and puts each status once on the commit.

use crate::local_e2e_support;

use std::time::Duration;

use kok::api::Phase;
use local_e2e_support::{ansible_or_skip, operations, wait_within, LocalKok, LocalRepo};

/// How many clusters, each with one operation.
const CLUSTERS: usize = 40;
/// Most Jobs at once: most operations wait for a Job slot, some across each crash.
const PARALLEL: &str = "8";
/// Longest wait for all operations to finish.
const PATIENCE: Duration = Duration::from_secs(600);

fn cluster(i: usize) -> String {
    format!("c{i:02}")
}

/// Every third operation's playbook fails.
fn fails(i: usize) -> bool {
    i.is_multiple_of(3)
}

/// The mark of cluster `i`'s playbook: it fails when the mark says so.
fn mark(i: usize) -> String {
    if fails(i) {
        format!("{}-fail", cluster(i))
    } else {
        cluster(i)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn operations_end_with_their_real_outcome_when_kok_is_killed_three_times_while_they_run() {
    if !ansible_or_skip("operations_end_with_their_real_outcome_when_kok_is_killed_three_times") {
        return;
    }
    let repo = LocalRepo::new();
    for i in 0..CLUSTERS {
        repo.write_cluster(&cluster(i));
        repo.write_operations(&cluster(i), &[("nap", "nap.yml", &mark(i))]);
    }
    let sha = repo.commit("40 clusters, one nap each");
    let args = ["--max-concurrent-jobs", PARALLEL];

    // Each crash comes once so many playbooks have started, whatever the operations are at: running, waiting
    // for a slot, their Job just created or their status just written.
    let mut kok;
    for started in [3, CLUSTERS / 3, CLUSTERS * 2 / 3] {
        kok = LocalKok::start_with(&repo, &args);
        wait_within(
            PATIENCE,
            &format!("{started} playbooks to start"),
            &mut kok,
            || async { (repo.all_runs() >= started).then_some(()) },
        )
        .await;
        kok.kill();
    }
    kok = LocalKok::start_with(&repo, &args);
    let client = kok.client(&repo).await;
    let ops = wait_within(PATIENCE, "every operation to finish", &mut kok, || async {
        let ops = operations(&client).await;
        let done = ops
            .iter()
            .filter(|op| op.status.as_ref().is_some_and(|s| s.phase.is_terminal()))
            .count();
        (ops.len() == CLUSTERS && done == CLUSTERS).then_some(ops)
    })
    .await;

    for op in &ops {
        let i: usize = op.spec.cluster[1..].parse().expect("cluster number");
        let status = op.status.clone().unwrap_or_default();
        let message = status.message.clone().unwrap_or_default();
        let expected = if fails(i) { Phase::Failed } else { Phase::Succeeded };
        assert_eq!(status.phase, expected, "{}: {message}", op.spec.cluster);
        if expected == Phase::Failed {
            assert!(
                message.starts_with("BackoffLimitExceeded"),
                "{} failed as its playbook did, not as a lost run: {message}",
                op.spec.cluster
            );
        }
        assert_eq!(repo.runs(&mark(i)), 1, "{} ran once", op.spec.cluster);
    }
    let note = wait_within(PATIENCE, "every status on the commit", &mut kok, || async {
        let note = repo.note(&sha);
        // Each run's final status: a note shows a run's earlier ones until the final one is delivered.
        let delivered = (0..CLUSTERS)
            .filter(|&i| {
                let result = if fails(i) { "failure" } else { "success" };
                note.contains(&format!("kok/{}/nap: {result} ", cluster(i)))
            })
            .count();
        (delivered == CLUSTERS).then_some(note)
    })
    .await;
    for i in 0..CLUSTERS {
        let context = format!("kok/{}/nap: ", cluster(i));
        let lines: Vec<&str> = note.lines().filter(|l| l.starts_with(&context)).collect();
        let result = if fails(i) { "failure" } else { "success" };
        assert_eq!(lines.len(), 1, "one status of {context}: {note}");
        assert!(
            lines[0].starts_with(&format!("{context}{result} ")),
            "{}",
            lines[0]
        );
    }
    let log = kok.log();
    assert!(
        log.contains("picks up a run an earlier kok started"),
        "at least one run was picked up again after a crash; kok's log:\n{log}"
    );
    assert!(kok.stop(), "kok exits 0 on SIGTERM; its log:\n{}", kok.log());
}
