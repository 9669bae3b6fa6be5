//! The secrets kok holds, and the scrubbing of every text that comes back from outside.
//!
//! A forge, a git remote or a proxy in front of them may echo a request back in an error body,
//! `Authorization` header included. Whatever reads a token, password or webhook secret registers it
//! here (with the `Basic` encoding git sends it in); whatever turns a foreign text into a log line,
//! a status, an Event or an error passes it through [`scrub`] first.

use std::sync::{OnceLock, RwLock};

use base64::Engine as _;

/// What a secret is replaced with.
pub const REDACTED: &str = "<redacted>";

/// Secrets shorter than this are not registered: replacing two or three letters everywhere would
/// garble every message while hiding nothing a guess would not find.
pub const MIN_SECRET_LEN: usize = 4;

fn registry() -> &'static RwLock<Vec<String>> {
    static SECRETS: OnceLock<RwLock<Vec<String>>> = OnceLock::new();
    SECRETS.get_or_init(Default::default)
}

/// Remembers `secret` (trimmed) so that [`scrub`] removes it from foreign texts.
pub fn register(secret: &str) {
    let secret = secret.trim();
    if secret.len() < MIN_SECRET_LEN {
        return;
    }
    let mut secrets = registry()
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if !secrets.iter().any(|s| s == secret) {
        secrets.push(secret.to_string());
        // Longest first, so that a secret containing another is replaced whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }
}

/// Remembers a password or token sent with `user` over HTTP basic authentication: the secret and
/// the base64 `user:secret` of the `Authorization: Basic` header.
pub fn register_basic(user: &str, secret: &str) {
    register(secret);
    if secret.trim().len() >= MIN_SECRET_LEN {
        register(&base64::engine::general_purpose::STANDARD.encode(format!("{user}:{secret}")));
    }
}

/// `text` with every registered secret replaced by [`REDACTED`].
pub fn scrub(text: &str) -> String {
    let secrets = registry().read().unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut out = text.to_string();
    for secret in secrets.iter() {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), REDACTED);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_secrets_and_their_basic_encoding_are_scrubbed() {
        register_basic("x-access-token", "ghp_unitTestSecret42");
        let header = base64::engine::general_purpose::STANDARD.encode("x-access-token:ghp_unitTestSecret42");
        let text = format!("boom Bearer ghp_unitTestSecret42 / Basic {header}");
        assert_eq!(scrub(&text), "boom Bearer <redacted> / Basic <redacted>");
    }

    #[test]
    fn short_secrets_are_not_registered() {
        register("abc");
        assert_eq!(scrub("abcdef"), "abcdef");
    }
}
