//! `kok plan` and `kok history` run as the real binary against repositories built with git.

use crate::common::kok as kok_process;
use crate::gitkit;

use std::path::Path;

use gitkit::RepoBuilder;
use kok_process::kok;
use serde_json::Value;

fn plan_json(repo: &RepoBuilder, extra: &[&str], cache: &Path) -> Value {
    let url = repo.url();
    let mut args = vec!["plan", "--repo", url.as_str(), "--output", "json"];
    args.extend_from_slice(extra);
    let (ok, stdout, stderr) = kok(&args, cache);
    assert!(ok, "kok plan failed: {stderr}");
    serde_json::from_str(&stdout).expect("plan is JSON")
}

fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|o| format!("{}/{}", o["kind"].as_str().unwrap(), o["name"].as_str().unwrap()))
        .collect()
}

#[test]
fn plan_lists_objects_and_operations_per_cluster_with_their_commits() {
    let mut repo = RepoBuilder::new();
    repo.cluster("a").op("a", "install", "cluster.yml").cluster("c");
    let from = repo.commit("start");
    repo.op("a", "upgrade", "upgrade-cluster.yml");
    let upgrade = repo.commit("upgrade a");
    repo.cluster("b")
        .op("b", "install", "cluster.yml")
        .remove("clusters/c");
    let add_b = repo.commit("add b, drop c");
    let cache = tempfile::tempdir().unwrap();
    let plan = plan_json(&repo, &["--from", &from], cache.path());
    assert_eq!(plan["to"], add_b.as_str());
    assert_eq!(plan["commits"], 2);
    let clusters = plan["clusters"].as_array().unwrap();
    let by_name = |n: &str| {
        clusters
            .iter()
            .find(|c| c["name"] == n)
            .unwrap_or_else(|| panic!("{n} in {plan}"))
    };

    let a = by_name("a");
    assert!(
        names(&a["created"])
            .iter()
            .any(|n| n.starts_with("ClusterOperation/a-upgrade-")),
        "{a}"
    );
    assert!(names(&a["deleted"]).is_empty(), "{a}");
    let ops = a["operations"].as_array().unwrap();
    assert_eq!(ops.len(), 1, "{a}");
    assert_eq!(
        (ops[0]["id"].as_str(), ops[0]["commit"].as_str()),
        (Some("upgrade"), Some(upgrade.as_str()))
    );
    assert_eq!(ops[0]["subject"], "upgrade a");

    let b = by_name("b");
    let created = names(&b["created"]);
    assert!(created.contains(&"Cluster/b".to_string()), "{created:?}");
    assert!(
        created.iter().any(|n| n.starts_with("ConfigMap/b-hosts-")),
        "{created:?}"
    );
    assert_eq!(b["operations"][0]["commit"], add_b.as_str());

    let c = by_name("c");
    assert!(names(&c["deleted"]).contains(&"Cluster/c".to_string()), "{c}");
    assert!(names(&c["created"]).is_empty());
}

#[test]
fn plan_defaults_to_the_tip_and_its_first_parent() {
    let mut repo = RepoBuilder::new();
    repo.cluster("a");
    repo.commit("start");
    repo.file("clusters/a/vars.yml", "cluster_name: a\nkube_version: v1.33.0\n");
    let tip = repo.commit("bump a");
    let cache = tempfile::tempdir().unwrap();
    let plan = plan_json(&repo, &[], cache.path());
    assert_eq!(plan["to"], tip.as_str());
    assert_eq!(plan["commits"], 1);
    let a = &plan["clusters"][0];
    assert_eq!(a["name"], "a");
    let created = names(&a["created"]);
    let deleted = names(&a["deleted"]);
    assert!(
        created.iter().any(|n| n.starts_with("ConfigMap/a-vars-")),
        "{created:?}"
    );
    assert!(
        deleted.iter().any(|n| n.starts_with("ConfigMap/a-vars-")),
        "{deleted:?}"
    );
    assert_eq!(names(&a["updated"]), vec!["Cluster/a"]);
}

#[test]
fn plan_reports_invalid_clusters_as_left_at_their_last_good_state() {
    let mut repo = RepoBuilder::new();
    repo.cluster("a").cluster("b");
    repo.commit("start");
    repo.file("clusters/b/hosts.yml", "all: [not, a, mapping]\n");
    repo.file("clusters/a/vars.yml", "cluster_name: a\nx: 1\n");
    repo.commit("break b");
    let cache = tempfile::tempdir().unwrap();
    let url = repo.url();
    let (ok, stdout, stderr) = kok(&["plan", "--repo", &url], cache.path());
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("cluster b: invalid, it would be left at its last good state"),
        "{stdout}"
    );
    assert!(stdout.contains("clusters/b/hosts.yml:"), "{stdout}");
    assert!(stdout.contains("cluster a\n"), "{stdout}");
}

#[test]
fn plan_of_the_example_repository_creates_the_new_cluster_and_runs_its_operations() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/repo-layout");
    let mut repo = RepoBuilder::new();
    let copy = |repo: &mut RepoBuilder, rel: &str| {
        let text = std::fs::read_to_string(example.join(rel)).unwrap();
        repo.file(rel, &text);
    };
    copy(&mut repo, "kok.yml");
    for f in ["hosts.yml", "vars.yml", "operations.yml"] {
        copy(&mut repo, &format!("clusters/staging-sh/{f}"));
    }
    let from = repo.commit("staging");
    for f in std::fs::read_dir(example.join("clusters/prod-bj")).unwrap() {
        let name = f.unwrap().file_name().to_string_lossy().into_owned();
        copy(&mut repo, &format!("clusters/prod-bj/{name}"));
    }
    let to = repo.commit("prod-bj");
    let cache = tempfile::tempdir().unwrap();
    let plan = plan_json(&repo, &["--from", &from, "--to", &to], cache.path());
    let clusters = plan["clusters"].as_array().unwrap();
    assert_eq!(clusters.len(), 1, "{plan}");
    assert_eq!(clusters[0]["name"], "prod-bj");
    let ops: Vec<&str> = clusters[0]["operations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap())
        .collect();
    assert!(ops.contains(&"install") && ops.contains(&"add-node7"), "{ops:?}");
    assert!(clusters[0]["operations"]
        .as_array()
        .unwrap()
        .iter()
        .all(|o| o["commit"] == to.as_str()));
    assert!(plan["invalid"].as_array().unwrap().is_empty(), "{plan}");
}

#[test]
fn history_prints_the_commits_that_touched_the_cluster() {
    let mut repo = RepoBuilder::new();
    repo.cluster("a").cluster("b");
    repo.commit("create both");
    repo.file("clusters/b/vars.yml", "cluster_name: b\nx: 1\n");
    repo.commit("touch b only");
    repo.op("a", "install", "cluster.yml");
    repo.commit("install a");
    let cache = tempfile::tempdir().unwrap();
    let url = repo.url();
    let (ok, stdout, stderr) = kok(&["history", "a", "--repo", &url], cache.path());
    assert!(ok, "{stderr}");
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.starts_with(' ')).collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(lines[0].ends_with("Test Author install a"), "{stdout}");
    assert!(lines[1].ends_with("Test Author create both"), "{stdout}");
    assert!(stdout.contains("    operations.yml\n"), "{stdout}");
    let (ok, stdout, _) = kok(
        &["history", "a", "--repo", &url, "--output", "json", "--limit", "1"],
        cache.path(),
    );
    assert!(ok);
    let json: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 1);
    assert_eq!(json[0]["subject"], "install a");
}

#[test]
fn plan_on_a_missing_ref_names_it() {
    let mut repo = RepoBuilder::new();
    repo.cluster("a");
    repo.commit("start");
    let cache = tempfile::tempdir().unwrap();
    let url = repo.url();
    let (ok, _, stderr) = kok(&["plan", "--repo", &url, "--ref", "release"], cache.path());
    assert!(!ok);
    assert!(stderr.contains("ref \"release\" does not exist"), "{stderr}");
}
