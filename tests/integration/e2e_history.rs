//! `kok history` joins the commit statuses recorded in `refs/notes/kok` to the commits that touched a
//! cluster: the remote's notes, and the cache's own when `kok run` shares it; and `kok run` reports
//! each run on the commit that brought its operation in, also at its first start.

use crate::common::kok as kok_cli;
use crate::e2e;
// Both harnesses include the one git CLI helper; the local-mode test needs the local one.
use crate::local_e2e_support;

use std::path::{Path, PathBuf};

use e2e::{git, job_name, meta_cluster, wait_for, Kok, Objects, Remote, NS};
use k8s_openapi::api::batch::v1::Job;
use serde_json::Value;

fn history(remote: &Remote, cache: &Path, extra: &[&str]) -> String {
    history_of(&remote.bare(), "a", cache, extra)
}

/// `kok history <cluster> --repo <repo> <extra>` with its cache at `cache`: its stdout, once it succeeded.
fn history_of(repo: &Path, cluster: &str, cache: &Path, extra: &[&str]) -> String {
    let repo = repo.to_string_lossy();
    let args: Vec<&str> = ["history", cluster, "--repo", &repo]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    let (ok, stdout, stderr) = kok_cli::kok(&args, cache);
    assert!(ok, "kok history failed: {stderr}");
    stdout
}

/// A remote with cluster `a` whose operations.yml is `operations`, then a commit touching docs only
/// (the tip kok reconciles first); returns the remote and both commits.
fn operations_then_docs(operations: &str) -> (Remote, String, String) {
    let remote = Remote::new();
    remote.cluster("a");
    remote.write("clusters/a/operations.yml", operations);
    let change = remote.push("a: operations");
    remote.write("docs/README.md", "docs\n");
    let docs = remote.push("docs only");
    (remote, change, docs)
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
fn history_shows_a_clusters_rollout_runs_under_the_rollouts_commits_with_rollout_and_wave() {
    let remote = Remote::new();
    for (name, region) in [("a", "sh"), ("b", "bj")] {
        remote.cluster(name);
        remote.write(
            &format!("clusters/{name}/cluster.yml"),
            &format!("labels: {{env: prod, region: {region}}}\n"),
        );
    }
    let create = remote.push("two clusters");
    let rollout =
        "operation: {id: upgrade, action: upgrade-cluster.yml}\nclusters: {selector: {env: prod}}\n\
                   waves:\n  - {name: canary, clusters: [a]}\n  - {name: beijing, selector: {region: bj}}\n";
    remote.write("rollouts/upgrade.yml", rollout);
    let start = remote.push("upgrade: start");
    remote.write("rollouts/upgrade.yml", &format!("{rollout}rerun: 1\n"));
    let rerun = remote.push("upgrade: rerun");
    remote.write("docs/README.md", "docs\n");
    let docs = remote.push("docs only");
    remote.write("rollouts/other.yml", &rollout.replace("upgrade", "other"));
    remote.push("another rollout, no run of b yet");
    note(
        &remote.bare(),
        &start,
        "kok/rollout/upgrade: failure 2026-11-22T00:20:00Z - halted at wave beijing: b failed\n\
         kok/a/upgrade: success 2026-11-22T00:09:00Z - succeeded in 9m\n\
         kok/b/upgrade: failure 2026-11-22T00:19:00Z - failed at TASK [x]\n",
    );
    // A run of the rerun that an earlier kok reported on the next commit it reconciled.
    note(
        &remote.bare(),
        &docs,
        "kok/b/upgrade: success 2026-11-22T01:09:00Z - succeeded in 8m\n",
    );
    let cache = remote.scratch("cache");
    let json: Value =
        serde_json::from_str(&history_of(&remote.bare(), "b", &cache, &["--output", "json"])).unwrap();
    let commits = commits_of(&json);
    assert_eq!(
        commits,
        [rerun.as_str(), start.as_str(), create.as_str()],
        "newest first; the docs commit and the rollout commit without a run of b are not listed: {json:#}"
    );
    let run = &entry_of(&json, &rerun)["operations"][0];
    assert_eq!(
        (&run["rollout"], &run["wave"], &run["state"]),
        (
            &Value::from("upgrade"),
            &Value::from("beijing"),
            &Value::from("success")
        ),
        "{json:#}"
    );
    assert_eq!(run["reportedOn"], docs.as_str());
    assert_eq!(
        entry_of(&json, &rerun)["files"],
        serde_json::json!(["rollouts/upgrade.yml"])
    );
    let runs = entry_of(&json, &start)["operations"].as_array().unwrap();
    assert_eq!(
        runs.len(),
        1,
        "b's run only, not a's nor the rollout's own: {json:#}"
    );
    assert_eq!(runs[0]["description"], "failed at TASK [x]");

    let text = history_of(&remote.bare(), "b", &cache, &[]);
    assert!(
        text.contains(
            "  kok/b/upgrade: failure 2026-11-22T00:19:00Z failed at TASK [x] [rollout upgrade, wave beijing]\n"
        ),
        "{text}"
    );
    let a: Value =
        serde_json::from_str(&history_of(&remote.bare(), "a", &cache, &["--output", "json"])).unwrap();
    assert_eq!(entry_of(&a, &start)["operations"][0]["wave"], "canary", "{a:#}");
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

/// `kok history a --output json` with a fresh cache.
fn history_json(remote: &Remote, cache: &str) -> Value {
    let cache = remote.scratch(cache);
    serde_json::from_str(&history(remote, &cache, &["--output", "json"])).expect("history JSON")
}

/// The commits of a JSON history, in its order.
fn commits_of(json: &Value) -> Vec<&str> {
    json.as_array()
        .expect("a list of commits")
        .iter()
        .map(|e| e["commit"].as_str().unwrap_or_default())
        .collect()
}

/// The entry of `commit` in a JSON history.
fn entry_of<'a>(json: &'a Value, commit: &str) -> &'a Value {
    json.as_array()
        .expect("a list of commits")
        .iter()
        .find(|e| e["commit"] == commit)
        .unwrap_or_else(|| panic!("{commit} is not in the history: {json:#}"))
}

/// Completes `count` Jobs not in `done` (the Jobs completed so far, which it extends).
async fn complete_jobs(api: &testkit::ApiServer, kok: &Kok, done: &mut Vec<String>, count: usize) {
    let objects = Objects::new(api);
    for _ in 0..count {
        let job: Job = wait_for("a Job to finish", Some(kok), || async {
            objects
                .jobs()
                .await
                .into_iter()
                .find(|j| !done.contains(&job_name(j)))
        })
        .await;
        api.complete_job(NS, &job_name(&job)).await.unwrap();
        done.push(job_name(&job));
    }
}

/// Waits until the remote's note of `sha` has a line starting with `prefix`; returns the note.
async fn note_with(remote: &Remote, kok: &Kok, sha: &str, prefix: &str) -> String {
    wait_for(&format!("{prefix} in the note of {sha}"), Some(kok), || async {
        let note = remote.note(sha);
        note.lines().any(|l| l.starts_with(prefix)).then_some(note)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_committed_before_kok_first_ran_shows_its_outcome_under_its_commit_and_so_does_a_rerun()
{
    let api = meta_cluster().await;
    let (remote, hello, docs) = operations_then_docs("- id: hello\n  action: playbooks/facts.yml\n");
    let kok = Kok::run(&api, &remote, &[]);
    complete_jobs(&api, &kok, &mut Vec::new(), 1).await;
    note_with(&remote, &kok, &hello, "kok/a/hello: success ").await;

    let objects = Objects::new(&api);
    let op = objects.operation("a", "hello").await.expect("the operation");
    assert_eq!(
        op.spec.source.commit, hello,
        "the run belongs to the commit that brought it in"
    );
    // The Cluster's status names that run.
    let name = op.metadata.name.clone().unwrap();
    wait_for("the Cluster's last operation", Some(&kok), || async {
        let last = objects.cluster("a").await?.status?.last_operation?;
        (last.name == name && last.summary == "hello: Succeeded").then_some(())
    })
    .await;
    assert!(
        !remote.note(&docs).contains("kok/a/"),
        "the tip kok reconciled first carries no run of a:\n{}",
        remote.note(&docs)
    );
    let text = history(&remote, &remote.scratch("text-cache"), &[]);
    let block = text
        .split_once(&hello[..8])
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("the hello commit is listed:\n{text}"));
    assert!(block.contains("kok/a/hello: success "), "{text}");
    assert!(
        !text.contains(&docs[..8]),
        "a commit that did not touch a is not listed:\n{text}"
    );
    assert!(!text.contains("reported on"), "{text}");
    let json = history_json(&remote, "json-cache");
    assert_eq!(json.as_array().unwrap().len(), 1, "{json:#}");
    let run = &entry_of(&json, &hello)["operations"][0];
    assert_eq!(run["operation"], "hello", "{json:#}");
    assert_eq!(run["state"], "success", "{json:#}");
    assert!(run.get("reportedOn").is_none(), "{json:#}");

    // A rerun bump followed at once by a docs commit: the new run belongs to the bump, whichever
    // commit kok reconciles it at.
    remote.write(
        "clusters/a/operations.yml",
        "- id: hello\n  action: playbooks/facts.yml\n  rerun: 1\n",
    );
    let bump = remote.push("a: run hello again");
    remote.write("docs/README.md", "more docs\n");
    remote.push("more docs");
    // The rerun is attributed to the bump: its Job appears once the first run's is done.
    let job = wait_for("the rerun's Job", Some(&kok), || async {
        let rerun = objects
            .operations()
            .await
            .into_iter()
            .find(|o| o.spec.source.commit == bump)?;
        rerun.status?.job_ref
    })
    .await;
    api.complete_job(NS, &job).await.unwrap();
    note_with(&remote, &kok, &bump, "kok/a/hello: success ").await;
    let json = history_json(&remote, "json-cache-2");
    let commits = commits_of(&json);
    assert_eq!(commits, [bump.as_str(), hello.as_str()], "{json:#}");
    assert_eq!(
        entry_of(&json, &bump)["operations"][0]["state"],
        "success",
        "{json:#}"
    );
    assert_eq!(
        entry_of(&json, &hello)["operations"][0]["state"],
        "success",
        "{json:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scheduled_run_shows_under_the_commit_that_brought_the_operation_in() {
    let api = meta_cluster().await;
    let (remote, backup, _) = operations_then_docs(
        "- id: backup\n  type: shell\n  action: backup.sh\n  schedule: \"* * * * * *\"\n",
    );
    let mut kok = Kok::run(&api, &remote, &[]);
    let mut done = Vec::new();
    complete_jobs(&api, &kok, &mut done, 1).await;
    note_with(&remote, &kok, &backup, "kok/a/backup: success ").await;
    // The scheduler looks for new schedules every 30 s; a restart finds this one at once, and runs
    // the firing it missed.
    kok.kill();
    let kok = Kok::run(&api, &remote, &[]);
    complete_jobs(&api, &kok, &mut done, 1).await;
    let note = wait_for("both runs in the note", Some(&kok), || async {
        let note = remote.note(&backup);
        (note
            .lines()
            .filter(|l| l.starts_with("kok/a/backup"))
            .filter(|l| l.contains(": success "))
            .count()
            == 2)
            .then_some(note)
    })
    .await;
    assert!(note.contains("kok/a/backup: success "), "{note}");
    assert!(
        note.contains("kok/a/backup@"),
        "a scheduled run keeps its own line: {note}"
    );

    let json = history_json(&remote, "json-cache");
    let runs = entry_of(&json, &backup)["operations"].as_array().unwrap().clone();
    assert_eq!(runs.len(), 2, "{json:#}");
    assert!(
        runs.iter()
            .all(|r| r["operation"] == "backup" && r["state"] == "success"),
        "{json:#}"
    );
    assert_eq!(
        runs.iter().filter(|r| r.get("scheduled").is_some()).count(),
        1,
        "one run is the firing's: {json:#}"
    );
    let text = history(&remote, &remote.scratch("text-cache"), &[]);
    assert_eq!(text.matches("kok/a/backup").count(), 2, "{text}");
}

#[test]
fn a_run_reported_on_a_later_commit_shows_under_the_change_it_ran_and_says_where_it_was_reported() {
    let (remote, hello, docs) = operations_then_docs("- id: hello\n  action: playbooks/facts.yml\n");
    // Where an earlier kok reported the run of its first start: the tip it reconciled.
    note(
        &remote.bare(),
        &docs,
        "kok/sync: success 2026-11-22T00:00:00Z - materialized 1 cluster\n\
         kok/a/hello: success 2026-11-22T00:01:00Z - succeeded in 1m\n",
    );
    let cache = remote.scratch("cache");
    let text = history(&remote, &cache, &[]);
    assert_eq!(
        text.lines().next().map(|l| l.starts_with(&hello[..8])),
        Some(true),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "  kok/a/hello: success 2026-11-22T00:01:00Z succeeded in 1m (reported on {})\n",
            &docs[..8]
        )),
        "{text}"
    );
    let json: Value = serde_json::from_str(&history(&remote, &cache, &["--output", "json"])).unwrap();
    assert_eq!(
        json.as_array().unwrap().len(),
        1,
        "only the change of a: {json:#}"
    );
    assert_eq!(json[0]["operations"][0]["reportedOn"], docs.as_str(), "{json:#}");
    assert_eq!(json[0]["operations"][0]["state"], "success", "{json:#}");
}

#[tokio::test(flavor = "multi_thread")]
async fn local_mode_started_after_a_docs_commit_reports_the_run_on_the_operations_commit() {
    use local_e2e_support::{ansible_or_skip, finished, note_line, LocalKok, LocalRepo, CLUSTER};
    if !ansible_or_skip("local_mode_started_after_a_docs_commit_reports_the_run_on_the_operations_commit") {
        return;
    }
    let repo = LocalRepo::new();
    let hello = repo.commit_operations(&[("hello", "mark.yml", "hello")]);
    std::fs::write(repo.path().join("NOTES.md"), "docs only\n").unwrap();
    let docs = repo.commit("docs only");
    let mut kok = LocalKok::start(&repo);
    let client = kok.client(&repo).await;
    let op = finished(&mut kok, &client, "hello").await;
    assert_eq!(op.spec.source.commit, hello);
    note_line(&mut kok, &repo, &hello, "kok/local/hello: success ").await;
    assert!(!repo.note(&docs).contains("kok/local/"), "{}", repo.note(&docs));

    let json = history_of(
        &repo.path(),
        CLUSTER,
        &repo.scratch("history-cache"),
        &["--output", "json"],
    );
    let json: Value = serde_json::from_str(&json).expect("history JSON");
    let run = &entry_of(&json, &hello)["operations"][0];
    assert_eq!(run["operation"], "hello", "{json:#}");
    assert_eq!(run["state"], "success", "{json:#}");
    assert!(kok.stop(), "kok exits 0 on SIGTERM; its log:\n{}", kok.log());
}
