//! Walking a repository tree: kok.yml, the cluster root, each cluster directory and its four files.

use std::collections::BTreeMap;

use super::diag::{parse_yaml, read_text, FileDiags};
use super::inventory::parse_inventory;
use super::names::{dns1123_label_problem, hint};
use super::operations::parse_operations;
use super::settings::{merge_settings, parse_settings};
use super::{ClusterDir, Diagnostic, Entry, EntryKind, Parsed, Settings, Severity, TreeReader};

/// Name of the repo-wide settings file at the top of the tree.
pub const KOK_YML: &str = "kok.yml";
/// The inventory file of a cluster directory (required).
pub const HOSTS_YML: &str = "hosts.yml";
/// The variables file of a cluster directory (required).
pub const VARS_YML: &str = "vars.yml";
/// The operations file of a cluster directory (optional).
pub const OPERATIONS_YML: &str = "operations.yml";
/// The settings file of a cluster directory (optional).
pub const CLUSTER_YML: &str = "cluster.yml";
/// Every file kok reads in a cluster directory.
pub const CLUSTER_FILES: &[&str] = &[HOSTS_YML, VARS_YML, OPERATIONS_YML, CLUSTER_YML];
/// Longest cluster directory name.
pub const MAX_CLUSTER_NAME: usize = 40;

/// Parses every cluster directory under `root` (default [`super::DEFAULT_ROOT`]) and the `kok.yml` beside
/// `root` (see [`settings_path`]). A missing root is an error (on the root's path, belonging to no
/// cluster); an empty root is fine. Hidden entries (`.name`) and plain files under the root are ignored.
/// Errors in kok.yml make every cluster invalid, since their settings cannot be known; those diagnostics
/// have `cluster: None`.
pub fn parse_repo(reader: &dyn TreeReader, root: &str) -> Parsed {
    let root = normalize_root(root);
    let mut out = Vec::new();
    let base = repo_settings(reader, &root, &mut out);
    let mut parsed = Parsed::default();
    let shown_root = if root.is_empty() { "." } else { root.as_str() };
    let mut names = Vec::new();
    {
        let mut d = FileDiags::new(shown_root, None, &mut out);
        match reader.kind(&root) {
            Ok(Some(EntryKind::Dir)) => match reader.list(&root) {
                Ok(entries) => {
                    for entry in entries.into_iter().filter(|e| !e.name.starts_with('.')) {
                        match entry.kind {
                            // Links and submodules are reported by parse_cluster, not skipped silently.
                            EntryKind::Dir | EntryKind::Symlink | EntryKind::Other => names.push(entry.name),
                            EntryKind::File => {}
                        }
                    }
                }
                Err(err) => d.error_at(0, 0, format!("could not list the cluster directories: {err}")),
            },
            Ok(None) => d.error_at(
                0,
                0,
                format!(
                    "directory \"{shown_root}\" not found: create it with one directory per cluster, \
                     or point --path at the directory that holds them"
                ),
            ),
            Ok(Some(EntryKind::Symlink)) => d.error_at(
                0,
                0,
                "the cluster root is a symbolic link: kok does not follow links; commit the directory itself",
            ),
            Ok(Some(_)) => d.error_at(
                0,
                0,
                "the cluster root is not a directory: point --path at a directory",
            ),
            Err(err) => d.error_at(0, 0, format!("could not read the cluster root: {err}")),
        }
    }
    for name in names {
        parse_cluster(reader, &root, &name, base.as_ref(), &mut parsed, &mut out);
    }
    finish(parsed, out)
}

/// Parses only the cluster directories `names` under `root` (and kok.yml), for incremental updates.
/// A named directory that does not exist (or is not a directory) is simply absent from the result.
pub fn parse_clusters(reader: &dyn TreeReader, root: &str, names: &[String]) -> Parsed {
    let root = normalize_root(root);
    let mut out = Vec::new();
    let base = repo_settings(reader, &root, &mut out);
    let mut parsed = Parsed::default();
    let mut names: Vec<&String> = names.iter().collect();
    names.sort();
    names.dedup();
    for name in names {
        let path = join(&root, name);
        if name.is_empty() || name.contains('/') {
            continue;
        }
        if let Ok(Some(EntryKind::Dir | EntryKind::Symlink | EntryKind::Other)) = reader.kind(&path) {
            parse_cluster(reader, &root, name, base.as_ref(), &mut parsed, &mut out);
        }
    }
    finish(parsed, out)
}

/// Where kok.yml is for the cluster root `root`: beside it, in the directory that holds it. For the
/// default root `clusters` that is the top of the repository; for `infra/clusters` it is
/// `infra/kok.yml`, so that one repository can hold several kok layouts.
pub fn settings_path(root: &str) -> String {
    let root = normalize_root(root);
    match root.rsplit_once('/') {
        Some((parent, _)) => join(parent, KOK_YML),
        None => KOK_YML.to_string(),
    }
}

/// The directory holding kok.yml and the cluster root, for a cluster directory path such as
/// `infra/clusters/prod-bj` (→ `infra`) or `clusters/prod-bj` (→ `""`, the repository's top).
/// Local mode runs playbooks kept in the repository from there.
pub fn layout_root(cluster_path: &str) -> &str {
    let path = cluster_path.trim_matches('/');
    let root = path.rsplit_once('/').map_or("", |(parent, _)| parent);
    root.rsplit_once('/').map_or("", |(parent, _)| parent)
}

/// Reads and validates the kok.yml of the cluster root `root` alone (defaults when absent); `Err` holds
/// its error diagnostics.
pub fn parse_repo_settings(reader: &dyn TreeReader, root: &str) -> Result<Settings, Vec<Diagnostic>> {
    let mut out = Vec::new();
    match repo_settings(reader, &normalize_root(root), &mut out) {
        Some(settings) => Ok(settings),
        None => Err(out),
    }
}

/// kok.yml's settings, or `None` when it has errors (reported into `out`).
fn repo_settings(reader: &dyn TreeReader, root: &str, out: &mut Vec<Diagnostic>) -> Option<Settings> {
    let before = error_count(out);
    let mut settings = Settings::default();
    let path = settings_path(root);
    let misspelled = format!("{}.yaml", path.trim_end_matches(".yml"));
    if let Ok(Some(_)) = reader.kind(&misspelled) {
        FileDiags::new(&misspelled, None, out).error_at(
            0,
            0,
            "kok reads kok.yml, not kok.yaml: rename the file to kok.yml",
        );
    }
    let mut d = FileDiags::new(&path, None, out);
    match reader.kind(&path) {
        Ok(None) => {}
        Ok(Some(EntryKind::File)) => {
            if let Some(text) = read_text(reader, &mut d) {
                settings = parse_settings(&text, &path, &mut d);
            }
        }
        Ok(Some(kind)) => d.error_at(0, 0, not_a_file(kind)),
        Err(err) => d.error_at(0, 0, format!("could not read the file: {err}")),
    }
    (error_count(out) == before).then_some(settings)
}

fn not_a_file(kind: EntryKind) -> String {
    match kind {
        EntryKind::Symlink => {
            "file is a symbolic link: kok does not follow links; commit the file itself in its place"
                .to_string()
        }
        _ => "must be a regular file: replace it with a file".to_string(),
    }
}

fn error_count(out: &[Diagnostic]) -> usize {
    out.iter().filter(|d| d.severity == Severity::Error).count()
}

fn normalize_root(root: &str) -> String {
    let trimmed = root.trim_matches('/');
    let trimmed = trimmed.strip_prefix("./").unwrap_or(trimmed);
    if trimmed == "." {
        String::new()
    } else {
        trimmed.to_string()
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

fn finish(mut parsed: Parsed, mut out: Vec<Diagnostic>) -> Parsed {
    parsed.clusters.sort_by(|a, b| a.name.cmp(&b.name));
    parsed.invalid.sort();
    parsed.invalid.dedup();
    out.sort();
    out.dedup();
    parsed.diagnostics = out;
    parsed
}

/// Parses one cluster directory; a valid one lands in `parsed.clusters`, an invalid one in `parsed.invalid`.
fn parse_cluster(
    reader: &dyn TreeReader,
    root: &str,
    name: &str,
    base: Option<&Settings>,
    parsed: &mut Parsed,
    out: &mut Vec<Diagnostic>,
) {
    let before = error_count(out);
    let dir = join(root, name);
    let cluster = Some(name);
    {
        let mut d = FileDiags::new(dir.clone(), cluster, out);
        if let Some(problem) = dns1123_label_problem(name, MAX_CLUSTER_NAME) {
            d.error_at(
                0,
                0,
                format!(
                    "cluster directory name \"{name}\" is not a DNS-1123 label of at most {MAX_CLUSTER_NAME} \
                     characters: {problem}; rename the directory"
                ),
            );
        }
        match reader.kind(&dir) {
            Ok(Some(EntryKind::Dir)) => {}
            Ok(Some(EntryKind::Symlink)) => {
                d.error_at(
                    0,
                    0,
                    "cluster directory is a symbolic link: kok does not follow links; commit the directory itself",
                );
                parsed.invalid.push(name.to_string());
                return;
            }
            _ => {
                d.error_at(
                    0,
                    0,
                    "cluster directory is not a directory (a git submodule?): kok reads only files committed \
                     in this repository; commit the cluster's files here",
                );
                parsed.invalid.push(name.to_string());
                return;
            }
        }
    }
    let Some((entries, mut files)) = read_cluster_files(reader, &dir, cluster, out) else {
        parsed.invalid.push(name.to_string());
        return;
    };

    let mut inventory = None;
    match files.get(HOSTS_YML) {
        Some(text) => {
            let mut d = FileDiags::new(join(&dir, HOSTS_YML), cluster, out);
            let start = d.error_count();
            let inv = parse_inventory(text, &mut d);
            if d.error_count() == start {
                inventory = inv;
            }
        }
        None if !entries.iter().any(|e| e.name == HOSTS_YML) => {
            FileDiags::new(join(&dir, HOSTS_YML), cluster, out).error_at(
                0,
                0,
                "hosts.yml is missing: add the cluster's ansible inventory (all: hosts/children) in this file",
            );
        }
        None => {}
    }
    match files.get(VARS_YML) {
        Some(text) => check_vars(text, &mut FileDiags::new(join(&dir, VARS_YML), cluster, out)),
        None if !entries.iter().any(|e| e.name == VARS_YML) => {
            FileDiags::new(join(&dir, VARS_YML), cluster, out).error_at(
                0,
                0,
                "vars.yml is missing: add the cluster's variables as a mapping in this file (`{}` for none)",
            );
        }
        None => {}
    }
    let operations = files
        .get(OPERATIONS_YML)
        .map(|text| {
            parse_operations(
                text,
                inventory.as_ref(),
                &mut FileDiags::new(join(&dir, OPERATIONS_YML), cluster, out),
            )
        })
        .unwrap_or_default();
    let cluster_settings = files
        .get(CLUSTER_YML)
        .map(|text| {
            parse_settings(
                text,
                CLUSTER_YML,
                &mut FileDiags::new(join(&dir, CLUSTER_YML), cluster, out),
            )
        })
        .unwrap_or_default();

    let valid = error_count(out) == before;
    match (
        valid,
        base,
        inventory,
        files.remove(HOSTS_YML),
        files.remove(VARS_YML),
    ) {
        (true, Some(base), Some(inventory), Some(hosts_yml), Some(vars_yml)) => {
            parsed.clusters.push(ClusterDir {
                name: name.to_string(),
                path: dir,
                hosts_yml,
                vars_yml,
                inventory,
                operations,
                settings: merge_settings(base, &cluster_settings),
            });
        }
        _ => parsed.invalid.push(name.to_string()),
    }
}

/// Lists a cluster directory and reads the files kok knows; reports symlinks, misnamed and unknown
/// YAML files and ansible's group_vars/host_vars. `None` when the directory cannot be listed.
fn read_cluster_files(
    reader: &dyn TreeReader,
    dir: &str,
    cluster: Option<&str>,
    out: &mut Vec<Diagnostic>,
) -> Option<(Vec<Entry>, BTreeMap<&'static str, String>)> {
    let entries = match reader.list(dir) {
        Ok(entries) => entries,
        Err(err) => {
            FileDiags::new(dir, cluster, out).error_at(0, 0, format!("could not list the directory: {err}"));
            return None;
        }
    };
    let mut files: BTreeMap<&'static str, String> = BTreeMap::new();
    for entry in &entries {
        let path = join(dir, &entry.name);
        let mut d = FileDiags::new(path, cluster, out);
        if let Some(known) = CLUSTER_FILES.iter().find(|f| **f == entry.name) {
            if entry.kind == EntryKind::File {
                if let Some(text) = read_text(reader, &mut d) {
                    files.insert(*known, text);
                }
            } else {
                d.error_at(0, 0, not_a_file(entry.kind));
            }
        } else if entry.kind == EntryKind::Symlink {
            d.error_at(0, 0, not_a_file(entry.kind));
        } else if entry.kind == EntryKind::Dir && matches!(entry.name.as_str(), "group_vars" | "host_vars") {
            d.error_at(
                0,
                0,
                format!(
                    "kok does not read {}/: put group variables in vars.yml and host variables under the host \
                     in hosts.yml",
                    entry.name
                ),
            );
        } else if entry.kind == EntryKind::File {
            if let Some(stem) = entry.name.strip_suffix(".yaml") {
                let wanted = format!("{stem}.yml");
                if CLUSTER_FILES.contains(&wanted.as_str()) {
                    d.error_at(
                        0,
                        0,
                        format!(
                            "kok reads {wanted}, not {}: rename the file to {wanted}",
                            entry.name
                        ),
                    );
                    continue;
                }
            }
            if entry.name.ends_with(".yml") || entry.name.ends_with(".yaml") {
                let mut msg = format!(
                    "unknown file in a cluster directory: kok reads only {}",
                    CLUSTER_FILES.join(", ")
                );
                msg.push_str(&hint(&entry.name, CLUSTER_FILES));
                d.error_at(0, 0, msg);
            }
        }
    }

    Some((entries, files))
}

/// vars.yml must be a YAML mapping, the group variables of `all` (an empty file is refused: write `{}`).
fn check_vars(text: &str, d: &mut FileDiags<'_>) {
    match parse_yaml(text, d) {
        Err(()) => {}
        Ok(None) => d.error_at(
            1,
            1,
            "vars.yml is empty: write `{}` when the cluster has no variables",
        ),
        Ok(Some(root)) if root.is_null() => d.error(
            &root,
            "vars.yml is empty: write `{}` when the cluster has no variables",
        ),
        Ok(Some(root)) if root.as_map().is_none() => d.error(
            &root,
            format!(
                "vars.yml must be a mapping of variable names to values, not {}",
                root.type_name()
            ),
        ),
        Ok(Some(_)) => {}
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::layout::{Entry, ReadError};

    /// path → (kind, content); directories are implied by the paths of their files.
    #[derive(Default)]
    struct Mem(BTreeMap<String, (EntryKind, String)>);

    impl Mem {
        fn with(mut self, path: &str, kind: EntryKind, text: &str) -> Self {
            self.0.insert(path.to_string(), (kind, text.to_string()));
            self
        }
        fn file(self, path: &str, text: &str) -> Self {
            self.with(path, EntryKind::File, text)
        }
        fn good(self, name: &str) -> Self {
            self.file(&format!("clusters/{name}/hosts.yml"), "all:\n  hosts:\n    n1:\n")
                .file(&format!("clusters/{name}/vars.yml"), "{}\n")
        }
    }

    impl TreeReader for Mem {
        fn list(&self, path: &str) -> Result<Vec<Entry>, ReadError> {
            let prefix = format!("{path}/");
            let mut out: BTreeMap<String, EntryKind> = BTreeMap::new();
            for (key, (kind, _)) in &self.0 {
                if let Some(rest) = key.strip_prefix(&prefix) {
                    match rest.split_once('/') {
                        Some((dir, _)) => out.insert(dir.to_string(), EntryKind::Dir),
                        None => out.insert(rest.to_string(), *kind),
                    };
                }
            }
            Ok(out.into_iter().map(|(name, kind)| Entry { name, kind }).collect())
        }
        fn read(&self, path: &str, _limit: u64) -> Result<Vec<u8>, ReadError> {
            self.0
                .get(path)
                .map(|(_, t)| t.as_bytes().to_vec())
                .ok_or_else(|| ReadError::NotFound {
                    path: path.to_string(),
                })
        }
        fn kind(&self, path: &str) -> Result<Option<EntryKind>, ReadError> {
            if let Some((kind, _)) = self.0.get(path) {
                return Ok(Some(*kind));
            }
            let prefix = format!("{path}/");
            Ok(self
                .0
                .keys()
                .any(|k| k.starts_with(&prefix))
                .then_some(EntryKind::Dir))
        }
    }

    fn messages(parsed: &Parsed) -> Vec<String> {
        parsed.diagnostics.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn cluster_directory_names_must_be_short_dns_labels() {
        let parsed = parse_repo(
            &Mem::default().good("Prod").good(&"a".repeat(41)).good("ok"),
            "clusters",
        );
        assert_eq!(parsed.invalid, ["Prod".to_string(), "a".repeat(41)]);
        assert_eq!(parsed.clusters.len(), 1);
        assert!(messages(&parsed)[0].starts_with("clusters/Prod:0:0: cluster directory name \"Prod\""));
        assert!(messages(&parsed)[1].contains("41 characters long"));
    }

    #[test]
    fn hosts_and_vars_are_required() {
        let parsed = parse_repo(
            &Mem::default().file("clusters/a/operations.yml", "[]\n"),
            "clusters",
        );
        assert_eq!(
            messages(&parsed),
            [
                "clusters/a/hosts.yml:0:0: hosts.yml is missing: add the cluster's ansible inventory (all: hosts/children) in this file",
                "clusters/a/vars.yml:0:0: vars.yml is missing: add the cluster's variables as a mapping in this file (`{}` for none)",
            ]
        );
    }

    #[test]
    fn vars_must_be_a_non_empty_mapping() {
        for (text, want) in [
            ("", "write `{}`"),
            ("~\n", "write `{}`"),
            ("- a\n", "not a list"),
            ("a: [\n", "syntax"),
        ] {
            let parsed = parse_repo(
                &Mem::default().good("a").file("clusters/a/vars.yml", text),
                "clusters",
            );
            assert!(
                messages(&parsed)[0].contains(want),
                "{text:?}: {:?}",
                messages(&parsed)
            );
        }
    }

    #[test]
    fn symlinks_are_refused_wherever_they_are() {
        let tree = Mem::default()
            .good("a")
            .with("clusters/a/cluster.yml", EntryKind::Symlink, "")
            .with("clusters/a/notes.txt", EntryKind::Symlink, "")
            .with("clusters/b", EntryKind::Symlink, "")
            .with("kok.yml", EntryKind::Symlink, "");
        let parsed = parse_repo(&tree, "clusters");
        let m = messages(&parsed);
        assert_eq!(parsed.invalid, ["a", "b"]);
        assert!(
            m.iter()
                .any(|l| l.starts_with("clusters/a/cluster.yml:0:0: file is a symbolic link")),
            "{m:?}"
        );
        assert!(
            m.iter()
                .any(|l| l.starts_with("clusters/a/notes.txt:0:0: file is a symbolic link")),
            "{m:?}"
        );
        assert!(
            m.iter()
                .any(|l| l.starts_with("clusters/b:0:0: cluster directory is a symbolic link")),
            "{m:?}"
        );
        assert!(
            m.iter()
                .any(|l| l.starts_with("kok.yml:0:0: file is a symbolic link")),
            "{m:?}"
        );
    }

    #[test]
    fn unknown_yaml_files_are_errors_and_other_files_are_ignored() {
        let tree = Mem::default()
            .good("a")
            .file("clusters/a/README.md", "# a\n")
            .file("clusters/a/opertions.yml", "[]\n")
            .file("clusters/a/cluster.yaml", "{}\n");
        let m = messages(&parse_repo(&tree, "clusters"));
        assert_eq!(
            m,
            [
                "clusters/a/cluster.yaml:0:0: kok reads cluster.yml, not cluster.yaml: rename the file to cluster.yml",
                "clusters/a/opertions.yml:0:0: unknown file in a cluster directory: kok reads only hosts.yml, vars.yml, operations.yml, cluster.yml; did you mean \"operations.yml\"?",
            ]
        );
    }

    #[test]
    fn group_vars_directories_are_refused_with_a_hint() {
        let m = messages(&parse_repo(
            &Mem::default()
                .good("a")
                .file("clusters/a/host_vars/n1.yml", "{}\n"),
            "clusters",
        ));
        assert_eq!(m.len(), 1);
        assert!(
            m[0].starts_with("clusters/a/host_vars:0:0: kok does not read host_vars/"),
            "{m:?}"
        );
    }

    #[test]
    fn a_submodule_in_place_of_a_cluster_directory_is_refused() {
        let parsed = parse_repo(
            &Mem::default().good("a").with("clusters/b", EntryKind::Other, ""),
            "clusters",
        );
        assert_eq!(parsed.invalid, ["b"]);
        assert!(messages(&parsed)[0]
            .starts_with("clusters/b:0:0: cluster directory is not a directory (a git submodule?)"));
    }

    #[test]
    fn a_missing_root_is_an_error_on_the_root() {
        let m = messages(&parse_repo(&Mem::default().good("a"), "envs"));
        assert_eq!(m.len(), 1);
        assert!(
            m[0].starts_with("envs:0:0: directory \"envs\" not found"),
            "{m:?}"
        );
    }

    #[test]
    fn roots_are_normalized() {
        assert_eq!(normalize_root("./clusters/"), "clusters");
        assert_eq!(normalize_root("."), "");
        assert_eq!(normalize_root("/a/b"), "a/b");
    }
}
