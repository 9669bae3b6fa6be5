//! Collecting diagnostics for one file, and reading files and YAML through the [`TreeReader`] with errors as diagnostics.

use super::reader::{ReadError, TreeReader};
use super::yaml::{self, Node};
use super::{Diagnostic, Severity, MAX_FILE_SIZE};

/// Diagnostics about one file (or directory) of the repository.
pub(crate) struct FileDiags<'a> {
    /// Path relative to the repository root.
    pub path: String,
    cluster: Option<&'a str>,
    out: &'a mut Vec<Diagnostic>,
}

impl<'a> FileDiags<'a> {
    /// Diagnostics for `path`, belonging to `cluster` (`None` for repo-wide files), appended to `out`.
    pub fn new(path: impl Into<String>, cluster: Option<&'a str>, out: &'a mut Vec<Diagnostic>) -> Self {
        FileDiags {
            path: path.into(),
            cluster,
            out,
        }
    }

    fn add(&mut self, severity: Severity, line: usize, column: usize, message: String) {
        self.out.push(Diagnostic {
            path: self.path.clone(),
            line,
            column,
            severity,
            message,
            cluster: self.cluster.map(str::to_string),
        });
    }

    /// Number of errors reported so far into the shared list (all files).
    pub fn error_count(&self) -> usize {
        self.out.iter().filter(|d| d.severity == Severity::Error).count()
    }

    /// An error at `line`:`column` (0 for the file as a whole).
    pub fn error_at(&mut self, line: usize, column: usize, message: impl Into<String>) {
        self.add(Severity::Error, line, column, message.into());
    }

    /// An error at `node`.
    pub fn error(&mut self, node: &Node, message: impl Into<String>) {
        self.add(Severity::Error, node.line, node.col, message.into());
    }

    /// A warning at `node`.
    pub fn warn(&mut self, node: &Node, message: impl Into<String>) {
        self.add(Severity::Warning, node.line, node.col, message.into());
    }
}

/// `dir/name`, or `name` when `dir` is empty: a path inside the repository.
pub fn join(dir: &str, name: &str) -> String {
    match dir.trim_end_matches('/') {
        "" => name.to_string(),
        dir => format!("{dir}/{name}"),
    }
}

/// How many of `out` are errors.
pub(crate) fn error_count(out: &[Diagnostic]) -> usize {
    out.iter().filter(|d| d.severity == Severity::Error).count()
}

/// Reads `path` as UTF-8 text; on failure reports why (too large, not UTF-8, unreadable) and returns `None`.
pub(crate) fn read_text(reader: &dyn TreeReader, diags: &mut FileDiags<'_>) -> Option<String> {
    let bytes = match reader.read(&diags.path, MAX_FILE_SIZE) {
        Ok(bytes) => bytes,
        Err(ReadError::TooLarge { size, limit, .. }) => {
            diags.error_at(
                0,
                0,
                format!(
                    "file is {size} bytes, more than the {limit} bytes (1 MiB) kok reads: \
                     split it or move bulky data out of the repository"
                ),
            );
            return None;
        }
        Err(ReadError::NotFound { .. }) => {
            diags.error_at(0, 0, "file disappeared while reading: run the validation again");
            return None;
        }
        Err(ReadError::Io { message, .. }) => {
            diags.error_at(0, 0, format!("could not read the file: {message}"));
            return None;
        }
    };
    match String::from_utf8(bytes) {
        Ok(text) => Some(text),
        Err(err) => {
            let good = &err.as_bytes()[..err.utf8_error().valid_up_to()];
            let line = 1 + good.iter().filter(|b| **b == b'\n').count();
            let start = good.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            let col = 1 + String::from_utf8_lossy(&good[start..]).chars().count();
            diags.error_at(line, col, "file is not valid UTF-8: save it with UTF-8 encoding");
            None
        }
    }
}

/// Parses `text` as YAML, reporting syntax errors and duplicate keys. `Err(())` on a syntax error;
/// `Ok(None)` for a file without a document.
pub(crate) fn parse_yaml(text: &str, diags: &mut FileDiags<'_>) -> Result<Option<Node>, ()> {
    match yaml::parse(text) {
        Ok(doc) => {
            for dup in doc.duplicates {
                diags.error_at(dup.line, dup.col, dup.message);
            }
            Ok(doc.root)
        }
        Err(problem) => {
            diags.error_at(problem.line, problem.col, problem.message);
            Err(())
        }
    }
}

/// Reports every key of `map` not in `allowed` (`what` names the mapping, e.g. "operation"), with a hint.
pub(crate) fn deny_unknown_keys(
    map: &[(Node, Node)],
    allowed: &[&str],
    what: &str,
    diags: &mut FileDiags<'_>,
) {
    for (key, _) in map {
        let name = key.scalar_text().unwrap_or_default();
        if !allowed.contains(&name.as_str()) {
            unknown_key(key, allowed, what, diags);
        }
    }
}

/// `node` as a mapping whose keys are all in `keys`, each unknown one reported as a key of `what`. When
/// `node` is not a mapping, reports `"{expected()}, not <its type>"` at it and gives `None`.
pub(crate) fn keyed_map<'n>(
    node: &'n Node,
    keys: &[&str],
    what: &str,
    expected: impl FnOnce() -> String,
    diags: &mut FileDiags<'_>,
) -> Option<&'n [(Node, Node)]> {
    let Some(map) = node.as_map() else {
        diags.error(node, format!("{}, not {}", expected(), node.type_name()));
        return None;
    };
    deny_unknown_keys(map, keys, what, diags);
    Some(map)
}

/// Reports `key` as unknown in `what`, with the closest allowed key or the list of allowed keys.
pub(crate) fn unknown_key(key: &Node, allowed: &[&str], what: &str, diags: &mut FileDiags<'_>) {
    let name = key.scalar_text().unwrap_or_default();
    let hint = super::names::hint(&name, allowed);
    let hint = if hint.is_empty() {
        format!("; allowed keys: {}", allowed.join(", "))
    } else {
        hint
    };
    diags.error(key, format!("unknown key \"{name}\" in {what}{hint}"));
}

/// The value of key `name` in `map` (the last one when duplicated).
pub(crate) fn get<'n>(map: &'n [(Node, Node)], name: &str) -> Option<&'n Node> {
    map.iter()
        .rev()
        .find(|(k, _)| k.as_str() == Some(name))
        .map(|(_, v)| v)
}

/// The diagnostics of parsing `text` as YAML, for tests.
#[cfg(test)]
pub(crate) fn test_diags(text: &str) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let mut d = FileDiags::new("f.yml", None, &mut out);
    let _ = parse_yaml(text, &mut d);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_reported_at_the_key_with_a_hint() {
        let node = yaml::parse("action: x\nextra_args: []\n").unwrap().root.unwrap();
        let mut out = Vec::new();
        let mut d = FileDiags::new("f.yml", None, &mut out);
        deny_unknown_keys(node.as_map().unwrap(), &["action", "extraArgs"], "hook", &mut d);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].line, out[0].column), (2, 1));
        assert!(
            out[0].message.contains("did you mean \"extraArgs\""),
            "{}",
            out[0].message
        );
    }

    #[test]
    fn duplicate_keys_become_error_diagnostics() {
        let out = test_diags("a: 1\na: 2\n");
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].severity, Severity::Error);
        assert_eq!(out[0].line, 2);
    }
}
