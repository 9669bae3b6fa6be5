//! `kok plan` reads `--from` and `--to` as `git rev-parse` does: in a checkout of a pull request
//! (`--repo .`), in a shallow one, and through the cache of a remote.

use crate::common::kok as kok_process;
use crate::gitkit;

use gitkit::{skip_servers, GitDaemon, RepoBuilder};
use kok_process::kok;
use serde_json::Value;

/// The ids of the operations the plan of `repo` between `from` and `to` would run, per cluster.
fn planned(repo: &str, from: &str, to: &str) -> Vec<String> {
    let cache = tempfile::tempdir().unwrap();
    let args = [
        "plan", "--repo", repo, "--from", from, "--to", to, "--output", "json",
    ];
    let (ok, stdout, stderr) = kok(&args, cache.path());
    assert!(ok, "kok plan --from {from} --to {to} failed: {stderr}");
    let plan: Value = serde_json::from_str(&stdout).expect("plan is JSON");
    plan["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["operations"].as_array().unwrap().iter())
        .map(|o| o["id"].as_str().unwrap().to_string())
        .collect()
}

/// main: prod-bj installed (tagged v1), then add-node7; returns the repository and the first commit.
fn upstream() -> (RepoBuilder, String) {
    let mut origin = RepoBuilder::new();
    origin.cluster("prod-bj").op("prod-bj", "install", "cluster.yml");
    let first = origin.commit("prod-bj");
    origin.git(&["tag", "v1"]);
    origin.op("prod-bj", "add-node7", "scale.yml");
    origin.commit("add node7");
    (origin, first)
}

/// A clone of `origin` on a new branch pr1 that adds add-node8.
fn pull_request(origin: &RepoBuilder) -> RepoBuilder {
    let mut work = RepoBuilder::clone_of(&origin.url(), &[]);
    work.git(&["checkout", "-q", "-b", "pr1"]);
    work.op("prod-bj", "add-node8", "scale.yml");
    work.commit("add node8");
    work
}

#[test]
fn plan_in_a_checkout_of_a_pull_request_takes_branches_tags_and_shas_as_git_does() {
    let (origin, first) = upstream();
    let work = pull_request(&origin);
    let here = work.path().display().to_string();
    assert_eq!(planned(&here, "origin/main", "HEAD"), ["add-node8"]);
    assert_eq!(planned(&here, "main", "pr1"), ["add-node8"]);
    assert_eq!(planned(&here, "main~1", "main"), ["add-node7"]);
    let short = work.git(&["rev-parse", "--short", "origin/main"]);
    assert_eq!(planned(&here, "v1", &short), ["add-node7"]);
    assert_eq!(planned(&here, &first, "HEAD"), ["add-node7", "add-node8"]);
    assert_eq!(planned(&work.url(), "HEAD~2", "HEAD"), ["add-node7", "add-node8"]);
}

#[test]
fn plan_names_a_revision_that_is_not_in_the_repository() {
    let (origin, _) = upstream();
    let cache = tempfile::tempdir().unwrap();
    let here = origin.path().display().to_string();
    let (ok, _, stderr) = kok(
        &["plan", "--repo", &here, "--from", "nosuch", "--to", "HEAD"],
        cache.path(),
    );
    assert!(!ok);
    assert!(
        stderr.contains("revision \"nosuch\" is not a branch, remote-tracking branch, tag or commit"),
        "{stderr}"
    );
    assert!(!stderr.contains("shallow"), "{stderr}");
}

#[test]
fn a_shallow_checkout_lacking_the_base_says_what_to_fetch() {
    let (origin, _) = upstream();
    let work = pull_request(&origin);
    let shallow = RepoBuilder::clone_of(&work.url(), &["--depth", "1", "--branch", "pr1"]);
    let here = shallow.path().display().to_string();
    let cache = tempfile::tempdir().unwrap();
    let args = ["plan", "--repo", &here, "--from", "origin/main", "--to", "HEAD"];

    let (ok, _, stderr) = kok(&args, cache.path());
    assert!(!ok, "a shallow clone without origin/main cannot be planned");
    assert!(stderr.contains("this checkout is shallow"), "{stderr}");
    assert!(stderr.contains("git fetch origin main"), "{stderr}");

    shallow.git(&["fetch", "-q", "origin", "main:refs/remotes/origin/main"]);
    let (ok, _, stderr) = kok(&args, cache.path());
    assert!(!ok, "the history between origin/main and HEAD is still cut");
    assert!(stderr.contains("is a shallow clone"), "{stderr}");
    assert!(stderr.contains("git fetch --unshallow"), "{stderr}");

    shallow.git(&["fetch", "-q", "--unshallow"]);
    assert_eq!(planned(&here, "origin/main", "HEAD"), ["add-node8"]);
}

#[test]
fn plan_through_the_cache_of_a_remote_takes_branches_tags_and_head() {
    if skip_servers("git daemon") {
        return;
    }
    let (origin, _) = upstream();
    let work = pull_request(&origin);
    let base = tempfile::tempdir().unwrap();
    gitkit::git(base.path(), &["clone", "-q", "--bare", &work.url(), "infra.git"]);
    let daemon = GitDaemon::start(base.path());
    let url = daemon.url("infra.git");
    assert_eq!(planned(&url, "main", "pr1"), ["add-node8"]);
    assert_eq!(planned(&url, "origin/main", "pr1"), ["add-node8"]);
    assert_eq!(planned(&url, "v1", "HEAD"), ["add-node7"]);
    assert_eq!(planned(&url, "main~1", "HEAD"), ["add-node7"]);
}
