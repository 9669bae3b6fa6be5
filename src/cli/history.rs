//! `kok history <cluster>`: the commits that touched a cluster directory, newest first, each with
//! every run of its operations recorded in `refs/notes/kok`: on the commit itself, and on the later
//! commits that left the cluster as it made it; and among them the commits of `rollouts/` that ran the
//! cluster in a rollout, each run with its rollout and wave.

use std::collections::{BTreeSet, HashMap};
use std::process::ExitCode;

use anyhow::Context;
use git2::{Oid, Repository};
use serde::Serialize;

use super::plan::{GitArgs, TrustFileArgs};
use super::OutputFormat;
use crate::api::{RunRecord, StatusState};
use crate::layout;
use crate::layout::rollouts::rollouts_dir;
use crate::plan::rollouts_at;
use crate::report::notes::{parse_note, NoteEntry, NOTES_REF};
use crate::report::status::{split_run_context, CONTEXT_PREFIX};
use crate::source::verify::signature_states;
use crate::source::{cluster_history, HistoryEntry};

/// Where the remote's `refs/notes/kok` is fetched to in the cache, beside the cache's own notes
/// (which `kok run` writes when it shares the cache).
pub const REMOTE_NOTES_REF: &str = "refs/kok/remote-notes";

/// One run of an operation of a commit, from the note it was reported in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationOutcome {
    /// Operation id.
    pub operation: String,
    /// Status context, `kok/<cluster>/<id>`, with `@<firing>` for a scheduled run.
    pub context: String,
    /// For a scheduled run, its firing (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduled: Option<String>,
    /// State: pending, running, success, failure or error.
    pub state: StatusState,
    /// Description of the status.
    pub description: String,
    /// When the status was recorded (RFC 3339).
    pub time: String,
    /// Link of the status, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_url: Option<String>,
    /// The finished run's ansible summary and first failure, whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<RunRecord>,
    /// The later commit whose note holds the run, when it is not the commit itself (a run an earlier
    /// kok reported where it reconciled, see "Reading the changelog" in docs/operating.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reported_on: Option<String>,
    /// For a run of a rollout: the rollout, as its file at the commit names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout: Option<String>,
    /// For a run of a rollout: the wave the cluster was in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wave: Option<String>,
}

/// A commit of the history with every run of the operations it brought in or changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JoinedEntry {
    /// The commit.
    #[serde(flatten)]
    pub entry: HistoryEntry,
    /// Its runs: those reported on the commit itself in note order, then those reported on later
    /// commits that left the cluster alone, oldest first.
    pub operations: Vec<OperationOutcome>,
    /// Who signed it (`signed by alice@example.com (ssh key SHA256:…)`), or why it is not trusted.
    pub signature: String,
    /// Whether it carries a signature at all (the text output names the signers of signed commits).
    pub signed: bool,
}

/// Arguments of `kok history`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Cluster (directory name under --path).
    pub cluster: String,
    /// The remote and its credentials.
    #[command(flatten)]
    pub git: GitArgs,
    /// Directory inside the repository that holds one directory per cluster.
    #[arg(long, default_value = layout::DEFAULT_ROOT, env = "KOK_PATH")]
    pub path: String,
    /// Most commits shown.
    #[arg(long, default_value_t = 50, env = "KOK_LIMIT")]
    pub limit: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text, env = "KOK_OUTPUT")]
    pub output: OutputFormat,
    /// The keys signatures are checked against (without them every signature shows as untrusted).
    #[command(flatten)]
    pub trust: TrustFileArgs,
}

/// Runs `kok history`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // The walk reads the root directory's tree of every commit (a thousand entries in a fleet): hashing
    // each again as it is read would take most of the time. The objects came in through a fetch,
    // which checked them.
    git2::opts::strict_hash_verification(false);
    let (mut source, tip) = args.git.fetch()?;
    let remote_notes = match source.fetch_optional_ref(NOTES_REF, REMOTE_NOTES_REF) {
        Ok(found) => found.is_some(),
        Err(e) => {
            tracing::warn!(error = %e, "could not fetch {NOTES_REF}; showing the statuses this cache holds");
            source.repository().find_reference(REMOTE_NOTES_REF).is_ok()
        }
    };
    let repo = source.repository();
    let history = cluster_history(repo, tip, &args.path, &args.cluster, args.limit)?;
    let (parent, dir) = split_dir(&rollouts_dir(&args.path));
    let rollout_commits = cluster_history(repo, tip, &parent, &dir, args.limit)?;
    let refs: &[&str] = if remote_notes {
        &[REMOTE_NOTES_REF, NOTES_REF]
    } else {
        &[NOTES_REF]
    };
    let entries = join_notes(repo, refs, &args.cluster, history);
    let rollout_runs = join_rollout_runs(repo, refs, &args.path, &args.cluster, rollout_commits);
    let mut entries = merge_rollout_runs(repo, entries, rollout_runs, args.limit);
    let trust = args.trust.load()?;
    let now = jiff::Timestamp::now().as_second();
    for joined in &mut entries {
        let commit = Oid::from_str(&joined.entry.commit)?;
        if let Some(state) = signature_states(source.repository(), &[commit], &trust, now)?.pop() {
            joined.signed = state.signed;
            joined.signature = state.state;
        }
    }
    let mut out = std::io::stdout().lock();
    let result = match args.output {
        OutputFormat::Json => serde_json::to_writer_pretty(&mut out, &entries)
            .map_err(std::io::Error::other)
            .and_then(|()| std::io::Write::write_all(&mut out, b"\n")),
        OutputFormat::Text => std::io::Write::write_all(
            &mut out,
            joined_text(&args.cluster, &args.path, &entries).as_bytes(),
        ),
    };
    result.context("writing the history to stdout")?;
    Ok(ExitCode::SUCCESS)
}

/// The history for humans: one block per commit.
pub fn text(cluster: &str, root: &str, entries: &[HistoryEntry]) -> String {
    if entries.is_empty() {
        return format!("no commit touches {root}/{cluster}\n");
    }
    let mut out = String::new();
    for e in entries {
        out.push_str(&format!("{} {} {} {}\n", e.short, e.date, e.author, e.subject));
        for f in &e.files {
            out.push_str(&format!("    {f}\n"));
        }
    }
    out
}

/// Adds to each commit the runs of `cluster` recorded in the notes under `refs`: those of its own note
/// and those of the notes of the later commits that left the cluster as it made it (when several refs
/// hold the same context of the same commit, the latest entry wins). Only commits that have a note
/// are read.
pub fn join_notes(
    repo: &Repository,
    refs: &[&str],
    cluster: &str,
    history: Vec<HistoryEntry>,
) -> Vec<JoinedEntry> {
    let prefix = format!("{CONTEXT_PREFIX}{cluster}/");
    let notes: Vec<HashMap<Oid, Oid>> = refs.iter().map(|r| note_blobs(repo, r)).collect();
    history
        .into_iter()
        .map(|entry| {
            let own = Oid::from_str(&entry.commit).ok();
            let reporters = own.into_iter().chain(entry.unchanged_after.iter().rev().copied());
            let mut operations = Vec::new();
            for commit in reporters {
                let reported_on = (Some(commit) != own).then(|| commit.to_string());
                let runs = runs_in_notes(repo, &notes, commit, &prefix);
                operations.extend(runs.into_iter().filter_map(|n| outcome(n, &prefix, &reported_on)));
            }
            JoinedEntry {
                entry,
                operations,
                signature: String::new(),
                signed: false,
            }
        })
        .collect()
}

/// The commits that have a note under `reference`, each with its note's blob (so a note is read
/// without going through the notes tree again).
fn note_blobs(repo: &Repository, reference: &str) -> HashMap<Oid, Oid> {
    match repo.notes(Some(reference)) {
        Ok(notes) => notes
            .filter_map(Result::ok)
            .map(|(blob, annotated)| (annotated, blob))
            .collect(),
        Err(_) => HashMap::new(),
    }
}

/// The entries with contexts under `prefix` of the notes of `commit` (one map of note blobs per notes
/// ref), the latest of each context.
fn runs_in_notes(
    repo: &Repository,
    notes: &[HashMap<Oid, Oid>],
    commit: Oid,
    prefix: &str,
) -> Vec<NoteEntry> {
    let mut runs: Vec<NoteEntry> = Vec::new();
    for blobs in notes {
        let Some(blob) = blobs.get(&commit).and_then(|b| repo.find_blob(*b).ok()) else {
            continue;
        };
        let text = String::from_utf8_lossy(blob.content());
        if !text.contains(prefix) {
            continue;
        }
        for line in parse_note(&text)
            .into_iter()
            .filter(|l| l.context.starts_with(prefix))
        {
            match runs.iter_mut().find(|n| n.context == line.context) {
                Some(known) if known.time < line.time => *known = line,
                Some(_) => {}
                None => runs.push(line),
            }
        }
    }
    runs
}

fn outcome(n: NoteEntry, prefix: &str, reported_on: &Option<String>) -> Option<OperationOutcome> {
    let (operation, scheduled) = split_run_context(n.context.strip_prefix(prefix)?);
    Some(OperationOutcome {
        operation: operation.to_string(),
        scheduled: scheduled.map(str::to_string),
        context: n.context,
        state: n.state,
        description: n.description,
        time: n.time,
        target_url: n.target_url,
        run: n.run,
        reported_on: reported_on.clone(),
        rollout: None,
        wave: None,
    })
}

/// `("infra", "rollouts")` of `infra/rollouts`, `("", "rollouts")` of `rollouts`.
fn split_dir(path: &str) -> (String, String) {
    match path.rsplit_once('/') {
        Some((parent, dir)) => (parent.to_string(), dir.to_string()),
        None => (String::new(), path.to_string()),
    }
}

/// A rollout that takes `cluster` in, at one commit.
struct RolloutWave {
    rollout: String,
    operation: String,
    wave: String,
}

/// The rollouts of the commit `commit` (under the cluster root `root`) that take `cluster` in, each with
/// the wave it is in, as a pass reads them.
fn rollout_waves(repo: &Repository, commit: Oid, root: &str, cluster: &str) -> Vec<RolloutWave> {
    let Ok(Some(read)) = rollouts_at(repo, Some(commit), root) else {
        return Vec::new();
    };
    read.rollouts
        .into_iter()
        .filter_map(|r| {
            let wave = r.waves.iter().find(|w| w.clusters.iter().any(|c| c == cluster))?;
            Some(RolloutWave {
                wave: wave.name.clone(),
                rollout: r.name,
                operation: r.operation.id,
            })
        })
        .collect()
}

/// The commits of `history` (those that touched the rollouts directory) with the runs of `cluster` their
/// notes hold that belong to a rollout of the commit, each with its rollout and wave; commits without
/// such a run are left out.
pub fn join_rollout_runs(
    repo: &Repository,
    refs: &[&str],
    root: &str,
    cluster: &str,
    history: Vec<HistoryEntry>,
) -> Vec<JoinedEntry> {
    let dir = rollouts_dir(root);
    let mut joined = join_notes(repo, refs, cluster, history);
    for j in &mut joined {
        let waves = match (j.operations.is_empty(), Oid::from_str(&j.entry.commit)) {
            (false, Ok(commit)) => rollout_waves(repo, commit, root, cluster),
            _ => Vec::new(),
        };
        j.operations
            .retain_mut(|op| match waves.iter().find(|w| w.operation == op.operation) {
                Some(w) => {
                    op.rollout = Some(w.rollout.clone());
                    op.wave = Some(w.wave.clone());
                    true
                }
                None => false,
            });
        for f in &mut j.entry.files {
            *f = format!("{dir}/{f}");
        }
    }
    joined.retain(|j| !j.operations.is_empty());
    joined
}

/// The commit whose note holds `op` of `entry`.
fn reporter(entry: &JoinedEntry, op: &OperationOutcome) -> (String, String) {
    let commit = op.reported_on.as_ref().unwrap_or(&entry.entry.commit);
    (op.context.clone(), commit.clone())
}

/// The cluster's commits and its rollout runs' commits as one history, newest first on the first-parent
/// path, at most `limit`: a commit in both is one entry (its files and runs joined, the rollout runs
/// marked), and a rollout run a later note holds is shown under the rollout's commit only.
pub fn merge_rollout_runs(
    repo: &Repository,
    mut cluster: Vec<JoinedEntry>,
    rollout: Vec<JoinedEntry>,
    limit: usize,
) -> Vec<JoinedEntry> {
    // Each rollout run by the commit whose note holds it: the rollout commit it is shown under.
    let mut marked: HashMap<(String, String), (&str, &OperationOutcome)> = HashMap::new();
    for r in &rollout {
        for op in &r.operations {
            marked.insert(reporter(r, op), (&r.entry.commit, op));
        }
    }
    for c in &mut cluster {
        let commit = c.entry.commit.clone();
        let mut keys = c
            .operations
            .iter()
            .map(|op| reporter(c, op))
            .collect::<Vec<_>>()
            .into_iter();
        c.operations.retain_mut(|op| {
            let Some((owner, run)) = keys.next().and_then(|k| marked.get(&k)) else {
                return true;
            };
            (op.rollout, op.wave) = (run.rollout.clone(), run.wave.clone());
            *owner == commit
        });
    }
    let in_cluster: BTreeSet<String> = cluster.iter().map(|c| c.entry.commit.clone()).collect();
    for r in rollout.iter().filter(|r| in_cluster.contains(&r.entry.commit)) {
        if let Some(c) = cluster.iter_mut().find(|c| c.entry.commit == r.entry.commit) {
            c.entry.files.extend(r.entry.files.iter().cloned());
        }
    }
    let mut rest = rollout
        .into_iter()
        .filter(|r| !in_cluster.contains(&r.entry.commit))
        .peekable();
    let mut cluster = cluster.into_iter().peekable();
    let mut out = Vec::new();
    while out.len() < limit {
        let newer_rollout = match (cluster.peek(), rest.peek()) {
            (None, None) => break,
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (Some(c), Some(r)) => descends(repo, &r.entry.commit, &c.entry.commit),
        };
        out.extend(if newer_rollout {
            rest.next()
        } else {
            cluster.next()
        });
    }
    out
}

/// True when the commit `a` comes after `b` in history.
fn descends(repo: &Repository, a: &str, b: &str) -> bool {
    match (Oid::from_str(a), Oid::from_str(b)) {
        (Ok(a), Ok(b)) => repo.graph_descendant_of(a, b).unwrap_or(false),
        _ => false,
    }
}

/// The history for humans with operation outcomes: the files each commit touched, indented by four
/// spaces, then its operations, indented by two.
pub fn joined_text(cluster: &str, root: &str, entries: &[JoinedEntry]) -> String {
    if entries.is_empty() {
        return format!("no commit touches {root}/{cluster}\n");
    }
    let mut out = String::new();
    for joined in entries {
        out.push_str(&text(cluster, root, std::slice::from_ref(&joined.entry)));
        if joined.signed {
            out.push_str(&format!("  {}\n", joined.signature));
        }
        for op in &joined.operations {
            let state = match op.state {
                StatusState::Pending => "pending",
                StatusState::Running => "running",
                StatusState::Success => "success",
                StatusState::Failure => "failure",
                StatusState::Error => "error",
            };
            out.push_str(&format!(
                "  {}: {state} {} {}",
                op.context, op.time, op.description
            ));
            if let Some(url) = &op.target_url {
                out.push_str(&format!(" <{url}>"));
            }
            if let Some(commit) = &op.reported_on {
                out.push_str(&format!(" (reported on {})", &commit[..commit.len().min(8)]));
            }
            if let (Some(rollout), Some(wave)) = (&op.rollout, &op.wave) {
                out.push_str(&format!(" [rollout {rollout}, wave {wave}]"));
            }
            out.push('\n');
        }
    }
    out
}
