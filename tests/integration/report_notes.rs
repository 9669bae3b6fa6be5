//! The git notes sink writes one note per commit under refs/notes/kok, readable with git, and pushes it.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use kok::api::{CommitStatus, StatusState};
use kok::report::notes::{read_all_notes, read_notes, NotesSink, PushTarget, NOTES_REF};
use kok::report::Sink;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A bare "cache" repository holding one commit, and an empty bare "remote"; returns the commit sha.
fn setup(dir: &Path) -> String {
    let work = dir.join("work");
    std::fs::create_dir(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    std::fs::write(work.join("hosts.yml"), "all: {}\n").unwrap();
    git(&work, &["add", "."]);
    git(&work, &["commit", "-q", "-m", "add hosts"]);
    git(dir, &["clone", "-q", "--bare", "work", "cache.git"]);
    git(dir, &["init", "-q", "--bare", "remote.git"]);
    git(&work, &["rev-parse", "HEAD"])
}

fn status(context: &str, state: StatusState, description: &str) -> CommitStatus {
    CommitStatus {
        context: context.into(),
        state,
        description: description.into(),
        target_url: None,
        run: None,
    }
}

#[tokio::test]
async fn notes_are_readable_with_git_log_keep_other_contexts_and_reach_a_file_remote() {
    let dir = tempfile::tempdir().unwrap();
    let sha = setup(dir.path());
    let cache = dir.path().join("cache.git");
    let remote_url = format!("file://{}", dir.path().join("remote.git").display());
    let sink = NotesSink::new(&cache).with_push(PushTarget {
        remote: remote_url,
        callbacks: None,
    });

    sink.deliver(
        &sha,
        &status("kok/sync", StatusState::Success, "materialized 1 cluster"),
    )
    .await
    .unwrap();
    let mut op = status(
        "kok/prod-bj/add-node7",
        StatusState::Running,
        "running: scale.yml --limit=node7",
    );
    op.target_url = Some("https://logs.example/kok-system/kok-job".into());
    sink.deliver(&sha, &op).await.unwrap();
    op.state = StatusState::Success;
    op.description = "succeeded in 3m12s".into();
    sink.deliver(&sha, &op).await.unwrap();

    let shown = git(&cache, &["log", "--notes=kok", "--format=%N", "-1", &sha]);
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines.len(), 2, "{shown}");
    assert!(lines[0].starts_with("kok/sync: success "), "{shown}");
    assert!(lines[0].ends_with(" - materialized 1 cluster"), "{shown}");
    assert!(lines[1].starts_with("kok/prod-bj/add-node7: success "), "{shown}");
    assert!(
        lines[1].ends_with(" https://logs.example/kok-system/kok-job succeeded in 3m12s"),
        "{shown}"
    );

    let entries = read_notes(&cache, &sha).unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[1].state, StatusState::Success);
    assert_eq!(entries[1].description, "succeeded in 3m12s");
    assert_eq!(
        entries[1].target_url.as_deref(),
        Some("https://logs.example/kok-system/kok-job")
    );
    assert!(
        entries[1].time.parse::<jiff::Timestamp>().is_ok(),
        "{}",
        entries[1].time
    );

    let all = read_all_notes(&cache).unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].commit, sha);

    let local = git(&cache, &["rev-parse", NOTES_REF]);
    let pushed = git(&dir.path().join("remote.git"), &["rev-parse", NOTES_REF]);
    assert_eq!(local, pushed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statuses_delivered_together_share_notes_commits_and_all_reach_the_note() {
    let dir = tempfile::tempdir().unwrap();
    let sha = setup(dir.path());
    let cache = dir.path().join("cache.git");
    let remote = dir.path().join("remote.git");
    let sink = Arc::new(NotesSink::new(&cache).with_push(PushTarget {
        remote: format!("file://{}", remote.display()),
        callbacks: None,
    }));
    // A second commit, so one batch holds statuses of two commits.
    let work = dir.path().join("work");
    std::fs::write(work.join("vars.yml"), "x: 1\n").unwrap();
    git(&work, &["add", "."]);
    git(&work, &["commit", "-q", "-m", "vars"]);
    git(
        dir.path(),
        &["--git-dir", "cache.git", "fetch", "-q", "work", "main:main"],
    );
    let second = git(&work, &["rev-parse", "HEAD"]);

    const N: usize = 200;
    let deliveries: Vec<_> = (0..N)
        .map(|i| {
            let sink = sink.clone();
            let commit = if i % 10 == 0 { second.clone() } else { sha.clone() };
            tokio::spawn(async move {
                let s = status(&format!("kok/c{i:03}/install"), StatusState::Pending, "waiting");
                sink.deliver(&commit, &s).await
            })
        })
        .collect();
    for delivery in deliveries {
        delivery.await.unwrap().unwrap();
    }

    let commits: usize = git(&cache, &["rev-list", "--count", NOTES_REF]).parse().unwrap();
    assert!(
        commits <= N / 10,
        "{N} statuses took {commits} notes commits; deliveries that wait together share one"
    );
    let first = read_notes(&cache, &sha).unwrap();
    let other = read_notes(&cache, &second).unwrap();
    assert_eq!(first.len() + other.len(), N);
    assert_eq!(other.len(), N / 10);
    for i in 0..N {
        let context = format!("kok/c{i:03}/install");
        let entries = if i % 10 == 0 { &other } else { &first };
        assert!(
            entries.iter().any(|e| e.context == context),
            "{context} is missing from the notes"
        );
    }
    // Every notes commit has a single parent chain (batches are squashed), and the remote has the last.
    let merges = git(&cache, &["rev-list", "--merges", "--count", NOTES_REF]);
    assert_eq!(merges, "0");
    assert_eq!(
        git(&remote, &["rev-parse", NOTES_REF]),
        git(&cache, &["rev-parse", NOTES_REF])
    );
}

#[tokio::test]
async fn writing_the_same_status_again_leaves_the_note_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let sha = setup(dir.path());
    let cache = dir.path().join("cache.git");
    let sink = NotesSink::new(&cache);
    let s = status("kok/sync", StatusState::Error, "clusters/a/hosts.yml:3: bad host");
    assert!(sink.write(&sha, &s).await.unwrap());
    let before = git(&cache, &["rev-parse", NOTES_REF]);
    assert!(!sink.write(&sha, &s).await.unwrap());
    assert_eq!(git(&cache, &["rev-parse", NOTES_REF]), before);
}

#[tokio::test]
async fn a_failed_push_keeps_the_local_note_and_delivers() {
    let dir = tempfile::tempdir().unwrap();
    let sha = setup(dir.path());
    let cache = dir.path().join("cache.git");
    let missing = dir.path().join("no-such-remote.git").display().to_string();
    let sink = NotesSink::new(&cache).with_push(PushTarget {
        remote: missing,
        callbacks: None,
    });
    sink.deliver(
        &sha,
        &status("kok/sync", StatusState::Success, "materialized 0 clusters"),
    )
    .await
    .unwrap();
    assert_eq!(read_notes(&cache, &sha).unwrap().len(), 1);
}

#[tokio::test]
async fn a_commit_without_a_note_has_no_entries() {
    let dir = tempfile::tempdir().unwrap();
    let sha = setup(dir.path());
    assert!(read_notes(&dir.path().join("cache.git"), &sha)
        .unwrap()
        .is_empty());
    assert!(read_all_notes(&dir.path().join("cache.git")).unwrap().is_empty());
}

#[tokio::test]
async fn a_new_cache_and_a_diverged_writer_join_the_remote_notes_before_pushing() {
    let dir = tempfile::tempdir().unwrap();
    let sha = setup(dir.path());
    git(dir.path(), &["clone", "-q", "--bare", "work", "cache2.git"]);
    let remote = dir.path().join("remote.git");
    let target = || PushTarget {
        remote: format!("file://{}", remote.display()),
        callbacks: None,
    };
    let first = NotesSink::new(dir.path().join("cache.git")).with_push(target());
    let second = NotesSink::new(dir.path().join("cache2.git")).with_push(target());

    first
        .deliver(
            &sha,
            &status("kok/sync", StatusState::Success, "materialized 1 cluster"),
        )
        .await
        .unwrap();
    // A fresh cache (e.g. after a pod restart) starts from the remote's notes.
    second
        .deliver(&sha, &status("kok/a/install", StatusState::Pending, "queued"))
        .await
        .unwrap();
    // The first writer is now behind the remote: its push is refused, joined, and pushed again.
    first
        .deliver(
            &sha,
            &status("kok/b/upgrade", StatusState::Success, "succeeded in 1s"),
        )
        .await
        .unwrap();

    let on_remote = git(&remote, &["notes", "--ref=kok", "show", &sha]);
    let contexts: Vec<&str> = on_remote.lines().map(|l| l.split(':').next().unwrap()).collect();
    assert_eq!(
        contexts,
        ["kok/sync", "kok/a/install", "kok/b/upgrade"],
        "{on_remote}"
    );
    let cache = dir.path().join("cache.git");
    assert_eq!(
        git(&cache, &["rev-parse", NOTES_REF]),
        git(&remote, &["rev-parse", NOTES_REF])
    );
}
