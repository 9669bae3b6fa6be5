//! The secrets kok holds, and the scrubbing of every text that comes back from outside.
//!
//! A forge, a git remote or a proxy in front of them may echo a request back in an error body,
//! `Authorization` header included. Whatever reads a token, password or webhook secret registers it
//! here (with the `Basic` encoding git sends it in); whatever turns a foreign text into a log line,
//! a status, an Event or an error passes it through [`scrub`] first.
//!
//! A Job's run prints what it likes, so the content of every Secret a Job mounts (an ssh key, an
//! ansible-vault password, kubespray's `credentials/`) is registered too, cut into the fragments
//! [`secret_file_fragments`] names: the one rule for service mode and local mode alike.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock, RwLock};

use base64::Engine as _;

/// What a secret is replaced with.
pub const REDACTED: &str = "<redacted>";

/// Secrets shorter than this are not registered: replacing two or three letters everywhere would
/// garble every message while hiding nothing a guess would not find.
pub const MIN_SECRET_LEN: usize = 4;

/// A set of secrets and the scrubbing of texts of them, kept so that inserting is cheap and scrubbing reads
/// each text once, however many secrets there are (a fleet's ssh keys alone are tens of thousands of
/// fragments). The redactor's registry is one; local mode's log of a run holds one of its Secrets.
#[derive(Default)]
pub struct Secrets {
    /// Every secret, to hold each once.
    known: HashSet<Arc<str>>,
    /// The secrets by their first [`MIN_SECRET_LEN`] bytes, longest first within each.
    by_prefix: HashMap<[u8; MIN_SECRET_LEN], Vec<Arc<str>>>,
}

/// Says how many secrets it holds, never which.
impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("count", &self.known.len())
            .finish()
    }
}

impl Secrets {
    /// Adds `secret` (trimmed); one shorter than [`MIN_SECRET_LEN`] is left out.
    pub fn insert(&mut self, secret: &str) {
        let secret = secret.trim();
        let Some(key) = prefix(secret.as_bytes()) else {
            return;
        };
        if self.known.contains(secret) {
            return;
        }
        let secret: Arc<str> = Arc::from(secret);
        self.known.insert(secret.clone());
        let bucket = self.by_prefix.entry(key).or_default();
        bucket.push(secret);
        // Longest first, so that a secret containing another is replaced whole.
        bucket.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }

    /// True when it holds no secret.
    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }

    /// `text` with each stretch its secrets cover (overlapping ones together) replaced by one [`REDACTED`].
    pub fn scrub(&self, text: &str) -> String {
        let bytes = text.as_bytes();
        // The byte ranges secrets cover, by their start. A match starts and ends on a character boundary:
        // a secret is UTF-8 and starts with a leading byte, which no continuation byte equals.
        let mut covered: Vec<(usize, usize)> = Vec::new();
        for start in 0..bytes.len() {
            let Some(candidates) = prefix(&bytes[start..]).and_then(|key| self.by_prefix.get(&key)) else {
                continue;
            };
            let Some(secret) = candidates
                .iter()
                .find(|s| bytes[start..].starts_with(s.as_bytes()))
            else {
                continue;
            };
            let end = start + secret.len();
            match covered.last_mut() {
                Some(last) if start < last.1 => last.1 = last.1.max(end),
                _ => covered.push((start, end)),
            }
        }
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for (start, end) in covered {
            out.push_str(&text[at..start]);
            out.push_str(REDACTED);
            at = end;
        }
        out.push_str(&text[at..]);
        out
    }
}

fn registry() -> &'static RwLock<Secrets> {
    static SECRETS: OnceLock<RwLock<Secrets>> = OnceLock::new();
    SECRETS.get_or_init(Default::default)
}

/// The first [`MIN_SECRET_LEN`] bytes of `bytes`, when it has as many.
fn prefix(bytes: &[u8]) -> Option<[u8; MIN_SECRET_LEN]> {
    bytes.get(..MIN_SECRET_LEN)?.try_into().ok()
}

/// Remembers `secret` (trimmed) so that [`scrub`] removes it from foreign texts.
pub fn register(secret: &str) {
    registry()
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .insert(secret);
}

/// Lines of a multi-line secret shorter than this are not registered: a key file's short lines (blank,
/// padding) would garble every message, and its long lines are what would give it away.
pub const MIN_SECRET_LINE_LEN: usize = 8;

/// What of a Secret file's `content` scrubbing hides: a one-line file (a password, such as
/// ansible-vault's) whole from [`MIN_SECRET_LEN`] characters on; else each line of at least
/// [`MIN_SECRET_LINE_LEN`] characters. Trimmed, deduplicated, sorted.
pub fn secret_file_fragments(content: &str) -> Vec<String> {
    let mut out = std::collections::BTreeSet::new();
    let whole = content.trim();
    if !whole.contains('\n') {
        if whole.len() >= MIN_SECRET_LEN {
            out.insert(whole.to_string());
        }
    } else {
        for line in whole.lines().map(str::trim) {
            if line.len() >= MIN_SECRET_LINE_LEN {
                out.insert(line.to_string());
            }
        }
    }
    out.into_iter().collect()
}

/// Remembers the [`secret_file_fragments`] of a Secret file's `content` (a value of a Secret a Job
/// mounts) so that [`scrub`] removes them.
pub fn register_secret_file(content: &str) {
    for fragment in secret_file_fragments(content) {
        register(&fragment);
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

/// `text` with every registered secret replaced by [`REDACTED`] ([`Secrets::scrub`]).
pub fn scrub(text: &str) -> String {
    registry()
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .scrub(text)
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
    fn a_one_line_secret_file_is_one_fragment_from_four_characters() {
        assert_eq!(secret_file_fragments("hunter\n"), ["hunter"]);
        assert!(
            secret_file_fragments("abc\n").is_empty(),
            "three letters hide nothing a guess would not find"
        );
    }

    #[test]
    fn a_multi_line_secret_file_is_its_lines_of_eight_characters_or_more() {
        let key = "-----BEGIN KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\nshort\n\n-----END KEY-----\n";
        assert_eq!(
            secret_file_fragments(key),
            [
                "-----BEGIN KEY-----",
                "-----END KEY-----",
                "b3BlbnNzaC1rZXktdjEAAAAA"
            ]
        );
    }

    #[test]
    fn a_registered_secret_file_is_scrubbed_line_by_line() {
        register_secret_file("unitKeyLineOne0001\nunitKeyLineTwo0002\n");
        assert_eq!(
            scrub("ssh said unitKeyLineTwo0002 and unitKeyLineOne0001"),
            "ssh said <redacted> and <redacted>"
        );
    }

    #[test]
    fn overlapping_secrets_are_hidden_whole_whichever_starts_first() {
        register("unitOverlapAAAA");
        register("AAAAunitOverlapTail");
        assert_eq!(
            scrub("x unitOverlapAAAAunitOverlapTail y"),
            "x <redacted> y",
            "the union of both is hidden, not the first and the rest of the second"
        );
        register("unitInnerLonger-unitInner");
        register("unitInner");
        assert_eq!(
            scrub("unitInnerLonger-unitInner, unitInner"),
            "<redacted>, <redacted>"
        );
    }

    #[test]
    fn text_around_a_secret_keeps_its_characters() {
        register("unitGrüßeSecret");
        assert_eq!(scrub("ä unitGrüßeSecret ö"), "ä <redacted> ö");
        assert_eq!(scrub("€uro"), "€uro");
    }

    #[test]
    fn thousands_of_secrets_register_once_each_and_all_are_found() {
        for i in 0..5_000 {
            register_secret_file(&format!(
                "unitFleetKey{i:05}-line-one\nunitFleetKey{i:05}-line-two\n"
            ));
            register(&format!("unitFleetKey{i:05}-line-one"));
        }
        let registry = registry().read().unwrap();
        assert_eq!(
            registry
                .known
                .iter()
                .filter(|s| s.starts_with("unitFleetKey"))
                .count(),
            10_000
        );
        drop(registry);
        assert_eq!(
            scrub("a unitFleetKey04999-line-two b unitFleetKey00000-line-one"),
            "a <redacted> b <redacted>"
        );
    }

    #[test]
    fn short_secrets_are_not_registered() {
        register("abc");
        assert_eq!(scrub("abcdef"), "abcdef");
    }
}
