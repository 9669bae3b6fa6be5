//! `kok validate --verify-signatures`, `kok plan` and `kok history` report who signed each commit.

use crate::common::signing;
use crate::e2e;

use std::path::Path;
use std::process::{Command, Output};

use e2e::{git, Remote};
use signing::SshKey;

fn kok(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kok"))
        .args(args)
        .env_remove("KOK_VERIFY_SIGNATURES")
        .env_remove("KOK_ALLOWED_SIGNERS")
        .env_remove("KOK_TRUSTED_KEYS")
        .output()
        .expect("kok runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A remote whose history is: signed by alice, unsigned, signed by alice (newest). Returns the
/// remote, the three shas, alice's key and the allowed_signers file.
fn history() -> (Remote, [String; 3], SshKey, std::path::PathBuf) {
    let remote = Remote::new();
    let keys = remote.scratch("keys");
    let alice = SshKey::new(&keys, "alice");
    let allowed = keys.join("allowed_signers");
    std::fs::write(&allowed, alice.allowed("alice@example.com", "")).unwrap();
    let sign = |on: bool| {
        for (key, value) in alice.git_config() {
            git(&remote.work(), &["config", &key, &value]);
        }
        git(
            &remote.work(),
            &["config", "commit.gpgsign", if on { "true" } else { "false" }],
        );
    };
    sign(true);
    remote.cluster("a");
    let first = remote.push("create a");
    sign(false);
    remote.write("clusters/a/vars.yml", "cluster_name: a\nx: 1\n");
    let unsigned = remote.push("unsigned change");
    sign(true);
    remote.write("clusters/a/vars.yml", "cluster_name: a\nx: 2\n");
    let last = remote.push("signed change");
    (remote, [first, unsigned, last], alice, allowed)
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn validate_checks_head_with_tip_and_every_commit_since_a_base_with_all() {
    let (remote, [first, unsigned, last], alice, allowed) = history();
    let work = path(&remote.work());
    let allowed = path(&allowed);

    let out = kok(&[
        "validate",
        &work,
        "--verify-signatures",
        "tip",
        "--allowed-signers",
        &allowed,
    ]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "{}: signed by alice@example.com (ssh key {})",
            &last[..12],
            alice.fingerprint()
        )),
        "{text}"
    );

    let out = kok(&[
        "validate",
        &work,
        "--verify-signatures",
        "all",
        "--since",
        &first,
        "--allowed-signers",
        &allowed,
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = stdout(&out);
    assert!(
        text.contains(&format!("{}: error: unsigned", &unsigned[..12])),
        "{text}"
    );
    assert!(
        !text.contains(&first[..12]),
        "the base itself is not checked: {text}"
    );

    let out = kok(&["validate", &work, "--verify-signatures", "all"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--allowed-signers FILE or --trusted-keys DIR"),
        "{out:?}"
    );
}

#[test]
fn plan_reports_the_signature_of_every_commit_in_the_range_and_fails_with_verify_all() {
    let (remote, [first, unsigned, last], _alice, allowed) = history();
    let bare = path(&remote.bare());
    let cache = path(&remote.scratch("cache"));
    let allowed = path(&allowed);
    let base = [
        "plan",
        "--repo",
        &bare,
        "--cache-dir",
        &cache,
        "--from",
        &first,
        "--allowed-signers",
        &allowed,
    ];

    let out = kok(&[&base[..], &["--output", "json"]].concat());
    assert!(out.status.success(), "{out:?}");
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let signatures = plan["signatures"].as_array().unwrap();
    assert_eq!(signatures.len(), 2, "{plan}");
    assert_eq!(signatures[0]["commit"], last.as_str());
    assert_eq!(signatures[0]["trusted"], true);
    assert_eq!(signatures[1]["commit"], unsigned.as_str());
    assert_eq!(signatures[1]["state"], "unsigned");

    let out = kok(&[&base[..], &["--verify-signatures", "all"]].concat());
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stdout(&out).contains(&format!("{}: unsigned", &unsigned[..12])));
    let out = kok(&[&base[..], &["--verify-signatures", "tip"]].concat());
    assert!(out.status.success(), "the tip is signed: {out:?}");
}

#[test]
fn history_names_the_signer_of_each_signed_commit() {
    let (remote, [first, unsigned, last], alice, allowed) = history();
    let bare = path(&remote.bare());
    let cache = path(&remote.scratch("cache"));
    let base = ["history", "a", "--repo", &bare, "--cache-dir", &cache];
    let out = kok(&[&base[..], &["--allowed-signers", &path(&allowed)]].concat());
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    let signed_line = format!("  signed by alice@example.com (ssh key {})", alice.fingerprint());
    assert_eq!(text.matches(&signed_line).count(), 2, "{text}");

    let out = kok(&[&base[..], &["--output", "json"]].concat());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let by_commit = |sha: &str| {
        json.as_array()
            .unwrap()
            .iter()
            .find(|e| e["commit"] == sha)
            .map(|e| e["signature"].as_str().unwrap().to_string())
            .unwrap()
    };
    assert_eq!(by_commit(&unsigned), "unsigned");
    assert_eq!(
        by_commit(&last),
        format!("signed by an untrusted ssh key {}", alice.fingerprint()),
        "without trust material every signer is untrusted"
    );
    assert!(by_commit(&first).starts_with("signed by an untrusted ssh key"));
}

#[test]
fn run_refuses_to_start_with_missing_or_malformed_trust_material() {
    let dir = tempfile::tempdir().unwrap();
    let repo = path(dir.path());
    let signers = dir.path().join("allowed_signers");
    std::fs::write(&signers, "alice@example.com ssh-ed25519\n").unwrap();
    for (args, expected) in [
        (
            vec!["--verify-signatures", "all"],
            "--allowed-signers FILE or --trusted-keys DIR".to_string(),
        ),
        (
            vec!["--allowed-signers", "/nonexistent"],
            "need --verify-signatures tip|all".to_string(),
        ),
        (
            vec!["--verify-signatures", "tip", "--allowed-signers", &path(&signers)],
            format!("{}:1: the ssh-ed25519 key has no key data", signers.display()),
        ),
    ] {
        let out = kok(&[&["run", "--repo", &repo][..], &args].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(&expected), "{args:?}: {stderr}");
    }
}

#[test]
fn trust_material_inside_the_repository_it_verifies_is_refused() {
    let (remote, _, alice, _) = history();
    let inside = remote.work().join("allowed_signers");
    std::fs::write(&inside, alice.allowed("mallory@example.com", "")).unwrap();
    let work = path(&remote.work());
    for args in [
        vec!["validate", &work, "--verify-signatures", "tip"],
        vec!["run", "--repo", &work, "--verify-signatures", "tip"],
    ] {
        let inside = path(&inside);
        let out = kok(&[&args[..], &["--allowed-signers", &inside]].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("is inside the repository"), "{args:?}: {stderr}");
    }
}
