//! Playbooks kept in the repository: which actions are files of the commit, and which files a run of one needs.
//!
//! An action or hook names a path from the directory holding kok.yml and the cluster root (the layout root,
//! [`super::layout_root`]). When that path is a regular file of the commit's tree, the step is kept in the
//! repository: kok pins the files a run of it needs ([`needs`]) with the run, and the Job runs the step from
//! those files, whatever the runner image holds, in local mode and in a meta-cluster alike. Any other action
//! is a path inside the runner image (kubespray's `cluster.yml`, a program such as `ansible`).
//!
//! What a run of a repository step needs: the step's file and every file under the directory it is in (its
//! `roles/`, `templates/`, `group_vars/` beside it); for a file at the top of the layout, the file and the
//! directories ansible reads beside a playbook ([`TOP_DIRS`]); and in both cases `ansible.cfg` at the top,
//! since the step runs from the top as it does in a checkout. One step's files may hold at most
//! [`MAX_REPOSITORY_BYTES`] together.

use std::collections::BTreeMap;

use super::diag::{join, FileDiags};
use super::{EntryKind, Operation, TreeReader, MAX_FILE_SIZE};

/// Most bytes the files one repository step needs may hold together: what one ConfigMap holds (1 MiB).
pub const MAX_REPOSITORY_BYTES: usize = 1 << 20;
/// ansible's configuration file at the top of the layout, pinned with every repository step.
pub const ANSIBLE_CFG: &str = "ansible.cfg";
/// The directories ansible reads beside a playbook, pinned with a playbook at the top of the layout.
pub const TOP_DIRS: &[&str] = &[
    "roles",
    "collections",
    "library",
    "module_utils",
    "filter_plugins",
    "plugins",
    "tasks",
    "handlers",
    "templates",
    "files",
    "vars",
    "group_vars",
    "host_vars",
];

/// The action's path from the layout root when it may be a file of the repository (`./` dropped); `None` for
/// an absolute path or one that climbs out (`..`), which only the runner image can hold.
pub fn repository_path(action: &str) -> Option<&str> {
    let mut path = action;
    while let Some(rest) = path.strip_prefix("./") {
        path = rest;
    }
    let climbs = path.split('/').any(|part| part == "..");
    (!path.is_empty() && !path.starts_with('/') && !climbs).then_some(path)
}

/// True when `path` is one of the files a run of the repository step `step` (a path from
/// [`repository_path`]) needs.
pub fn needs(step: &str, path: &str) -> bool {
    let under = |dir: &str| path.strip_prefix(dir).is_some_and(|rest| rest.starts_with('/'));
    if path == step || path == ANSIBLE_CFG {
        return true;
    }
    match step.rsplit_once('/') {
        Some((dir, _)) => under(dir),
        None => TOP_DIRS.iter().any(|dir| under(dir)),
    }
}

/// Every step of `op` (action first, then pre- and post-hooks) as its action.
pub fn step_actions(op: &Operation) -> impl Iterator<Item = &str> {
    std::iter::once(op.action.as_str()).chain(
        op.pre_hooks
            .iter()
            .chain(&op.post_hooks)
            .map(|h| h.action.as_str()),
    )
}

/// Reads the files the repository steps of `operations` need from the layout root `root`, by path from it;
/// problems (a link, a file that cannot be read, a step needing too much) are reported at the entry's line of
/// operations.yml through `d`.
pub(super) fn read_repository_files(
    reader: &dyn TreeReader,
    root: &str,
    operations: &[Operation],
    d: &mut FileDiags<'_>,
) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for op in operations {
        for action in step_actions(op) {
            for problem in read_step(reader, root, action, &mut files) {
                d.error_at(op.line, 0, problem);
            }
        }
    }
    files
}

/// Reads into `files` what the step `action` needs when it is a file of the tree under `root`; returns what
/// stands in the way, each a sentence about the step. A step that is not in the repository needs nothing.
fn read_step(
    reader: &dyn TreeReader,
    root: &str,
    action: &str,
    files: &mut BTreeMap<String, Vec<u8>>,
) -> Vec<String> {
    let Some(step) = repository_path(action) else {
        return Vec::new();
    };
    match reader.kind(&join(root, step)) {
        Ok(Some(EntryKind::File)) => {}
        Ok(Some(EntryKind::Symlink)) => {
            return vec![format!(
                "{action} is a symbolic link in the repository: kok does not follow links; commit the file \
                 itself in its place"
            )]
        }
        // Not in the repository: a path inside the runner image.
        _ => return Vec::new(),
    }
    let mut walk = Walk {
        reader,
        root,
        files,
        problems: Vec::new(),
    };
    walk.file(step);
    walk.file_if_present(ANSIBLE_CFG);
    match step.rsplit_once('/') {
        Some((dir, _)) => walk.dir(dir),
        None => {
            for dir in TOP_DIRS {
                if let Ok(Some(EntryKind::Dir)) = reader.kind(&join(root, dir)) {
                    walk.dir(dir);
                }
            }
        }
    }
    let mut problems: Vec<String> = walk
        .problems
        .into_iter()
        .map(|problem| format!("{action} is kept in the repository, but {problem}"))
        .collect();
    problems.extend(over_limit(action, step, files));
    problems
}

/// What to say when the files the step `step` (written `action`) needs hold more than
/// [`MAX_REPOSITORY_BYTES`].
fn over_limit(action: &str, step: &str, files: &BTreeMap<String, Vec<u8>>) -> Option<String> {
    let total: usize = files
        .iter()
        .filter(|(path, _)| needs(step, path))
        .map(|(_, bytes)| bytes.len())
        .sum();
    if total <= MAX_REPOSITORY_BYTES {
        return None;
    }
    let what = match step.rsplit_once('/') {
        Some((dir, _)) => format!("{dir}/"),
        None => format!("{step} and {}", TOP_DIRS.join("/, ")),
    };
    Some(format!(
        "{action} is kept in the repository and kok pins what it needs with the run ({what}): {} KiB, more \
         than the {} KiB one run may pin; move bulky files (archives, binaries) out of that directory, or put \
         the playbook in the runner image",
        total.div_ceil(1024),
        MAX_REPOSITORY_BYTES / 1024
    ))
}

/// Reading the files of one step, each once.
struct Walk<'a> {
    reader: &'a dyn TreeReader,
    root: &'a str,
    files: &'a mut BTreeMap<String, Vec<u8>>,
    problems: Vec<String>,
}

impl Walk<'_> {
    fn file(&mut self, path: &str) {
        if self.files.contains_key(path) {
            return;
        }
        match self.reader.read(&join(self.root, path), MAX_FILE_SIZE) {
            Ok(bytes) => {
                self.files.insert(path.to_string(), bytes);
            }
            Err(err) => self.problems.push(format!("{err}")),
        }
    }

    fn file_if_present(&mut self, path: &str) {
        if let Ok(Some(EntryKind::File)) = self.reader.kind(&join(self.root, path)) {
            self.file(path);
        }
    }

    fn dir(&mut self, dir: &str) {
        let entries = match self.reader.list(&join(self.root, dir)) {
            Ok(entries) => entries,
            Err(err) => {
                self.problems.push(format!("could not list {dir}/: {err}"));
                return;
            }
        };
        for entry in entries {
            let path = join(dir, &entry.name);
            match entry.kind {
                EntryKind::File => self.file(&path),
                EntryKind::Dir => self.dir(&path),
                EntryKind::Symlink => self.problems.push(format!(
                    "{path} beside it is a symbolic link: kok does not follow links; commit the file itself"
                )),
                // A submodule: not part of this commit's files.
                EntryKind::Other => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_relative_paths_that_stay_inside_may_be_repository_files() {
        assert_eq!(
            repository_path("./playbooks/hello.yml"),
            Some("playbooks/hello.yml")
        );
        assert_eq!(repository_path("cluster.yml"), Some("cluster.yml"));
        assert_eq!(repository_path("/kubespray/cluster.yml"), None);
        assert_eq!(repository_path("../kubespray/cluster.yml"), None);
        assert_eq!(repository_path("playbooks/../../x.yml"), None);
        assert_eq!(repository_path(""), None);
    }

    #[test]
    fn a_step_needs_its_directory_or_at_the_top_the_directories_beside_it() {
        let step = "playbooks/hello.yml";
        assert!(needs(step, "playbooks/hello.yml"));
        assert!(needs(step, "playbooks/roles/r/tasks/main.yml"));
        assert!(needs(step, "ansible.cfg"));
        assert!(!needs(step, "playbooks-old/x.yml"));
        assert!(!needs(step, "clusters/local/hosts.yml"));
        assert!(!needs(step, "roles/r/tasks/main.yml"));
        assert!(needs("site.yml", "roles/r/tasks/main.yml"));
        assert!(needs("site.yml", "site.yml"));
        assert!(!needs("site.yml", "other.yml"));
        assert!(!needs("site.yml", "clusters/local/hosts.yml"));
    }
}
