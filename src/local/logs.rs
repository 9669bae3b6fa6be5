//! Per-operation log files of local mode: `<state dir>/logs/<operation>.log`, how they are written and found.
//!
//! Each run appends a header line, the line saying which directory ran the Job's image, the process's merged
//! stdout and stderr as it comes (copied from the run's own output file, also by a kok restarted meanwhile),
//! and an end line:
//!
//! ```text
//! # kok-local-runner start=2026-01-01T00:00:00Z job=kok-a-install-0123abcd operation=a-install-0123abcd cluster=a id=install commit=<sha> cwd=<dir> command=["/bin/sh","-c","<script: 180 lines>","kok-entry"]
//! kok: image quay.io/kubespray/kubespray:v2.27.0 is not mapped by --image-workdir; ran in /src/kubespray (--workdir)
//! ...output...
//! # kok-local-runner end=2026-01-01T00:05:00Z result=Succeeded reason=CompletionsReached exit=0
//! ```
//!
//! Lines of output that contain a fragment of a Secret the Job mounts (the fragments of
//! [`crate::redact::secret_file_fragments`]) are written with that text replaced by `<redacted>`, the
//! redactor's marker; the header holds paths and arguments, never Secret content.
//!
//! Beside each log, `<operation>.times` holds when each of its lines was written (one RFC 3339 time per
//! line, in the same order), so that the log served as the Job's pod log (`kubectl logs --timestamps`,
//! `--since`) tells when each line came, as a kubelet's does.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::controller::summary::FALLBACK_LINES;

/// Start of the header and end lines the runner writes.
pub const MARKER: &str = "# kok-local-runner ";
/// Text that replaces Secret content in output lines: the redactor's.
pub use crate::redact::REDACTED;
/// Extension of log files.
pub const EXTENSION: &str = "log";
/// Extension of the file beside a log that holds when each of its lines was written.
pub const TIMES_EXTENSION: &str = "times";
/// End-line result of a process that exited 0.
pub const RESULT_SUCCEEDED: &str = "Succeeded";
/// End-line result of a run that failed (exit status, deadline, setup, lost process).
pub const RESULT_FAILED: &str = "Failed";
/// End-line result of a run whose process was killed because kok stopped.
pub const RESULT_INTERRUPTED: &str = "Interrupted";
/// End-line result of a run whose process was killed because its Job was deleted.
pub const RESULT_DELETED: &str = "Deleted";

/// Errors while finding a log file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The logs directory could not be read.
    #[error("could not read the logs directory {path}: {source}")]
    ReadDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// No log matches.
    #[error("no log for {query:?} in {dir}; {available}")]
    NotFound {
        /// What was asked for.
        query: String,
        /// The logs directory.
        dir: PathBuf,
        /// The list of logs there, or why there are none.
        available: String,
    },
}

/// What a header line says about a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// When the process started (RFC 3339).
    pub start: String,
    /// Job name.
    pub job: String,
    /// ClusterOperation name (the `kok.dev/cluster-operation` label), or the Job name without one.
    pub operation: String,
    /// Cluster name (`kok.dev/cluster`).
    pub cluster: String,
    /// Operation id (`kok.dev/operation`).
    pub id: String,
    /// Commit of the operation (`KOK_COMMIT`).
    pub commit: String,
}

fn field(value: &str) -> &str {
    if value.is_empty() {
        "-"
    } else {
        value
    }
}

impl Header {
    /// The header line (without newline) for a run of `command` in `cwd`. A script argument of several
    /// lines (kok's entry script) is shown as `<script: N lines>`; its steps announce themselves in the log.
    pub fn line(&self, cwd: &Path, command: &[String]) -> String {
        let shown: Vec<String> = command
            .iter()
            .map(|arg| match arg.lines().count() {
                n if n > 1 => format!("<script: {n} lines>"),
                _ => arg.clone(),
            })
            .collect();
        let command = serde_json::to_string(&shown).unwrap_or_default();
        format!(
            "{MARKER}start={} job={} operation={} cluster={} id={} commit={} cwd={} command={command}",
            field(&self.start),
            field(&self.job),
            field(&self.operation),
            field(&self.cluster),
            field(&self.id),
            field(&self.commit),
            cwd.display(),
        )
    }

    /// Parses a header line; `None` for any other line.
    pub fn parse(line: &str) -> Option<Header> {
        let rest = line.strip_prefix(MARKER)?;
        if !rest.starts_with("start=") {
            return None;
        }
        let mut header = Header::default();
        for word in rest.split(' ') {
            let Some((key, value)) = word.split_once('=') else {
                continue;
            };
            let value = if value == "-" {
                String::new()
            } else {
                value.to_string()
            };
            match key {
                "start" => header.start = value,
                "job" => header.job = value,
                "operation" => header.operation = value,
                "cluster" => header.cluster = value,
                "id" => header.id = value,
                "commit" => header.commit = value,
                "cwd" => break,
                _ => {}
            }
        }
        Some(header)
    }
}

/// The end line (without newline) of a run.
pub fn end_line(end: &str, result: &str, reason: &str, exit: Option<i32>) -> String {
    let exit = exit.map_or_else(|| "-".to_string(), |c| c.to_string());
    format!("{MARKER}end={end} result={result} reason={reason} exit={exit}")
}

/// True when `line` is an end line.
pub fn is_end_line(line: &str) -> bool {
    line.strip_prefix(MARKER)
        .is_some_and(|rest| rest.starts_with("end="))
}

/// What an end line says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct End {
    /// `Succeeded`, `Failed`, `Interrupted` or `Deleted`.
    pub result: String,
    /// The Job condition reason written with it.
    pub reason: String,
    /// The process's exit status, when it exited by itself.
    pub exit: Option<i32>,
}

/// Parses an end line; `None` for any other line.
pub fn parse_end_line(line: &str) -> Option<End> {
    let rest = line.strip_prefix(MARKER)?;
    if !rest.starts_with("end=") {
        return None;
    }
    let value = |key: &str| {
        rest.split(' ')
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
            .map(str::to_string)
    };
    Some(End {
        result: value("result")?,
        reason: value("reason")?,
        exit: value("exit").and_then(|e| e.parse().ok()),
    })
}

/// How the last run of `job` recorded in the log at `path` ended: `None` when the log has no run of that Job,
/// or its last run has no end line.
pub fn last_end(path: &Path, job: &str) -> Option<End> {
    let text = std::fs::read(path).ok()?;
    let text = String::from_utf8_lossy(&text);
    let mut end = None;
    let mut ours = false;
    for line in text.lines() {
        if let Some(header) = Header::parse(line) {
            ours = header.job == job;
            end = None;
        } else if let Some(e) = parse_end_line(line) {
            end = Some(e).filter(|_| ours);
        }
    }
    end
}

/// True when the log at `path` has a run of `job` (its header line).
pub fn has_run(path: &Path, job: &str) -> bool {
    let Ok(text) = std::fs::read(path) else {
        return false;
    };
    String::from_utf8_lossy(&text)
        .lines()
        .filter_map(Header::parse)
        .any(|h| h.job == job)
}

/// The file name part of a log: `name` with anything outside `[A-Za-z0-9._-]` replaced by `_`.
pub fn file_name(name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{}.{EXTENSION}", safe.trim_start_matches('.'))
}

/// The log file of the operation (or Job) named `name`.
pub fn log_path(state_dir: &Path, name: &str) -> PathBuf {
    super::logs_dir(state_dir).join(file_name(name))
}

/// The file beside the log at `log` that holds when each of its lines was written.
pub fn times_path(log: &Path) -> PathBuf {
    log.with_extension(TIMES_EXTENSION)
}

fn append_to(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// An open log file, appended to line by line with no buffering, Secret content redacted, each line's time
/// appended to the times beside it. It keeps the last lines it wrote, for a termination message that falls
/// back to the log.
#[derive(Debug)]
pub struct LogWriter {
    file: std::fs::File,
    /// The times file; a log whose times cannot be written is still written (its lines then have the
    /// time of a line before them).
    times: Option<std::fs::File>,
    redactions: crate::redact::Secrets,
    tail: std::collections::VecDeque<String>,
}

impl LogWriter {
    /// Opens (creating it and its directory, modes 0600 and 0700) the log file at `path` for appending.
    pub fn open(path: &Path, fragments: Vec<String>) -> std::io::Result<LogWriter> {
        let mut redactions = crate::redact::Secrets::default();
        fragments.iter().for_each(|f| redactions.insert(f));
        if let Some(dir) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        let file = append_to(path)?;
        let times = append_to(&times_path(path))
            .inspect_err(|err| {
                tracing::warn!(path = %times_path(path).display(), %err, "could not open the times of a log");
            })
            .ok();
        Ok(LogWriter {
            file,
            times,
            redactions,
            tail: std::collections::VecDeque::new(),
        })
    }

    /// `text` with every Secret value replaced by [`REDACTED`].
    pub fn redact(&self, text: &str) -> String {
        self.redactions.scrub(text)
    }

    /// The lines written since the last call (at most the kubelet's [`FALLBACK_LINES`]), redacted.
    pub fn take_tail(&mut self) -> Vec<String> {
        self.tail.drain(..).collect()
    }

    /// Appends one line of output (`bytes` may end with a newline; one is added when it does not).
    pub fn write_line(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let mut owned;
        let mut out: &[u8] = bytes;
        if !self.redactions.is_empty() {
            let text = String::from_utf8_lossy(bytes);
            // Bytes pass as they are unless a Secret value is in them.
            let redacted = self.redact(&text);
            if redacted != text {
                owned = redacted.into_bytes();
                out = &owned;
            }
        }
        if out.last() != Some(&b'\n') {
            owned = [out, b"\n"].concat();
            out = &owned;
        }
        if self.tail.len() == FALLBACK_LINES {
            self.tail.pop_front();
        }
        self.tail.push_back(
            String::from_utf8_lossy(out)
                .trim_end_matches(['\n', '\r'])
                .to_string(),
        );
        self.file.write_all(out)?;
        if let Some(times) = self.times.as_mut() {
            let now = format!("{}\n", jiff::Timestamp::now());
            if let Err(err) = times.write_all(now.as_bytes()) {
                tracing::warn!(%err, "could not write the time of a log line");
                self.times = None;
            }
        }
        Ok(())
    }
}

/// One log file found in a logs directory.
#[derive(Clone, Debug)]
pub struct LogEntry {
    /// The file.
    pub path: PathBuf,
    /// Its name without extension.
    pub name: String,
    /// Its first header, when it has one.
    pub header: Option<Header>,
    /// Last modification.
    pub modified: SystemTime,
}

fn first_header(path: &Path) -> Option<Header> {
    use std::io::BufRead;
    let file = std::fs::File::open(path).ok()?;
    let mut line = String::new();
    std::io::BufReader::new(file).read_line(&mut line).ok()?;
    Header::parse(line.trim_end())
}

/// The log files in `dir`, newest first. A missing directory has none.
pub fn list(dir: &Path) -> Result<Vec<LogEntry>, Error> {
    let read = match std::fs::read_dir(dir) {
        Ok(read) => read,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(Error::ReadDir {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut out = Vec::new();
    for entry in read {
        let entry = entry.map_err(|source| Error::ReadDir {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some(EXTENSION) {
            continue;
        }
        let Some(name) = path.file_stem().and_then(|s| s.to_str()).map(str::to_string) else {
            continue;
        };
        let modified = entry
            .metadata()
            .and_then(|m| m.modified())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        out.push(LogEntry {
            header: first_header(&path),
            path,
            name,
            modified,
        });
    }
    out.sort_by(|a, b| b.modified.cmp(&a.modified).then_with(|| a.name.cmp(&b.name)));
    Ok(out)
}

/// Finds the log of `query` in `dir`: a ClusterOperation name, a Job name, or `<cluster>/<id>` (the newest run
/// of that operation).
pub fn find(dir: &Path, query: &str) -> Result<LogEntry, Error> {
    let entries = list(dir)?;
    let short = crate::materialize::shorten_name(query, crate::materialize::MAX_NAME_LEN);
    let by_name = entries.iter().find(|e| {
        e.name == query
            || e.name == short
            || e.header
                .as_ref()
                .is_some_and(|h| h.job == query || h.operation == query || h.operation == short)
    });
    if let Some(entry) = by_name {
        return Ok(entry.clone());
    }
    if let Some((cluster, id)) = query.split_once('/') {
        // `entries` is newest first.
        let newest = entries.iter().find(|e| {
            e.header
                .as_ref()
                .is_some_and(|h| h.cluster == cluster && h.id == id)
        });
        if let Some(entry) = newest {
            return Ok(entry.clone());
        }
    }
    let available = if entries.is_empty() {
        "there are no logs there: nothing has run in local mode with this state directory (check --state-dir)"
            .to_string()
    } else {
        let names: Vec<String> = entries
            .iter()
            .map(|e| match &e.header {
                Some(h) if !h.cluster.is_empty() => format!("{} ({}/{})", e.name, h.cluster, h.id),
                _ => e.name.clone(),
            })
            .collect();
        format!("available (newest first): {}", names.join(", "))
    };
    Err(Error::NotFound {
        query: query.to_string(),
        dir: dir.to_path_buf(),
        available,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(op: &str, cluster: &str, id: &str) -> Header {
        Header {
            start: "2026-01-01T00:00:00Z".into(),
            job: format!("kok-{op}"),
            operation: op.into(),
            cluster: cluster.into(),
            id: id.into(),
            commit: "abc".into(),
        }
    }

    #[test]
    fn a_header_line_parses_back_to_the_same_header() {
        let h = header("a-install-0123abcd", "a", "install");
        let line = h.line(
            Path::new("/w"),
            &["sh".to_string(), "-c".to_string(), "echo a=b c".to_string()],
        );
        assert_eq!(Header::parse(&line), Some(h));
        assert!(!is_end_line(&line));
        assert!(is_end_line(&end_line(
            "t",
            "Succeeded",
            "CompletionsReached",
            Some(0)
        )));
    }

    #[test]
    fn the_end_of_the_last_run_of_a_job_is_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = log_path(dir.path(), "op");
        let mut w = LogWriter::open(&path, Vec::new()).unwrap();
        assert_eq!(last_end(&path, "kok-op"), None);
        let h = header("op", "a", "x");
        w.write_line(h.line(Path::new("/w"), &[]).as_bytes()).unwrap();
        w.write_line(b"output").unwrap();
        assert_eq!(
            last_end(&path, "kok-op"),
            None,
            "a run without an end line has not ended"
        );
        w.write_line(end_line("t", "Failed", "BackoffLimitExceeded", Some(2)).as_bytes())
            .unwrap();
        let end = End {
            result: "Failed".into(),
            reason: "BackoffLimitExceeded".into(),
            exit: Some(2),
        };
        assert_eq!(last_end(&path, "kok-op"), Some(end));
        assert_eq!(last_end(&path, "kok-other"), None);
    }

    #[test]
    fn each_line_written_has_its_time_beside_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = log_path(dir.path(), "op");
        let before = jiff::Timestamp::now();
        let mut w = LogWriter::open(&path, Vec::new()).unwrap();
        w.write_line(b"one\n").unwrap();
        w.write_line(b"two").unwrap();
        let times = std::fs::read_to_string(times_path(&path)).unwrap();
        let times: Vec<jiff::Timestamp> = times.lines().map(|t| t.parse().unwrap()).collect();
        assert_eq!(times.len(), 2);
        assert!(before <= times[0] && times[0] <= times[1]);
        assert!(
            list(&super::super::logs_dir(dir.path())).unwrap().len() == 1,
            "the times are not a log of their own"
        );
    }

    #[test]
    fn secret_content_is_redacted_from_output_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = log_path(dir.path(), "op");
        let mut w = LogWriter::open(&path, vec!["supersecretkey".into()]).unwrap();
        w.write_line(b"key is supersecretkey!\n").unwrap();
        w.write_line(b"no newline").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "key is <redacted>!\nno newline\n"
        );
    }

    #[test]
    fn logs_are_found_by_operation_job_or_cluster_and_id_and_otherwise_listed() {
        let dir = tempfile::tempdir().unwrap();
        for op in ["a-install-11111111", "a-install-22222222", "b-ping-33333333"] {
            let (cluster, id) = if op.starts_with('a') {
                ("a", "install")
            } else {
                ("b", "ping")
            };
            let path = dir.path().join(file_name(op));
            let mut w = LogWriter::open(&path, Vec::new()).unwrap();
            w.write_line(header(op, cluster, id).line(Path::new("/w"), &[]).as_bytes())
                .unwrap();
            // Distinct modification times: the second install is the newest.
            let t = SystemTime::UNIX_EPOCH
                + std::time::Duration::from_secs(if op.contains("2222") { 20 } else { 10 });
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
        assert_eq!(
            find(dir.path(), "b-ping-33333333").unwrap().name,
            "b-ping-33333333"
        );
        assert_eq!(
            find(dir.path(), "kok-a-install-11111111").unwrap().name,
            "a-install-11111111"
        );
        assert_eq!(find(dir.path(), "a/install").unwrap().name, "a-install-22222222");
        let err = find(dir.path(), "c/x").unwrap_err().to_string();
        assert!(err.contains("b-ping-33333333 (b/ping)"), "{err}");
        let empty = find(&dir.path().join("none"), "x").unwrap_err().to_string();
        assert!(empty.contains("nothing has run in local mode"), "{empty}");
    }
}
