//! What a finished run says about itself: the summary ansible leaves as the pod's termination message (pure).
//!
//! The Job's entry script writes kok's callback plugin ([`PLUGIN_SOURCE`]) into the pod and makes ansible load
//! it; the plugin records per-host counts and the first failure as JSON, and the script copies that JSON to
//! the termination message when the run succeeded or the plugin recorded a failure. For failures before
//! ansible ran a task (a missing playbook, a syntax error, a bad argument) the script writes nothing, and the
//! kubelet falls back to the last lines of the log (`terminationMessagePolicy: FallbackToLogsOnError`); the
//! local runner does the same. [`read_termination_message`] turns either form into a [`RunReport`].

use crate::api::{RunFailure, RunSummary};

/// The callback plugin the entry script writes into the pod as `kok_summary.py`.
pub const PLUGIN_SOURCE: &str = include_str!("kok_summary.py");
/// Where the kubelet reads the termination message (the Job sets it explicitly).
pub const TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
/// Environment variable overriding [`TERMINATION_MESSAGE_PATH`] in the entry script (the local runner's copy).
pub const ENV_TERMINATION_LOG: &str = "KOK_TERMINATION_LOG";
/// The most the kubelet keeps of a container's termination message, in bytes.
pub const MAX_TERMINATION_MESSAGE: usize = 4096;
/// Lines the kubelet keeps of the log when it falls back to it.
pub const FALLBACK_LINES: usize = 80;
/// Bytes the kubelet keeps of the log when it falls back to it.
pub const FALLBACK_BYTES: usize = 2048;
/// The line the entry script prints when a step fails: `kok: <step> failed with exit code <n>`.
pub const STEP_FAILED_MARK: &str = " failed with exit code ";

/// What a run left behind for kok.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunReport {
    /// Counts per host, when ansible got as far as finishing a playbook.
    pub summary: Option<RunSummary>,
    /// The first failure, from the plugin or from the error line of the output.
    pub failure: Option<RunFailure>,
    /// The Secret the run saved a new kubeconfig to (its `artifacts/admin.conf`).
    pub kubeconfig: Option<String>,
}

impl RunReport {
    /// The report with `scrub` applied to every text the run wrote into it (the failure's step, play, task,
    /// host and message), before it reaches a status, an Event or a note.
    pub fn scrubbed(mut self, scrub: impl Fn(&str) -> String) -> RunReport {
        if let Some(f) = self.failure.as_mut() {
            for text in [&mut f.step, &mut f.play, &mut f.task, &mut f.host]
                .into_iter()
                .flatten()
            {
                *text = scrub(text);
            }
            f.message = scrub(&f.message);
        }
        self
    }
}

#[derive(serde::Deserialize)]
struct PluginOutput {
    #[serde(flatten)]
    summary: RunSummary,
    #[serde(default)]
    failure: Option<RunFailure>,
    #[serde(default)]
    kubeconfig: Option<String>,
}

/// Reads a termination message: the plugin's JSON, or (anything else, including JSON cut by the kubelet's
/// limit) the tail of the output, from which the error line and the failed step are taken.
pub fn read_termination_message(message: &str) -> RunReport {
    let message = message.trim();
    if message.is_empty() {
        return RunReport::default();
    }
    if let Ok(out) = serde_json::from_str::<PluginOutput>(message) {
        let ran = out.summary.host_count > 0 || !out.summary.hosts.is_empty();
        return RunReport {
            summary: ran.then_some(out.summary),
            failure: out.failure,
            kubeconfig: out.kubeconfig,
        };
    }
    RunReport {
        summary: None,
        failure: failure_from_output(message),
        kubeconfig: None,
    }
}

/// The failure an output tail shows: its first ansible error line (`[ERROR]: ...` or `ERROR! ...`) or else
/// its last line that is not kok's own, with the step from the entry script's `kok: <step> failed` line.
pub fn failure_from_output(output: &str) -> Option<RunFailure> {
    let lines: Vec<&str> = output.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let step = lines.iter().rev().find_map(|l| {
        let rest = l.strip_prefix("kok: ")?;
        let (step, _) = rest.split_once(STEP_FAILED_MARK)?;
        Some(step.to_string())
    });
    let error = lines
        .iter()
        .position(|l| l.starts_with("[ERROR]") || l.starts_with("ERROR!"))
        .map(|i| {
            // ansible continues an error on indented or following lines up to a blank one; keep the first.
            lines[i]
                .trim_start_matches("[ERROR]:")
                .trim_start_matches("ERROR!")
                .trim()
                .to_string()
        });
    let message = error.or_else(|| {
        lines
            .iter()
            .rev()
            .find(|l| !l.starts_with("kok: "))
            .or(lines.last())
            .map(|l| l.to_string())
    })?;
    Some(RunFailure {
        step,
        message: crate::report::status::cut(&message, 1000),
        ..RunFailure::default()
    })
}

/// What the kubelet keeps of a log under `FallbackToLogsOnError`: its last [`FALLBACK_LINES`] lines, at most
/// [`FALLBACK_BYTES`] bytes (cut at a character boundary).
pub fn log_tail(lines: &[String]) -> String {
    let start = lines.len().saturating_sub(FALLBACK_LINES);
    let text = lines[start..].join("\n");
    if text.len() <= FALLBACK_BYTES {
        return text;
    }
    let mut cut = text.len() - FALLBACK_BYTES;
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    text[cut..].to_string()
}

/// A termination message cut to what the kubelet keeps ([`MAX_TERMINATION_MESSAGE`] bytes).
pub fn termination_message(text: &str) -> String {
    if text.len() <= MAX_TERMINATION_MESSAGE {
        return text.to_string();
    }
    let mut end = MAX_TERMINATION_MESSAGE;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::HostCounts;

    fn plugin_json(hosts: usize, message: &str) -> String {
        let hosts: serde_json::Map<String, serde_json::Value> = (0..hosts)
            .map(|i| {
                (
                    format!("node{i}"),
                    serde_json::json!({"ok": 3, "changed": 1, "failed": 0, "unreachable": 0, "skipped": 2}),
                )
            })
            .collect();
        serde_json::json!({
            "hosts": hosts,
            "total": {"ok": 9, "changed": 3, "failed": 1, "unreachable": 0, "skipped": 6},
            "hostCount": 3,
            "failure": {"step": "action: cluster.yml", "play": "all", "task": "preinstall : Stop", "host": "node2",
                        "message": message}
        })
        .to_string()
    }

    #[test]
    fn a_plugin_summary_is_read_whole() {
        let report = read_termination_message(&plugin_json(3, "unsupported OS"));
        let summary = report.summary.expect("summary");
        assert_eq!(summary.host_count, 3);
        assert_eq!(summary.hosts.len(), 3);
        assert_eq!(
            summary.total,
            HostCounts {
                ok: 9,
                changed: 3,
                failed: 1,
                unreachable: 0,
                skipped: 6
            }
        );
        let failure = report.failure.expect("failure");
        assert_eq!(failure.task.as_deref(), Some("preinstall : Stop"));
        assert_eq!(failure.host.as_deref(), Some("node2"));
        assert_eq!(failure.message, "unsupported OS");
    }

    #[test]
    fn a_message_of_exactly_the_kubelet_limit_is_read_and_one_cut_past_it_falls_back_to_its_text() {
        let base = plugin_json(3, "");
        let pad = MAX_TERMINATION_MESSAGE - base.len();
        let at_limit = plugin_json(3, &"m".repeat(pad));
        assert_eq!(at_limit.len(), MAX_TERMINATION_MESSAGE);
        let kept = termination_message(&at_limit);
        assert_eq!(kept, at_limit);
        let report = read_termination_message(&kept);
        assert_eq!(report.failure.unwrap().message.len(), pad);

        let past = plugin_json(3, &"m".repeat(pad + 100));
        let kept = termination_message(&past);
        assert_eq!(kept.len(), MAX_TERMINATION_MESSAGE);
        let report = read_termination_message(&kept);
        assert!(report.summary.is_none(), "cut JSON is not a summary");
        let failure = report.failure.expect("the text still says something");
        assert!(failure.message.chars().count() <= 1000);
    }

    #[test]
    fn multibyte_text_is_cut_at_a_character_boundary() {
        let text = "é".repeat(MAX_TERMINATION_MESSAGE);
        let kept = termination_message(&text);
        assert!(kept.len() <= MAX_TERMINATION_MESSAGE);
        assert!(kept.len() >= MAX_TERMINATION_MESSAGE - 1);
    }

    #[test]
    fn an_output_tail_gives_the_ansible_error_line_and_the_failed_step() {
        let tail = "kok: action: playbooks/missing.yml\n\
                    [ERROR]: the playbook: playbooks/missing.yml could not be found\n\
                    kok: action: playbooks/missing.yml failed with exit code 1\n";
        let failure = read_termination_message(tail).failure.unwrap();
        assert_eq!(
            failure.message,
            "the playbook: playbooks/missing.yml could not be found"
        );
        assert_eq!(failure.step.as_deref(), Some("action: playbooks/missing.yml"));
        let old = "ERROR! the playbook: x.yml could not be found\n";
        assert_eq!(
            read_termination_message(old).failure.unwrap().message,
            "the playbook: x.yml could not be found"
        );
    }

    #[test]
    fn without_an_error_line_the_last_line_of_the_run_is_the_message() {
        let tail = "kok: action: run.sh\nboom: disk full\nkok: action: run.sh failed with exit code 3\n";
        let failure = read_termination_message(tail).failure.unwrap();
        assert_eq!(failure.message, "boom: disk full");
        assert!(read_termination_message("  \n").failure.is_none());
    }

    #[test]
    fn a_scrubbed_report_has_the_secret_in_none_of_its_failure_texts() {
        let hide = |t: &str| t.replace("s3cret", "<redacted>");
        let report =
            read_termination_message(&plugin_json(3, "vault password s3cret is wrong")).scrubbed(hide);
        let failure = report.failure.expect("failure");
        assert_eq!(failure.message, "vault password <redacted> is wrong");
        assert_eq!(failure.task.as_deref(), Some("preinstall : Stop"));
        let tail = "[ERROR]: ssh key line s3cret refused\n";
        let failure = read_termination_message(tail).scrubbed(hide).failure.unwrap();
        assert_eq!(failure.message, "ssh key line <redacted> refused");
    }

    #[test]
    fn the_log_tail_keeps_what_the_kubelet_keeps() {
        let lines: Vec<String> = (0..200).map(|i| format!("line {i}")).collect();
        let tail = log_tail(&lines);
        assert!(tail.starts_with("line 120"));
        assert!(tail.ends_with("line 199"));
        let long: Vec<String> = (0..10).map(|i| format!("{i}{}", "x".repeat(500))).collect();
        assert!(log_tail(&long).len() <= FALLBACK_BYTES);
    }
}
