//! `kok validate` as a user runs it: the built binary, its exit codes, its text and JSON output.

use std::path::Path;
use std::process::{Command, Output};

/// A kubespray inventory pre-flight passes: node1 is the control plane, the etcd member and a worker.
const HOSTS: &str =
    "all:\n  hosts:\n    node1:\n  children:\n    kube_control_plane:\n      hosts:\n        node1:\n    \
                     etcd:\n      hosts:\n        node1:\n    kube_node:\n      hosts:\n        node1:\n";

fn write(root: &Path, path: &str, text: &str) {
    let full = root.join(path);
    std::fs::create_dir_all(full.parent().unwrap()).unwrap();
    std::fs::write(full, text).unwrap();
}

fn good_cluster(root: &Path, dir: &str) {
    write(root, &format!("{dir}/hosts.yml"), HOSTS);
    write(root, &format!("{dir}/vars.yml"), "{}\n");
}

fn kok(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kok"))
        .args(args)
        .env_remove("KOK_PATH")
        .env_remove("KOK_OUTPUT")
        .env_remove("KOK_REPO_DIR")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_valid_repository_exits_zero_with_only_a_summary() {
    let repo = tempfile::tempdir().unwrap();
    good_cluster(repo.path(), "clusters/a");
    good_cluster(repo.path(), "clusters/b");
    let out = kok(&["validate", repo.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "");
    assert_eq!(
        text(&out.stderr).trim(),
        "2 clusters valid, 0 invalid, 0 errors, 0 warnings"
    );
}

#[test]
fn an_invalid_repository_exits_one_with_path_line_column_lines() {
    let repo = tempfile::tempdir().unwrap();
    good_cluster(repo.path(), "clusters/good");
    write(
        repo.path(),
        "clusters/bad/hosts.yml",
        "all:\n  hosts:\n    node 7:\n    node1:\n",
    );
    write(repo.path(), "clusters/bad/vars.yml", "{}\n");
    let out = kok(&["validate", repo.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stdout),
        "clusters/bad/hosts.yml:3:5: host \"node 7\" is not a valid host name: use letters, digits, '-', '.', '_'\n"
    );
    assert_eq!(
        text(&out.stderr).trim(),
        "1 cluster valid, 1 invalid, 1 error, 0 warnings"
    );
}

#[test]
fn warnings_alone_exit_zero_and_are_marked() {
    let repo = tempfile::tempdir().unwrap();
    good_cluster(repo.path(), "clusters/a");
    write(
        repo.path(),
        "clusters/a/operations.yml",
        "- id: rm\n  action: remove-node.yml\n  extraArgs: [-e, node=node9 skip_confirmation=true]\n",
    );
    let out = kok(&["validate", repo.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    // Pre-flight's remove-node rule says it too, about the entry (a warning: validate cannot tell whether it ran).
    assert!(
        lines[0]
            .starts_with("clusters/a/operations.yml:1:1: warning: node=node9 is not a host of the inventory"),
        "{stdout}"
    );
    assert!(
        lines[1]
            .starts_with("clusters/a/operations.yml:3:19: warning: operation \"rm\" names host \"node9\""),
        "{stdout}"
    );
    assert_eq!(
        text(&out.stderr).trim(),
        "1 cluster valid, 0 invalid, 0 errors, 2 warnings (pre-flight: 0 of the errors, 1 of the warnings)"
    );
}

#[test]
fn json_output_lists_valid_and_invalid_clusters_and_diagnostics() {
    let repo = tempfile::tempdir().unwrap();
    good_cluster(repo.path(), "clusters/good");
    write(repo.path(), "clusters/bad/hosts.yml", HOSTS);
    write(repo.path(), "clusters/bad/vars.yml", "- not a mapping\n");
    let out = kok(&["validate", repo.path().to_str().unwrap(), "--output", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["clusters"], serde_json::json!(["good"]));
    assert_eq!(doc["invalid"], serde_json::json!(["bad"]));
    let diag = &doc["diagnostics"][0];
    assert_eq!(diag["path"], "clusters/bad/vars.yml");
    assert_eq!(diag["severity"], "error");
    assert_eq!(diag["cluster"], "bad");
}

#[test]
fn the_cluster_root_comes_from_path_or_its_env_twin() {
    let repo = tempfile::tempdir().unwrap();
    good_cluster(repo.path(), "envs/a");
    let dir = repo.path().to_str().unwrap();
    assert_eq!(kok(&["validate", dir, "--path", "envs"]).status.code(), Some(0));
    let by_env = Command::new(env!("CARGO_BIN_EXE_kok"))
        .args(["validate", dir])
        .env("KOK_PATH", "envs")
        .output()
        .unwrap();
    assert_eq!(by_env.status.code(), Some(0), "{}", text(&by_env.stderr));
    let default_root = kok(&["validate", dir]);
    assert_eq!(default_root.status.code(), Some(1));
    assert!(text(&default_root.stdout).starts_with("clusters:0:0: directory \"clusters\" not found"));
}

#[test]
fn a_missing_directory_is_an_error_that_names_it() {
    let out = kok(&["validate", "/nonexistent/kok-repo"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("cannot validate /nonexistent/kok-repo"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn the_example_repository_is_valid() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/repo-layout");
    if !example.is_dir() {
        println!("skipped: examples/repo-layout does not exist in this tree");
        return;
    }
    let out = kok(&["validate", example.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[test]
fn a_preflight_error_is_printed_with_path_line_and_column_and_exits_one() {
    let repo = tempfile::tempdir().unwrap();
    good_cluster(repo.path(), "clusters/a");
    write(
        repo.path(),
        "clusters/b/inventory.ini",
        "[kube_control_plane]\nn1\n\n[etcd]\nn1\nn2\n\n[kube_node]\nn3\n",
    );
    write(
        repo.path(),
        "clusters/b/group_vars/k8s_cluster/k8s-cluster.yml",
        "# the network\nkube_network_plugin: calico\nkube_version: v1.29.10\n",
    );
    write(
        repo.path(),
        "clusters/b/operations.yml",
        "- id: add\n  action: scale.yml\n  extraArgs: [--limit=n9]\n",
    );
    let out = kok(&["validate", repo.path().to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines.contains(
            &"clusters/b/inventory.ini:4:1: etcd has 2 hosts: kubespray v2.27.0 stops on an even number (\"Stop \
              if even number of etcd hosts\"); etcd needs a majority, so use an odd number of hosts (1, 3, 5) \
              [etcd-odd: kubespray v2.27.0 roles/kubernetes/preinstall/tasks/0040-verify-settings.yml:80]"
        ),
        "{stdout}"
    );
    // validate cannot tell which entries already ran: a finding about one operation is a warning.
    assert!(
        lines.iter().any(
            |l| l.starts_with("clusters/b/operations.yml:1:1: warning: --limit names n9")
                && l.ends_with("[limit-names]")
        ),
        "{stdout}"
    );
    assert_eq!(
        text(&out.stderr).trim_end(),
        "2 clusters valid, 0 invalid, 1 error, 2 warnings (pre-flight: 1 of the errors, 1 of the warnings)"
    );
}

#[test]
fn installed_in_cluster_yml_lets_scale_yml_come_first_and_a_bad_value_is_an_error_at_its_line() {
    let repo = tempfile::tempdir().unwrap();
    good_cluster(repo.path(), "clusters/a");
    write(
        repo.path(),
        "clusters/a/operations.yml",
        "- id: add\n  action: scale.yml\n- id: install\n  action: cluster.yml\n",
    );
    let dir = repo.path().to_str().unwrap();
    let out = kok(&["validate", dir]);
    assert!(
        text(&out.stdout).contains("[operation-order]"),
        "without installed: {}",
        text(&out.stdout)
    );
    write(repo.path(), "clusters/a/cluster.yml", "installed: true\n");
    let out = kok(&["validate", dir]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert_eq!(text(&out.stdout), "");

    write(
        repo.path(),
        "clusters/a/cluster.yml",
        "installed: {kubeVersion: 1.30}\n",
    );
    let out = kok(&["validate", dir]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).starts_with(
            "clusters/a/cluster.yml:1:26: installed.kubeVersion must be the Kubernetes version the cluster runs"
        ),
        "{}",
        text(&out.stdout)
    );
    write(repo.path(), "clusters/a/cluster.yml", "installed: true\n");
    write(repo.path(), "kok.yml", "installed: true\n");
    let out = kok(&["validate", dir]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).starts_with("kok.yml:1:12: installed belongs in cluster.yml, not kok.yml"),
        "{}",
        text(&out.stdout)
    );
}
