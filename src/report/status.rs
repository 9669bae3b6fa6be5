//! Pure mapping from an operation's phase (or a commit's sync result) to the commit status it should show.

use sha2::{Digest, Sha256};

use crate::api::{
    ClusterOperation, CommitStatus, OperationRecord, Phase, RunFailure, RunRecord, RunSummary, StatusState,
    VerificationState, HELD_PREFIX,
};
use crate::layout::model::{Diagnostic, Severity};

/// Context of the per-commit status saying whether the commit materialized.
pub const SYNC_CONTEXT: &str = "kok/sync";
/// Longest description kept in a desired status; each sink cuts further to its forge's limit.
pub const MAX_STORED_DESCRIPTION: usize = 255;

pub use crate::api::{operation_context, run_context, split_run_context, CONTEXT_PREFIX, FIRING_SEPARATOR};

/// The commit status an operation in `phase` should show on the commit that introduced it.
///
/// Queued and Pending map to pending, Running to running (sinks translate it to their forge's word),
/// Succeeded to success and Failed/Canceled to failure. `message` is the reason of the phase (e.g.
/// `DeadlineExceeded: the Job exceeded its deadline of 12h0m (activeDeadlineSeconds 43200)`); the
/// description is kept short and cut to [`MAX_STORED_DESCRIPTION`] characters.
///
/// `url_template` may hold the placeholders `{namespace}`, `{job}`, `{operation}`, `{cluster}` and
/// `{commit}`. `{job}` is `status.jobRef`; while the operation has no Job yet, a template that needs
/// `{job}` gives no `target_url` rather than a broken link.
pub fn operation_status(
    op: &ClusterOperation,
    phase: Phase,
    message: Option<&str>,
    url_template: Option<&str>,
    namespace: &str,
) -> CommitStatus {
    let spec = &op.spec;
    let status = op.status.as_ref();
    let message = message.map(str::trim).filter(|m| !m.is_empty());
    let verification = status.and_then(|s| s.verification.as_deref());
    let verification_is = |state| verification.is_some_and(|v| v.state == state);
    let (state, description) = match phase {
        Phase::Queued if message.is_some_and(|m| m.starts_with(HELD_PREFIX)) => {
            (StatusState::Pending, message.unwrap_or_default().to_string())
        }
        Phase::Pending | Phase::Queued => (
            StatusState::Pending,
            with_reason(&phase.as_str().to_ascii_lowercase(), message),
        ),
        Phase::Running if verification_is(VerificationState::Verifying) => {
            (StatusState::Running, message.unwrap_or_default().to_string())
        }
        Phase::Running => {
            let mut command = spec.action.clone();
            for arg in &spec.extra_args {
                command.push(' ');
                command.push_str(arg);
            }
            (StatusState::Running, format!("running: {command}"))
        }
        Phase::Succeeded => {
            let took = status.and_then(run_duration);
            let mut text = match took {
                Some(d) => format!("succeeded in {d}"),
                None => "succeeded".to_string(),
            };
            if let Some(summary) = status.and_then(|s| s.summary.as_ref()) {
                text.push_str(": ");
                text.push_str(&summary_words(summary));
            }
            if let Some(verified) = verification.and_then(|v| v.message.as_deref()) {
                text.push_str("; ");
                text.push_str(verified);
            }
            (StatusState::Success, text)
        }
        Phase::Failed if verification_is(VerificationState::Failed) => {
            (StatusState::Failure, message.unwrap_or_default().to_string())
        }
        Phase::Failed => (
            StatusState::Failure,
            match status.and_then(|s| s.failure.as_ref()) {
                Some(failure) => failure_words(failure),
                None => with_reason("failed", message),
            },
        ),
        Phase::Canceled => (StatusState::Failure, with_reason("canceled", message)),
    };
    let description = match status.and_then(|s| s.kubeconfig.as_deref()) {
        Some(secret) if phase.is_terminal() => format!("{description}; kubeconfig saved to Secret {secret}"),
        _ => description,
    };
    let name = op.metadata.name.as_deref().unwrap_or_default();
    let job = status.and_then(|s| s.job_ref.as_deref());
    let target_url = url_template.and_then(|template| {
        render_url(
            template,
            &UrlValues {
                namespace,
                job,
                operation: name,
                cluster: &spec.cluster,
                commit: &spec.source.commit,
            },
        )
    });
    let finished = status.filter(|_| phase.is_terminal());
    let run = Some(RunRecord {
        operation: Some(OperationRecord::of(op, phase, message)),
        summary: finished.and_then(|s| s.summary.as_deref().cloned()),
        failure: finished.and_then(|s| s.failure.as_deref().cloned()),
    });
    CommitStatus {
        context: run_context(&spec.cluster, &spec.id, spec.scheduled_time.as_deref()),
        state,
        description: cut(&description, MAX_STORED_DESCRIPTION),
        target_url,
        run,
    }
}

/// The commit status `op` should show now, computed from its status as the controller left it: kok
/// stores only the digest of the one delivered (`status.reportedDigest`), not the status itself (a
/// second copy of the run's summary and times in every run kept). A status stored in `desiredStatus` (a
/// restored or canceled run, or one an earlier kok wrote) is that one; none before the controller
/// wrote a status.
pub fn desired_status(
    op: &ClusterOperation,
    url_template: Option<&str>,
    namespace: &str,
) -> Option<CommitStatus> {
    let status = op.status.as_ref()?;
    if let Some(stored) = &status.desired_status {
        return Some(CommitStatus::clone(stored));
    }
    Some(operation_status(
        op,
        status.phase,
        status.message.as_deref(),
        url_template,
        namespace,
    ))
}

/// True when `op` should show a commit status and it is the one last delivered.
pub fn desired_is_reported(op: &ClusterOperation, url_template: Option<&str>, namespace: &str) -> bool {
    let desired = desired_status(op, url_template, namespace);
    desired.is_some_and(|d| op.status.as_ref().is_some_and(|s| s.has_reported(&d)))
}

/// The `kok/sync` status of a reconciled commit.
///
/// Without error diagnostics it is success, `materialized N clusters`; otherwise it is error and the
/// description lists the problems as `path:line: problem`, separated by `; `, cut to
/// [`MAX_STORED_DESCRIPTION`] characters (sinks cut further). Warnings are not listed.
/// `target_url` comes from `url_template` with `{commit}` and `{namespace}` replaced; a template that
/// needs an operation's placeholders gives none.
pub fn sync_status(
    commit: &str,
    materialized: usize,
    diagnostics: &[Diagnostic],
    url_template: Option<&str>,
    namespace: &str,
) -> CommitStatus {
    let errors: Vec<String> = diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| format!("{}:{}: {}", d.path, d.line, d.message))
        .collect();
    let (state, description) = if errors.is_empty() {
        let noun = if materialized == 1 { "cluster" } else { "clusters" };
        (
            StatusState::Success,
            format!("materialized {materialized} {noun}"),
        )
    } else {
        (StatusState::Error, errors.join("; "))
    };
    let target_url = url_template.and_then(|template| {
        render_url(
            template,
            &UrlValues {
                namespace,
                job: None,
                operation: "",
                cluster: "",
                commit,
            },
        )
        .filter(|_| !template.contains("{operation}") && !template.contains("{cluster}"))
    });
    CommitStatus {
        context: SYNC_CONTEXT.to_string(),
        state,
        description: cut(&description, MAX_STORED_DESCRIPTION),
        target_url,
        run: None,
    }
}

/// The `kok/sync` status of a commit refused by signature verification: `error`, with the reason.
pub fn refused_status(description: &str) -> CommitStatus {
    CommitStatus {
        context: SYNC_CONTEXT.to_string(),
        state: StatusState::Error,
        description: cut(description, MAX_STORED_DESCRIPTION),
        target_url: None,
        run: None,
    }
}

/// Context of the one status that stands for all of a commit's operations when they are more than a
/// forge sink's budget (`--status-max-contexts`).
pub const SUMMARY_CONTEXT: &str = "kok/summary";

/// How many of a commit's operations are in each state, for its [`summary_status`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Succeeded.
    pub succeeded: usize,
    /// Failed or canceled (status failure or error).
    pub failed: usize,
    /// Running.
    pub running: usize,
    /// Pending or queued, or without a status yet.
    pub queued: usize,
}

impl Tally {
    /// Every operation counted.
    pub fn total(&self) -> usize {
        self.succeeded + self.failed + self.running + self.queued
    }

    /// The counter an operation whose status is in `state` (`None`: no status yet) belongs to.
    pub fn slot(&mut self, state: Option<StatusState>) -> &mut usize {
        match state {
            Some(StatusState::Success) => &mut self.succeeded,
            Some(StatusState::Failure | StatusState::Error) => &mut self.failed,
            Some(StatusState::Running) => &mut self.running,
            Some(StatusState::Pending) | None => &mut self.queued,
        }
    }

    /// True when no operation is running or waiting.
    pub fn finished(&self) -> bool {
        self.running == 0 && self.queued == 0
    }
}

/// The `kok/summary` status of a commit whose operations are counted in `tally`.
///
/// The description is `<succeeded>/<total> succeeded`, followed by `, N failed`, `, N running` and
/// `, N queued` for the counts that are not zero (e.g. `812/1000 succeeded, 3 failed, 185 running`).
/// The state is pending while any operation runs or waits, then failure when any failed, else success.
pub fn summary_status(tally: &Tally) -> CommitStatus {
    let mut description = format!("{}/{} succeeded", tally.succeeded, tally.total());
    for (n, word) in [
        (tally.failed, "failed"),
        (tally.running, "running"),
        (tally.queued, "queued"),
    ] {
        if n > 0 {
            description.push_str(&format!(", {n} {word}"));
        }
    }
    let state = if !tally.finished() {
        StatusState::Pending
    } else if tally.failed > 0 {
        StatusState::Failure
    } else {
        StatusState::Success
    };
    CommitStatus {
        context: SUMMARY_CONTEXT.to_string(),
        state,
        description,
        target_url: None,
        run: None,
    }
}

/// Cuts `text` to at most `max` characters, ending with `…` when something was cut.
pub fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    if max == 0 {
        return String::new();
    }
    let mut out: String = text.chars().take(max - 1).collect();
    out.push('…');
    out
}

/// Shortens a context longer than `max` characters: keeps its start and appends `-` and the first
/// 8 hex digits of the sha256 of the whole context, so distinct long contexts stay distinct.
pub fn shorten_context(context: &str, max: usize) -> String {
    if context.chars().count() <= max {
        return context.to_string();
    }
    let hash = hex::encode(Sha256::digest(context.as_bytes()));
    let suffix = &hash[..8];
    let keep = max.saturating_sub(suffix.len() + 1);
    let mut out: String = context.chars().take(keep).collect();
    out.push('-');
    out.push_str(suffix);
    out
}

/// A run summary in a few words: `3 hosts, 41 changed` (and failures or unreachable hosts when there were any).
pub fn summary_words(summary: &RunSummary) -> String {
    let hosts = summary.host_count.max(summary.hosts.len() as u32);
    let mut words = vec![format!("{hosts} {}", if hosts == 1 { "host" } else { "hosts" })];
    let t = &summary.total;
    words.push(format!("{} changed", t.changed));
    if t.failed > 0 {
        words.push(format!("{} failed", t.failed));
    }
    if t.unreachable > 0 {
        words.push(format!("{} unreachable", t.unreachable));
    }
    words.join(", ")
}

/// A run's first failure as a commit status says it: `failed at TASK [role : task] on node2: message`,
/// `node3 unreachable: message`, or `failed: message` for a failure before ansible ran a task. A failure in
/// a hook starts with the hook: `pre-hook 1/1: ping.yml failed at TASK [...]`.
pub fn failure_words(failure: &RunFailure) -> String {
    let hook = failure
        .step
        .as_deref()
        .filter(|s| !s.starts_with("action:") && *s != "setup");
    let message = failure.message.trim();
    let mut text = match (&failure.host, &failure.task) {
        (Some(host), _) if failure.unreachable => format!("{host} unreachable: {message}"),
        (host, Some(task)) => {
            let on = host.as_deref().map(|h| format!(" on {h}")).unwrap_or_default();
            format!("failed at TASK [{task}]{on}: {message}")
        }
        _ => format!("failed: {message}"),
    };
    if let Some(hook) = hook {
        let sep = if failure.unreachable { ": " } else { " " };
        text = format!("{hook}{sep}{text}");
    }
    text
}

fn with_reason(word: &str, message: Option<&str>) -> String {
    match message {
        Some(m) => format!("{word}: {m}"),
        None => word.to_string(),
    }
}

/// `status.duration` when the controller set it, else end minus start.
fn run_duration(status: &crate::api::ClusterOperationStatus) -> Option<String> {
    if let Some(d) = status.duration.as_deref().filter(|d| !d.is_empty()) {
        return Some(d.to_string());
    }
    let start = status.start_time.as_ref()?.0;
    let end = status.end_time.as_ref()?.0;
    let secs = end
        .as_second()
        .checked_sub(start.as_second())
        .filter(|s| *s >= 0)?;
    Some(format_seconds(secs))
}

/// `3m12s`, `1h2m3s`, `45s`.
fn format_seconds(secs: i64) -> String {
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}

struct UrlValues<'a> {
    namespace: &'a str,
    job: Option<&'a str>,
    operation: &'a str,
    cluster: &'a str,
    commit: &'a str,
}

/// Replaces the placeholders; `None` when `{job}` is needed and unknown.
fn render_url(template: &str, values: &UrlValues<'_>) -> Option<String> {
    if template.contains("{job}") && values.job.is_none() {
        return None;
    }
    Some(
        template
            .replace("{namespace}", values.namespace)
            .replace("{job}", values.job.unwrap_or_default())
            .replace("{operation}", values.operation)
            .replace("{cluster}", values.cluster)
            .replace("{commit}", values.commit),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ClusterOperationSpec, ClusterOperationStatus, ConfigMapRef, OperationSource};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn op(status: Option<ClusterOperationStatus>) -> ClusterOperation {
        let mut op = ClusterOperation::new(
            "prod-bj-add-node7-0123abcd",
            ClusterOperationSpec {
                cluster: "prod-bj".into(),
                id: "add-node7".into(),
                digest: "0123abcd".into(),
                action: "scale.yml".into(),
                extra_args: vec!["--limit=node7".into()],
                image: "img".into(),
                hosts_conf_ref: ConfigMapRef { name: "h".into() },
                vars_conf_ref: Some(ConfigMapRef { name: "v".into() }),
                source: OperationSource {
                    commit: "c0ffee".into(),
                    revision: "main@sha1:c0ffee".into(),
                    path: "clusters/prod-bj".into(),
                },
                queue_position: "0".into(),
                ..Default::default()
            },
        );
        op.status = status;
        op
    }

    #[test]
    fn the_status_apply_writes_when_it_cancels_an_operation_is_the_one_its_canceled_phase_maps_to() {
        let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        for firing in [None, Some("2026-11-28T03:00:00Z")] {
            let mut queued = op(Some(ClusterOperationStatus {
                phase: Phase::Queued,
                ..Default::default()
            }));
            queued.spec.scheduled_time = firing.map(str::to_string);
            let message = crate::materialize::apply::CANCELED_MESSAGE;
            let patch = crate::materialize::apply::cancel_patch(&queued, message, now);
            let written: CommitStatus =
                serde_json::from_value(patch["status"]["desiredStatus"].clone()).unwrap();
            assert_eq!(
                written,
                operation_status(&queued, Phase::Canceled, Some(message), None, "kok-system")
            );
        }
    }

    #[test]
    fn queued_operation_is_pending_with_its_context() {
        let s = operation_status(&op(None), Phase::Queued, None, None, "kok-system");
        assert_eq!(s.context, "kok/prod-bj/add-node7");
        assert_eq!(s.state, StatusState::Pending);
        assert_eq!(s.description, "queued");
        assert_eq!(s.target_url, None);
    }

    #[test]
    fn a_scheduled_run_has_a_context_of_its_own_that_splits_back_into_operation_and_firing() {
        let mut scheduled = op(None);
        scheduled.spec.scheduled_time = Some("2026-11-22T03:00:00Z".into());
        let s = operation_status(&scheduled, Phase::Succeeded, None, None, "ns");
        assert_eq!(s.context, "kok/prod-bj/add-node7@2026-11-22T03:00:00Z");
        assert_eq!(
            split_run_context(&s.context),
            ("kok/prod-bj/add-node7", Some("2026-11-22T03:00:00Z"))
        );
        assert_eq!(
            split_run_context("kok/prod-bj/add-node7"),
            ("kok/prod-bj/add-node7", None)
        );
    }

    #[test]
    fn running_operation_describes_its_command_line() {
        let s = operation_status(&op(None), Phase::Running, None, None, "ns");
        assert_eq!(s.state, StatusState::Running);
        assert_eq!(s.description, "running: scale.yml --limit=node7");
    }

    #[test]
    fn succeeded_operation_says_how_long_it_took() {
        let start: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let end: jiff::Timestamp = "2026-01-01T00:03:12Z".parse().unwrap();
        let status = ClusterOperationStatus {
            start_time: Some(Time(start)),
            end_time: Some(Time(end)),
            ..Default::default()
        };
        let s = operation_status(&op(Some(status)), Phase::Succeeded, None, None, "ns");
        assert_eq!(s.state, StatusState::Success);
        assert_eq!(s.description, "succeeded in 3m12s");
    }

    #[test]
    fn failed_and_canceled_operations_are_failures_with_their_reason() {
        let s = operation_status(
            &op(None),
            Phase::Failed,
            Some("DeadlineExceeded: too slow"),
            None,
            "ns",
        );
        assert_eq!(
            (s.state, s.description.as_str()),
            (StatusState::Failure, "failed: DeadlineExceeded: too slow")
        );
        let s = operation_status(&op(None), Phase::Canceled, None, None, "ns");
        assert_eq!(
            (s.state, s.description.as_str()),
            (StatusState::Failure, "canceled")
        );
    }

    #[test]
    fn target_url_fills_every_placeholder() {
        let status = ClusterOperationStatus {
            job_ref: Some("kok-job".into()),
            ..Default::default()
        };
        let t = "https://logs/{namespace}/{job}?op={operation}&c={cluster}&sha={commit}";
        let s = operation_status(&op(Some(status)), Phase::Running, None, Some(t), "kok-system");
        assert_eq!(
            s.target_url.as_deref(),
            Some("https://logs/kok-system/kok-job?op=prod-bj-add-node7-0123abcd&c=prod-bj&sha=c0ffee")
        );
    }

    #[test]
    fn target_url_needing_a_job_is_absent_before_the_job_exists() {
        let s = operation_status(&op(None), Phase::Queued, None, Some("https://l/{job}"), "ns");
        assert_eq!(s.target_url, None);
    }

    #[test]
    fn long_failure_message_is_cut_to_the_stored_limit() {
        let long = "x".repeat(1000);
        let s = operation_status(&op(None), Phase::Failed, Some(&long), None, "ns");
        assert_eq!(s.description.chars().count(), MAX_STORED_DESCRIPTION);
        assert!(s.description.ends_with('…'));
    }

    #[test]
    fn sync_status_is_success_without_errors_and_error_listing_problems_otherwise() {
        let ok = sync_status("abc", 3, &[], None, "ns");
        assert_eq!(
            (ok.context.as_str(), ok.state, ok.description.as_str()),
            ("kok/sync", StatusState::Success, "materialized 3 clusters")
        );
        let problem = Diagnostic {
            path: "clusters/prod-bj/hosts.yml".into(),
            line: 12,
            column: 3,
            severity: Severity::Error,
            message: "host \"node7\" is not defined".into(),
            cluster: Some("prod-bj".into()),
        };
        let warning = Diagnostic {
            severity: Severity::Warning,
            message: "just a warning".into(),
            ..problem.clone()
        };
        let bad = sync_status("abc", 2, &[problem, warning], Some("https://ci/{commit}"), "ns");
        assert_eq!(bad.state, StatusState::Error);
        assert_eq!(
            bad.description,
            "clusters/prod-bj/hosts.yml:12: host \"node7\" is not defined"
        );
        assert_eq!(bad.target_url.as_deref(), Some("https://ci/abc"));
    }

    #[test]
    fn summary_counts_every_state_and_is_pending_until_all_finished() {
        let mut tally = Tally {
            succeeded: 812,
            failed: 3,
            running: 185,
            queued: 0,
        };
        let s = summary_status(&tally);
        assert_eq!(s.context, "kok/summary");
        assert_eq!(s.description, "812/1000 succeeded, 3 failed, 185 running");
        assert_eq!(s.state, StatusState::Pending);
        tally.running = 0;
        tally.queued = 2;
        assert_eq!(
            summary_status(&tally).description,
            "812/817 succeeded, 3 failed, 2 queued"
        );
        tally.queued = 0;
        assert_eq!(summary_status(&tally).state, StatusState::Failure);
        tally.failed = 0;
        let done = summary_status(&tally);
        assert_eq!(
            (done.state, done.description.as_str()),
            (StatusState::Success, "812/812 succeeded")
        );
        *tally.slot(Some(StatusState::Error)) += 1;
        *tally.slot(None) += 1;
        assert_eq!((tally.failed, tally.queued), (1, 1));
    }

    #[test]
    fn long_contexts_keep_their_start_and_get_a_hash_suffix() {
        let a = format!("kok/{}/a", "c".repeat(300));
        let b = format!("kok/{}/b", "c".repeat(300));
        let (sa, sb) = (shorten_context(&a, 255), shorten_context(&b, 255));
        assert_eq!(sa.chars().count(), 255);
        assert_ne!(sa, sb);
        assert!(sa.starts_with("kok/ccc"));
        assert_eq!(shorten_context("kok/sync", 255), "kok/sync");
    }
}
