//! OpenPGP signatures: trusted public keys from a directory, detached-signature verification, and
//! the expiry and revocation of the signing key or subkey.

use std::path::{Path, PathBuf};

use pgp::composed::{Deserializable, DetachedSignature, SignedPublicKey};
use pgp::types::KeyDetails as _;

use super::{read_error, Refusal, Signer, Trust, TrustError, Verdict};

/// Verifies an armored detached signature over `payload`; key expiry and revocation are checked at `now`.
pub(super) fn verify(armored: &str, payload: &[u8], trust: &Trust, now: i64) -> Verdict {
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
    let newest = bindings
        .iter()
        .filter(|s| s.created().is_some())
        .max_by_key(|s| s.created());
    if let Some(flags) = newest.map(|s| s.key_flags()) {
        let any_flag = flags.certify()
            || flags.sign()
            || flags.encrypt_comms()
            || flags.encrypt_storage()
            || flags.authentication();
        // Keys that predate key flags carry none; a subkey bound for other uses must not sign.
        if any_flag && !flags.sign() {
            return Err(Refusal::BadSignature {
                reason: format!("subkey {fingerprint} is not bound for signing"),
            });
        }
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
pub(super) fn read_dir(dir: &Path) -> Result<Vec<SignedPublicKey>, TrustError> {
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
