//! The notes sink reaches a remote that is a plain work tree on this machine (`kok run --repo .`).

use std::path::Path;
use std::process::Command;

use kok::api::{CommitStatus, StatusState};
use kok::report::notes::{NotesSink, PushTarget, NOTES_REF};
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

fn status(context: &str, state: StatusState, description: &str) -> CommitStatus {
    CommitStatus {
        context: context.into(),
        state,
        description: description.into(),
        target_url: None,
        run: None,
    }
}

/// A work-tree repository with one commit and a bare cache cloned from it; returns the commit sha.
fn setup(dir: &Path) -> String {
    let work = dir.join("work");
    std::fs::create_dir(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    std::fs::write(work.join("hosts.yml"), "all: {}\n").unwrap();
    git(&work, &["add", "."]);
    git(&work, &["commit", "-q", "-m", "add hosts"]);
    git(dir, &["clone", "-q", "--bare", "work", "cache.git"]);
    git(&work, &["rev-parse", "HEAD"])
}

#[tokio::test]
async fn notes_reach_a_work_tree_remote_given_as_a_plain_path_and_show_in_its_git_log() {
    let dir = tempfile::tempdir().unwrap();
    let sha = setup(dir.path());
    let work = dir.path().join("work");
    let cache = dir.path().join("cache.git");
    let sink = NotesSink::new(&cache).with_push(PushTarget {
        remote: work.display().to_string(),
        callbacks: None,
    });

    let mut op = status("kok/local/hello", StatusState::Running, "running: hello.yml");
    sink.deliver(&sha, &op).await.unwrap();
    op.state = StatusState::Success;
    op.description = "succeeded in 2s".into();
    sink.deliver(&sha, &op).await.unwrap();

    assert_eq!(
        git(&work, &["rev-parse", NOTES_REF]),
        git(&cache, &["rev-parse", NOTES_REF])
    );
    let shown = git(&work, &["log", "--notes=kok", "--format=%N", "-1", &sha]);
    assert!(shown.starts_with("kok/local/hello: success "), "{shown}");
    assert!(shown.ends_with(" - succeeded in 2s"), "{shown}");
    assert_eq!(
        git(&work, &["status", "--porcelain"]),
        "",
        "the work tree is untouched"
    );
    // The notes' objects were copied one by one, not fetched as a pack: git finds every object each
    // notes commit names, and none damaged.
    git(&work, &["fsck", "--full", "--strict", "--no-dangling"]);
    assert_eq!(
        git(&work, &["rev-list", "--count", NOTES_REF]),
        "2",
        "both notes commits are there"
    );
    // The note's blob is the cache's loose file itself (one filesystem: a hard link), not inflated,
    // hashed and deflated a second time.
    let blob = git(&cache, &["rev-parse", &format!("{NOTES_REF}:{sha}")]);
    let loose = |objects: &Path| objects.join(&blob[..2]).join(&blob[2..]);
    let ours =
        std::fs::metadata(loose(&cache.join("objects"))).expect("the note's blob is loose in the cache");
    let theirs =
        std::fs::metadata(loose(&work.join(".git/objects"))).expect("the note's blob is loose in the remote");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        (ours.dev(), ours.ino()),
        (theirs.dev(), theirs.ino()),
        "the remote's note blob is the cache's file"
    );
}

#[tokio::test]
async fn a_work_tree_remote_given_as_a_file_url_whose_notes_moved_is_joined_not_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let sha = setup(dir.path());
    let work = dir.path().join("work");
    let cache = dir.path().join("cache.git");
    // Someone else annotated the commit in the work tree before kok's first write.
    git(
        &work,
        &[
            "notes",
            "--ref=kok",
            "add",
            "-m",
            "kok/other/op: success 2026-11-22T00:00:00Z - done",
            &sha,
        ],
    );
    let sink = NotesSink::new(&cache).with_push(PushTarget {
        remote: format!("file://{}", work.display()),
        callbacks: None,
    });

    sink.deliver(
        &sha,
        &status("kok/sync", StatusState::Success, "materialized 1 cluster"),
    )
    .await
    .unwrap();

    let shown = git(&work, &["log", "--notes=kok", "--format=%N", "-1", &sha]);
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines.len(), 2, "{shown}");
    assert!(lines[0].starts_with("kok/other/op: success "), "{shown}");
    assert!(lines[1].starts_with("kok/sync: success "), "{shown}");
}
