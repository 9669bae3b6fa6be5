//! Name rules shared by the validators (DNS-1123 labels and subdomains, host names) and "did you mean" hints.

/// True when `s` is a DNS-1123 label of at most `max` characters:
/// lowercase letters, digits and `-`, starting and ending with a letter or digit.
pub fn is_dns1123_label(s: &str, max: usize) -> bool {
    let bytes = s.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.len() <= max.min(63)
        && bytes.iter().all(|b| alnum(b) || *b == b'-')
        && bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
}

/// True when `s` is a DNS-1123 subdomain (the rule for Secret and ServiceAccount names):
/// at most 253 characters, dot-separated DNS-1123 labels.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(|label| is_dns1123_label(label, 63))
}

/// True when `s` can name an inventory host: letters, digits, `-`, `.` and `_`, at most 253 characters.
pub fn is_host_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
}

/// True when `s` can name an inventory group: letters, digits, `-`, `.` and `_`.
pub fn is_group_name(s: &str) -> bool {
    is_host_name(s)
}

/// Why `s` is not a DNS-1123 label of at most `max` characters, in words; `None` when it is one.
pub fn dns1123_label_problem(s: &str, max: usize) -> Option<String> {
    if s.is_empty() {
        return Some("it is empty".to_string());
    }
    if s.len() > max {
        return Some(format!(
            "it is {} characters long, more than the {max} allowed",
            s.len()
        ));
    }
    if s.bytes().any(|b| b.is_ascii_uppercase()) {
        return Some("it has uppercase letters; use lowercase".to_string());
    }
    if is_dns1123_label(s, max) {
        return None;
    }
    Some("use lowercase letters, digits and '-', starting and ending with a letter or digit".to_string())
}

/// The allowed name closest to `given` (same spelling ignoring case, `_` and `-`, or a small typo).
pub fn did_you_mean<'a>(given: &str, allowed: &[&'a str]) -> Option<&'a str> {
    let norm = |s: &str| {
        s.chars()
            .filter(|c| *c != '_' && *c != '-')
            .collect::<String>()
            .to_lowercase()
    };
    let g = norm(given);
    if let Some(hit) = allowed.iter().find(|a| norm(a) == g) {
        return Some(hit);
    }
    allowed
        .iter()
        .map(|a| (edit_distance(&norm(a), &g), *a))
        .filter(|(d, a)| *d <= 2.max(a.len() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, a)| a)
}

/// `; did you mean "x"?` when a close allowed name exists, else an empty string.
pub(crate) fn hint(given: &str, allowed: &[&str]) -> String {
    did_you_mean(given, allowed)
        .map(|s| format!("; did you mean \"{s}\"?"))
        .unwrap_or_default()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(row[j]).min(cur)
            };
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns1123_labels_accept_lowercase_digits_and_inner_dashes_only() {
        assert!(is_dns1123_label("prod-bj", 40));
        assert!(is_dns1123_label("a1", 40));
        assert!(!is_dns1123_label("Prod", 40));
        assert!(!is_dns1123_label("-a", 40));
        assert!(!is_dns1123_label("a-", 40));
        assert!(!is_dns1123_label("a_b", 40));
        assert!(!is_dns1123_label("a.b", 40));
        assert!(!is_dns1123_label("", 40));
        assert!(!is_dns1123_label(&"a".repeat(41), 40));
        assert!(is_dns1123_label(&"a".repeat(40), 40));
    }

    #[test]
    fn dns1123_subdomains_are_dot_separated_labels() {
        assert!(is_dns1123_subdomain("ssh-key"));
        assert!(is_dns1123_subdomain("ssh.key.prod"));
        assert!(!is_dns1123_subdomain("ssh_key"));
        assert!(!is_dns1123_subdomain("ssh..key"));
        assert!(!is_dns1123_subdomain(&"a".repeat(254)));
    }

    #[test]
    fn host_names_refuse_spaces_and_punctuation() {
        assert!(is_host_name("node7"));
        assert!(is_host_name("node_7.example.com"));
        assert!(!is_host_name("node 7"));
        assert!(!is_host_name("node[1:3]"));
        assert!(!is_host_name(""));
    }

    #[test]
    fn label_problems_say_what_is_wrong() {
        assert!(dns1123_label_problem("Prod", 40).unwrap().contains("uppercase"));
        assert!(dns1123_label_problem(&"a".repeat(41), 40)
            .unwrap()
            .contains("41 characters"));
        assert_eq!(dns1123_label_problem("ok", 40), None);
    }

    #[test]
    fn did_you_mean_finds_case_and_separator_variants_and_typos() {
        let keys = ["extraArgs", "action", "activeDeadlineSeconds"];
        assert_eq!(did_you_mean("extra_args", &keys), Some("extraArgs"));
        assert_eq!(did_you_mean("actoin", &keys), Some("action"));
        assert_eq!(did_you_mean("zzz", &keys), None);
    }
}
