//! The git source over the network on loopback: `git daemon` (git://) and a real `sshd` with
//! throwaway keys (host key checked against known_hosts, user key authentication).

use crate::gitkit;

use git2::Oid;
use gitkit::{GitDaemon, RepoBuilder, Sshd};
use kok::source::{Credentials, Poll, Source, SourceConfig, SourceError};

fn oid(sha: &str) -> Oid {
    Oid::from_str(sha).expect("sha")
}

#[test]
fn git_daemon_remote_is_cloned_then_polled_without_fetching() {
    if gitkit::skip_servers("git daemon") {
        return;
    }
    let mut repo = RepoBuilder::new();
    repo.cluster("a").cluster("b");
    let first = repo.commit("initial");
    let base = repo.path().parent().unwrap().to_path_buf();
    let name = repo.path().file_name().unwrap().to_string_lossy().into_owned();
    let daemon = GitDaemon::start(&base);
    let cache = tempfile::tempdir().unwrap();
    let mut src = Source::open(SourceConfig::new(daemon.url(&name), "main", cache.path())).unwrap();
    assert_eq!(src.poll(None).unwrap(), Poll::Changed { commit: oid(&first) });
    assert_eq!(
        src.poll(Some(oid(&first))).unwrap(),
        Poll::Unchanged { commit: oid(&first) }
    );
    assert_eq!(src.fetch_count(), 1);
    repo.file("clusters/b/vars.yml", "cluster_name: b\nz: 3\n");
    let second = repo.commit("change b");
    assert_eq!(
        src.poll(Some(oid(&first))).unwrap(),
        Poll::Changed { commit: oid(&second) }
    );
    assert_eq!(src.fetch_count(), 2);
    let changes = src.diff(Some(oid(&first)), oid(&second), "clusters").unwrap();
    assert_eq!(changes.changed, vec!["b"]);
}

#[test]
fn git_daemon_missing_repository_is_reported() {
    if gitkit::skip_servers("git daemon") {
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let daemon = GitDaemon::start(base.path());
    let cache = tempfile::tempdir().unwrap();
    let mut src = Source::open(SourceConfig::new(
        daemon.url("nothing-here"),
        "main",
        cache.path(),
    ))
    .unwrap();
    let err = src.poll(None).unwrap_err();
    eprintln!("{err}");
    assert!(err.to_string().contains("nothing-here"), "{err}");
}

/// A repository served by a fresh sshd, and credentials for it.
fn ssh_setup() -> Option<(RepoBuilder, Sshd, String)> {
    if gitkit::skip_servers("ssh") {
        return None;
    }
    let mut repo = RepoBuilder::new();
    repo.cluster("a");
    let sha = repo.commit("initial");
    let sshd = Sshd::start();
    Some((repo, sshd, sha))
}

fn ssh_config(
    sshd: &Sshd,
    repo: &RepoBuilder,
    key: &str,
    known_hosts: &str,
    cache: &std::path::Path,
) -> SourceConfig {
    let mut config = SourceConfig::new(sshd.url(repo.path()), "main", cache);
    config.credentials = Credentials {
        ssh_key_file: Some(sshd.file(key)),
        known_hosts_file: Some(sshd.file(known_hosts)),
        ..Credentials::default()
    };
    config.timeout = std::time::Duration::from_secs(30);
    config
}

#[test]
fn ssh_remote_with_key_and_known_host_is_fetched() {
    let Some((mut repo, sshd, sha)) = ssh_setup() else {
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    let mut src = Source::open(ssh_config(&sshd, &repo, "user_key", "known_hosts", cache.path())).unwrap();
    assert_eq!(src.poll(None).unwrap(), Poll::Changed { commit: oid(&sha) });
    assert_eq!(
        src.poll(Some(oid(&sha))).unwrap(),
        Poll::Unchanged { commit: oid(&sha) }
    );
    assert_eq!(src.fetch_count(), 1);
    repo.cluster("b");
    let next = repo.commit("add b");
    assert_eq!(
        src.poll(Some(oid(&sha))).unwrap(),
        Poll::Changed { commit: oid(&next) }
    );
}

#[test]
fn ssh_host_key_that_differs_from_known_hosts_is_refused() {
    let Some((repo, sshd, _)) = ssh_setup() else {
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    let mut src = Source::open(ssh_config(
        &sshd,
        &repo,
        "user_key",
        "wrong_known_hosts",
        cache.path(),
    ))
    .unwrap();
    let err = src.poll(None).unwrap_err();
    eprintln!("{err}");
    assert!(matches!(err, SourceError::HostKeyChanged { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&format!("[127.0.0.1]:{}", sshd.port)), "{text}");
    assert!(
        text.contains("wrong_known_hosts") && text.contains("does not match"),
        "{text}"
    );
}

#[test]
fn ssh_host_missing_from_known_hosts_is_refused() {
    let Some((repo, sshd, _)) = ssh_setup() else {
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    let mut src = Source::open(ssh_config(
        &sshd,
        &repo,
        "user_key",
        "empty_known_hosts",
        cache.path(),
    ))
    .unwrap();
    let err = src.poll(None).unwrap_err();
    eprintln!("{err}");
    assert!(matches!(err, SourceError::HostKeyUnknown { .. }), "{err:?}");
    assert!(
        err.to_string().contains("is not in the known_hosts file"),
        "{err}"
    );
}

#[test]
fn ssh_user_key_the_server_does_not_accept_fails_listing_what_was_tried() {
    let Some((repo, sshd, _)) = ssh_setup() else {
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    let mut src = Source::open(ssh_config(&sshd, &repo, "other_key", "known_hosts", cache.path())).unwrap();
    let err = src.poll(None).unwrap_err();
    eprintln!("{err}");
    assert!(matches!(err, SourceError::AuthFailed { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("authentication to ssh://") && text.contains("other_key"),
        "{text}"
    );
    assert!(!text.contains("PRIVATE KEY"), "{text}");
}

#[test]
fn ssh_login_comes_from_the_username_file_when_the_url_has_none() {
    let Some((repo, sshd, sha)) = ssh_setup() else {
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    let login = String::from_utf8(
        std::process::Command::new("id")
            .arg("-un")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let user_file = cache.path().join("user");
    std::fs::write(&user_file, login.trim()).unwrap();
    let mut config = ssh_config(&sshd, &repo, "user_key", "known_hosts", cache.path());
    config.url = format!("ssh://127.0.0.1:{}{}", sshd.port, repo.path().display());
    config.credentials.username_file = Some(user_file);
    let mut src = Source::open(config).unwrap();
    assert_eq!(src.poll(None).unwrap(), Poll::Changed { commit: oid(&sha) });
}
