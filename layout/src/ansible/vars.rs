//! `group_vars/` and `host_vars/`: which files ansible reads for a group or host (`<name>`, `<name>.yml`,
//! `.yaml`, `.json`, or a directory of such files read in sorted order), and what one file sets.

use std::collections::BTreeMap;

use serde_json::Value;

use super::value::{judge, Known, Unknown, Var, VarMap};
use super::yaml11::{key_text, typed};
use crate::diag::FileDiags;
use crate::yaml::{self, Kind, Node};

/// The extensions ansible tries after the bare name, in its order.
const EXTENSIONS: [&str; 3] = [".yml", ".yaml", ".json"];

/// The first bytes of a file encrypted as a whole with ansible-vault.
const VAULT_HEADER: &str = "$ANSIBLE_VAULT";

/// What one vars file sets.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum VarsFile {
    /// Its variables (none for an empty file).
    Vars(VarMap),
    /// The file is encrypted as a whole: it may set anything.
    Vault,
}

/// Reads one vars file: YAML (or JSON, which ansible tries first) holding a mapping, or a whole-file
/// vault. `parsed` is the file's YAML document when the caller has already parsed it and reported its
/// duplicate keys (validation's vars.yml), so that the text is not parsed again. `None` after reporting
/// why ansible would refuse it.
pub(crate) fn parse_vars_file(
    text: &str,
    parsed: Option<Node>,
    diags: &mut FileDiags<'_>,
) -> Option<VarsFile> {
    if text.starts_with(VAULT_HEADER) {
        return Some(VarsFile::Vault);
    }
    let parse = || match parsed {
        Some(root) => Ok(yaml::Doc {
            root: Some(root),
            duplicates: Vec::new(),
        }),
        None => yaml::parse(text),
    };
    if let Ok(json) = serde_json::from_str::<Value>(text) {
        let root = parse().ok().and_then(|doc| doc.root);
        return json_vars(json, root.as_ref(), diags).map(VarsFile::Vars);
    }
    let errors = diags.error_count();
    let root = match parse() {
        Ok(doc) => {
            for dup in doc.duplicates {
                // ansible warns and keeps the last value.
                let at = Node {
                    line: dup.line,
                    col: dup.col,
                    kind: Kind::Null,
                    written: None,
                };
                diags.warn(&at, format!("{}; ansible keeps the last value", dup.message));
            }
            doc.root
        }
        Err(problem) => {
            diags.error_at(problem.line, problem.col, problem.message);
            return None;
        }
    };
    let mut vars = VarMap::new();
    if let Some(root) = root {
        match &root.kind {
            Kind::Map(entries) => collect(entries, None, &mut vars),
            _ if is_falsy(&root) => {}
            _ => {
                diags.error(
                    &root,
                    format!(
                        "a vars file must be a mapping of variable names to values, not {}: write `name: value` \
                         lines",
                        root.type_name()
                    ),
                );
            }
        }
    }
    (diags.error_count() == errors).then_some(VarsFile::Vars(vars))
}

/// The top-level entries of a mapping as variables; `<<` merge keys bring theirs first, as in PyYAML.
fn collect(entries: &[(Node, Node)], line: Option<usize>, vars: &mut VarMap) {
    let mut own = VarMap::new();
    for (key, value) in entries {
        let is_merge = key.written.as_ref().and_then(|w| w.plain.as_deref()) == Some("<<");
        if is_merge {
            let sources: Vec<&Node> = match &value.kind {
                Kind::Seq(items) => items.iter().rev().collect(),
                _ => vec![value],
            };
            for source in sources {
                if let Kind::Map(inner) = &source.kind {
                    collect(inner, Some(line.unwrap_or(key.line)), vars);
                }
            }
            continue;
        }
        own.insert(
            key_text(key),
            Var {
                value: typed(value),
                line: Some(line.unwrap_or(key.line)),
            },
        );
    }
    vars.extend(own);
}

/// A YAML document ansible would skip as empty (`if new_data:`): null, false, 0, "", [] or {}.
fn is_falsy(node: &Node) -> bool {
    match &node.kind {
        Kind::Null => true,
        Kind::Bool(b) => !b,
        Kind::Int(i) => *i == 0,
        Kind::Float(f) => f.parse::<f64>().is_ok_and(|f| f == 0.0),
        Kind::Str(s) => s.is_empty(),
        Kind::Seq(items) => items.is_empty(),
        Kind::Map(entries) => entries.is_empty(),
    }
}

/// A JSON vars file: an object (lines taken from `root`, the same text read as YAML, when it reads).
fn json_vars(json: Value, root: Option<&Node>, diags: &mut FileDiags<'_>) -> Option<VarMap> {
    let object = match json {
        Value::Object(object) => object,
        Value::Null | Value::Bool(false) => return Some(VarMap::new()),
        Value::Number(n) if n.as_f64() == Some(0.0) => return Some(VarMap::new()),
        Value::String(s) if s.is_empty() => return Some(VarMap::new()),
        Value::Array(a) if a.is_empty() => return Some(VarMap::new()),
        other => {
            let kind = match other {
                Value::Array(_) => "a list",
                Value::String(_) => "a string",
                _ => "a scalar",
            };
            diags.error_at(
                1,
                1,
                format!("a vars file must be a mapping of variable names to values, not {kind}: write a JSON object"),
            );
            return None;
        }
    };
    let lines: BTreeMap<String, usize> = root
        .and_then(|root| match &root.kind {
            Kind::Map(entries) => Some(entries.iter().map(|(k, _)| (key_text(k), k.line)).collect()),
            _ => None,
        })
        .unwrap_or_default();
    Some(
        object
            .into_iter()
            .map(|(name, value)| {
                let line = lines.get(&name).copied();
                let value = if holds_json_vault(&value) {
                    Known::Unknown(Unknown::Vault)
                } else {
                    judge(value)
                };
                (name, Var { value, line })
            })
            .collect(),
    )
}

/// True when a JSON value holds `{"__ansible_vault": ...}`, ansible's JSON form of a vault value.
fn holds_json_vault(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.contains_key("__ansible_vault") || map.values().any(holds_json_vault),
        Value::Array(items) => items.iter().any(holds_json_vault),
        _ => false,
    }
}

/// The files of a cluster directory under `group_vars/` or `host_vars/`, as a tree.
#[derive(Debug, Default)]
pub(crate) struct Tree {
    entries: BTreeMap<String, Entry>,
}

#[derive(Debug)]
enum Entry {
    File,
    Dir(Tree),
}

impl Tree {
    /// The tree of the paths under `prefix/` (e.g. `group_vars`) among `paths`.
    pub fn new<'a>(prefix: &str, paths: impl IntoIterator<Item = &'a str>) -> Tree {
        let mut tree = Tree::default();
        for path in paths {
            let Some(rest) = path.strip_prefix(prefix).and_then(|r| r.strip_prefix('/')) else {
                continue;
            };
            let mut node = &mut tree;
            let mut parts = rest.split('/').filter(|p| !p.is_empty()).peekable();
            while let Some(part) = parts.next() {
                if parts.peek().is_none() {
                    node.entries.entry(part.to_string()).or_insert(Entry::File);
                } else {
                    let entry = node
                        .entries
                        .entry(part.to_string())
                        .or_insert_with(|| Entry::Dir(Tree::default()));
                    match entry {
                        Entry::Dir(dir) => node = dir,
                        // A path cannot name a file and a directory at once.
                        Entry::File => break,
                    }
                }
            }
        }
        tree
    }

    /// The top-level entries: (entry name, the group or host name ansible would find it for).
    pub fn names(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.keys().map(|entry| {
            let name = EXTENSIONS
                .iter()
                .find_map(|ext| entry.strip_suffix(ext))
                .unwrap_or(entry);
            (entry.as_str(), name)
        })
    }

    /// The files ansible reads for entity `name` (paths relative to this tree), in order, and the entries
    /// it passes over because an earlier form matched (`all/` hides `all.yml`).
    pub fn files_for(&self, name: &str) -> (Vec<String>, Vec<String>) {
        let mut found = Vec::new();
        let mut hidden = Vec::new();
        let mut matched = false;
        for ext in std::iter::once("").chain(EXTENSIONS) {
            let candidate = format!("{name}{ext}");
            let Some(entry) = self.entries.get(&candidate) else {
                continue;
            };
            if matched {
                hidden.push(candidate);
                continue;
            }
            matched = true;
            match entry {
                Entry::File => found.push(candidate),
                Entry::Dir(dir) => dir.walk(&candidate, &mut found),
            }
        }
        (found, hidden)
    }

    /// ansible's `_get_dir_vars_files`: sorted names, hidden and `~` files skipped, directories without
    /// an extension entered, files with no extension or a vars extension kept.
    fn walk(&self, prefix: &str, out: &mut Vec<String>) {
        for (name, entry) in &self.entries {
            if name.starts_with('.') || name.ends_with('~') {
                continue;
            }
            let ext = extension(name);
            let path = format!("{prefix}/{name}");
            match entry {
                Entry::Dir(dir) if ext.is_empty() => dir.walk(&path, out),
                Entry::File if ext.is_empty() || EXTENSIONS.contains(&ext) => out.push(path),
                _ => {}
            }
        }
    }
}

/// Python's `os.path.splitext(name)[1]`.
fn extension(name: &str) -> &str {
    let stem_start = name.len() - name.trim_start_matches('.').len();
    match name[stem_start..].rfind('.') {
        Some(dot) => &name[stem_start + dot..],
        None => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Diagnostic;
    use serde_json::json;

    fn read(text: &str) -> (Option<VarsFile>, Vec<Diagnostic>) {
        let mut out = Vec::new();
        let file = parse_vars_file(
            text,
            None,
            &mut FileDiags::new("group_vars/all.yml", None, &mut out),
        );
        (file, out)
    }

    fn vars(text: &str) -> BTreeMap<String, (Known, Option<usize>)> {
        let (file, diags) = read(text);
        assert!(
            diags.iter().all(|d| d.severity != crate::Severity::Error),
            "{diags:?}"
        );
        match file.unwrap() {
            VarsFile::Vars(vars) => vars.into_iter().map(|(k, v)| (k, (v.value, v.line))).collect(),
            VarsFile::Vault => panic!("vault"),
        }
    }

    #[test]
    fn a_yaml_file_sets_typed_variables_with_their_lines() {
        let v = vars("# comment\nkube_version: v1.31.4\nflag: yes\nmode: 0644\n");
        assert_eq!(v["kube_version"], (Known::Value(json!("v1.31.4")), Some(2)));
        assert_eq!(v["flag"].0, Known::Value(json!(true)));
        assert_eq!(v["mode"].0, Known::Value(json!(420)));
    }

    #[test]
    fn json_is_read_as_json_first() {
        let v = vars("{\"a\": 1e3,\n \"b\": {\"__ansible_vault\": \"$ANSIBLE_VAULT;1.1\"}}\n");
        assert_eq!(v["a"], (Known::Value(json!(1000.0)), Some(1)));
        assert_eq!(v["b"].0, Known::Unknown(Unknown::Vault));
    }

    #[test]
    fn empty_files_set_nothing_and_vault_files_are_recognised() {
        assert!(vars("").is_empty());
        assert!(vars("# only a comment\n").is_empty());
        assert!(vars("---\n").is_empty());
        assert!(vars("[]\n").is_empty());
        assert_eq!(read("$ANSIBLE_VAULT;1.1;AES256\n6162\n").0, Some(VarsFile::Vault));
    }

    #[test]
    fn a_file_that_is_not_a_mapping_is_refused() {
        let (file, diags) = read("- a\n- b\n");
        assert_eq!(file, None);
        assert_eq!(
            diags[0].to_string(),
            "group_vars/all.yml:1:1: a vars file must be a mapping of variable names to values, not a list: \
             write `name: value` lines"
        );
        assert!(read("[1]").1[0]
            .message
            .contains("not a list: write a JSON object"));
        assert!(read("a: [\n").1[0].message.contains("YAML syntax error"));
    }

    #[test]
    fn duplicate_keys_warn_and_the_last_wins() {
        let (file, diags) = read("a: 1\na: 2\n");
        assert_eq!(diags.len(), 1);
        assert_eq!(diags[0].severity, crate::Severity::Warning);
        let Some(VarsFile::Vars(vars)) = file else {
            panic!()
        };
        assert_eq!(vars["a"].value, Known::Value(json!(2)));
        assert_eq!(vars["a"].line, Some(2));
    }

    #[test]
    fn files_are_found_as_ansible_finds_them() {
        let paths = [
            "group_vars/all/b.yml",
            "group_vars/all/a.yaml",
            "group_vars/all/sub/z.yml",
            "group_vars/all/.hidden.yml",
            "group_vars/all/backup.yml~",
            "group_vars/all/notes.txt",
            "group_vars/all/plain",
            "group_vars/all/sub.d/x.yml",
            "group_vars/all.yml",
            "group_vars/etcd.yaml",
            "group_vars/etcd.json",
            "host_vars/node1.yml",
        ];
        let tree = Tree::new("group_vars", paths);
        let (files, hidden) = tree.files_for("all");
        assert_eq!(files, ["all/a.yaml", "all/b.yml", "all/plain", "all/sub/z.yml"]);
        assert_eq!(hidden, ["all.yml"]);
        assert_eq!(
            tree.files_for("etcd"),
            (vec!["etcd.yaml".to_string()], vec!["etcd.json".to_string()])
        );
        assert_eq!(tree.files_for("kube_node"), (vec![], vec![]));
        let names: Vec<&str> = tree.names().map(|(_, name)| name).collect();
        assert_eq!(names, ["all", "all", "etcd", "etcd"]);
        assert_eq!(extension(".hidden"), "");
        assert_eq!(extension("a.tar.gz"), ".gz");
    }
}
