//! The git source against local repositories (file:// and plain paths): polling, diffs, attribution,
//! force pushes, missing refs, corrupt caches, history and the local watcher.

use crate::gitkit;

use std::time::Duration;

use git2::Oid;
use gitkit::RepoBuilder;
use kok::source::{trigger, Poll, Source, SourceConfig, SourceError};

fn source(url: &str, reference: &str, cache: &tempfile::TempDir) -> Source {
    Source::open(SourceConfig::new(url, reference, cache.path())).expect("source opens")
}

fn oid(sha: &str) -> Oid {
    Oid::from_str(sha).expect("sha")
}

fn many_clusters(n: usize) -> RepoBuilder {
    let mut repo = RepoBuilder::new();
    for i in 0..n {
        repo.cluster(&format!("c{i:02}"));
    }
    repo.commit("many clusters");
    repo
}

#[test]
fn first_poll_fetches_the_branch_and_every_cluster_is_added() {
    let mut repo = RepoBuilder::new();
    repo.cluster("a").cluster("b");
    let sha = repo.commit("two clusters");
    let cache = tempfile::tempdir().unwrap();
    let mut src = source(&repo.url(), "main", &cache);
    let poll = src.poll(None).unwrap();
    assert_eq!(poll, Poll::Changed { commit: oid(&sha) });
    assert_eq!(src.fetch_count(), 1);
    assert_eq!(src.resolved_ref(), Some("refs/heads/main"));
    assert_eq!(src.revision(oid(&sha)), format!("main@sha1:{sha}"));
    let changes = src.diff(None, oid(&sha), "clusters").unwrap();
    assert_eq!(changes.added, vec!["a", "b"]);
    assert!(changes.full_resync);
    assert!(
        !src.cache_path().join("index").exists(),
        "the cache has no work tree or index"
    );
}

#[test]
fn no_op_poll_lists_refs_and_fetches_nothing() {
    let mut repo = RepoBuilder::new();
    repo.cluster("a");
    let sha = repo.commit("one");
    let cache = tempfile::tempdir().unwrap();
    let mut src = source(&repo.url(), "main", &cache);
    src.poll(None).unwrap();
    let before = dir_snapshot(src.cache_path());
    let poll = src.poll(Some(oid(&sha))).unwrap();
    assert_eq!(poll, Poll::Unchanged { commit: oid(&sha) });
    assert_eq!(src.fetch_count(), 1, "the no-op poll must not fetch");
    assert_eq!(src.listing_count(), 2);
    assert_eq!(
        dir_snapshot(src.cache_path()),
        before,
        "the no-op poll wrote into the cache"
    );
}

/// Every file of a directory tree with its size and modification time.
fn dir_snapshot(dir: &std::path::Path) -> Vec<(String, u64, std::time::SystemTime)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                stack.push(e.path());
            } else {
                out.push((
                    e.path().display().to_string(),
                    meta.len(),
                    meta.modified().unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn plain_paths_work_like_file_urls() {
    let mut repo = RepoBuilder::new();
    repo.cluster("a");
    let sha = repo.commit("one");
    let cache = tempfile::tempdir().unwrap();
    let mut src = source(&repo.path().display().to_string(), "main", &cache);
    assert_eq!(src.poll(None).unwrap().commit(), oid(&sha));
    assert_eq!(
        src.poll(Some(oid(&sha))).unwrap(),
        Poll::Unchanged { commit: oid(&sha) }
    );
}

#[test]
fn one_changed_cluster_among_many_is_the_only_one_reported() {
    let mut repo = many_clusters(30);
    let old = repo.head();
    repo.file(
        "clusters/c17/vars.yml",
        "cluster_name: c17\nkube_version: v1.33.0\n",
    );
    let new = repo.commit("bump c17");
    let cache = tempfile::tempdir().unwrap();
    let mut src = source(&repo.url(), "main", &cache);
    src.poll(None).unwrap();
    let changes = src.diff(Some(oid(&old)), oid(&new), "clusters").unwrap();
    assert_eq!(changes.changed, vec!["c17"]);
    assert!(changes.added.is_empty() && changes.removed.is_empty() && !changes.full_resync);
}

#[test]
fn renamed_cluster_is_a_removal_plus_an_addition() {
    let mut repo = RepoBuilder::new();
    repo.cluster("old-name").cluster("other");
    let old = repo.commit("initial");
    repo.rename("clusters/old-name", "clusters/new-name");
    let new = repo.commit("rename");
    let cache = tempfile::tempdir().unwrap();
    let mut src = source(&repo.url(), "main", &cache);
    src.poll(None).unwrap();
    let changes = src.diff(Some(oid(&old)), oid(&new), "clusters").unwrap();
    assert_eq!(
        (changes.added, changes.removed),
        (vec!["new-name".to_string()], vec!["old-name".to_string()])
    );
    assert!(changes.changed.is_empty());
}

#[test]
fn removed_cluster_is_reported_removed() {
    let mut repo = RepoBuilder::new();
    repo.cluster("a").cluster("b");
    let old = repo.commit("initial");
    repo.remove("clusters/b");
    let new = repo.commit("drop b");
    let cache = tempfile::tempdir().unwrap();
    let mut src = source(&repo.url(), "main", &cache);
    src.poll(None).unwrap();
    let changes = src.diff(Some(oid(&old)), oid(&new), "clusters").unwrap();
    assert_eq!(changes.removed, vec!["b"]);
    assert!(changes.added.is_empty() && changes.changed.is_empty());
}

#[test]
fn kok_yml_change_marks_every_cluster_changed() {
    let mut repo = RepoBuilder::new();
    repo.cluster("a")
        .cluster("b")
        .file("kok.yml", "historyLimit: 5\n");
    let old = repo.commit("initial");
    repo.file("kok.yml", "historyLimit: 9\n");
    let new = repo.commit("defaults");
    let cache = tempfile::tempdir().unwrap();
    let mut src = source(&repo.url(), "main", &cache);
    src.poll(None).unwrap();
    let changes = src.diff(Some(oid(&old)), oid(&new), "clusters").unwrap();
    assert_eq!(changes.changed, vec!["a", "b"]);
    assert!(changes.settings_changed);
}

#[test]
fn several_commits_pushed_at_once_each_get_their_own_operations() {
    let mut repo = RepoBuilder::new();
    repo.cluster("a").cluster("b").op("a", "install", "cluster.yml");
    let old = repo.commit("install a");
    repo.op("a", "upgrade", "upgrade-cluster.yml");
    let first = repo.commit("upgrade a");
    repo.op("b", "install", "cluster.yml");
    let second = repo.commit("install b");
    repo.file("clusters/a/vars.yml", "cluster_name: a\nx: 1\n");
    repo.commit("vars only");
    repo.op("a", "reset", "reset.yml");
    let fourth = repo.commit("reset a");
    let cache = tempfile::tempdir().unwrap();
    let mut src = source(&repo.url(), "main", &cache);
    let new = src.poll(Some(oid(&old))).unwrap().commit();
    let changes = src.diff(Some(oid(&old)), new, "clusters").unwrap();
    assert_eq!(changes.changed, vec!["a", "b"]);
    let introduced = kok::source::attribute(
        src.repository(),
        Some(oid(&old)),
        new,
        "clusters",
        &changes.touched(),
    )
    .unwrap();
    let got: Vec<(String, String, String, usize)> = introduced
        .iter()
        .map(|i| (i.cluster.clone(), i.id.clone(), i.commit.clone(), i.commit_index))
        .collect();
    assert_eq!(
        got,
        vec![
            ("a".to_string(), "upgrade".to_string(), first, 0),
            ("b".to_string(), "install".to_string(), second, 1),
            ("a".to_string(), "reset".to_string(), fourth, 3),
        ]
    );
}

#[test]
fn force_push_falls_back_to_a_full_resync() {
    let mut repo = RepoBuilder::new();
    repo.cluster("a").cluster("b");
    repo.commit("initial");
    repo.cluster("c");
    let old = repo.commit("add c");
    let cache = tempfile::tempdir().unwrap();
    let mut src = source(&repo.url(), "main", &cache);
    src.poll(None).unwrap();
    repo.git(&["reset", "-q", "--hard", "HEAD~1"]);
    repo.cluster("d");
    let rewritten = repo.commit("add d instead");
    let poll = src.poll(Some(oid(&old))).unwrap();
    assert_eq!(
        poll,
        Poll::Changed {
            commit: oid(&rewritten)
        }
    );
    let changes = src.diff(Some(oid(&old)), oid(&rewritten), "clusters").unwrap();
    assert!(changes.full_resync);
    assert_eq!(changes.added, vec!["d"]);
    assert_eq!(changes.changed, vec!["a", "b"]);
    assert_eq!(changes.removed, vec!["c"]);
}

#[test]
fn missing_base_commit_falls_back_to_a_full_resync() {
    let mut repo = RepoBuilder::new();
    repo.cluster("a");
    let new = repo.commit("initial");
    let cache = tempfile::tempdir().unwrap();
    let mut src = source(&repo.url(), "main", &cache);
    src.poll(None).unwrap();
    let unknown = oid("1111111111111111111111111111111111111111");
    let changes = src.diff(Some(unknown), oid(&new), "clusters").unwrap();
    assert!(changes.full_resync);
    assert_eq!(changes.added, vec!["a"]);
}

#[test]
fn deleted_branch_is_named_in_the_error() {
    let mut repo = RepoBuilder::new();
    repo.cluster("a");
    repo.commit("initial");
    repo.git(&["branch", "feature"]);
    let cache = tempfile::tempdir().unwrap();
    let mut src = source(&repo.url(), "feature", &cache);
    let first = src.poll(None).unwrap().commit();
    repo.git(&["branch", "-D", "feature"]);
    let err = src.poll(Some(first)).unwrap_err();
    eprintln!("{err}");
    assert!(matches!(err, SourceError::RefNotFound { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("\"feature\"") && text.contains("refs/heads/feature"),
        "{text}"
    );
}

#[test]
fn tags_and_full_ref_names_resolve() {
    let mut repo = RepoBuilder::new();
    repo.cluster("a");
    let sha = repo.commit("initial");
    repo.git(&["tag", "-a", "-m", "release", "v1"]);
    repo.cluster("b");
    repo.commit("later");
    let cache = tempfile::tempdir().unwrap();
    let mut by_tag = source(&repo.url(), "v1", &cache);
    assert_eq!(by_tag.poll(None).unwrap().commit(), oid(&sha));
    assert_eq!(
        by_tag.poll(Some(oid(&sha))).unwrap(),
        Poll::Unchanged { commit: oid(&sha) }
    );
    let mut by_ref = source(&repo.url(), "refs/heads/main", &cache);
    assert_eq!(by_ref.poll(None).unwrap().commit(), oid(&repo.head()));
}

#[test]
fn unreachable_remote_fails_with_a_clear_error() {
    let port = gitkit::free_port();
    let cache = tempfile::tempdir().unwrap();
    let mut config = SourceConfig::new(format!("git://127.0.0.1:{port}/repo"), "main", cache.path());
    config.timeout = Duration::from_secs(5);
    let mut src = Source::open(config).unwrap();
    let err = src.poll(None).unwrap_err();
    eprintln!("{err}");
    let text = err.to_string();
    assert!(
        matches!(err, SourceError::Remote { .. } | SourceError::Timeout { .. }),
        "{err:?}"
    );
    assert!(
        text.contains(&format!("127.0.0.1:{port}")) && text.contains("list refs"),
        "{text}"
    );
}

#[test]
fn silent_remote_times_out() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let cache = tempfile::tempdir().unwrap();
    let mut config = SourceConfig::new(format!("git://127.0.0.1:{port}/repo"), "main", cache.path());
    config.timeout = Duration::from_secs(1);
    let mut src = Source::open(config).unwrap();
    let err = src.poll(None).unwrap_err();
    eprintln!("{err}");
    assert!(matches!(err, SourceError::Timeout { seconds: 1, .. }), "{err:?}");
    assert!(err.to_string().contains("--git-timeout"), "{err}");
    let again = src.poll(None).unwrap_err();
    assert!(
        matches!(again, SourceError::Busy { .. }),
        "the timed-out listing still runs: {again:?}"
    );
    drop(listener);
}

#[test]
fn unreadable_cache_is_recreated() {
    let mut repo = RepoBuilder::new();
    repo.cluster("a");
    let sha = repo.commit("initial");
    let cache = tempfile::tempdir().unwrap();
    let path = {
        let mut src = source(&repo.url(), "main", &cache);
        src.poll(None).unwrap();
        src.cache_path().to_path_buf()
    };
    std::fs::write(path.join("HEAD"), "garbage").unwrap();
    std::fs::remove_dir_all(path.join("objects")).unwrap();
    let mut src = source(&repo.url(), "main", &cache);
    assert_eq!(src.poll(None).unwrap().commit(), oid(&sha));
    assert!(src.tree(oid(&sha)).is_ok());
}

#[test]
fn damaged_objects_in_the_cache_are_refetched() {
    let mut repo = RepoBuilder::new();
    repo.cluster("a");
    repo.commit("initial");
    let cache = tempfile::tempdir().unwrap();
    let mut src = source(&repo.url(), "main", &cache);
    src.poll(None).unwrap();
    for dir in ["objects/pack"] {
        for e in std::fs::read_dir(src.cache_path().join(dir)).unwrap() {
            let p = e.unwrap().path();
            let _ = std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o644));
            std::fs::write(&p, b"not a pack").unwrap();
        }
    }
    repo.cluster("b");
    let sha = repo.commit("add b");
    drop(src);
    let mut src = source(&repo.url(), "main", &cache);
    assert_eq!(src.poll(None).unwrap().commit(), oid(&sha));
    let changes = src.diff(None, oid(&sha), "clusters").unwrap();
    assert_eq!(changes.added, vec!["a", "b"]);
}

#[test]
fn history_lists_commits_touching_the_cluster_newest_first() {
    let mut repo = RepoBuilder::new();
    repo.cluster("a").cluster("b");
    let first = repo.commit("create a and b");
    repo.file("clusters/b/vars.yml", "cluster_name: b\ny: 2\n");
    repo.commit("only b");
    repo.op("a", "install", "cluster.yml");
    let third = repo.commit("install a\n\nlong body");
    let cache = tempfile::tempdir().unwrap();
    let mut src = source(&repo.url(), "main", &cache);
    let tip = src.poll(None).unwrap().commit();
    let history = kok::source::cluster_history(src.repository(), tip, "clusters", "a", 10).unwrap();
    let got: Vec<(&str, &str, Vec<String>)> = history
        .iter()
        .map(|h| (h.commit.as_str(), h.subject.as_str(), h.files.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (third.as_str(), "install a", vec!["operations.yml".to_string()]),
            (
                first.as_str(),
                "create a and b",
                vec!["hosts.yml".to_string(), "vars.yml".to_string()]
            ),
        ]
    );
    assert_eq!(history[0].author, "Test Author");
    assert_eq!(history[0].short, &third[..8]);
    let limited = kok::source::cluster_history(src.repository(), tip, "clusters", "a", 1).unwrap();
    assert_eq!(limited.len(), 1);
}

/// A repository with one commit, and the watch on its refs.
fn watched_repository() -> (RepoBuilder, trigger::TriggerReceiver, trigger::LocalWatcher) {
    let mut repo = RepoBuilder::new();
    repo.cluster("a");
    repo.commit("initial");
    let (tx, rx) = trigger::channel();
    let watcher = trigger::watch_local(repo.path(), tx).unwrap();
    (repo, rx, watcher)
}

#[tokio::test]
async fn a_local_commit_triggers_a_poll() {
    let (mut repo, mut rx, _watcher) = watched_repository();
    repo.cluster("b");
    repo.commit("add b");
    let got = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await;
    assert_eq!(got.ok().flatten(), Some(trigger::Reason::LocalChange));
}

#[tokio::test]
async fn a_burst_of_ref_changes_asks_for_a_poll_again_once_it_settles() {
    // A ref written into a directory made a moment before (`refs/pull/1/head` after `refs/pull` was
    // pruned) can come before the watch on that directory, so only the directory's own event is
    // seen, and the poll it asks for may run before the ref is there: the watch asks again once the
    // refs are quiet.
    let (repo, mut rx, _watcher) = watched_repository();
    std::fs::create_dir(repo.path().join(".git/refs/pull")).unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await;
    assert_eq!(first.ok().flatten(), Some(trigger::Reason::LocalChange));
    let settled = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await;
    assert_eq!(
        settled.ok().flatten(),
        Some(trigger::Reason::LocalChange),
        "one more poll once the burst settles"
    );
    let quiet = tokio::time::timeout(trigger::SETTLE * 5, rx.recv()).await;
    assert!(quiet.is_err(), "then nothing until the next change: {quiet:?}");
}

#[tokio::test]
async fn a_ref_moves_when_its_lock_is_renamed_over_it_not_when_the_lock_is_written() {
    // git updates a ref by writing `<ref>.lock` and renaming it over the ref. A poll at the lock's
    // creation reads the old commit: the watch waits for the rename.
    let (repo, mut rx, _watcher) = watched_repository();
    let heads = repo.path().join(".git/refs/heads");
    let lock = heads.join("next.lock");
    std::fs::write(&lock, "0000000000000000000000000000000000000000\n").unwrap();
    let early = tokio::time::timeout(trigger::SETTLE * 5, rx.recv()).await;
    assert!(early.is_err(), "writing the lock asked for a poll: {early:?}");
    std::fs::rename(&lock, heads.join("next")).unwrap();
    let moved = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await;
    assert_eq!(moved.ok().flatten(), Some(trigger::Reason::LocalChange));
}

#[test]
fn watching_a_directory_without_refs_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, _rx) = trigger::channel();
    let err = trigger::watch_local(dir.path(), tx).unwrap_err();
    assert!(err.to_string().contains("not a git repository"), "{err}");
}

#[test]
fn edited_operation_is_attributed_to_the_commit_that_edited_it() {
    let mut repo = RepoBuilder::new();
    repo.cluster("a").op("a", "install", "cluster.yml");
    let old = repo.commit("install");
    repo.op("a", "scale", "scale.yml");
    let added = repo.commit("add scale");
    repo.file(
        "clusters/a/operations.yml",
        "- id: install\n  action: cluster.yml\n  rerun: 1\n- id: scale\n  action: scale.yml\n",
    );
    let rerun = repo.commit("run install again");
    let cache = tempfile::tempdir().unwrap();
    let mut src = source(&repo.url(), "main", &cache);
    let new = src.poll(None).unwrap().commit();
    let introduced = kok::source::attribute(
        src.repository(),
        Some(oid(&old)),
        new,
        "clusters",
        &["a".to_string()],
    )
    .unwrap();
    let got: Vec<(&str, &str)> = introduced
        .iter()
        .map(|i| (i.id.as_str(), i.commit.as_str()))
        .collect();
    assert_eq!(got, vec![("scale", added.as_str()), ("install", rerun.as_str())]);
    assert_eq!(
        introduced[0].digest,
        kok::materialize::operation_digest(&serde_json::json!({"id": "scale", "action": "scale.yml"}))
    );
}

#[test]
fn no_op_poll_does_not_even_open_the_cache() {
    let mut repo = RepoBuilder::new();
    repo.cluster("a");
    let sha = repo.commit("one");
    let cache = tempfile::tempdir().unwrap();
    let mut src = source(&repo.url(), "main", &cache);
    src.poll(None).unwrap();
    std::fs::remove_dir_all(src.cache_path()).unwrap();
    assert_eq!(
        src.poll(Some(oid(&sha))).unwrap(),
        Poll::Unchanged { commit: oid(&sha) }
    );
    assert!(!src.cache_path().exists(), "the no-op poll wrote the cache back");
    repo.cluster("b");
    let next = repo.commit("two");
    assert_eq!(
        src.poll(Some(oid(&sha))).unwrap(),
        Poll::Changed { commit: oid(&next) }
    );
}
