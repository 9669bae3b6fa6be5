//! Local mode's kubelet, as far as logs go: the log of a run's pod ([`super::pod`]) is the run's log file,
//! `<state dir>/logs/<operation>.log` — the file `kok logs` prints — each line with the time its `.times`
//! file says it was written, every secret kok knows scrubbed ([`crate::redact`]). A pod whose run goes on is
//! followed until the run's end line. The embedded API server asks it for the pods bound to
//! [`super::pod::NODE_NAME`] (`GET .../pods/<name>/log`) and applies `tailLines`, `sinceSeconds`, `timestamps`,
//! `limitBytes` and `follow` itself, as kube-apiserver and a kubelet do.

use std::collections::VecDeque;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use testkit::errors::ApiError;
use testkit::pod_logs::{ContainerLog, Kubelet, LogLine};

use super::logs;
use crate::api::LABEL_CLUSTER_OPERATION;
use crate::controller::job::JOB_NAME_LABEL;

/// How often a followed log is read again (as `kok logs --follow` does).
const FOLLOW_INTERVAL: Duration = Duration::from_millis(300);

/// Serves the log files of local runs as their pods' logs.
#[derive(Clone, Debug)]
pub struct LocalKubelet {
    state_dir: PathBuf,
}

impl LocalKubelet {
    /// The kubelet of the runs whose logs are in `<state_dir>/logs`.
    pub fn new(state_dir: &Path) -> LocalKubelet {
        LocalKubelet {
            state_dir: state_dir.to_path_buf(),
        }
    }
}

/// The log file of a run's pod: named after its ClusterOperation (label), else its Job.
fn log_of(state_dir: &Path, pod: &Value) -> Option<PathBuf> {
    let labels = &pod["metadata"]["labels"];
    let name = [LABEL_CLUSTER_OPERATION, JOB_NAME_LABEL]
        .iter()
        .find_map(|key| labels[*key].as_str().filter(|n| !n.is_empty()))?;
    Some(logs::log_path(state_dir, name))
}

/// Reads a log and its times from where the last read stopped: whole lines only, each with its time.
#[derive(Debug)]
struct Reader {
    log: PathBuf,
    times: PathBuf,
    log_offset: u64,
    times_offset: u64,
    /// Bytes of a line not finished yet.
    partial: Vec<u8>,
    /// Times read and not yet given to a line.
    pending_times: VecDeque<jiff::Timestamp>,
    times_partial: Vec<u8>,
    /// The time of the last line (for lines the times file lacks).
    last_time: Option<jiff::Timestamp>,
    /// Whether the last line read was the end line of a run.
    ended: bool,
}

/// The bytes of `path` from `offset` on, and the offset after them; nothing when the file is missing.
fn read_from(path: &Path, offset: u64) -> std::io::Result<(Vec<u8>, u64)> {
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), offset)),
        Err(err) => return Err(err),
    };
    file.seek(SeekFrom::Start(offset))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let next = offset + bytes.len() as u64;
    Ok((bytes, next))
}

impl Reader {
    fn new(log: PathBuf) -> Reader {
        Reader {
            times: logs::times_path(&log),
            log,
            log_offset: 0,
            times_offset: 0,
            partial: Vec::new(),
            pending_times: VecDeque::new(),
            times_partial: Vec::new(),
            last_time: None,
            ended: false,
        }
    }

    /// The whole lines written since the last read.
    fn read(&mut self) -> std::io::Result<Vec<LogLine>> {
        let (bytes, offset) = read_from(&self.log, self.log_offset)?;
        self.log_offset = offset;
        self.partial.extend_from_slice(&bytes);
        let (times, offset) = read_from(&self.times, self.times_offset)?;
        self.times_offset = offset;
        self.times_partial.extend_from_slice(&times);
        while let Some(at) = self.times_partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.times_partial.drain(..=at).collect();
            if let Ok(t) = String::from_utf8_lossy(&line).trim().parse() {
                self.pending_times.push_back(t);
            }
        }
        let mut lines = Vec::new();
        while let Some(at) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=at).collect();
            let time = match self.pending_times.pop_front() {
                Some(t) => t,
                // An older log without times: the file's modification time.
                None => match self.last_time {
                    Some(t) => t,
                    None => modified(&self.log),
                },
            };
            self.last_time = Some(time);
            let text = String::from_utf8_lossy(&line);
            self.ended = logs::is_end_line(text.trim_end());
            lines.push(LogLine {
                time,
                text: crate::redact::scrub(&text).into_bytes().into(),
            });
        }
        Ok(lines)
    }
}

fn modified(path: &Path) -> jiff::Timestamp {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| jiff::Timestamp::try_from(t).ok())
        .unwrap_or_else(jiff::Timestamp::now)
}

fn unreadable(path: &Path, err: std::io::Error) -> ApiError {
    ApiError::new(
        500,
        format!("could not read the run's log {}: {err}", path.display()),
    )
}

/// Whether a pod's phase says its container has ended.
fn finished(pod: &Value) -> bool {
    matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
}

impl Kubelet for LocalKubelet {
    fn container_log(&self, pod: &Value, _container: &str) -> Result<ContainerLog, ApiError> {
        let Some(path) = log_of(&self.state_dir, pod) else {
            return Ok(ContainerLog {
                lines: Vec::new(),
                rest: None,
            });
        };
        let mut reader = Reader::new(path.clone());
        let lines = reader.read().map_err(|e| unreadable(&path, e))?;
        if finished(pod) || reader.ended {
            return Ok(ContainerLog { lines, rest: None });
        }
        let rest = futures::stream::unfold(reader, |mut reader| async move {
            loop {
                if reader.ended {
                    return None;
                }
                tokio::time::sleep(FOLLOW_INTERVAL).await;
                let read = tokio::task::spawn_blocking(move || {
                    let lines = reader.read();
                    (reader, lines)
                })
                .await;
                let Ok((back, Ok(lines))) = read else {
                    return None;
                };
                reader = back;
                if !lines.is_empty() {
                    return Some((futures::stream::iter(lines), reader));
                }
            }
        })
        .flatten();
        Ok(ContainerLog {
            lines,
            rest: Some(rest.boxed()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(phase: &str) -> Value {
        json!({"metadata": {"name": "kok-a-x-local", "labels": {"kok.dev/cluster-operation": "a-x-1"}},
            "status": {"phase": phase}})
    }

    #[tokio::test]
    async fn a_runs_log_is_its_pods_log_with_the_times_of_its_lines_and_followed_to_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = logs::log_path(dir.path(), "a-x-1");
        let mut writer = logs::LogWriter::open(&path, vec!["s3cr3t-value".into()]).unwrap();
        writer.write_line(b"PLAY [all]\n").unwrap();
        writer.write_line(b"the key is s3cr3t-value\n").unwrap();
        let kubelet = LocalKubelet::new(dir.path());

        let log = kubelet.container_log(&pod("Running"), "ansible").unwrap();
        let texts: Vec<_> = log.lines.iter().map(|l| l.text.clone()).collect();
        assert_eq!(texts, ["PLAY [all]\n", "the key is <redacted>\n"]);
        assert!(log.lines[0].time <= log.lines[1].time && log.lines[1].time <= jiff::Timestamp::now());
        let mut rest = log.rest.expect("a running pod's log is followed");
        writer.write_line(b"PLAY RECAP\n").unwrap();
        writer
            .write_line(logs::end_line("t", "Succeeded", "CompletionsReached", Some(0)).as_bytes())
            .unwrap();
        let next = rest.next().await.unwrap();
        assert_eq!(next.text, "PLAY RECAP\n");
        assert!(rest
            .next()
            .await
            .unwrap()
            .text
            .starts_with(b"# kok-local-runner end="));
        assert!(rest.next().await.is_none(), "the end line ends the followed log");

        let done = kubelet.container_log(&pod("Succeeded"), "ansible").unwrap();
        assert_eq!(done.lines.len(), 4);
        assert!(done.rest.is_none());
    }
}
