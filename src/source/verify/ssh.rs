//! SSH signatures: the OpenSSH allowed_signers file and SSHSIG verification in the `git` namespace.

use std::path::Path;

use super::{Refusal, Signer, Trust, TrustError, Verdict, GIT_NAMESPACE};

/// One line of an allowed_signers file.
#[derive(Clone, Debug)]
pub(super) struct AllowedSigner {
    principals: String,
    options: SignerOptions,
    key: ssh_key::PublicKey,
}

/// The options of an allowed_signers line that kok honours.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct SignerOptions {
    /// `namespaces="git,file"`: the SSHSIG namespaces the key may sign in (all when absent).
    namespaces: Option<Vec<String>>,
    /// `valid-after=`: Unix seconds before which the key is not valid.
    valid_after: Option<i64>,
    /// `valid-before=`: Unix seconds from which the key is no longer valid.
    valid_before: Option<i64>,
}

impl SignerOptions {
    fn allows_git(&self) -> bool {
        self.namespaces
            .as_ref()
            .is_none_or(|ns| ns.iter().any(|n| n == GIT_NAMESPACE))
    }

    fn valid_at(&self, time: i64) -> bool {
        self.valid_after.is_none_or(|t| time >= t) && self.valid_before.is_none_or(|t| time < t)
    }
}

/// Parses an OpenSSH allowed_signers file.
pub(super) fn parse_allowed_signers(path: &Path, text: &str) -> Result<Vec<AllowedSigner>, TrustError> {
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
    let mut options = SignerOptions::default();
    if !is_key_type(&next) {
        options = parse_options(&next)?;
        next = fields.next().ok_or("the line has no key after its options")?;
    }
    let base64 = fields.next().ok_or(format!("the {next} key has no key data"))?;
    let key = ssh_key::PublicKey::from_openssh(&format!("{next} {base64}"))
        .map_err(|e| format!("the {next} key cannot be read: {e}"))?;
    Ok(AllowedSigner {
        principals,
        options,
        key,
    })
}

fn is_key_type(field: &str) -> bool {
    ["ssh-", "ecdsa-sha2-", "sk-ssh-", "sk-ecdsa-"]
        .iter()
        .any(|p| field.starts_with(p))
}

fn parse_options(field: &str) -> Result<SignerOptions, String> {
    let mut out = SignerOptions::default();
    for option in split_outside_quotes(field, ',') {
        let (name, value) = match option.split_once('=') {
            Some((n, v)) => (n.to_ascii_lowercase(), Some(v.trim_matches('"').to_string())),
            None => (option.to_ascii_lowercase(), None),
        };
        match (name.as_str(), value) {
            ("namespaces", Some(v)) => {
                out.namespaces = Some(v.split(',').map(|s| s.trim().to_string()).collect())
            }
            ("valid-after", Some(v)) => out.valid_after = Some(parse_time(&v)?),
            ("valid-before", Some(v)) => out.valid_before = Some(parse_time(&v)?),
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

/// Verifies an armored SSHSIG over `payload`; allowed_signers windows are checked at `committed`.
pub(super) fn verify(armored: &str, payload: &[u8], trust: &Trust, committed: i64) -> Verdict {
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
    let for_git: Vec<&&AllowedSigner> = entries.iter().filter(|s| s.options.allows_git()).collect();
    if for_git.is_empty() {
        return Err(untrusted());
    }
    let signer = for_git
        .iter()
        .find(|s| s.options.valid_at(committed))
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
            signers[1].options.namespaces,
            Some(vec!["git".to_string(), "file".to_string()])
        );
        assert_eq!(signers[1].options.valid_after, Some(1_577_836_800));
        assert_eq!(signers[1].options.valid_before, Some(1_893_456_000));
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
}
