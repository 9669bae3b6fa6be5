//! Commit signature verification: which commits carry a valid signature by a trusted key.
//!
//! Trust comes from the local file system only (a mounted ConfigMap or Secret in a cluster), never
//! from the repository being verified:
//! - an OpenSSH `allowed_signers` file (`principals [options] keytype key [comment]`, with the
//!   `namespaces=`, `valid-after=` and `valid-before=` options; times are read as UTC);
//! - a directory of OpenPGP public keys, armored or binary, one or more keys per file.
//!
//! git signs the commit object without its `gpgsig` header; [`git2::Repository::extract_signature`]
//! splits a commit into that payload and the signature. SSH signatures are SSHSIG over the payload in
//! the `git` namespace; OpenPGP signatures are detached signatures over it. A signature passes when
//! it verifies, its key is trusted, and the key was neither expired nor revoked: an allowed signer's
//! validity window is checked at the committer time (as `git verify-commit` does), an OpenPGP key's
//! expiry and revocation at the time of verification.

mod openpgp;
mod ssh;

use std::fmt;
use std::path::{Path, PathBuf};

use git2::{Oid, Repository};
use pgp::composed::SignedPublicKey;

/// How much of the history must be signed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum VerifyMode {
    /// The commit about to be reconciled.
    Tip,
    /// Every commit between the last reconciled commit and the new tip.
    All,
}

impl VerifyMode {
    /// `tip` or `all`.
    pub fn as_str(self) -> &'static str {
        match self {
            VerifyMode::Tip => "tip",
            VerifyMode::All => "all",
        }
    }
}

/// Where the trust material lives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustFiles {
    /// An OpenSSH `allowed_signers` file.
    pub allowed_signers: Option<PathBuf>,
    /// A directory of OpenPGP public keys.
    pub trusted_keys: Option<PathBuf>,
}

impl TrustFiles {
    /// Refuses trust material inside `repo_dir`, the local repository whose commits it verifies.
    pub fn check_outside(&self, repo_dir: &Path) -> Result<(), TrustError> {
        let Ok(repo) = repo_dir.canonicalize() else {
            return Ok(());
        };
        for path in self.allowed_signers.iter().chain(&self.trusted_keys) {
            if path.canonicalize().is_ok_and(|p| p.starts_with(&repo)) {
                return Err(TrustError::InsideRepository {
                    path: path.clone(),
                    repo,
                });
            }
        }
        Ok(())
    }
}

/// What `kok run` verifies before reconciling a commit. The trust files are read again at every
/// verification, so a rotated ConfigMap takes effect without a restart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verification {
    /// Which commits must be signed.
    pub mode: VerifyMode,
    /// The trust material.
    pub files: TrustFiles,
}

/// The SSHSIG namespace git signs commits in.
pub const GIT_NAMESPACE: &str = "git";

/// Failures to read the trust material.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// A file or directory could not be read.
    #[error("could not read the trust material {path}: {message}")]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        message: String,
    },
    /// A line of the allowed_signers file is malformed.
    #[error("{path}:{line}: {message}; see ALLOWED SIGNERS in ssh-keygen(1)")]
    AllowedSigners {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A file of the trusted keys directory holds no OpenPGP public key.
    #[error("{path}: not an OpenPGP public key (armored or binary): {message}; export it with `gpg --export --armor KEYID`")]
    PgpKey {
        /// The file.
        path: PathBuf,
        /// rPGP's message.
        message: String,
    },
    /// Neither file nor directory was given.
    #[error("--verify-signatures needs --allowed-signers FILE or --trusted-keys DIR (or both)")]
    Nothing,
    /// The trust material lives in the repository it would vouch for.
    #[error(
        "the trust material {path} is inside the repository {repo} whose commits it verifies, so whoever \
         can push could trust their own key; keep it outside (a mounted ConfigMap or a file of the CI runner)"
    )]
    InsideRepository {
        /// The trust file or directory.
        path: PathBuf,
        /// The repository's directory.
        repo: PathBuf,
    },
}

/// The keys commits may be signed with.
#[derive(Clone, Debug, Default)]
pub struct Trust {
    ssh: Vec<ssh::AllowedSigner>,
    pgp: Vec<SignedPublicKey>,
}

impl Trust {
    /// Reads the trust material; at least one of the two must be given.
    pub fn load(files: &TrustFiles) -> Result<Trust, TrustError> {
        if files.allowed_signers.is_none() && files.trusted_keys.is_none() {
            return Err(TrustError::Nothing);
        }
        let mut trust = Trust::default();
        if let Some(path) = &files.allowed_signers {
            let text = std::fs::read_to_string(path).map_err(|e| read_error(path, e))?;
            trust.ssh = ssh::parse_allowed_signers(path, &text)?;
        }
        if let Some(dir) = &files.trusted_keys {
            trust.pgp = openpgp::read_dir(dir)?;
        }
        Ok(trust)
    }

    /// How many SSH signers and OpenPGP keys are trusted.
    pub fn counts(&self) -> (usize, usize) {
        (self.ssh.len(), self.pgp.len())
    }
}

pub(super) fn read_error(path: &Path, e: std::io::Error) -> TrustError {
    TrustError::Read {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Who signed a commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signer {
    /// `ssh` or `openpgp`.
    pub kind: &'static str,
    /// The allowed_signers principals, or the key's first user id.
    pub name: String,
    /// `SHA256:…` for SSH keys, the hex fingerprint for OpenPGP keys.
    pub fingerprint: String,
}

impl fmt::Display for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({} key {})", self.name, self.kind, self.fingerprint)
    }
}

/// Why a commit is not trusted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The commit carries no signature.
    Unsigned,
    /// Signed by a key that is not in the trust material.
    UntrustedKey {
        /// `ssh` or `openpgp`.
        kind: &'static str,
        /// The key's fingerprint (or OpenPGP key id when the signature names only that).
        fingerprint: String,
    },
    /// The signature does not verify (tampered commit, wrong namespace, unknown format).
    BadSignature {
        /// What failed.
        reason: String,
    },
    /// The key had expired (or was outside its allowed_signers validity window).
    ExpiredKey {
        /// The key's fingerprint.
        fingerprint: String,
    },
    /// The key has been revoked.
    RevokedKey {
        /// The key's fingerprint.
        fingerprint: String,
    },
}

impl Refusal {
    /// A short label for metrics: `unsigned`, `untrusted_key`, `bad_signature`, `expired_key`, `revoked_key`.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Unsigned => "unsigned",
            Refusal::UntrustedKey { .. } => "untrusted_key",
            Refusal::BadSignature { .. } => "bad_signature",
            Refusal::ExpiredKey { .. } => "expired_key",
            Refusal::RevokedKey { .. } => "revoked_key",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Unsigned => write!(f, "unsigned"),
            Refusal::UntrustedKey { kind, fingerprint } => {
                write!(f, "signed by an untrusted {kind} key {fingerprint}")
            }
            Refusal::BadSignature { reason } => write!(f, "bad signature: {reason}"),
            Refusal::ExpiredKey { fingerprint } => write!(f, "signed by the expired key {fingerprint}"),
            Refusal::RevokedKey { fingerprint } => write!(f, "signed by the revoked key {fingerprint}"),
        }
    }
}

/// The signature state of one commit.
pub type Verdict = Result<Signer, Refusal>;

/// Verifies the signature of `commit` against `trust`; `now` is Unix seconds (OpenPGP expiry).
pub fn verify_commit(
    repo: &Repository,
    commit: Oid,
    trust: &Trust,
    now: i64,
) -> Result<Verdict, git2::Error> {
    let (signature, payload) = match repo.extract_signature(&commit, None) {
        Ok(parts) => parts,
        Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(Err(Refusal::Unsigned)),
        Err(e) => return Err(e),
    };
    let committed = repo.find_commit(commit)?.committer().when().seconds();
    let signature = signature.as_str().unwrap_or_default().trim_start();
    Ok(if signature.starts_with("-----BEGIN SSH SIGNATURE-----") {
        ssh::verify(signature, &payload, trust, committed)
    } else if signature.starts_with("-----BEGIN PGP SIGNATURE-----") {
        openpgp::verify(signature, &payload, trust, now)
    } else {
        Err(Refusal::BadSignature {
            reason: "the signature is neither SSH nor OpenPGP (x509 signatures are not supported)".into(),
        })
    })
}

/// The commits `tip` and, in [`VerifyMode::All`], every commit reachable from it but not from
/// `since`, newest first. A force push keeps `since` in the cache, so the range is what the push
/// brought. Without a `since` the cache holds (nothing reconciled yet, or a force push that a
/// fresh cache never saw) there is no range, and the tip alone is checked.
pub fn commits_to_verify(
    repo: &Repository,
    since: Option<Oid>,
    tip: Oid,
    mode: VerifyMode,
) -> Result<Vec<Oid>, git2::Error> {
    let base = match since {
        Some(base) if mode == VerifyMode::All => base,
        _ => return Ok(vec![tip]),
    };
    if repo.find_commit(base).is_err() {
        tracing::warn!(%base, %tip, "the last reconciled commit is not in the fetched history; checking the tip alone");
        return Ok(vec![tip]);
    }
    let mut walk = repo.revwalk()?;
    walk.set_sorting(git2::Sort::TOPOLOGICAL)?;
    walk.push(tip)?;
    walk.hide(base)?;
    walk.collect()
}

/// The first refused commit of `commits` (newest first), as `(commit, refusal)`, or the tip's signer.
pub fn verify_range(
    repo: &Repository,
    commits: &[Oid],
    trust: &Trust,
    now: i64,
) -> Result<RangeVerdict, git2::Error> {
    let mut refused = Vec::new();
    let mut tip_signer = None;
    for (i, commit) in commits.iter().enumerate() {
        match verify_commit(repo, *commit, trust, now)? {
            Ok(signer) if i == 0 => tip_signer = Some(signer),
            Ok(_) => {}
            Err(refusal) => refused.push((*commit, refusal)),
        }
    }
    Ok(RangeVerdict { tip_signer, refused })
}

/// The outcome of verifying a range of commits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeVerdict {
    /// Who signed the tip, when it is trusted.
    pub tip_signer: Option<Signer>,
    /// Every refused commit with its reason, newest first.
    pub refused: Vec<(Oid, Refusal)>,
}

impl RangeVerdict {
    /// Whether every commit is trusted.
    pub fn trusted(&self) -> bool {
        self.refused.is_empty()
    }

    /// The `kok/sync` description of a refused tip: the tip's own refusal, and the newest refused
    /// commit below it (with how many more there are), which is refused until it leaves the branch.
    pub fn describe(&self, tip: Oid) -> String {
        let short = |commit: &Oid| commit.to_string()[..12].to_string();
        let mut parts = Vec::new();
        if let Some((commit, refusal)) = self.refused.iter().find(|(c, _)| *c == tip) {
            parts.push(format!("not reconciled: commit {}: {refusal}", short(commit)));
        }
        let below: Vec<&(Oid, Refusal)> = self.refused.iter().filter(|(c, _)| *c != tip).collect();
        if let Some((commit, refusal)) = below.first() {
            let mut text = format!(
                "not reconciled until commit {} leaves the branch (force push): {refusal}",
                short(commit)
            );
            if below.len() > 1 {
                text.push_str(&format!(" (and {} more untrusted commits)", below.len() - 1));
            }
            parts.push(text);
        }
        parts.join("; ")
    }
}

/// The signature state of one commit, for `kok validate`, `kok plan` and `kok history`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CommitSignature {
    /// Full commit id.
    pub commit: String,
    /// Whether it carries a signature at all.
    pub signed: bool,
    /// Whether a trusted key signed it.
    pub trusted: bool,
    /// `signed by alice@example.com (ssh key SHA256:…)`, or why it is not trusted.
    pub state: String,
}

impl CommitSignature {
    /// The commit's first 12 hex digits.
    pub fn short(&self) -> &str {
        self.commit.get(..12).unwrap_or(&self.commit)
    }
}

impl fmt::Display for CommitSignature {
    /// `0123456789ab: signed by alice@example.com (ssh key SHA256:…)` or `0123456789ab: unsigned`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.short(), self.state)
    }
}

/// The signature state of each of `commits`.
pub fn signature_states(
    repo: &Repository,
    commits: &[Oid],
    trust: &Trust,
    now: i64,
) -> Result<Vec<CommitSignature>, git2::Error> {
    commits
        .iter()
        .map(|commit| {
            let verdict = verify_commit(repo, *commit, trust, now)?;
            Ok(CommitSignature {
                commit: commit.to_string(),
                signed: verdict != Err(Refusal::Unsigned),
                trusted: verdict.is_ok(),
                state: match verdict {
                    Ok(signer) => format!("signed by {signer}"),
                    Err(refusal) => refusal.to_string(),
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_their_reason_and_key() {
        let refusal = Refusal::UntrustedKey {
            kind: "ssh",
            fingerprint: "SHA256:abc".into(),
        };
        assert_eq!(refusal.to_string(), "signed by an untrusted ssh key SHA256:abc");
        assert_eq!(refusal.reason(), "untrusted_key");
    }

    #[test]
    fn a_refused_range_names_the_untrusted_commit_below_the_tip() {
        let tip = Oid::from_str("1111111111111111111111111111111111111111").unwrap();
        let bad = Oid::from_str("2222222222222222222222222222222222222222").unwrap();
        let verdict = RangeVerdict {
            tip_signer: None,
            refused: vec![(bad, Refusal::Unsigned)],
        };
        let text = verdict.describe(tip);
        assert_eq!(
            text,
            "not reconciled until commit 222222222222 leaves the branch (force push): unsigned"
        );
        let older = Oid::from_str("3333333333333333333333333333333333333333").unwrap();
        let verdict = RangeVerdict {
            tip_signer: None,
            refused: vec![
                (tip, Refusal::Unsigned),
                (bad, Refusal::Unsigned),
                (older, Refusal::Unsigned),
            ],
        };
        assert_eq!(
            verdict.describe(tip),
            "not reconciled: commit 111111111111: unsigned; not reconciled until commit 222222222222 \
             leaves the branch (force push): unsigned (and 1 more untrusted commits)"
        );
    }
}
