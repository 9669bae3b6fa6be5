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

use std::fmt;
use std::path::{Path, PathBuf};

use git2::{Oid, Repository};
use pgp::composed::{Deserializable, DetachedSignature, SignedPublicKey};
use pgp::types::KeyDetails as _;

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
}

/// One line of an allowed_signers file.
#[derive(Clone, Debug)]
struct AllowedSigner {
    principals: String,
    namespaces: Option<Vec<String>>,
    valid_after: Option<i64>,
    valid_before: Option<i64>,
    key: ssh_key::PublicKey,
}

/// The keys commits may be signed with.
#[derive(Clone, Debug, Default)]
pub struct Trust {
    ssh: Vec<AllowedSigner>,
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
            trust.ssh = parse_allowed_signers(path, &text)?;
        }
        if let Some(dir) = &files.trusted_keys {
            trust.pgp = read_pgp_dir(dir)?;
        }
        Ok(trust)
    }

    /// How many SSH signers and OpenPGP keys are trusted.
    pub fn counts(&self) -> (usize, usize) {
        (self.ssh.len(), self.pgp.len())
    }
}

fn read_error(path: &Path, e: std::io::Error) -> TrustError {
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
        verify_ssh(signature, &payload, trust, committed)
    } else if signature.starts_with("-----BEGIN PGP SIGNATURE-----") {
        verify_pgp(signature, &payload, trust, now)
    } else {
        Err(Refusal::BadSignature {
            reason: "the signature is neither SSH nor OpenPGP (x509 signatures are not supported)".into(),
        })
    })
}

fn verify_ssh(armored: &str, payload: &[u8], trust: &Trust, committed: i64) -> Verdict {
    let sig = ssh_key::SshSig::from_pem(armored).map_err(|e| Refusal::BadSignature {
        reason: format!("unreadable SSH signature: {e}"),
    })?;
    let fingerprint = sig.public_key().fingerprint(ssh_key::HashAlg::Sha256).to_string();
    let untrusted = || Refusal::UntrustedKey {
        kind: "ssh",
        fingerprint: fingerprint.clone(),
    };
    let entries: Vec<&AllowedSigner> = trust
        .ssh
        .iter()
        .filter(|s| s.key.key_data() == sig.public_key())
        .collect();
    if entries.is_empty() {
        return Err(untrusted());
    }
    if sig.namespace() != GIT_NAMESPACE {
        return Err(Refusal::BadSignature {
            reason: format!("SSH signature namespace is {:?}, not \"git\"", sig.namespace()),
        });
    }
    let for_git: Vec<&&AllowedSigner> = entries
        .iter()
        .filter(|s| {
            s.namespaces
                .as_ref()
                .is_none_or(|ns| ns.iter().any(|n| n == GIT_NAMESPACE))
        })
        .collect();
    if for_git.is_empty() {
        return Err(untrusted());
    }
    let signer = for_git
        .iter()
        .find(|s| {
            s.valid_after.is_none_or(|t| committed >= t) && s.valid_before.is_none_or(|t| committed < t)
        })
        .ok_or(Refusal::ExpiredKey {
            fingerprint: fingerprint.clone(),
        })?;
    signer
        .key
        .verify(GIT_NAMESPACE, payload, &sig)
        .map_err(|e| Refusal::BadSignature {
            reason: format!("SSH signature by {fingerprint} does not match the commit: {e}"),
        })?;
    Ok(Signer {
        kind: "ssh",
        name: signer.principals.clone(),
        fingerprint,
    })
}

fn verify_pgp(armored: &str, payload: &[u8], trust: &Trust, now: i64) -> Verdict {
    let (sig, _) =
        DetachedSignature::from_armor_single(armored.as_bytes()).map_err(|e| Refusal::BadSignature {
            reason: format!("unreadable OpenPGP signature: {e}"),
        })?;
    let fingerprints: Vec<String> = sig
        .signature
        .issuer_fingerprint()
        .iter()
        .map(|f| format!("{f:X}"))
        .collect();
    let key_ids: Vec<String> = sig
        .signature
        .issuer_key_id()
        .iter()
        .map(|k| hex::encode_upper(k.as_ref()))
        .collect();
    let named = |fp: String, id: String| fingerprints.contains(&fp) || key_ids.contains(&id);
    for key in &trust.pgp {
        let primary_fp = format!("{:X}", key.fingerprint());
        let name = key
            .details
            .users
            .first()
            .map(|u| String::from_utf8_lossy(u.id.id()).into_owned())
            .unwrap_or_else(|| primary_fp.clone());
        let signer = |fingerprint: String| Signer {
            kind: "openpgp",
            name: name.clone(),
            fingerprint,
        };
        if named(
            primary_fp.clone(),
            hex::encode_upper(key.legacy_key_id().as_ref()),
        ) {
            check_pgp(&sig, payload, key, &primary_fp)?;
            check_primary_state(key, &primary_fp, now)?;
            return Ok(signer(primary_fp));
        }
        for sub in &key.public_subkeys {
            let sub_fp = format!("{:X}", sub.key.fingerprint());
            if named(
                sub_fp.clone(),
                hex::encode_upper(sub.key.legacy_key_id().as_ref()),
            ) {
                check_pgp(&sig, payload, &sub.key, &sub_fp)?;
                check_primary_state(key, &primary_fp, now)?;
                check_subkey_state(key, sub, &sub_fp, now)?;
                return Ok(signer(sub_fp));
            }
        }
    }
    Err(Refusal::UntrustedKey {
        kind: "openpgp",
        fingerprint: fingerprints
            .into_iter()
            .next()
            .or_else(|| key_ids.into_iter().next().map(|id| format!("with key id {id}")))
            .unwrap_or_else(|| "(the signature names no issuer)".into()),
    })
}

fn check_pgp(
    sig: &DetachedSignature,
    payload: &[u8],
    key: &impl pgp::types::VerifyingKey,
    fingerprint: &str,
) -> Result<(), Refusal> {
    sig.verify(key, payload).map_err(|e| Refusal::BadSignature {
        reason: format!("OpenPGP signature by {fingerprint} does not match the commit: {e}"),
    })
}

/// Expiry as Unix seconds from the newest self-signature that sets one (`None`: never expires).
fn expiry(created: u32, sigs: &[&pgp::packet::Signature]) -> Option<i64> {
    let newest = sigs
        .iter()
        .filter(|s| s.created().is_some())
        .max_by_key(|s| s.created())?;
    let lifetime = newest
        .key_expiration_time()
        .map(|d| d.as_secs())
        .filter(|secs| *secs > 0)?;
    Some(i64::from(created) + i64::from(lifetime))
}

fn check_primary_state(key: &SignedPublicKey, fingerprint: &str, now: i64) -> Result<(), Refusal> {
    let primary = &key.primary_key;
    if key
        .details
        .revocation_signatures
        .iter()
        .any(|s| s.verify_key(primary).is_ok())
    {
        return Err(Refusal::RevokedKey {
            fingerprint: fingerprint.to_string(),
        });
    }
    let self_sigs: Vec<&pgp::packet::Signature> = key
        .details
        .users
        .iter()
        .flat_map(|u| {
            u.signatures.iter().filter(|s| {
                s.verify_certification(primary, pgp::types::Tag::UserId, &u.id)
                    .is_ok()
            })
        })
        .chain(
            key.details
                .direct_signatures
                .iter()
                .filter(|s| s.verify_key(primary).is_ok()),
        )
        .collect();
    match expiry(primary.created_at().as_secs(), &self_sigs) {
        Some(end) if end <= now => Err(Refusal::ExpiredKey {
            fingerprint: fingerprint.to_string(),
        }),
        _ => Ok(()),
    }
}

fn check_subkey_state(
    key: &SignedPublicKey,
    sub: &pgp::composed::SignedPublicSubKey,
    fingerprint: &str,
    now: i64,
) -> Result<(), Refusal> {
    let valid: Vec<&pgp::packet::Signature> = sub
        .signatures
        .iter()
        .filter(|s| s.verify_subkey_binding(&key.primary_key, &sub.key).is_ok())
        .collect();
    let (revocations, bindings): (Vec<_>, Vec<_>) = valid
        .into_iter()
        .partition(|s| s.typ() == Some(pgp::packet::SignatureType::SubkeyRevocation));
    if !revocations.is_empty() {
        return Err(Refusal::RevokedKey {
            fingerprint: fingerprint.to_string(),
        });
    }
    match expiry(sub.key.created_at().as_secs(), &bindings) {
        Some(end) if end <= now => Err(Refusal::ExpiredKey {
            fingerprint: fingerprint.to_string(),
        }),
        _ => Ok(()),
    }
}

/// Every file of `dir` (not recursing, skipping dot files as a mounted ConfigMap's `..data` links)
/// read as OpenPGP public keys.
fn read_pgp_dir(dir: &Path) -> Result<Vec<SignedPublicKey>, TrustError> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| read_error(dir, e))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                && p.is_file()
        })
        .collect();
    paths.sort();
    let mut keys = Vec::new();
    for path in paths {
        let bytes = std::fs::read(&path).map_err(|e| read_error(&path, e))?;
        let pgp_error = |message: String| TrustError::PgpKey {
            path: path.clone(),
            message,
        };
        let (parsed, _) =
            SignedPublicKey::from_reader_many(&bytes[..]).map_err(|e| pgp_error(e.to_string()))?;
        let before = keys.len();
        for key in parsed {
            keys.push(key.map_err(|e| pgp_error(e.to_string()))?);
        }
        if keys.len() == before {
            return Err(pgp_error("the file holds no key".into()));
        }
    }
    Ok(keys)
}

/// Parses an OpenSSH allowed_signers file.
fn parse_allowed_signers(path: &Path, text: &str) -> Result<Vec<AllowedSigner>, TrustError> {
    let mut signers = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let error = |message: String| TrustError::AllowedSigners {
            path: path.to_path_buf(),
            line: i + 1,
            message,
        };
        signers.push(parse_signer_line(line).map_err(error)?);
    }
    Ok(signers)
}

fn parse_signer_line(line: &str) -> Result<AllowedSigner, String> {
    let fields = split_fields(line)?;
    let mut fields = fields.into_iter();
    let principals = fields
        .next()
        .ok_or("the line has no principals")?
        .replace('"', "");
    let mut next = fields.next().ok_or("the line has no key")?;
    let mut signer_options = (None, None, None);
    if !is_key_type(&next) {
        signer_options = parse_options(&next)?;
        next = fields.next().ok_or("the line has no key after its options")?;
    }
    let base64 = fields.next().ok_or(format!("the {next} key has no key data"))?;
    let key = ssh_key::PublicKey::from_openssh(&format!("{next} {base64}"))
        .map_err(|e| format!("the {next} key cannot be read: {e}"))?;
    let (namespaces, valid_after, valid_before) = signer_options;
    Ok(AllowedSigner {
        principals,
        namespaces,
        valid_after,
        valid_before,
        key,
    })
}

fn is_key_type(field: &str) -> bool {
    ["ssh-", "ecdsa-sha2-", "sk-ssh-", "sk-ecdsa-"]
        .iter()
        .any(|p| field.starts_with(p))
}

type SignerOptions = (Option<Vec<String>>, Option<i64>, Option<i64>);

fn parse_options(field: &str) -> Result<SignerOptions, String> {
    let mut out: SignerOptions = (None, None, None);
    for option in split_outside_quotes(field, ',') {
        let (name, value) = match option.split_once('=') {
            Some((n, v)) => (n.to_ascii_lowercase(), Some(v.trim_matches('"').to_string())),
            None => (option.to_ascii_lowercase(), None),
        };
        match (name.as_str(), value) {
            ("namespaces", Some(v)) => out.0 = Some(v.split(',').map(|s| s.trim().to_string()).collect()),
            ("valid-after", Some(v)) => out.1 = Some(parse_time(&v)?),
            ("valid-before", Some(v)) => out.2 = Some(parse_time(&v)?),
            ("cert-authority", _) => {
                return Err("cert-authority entries are not supported; list the signers' keys".into())
            }
            (other, _) => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(out)
}

/// `YYYYMMDD[HHMM[SS]][Z]` as Unix seconds, read as UTC.
fn parse_time(text: &str) -> Result<i64, String> {
    let digits = text.strip_suffix('Z').unwrap_or(text);
    let bad = || format!("{text:?} is not a time; write YYYYMMDD, YYYYMMDDHHMM or YYYYMMDDHHMMSS");
    if !digits.bytes().all(|b| b.is_ascii_digit()) || ![8, 12, 14].contains(&digits.len()) {
        return Err(bad());
    }
    let part =
        |range: std::ops::Range<usize>| digits.get(range).and_then(|s| s.parse::<i16>().ok()).unwrap_or(0);
    let date = jiff::civil::DateTime::new(
        part(0..4),
        part(4..6) as i8,
        part(6..8) as i8,
        part(8..10) as i8,
        part(10..12) as i8,
        part(12..14) as i8,
        0,
    )
    .map_err(|_| bad())?;
    date.to_zoned(jiff::tz::TimeZone::UTC)
        .map(|z| z.timestamp().as_second())
        .map_err(|_| bad())
}

/// Splits at spaces outside double quotes.
fn split_fields(line: &str) -> Result<Vec<String>, String> {
    let fields = split_outside_quotes(line, ' ');
    if line.matches('"').count() % 2 == 1 {
        return Err("a double quote is not closed".into());
    }
    Ok(fields.into_iter().filter(|f| !f.is_empty()).collect())
}

fn split_outside_quotes(text: &str, at: char) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut quoted = false;
    for c in text.chars() {
        if c == '"' {
            quoted = !quoted;
        }
        if c == at && !quoted || (at == ' ' && c == '\t' && !quoted) {
            out.push(String::new());
        } else if let Some(last) = out.last_mut() {
            last.push(c);
        }
    }
    out
}

/// The commits `tip` and, in [`VerifyMode::All`], every commit reachable from it but not from
/// `since`, newest first.
pub fn commits_to_verify(
    repo: &Repository,
    since: Option<Oid>,
    tip: Oid,
    mode: VerifyMode,
) -> Result<Vec<Oid>, git2::Error> {
    if mode == VerifyMode::Tip || since.is_none() {
        return Ok(vec![tip]);
    }
    let mut walk = repo.revwalk()?;
    walk.set_sorting(git2::Sort::TOPOLOGICAL)?;
    walk.push(tip)?;
    if let Some(base) = since {
        // A base that is gone from the cache (a force push after a restart) hides nothing.
        if repo.find_commit(base).is_ok() {
            walk.hide(base)?;
        }
    }
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

    /// The `kok/sync` description of a refused tip: names every untrusted commit and, for those below
    /// the tip, that the refusal lasts until they leave the branch.
    pub fn describe(&self, tip: Oid) -> String {
        let parts: Vec<String> = self
            .refused
            .iter()
            .map(|(commit, refusal)| {
                let short = &commit.to_string()[..12];
                if *commit == tip {
                    format!("not reconciled: commit {short}: {refusal}")
                } else {
                    format!("not reconciled until commit {short} leaves the branch (force push): {refusal}")
                }
            })
            .collect();
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

impl fmt::Display for CommitSignature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let short = self.commit.get(..12).unwrap_or(&self.commit);
        match self.trusted {
            true => write!(f, "{short}: {}", self.state),
            false => write!(f, "{short}: not trusted: {}", self.state),
        }
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

    const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";

    #[test]
    fn allowed_signers_lines_with_options_and_comments_parse() {
        let text = format!(
            "# team\n\nalice@example.com {KEY} laptop\n\"bob@example.com,carol@*\" namespaces=\"git,file\",valid-after=\"20200101\",valid-before=\"20300101Z\" {KEY}\n"
        );
        let signers = parse_allowed_signers(Path::new("signers"), &text).unwrap();
        assert_eq!(signers.len(), 2);
        assert_eq!(signers[0].principals, "alice@example.com");
        assert_eq!(signers[1].principals, "bob@example.com,carol@*");
        assert_eq!(
            signers[1].namespaces,
            Some(vec!["git".to_string(), "file".to_string()])
        );
        assert_eq!(signers[1].valid_after, Some(1_577_836_800));
        assert_eq!(signers[1].valid_before, Some(1_893_456_000));
    }

    #[test]
    fn a_bad_allowed_signers_line_names_the_file_and_line() {
        let text = format!("alice@example.com {KEY}\nbob@example.com valid-after=\"2020\" {KEY}\n");
        let err = parse_allowed_signers(Path::new("/etc/kok/allowed_signers"), &text).unwrap_err();
        let message = err.to_string();
        assert!(
            message.starts_with("/etc/kok/allowed_signers:2: \"2020\" is not a time"),
            "{message}"
        );
        let err =
            parse_allowed_signers(Path::new("f"), "carol@example.com ssh-ed25519 notbase64\n").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("f:1: the ssh-ed25519 key cannot be read"),
            "{err}"
        );
        let err = parse_allowed_signers(Path::new("f"), "dave@example.com\n").unwrap_err();
        assert!(err.to_string().contains("f:1: the line has no key"), "{err}");
    }

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
    }
}
