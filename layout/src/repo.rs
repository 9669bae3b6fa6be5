//! Walking a repository tree: kok.yml, the cluster root, each cluster directory and its four files.

use std::collections::BTreeMap;

use super::ansible::{read_parsed_inventory_dir, InventorySource};
use super::diag::{error_count, join, parse_yaml, read_text, FileDiags};
use super::names::{dns1123_label_problem, hint};
use super::operations::parse_operations;
use super::playbooks::read_repository_files;
use super::rollouts::{parse_rollouts, Fleet};
use super::settings::{merge_settings, parse_settings};
use super::yaml::Node;
use super::{ClusterDir, Diagnostic, Entry, EntryKind, InventoryDir, Parsed, Settings, TreeReader};
use crate::spec::VARS_INVENTORY_PATH;

/// Name of the repo-wide settings file at the top of the tree.
pub const KOK_YML: &str = "kok.yml";
/// kok's inventory file of a cluster directory (ansible's YAML inventory).
pub const HOSTS_YML: &str = "hosts.yml";
/// kubespray's older name of the YAML inventory.
pub const HOSTS_YAML: &str = "hosts.yaml";
/// kubespray's inventory file (ansible's INI inventory).
pub const INVENTORY_INI: &str = "inventory.ini";
/// The names a cluster directory's inventory file may have: exactly one of them is required.
pub const INVENTORY_FILES: &[&str] = &[INVENTORY_INI, HOSTS_YML, HOSTS_YAML];
/// The variables file of a cluster directory (optional): kok's shorthand for `group_vars/all.yml`.
pub const VARS_YML: &str = "vars.yml";
/// The operations file of a cluster directory (optional).
pub const OPERATIONS_YML: &str = "operations.yml";
/// The settings file of a cluster directory (optional).
pub const CLUSTER_YML: &str = "cluster.yml";
/// Every file kok reads at the top of a cluster directory.
pub const CLUSTER_FILES: &[&str] = &[
    INVENTORY_INI,
    HOSTS_YML,
    HOSTS_YAML,
    VARS_YML,
    OPERATIONS_YML,
    CLUSTER_YML,
];
/// The directories of variables ansible reads beside the inventory file.
pub const VARS_DIRS: &[&str] = &["group_vars", "host_vars"];
/// Most bytes the files ansible reads in one cluster directory may hold together: what one ConfigMap holds.
pub const MAX_INVENTORY_BYTES: usize = 1 << 20;
/// Extensions ansible reads in group_vars/ and host_vars/ (besides none at all).
const VARS_EXTENSIONS: &[&str] = &["yml", "yaml", "json"];
/// Start of a file that ansible-vault encrypted as a whole.
pub const VAULT_FILE_HEADER: &str = "$ANSIBLE_VAULT;";
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
    let fleet = Fleet::new(&parsed.clusters, &parsed.invalid);
    let rollouts = parse_rollouts(reader, &root, &fleet, &mut out);
    parsed.rollouts = rollouts;
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

fn normalize_root(root: &str) -> String {
    let trimmed = root.trim_matches('/');
    let trimmed = trimmed.strip_prefix("./").unwrap_or(trimmed);
    if trimmed == "." {
        String::new()
    } else {
        trimmed.to_string()
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
    let readable = check_cluster_dir(reader, &dir, name, out);
    let Some(mut read) = readable
        .then(|| read_cluster_files(reader, &dir, cluster, out))
        .flatten()
    else {
        parsed.invalid.push(name.to_string());
        return;
    };
    let inventory_file = inventory_file_of(&read.entries, &dir, cluster, out);
    let vars_doc = check_vars_yml(&read, &dir, cluster, out);
    let inventory =
        inventory_file.and_then(|file| cluster_inventory(&read, file, vars_doc, &dir, cluster, out));
    check_cluster_size(&read, &dir, cluster, out);
    let inventory_only = inventory.as_ref().map(|(inventory, _)| inventory);
    let operations = parsed_file(&read, OPERATIONS_YML, &dir, cluster, out, |text, d| {
        parse_operations(text, inventory_only, d)
    });
    let cluster_settings = parsed_file(&read, CLUSTER_YML, &dir, cluster, out, |text, d| {
        parse_settings(text, CLUSTER_YML, d)
    });
    let files = &mut read.files;
    if base.is_some_and(|b| {
        merge_settings(b, &cluster_settings)
            .vault_password_secret
            .is_none()
    }) {
        check_vault(&dir, files.get(VARS_YML), &read.vars_files, cluster, out);
    }

    let repository_files = read_repository_files(
        reader,
        layout_root(&dir),
        &operations,
        &mut FileDiags::new(join(&dir, OPERATIONS_YML), cluster, out),
    );

    let valid = error_count(out) == before;
    let hosts_yml = inventory_file.and_then(|file| files.remove(file));
    match (valid, base, inventory, inventory_file, hosts_yml) {
        (true, Some(base), Some((inventory, kubespray)), Some(file), Some(hosts_yml)) => {
            parsed.clusters.push(ClusterDir {
                name: name.to_string(),
                path: dir,
                inventory_dir: InventoryDir {
                    inventory_file: file.to_string(),
                    hosts_yml,
                    vars_yml: files.remove(VARS_YML),
                    vars_files: read.vars_files,
                },
                inventory,
                operations,
                settings: merge_settings(base, &cluster_settings),
                kubespray: Some(kubespray),
                repository_files,
            });
        }
        _ => parsed.invalid.push(name.to_string()),
    }
}

/// The inventory of the cluster in `dir` from its inventory `file`, with vars.yml when validation gave its
/// document `vars_doc`, and its group_vars/ and host_vars/; `None` when it has errors (reported into `out`).
fn cluster_inventory(
    read: &ClusterFiles,
    file: &str,
    vars_doc: Option<Node>,
    dir: &str,
    cluster: Option<&str>,
    out: &mut Vec<Diagnostic>,
) -> Option<(super::Inventory, super::KubesprayView)> {
    let text = read.files.get(file)?;
    // A broken vars.yml is reported above; with group_vars/all beside it (refused above), ansible
    // would pass over it: said once.
    let vars_yml = read.files.get(VARS_YML).zip(vars_doc);
    resolve_cluster_inventory(dir, cluster, file, text, vars_yml, &read.vars_files, out)
}

/// The cluster file `name` as `parse` reads it, its problems reported against its path; the default
/// when the cluster has no such file.
fn parsed_file<T: Default>(
    read: &ClusterFiles,
    name: &str,
    dir: &str,
    cluster: Option<&str>,
    out: &mut Vec<Diagnostic>,
    parse: impl FnOnce(&str, &mut FileDiags<'_>) -> T,
) -> T {
    read.files
        .get(name)
        .map(|text| parse(text, &mut FileDiags::new(join(dir, name), cluster, out)))
        .unwrap_or_default()
}

/// Checks the cluster directory `dir`'s name (reported when it is not a DNS-1123 label) and that it is a
/// directory; whether its files can be read (reported when it cannot).
fn check_cluster_dir(reader: &dyn TreeReader, dir: &str, name: &str, out: &mut Vec<Diagnostic>) -> bool {
    let mut d = FileDiags::new(dir.to_string(), Some(name), out);
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
    match reader.kind(dir) {
        Ok(Some(EntryKind::Dir)) => true,
        Ok(Some(EntryKind::Symlink)) => {
            d.error_at(
                0,
                0,
                "cluster directory is a symbolic link: kok does not follow links; commit the directory itself",
            );
            false
        }
        _ => {
            d.error_at(
                0,
                0,
                "cluster directory is not a directory (a git submodule?): kok reads only files committed \
                 in this repository; commit the cluster's files here",
            );
            false
        }
    }
}

/// Checks the cluster's vars.yml, and that group_vars/ holds no variables of `all` beside it; vars.yml's
/// document when it is one the inventory may read (valid, and not refused for group_vars/all).
fn check_vars_yml(
    read: &ClusterFiles,
    dir: &str,
    cluster: Option<&str>,
    out: &mut Vec<Diagnostic>,
) -> Option<Node> {
    let text = read.files.get(VARS_YML)?;
    let doc = check_vars(text, &mut FileDiags::new(join(dir, VARS_YML), cluster, out));
    let Some((path, _)) = read
        .vars_files
        .iter()
        .find(|(path, _)| is_group_vars_of_all(path))
    else {
        return doc;
    };
    // A directory is named as one: `group_vars/all/`.
    let all = match path.match_indices('/').nth(1) {
        Some((i, _)) => &path[..=i],
        None => path.as_str(),
    };
    FileDiags::new(join(dir, VARS_YML), cluster, out).error_at(
        0,
        0,
        format!(
            "vars.yml and {all} both hold the group variables of `all`: keep one of them (move vars.yml's \
             variables into {all} and delete vars.yml, or the other way round)"
        ),
    );
    None
}

/// Reports a cluster directory whose files hold more than [`MAX_INVENTORY_BYTES`], what kok pins for one
/// revision.
fn check_cluster_size(read: &ClusterFiles, dir: &str, cluster: Option<&str>, out: &mut Vec<Diagnostic>) {
    let total: usize = read.files.values().map(String::len).sum::<usize>()
        + read.vars_files.iter().map(|(_, text)| text.len()).sum::<usize>();
    if total > MAX_INVENTORY_BYTES {
        FileDiags::new(dir.to_string(), cluster, out).error_at(
            0,
            0,
            format!(
                "the cluster directory's files hold {} KiB, more than the {} KiB (what one ConfigMap holds) kok \
                 pins for one revision: move bulky data (downloaded files, certificates) out of the repository",
                total.div_ceil(1024),
                MAX_INVENTORY_BYTES / 1024
            ),
        );
    }
}

/// The files of the cluster directory `dir` ansible reads as an inventory directory, read through `reader`
/// without validating them; `None` when it has no single inventory file.
pub fn read_inventory_dir_at(reader: &dyn TreeReader, dir: &str) -> Option<InventoryDir> {
    let mut ignored = Vec::new();
    let mut read = read_cluster_files(reader, dir, None, &mut ignored)?;
    let file = inventory_file_of(&read.entries, dir, None, &mut ignored)?;
    Some(InventoryDir {
        inventory_file: file.to_string(),
        hosts_yml: read.files.remove(file)?,
        vars_yml: read.files.remove(VARS_YML),
        vars_files: read.vars_files,
    })
}

/// The inventory file of a cluster directory: exactly one of [`INVENTORY_FILES`]; reports none or several.
fn inventory_file_of(
    entries: &[Entry],
    dir: &str,
    cluster: Option<&str>,
    out: &mut Vec<Diagnostic>,
) -> Option<&'static str> {
    let present: Vec<&'static str> = INVENTORY_FILES
        .iter()
        .copied()
        .filter(|file| entries.iter().any(|e| e.name == *file))
        .collect();
    match present.as_slice() {
        [one] => Some(one),
        [] => {
            FileDiags::new(join(dir, HOSTS_YML), cluster, out).error_at(
                0,
                0,
                "the cluster directory has no inventory: add the cluster's ansible inventory as hosts.yml \
                 (YAML, all: hosts/children) or inventory.ini (kubespray's INI inventory)",
            );
            None
        }
        [first, rest @ ..] => {
            for other in rest {
                FileDiags::new(join(dir, other), cluster, out).error_at(
                    0,
                    0,
                    format!(
                        "the cluster directory has two inventories, {first} and {other}: ansible reads one; \
                         keep one and delete the other"
                    ),
                );
            }
            None
        }
    }
}

/// Reads the cluster's inventory directory as ansible does (the inventory file, vars.yml as
/// `group_vars/all.yml`, group_vars/ and host_vars/), reporting its problems; its inventory when it has none.
/// `vars_yml` is vars.yml's text and the document validation parsed, read from that document.
fn resolve_cluster_inventory(
    dir: &str,
    cluster: Option<&str>,
    file: &str,
    text: &str,
    vars_yml: Option<(&String, Node)>,
    vars_files: &[(String, String)],
    out: &mut Vec<Diagnostic>,
) -> Option<(super::Inventory, super::KubesprayView)> {
    let mut files = Vec::with_capacity(vars_files.len() + 1);
    let mut parsed = BTreeMap::new();
    let has_vars_yml = vars_yml.is_some();
    if let Some((vars, doc)) = vars_yml {
        files.push((VARS_INVENTORY_PATH.to_string(), vars.clone()));
        parsed.insert(VARS_INVENTORY_PATH, doc);
    }
    files.extend(vars_files.iter().cloned());
    let source = InventorySource {
        dir,
        cluster,
        inventory_name: file,
        inventory_text: text,
        files: &files,
    };
    let mut found = Vec::new();
    let resolved = read_parsed_inventory_dir(&source, parsed, &mut found);
    // vars.yml is read as group_vars/all.yml (which cannot be there beside it): its problems are vars.yml's.
    let as_all = join(dir, VARS_INVENTORY_PATH);
    for mut d in found {
        if has_vars_yml && d.path == as_all {
            d.path = join(dir, VARS_YML);
        }
        out.push(d);
    }
    resolved.map(|r| super::inventory_dir::inventory_and_view(&r, has_vars_yml))
}

/// True for the files of group_vars/ that hold the group variables of `all` (`group_vars/all.yml`,
/// `group_vars/all/...`).
fn is_group_vars_of_all(path: &str) -> bool {
    let Some(rest) = path.strip_prefix("group_vars/") else {
        return false;
    };
    vars_entry_stem(rest.split('/').next().unwrap_or_default()) == Some("all")
}

/// The group or host name a top-level entry of group_vars/ or host_vars/ is for: `all.yml` → `all`,
/// `all` → `all`; `None` for an extension ansible does not read.
fn vars_entry_stem(name: &str) -> Option<&str> {
    match name.rsplit_once('.') {
        Some((stem, ext)) if VARS_EXTENSIONS.contains(&ext) => Some(stem),
        Some(_) => None,
        None => Some(name),
    }
}

/// True when ansible reads a file of this name in group_vars/ and host_vars/: not hidden, not a backup
/// (`~`), and with no extension or one of [`VARS_EXTENSIONS`].
fn ansible_reads(name: &str) -> bool {
    !name.starts_with('.') && !name.ends_with('~') && vars_entry_stem(name).is_some()
}

/// True when `text` is a file that ansible-vault encrypted as a whole.
pub fn is_vault_file(text: &str) -> bool {
    text.trim_start().starts_with(VAULT_FILE_HEADER)
}

/// Where `text` holds an inline vaulted value (`!vault |`): its 1-based line.
fn vault_value_line(text: &str) -> Option<usize> {
    text.lines()
        .position(|line| {
            let line = line.split(" #").next().unwrap_or_default();
            line.split_whitespace().any(|word| word == "!vault")
        })
        .map(|i| i + 1)
}

/// Reports vaulted variables of a cluster that names no `vaultPasswordSecret` (in cluster.yml or kok.yml):
/// ansible cannot read them without the password.
fn check_vault(
    dir: &str,
    vars_yml: Option<&String>,
    vars_files: &[(String, String)],
    cluster: Option<&str>,
    out: &mut Vec<Diagnostic>,
) {
    let files = vars_yml.map(|text| (VARS_YML, text.as_str())).into_iter().chain(
        vars_files
            .iter()
            .map(|(path, text)| (path.as_str(), text.as_str())),
    );
    for (path, text) in files {
        let line = if is_vault_file(text) {
            Some(1)
        } else {
            vault_value_line(text)
        };
        if let Some(line) = line {
            let what = if is_vault_file(text) {
                "the file is encrypted with ansible-vault"
            } else {
                "this value is encrypted with ansible-vault"
            };
            FileDiags::new(join(dir, path), cluster, out).error_at(
                line,
                1,
                format!(
                    "{what}, and the cluster names no vaultPasswordSecret: set `vaultPasswordSecret: <name>` in \
                     cluster.yml or kok.yml and create that Secret with the password under key `password` \
                     (kubectl -n kok-system create secret generic <name> --from-file=password=./vault-pass)"
                ),
            );
        }
    }
}

/// What a cluster directory holds: its entries, kok's files at its top, and the files of group_vars/ and
/// host_vars/ ansible reads, by path inside the directory, sorted.
struct ClusterFiles {
    entries: Vec<Entry>,
    files: BTreeMap<&'static str, String>,
    vars_files: Vec<(String, String)>,
}

/// Lists a cluster directory and reads the files kok knows and the files of group_vars/ and host_vars/;
/// reports symlinks, misnamed and unknown YAML files, and kubespray's credentials/ and artifacts/, which
/// hold secrets. `None` when the directory cannot be listed.
fn read_cluster_files(
    reader: &dyn TreeReader,
    dir: &str,
    cluster: Option<&str>,
    out: &mut Vec<Diagnostic>,
) -> Option<ClusterFiles> {
    let entries = match reader.list(dir) {
        Ok(entries) => entries,
        Err(err) => {
            FileDiags::new(dir, cluster, out).error_at(0, 0, format!("could not list the directory: {err}"));
            return None;
        }
    };
    let mut files: BTreeMap<&'static str, String> = BTreeMap::new();
    let mut vars_files = Vec::new();
    for entry in &entries {
        let path = join(dir, &entry.name);
        if VARS_DIRS.contains(&entry.name.as_str()) {
            if entry.kind == EntryKind::Dir {
                read_vars_dir(reader, dir, &entry.name, cluster, &mut vars_files, out);
            } else {
                FileDiags::new(path, cluster, out).error_at(
                    0,
                    0,
                    format!(
                        "{} must be a directory of variables files, as ansible reads it",
                        entry.name
                    ),
                );
            }
            continue;
        }
        let mut d = FileDiags::new(path, cluster, out);
        if let Some(known) = CLUSTER_FILES.iter().find(|f| **f == entry.name) {
            if entry.kind == EntryKind::File {
                if let Some(text) = read_text(reader, &mut d) {
                    files.insert(*known, text);
                }
            } else {
                d.error_at(0, 0, not_a_file(entry.kind));
            }
        } else if let Some(message) = secrets_directory(&entry.name, cluster.unwrap_or("<cluster>"), dir) {
            d.error_at(0, 0, message);
        } else if entry.kind == EntryKind::Symlink {
            d.error_at(0, 0, not_a_file(entry.kind));
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
                    "unknown file in a cluster directory: kok reads only {} and the directories {}",
                    CLUSTER_FILES.join(", "),
                    VARS_DIRS.join(", ")
                );
                msg.push_str(&hint(&entry.name, CLUSTER_FILES));
                d.error_at(0, 0, msg);
            }
        }
    }
    vars_files.sort();
    Some(ClusterFiles {
        entries,
        files,
        vars_files,
    })
}

/// kubespray's `credentials/` (generated passwords and keys) and `artifacts/` (admin.conf) beside the
/// inventory: refused, with the command that moves each into the Secret kok keeps it in.
fn secrets_directory(name: &str, cluster: &str, dir: &str) -> Option<String> {
    match name {
        "credentials" => Some(format!(
            "credentials/ holds the passwords and keys kubespray generated, and secrets never go to git: \
             move them into Secret {cluster}-credentials, where kok restores and saves them around every run \
             (kubectl -n kok-system create secret generic {cluster}-credentials --from-file={dir}/credentials/), \
             then `git rm -r --cached {dir}/credentials` and rotate what the history exposed"
        )),
        "artifacts" => Some(format!(
            "artifacts/ holds the cluster's admin.conf, and secrets never go to git: move it into Secret \
             {cluster}-kubeconfig, where kok keeps it (kubectl -n kok-system create secret generic \
             {cluster}-kubeconfig --from-file=value={dir}/artifacts/admin.conf), then \
             `git rm -r --cached {dir}/artifacts`"
        )),
        _ => None,
    }
}

/// Reads the files of `group_vars/` or `host_vars/` (`top`) the way ansible does: each entry a file or a
/// directory of files (its subdirectories too), hidden files, backups (`~`) and other extensions skipped.
/// Links and submodules are refused.
fn read_vars_dir(
    reader: &dyn TreeReader,
    cluster_dir: &str,
    top: &str,
    cluster: Option<&str>,
    vars_files: &mut Vec<(String, String)>,
    out: &mut Vec<Diagnostic>,
) {
    let mut todo = vec![top.to_string()];
    while let Some(rel) = todo.pop() {
        let listed = join(cluster_dir, &rel);
        let entries = match reader.list(&listed) {
            Ok(entries) => entries,
            Err(err) => {
                FileDiags::new(listed, cluster, out).error_at(
                    0,
                    0,
                    format!("could not list the directory: {err}"),
                );
                continue;
            }
        };
        for entry in entries {
            if !ansible_reads(&entry.name) {
                continue;
            }
            let inner = format!("{rel}/{}", entry.name);
            let mut d = FileDiags::new(join(cluster_dir, &inner), cluster, out);
            match entry.kind {
                EntryKind::File => {
                    if let Some(text) = read_text(reader, &mut d) {
                        vars_files.push((inner, text));
                    }
                }
                // ansible descends into directories without an extension only.
                EntryKind::Dir if !entry.name.contains('.') => todo.push(inner),
                EntryKind::Dir => {}
                kind => d.error_at(0, 0, not_a_file(kind)),
            }
        }
    }
}

/// vars.yml must be a YAML mapping, the group variables of `all` (an empty file is refused: write `{}`);
/// its document when it has no errors.
fn check_vars(text: &str, d: &mut FileDiags<'_>) -> Option<Node> {
    let start = d.error_count();
    let root = parse_yaml(text, d).ok()?;
    match &root {
        None => d.error_at(
            1,
            1,
            "vars.yml is empty: write `{}` when the cluster has no variables",
        ),
        Some(root) if root.is_null() => d.error(
            root,
            "vars.yml is empty: write `{}` when the cluster has no variables",
        ),
        Some(root) if root.as_map().is_none() => d.error(
            root,
            format!(
                "vars.yml must be a mapping of variable names to values, not {}",
                root.type_name()
            ),
        ),
        Some(_) => {}
    }
    // The duplicate keys parse_yaml reported are errors too.
    root.filter(|_| d.error_count() == start)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::{Entry, ReadError};

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
        /// A cluster in kubespray's layout: inventory.ini with kubespray's groups, no vars.yml.
        fn kubespray(self, name: &str) -> Self {
            self.file(
                &format!("clusters/{name}/inventory.ini"),
                "[kube_control_plane]\nn1\n\n[etcd:children]\nkube_control_plane\n\n[kube_node]\nn2\n",
            )
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
    fn a_broken_rollout_is_refused_alone_and_clusters_and_other_rollouts_go_on() {
        let mem = Mem::default()
            .good("prod")
            .good("dev")
            .file("rollouts/ping.yml", "operation: {id: ping, action: ping.yml}\nclusters: {names: [prod, dev]}\nwaves: [{name: prod, clusters: [prod]}, {name: rest}]\n")
            .file("rollouts/bad.yml", "operation: {id: up, action: up.yml}\nclusters: {names: [gone]}\nwaves: [{name: all}]\n")
            .file("rollouts/Bad_Name.yml", "{}\n")
            .file("rollouts/notes.txt", "ignored\n");
        let parsed = parse_repo(&mem, "clusters");
        assert_eq!(parsed.clusters.len(), 2);
        assert!(parsed.invalid.is_empty());
        let names: Vec<&str> = parsed.rollouts.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["ping"]);
        assert_eq!(parsed.rollouts[0].waves[1].clusters, ["dev"]);
        assert_eq!(
            messages(&parsed),
            [
                "rollouts/Bad_Name.yml:0:0: rollout name \"Bad_Name\" (the file name) is not valid: it has uppercase letters; use lowercase",
                "rollouts/bad.yml:2:20: cluster \"gone\" does not exist: no directory of that name under the cluster root",
            ]
            .iter()
            .map(|m| m.to_string())
            .collect::<Vec<_>>()
        );
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
    fn an_inventory_is_required_and_vars_yml_is_not() {
        let parsed = parse_repo(
            &Mem::default().file("clusters/a/operations.yml", "[]\n"),
            "clusters",
        );
        assert_eq!(
            messages(&parsed),
            [
                "clusters/a/hosts.yml:0:0: the cluster directory has no inventory: add the cluster's ansible inventory as hosts.yml (YAML, all: hosts/children) or inventory.ini (kubespray's INI inventory)",
            ]
        );
        let parsed = parse_repo(
            &Mem::default().file("clusters/a/hosts.yml", "all:\n  hosts:\n    n1: {}\n"),
            "clusters",
        );
        assert_eq!(messages(&parsed), Vec::<String>::new());
        assert_eq!(parsed.clusters[0].inventory_dir.vars_yml, None);
        assert_eq!(parsed.clusters[0].inventory_dir.inventory_file, "hosts.yml");
    }

    #[test]
    fn two_inventories_are_refused_naming_both() {
        let parsed = parse_repo(
            &Mem::default()
                .good("a")
                .file("clusters/a/hosts.yaml", "all:\n  hosts:\n    n1: {}\n"),
            "clusters",
        );
        assert_eq!(parsed.invalid, ["a"]);
        assert_eq!(
            messages(&parsed),
            ["clusters/a/hosts.yaml:0:0: the cluster directory has two inventories, hosts.yml and hosts.yaml: ansible reads one; keep one and delete the other"]
        );
    }

    #[test]
    fn hosts_yaml_is_an_inventory_of_its_own_name() {
        let parsed = parse_repo(
            &Mem::default()
                .file("clusters/a/hosts.yaml", "all:\n  hosts:\n    n1: {}\n")
                .file("clusters/a/vars.yml", "{}\n"),
            "clusters",
        );
        assert_eq!(messages(&parsed), Vec::<String>::new());
        assert_eq!(parsed.clusters[0].inventory_dir.inventory_file, "hosts.yaml");
        assert!(parsed.clusters[0].inventory.hosts.contains("n1"));
    }

    #[test]
    fn group_vars_and_host_vars_are_read_as_ansible_reads_them() {
        let tree = Mem::default()
            .kubespray("a")
            .file(
                "clusters/a/group_vars/k8s_cluster/k8s-cluster.yml",
                "kube_version: v1.31.4\n",
            )
            .file(
                "clusters/a/group_vars/k8s_cluster/addons.yml",
                "helm_enabled: false\n",
            )
            .file(
                "clusters/a/group_vars/k8s_cluster/nested/more.json",
                "{\"a\": 1}\n",
            )
            .file("clusters/a/group_vars/k8s_cluster/.hidden.yml", "a: 1\n")
            .file("clusters/a/group_vars/k8s_cluster/old.yml~", "a: 1\n")
            .file("clusters/a/group_vars/k8s_cluster/README.md", "# notes\n")
            .file("clusters/a/group_vars/etcd.yml", "etcd_deployment_type: host\n")
            .file("clusters/a/group_vars/kube_node", "x: 1\n")
            .file("clusters/a/host_vars/n1.yaml", "ip: 10.0.0.1\n");
        let parsed = parse_repo(&tree, "clusters");
        assert_eq!(messages(&parsed), Vec::<String>::new());
        assert_eq!(parsed.clusters[0].inventory_dir.inventory_file, "inventory.ini");
        assert_eq!(
            parsed.clusters[0].inventory.addresses["n1"],
            ["10.0.0.1"],
            "host_vars give the inventory its addresses"
        );
        let paths: Vec<&str> = parsed.clusters[0]
            .inventory_dir
            .vars_files
            .iter()
            .map(|(p, _)| p.as_str())
            .collect();
        assert_eq!(
            paths,
            [
                "group_vars/etcd.yml",
                "group_vars/k8s_cluster/addons.yml",
                "group_vars/k8s_cluster/k8s-cluster.yml",
                "group_vars/k8s_cluster/nested/more.json",
                "group_vars/kube_node",
                "host_vars/n1.yaml",
            ]
        );
    }

    #[test]
    fn a_limit_may_name_the_group_kubespray_makes_at_run_time_but_not_an_unknown_one() {
        let tree = Mem::default().kubespray("a").file(
            "clusters/a/operations.yml",
            "- {id: a, action: cluster.yml, extraArgs: [--limit=k8s_cluster]}\n\
             - {id: b, action: cluster.yml, extraArgs: [--limit=k8s_clustr]}\n",
        );
        let m = messages(&parse_repo(&tree, "clusters"));
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].starts_with("clusters/a/operations.yml:2:"), "{m:?}");
        assert!(m[0].contains("k8s_clustr"), "{m:?}");
    }

    #[test]
    fn a_variables_file_that_is_not_a_mapping_or_a_link_is_refused() {
        let tree = Mem::default()
            .kubespray("a")
            .file("clusters/a/group_vars/etcd/list.yml", "- a\n")
            .with("clusters/a/host_vars/n1.yml", EntryKind::Symlink, "");
        let m = messages(&parse_repo(&tree, "clusters"));
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(
            m[0].starts_with("clusters/a/group_vars/etcd/list.yml:1:1: a vars file must be a mapping"),
            "{m:?}"
        );
        assert!(
            m[1].starts_with("clusters/a/host_vars/n1.yml:0:0: file is a symbolic link"),
            "{m:?}"
        );
    }

    #[test]
    fn vars_yml_beside_group_vars_of_all_is_refused_saying_which_to_keep() {
        for (file, other) in [
            ("group_vars/all.yml", "group_vars/all.yml"),
            ("group_vars/all/main.yml", "group_vars/all/"),
            ("group_vars/all", "group_vars/all"),
        ] {
            let tree = Mem::default()
                .good("a")
                .file(&format!("clusters/a/{file}"), "a: 1\n");
            let m = messages(&parse_repo(&tree, "clusters"));
            assert_eq!(m.len(), 1, "{other}: {m:?}");
            assert!(
                m[0].starts_with(&format!(
                    "clusters/a/vars.yml:0:0: vars.yml and {other} both hold the group variables of `all`: keep one"
                )),
                "{m:?}"
            );
        }
    }

    #[test]
    fn credentials_and_artifacts_are_refused_with_the_command_that_moves_them_into_secrets() {
        let tree = Mem::default()
            .good("a")
            .file("clusters/a/credentials/kubeadm_certificate_key.creds", "secret\n")
            .file("clusters/a/artifacts/admin.conf", "apiVersion: v1\n");
        let m = messages(&parse_repo(&tree, "clusters"));
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(m[0].starts_with("clusters/a/artifacts:0:0: artifacts/ holds the cluster's admin.conf"));
        assert!(m[0].contains(
            "kubectl -n kok-system create secret generic a-kubeconfig --from-file=value=clusters/a/artifacts/admin.conf"
        ));
        assert!(m[1].starts_with("clusters/a/credentials:0:0: credentials/ holds the passwords and keys"));
        assert!(m[1].contains(
            "kubectl -n kok-system create secret generic a-credentials --from-file=clusters/a/credentials/"
        ));
        assert!(
            !m.iter().any(|l| l.contains("secret\n")),
            "no file content in messages"
        );
    }

    const VAULT: &str = "$ANSIBLE_VAULT;1.1;AES256\n6134376431303739\n";

    #[test]
    fn vaulted_variables_need_a_vault_password_secret() {
        let tree = Mem::default()
            .kubespray("a")
            .file("clusters/a/group_vars/k8s_cluster/vault.yml", VAULT)
            .file(
                "clusters/a/group_vars/k8s_cluster/registry.yml",
                "registry_user: kok\nregistry_password: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6134\n",
            );
        let parsed = parse_repo(&tree, "clusters");
        let m = messages(&parsed);
        assert_eq!(parsed.invalid, ["a"]);
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(m[0].starts_with("clusters/a/group_vars/k8s_cluster/registry.yml:2:1: this value is encrypted with ansible-vault, and the cluster names no vaultPasswordSecret"), "{m:?}");
        assert!(
            m[1].starts_with(
                "clusters/a/group_vars/k8s_cluster/vault.yml:1:1: the file is encrypted with ansible-vault"
            ),
            "{m:?}"
        );
        assert!(m[1].contains(
            "kubectl -n kok-system create secret generic <name> --from-file=password=./vault-pass"
        ));

        let tree = tree.file("clusters/a/cluster.yml", "vaultPasswordSecret: a-vault\n");
        let parsed = parse_repo(&tree, "clusters");
        assert_eq!(messages(&parsed), Vec::<String>::new());
        assert_eq!(
            parsed.clusters[0].settings.vault_password_secret.as_deref(),
            Some("a-vault")
        );
        assert_eq!(
            parsed.clusters[0].inventory_dir.vars_files[1].1, VAULT,
            "a vault file is pinned as it is"
        );
    }

    #[test]
    fn a_playbook_kept_in_the_repository_is_read_with_its_directory_and_other_actions_stay_image_paths() {
        let tree = Mem::default()
            .good("a")
            .file(
                "clusters/a/operations.yml",
                "- id: hello\n  action: ./playbooks/hello.yml\n  postHooks: [{action: cluster-info.yml}]\n\
                 - id: install\n  action: cluster.yml\n",
            )
            .file("playbooks/hello.yml", "- hosts: all\n")
            .file("playbooks/roles/r/tasks/main.yml", "- debug: {}\n")
            .file("ansible.cfg", "[defaults]\n")
            .file("roles/top/tasks/main.yml", "- debug: {}\n");
        let parsed = parse_repo(&tree, "clusters");
        assert_eq!(messages(&parsed), Vec::<String>::new());
        let a = &parsed.clusters[0];
        let paths: Vec<&str> = a.repository_files.keys().map(String::as_str).collect();
        assert_eq!(
            paths,
            [
                "ansible.cfg",
                "playbooks/hello.yml",
                "playbooks/roles/r/tasks/main.yml"
            ]
        );
        assert_eq!(a.repository_files["playbooks/hello.yml"], b"- hosts: all\n");
        assert_eq!(
            a.repository_step("./playbooks/hello.yml"),
            Some("playbooks/hello.yml")
        );
        assert_eq!(
            a.repository_step("cluster.yml"),
            None,
            "kubespray's playbook is in the image"
        );
        assert_eq!(a.repository_step("cluster-info.yml"), None);
    }

    #[test]
    fn a_link_as_a_repository_playbook_or_beside_one_is_refused_at_its_entry() {
        let tree = Mem::default()
            .good("a")
            .file(
                "clusters/a/operations.yml",
                "- id: hello\n  action: playbooks/hello.yml\n- id: linked\n  action: site.yml\n",
            )
            .file("playbooks/hello.yml", "- hosts: all\n")
            .with("playbooks/roles", EntryKind::Symlink, "")
            .with("site.yml", EntryKind::Symlink, "");
        let m = messages(&parse_repo(&tree, "clusters"));
        assert_eq!(
            m,
            [
                "clusters/a/operations.yml:1:0: playbooks/hello.yml is kept in the repository, but \
                 playbooks/roles beside it is a symbolic link: kok does not follow links; commit the file itself",
                "clusters/a/operations.yml:3:0: site.yml is a symbolic link in the repository: kok does not \
                 follow links; commit the file itself in its place",
            ]
        );
    }

    #[test]
    fn a_repository_playbook_needing_more_than_one_run_may_pin_is_refused_at_its_entry() {
        let big = "x".repeat(600 << 10);
        let tree = Mem::default()
            .good("a")
            .file(
                "clusters/a/operations.yml",
                "- id: install\n  action: cluster.yml\n- id: hello\n  action: playbooks/hello.yml\n",
            )
            .file("playbooks/hello.yml", "- hosts: all\n")
            .file("playbooks/files/one.bin", &big)
            .file("playbooks/files/two.bin", &big);
        let parsed = parse_repo(&tree, "clusters");
        let m = messages(&parsed);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(
            m[0].starts_with(
                "clusters/a/operations.yml:3:0: playbooks/hello.yml is kept in the repository and kok pins what \
                 it needs with the run (playbooks/): 1201 KiB, more than the 1024 KiB one run may pin"
            ),
            "{m:?}"
        );
        assert_eq!(parsed.invalid, ["a"]);
    }

    #[test]
    fn a_directory_over_what_one_config_map_holds_is_refused_naming_its_size() {
        let big = format!("a: \"{}\"\n", "x".repeat(600 << 10));
        let tree = Mem::default()
            .kubespray("a")
            .file("clusters/a/group_vars/etcd/one.yml", &big)
            .file("clusters/a/group_vars/etcd/two.yml", &big);
        let m = messages(&parse_repo(&tree, "clusters"));
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(
            m[0].starts_with(
                "clusters/a:0:0: the cluster directory's files hold 1201 KiB, more than the 1024 KiB"
            ),
            "{m:?}"
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
    fn vars_yml_and_hosts_yml_are_parsed_once_per_pass_into_the_inventory_their_text_gives() {
        let tree = Mem::default()
            .file("clusters/a/hosts.yml", "all:\n  hosts:\n    n1:\n")
            .file("clusters/a/vars.yml", "# kubespray's\nkube_version: v1.31.4\n")
            .file("clusters/b/hosts.yml", "all:\n  hosts:\n    n1:\n")
            // Read as JSON first, its lines taken from the document validation parsed.
            .file(
                "clusters/b/vars.yml",
                "{\"x\": 1,\n \"kube_version\": \"v1.30.0\"}\n",
            );
        crate::yaml::PARSES.with(|n| n.set(0));
        let parsed = parse_repo(&tree, "clusters");
        assert_eq!(
            crate::yaml::PARSES.with(|n| n.get()),
            4,
            "each cluster's hosts.yml and vars.yml, once each"
        );
        assert_eq!(messages(&parsed), Vec::<String>::new());
        let version = |i: usize| {
            parsed.clusters[i].kubespray_view().vars["kube_version"]
                .clone()
                .unwrap()
        };
        assert_eq!(version(0).origin.to_string(), "vars.yml:2");
        assert_eq!(version(1).origin.to_string(), "vars.yml:2");
        assert_eq!(
            version(1).value,
            crate::Known::Value(serde_json::json!("v1.30.0"))
        );
        for cluster in &parsed.clusters {
            // What the pinned files give when read again from their text.
            assert_eq!(cluster.kubespray, cluster.inventory_dir.kubespray_view());
            assert_eq!(
                Some(&cluster.inventory),
                cluster.inventory_dir.inventory().as_ref()
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
                "clusters/a/opertions.yml:0:0: unknown file in a cluster directory: kok reads only inventory.ini, hosts.yml, hosts.yaml, vars.yml, operations.yml, cluster.yml and the directories group_vars, host_vars; did you mean \"operations.yml\"?",
            ]
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
