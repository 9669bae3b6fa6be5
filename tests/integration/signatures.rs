//! Commit signature verification against commits signed by the real `git` with `ssh-keygen` and
//! `gpg` keys: every refusal reason, tampering, and the commits `all` walks.

use crate::common::git as git_cli;
use crate::common::signing;

use std::path::{Path, PathBuf};

use git2::{Oid, Repository};
use git_cli::git;
use kok::source::verify::{commits_to_verify, verify_commit, Refusal, Trust, TrustFiles, VerifyMode};
use signing::{tamper, Gpg, SshKey};

/// A work repository and a place for keys.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let fixture = Fixture {
            dir: tempfile::tempdir().expect("temp dir"),
        };
        std::fs::create_dir_all(fixture.repo()).unwrap();
        git(&fixture.repo(), &["init", "-q", "-b", "main"]);
        fixture
    }

    fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Commits a change to `file`, signed as `config` says (empty: unsigned).
    fn commit(&self, config: &[(String, String)], message: &str) -> String {
        let repo = self.repo();
        git(&repo, &["config", "commit.gpgsign", "false"]);
        for (key, value) in config {
            git(&repo, &["config", key, value]);
        }
        std::fs::write(repo.join("file"), message).unwrap();
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", message]);
        git(&repo, &["rev-parse", "HEAD"])
    }

    fn allowed_signers(&self, text: &str) -> TrustFiles {
        let path = self.path("allowed_signers");
        std::fs::write(&path, text).unwrap();
        TrustFiles {
            allowed_signers: Some(path),
            trusted_keys: None,
        }
    }

    fn verify(&self, files: &TrustFiles, sha: &str) -> Result<kok::source::verify::Signer, Refusal> {
        let trust = Trust::load(files).expect("trust material loads");
        let repo = Repository::open(self.repo()).unwrap();
        verify_commit(
            &repo,
            Oid::from_str(sha).unwrap(),
            &trust,
            jiff::Timestamp::now().as_second(),
        )
        .unwrap()
    }
}

fn keys_dir(files: &[PathBuf], dir: &Path) -> TrustFiles {
    assert!(files.iter().all(|f| f.starts_with(dir)));
    TrustFiles {
        allowed_signers: None,
        trusted_keys: Some(dir.to_path_buf()),
    }
}

#[test]
fn a_commit_signed_by_an_allowed_ssh_signer_is_trusted_and_names_the_signer() {
    let fx = Fixture::new();
    let alice = SshKey::new(fx.dir.path(), "alice");
    let sha = fx.commit(&alice.git_config(), "signed");
    let files = fx.allowed_signers(&alice.allowed("alice@example.com", "namespaces=\"git\""));
    let signer = fx.verify(&files, &sha).expect("trusted");
    assert_eq!(signer.name, "alice@example.com");
    assert_eq!(signer.kind, "ssh");
    assert_eq!(signer.fingerprint, alice.fingerprint());
}

#[test]
fn ecdsa_and_rsa_ssh_keys_sign_commits_too() {
    let fx = Fixture::new();
    for key_type in ["ecdsa", "rsa"] {
        let key = SshKey::of_type(fx.dir.path(), key_type, key_type);
        let sha = fx.commit(&key.git_config(), &format!("signed with {key_type}"));
        let files = fx.allowed_signers(&key.allowed("ops@example.com", ""));
        let signer = fx
            .verify(&files, &sha)
            .unwrap_or_else(|r| panic!("{key_type}: {r:?}"));
        assert_eq!(signer.fingerprint, key.fingerprint());
    }
}

#[test]
fn an_unsigned_commit_is_refused_as_unsigned() {
    let fx = Fixture::new();
    let alice = SshKey::new(fx.dir.path(), "alice");
    let sha = fx.commit(&[], "unsigned");
    let files = fx.allowed_signers(&alice.allowed("alice@example.com", ""));
    assert_eq!(fx.verify(&files, &sha), Err(Refusal::Unsigned));
}

#[test]
fn an_ssh_signature_by_a_key_outside_allowed_signers_is_refused_naming_its_fingerprint() {
    let fx = Fixture::new();
    let alice = SshKey::new(fx.dir.path(), "alice");
    let mallory = SshKey::new(fx.dir.path(), "mallory");
    let sha = fx.commit(&mallory.git_config(), "by mallory");
    let files = fx.allowed_signers(&alice.allowed("alice@example.com", ""));
    assert_eq!(
        fx.verify(&files, &sha),
        Err(Refusal::UntrustedKey {
            kind: "ssh",
            fingerprint: mallory.fingerprint()
        })
    );
}

#[test]
fn an_allowed_signer_limited_to_other_namespaces_does_not_trust_git_signatures() {
    let fx = Fixture::new();
    let alice = SshKey::new(fx.dir.path(), "alice");
    let sha = fx.commit(&alice.git_config(), "signed");
    let files = fx.allowed_signers(&alice.allowed("alice@example.com", "namespaces=\"file\""));
    assert!(matches!(
        fx.verify(&files, &sha),
        Err(Refusal::UntrustedKey { .. })
    ));
}

#[test]
fn an_ssh_signer_outside_its_validity_window_is_refused_as_expired() {
    let fx = Fixture::new();
    let alice = SshKey::new(fx.dir.path(), "alice");
    let sha = fx.commit(&alice.git_config(), "signed");
    let files = fx.allowed_signers(&alice.allowed("alice@example.com", "valid-before=\"20200101\""));
    assert_eq!(
        fx.verify(&files, &sha),
        Err(Refusal::ExpiredKey {
            fingerprint: alice.fingerprint()
        })
    );
    let files = fx.allowed_signers(&alice.allowed("alice@example.com", "valid-after=\"20200101\""));
    assert!(
        fx.verify(&files, &sha).is_ok(),
        "a key valid since 2020 signs today"
    );
}

#[test]
fn a_tampered_ssh_signed_commit_is_refused_as_a_bad_signature() {
    let fx = Fixture::new();
    let alice = SshKey::new(fx.dir.path(), "alice");
    let sha = fx.commit(&alice.git_config(), "harmless change");
    let forged = tamper(&fx.repo(), &sha, "harmless change", "rm -rf change");
    let files = fx.allowed_signers(&alice.allowed("alice@example.com", ""));
    assert!(fx.verify(&files, &sha).is_ok());
    match fx.verify(&files, &forged) {
        Err(Refusal::BadSignature { reason }) => assert!(reason.contains(&alice.fingerprint()), "{reason}"),
        other => panic!("expected a bad signature, got {other:?}"),
    }
}

#[test]
fn a_commit_signed_by_a_trusted_openpgp_key_is_trusted_from_armored_and_binary_exports() {
    let fx = Fixture::new();
    let gpg = Gpg::new(fx.dir.path());
    let fpr = gpg.generate("Alice <alice@example.com>", "never", None);
    let sha = fx.commit(&gpg.git_config(&fpr, None), "pgp signed");
    for armored in [true, false] {
        let dir = fx.path(if armored { "armored" } else { "binary" });
        let file = gpg.export(&fpr, &dir, armored);
        let signer = fx.verify(&keys_dir(&[file], &dir), &sha).expect("trusted");
        assert_eq!(signer.kind, "openpgp");
        assert_eq!(signer.name, "Alice <alice@example.com>");
        assert_eq!(signer.fingerprint, fpr);
    }
}

#[test]
fn openpgp_refusals_name_untrusted_tampered_expired_and_revoked_keys() {
    let fx = Fixture::new();
    let gpg = Gpg::new(fx.dir.path());
    let alice = gpg.generate("Alice <alice@example.com>", "never", None);
    let mallory = gpg.generate("Mallory <mallory@example.com>", "never", None);
    let old = gpg.generate("Old <old@example.com>", "1d", Some("20200101T000000"));
    let gone = gpg.generate("Gone <gone@example.com>", "never", None);
    let keys = fx.path("keys");
    let files: Vec<PathBuf> = [&alice, &old, &gone]
        .iter()
        .map(|f| gpg.export(f, &keys, true))
        .collect();

    let by_mallory = fx.commit(&gpg.git_config(&mallory, None), "by mallory");
    let by_old = fx.commit(&gpg.git_config(&old, Some("20200101T010000")), "by old");
    let by_gone = fx.commit(&gpg.git_config(&gone, None), "by gone");
    let by_alice = fx.commit(&gpg.git_config(&alice, None), "by alice");
    let forged = tamper(&fx.repo(), &by_alice, "by alice", "by alice, and more");

    let trust = keys_dir(&files, &keys);
    assert_eq!(
        fx.verify(&trust, &by_mallory),
        Err(Refusal::UntrustedKey {
            kind: "openpgp",
            fingerprint: mallory.clone()
        })
    );
    assert_eq!(
        fx.verify(&trust, &by_old),
        Err(Refusal::ExpiredKey { fingerprint: old })
    );
    assert!(matches!(
        fx.verify(&trust, &forged),
        Err(Refusal::BadSignature { .. })
    ));
    assert!(fx.verify(&trust, &by_gone).is_ok(), "not revoked yet");

    gpg.revoke(&gone);
    gpg.export(&gone, &keys, true);
    assert_eq!(
        fx.verify(&trust, &by_gone),
        Err(Refusal::RevokedKey { fingerprint: gone })
    );
}

#[test]
fn all_walks_every_commit_since_the_last_reconciled_one_even_across_a_force_push_and_tip_only_the_tip() {
    let fx = Fixture::new();
    let first = fx.commit(&[], "one");
    let second = fx.commit(&[], "two");
    let third = fx.commit(&[], "three");
    let repo = Repository::open(fx.repo()).unwrap();
    let oid = |s: &str| Oid::from_str(s).unwrap();
    assert_eq!(
        commits_to_verify(&repo, Some(oid(&first)), oid(&third), VerifyMode::All).unwrap(),
        vec![oid(&third), oid(&second)]
    );
    assert_eq!(
        commits_to_verify(&repo, Some(oid(&first)), oid(&third), VerifyMode::Tip).unwrap(),
        vec![oid(&third)]
    );
    // A force push back onto `first`: only what the push brought is checked.
    git(&fx.repo(), &["reset", "-q", "--hard", &first]);
    let rewritten = fx.commit(&[], "rewritten");
    assert_eq!(
        commits_to_verify(&repo, Some(oid(&third)), oid(&rewritten), VerifyMode::All).unwrap(),
        vec![oid(&rewritten)]
    );
    let unknown = Oid::from_str("1234567890123456789012345678901234567890").unwrap();
    assert_eq!(
        commits_to_verify(&repo, Some(unknown), oid(&rewritten), VerifyMode::All).unwrap(),
        vec![oid(&rewritten)]
    );
}

#[test]
fn unreadable_trust_material_is_an_error_naming_the_file() {
    let fx = Fixture::new();
    let keys = fx.path("keys");
    std::fs::create_dir_all(&keys).unwrap();
    std::fs::write(keys.join("team.asc"), "not a key").unwrap();
    let err = Trust::load(&TrustFiles {
        allowed_signers: None,
        trusted_keys: Some(keys.clone()),
    })
    .unwrap_err();
    assert!(err.to_string().contains("team.asc"), "{err}");
    assert!(Trust::load(&TrustFiles::default()).is_err());
}
