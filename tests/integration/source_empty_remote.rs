//! A remote without any ref (a repository just created) is a clear error, not a crash.

use kok::source::{Source, SourceConfig, SourceError};

#[test]
fn polling_a_remote_with_no_refs_names_the_missing_branch() {
    let dir = tempfile::tempdir().unwrap();
    let remote = dir.path().join("empty.git");
    let status = std::process::Command::new("git")
        .args(["init", "-q", "--bare"])
        .arg(&remote)
        .status()
        .expect("git must be installed (scripts/setup.sh installs it)");
    assert!(status.success());
    let url = format!("file://{}", remote.display());
    let mut source = Source::open(SourceConfig::new(url, "main", dir.path().join("cache"))).unwrap();
    let err = source.poll(None).unwrap_err();
    assert!(
        matches!(err, SourceError::RefNotFound { .. }),
        "unexpected error: {err}"
    );
    assert!(err.to_string().contains("main"), "{err}");
    assert_eq!(source.fetch_count(), 0);
}
