//! `kok plan --output markdown` (a pull-request comment) and `--detailed-exitcode` (terraform's codes).

use crate::common::kok as kok_process;
use crate::gitkit;

use std::path::Path;

use gitkit::RepoBuilder;

/// Runs `kok plan` on `repo` with `extra`; returns the exit code and stdout.
fn plan(repo: &RepoBuilder, extra: &[&str], cache: &Path) -> (i32, String) {
    kok_process::plan(repo.path(), extra, cache)
}

#[test]
fn markdown_has_one_table_per_cluster_with_writes_and_runs() {
    let mut repo = RepoBuilder::new();
    repo.cluster("prod-bj").cluster("prod-sh");
    let from = repo.commit("two clusters");
    repo.op("prod-bj", "add-node8", "scale.yml");
    repo.file(
        "clusters/prod-sh/vars.yml",
        "cluster_name: prod-sh\nkube_version: v1.31.0\n",
    );
    let to = repo.commit("add node8 | bump prod-sh");
    let cache = tempfile::tempdir().unwrap();
    let (code, md) = plan(
        &repo,
        &["--from", &from, "--to", &to, "--output", "markdown"],
        cache.path(),
    );
    assert_eq!(code, 0, "{md}");
    assert!(
        md.starts_with(&format!("### kok plan `{}..{}`\n", &from[..8], &to[..8])),
        "{md}"
    );
    assert_eq!(md.matches("| change | kind | name | detail |").count(), 2, "{md}");
    let bj = &md[md.find("#### prod-bj").expect(&md)..md.find("#### prod-sh").expect(&md)];
    assert!(
        bj.contains("| create | ClusterOperation | `prod-bj-add-node8-"),
        "{bj}"
    );
    assert!(
        bj.contains(&format!(
            "(`scale.yml`) from `{}` add node8 \\| bump prod-sh |",
            &to[..8]
        )),
        "the subject's pipe is escaped: {bj}"
    );
    let sh = &md[md.find("#### prod-sh").unwrap()..];
    assert!(sh.contains("| create | ConfigMap | `prod-sh-vars-"), "{sh}");
    assert!(sh.contains("| delete | ConfigMap | `prod-sh-vars-"), "{sh}");
    assert!(!sh.contains("| run |"), "{sh}");
}

#[test]
fn detailed_exitcode_is_0_for_nothing_2_for_changes_and_1_for_errors() {
    let mut repo = RepoBuilder::new();
    repo.cluster("prod-bj").op("prod-bj", "install", "cluster.yml");
    let start = repo.commit("start");
    repo.file("README.md", "docs only\n");
    let docs = repo.commit("docs");
    repo.op("prod-bj", "add-node8", "scale.yml");
    let scale = repo.commit("scale");
    repo.file("clusters/prod-bj/hosts.yml", "all: [not, a, mapping]\n");
    let broken = repo.commit("broken");
    let cache = tempfile::tempdir().unwrap();
    let code = |from: &str, to: &str, detailed: bool| {
        let mut args = vec!["--from", from, "--to", to];
        if detailed {
            args.push("--detailed-exitcode");
        }
        plan(&repo, &args, cache.path())
    };
    let (nothing, out) = code(&start, &docs, true);
    assert_eq!(nothing, 0, "{out}");
    assert!(out.contains("no changes"), "{out}");
    assert_eq!(code(&docs, &scale, true).0, 2);
    assert_eq!(code(&scale, &broken, true).0, 1);
    assert_eq!(
        code(&docs, &scale, false).0,
        0,
        "without the flag a plan with changes exits 0"
    );
    assert_eq!(code(&scale, &broken, false).0, 0);
}

#[test]
fn scale_down_out_of_order_is_warned_about_in_the_plan() {
    let two = "all:\n  hosts:\n    node1:\n      ansible_host: 10.0.0.1\n    node8:\n      ansible_host: 10.0.0.8\n";
    let one = "all:\n  hosts:\n    node1:\n      ansible_host: 10.0.0.1\n";
    let mut repo = RepoBuilder::new();
    repo.file("clusters/prod-bj/hosts.yml", two)
        .file("clusters/prod-bj/vars.yml", "cluster_name: prod-bj\n")
        .file("clusters/prod-sh/hosts.yml", two)
        .file("clusters/prod-sh/vars.yml", "cluster_name: prod-sh\n");
    let from = repo.commit("two nodes each");
    // prod-bj: the removal runs in the commit that drops the node; prod-sh: no removal at all.
    repo.file("clusters/prod-bj/hosts.yml", one)
        .file(
            "clusters/prod-bj/operations.yml",
            "- id: remove-node8\n  action: remove-node.yml\n  extraArgs: [-e, node=node8]\n",
        )
        .file("clusters/prod-sh/hosts.yml", one);
    let to = repo.commit("drop node8");
    let cache = tempfile::tempdir().unwrap();
    let (_, md) = plan(
        &repo,
        &["--from", &from, "--to", &to, "--output", "markdown"],
        cache.path(),
    );
    assert!(
        md.contains("> :warning: prod-bj: operation remove-node8 names node8, which this change removes from hosts.yml"),
        "{md}"
    );
    assert!(!md.contains("prod-bj: node8 leaves hosts.yml"), "{md}");
    assert!(
        md.contains("> :warning: prod-sh: node8 leaves hosts.yml and no operation names it"),
        "{md}"
    );
    let (_, text) = plan(&repo, &["--from", &from, "--to", &to], cache.path());
    assert!(
        text.contains("  warning: prod-sh: node8 leaves hosts.yml"),
        "{text}"
    );
}

#[test]
fn an_operation_that_limits_its_hosts_shows_its_facts_step_in_every_output() {
    let mut repo = RepoBuilder::new();
    repo.cluster("prod-bj").cluster("prod-sh");
    repo.file("clusters/prod-sh/cluster.yml", "factsPlaybook: site/facts.yml\n");
    let from = repo.commit("two clusters");
    repo.file(
        "clusters/prod-bj/operations.yml",
        "- id: add-node8\n  action: scale.yml\n  extraArgs: [--limit=node8]\n- id: upgrade\n  action: upgrade-cluster.yml\n",
    )
    .file(
        "clusters/prod-sh/operations.yml",
        "- id: add-node8\n  action: scale.yml\n  extraArgs: [-l, node8]\n",
    );
    let to = repo.commit("add node8");
    let cache = tempfile::tempdir().unwrap();
    let range = ["--from", from.as_str(), "--to", to.as_str()];
    let (code, text) = plan(&repo, &range, cache.path());
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("    add-node8 (playbooks/facts.yml (without --limit), then scale.yml) from "),
        "{text}"
    );
    assert!(text.contains("    upgrade (upgrade-cluster.yml) from "), "{text}");
    assert!(
        text.contains("    add-node8 (site/facts.yml (without --limit), then scale.yml) from "),
        "{text}"
    );
    let (_, md) = plan(
        &repo,
        &[&range[..], &["--output", "markdown"]].concat(),
        cache.path(),
    );
    assert!(
        md.contains("(`scale.yml` after `playbooks/facts.yml` without --limit)"),
        "{md}"
    );
    let (_, json) = plan(&repo, &[&range[..], &["--output", "json"]].concat(), cache.path());
    let json: serde_json::Value = serde_json::from_str(&json).expect(&json);
    let facts: Vec<_> = json["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["operations"].as_array().unwrap())
        .map(|o| o.get("factsPlaybook").cloned())
        .collect();
    assert_eq!(
        facts,
        [
            Some(serde_json::json!({"path": "playbooks/facts.yml", "optional": true})),
            None,
            Some(serde_json::json!({"path": "site/facts.yml"})),
        ]
    );
}

#[test]
fn plan_shows_the_labels_a_change_gives_a_cluster() {
    let mut repo = RepoBuilder::new();
    repo.cluster("prod-bj");
    let from = repo.commit("one cluster");
    repo.file(
        "clusters/prod-bj/cluster.yml",
        "labels:\n  env: prod\n  region: bj\n",
    );
    let to = repo.commit("label prod-bj");
    let cache = tempfile::tempdir().unwrap();
    let (code, text) = plan(&repo, &["--from", &from, "--to", &to], cache.path());
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("cluster prod-bj\n  labels: env=prod, region=bj\n  ~ Cluster prod-bj"),
        "{text}"
    );
}

/// Four installed clusters labelled for the example rollout: prod-sh-1 and prod-sh-2 in Shanghai,
/// prod-bj-1 and prod-bj-2 in Beijing.
fn labelled_fleet(repo: &mut RepoBuilder) {
    for (name, region) in [
        ("prod-sh-1", "sh"),
        ("prod-sh-2", "sh"),
        ("prod-bj-1", "bj"),
        ("prod-bj-2", "bj"),
    ] {
        repo.cluster(name)
            .file(
                &format!("clusters/{name}/cluster.yml"),
                &format!("labels: {{env: prod, region: {region}}}\n"),
            )
            // Installed before the range: pre-flight lets an upgrade run on it.
            .file(
                &format!("clusters/{name}/operations.yml"),
                "- {id: install, action: cluster.yml}\n",
            );
    }
}

const ROLLOUT: &str = "operation:
  id: upgrade-1-31
  action: upgrade-cluster.yml
clusters:
  selector: {env: prod}
waves:
  - name: canary
    clusters: [prod-sh-1]
  - name: beijing
    selector: {region: bj}
    maxParallel: 1
  - name: rest
    maxParallel: 50%
bake: 30m
stopAfter: canary
";

#[test]
fn plan_shows_each_rollout_wave_by_wave_through_canary_promotion_rerun_and_a_joining_cluster() {
    let mut repo = RepoBuilder::new();
    labelled_fleet(&mut repo);
    let start = repo.commit("four clusters");
    repo.file("rollouts/upgrade-1-31.yml", ROLLOUT);
    let added = repo.commit("upgrade: canary");
    repo.file(
        "rollouts/upgrade-1-31.yml",
        &ROLLOUT.replace("stopAfter: canary", "stopAfter: beijing"),
    );
    let promoted = repo.commit("upgrade: promote to beijing");
    repo.file(
        "rollouts/upgrade-1-31.yml",
        &ROLLOUT.replace("stopAfter: canary", "stopAfter: beijing\nrerun: 1"),
    );
    let rerun = repo.commit("upgrade: rerun the failed");
    repo.cluster("prod-bj-3").file(
        "clusters/prod-bj-3/cluster.yml",
        "labels: {env: prod, region: bj}\n",
    );
    let joined = repo.commit("prod-bj-3");
    let cache = tempfile::tempdir().unwrap();
    let range = |from: &str, to: &str, more: &[&str]| {
        let mut args = vec!["--from", from, "--to", to, "--detailed-exitcode"];
        args.extend_from_slice(more);
        plan(&repo, &args, cache.path())
    };

    let (code, text) = range(&start, &added, &[]);
    assert_eq!(code, 2, "a new rollout is a change: {text}");
    assert!(
        text.contains(
            "\nrollout upgrade-1-31 (added, rollouts/upgrade-1-31.yml): FleetRollout applied\n\
             \x20 operation upgrade-1-31 (upgrade-cluster.yml): every cluster runs it, wave by wave\n\
             \x20 bake 30m, maxFailures 0, stopAfter canary\n\
             \x20 wave 1/3 canary: prod-sh-1\n\
             \x20 wave 2/3 beijing (maxParallel 1: 1 at once): prod-bj-1, prod-bj-2 [held by stopAfter]\n\
             \x20 wave 3/3 rest (maxParallel 50%: 1 at once): prod-sh-2 [held by stopAfter]\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "\ncluster prod-bj-2\n  labels: env=prod, region=bj\n  + ClusterOperation prod-bj-2-upgrade-1-31-"
        ),
        "each cluster's run is a write of its own: {text}"
    );
    assert!(
        text.contains(&format!(
            "    upgrade-1-31 (upgrade-cluster.yml) from {} \"upgrade: canary\" in wave beijing of rollout upgrade-1-31\n",
            &added[..8]
        )),
        "{text}"
    );
    assert!(!text.contains("warning:"), "{text}");

    let (code, text) = range(&added, &promoted, &[]);
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("  operation upgrade-1-31 (upgrade-cluster.yml): unchanged: nothing runs again"),
        "{text}"
    );
    assert!(
        text.contains("  stopAfter: canary → beijing: promotes: wave beijing may open\n"),
        "{text}"
    );
    assert!(
        text.contains("  wave 2/3 beijing (maxParallel 1: 1 at once): prod-bj-1, prod-bj-2\n"),
        "{text}"
    );

    let (_, text) = range(&promoted, &rerun, &[]);
    assert!(
        text.contains(
            "  rerun: 0 → 1: runs again the clusters whose run failed or was canceled (which ones is in \
             the meta-cluster: plan with --kubeconfig to list them)"
        ),
        "without a meta-cluster the plan says it cannot tell: {text}"
    );

    let (_, md) = range(&rerun, &joined, &["--output", "markdown"]);
    assert!(
        md.contains("#### rollout upgrade-1-31 (changed, `rollouts/upgrade-1-31.yml`): FleetRollout applied"),
        "a new cluster the selector picks changes the rollout: {md}"
    );
    assert!(
        md.contains("| beijing | 1 | prod-bj-1, prod-bj-2, prod-bj-3 | prod-bj-3 |"),
        "{md}"
    );
    let (_, json) = range(&rerun, &joined, &["--output", "json"]);
    let json: serde_json::Value = serde_json::from_str(&json).expect(&json);
    assert_eq!(json["rollouts"][0]["change"], "changed");
    assert_eq!(json["rollouts"][0]["waves"][1]["joined"][0], "prod-bj-3");
}

#[test]
fn a_broken_rollout_file_makes_the_plan_an_error_naming_file_and_line_and_removing_it_cancels() {
    let mut repo = RepoBuilder::new();
    labelled_fleet(&mut repo);
    repo.file("rollouts/upgrade-1-31.yml", ROLLOUT);
    let good = repo.commit("upgrade");
    repo.file(
        "rollouts/upgrade-1-31.yml",
        &ROLLOUT.replace("stopAfter: canary", "stopAfter: canry"),
    );
    let broken = repo.commit("typo");
    repo.remove("rollouts/upgrade-1-31.yml");
    let removed = repo.commit("drop the upgrade");
    let cache = tempfile::tempdir().unwrap();
    let (code, text) = plan(
        &repo,
        &["--from", &good, "--to", &broken, "--detailed-exitcode"],
        cache.path(),
    );
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(
            "rollout upgrade-1-31 (invalid, rollouts/upgrade-1-31.yml)\n\
             \x20 refused: the rollout stays as it was; clusters and other rollouts go on\n\
             \x20 rollouts/upgrade-1-31.yml:15:12: stopAfter \"canry\" names no wave of this rollout"
        ),
        "{text}"
    );
    let (code, text) = plan(
        &repo,
        &["--from", &good, "--to", &removed, "--detailed-exitcode"],
        cache.path(),
    );
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains(
            "rollout upgrade-1-31 (removed, rollouts/upgrade-1-31.yml): FleetRollout deleted\n\
             \x20 its runs not yet started are canceled"
        ),
        "{text}"
    );
}

#[test]
fn a_rollout_run_pre_flight_refuses_fails_the_plan_as_the_pass_refuses_it() {
    let mut repo = RepoBuilder::new();
    labelled_fleet(&mut repo);
    // prod-bj-1 was never installed: an upgrade of it is refused before its Job, so the plan fails too.
    repo.file("clusters/prod-bj-1/operations.yml", "");
    let start = repo.commit("four clusters, one of them not installed");
    repo.file("rollouts/upgrade-1-31.yml", ROLLOUT);
    let added = repo.commit("upgrade: canary");
    let cache = tempfile::tempdir().unwrap();
    let range = [
        "--from",
        start.as_str(),
        "--to",
        added.as_str(),
        "--detailed-exitcode",
    ];
    let (code, text) = plan(&repo, &range, cache.path());
    assert_eq!(code, 1, "{text}");
    let section = text
        .split("\ncluster ")
        .find(|s| s.starts_with("prod-bj-1\n"))
        .unwrap_or_default();
    assert!(
        section.contains("error: operation-order: rollouts/upgrade-1-31.yml:2"),
        "{text}"
    );
    let others = text.split("\ncluster ").filter(|s| !s.starts_with("prod-bj-1\n"));
    assert!(others.into_iter().all(|s| !s.contains("error:")), "{text}");
}
