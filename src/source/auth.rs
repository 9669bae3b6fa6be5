//! Credentials and host-key checking for libgit2: callbacks that remember what they tried, known_hosts.

use std::path::Path;
use std::sync::{Arc, Mutex};

use git2::cert::Cert;
use git2::{CertificateCheckStatus, Cred, CredentialType, RemoteCallbacks};

use super::url::RemoteUrl;
use super::{Credentials, SourceError};

/// What the callbacks saw; read after a failed operation to build a precise error.
#[derive(Debug, Default)]
pub(crate) struct AuthLog {
    /// Methods offered to the server, in order (no secret in them).
    pub tried: Vec<String>,
    /// A host-key refusal, when that is why the connection failed.
    pub host_key: Option<SourceError>,
    /// A credential file that could not be read.
    pub read_error: Option<SourceError>,
}

/// Shared handle on an [`AuthLog`].
pub(crate) type SharedLog = Arc<Mutex<AuthLog>>;

fn record(log: &SharedLog, f: impl FnOnce(&mut AuthLog)) {
    if let Ok(mut guard) = log.lock() {
        f(&mut guard);
    }
}

/// Reads a credential file, trimming the trailing newline.
fn read_secret(what: &'static str, path: &Path) -> Result<String, SourceError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim_end_matches(['\r', '\n']).to_string())
        .map_err(|e| SourceError::ReadCredential {
            what,
            path: path.to_path_buf(),
            message: e.kind().to_string(),
        })
}

/// Installs the credential and certificate callbacks on `callbacks`.
pub(crate) fn install<'a>(
    callbacks: &mut RemoteCallbacks<'a>,
    remote: &RemoteUrl,
    credentials: &Credentials,
    log: SharedLog,
) {
    let mut attempts = Attempts {
        creds: credentials.clone(),
        log: log.clone(),
        tried_username: false,
        tried_key: false,
        tried_userpass: false,
    };
    callbacks.credentials(move |_url, username_from_url, allowed| attempts.next(username_from_url, allowed));

    let (host, port) = match remote {
        RemoteUrl::Ssh { host, port, .. } => (host.clone(), *port),
        _ => (String::new(), 22),
    };
    let known_hosts = credentials.known_hosts_file.clone();
    callbacks.certificate_check(move |cert: &Cert<'_>, hostname: &str| {
        let Some(hostkey) = cert.as_hostkey() else {
            // X.509 (https): libgit2's own verification against the system trust store decides.
            return Ok(CertificateCheckStatus::CertificatePassthrough);
        };
        let host = if host.is_empty() {
            hostname.to_string()
        } else {
            host.clone()
        };
        let key = hostkey.hostkey().unwrap_or_default();
        match check_known_host(known_hosts.as_deref(), &host, port, key) {
            Ok(()) => Ok(CertificateCheckStatus::CertificateOk),
            Err(e) => {
                let message = e.to_string();
                record(&log, |l| l.host_key = Some(e));
                Err(git2::Error::from_str(&message))
            }
        }
    });
}

/// The credentials offered to a server, each method once: libgit2 asks again after every refusal, for
/// as long as it is given something.
struct Attempts {
    creds: Credentials,
    log: SharedLog,
    tried_username: bool,
    tried_key: bool,
    tried_userpass: bool,
}

impl Attempts {
    /// The next credential to offer for one of the `allowed` methods, or the error that ends the tries.
    fn next(
        &mut self,
        username_from_url: Option<&str>,
        allowed: CredentialType,
    ) -> Result<Cred, git2::Error> {
        if allowed.contains(CredentialType::USERNAME) && !self.tried_username {
            self.tried_username = true;
            let user = self.username_file()?.unwrap_or_else(|| "git".to_string());
            record(&self.log, |l| l.tried.push(format!("username {user:?}")));
            return Cred::username(&user);
        }
        if allowed.contains(CredentialType::SSH_KEY) && !self.tried_key {
            self.tried_key = true;
            if let Some(key) = self.creds.ssh_key_file.clone() {
                return self.ssh_key(&key, username_from_url);
            }
        }
        if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) && !self.tried_userpass {
            self.tried_userpass = true;
            if let Some(cred) = self.user_pass(username_from_url)? {
                return Ok(cred);
            }
        }
        record(&self.log, |l| {
            if l.tried.is_empty() {
                l.tried.push(format!(
                    "nothing (no credential configured for {})",
                    describe(allowed)
                ));
            }
        });
        Err(git2::Error::from_str("no more credentials to try"))
    }

    /// The ssh key `key`, as the URL's user, else the username file's, else `git`.
    fn ssh_key(&self, key: &Path, username_from_url: Option<&str>) -> Result<Cred, git2::Error> {
        let user = match username_from_url {
            Some(u) => u.to_string(),
            None => self.username_file()?.unwrap_or_else(|| "git".to_string()),
        };
        if let Err(e) = std::fs::metadata(key) {
            let err = SourceError::ReadCredential {
                what: "ssh key",
                path: key.to_path_buf(),
                message: e.kind().to_string(),
            };
            return Err(self.fail(err));
        }
        record(&self.log, |l| {
            l.tried.push(format!("ssh key {} as {user:?}", key.display()))
        });
        Cred::ssh_key(&user, None, key, None)
    }

    /// The token, else the password, with the username file's user (a token's default user, a
    /// password's the URL's); `None` when neither file is configured.
    fn user_pass(&self, username_from_url: Option<&str>) -> Result<Option<Cred>, git2::Error> {
        let user = self.username_file()?;
        if let Some(token_file) = &self.creds.token_file {
            let token = read_secret("token", token_file).map_err(|e| self.fail(e))?;
            let user = user.unwrap_or_else(|| super::TOKEN_USERNAME.to_string());
            crate::redact::register_basic(&user, &token);
            record(&self.log, |l| {
                l.tried
                    .push(format!("token from {} as {user:?}", token_file.display()))
            });
            return Cred::userpass_plaintext(&user, &token).map(Some);
        }
        if let Some(password_file) = &self.creds.password_file {
            let password = read_secret("password", password_file).map_err(|e| self.fail(e))?;
            let user = user
                .or_else(|| username_from_url.map(str::to_string))
                .unwrap_or_default();
            crate::redact::register_basic(&user, &password);
            record(&self.log, |l| {
                l.tried
                    .push(format!("password from {} as {user:?}", password_file.display()))
            });
            return Cred::userpass_plaintext(&user, &password).map(Some);
        }
        Ok(None)
    }

    /// The username file's content, when one is configured.
    fn username_file(&self) -> Result<Option<String>, git2::Error> {
        match &self.creds.username_file {
            Some(p) => read_secret("username", p).map(Some).map_err(|e| self.fail(e)),
            None => Ok(None),
        }
    }

    /// Records `e` as the credential file that could not be read and ends the tries with it.
    fn fail(&self, e: SourceError) -> git2::Error {
        let message = e.to_string();
        record(&self.log, |l| l.read_error = Some(e));
        git2::Error::from_str(&message)
    }
}

/// Whether `key`, the host key `host` on `port` showed, is the one `known_hosts` lists for it.
fn check_known_host(
    known_hosts: Option<&Path>,
    host: &str,
    port: u16,
    key: &[u8],
) -> Result<(), SourceError> {
    let display = if port == 22 {
        host.to_string()
    } else {
        format!("[{host}]:{port}")
    };
    let key_type = key_type_name(key);
    let Some(file) = known_hosts else {
        return Err(SourceError::HostKeyUnknown {
            host: display,
            key_type,
            known_hosts: "(none given: pass --git-known-hosts)".to_string(),
        });
    };
    let text = std::fs::read_to_string(file).map_err(|e| SourceError::ReadCredential {
        what: "known_hosts",
        path: file.to_path_buf(),
        message: e.kind().to_string(),
    })?;
    match check_host_key(&text, host, port, key) {
        HostKeyVerdict::Match => Ok(()),
        HostKeyVerdict::Unknown => Err(SourceError::HostKeyUnknown {
            host: display,
            key_type,
            known_hosts: file.display().to_string(),
        }),
        HostKeyVerdict::Mismatch => Err(SourceError::HostKeyChanged {
            host: display,
            key_type,
            known_hosts: file.display().to_string(),
        }),
    }
}

fn describe(allowed: CredentialType) -> String {
    let mut names = Vec::new();
    if allowed.contains(CredentialType::SSH_KEY) {
        names.push("ssh key");
    }
    if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) {
        names.push("username/password or token");
    }
    if names.is_empty() {
        names.push("the methods the server accepts");
    }
    names.join(" or ")
}

/// Result of looking a host key up in known_hosts.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HostKeyVerdict {
    /// An entry for the host holds this key.
    Match,
    /// Entries for the host exist, none with this key (or the key is revoked).
    Mismatch,
    /// No entry names the host.
    Unknown,
}

/// Looks `key` (the raw ssh wire-format blob) up for `host`/`port` in known_hosts `text`. Both `host`
/// and `[host]:port` entries count; `*`/`?` wildcards and `!` negations are honoured; hashed
/// (`|1|`) and `@cert-authority` lines are skipped; a matching `@revoked` key is a mismatch.
pub(crate) fn check_host_key(text: &str, host: &str, port: u16, key: &[u8]) -> HostKeyVerdict {
    let names = [host.to_string(), format!("[{host}]:{port}")];
    let mut seen = false;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split_whitespace();
        let mut first = fields.next().unwrap_or_default();
        let mut revoked = false;
        if first.starts_with('@') {
            if first != "@revoked" {
                continue;
            }
            revoked = true;
            first = fields.next().unwrap_or_default();
        }
        let (Some(_key_type), Some(blob)) = (fields.next(), fields.next()) else {
            continue;
        };
        if first.starts_with('|') || !host_matches(first, &names) {
            continue;
        }
        let Some(decoded) = base64_decode(blob) else {
            continue;
        };
        if decoded == key {
            if revoked {
                return HostKeyVerdict::Mismatch;
            }
            return HostKeyVerdict::Match;
        }
        seen = true;
    }
    if seen {
        HostKeyVerdict::Mismatch
    } else {
        HostKeyVerdict::Unknown
    }
}

fn host_matches(patterns: &str, names: &[String]) -> bool {
    let mut matched = false;
    for pattern in patterns.split(',') {
        let (negated, pattern) = match pattern.strip_prefix('!') {
            Some(p) => (true, p),
            None => (false, pattern),
        };
        if names.iter().any(|n| wildcard(pattern.as_bytes(), n.as_bytes())) {
            if negated {
                return false;
            }
            matched = true;
        }
    }
    matched
}

fn wildcard(pattern: &[u8], text: &[u8]) -> bool {
    match (pattern.first(), text.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            wildcard(&pattern[1..], text) || (!text.is_empty() && wildcard(pattern, &text[1..]))
        }
        (Some(b'?'), Some(_)) => wildcard(&pattern[1..], &text[1..]),
        (Some(p), Some(t)) if p.eq_ignore_ascii_case(t) => wildcard(&pattern[1..], &text[1..]),
        _ => false,
    }
}

/// The key type named inside an ssh wire-format key blob (`ssh-ed25519`, ...).
fn key_type_name(blob: &[u8]) -> String {
    if blob.len() >= 4 {
        let len = u32::from_be_bytes([blob[0], blob[1], blob[2], blob[3]]) as usize;
        if let Some(name) = blob.get(4..4 + len) {
            return String::from_utf8_lossy(name).into_owned();
        }
    }
    "unknown key type".to_string()
}

/// Standard base64 with padding, as in known_hosts; `None` on any invalid character.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for &c in text.trim_end_matches('=').as_bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_A: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";
    const KEY_B: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIBbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    #[test]
    fn base64_decodes_a_key_blob_and_its_type() {
        let blob = base64_decode(KEY_A).unwrap();
        assert_eq!(key_type_name(&blob), "ssh-ed25519");
        assert_eq!(base64_decode("aGk="), Some(b"hi".to_vec()));
    }

    #[test]
    fn known_hosts_matches_bracketed_port_entries_and_reports_mismatch() {
        let key = base64_decode(KEY_A).unwrap();
        let text = format!("[127.0.0.1]:2222 ssh-ed25519 {KEY_A}\n");
        assert_eq!(
            check_host_key(&text, "127.0.0.1", 2222, &key),
            HostKeyVerdict::Match
        );
        let other = format!("[127.0.0.1]:2222 ssh-ed25519 {KEY_B}\n");
        assert_eq!(
            check_host_key(&other, "127.0.0.1", 2222, &key),
            HostKeyVerdict::Mismatch
        );
        assert_eq!(
            check_host_key(&text, "10.0.0.1", 2222, &key),
            HostKeyVerdict::Unknown
        );
    }

    #[test]
    fn known_hosts_honours_wildcards_negation_and_revocation() {
        let key = base64_decode(KEY_A).unwrap();
        let text = format!("*.example.com,!bad.example.com ssh-ed25519 {KEY_A}\n");
        assert_eq!(
            check_host_key(&text, "git.example.com", 22, &key),
            HostKeyVerdict::Match
        );
        assert_eq!(
            check_host_key(&text, "bad.example.com", 22, &key),
            HostKeyVerdict::Unknown
        );
        let revoked = format!("@revoked * ssh-ed25519 {KEY_A}\ngit.example.com ssh-ed25519 {KEY_A}\n");
        assert_eq!(
            check_host_key(&revoked, "git.example.com", 22, &key),
            HostKeyVerdict::Mismatch
        );
    }
}
