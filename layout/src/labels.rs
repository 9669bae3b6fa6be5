//! `labels` in cluster.yml and kok.yml: Kubernetes labels copied onto the Cluster object, checked for syntax.

use std::collections::BTreeMap;

use super::diag::FileDiags;
use super::names::is_dns1123_subdomain;
use super::yaml::{Kind, Node};
use crate::spec::{LABEL_MANAGED_BY, MANAGED_BY};

/// Longest label name (the part after the optional `prefix/`) and longest value.
const MAX_LABEL_PART: usize = 63;

/// True when `s` is a label name or value part: at most 63 characters, alphanumerics at both ends and
/// `-`, `_`, `.` or alphanumerics between (empty only when `empty_ok`).
fn is_label_part(s: &str, empty_ok: bool) -> bool {
    if s.is_empty() {
        return empty_ok;
    }
    let bytes = s.as_bytes();
    s.len() <= MAX_LABEL_PART
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// What is wrong with `key` as a Kubernetes label key (`[prefix/]name`), if anything.
pub fn label_key_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if !is_dns1123_subdomain(prefix) {
            return Some(format!(
                "label key \"{key}\": the prefix before '/' must be a DNS subdomain such as example.com"
            ));
        }
        if prefix == "kok.dev" || prefix.ends_with(".kok.dev") || key == LABEL_MANAGED_BY {
            return Some(format!(
                "label key \"{key}\" is kok's own (kok.dev/ and {LABEL_MANAGED_BY}={MANAGED_BY}): pick another"
            ));
        }
    }
    (!is_label_part(name, false)).then(|| {
        format!(
            "label key \"{key}\" is not a Kubernetes label name: at most 63 letters, digits, '-', '_' or '.', \
             starting and ending with a letter or digit, optionally after a prefix like example.com/"
        )
    })
}

/// What is wrong with `value` as a Kubernetes label value, if anything.
pub fn label_value_problem(value: &str) -> Option<String> {
    (!is_label_part(value, true)).then(|| {
        format!(
            "label value \"{value}\" is not a Kubernetes label value: at most 63 letters, digits, '-', '_' or \
             '.', starting and ending with a letter or digit (or empty)"
        )
    })
}

/// Parses a `labels` mapping of label keys to string values (integers are taken as their text).
pub(crate) fn parse_labels(node: &Node, diags: &mut FileDiags<'_>) -> Option<BTreeMap<String, String>> {
    let Some(map) = node.as_map() else {
        diags.error(
            node,
            format!(
                "labels must be a mapping of label keys to values, e.g. {{env: prod, region: bj}}, not {}",
                node.type_name()
            ),
        );
        return None;
    };
    let mut labels = BTreeMap::new();
    for (key, value) in map {
        let key_text = key.scalar_text().unwrap_or_default();
        if let Some(problem) = label_key_problem(&key_text) {
            diags.error(key, problem);
            continue;
        }
        let value_text = match &value.kind {
            Kind::Str(s) => s.clone(),
            Kind::Int(i) => i.to_string(),
            _ => {
                diags.error(
                    value,
                    format!(
                        "label {key_text} must have a string value, not {}; quote it (e.g. \"true\")",
                        value.type_name()
                    ),
                );
                continue;
            }
        };
        if let Some(problem) = label_value_problem(&value_text) {
            diags.error(value, problem);
            continue;
        }
        labels.insert(key_text, value_text);
    }
    Some(labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_keys_follow_kubernetes_syntax_and_kok_keeps_its_own() {
        for ok in ["env", "region", "example.com/team", "a.b_c-d", "x"] {
            assert_eq!(label_key_problem(ok), None, "{ok}");
        }
        for bad in [
            "",
            "-env",
            "env-",
            "Ex ample",
            "UPPER.com/x",
            "a/b/c",
            &"x".repeat(64),
        ] {
            assert!(label_key_problem(bad).is_some(), "{bad}");
        }
        assert!(label_key_problem("kok.dev/cluster")
            .unwrap()
            .contains("kok's own"));
        assert!(label_key_problem("app.kubernetes.io/managed-by")
            .unwrap()
            .contains("kok's own"));
        assert_eq!(label_key_problem("app.kubernetes.io/name"), None);
    }

    #[test]
    fn label_values_may_be_empty_but_not_spaced_or_long() {
        for ok in ["", "prod", "v1.31", "a_b-c"] {
            assert_eq!(label_value_problem(ok), None, "{ok}");
        }
        for bad in ["has space", "-x", "x.", &"v".repeat(64)] {
            assert!(label_value_problem(bad).is_some(), "{bad}");
        }
    }
}
