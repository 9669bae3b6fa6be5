//! Names of the objects kok writes: content-addressed, deterministic, and at most 63 characters.
//!
//! Every name is a DNS-1123 label so it can also be used as a label value (a Job's name becomes
//! one). When the natural name would be longer than [`MAX_NAME_LEN`], its stem is cut and followed
//! by the first 8 hex characters of the sha256 of the whole stem, and the meaningful suffix (a
//! content hash, a digest, a time) is kept intact at the end:
//!
//! ```text
//! <cluster>-<id>-<digest8>                  when it fits in 63 characters
//! <stem cut to fit>-<sha8(stem)>-<digest8>  otherwise (stem = "<cluster>-<id>")
//! ```
//!
//! Two different stems never share a shortened name unless their sha256 prefixes collide, and the
//! same input always gives the same name.

use serde_json::Value;

use super::hash::{canonical_json, sha256_hex, sha8};
use crate::api::{FILES_KEY, FILE_KEY, HOSTS_KEY, VARS_KEY};

/// Longest name kok gives an object (a DNS-1123 label).
pub const MAX_NAME_LEN: usize = 63;

/// Length of the hex prefixes used in names.
const SHORT_HASH_LEN: usize = 8;

/// Which input file a content-addressed ConfigMap holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ContentKind {
    /// The cluster's `hosts.yml` (the ansible inventory).
    Hosts,
    /// The cluster's `vars.yml`.
    Vars,
    /// One file of the cluster's group_vars/ or host_vars/.
    File,
    /// The list of a directory's pinned group_vars/ and host_vars/ files (`varsFilesRef`).
    Files,
}

impl ContentKind {
    /// `hosts` or `vars`: the name infix and the value of the `kok.dev/content` label.
    pub fn as_str(self) -> &'static str {
        match self {
            ContentKind::Hosts => "hosts",
            ContentKind::Vars => "vars",
            ContentKind::File => "file",
            ContentKind::Files => "files",
        }
    }

    /// The ConfigMap data key holding the file: `hosts.yml`, `vars.yml` or `file` (the key of a hosts
    /// ConfigMap of another inventory file is that file's name).
    pub fn data_key(self) -> &'static str {
        match self {
            ContentKind::Hosts => HOSTS_KEY,
            ContentKind::Vars => VARS_KEY,
            ContentKind::File => FILE_KEY,
            ContentKind::Files => FILES_KEY,
        }
    }
}

impl std::fmt::Display for ContentKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A revision in Flux's format: `<ref>@sha1:<sha>`, e.g. `main@sha1:3f2a…`.
pub fn revision_string(ref_name: &str, sha: &str) -> String {
    format!("{ref_name}@sha1:{sha}")
}

/// Name of the immutable ConfigMap holding `content` (the file's exact text):
/// `<cluster>-hosts-<sha8>`, `<cluster>-vars-<sha8>` or `<cluster>-file-<sha8>`, sha8 = first 8 hex of
/// sha256(content).
pub fn config_map_name(cluster: &str, kind: ContentKind, content: &str) -> String {
    name_with_suffix(&format!("{cluster}-{kind}"), &sha8(content.as_bytes()))
}

/// Name of the immutable ConfigMap the whole fleet shares for one pinned file of `bytes` (not necessarily
/// text): `kok-file-<sha20>`, the first 20 hex characters (80 bits) of sha256(bytes), so that the distinct
/// files of a fleet (thousands) never share a name by chance.
pub fn file_config_map_name(bytes: &[u8]) -> String {
    shared_config_map_name(ContentKind::File, bytes)
}

/// Name of the immutable ConfigMap the whole fleet shares for one list of pinned files, `json` (the
/// `varsFiles` list as JSON): `kok-files-<sha20>`, as [`file_config_map_name`] names a file.
pub fn file_list_config_map_name(json: &str) -> String {
    shared_config_map_name(ContentKind::Files, json.as_bytes())
}

fn shared_config_map_name(kind: ContentKind, bytes: &[u8]) -> String {
    let mut hex = sha256_hex(bytes);
    hex.truncate(SHARED_HASH_LEN);
    format!("kok-{kind}-{hex}")
}

/// Length of the hex prefix in the names of shared ConfigMaps.
const SHARED_HASH_LEN: usize = 20;

/// Name of the immutable ConfigMap holding the inventory file `file`: [`config_map_name`] for hosts.yml;
/// for another name (`inventory.ini`) the hash covers the name too, since it is the data key.
pub fn hosts_config_map_name(cluster: &str, file: &str, content: &str) -> String {
    if file == HOSTS_KEY {
        return config_map_name(cluster, ContentKind::Hosts, content);
    }
    let keyed = format!("{file}\n{content}");
    name_with_suffix(
        &format!("{cluster}-{}", ContentKind::Hosts),
        &sha8(keyed.as_bytes()),
    )
}

/// The digest of an operations.yml entry: sha256 (hex) of its canonical JSON, so key order,
/// quoting and layout in the YAML do not change it, while any change of a value (or `rerun`) does.
pub fn operation_digest(entry: &Value) -> String {
    sha256_hex(canonical_json(entry).as_bytes())
}

/// Name of the ClusterOperation for one operation entry: `<cluster>-<id>-<digest8>`, shortened as
/// described in the module docs when longer than 63 characters.
pub fn operation_name(cluster: &str, id: &str, digest: &str) -> String {
    let digest8: String = digest.chars().take(SHORT_HASH_LEN).collect();
    name_with_suffix(&format!("{cluster}-{id}"), &digest8)
}

/// Name of the run of a scheduled operation fired at `time`: `<base>-<yyyymmddhhmm>` (UTC),
/// shortened (keeping the time) when longer than 63 characters.
pub fn scheduled_operation_name(base: &str, time: jiff::Timestamp) -> String {
    let t = time.to_zoned(jiff::tz::TimeZone::UTC).datetime();
    let stamp = format!(
        "{:04}{:02}{:02}{:02}{:02}",
        t.year(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute()
    );
    name_with_suffix(base, &stamp)
}

/// `<stem>-<suffix>` when it fits in [`MAX_NAME_LEN`]; otherwise the stem is cut and followed by
/// `-<sha8(stem)>`, then `-<suffix>`. A suffix too long to leave room for that is shortened whole.
pub fn name_with_suffix(stem: &str, suffix: &str) -> String {
    let full = format!("{stem}-{suffix}");
    if full.len() <= MAX_NAME_LEN {
        return full;
    }
    // Two dashes: one after the cut stem, one before the suffix.
    let reserved = suffix.len() + SHORT_HASH_LEN + 2;
    if reserved >= MAX_NAME_LEN {
        return shorten_name(&full, MAX_NAME_LEN);
    }
    let cut = cut_name(stem, MAX_NAME_LEN - reserved);
    format!("{cut}-{}-{suffix}", sha8(stem.as_bytes()))
}

/// `name` when it has at most `max` characters; otherwise its first characters, cut so that the
/// result ends alphanumeric, followed by `-<sha8(name)>`, `max` characters at most. Use it for
/// names derived from other names, e.g. a Job named `kok-<ClusterOperation name>`.
pub fn shorten_name(name: &str, max: usize) -> String {
    if name.len() <= max {
        return name.to_string();
    }
    let hash = sha8(name.as_bytes());
    let room = max.saturating_sub(SHORT_HASH_LEN + 1);
    let cut = cut_name(name, room);
    if cut.is_empty() {
        hash.chars().take(max).collect()
    } else {
        format!("{cut}-{hash}")
    }
}

/// The longest prefix of `name` of at most `max` bytes that ends on a character boundary and does
/// not end with `-` or `.`.
fn cut_name(name: &str, max: usize) -> &str {
    let mut end = max.min(name.len());
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].trim_end_matches(['-', '.'])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_entry_without_verify_fields_keeps_the_digest_it_always_had() {
        assert_eq!(
            operation_digest(&json!({"id": "install", "action": "cluster.yml"})),
            "23f851754145637937364a87adceeed7e9c2d95d247c3dd0a3d89bc4d68825ba"
        );
    }

    fn is_dns_label(name: &str) -> bool {
        !name.is_empty()
            && name.len() <= MAX_NAME_LEN
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !name.starts_with('-')
            && !name.ends_with('-')
    }

    #[test]
    fn revision_string_uses_the_flux_format() {
        assert_eq!(revision_string("main", "abc123"), "main@sha1:abc123");
    }

    #[test]
    fn config_map_name_is_cluster_kind_and_content_hash() {
        let name = config_map_name("prod-bj", ContentKind::Hosts, "all:\n");
        assert_eq!(name, format!("prod-bj-hosts-{}", &sha256_hex(b"all:\n")[..8]));
        assert!(config_map_name("prod-bj", ContentKind::Vars, "a: 1\n").starts_with("prod-bj-vars-"));
    }

    #[test]
    fn config_map_name_changes_with_a_single_byte_of_content() {
        assert_ne!(
            config_map_name("a", ContentKind::Vars, "x: 1\n"),
            config_map_name("a", ContentKind::Vars, "x: 1 \n")
        );
    }

    #[test]
    fn operation_digest_is_unchanged_by_key_order() {
        let a = json!({"id": "scale", "action": "scale.yml", "extraArgs": ["--limit=node7"]});
        let b = json!({"extraArgs": ["--limit=node7"], "action": "scale.yml", "id": "scale"});
        assert_eq!(operation_digest(&a), operation_digest(&b));
        assert_eq!(operation_digest(&a).len(), 64);
    }

    #[test]
    fn operation_digest_changes_when_an_argument_changes() {
        let a = json!({"id": "scale", "action": "scale.yml", "extraArgs": ["--limit=node7"]});
        let b = json!({"id": "scale", "action": "scale.yml", "extraArgs": ["--limit=node8"]});
        assert_ne!(operation_digest(&a), operation_digest(&b));
    }

    #[test]
    fn operation_digest_changes_when_rerun_is_bumped() {
        let a = json!({"id": "install", "action": "cluster.yml", "rerun": 1});
        let b = json!({"id": "install", "action": "cluster.yml", "rerun": 2});
        let c = json!({"id": "install", "action": "cluster.yml"});
        assert_ne!(operation_digest(&a), operation_digest(&b));
        assert_ne!(operation_digest(&a), operation_digest(&c));
    }

    #[test]
    fn operation_name_is_cluster_id_and_digest8_when_short() {
        let digest = "0123456789abcdef".repeat(4);
        assert_eq!(
            operation_name("prod-bj", "install", &digest),
            "prod-bj-install-01234567"
        );
    }

    #[test]
    fn operation_name_at_the_longest_ids_fits_in_63_and_keeps_the_digest() {
        let cluster = format!("c{}", "a".repeat(39));
        let id = format!("o{}", "b".repeat(29));
        let digest = "fedcba98".repeat(8);
        let name = operation_name(&cluster, &id, &digest);
        assert_eq!(name.len(), MAX_NAME_LEN);
        assert!(is_dns_label(&name), "{name}");
        assert!(name.ends_with("-fedcba98"), "{name}");
        assert!(name.starts_with(&cluster), "{name}");
    }

    #[test]
    fn shortened_operation_names_of_different_ids_differ() {
        let cluster = "c".repeat(40);
        let digest = "0".repeat(64);
        let a = operation_name(&cluster, &format!("{}-a", "x".repeat(28)), &digest);
        let b = operation_name(&cluster, &format!("{}-b", "x".repeat(28)), &digest);
        assert_ne!(a, b);
        assert_eq!(a.len(), MAX_NAME_LEN);
    }

    #[test]
    fn shortened_names_never_end_the_cut_with_a_dash() {
        // The cut lands right after a dash in the stem.
        let stem = format!("{}-{}", "a".repeat(44), "b".repeat(30));
        let name = name_with_suffix(&stem, "12345678");
        assert!(is_dns_label(&name), "{name}");
        assert!(!name.contains("--"), "{name}");
    }

    #[test]
    fn scheduled_operation_name_appends_the_utc_minute() {
        let time: jiff::Timestamp = "2026-03-04T05:06:59Z".parse().unwrap();
        assert_eq!(
            scheduled_operation_name("prod-bj-info-01234567", time),
            "prod-bj-info-01234567-202603040506"
        );
    }

    #[test]
    fn scheduled_operation_name_of_a_63_character_base_fits_and_keeps_the_time() {
        let base = operation_name(&"c".repeat(40), &"o".repeat(30), &"9".repeat(64));
        let time: jiff::Timestamp = "2026-12-31T23:59:00Z".parse().unwrap();
        let name = scheduled_operation_name(&base, time);
        assert!(name.len() <= MAX_NAME_LEN, "{name}");
        assert!(name.ends_with("-202612312359"), "{name}");
        assert!(is_dns_label(&name), "{name}");
    }

    #[test]
    fn shorten_name_leaves_short_names_alone_and_bounds_long_ones() {
        assert_eq!(shorten_name("kok-a-b-1", 63), "kok-a-b-1");
        let long = format!("kok-{}", "x".repeat(70));
        let short = shorten_name(&long, 63);
        assert_eq!(short.len(), 63);
        assert!(short.ends_with(&format!("-{}", sha8(long.as_bytes()))));
        assert_eq!(shorten_name(&long, 63), short, "deterministic");
    }
}
