//! A rollout end to end in local mode: `kok run --local` runs a three-wave rollout over four clusters
//! with real ansible, halts it when a cluster fails, goes on after a `rerun` commit, and records the
//! rollout's status and each cluster's on the commits, in the work tree's git notes.

use crate::local_e2e_support;

use kok::api::{FleetRollout, RolloutPhase};
use kube::api::Api;
use local_e2e_support::{ansible_or_skip, note_line, operations, wait_for, LocalKok, LocalRepo, NS};

/// The rollout's name, and its operation's id.
const ROLLOUT: &str = "bump";
/// The clusters taking part, in wave order: canary, then two (one at a time), then the last.
const CLUSTERS: [&str; 4] = ["r1", "r2", "r3", "r4"];
/// The cluster that fails until its `<marks>/r3.fail` is removed.
const FAILING: &str = "r3";

/// A playbook that counts its run in `<marks>/<mark>.runs` and fails while `<marks>/<mark>.fail`
/// exists; `mark` comes from the cluster's vars.yml.
const ROLLOUT_PLAYBOOK: &str = r#"- name: Rollout step
  hosts: all
  become: false
  gather_facts: false
  tasks:
    - name: Count this run
      ansible.builtin.shell: echo run >> "{{ marks }}/{{ mark }}.runs"
    - name: Fail while told to
      ansible.builtin.fail:
        msg: "{{ mark }} is told to fail"
      when: (marks + '/' + mark + '.fail') is exists
"#;

/// The rollout file: canary `r1`, then `r2` and `r3` one at a time, then the rest; no failure tolerated.
fn rollout_yml(rerun: u64) -> String {
    format!(
        "operation:\n  id: {ROLLOUT}\n  action: playbooks/rollout.yml\n\
         clusters:\n  selector: {{fleet: e2e}}\n\
         waves:\n  - name: canary\n    clusters: [r1]\n  - name: middle\n    clusters: [r2, r3]\n    maxParallel: 1\n  \
         - name: rest\n\
         maxFailures: 0\nrerun: {rerun}\n"
    )
}

/// The phase and summary of the rollout's FleetRollout, once it has a status.
async fn rollout_status(client: &kube::Client) -> Option<(RolloutPhase, String)> {
    let api: Api<FleetRollout> = Api::namespaced(client.clone(), NS);
    let status = api.get_opt(ROLLOUT).await.ok()??.status?;
    Some((status.phase, status.summary.unwrap_or_default()))
}

/// The line of `context` in `note`.
fn line<'a>(note: &'a str, context: &str) -> &'a str {
    let prefix = format!("{context}: ");
    note.lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no {context} in the note:\n{note}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_three_wave_rollout_halts_on_a_failing_cluster_and_a_rerun_commit_finishes_it() {
    if !ansible_or_skip("a_three_wave_rollout_halts_on_a_failing_cluster") {
        return;
    }
    let repo = LocalRepo::new();
    std::fs::create_dir_all(repo.path().join("rollouts")).expect("mkdir");
    repo.write("playbooks/rollout.yml", ROLLOUT_PLAYBOOK);
    for cluster in CLUSTERS {
        repo.write_cluster(cluster);
        let vars = std::fs::read_to_string(repo.path().join(format!("clusters/{cluster}/vars.yml")))
            .expect("vars.yml");
        repo.write(
            &format!("clusters/{cluster}/vars.yml"),
            &format!("{vars}mark: {cluster}\n"),
        );
        repo.write(
            &format!("clusters/{cluster}/cluster.yml"),
            "labels: {fleet: e2e}\n",
        );
    }
    repo.commit("four clusters");
    std::fs::write(repo.marks().join(format!("{FAILING}.fail")), "").expect("fail flag");
    let mut kok = LocalKok::start(&repo);
    let client = kok.client(&repo).await;

    repo.write(&format!("rollouts/{ROLLOUT}.yml"), &rollout_yml(0));
    let start = repo.commit("rollout bump");
    let context = format!("kok/rollout/{ROLLOUT}");
    note_line(&mut kok, &repo, &start, &format!("{context}: failure ")).await;
    // The failed cluster's own status is delivered apart from the rollout's, maybe a moment later.
    let note = note_line(&mut kok, &repo, &start, &format!("kok/{FAILING}/bump: failure ")).await;
    let halted = line(&note, &context);
    assert!(
        halted.contains("halted at wave middle: r3 failed at TASK [Fail while told to] on localhost"),
        "the rollout's status says where and why it halted: {halted}"
    );
    assert!(line(&note, "kok/r1/bump").contains(": success "), "{note}");
    assert!(line(&note, "kok/r2/bump").contains(": success "), "{note}");
    assert!(line(&note, "kok/r3/bump").contains(": failure "), "{note}");
    let (phase, _) = rollout_status(&client).await.expect("the rollout's status");
    assert_eq!(phase, RolloutPhase::Halted);
    assert_eq!(
        [repo.runs("r1"), repo.runs("r2"), repo.runs("r3"), repo.runs("r4")],
        [1, 1, 1, 0],
        "the halt keeps the last wave from starting"
    );
    let waiting = operations(&client)
        .await
        .into_iter()
        .find(|op| op.spec.cluster == "r4")
        .and_then(|op| op.status?.message)
        .unwrap_or_default();
    assert!(
        waiting.contains("halted at wave middle"),
        "r4's run says why it waits: {waiting}"
    );

    // The cluster is fixed; a commit bumps rerun.
    std::fs::remove_file(repo.marks().join(format!("{FAILING}.fail"))).expect("fail flag");
    repo.write(&format!("rollouts/{ROLLOUT}.yml"), &rollout_yml(1));
    let rerun = repo.commit("rollout bump: rerun");
    note_line(&mut kok, &repo, &rerun, &format!("{context}: success ")).await;
    let note = note_line(&mut kok, &repo, &rerun, "kok/r3/bump: success ").await;
    assert!(
        line(&note, &context).contains("wave 3/3 rest: 1/1 succeeded, 0 failed"),
        "{note}"
    );
    assert!(
        line(&note, "kok/r3/bump").contains(": success "),
        "the rerun of r3 is reported on the commit that asked for it: {note}"
    );
    wait_for("r4's success in a note", &mut kok, || async {
        [&start, &rerun]
            .iter()
            .any(|sha| {
                repo.note(sha)
                    .lines()
                    .any(|l| l.starts_with("kok/r4/bump: success "))
            })
            .then_some(())
    })
    .await;
    let (phase, summary) = rollout_status(&client).await.expect("the rollout's status");
    assert_eq!(phase, RolloutPhase::Completed, "{summary}");
    assert_eq!(
        [repo.runs("r1"), repo.runs("r2"), repo.runs("r3"), repo.runs("r4")],
        [1, 1, 2, 1],
        "only the failed cluster ran again"
    );
    let note = repo.note(&start);
    assert!(
        line(&note, "kok/r3/bump").contains(": failure "),
        "the first commit keeps the failure as history: {note}"
    );

    // The changelog of the failing cluster: both runs, under the commits that made them.
    let history = repo.history(FAILING, &["--output", "json"]);
    let history: serde_json::Value = serde_json::from_str(&history).expect("history JSON");
    let runs: Vec<(&str, &str, &str, &str)> = history
        .as_array()
        .expect("a list of commits")
        .iter()
        .flat_map(|e| {
            e["operations"].as_array().into_iter().flatten().map(move |o| {
                (
                    e["commit"].as_str().unwrap_or_default(),
                    o["state"].as_str().unwrap_or_default(),
                    o["rollout"].as_str().unwrap_or_default(),
                    o["wave"].as_str().unwrap_or_default(),
                )
            })
        })
        .collect();
    assert_eq!(
        runs,
        [
            (rerun.as_str(), "success", ROLLOUT, "middle"),
            (start.as_str(), "failure", ROLLOUT, "middle")
        ],
        "{history:#}"
    );
    assert!(kok.stop(), "kok exits 0 on SIGTERM; its log:\n{}", kok.log());
}
