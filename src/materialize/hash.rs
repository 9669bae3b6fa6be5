//! Content hashing: canonical JSON (sorted keys, no whitespace) and the sha256 digests built on it.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::api::ANNOTATION_CONTENT_HASH;

/// Lowercase hex sha256 of `bytes` (64 characters).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The first 8 hex characters of the sha256 of `bytes`: the suffix of content-addressed names.
pub fn sha8(bytes: &[u8]) -> String {
    let mut hex = sha256_hex(bytes);
    hex.truncate(8);
    hex
}

/// Canonical JSON text of `value`: object keys sorted (by code point), no insignificant
/// whitespace, strings escaped minimally (`"`, `\`, and control characters only). Two values that
/// are equal as JSON give the same text, whatever the key order or formatting they were read from.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
    }
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// sha256 (hex, its first [`CONTENT_HASH_LEN`] characters) of the canonical JSON of an object, ignoring its own
/// `metadata.annotations["kok.dev/content-hash"]` so the hash can be stored on the object it
/// describes. The apply layer compares it with the live object's annotation to skip unchanged writes.
///
/// Fails only when `obj` does not serialize to JSON (e.g. a map with non-string keys).
///
/// Only objects kok updates carry one (Clusters, FleetRollouts): a run is created once and never updated,
/// and a ConfigMap's name is its content's address.
pub fn content_hash<T: Serialize + ?Sized>(obj: &T) -> Result<String, serde_json::Error> {
    let mut value = serde_json::to_value(obj)?;
    if let Some(annotations) = value
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    {
        annotations.remove(ANNOTATION_CONTENT_HASH);
        if annotations.is_empty() {
            if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
                metadata.remove("annotations");
            }
        }
    }
    let mut hex = sha256_hex(canonical_json(&value).as_bytes());
    // 128 bits tell a change as surely as 256 and take 32 bytes less on every object kok keeps.
    hex.truncate(CONTENT_HASH_LEN);
    Ok(hex)
}

/// Hex characters of a content hash: the first 128 bits of the sha256.
pub const CONTENT_HASH_LEN: usize = 32;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_json_sorts_keys_at_every_depth_and_drops_whitespace() {
        let value = json!({"b": 1, "a": {"z": [true, null], "y": "x"}});
        assert_eq!(canonical_json(&value), r#"{"a":{"y":"x","z":[true,null]},"b":1}"#);
    }

    #[test]
    fn canonical_json_escapes_quotes_backslashes_and_control_characters_only() {
        let value = json!("a\"b\\c\nd\u{1}é");
        assert_eq!(canonical_json(&value), "\"a\\\"b\\\\c\\nd\\u0001é\"");
    }

    #[test]
    fn canonical_json_keeps_array_order() {
        assert_eq!(canonical_json(&json!([3, 1, 2])), "[3,1,2]");
    }

    #[test]
    fn canonical_json_round_trips_through_serde_json() {
        let value = json!({"k": ["a\tb", 1.5, -3, {"x": false}], "e": {}});
        let parsed: Value = serde_json::from_str(&canonical_json(&value)).unwrap();
        assert_eq!(parsed, value);
    }

    #[test]
    fn sha8_is_the_prefix_of_the_full_digest() {
        let full = sha256_hex(b"all:\n");
        assert_eq!(full.len(), 64);
        assert_eq!(sha8(b"all:\n"), full[..8]);
    }

    #[test]
    fn content_hash_ignores_its_own_annotation_but_not_others() {
        let bare = json!({"metadata": {"name": "a"}, "data": {"k": "v"}});
        let stamped = json!({"metadata": {"name": "a", "annotations": {ANNOTATION_CONTENT_HASH: "x"}}, "data": {"k": "v"}});
        let other = json!({"metadata": {"name": "a", "annotations": {"other": "x"}}, "data": {"k": "v"}});
        assert_eq!(content_hash(&bare).unwrap(), content_hash(&stamped).unwrap());
        assert_ne!(content_hash(&bare).unwrap(), content_hash(&other).unwrap());
    }

    #[test]
    fn content_hash_changes_with_the_data() {
        let a = json!({"metadata": {"name": "a"}, "data": {"k": "v"}});
        let b = json!({"metadata": {"name": "a"}, "data": {"k": "w"}});
        assert_ne!(content_hash(&a).unwrap(), content_hash(&b).unwrap());
    }
}
