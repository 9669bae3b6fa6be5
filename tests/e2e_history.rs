//! `kok history` joins the commit statuses recorded in `refs/notes/kok` to the commits that touched a
//! cluster: the remote's notes, and the cache's own when `kok run` shares it.

mod e2e;
mod forge;

use std::path::{Path, PathBuf};
use std::process::Command;

use e2e::{git, Remote};
use serde_json::Value;

fn history(remote: &Remote, cache: &Path, extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kok"))
        .args(["history", "a", "--repo"])
        .arg(remote.bare())
        .arg("--cache-dir")
        .arg(cache)
        .args(extra)
        .env("KOK_LOG", "error")
        .output()
        .expect("kok runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kok history failed: {stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Adds (or replaces) the kok note of `sha` in the repository at `dir`.
fn note(dir: &Path, sha: &str, text: &str) {
    git(dir, &["notes", "--ref=kok", "add", "-f", "-m", text, sha]);
}

/// The one bare cache under `cache`.
fn cache_repo(cache: &Path) -> PathBuf {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    entries.pop().unwrap()
}

#[test]
fn history_shows_under_each_commit_how_its_operations_ended() {
    let remote = Remote::new();
    remote.cluster("a").cluster("b");
    remote.write(
        "clusters/a/operations.yml",
        "- id: install\n  action: cluster.yml\n",
    );
    remote.write(
        "clusters/b/operations.yml",
        "- id: install\n  action: cluster.yml\n",
    );
    let install = remote.push("install a and b");
    remote.write("clusters/b/vars.yml", "cluster_name: b\nx: 1\n");
    let only_b = remote.push("touch b only");
    remote.write(
        "clusters/a/operations.yml",
        "- id: install\n  action: cluster.yml\n- id: upgrade\n  action: upgrade-cluster.yml\n",
    );
    let upgrade = remote.push("upgrade a");
    note(
        &remote.bare(),
        &install,
        "kok/sync: success 2026-11-22T00:00:00Z - materialized 2 clusters\n\
         kok/a/install: success 2026-11-22T00:09:00Z https://logs.example/kok-a-install succeeded in 9m\n\
         kok/b/install: failure 2026-11-22T00:03:00Z - Failed: BackoffLimitExceeded\n",
    );
    note(
        &remote.bare(),
        &only_b,
        "kok/sync: success 2026-11-22T00:10:00Z - materialized 1 clusters\n",
    );
    note(
        &remote.bare(),
        &upgrade,
        "kok/a/upgrade: pending 2026-11-22T00:11:00Z - running\n",
    );

    let cache = remote.scratch("cache");
    let text = history(&remote, &cache, &[]);
    let expected = format!(
        "{} {{date}} Test Author upgrade a\n    operations.yml\n  kok/a/upgrade: pending 2026-11-22T00:11:00Z running\n\
         {} {{date}} Test Author install a and b\n    hosts.yml\n    operations.yml\n    vars.yml\n  \
         kok/a/install: success 2026-11-22T00:09:00Z succeeded in 9m <https://logs.example/kok-a-install>\n",
        &upgrade[..8],
        &install[..8]
    );
    let dated: Vec<String> = text
        .lines()
        .map(|l| match l.split_once(' ') {
            Some((short, rest)) if !l.starts_with(' ') => {
                let (_, rest) = rest.split_once(' ').unwrap();
                format!("{short} {{date}} {rest}")
            }
            _ => l.to_string(),
        })
        .collect();
    pretty_assertions::assert_eq!(dated.join("\n") + "\n", expected);

    let json: Value = serde_json::from_str(&history(&remote, &cache, &["--output", "json"])).unwrap();
    assert_eq!(json[0]["commit"], upgrade.as_str());
    assert_eq!(json[0]["operations"][0]["operation"], "upgrade");
    assert_eq!(json[0]["operations"][0]["state"], "pending");
    assert_eq!(
        json[1]["operations"].as_array().unwrap().len(),
        1,
        "only cluster a: {json}"
    );
    assert_eq!(json[1]["operations"][0]["context"], "kok/a/install");
    assert_eq!(json[1]["operations"][0]["description"], "succeeded in 9m");
    assert_eq!(
        json[1]["operations"][0]["targetUrl"],
        "https://logs.example/kok-a-install"
    );

    // The remote's note moves on: the next history fetches it again.
    note(
        &remote.bare(),
        &upgrade,
        "kok/a/upgrade: success 2026-11-22T00:20:00Z - succeeded in 9m\n",
    );
    let json: Value = serde_json::from_str(&history(&remote, &cache, &["--output", "json"])).unwrap();
    assert_eq!(json[0]["operations"][0]["state"], "success");
    // A newer status the cache holds (kok run's, not pushed yet) wins over the remote's older one.
    note(
        &cache_repo(&cache),
        &upgrade,
        "kok/a/upgrade: failure 2026-11-22T00:30:00Z - Failed: DeadlineExceeded\n",
    );
    let json: Value = serde_json::from_str(&history(&remote, &cache, &["--output", "json"])).unwrap();
    assert_eq!(json[0]["operations"][0]["state"], "failure", "{json}");
    assert_eq!(
        json[0]["operations"][0]["description"],
        "Failed: DeadlineExceeded"
    );
}

#[test]
fn history_without_notes_lists_commits_only() {
    let remote = Remote::new();
    remote.cluster("a");
    remote.push("create a");
    let cache = remote.scratch("cache");
    let text = history(&remote, &cache, &[]);
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(
        text.lines().next().unwrap().ends_with("Test Author create a"),
        "{text}"
    );
    let json: Value = serde_json::from_str(&history(&remote, &cache, &["--output", "json"])).unwrap();
    assert_eq!(json[0]["operations"], serde_json::json!([]));
}
