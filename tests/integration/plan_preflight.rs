//! `kok plan` with kubespray's pre-flight rules: the issue's two pull requests, a `kube_version` jump over a
//! minor and a fourth etcd host, on kubespray v2.27.0, each failing the plan with its rule (the jump with the
//! whole upgrade path to paste); a cluster installed by hand (`installed:` in cluster.yml), whose first entry
//! may be `scale.yml`; and the day-two changes of the inventory against the plan's start: a worker added
//! with no operation (a warning naming the entry), a host dropped before `remove-node.yml` ran (an error, and
//! the two-commit sequence that passes), and `remove-node.yml` without `skip_confirmation`.

use crate::common::kok as kok_process;
use crate::gitkit;

use std::path::Path;

use gitkit::RepoBuilder;

/// Runs `kok plan` on `repo` with `extra`; returns the exit code and stdout.
fn plan(repo: &RepoBuilder, extra: &[&str], cache: &Path) -> (i32, String) {
    kok_process::plan(repo.path(), extra, cache)
}

/// prod-bj's hosts.yml: node1..node3 the control plane and etcd, node4 a worker (and, with `fourth`, the
/// fourth etcd member).
fn hosts(fourth: bool) -> String {
    let etcd_extra = if fourth { "        node4:\n" } else { "" };
    format!(
        "all:\n  hosts:\n    node1:\n    node2:\n    node3:\n    node4:\n  children:\n    kube_control_plane:\n      \
         hosts:\n        node1:\n        node2:\n        node3:\n    etcd:\n      hosts:\n        node1:\n        \
         node2:\n        node3:\n{etcd_extra}    kube_node:\n      hosts:\n        node4:\n"
    )
}

/// A repository whose first commit has prod-bj on kubespray v2.27.0 with `kube_version: v1.29.10`,
/// installed by `install`; returns it and that commit.
fn installed() -> (RepoBuilder, String) {
    let mut repo = RepoBuilder::new();
    repo.file("kok.yml", "image: quay.io/kubespray/kubespray:v2.27.0\n")
        .file("clusters/prod-bj/hosts.yml", &hosts(false))
        .file("clusters/prod-bj/vars.yml", "kube_version: v1.29.10\n")
        .op("prod-bj", "install", "cluster.yml");
    let base = repo.commit("prod-bj: install v1.29.10");
    (repo, base)
}

#[test]
fn a_kube_version_jump_from_v1_29_to_v1_31_fails_the_plan_and_names_v1_30_as_the_next_step() {
    let (mut repo, base) = installed();
    repo.file("clusters/prod-bj/vars.yml", "kube_version: v1.31.4\n")
        .op("prod-bj", "upgrade", "upgrade-cluster.yml");
    let head = repo.commit("prod-bj: upgrade to v1.31.4");
    let cache = tempfile::tempdir().unwrap();

    let (code, text) = plan(&repo, &["--from", &base, "--to", &head], cache.path());
    assert_eq!(code, 0, "without --detailed-exitcode: {text}");
    let expected = "    error: kube-version-step: clusters/prod-bj/vars.yml:1: kube_version v1.29.10 (at the pull \
                    request's base) → v1.31.4 skips v1.30: set kube_version to v1.30.x first (kubespray v2.27.0 \
                    installs v1.30.0 … v1.30.";
    assert!(text.contains("  pre-flight:\n"), "{text}");
    assert!(text.contains(expected), "{text}");
    assert!(
        text.contains(
            "      from https://kubernetes.io/docs/tasks/administer-cluster/kubeadm/kubeadm-upgrade/"
        ),
        "{text}"
    );
    assert!(text.contains("    upgrade (upgrade-cluster.yml) from "), "{text}");
    assert!(
        text.contains("; the whole path, one commit each: v1.30.")
            && text.contains(" → v1.31.4 (kubespray v2.27.0)"),
        "{text}"
    );
    assert!(
        text.contains(
            "      the upgrade, one commit each (paste each entry into operations.yml):\n        # commit 1 of 2: \
             kube_version: v1.30."
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "        # commit 2 of 2: kube_version: v1.31.4 in clusters/prod-bj/vars.yml:1\n        - id: \
             upgrade-1-31-4\n          action: upgrade-cluster.yml\n"
        ),
        "{text}"
    );
    let (code, _) = plan(
        &repo,
        &["--from", &base, "--to", &head, "--detailed-exitcode"],
        cache.path(),
    );
    assert_eq!(code, 1, "a pre-flight error is an error of the plan");

    let (_, md) = plan(
        &repo,
        &["--from", &base, "--to", &head, "--output", "markdown"],
        cache.path(),
    );
    assert!(
        md.contains("- :x: `kube-version-step` at `clusters/prod-bj/vars.yml:1`: kube_version v1.29.10"),
        "{md}"
    );
    assert!(
        md.contains("\n  ```yaml\n  # commit 1 of 2: kube_version: v1.30.")
            && md.contains("  - id: upgrade-1-31-4\n"),
        "the path, ready to paste: {md}"
    );
    let (_, json) = plan(
        &repo,
        &["--from", &base, "--to", &head, "--output", "json"],
        cache.path(),
    );
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    let found = &json["clusters"][0]["preflight"][0];
    assert_eq!(found["rule"], "kube-version-step", "{json:#}");
    assert!(
        found["upgradePath"]
            .as_str()
            .is_some_and(|p| p.contains("- id: upgrade-1-31-4\n")),
        "{json:#}"
    );
    assert_eq!(found["severity"], "error");
    assert_eq!(
        (found["path"].as_str(), found["line"].as_u64()),
        (Some("clusters/prod-bj/vars.yml"), Some(1))
    );

    // One minor at a time passes.
    repo.file("clusters/prod-bj/vars.yml", "kube_version: v1.30.4\n");
    let step = repo.commit("prod-bj: upgrade to v1.30.4 first");
    let (code, text) = plan(
        &repo,
        &["--from", &base, "--to", &step, "--detailed-exitcode"],
        cache.path(),
    );
    assert_eq!(code, 2, "changes, no error: {text}");
    assert!(!text.contains("pre-flight"), "{text}");
}

#[test]
fn a_fourth_etcd_host_fails_the_plan_with_the_odd_count_rule() {
    let (mut repo, base) = installed();
    repo.file("clusters/prod-bj/hosts.yml", &hosts(true))
        .op("prod-bj", "add-etcd", "cluster.yml");
    let head = repo.commit("prod-bj: node4 joins etcd");
    let cache = tempfile::tempdir().unwrap();

    let (code, text) = plan(
        &repo,
        &["--from", &base, "--to", &head, "--detailed-exitcode"],
        cache.path(),
    );
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(
            "    error: etcd-odd: clusters/prod-bj/hosts.yml:13: etcd has 4 hosts: kubespray v2.27.0 stops on an \
             even number (\"Stop if even number of etcd hosts\"); etcd needs a majority, so use an odd number of \
             hosts (1, 3, 5)\n      from kubespray v2.27.0 roles/kubernetes/preinstall/tasks/0040-verify-settings.yml:80\n"
        ),
        "{text}"
    );
    let (_, md) = plan(
        &repo,
        &["--from", &base, "--to", &head, "--output", "markdown"],
        cache.path(),
    );
    assert!(md.contains("Pre-flight (kubespray's rules):"), "{md}");
    assert!(
        md.contains("- :x: `etcd-odd` at `clusters/prod-bj/hosts.yml:13`: etcd has 4 hosts"),
        "{md}"
    );
}

#[test]
fn preflight_false_and_allow_release_skip_show_beside_their_operations() {
    let (mut repo, base) = installed();
    repo.file(
        "clusters/prod-bj/operations.yml",
        "- id: install\n  action: cluster.yml\n- id: upgrade\n  action: upgrade-cluster.yml\n  \
         preflight: false\n  allowReleaseSkip: true\n",
    );
    repo.file("clusters/prod-bj/vars.yml", "kube_version: v1.31.4\n");
    let head = repo.commit("prod-bj: upgrade, I know better");
    let cache = tempfile::tempdir().unwrap();
    let (code, text) = plan(
        &repo,
        &["--from", &base, "--to", &head, "--detailed-exitcode"],
        cache.path(),
    );
    assert_eq!(code, 2, "the only pending operation opts out: {text}");
    assert!(
        text.contains("    upgrade (upgrade-cluster.yml) from ")
            && text.contains(" [preflight: false, allowReleaseSkip: true]\n"),
        "{text}"
    );
    assert!(!text.contains("pre-flight:"), "{text}");
}

#[test]
fn a_cluster_installed_by_hand_plans_its_first_scale_yml_and_the_versions_it_runs_are_the_old_ones() {
    let mut repo = RepoBuilder::new();
    repo.file("kok.yml", "image: quay.io/kubespray/kubespray:v2.27.0\n");
    let base = repo.commit("kok.yml");
    repo.file("clusters/prod-bj/hosts.yml", &hosts(false))
        .file("clusters/prod-bj/vars.yml", "kube_version: v1.29.10\n")
        .op("prod-bj", "add-node4", "scale.yml");
    let unsaid = repo.commit("prod-bj: add node4");
    repo.file("clusters/prod-bj/cluster.yml", "installed: true\n");
    let adopted = repo.commit("prod-bj: installed by hand, add node4");
    repo.file(
        "clusters/prod-bj/cluster.yml",
        "installed:\n  kubeVersion: v1.29.10\n",
    )
    .file("clusters/prod-bj/vars.yml", "kube_version: v1.31.4\n")
    .op("prod-bj", "upgrade", "upgrade-cluster.yml");
    let jump = repo.commit("prod-bj: installed by hand at v1.29.10, upgrade to v1.31.4");
    let cache = tempfile::tempdir().unwrap();
    let plan_to = |to: &str| {
        plan(
            &repo,
            &["--from", &base, "--to", to, "--detailed-exitcode"],
            cache.path(),
        )
    };

    let (code, text) = plan_to(&unsaid);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(
            "    error: operation-order: clusters/prod-bj/operations.yml:1 (operation add-node4): scale.yml needs \
             a running cluster, and kok has never seen prod-bj installed"
        ),
        "{text}"
    );
    let (code, text) = plan_to(&adopted);
    assert_eq!(code, 2, "changes, no error: {text}");
    assert!(!text.contains("pre-flight"), "{text}");
    let (code, text) = plan_to(&jump);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(
            "    error: kube-version-step: clusters/prod-bj/vars.yml:1: kube_version v1.29.10 (installed outside \
             kok, as cluster.yml's installed says) → v1.31.4 skips v1.30"
        ),
        "{text}"
    );
    assert!(!text.contains("operation-order"), "{text}");
}

/// prod-bj's hosts.yml with node1 the control plane and etcd, and `workers`.
fn with_workers(workers: &[&str]) -> String {
    let mut text = "all:\n  hosts:\n    node1:\n".to_string();
    for w in workers {
        text.push_str(&format!("    {w}:\n"));
    }
    text.push_str(
        "  children:\n    kube_control_plane:\n      hosts:\n        node1:\n    etcd:\n      hosts:\n        \
         node1:\n    kube_node:\n      hosts:\n",
    );
    for w in workers {
        text.push_str(&format!("        {w}:\n"));
    }
    text
}

/// A repository whose first commit has prod-bj installed by `install`, with workers node2 and node3.
fn installed_with_workers() -> (RepoBuilder, String) {
    let mut repo = RepoBuilder::new();
    repo.file("kok.yml", "image: quay.io/kubespray/kubespray:v2.27.0\n")
        .file("clusters/prod-bj/hosts.yml", &with_workers(&["node2", "node3"]))
        .file("clusters/prod-bj/vars.yml", "kube_version: v1.30.4\n")
        .op("prod-bj", "install", "cluster.yml");
    let base = repo.commit("prod-bj: install");
    (repo, base)
}

#[test]
fn a_worker_added_with_no_operation_that_reaches_it_gets_a_warning_naming_the_entry() {
    let (mut repo, base) = installed_with_workers();
    repo.file(
        "clusters/prod-bj/hosts.yml",
        &with_workers(&["node2", "node3", "node7"]),
    );
    let head = repo.commit("prod-bj: node7 in the inventory");
    let cache = tempfile::tempdir().unwrap();
    let (code, text) = plan(
        &repo,
        &["--from", &base, "--to", &head, "--detailed-exitcode"],
        cache.path(),
    );
    assert_eq!(code, 2, "a warning does not fail the plan: {text}");
    assert!(
        text.contains(
            "    warning: host-not-reached: clusters/prod-bj/hosts.yml:14: node7 is new in kube_node and no pending \
             operation reaches it: add - {id: add-node7, action: scale.yml, extraArgs: [--limit=node7]} to \
             operations.yml"
        ),
        "{text}"
    );

    repo.file(
        "clusters/prod-bj/operations.yml",
        "- id: install\n  action: cluster.yml\n- id: add-node7\n  action: scale.yml\n  extraArgs: [--limit=node7]\n",
    );
    let reached = repo.commit("prod-bj: and scale.yml for it");
    let (code, text) = plan(
        &repo,
        &["--from", &base, "--to", &reached, "--detailed-exitcode"],
        cache.path(),
    );
    assert_eq!(code, 2, "{text}");
    assert!(
        !text.contains("host-not-reached"),
        "scale.yml limited to node7 reaches it: {text}"
    );
}

#[test]
fn dropping_a_host_before_remove_node_fails_the_plan_and_the_two_commits_pass() {
    let (mut repo, base) = installed_with_workers();
    repo.file("clusters/prod-bj/hosts.yml", &with_workers(&["node2"]));
    let dropped = repo.commit("prod-bj: node3 out of the inventory");
    let cache = tempfile::tempdir().unwrap();
    let (code, text) = plan(
        &repo,
        &["--from", &base, "--to", &dropped, "--detailed-exitcode"],
        cache.path(),
    );
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(
            "    error: host-dropped: clusters/prod-bj/hosts.yml:12: node3 is dropped from clusters/prod-bj/hosts.yml \
             (kube_node), and no remove-node.yml -e node=node3 has succeeded"
        ),
        "{text}"
    );
    assert!(
        text.contains("      from kubespray v2.27.0 docs/operations/nodes.md:71\n"),
        "{text}"
    );

    // The two commits: remove-node.yml while node3 is in the inventory, then drop it.
    let (mut repo, base) = installed_with_workers();
    repo.file(
        "clusters/prod-bj/operations.yml",
        "- id: install\n  action: cluster.yml\n- id: remove-node3\n  action: remove-node.yml\n  \
         extraArgs: [-e, node=node3, -e, skip_confirmation=true]\n",
    );
    let removal = repo.commit("prod-bj: remove node3");
    let (code, text) = plan(
        &repo,
        &["--from", &base, "--to", &removal, "--detailed-exitcode"],
        cache.path(),
    );
    assert_eq!(code, 2, "{text}");
    assert!(!text.contains("pre-flight"), "{text}");
    repo.file("clusters/prod-bj/hosts.yml", &with_workers(&["node2"]));
    let second = repo.commit("prod-bj: node3 out of the inventory");
    let (code, text) = plan(
        &repo,
        &["--from", &removal, "--to", &second, "--detailed-exitcode"],
        cache.path(),
    );
    assert_eq!(code, 2, "remove-node.yml ran at the base: {text}");
    assert!(!text.contains("host-dropped"), "{text}");
    let (code, text) = plan(
        &repo,
        &["--from", &base, "--to", &second, "--detailed-exitcode"],
        cache.path(),
    );
    assert_eq!(
        code, 1,
        "both in one range: the removal has not run at its start: {text}"
    );
}

#[test]
fn remove_node_without_skip_confirmation_fails_the_plan_as_a_job_has_no_terminal() {
    let (mut repo, base) = installed_with_workers();
    repo.file(
        "clusters/prod-bj/operations.yml",
        "- id: install\n  action: cluster.yml\n- id: remove-node3\n  action: remove-node.yml\n  \
         extraArgs: [-e, node=node3]\n",
    );
    let head = repo.commit("prod-bj: remove node3");
    let cache = tempfile::tempdir().unwrap();
    let (code, text) = plan(
        &repo,
        &["--from", &base, "--to", &head, "--detailed-exitcode"],
        cache.path(),
    );
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(
            "    error: confirmation-prompt: clusters/prod-bj/operations.yml:3 (operation remove-node3): \
             remove-node.yml asks \"Are you sure you want to delete nodes state?\""
        ) && text.contains(
            "add `-e skip_confirmation=true`\n      from kubespray v2.27.0 playbooks/remove_node.yml:9\n"
        ),
        "{text}"
    );
}
