//! `kok plan` with kubespray's pre-flight rules: the two pull requests, a `kube_version` jump over a
//! minor and a fourth etcd host, on kubespray v2.27.0, each failing the plan with its rule; and a cluster
//! installed by hand (`installed:` in cluster.yml), whose first entry may be `scale.yml`.

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
    let (_, json) = plan(
        &repo,
        &["--from", &base, "--to", &head, "--output", "json"],
        cache.path(),
    );
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    let found = &json["clusters"][0]["preflight"][0];
    assert_eq!(found["rule"], "kube-version-step", "{json:#}");
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
