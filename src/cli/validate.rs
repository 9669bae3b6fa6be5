//! `kok validate`: check a repository against the contract, and each valid kubespray cluster against
//! kubespray's pre-flight rules; one `path:line:col: message` line per problem.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use super::plan::TrustArgs;
use super::OutputFormat;
use crate::layout::{self, DiskTree, Parsed, Severity};
use crate::source::verify::{commits_to_verify, signature_states, CommitSignature, Trust};

/// Arguments of `kok validate`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Repository directory to validate (its top holds kok.yml and the cluster root).
    #[arg(default_value = ".", env = "KOK_REPO_DIR")]
    pub dir: PathBuf,
    /// Directory inside the repository that holds one directory per cluster.
    #[arg(long, default_value = layout::DEFAULT_ROOT, env = "KOK_PATH")]
    pub path: String,
    /// `text`: one `path:line:col: message` line per problem; `json`: {clusters, invalid, diagnostics}
    /// (and `signatures` with --verify-signatures).
    #[arg(long, value_enum, default_value_t = OutputFormat::Text, env = "KOK_OUTPUT")]
    pub output: OutputFormat,
    /// Also check the signatures of the repository's commits: HEAD with `tip`, every commit after
    /// --since with `all`; an untrusted one makes the exit code 1.
    #[command(flatten)]
    pub trust: TrustArgs,
    /// With `--verify-signatures all`: the commits after this revision (e.g. origin/main) are checked.
    #[arg(long, env = "KOK_SINCE")]
    pub since: Option<String>,
}

/// Fails, saying it cannot `verb` it, unless `dir` is a directory that can be read.
pub(super) fn require_repository_dir(verb: &str, dir: &Path) -> anyhow::Result<()> {
    let meta = std::fs::metadata(dir)
        .with_context(|| format!("cannot {verb} {}: the directory is not readable", dir.display()))?;
    if !meta.is_dir() {
        anyhow::bail!(
            "cannot {verb} {}: not a directory; pass the repository's top directory",
            dir.display()
        );
    }
    Ok(())
}

/// Runs `kok validate`: diagnostics to stdout, a summary to stderr; exit 0 without errors, 1 with.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    require_repository_dir("validate", &args.dir)?;
    let mut parsed = layout::parse_repo(&DiskTree::new(&args.dir), &args.path);
    let preflight = add_preflight(&mut parsed);
    let signatures = match args.trust.verification()? {
        Some(verification) => Some(check_signatures(&args, &verification)?),
        None => None,
    };
    match args.output {
        OutputFormat::Text => {
            print!("{}", text_report(&parsed));
            for signature in signatures.iter().flatten() {
                match signature.trusted {
                    true => println!("{signature}"),
                    false => println!("{}: error: {}", signature.short(), signature.state),
                }
            }
        }
        OutputFormat::Json => println!("{}", json_report(&parsed, signatures.as_deref())?),
    }
    match preflight {
        (0, 0) => eprintln!("{}", summary(&parsed)),
        (errors, warnings) => eprintln!(
            "{} (pre-flight: {errors} of the errors, {warnings} of the warnings)",
            summary(&parsed)
        ),
    }
    let refused = signatures.iter().flatten().filter(|s| !s.trusted).count();
    if let Some(checked) = &signatures {
        eprintln!("{} commits checked, {refused} not trusted", checked.len());
    }
    Ok(if parsed.has_errors() || refused > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The signature states of HEAD (and, with `all`, the commits after --since) of the repository in DIR.
fn check_signatures(
    args: &Args,
    verification: &crate::source::verify::Verification,
) -> anyhow::Result<Vec<CommitSignature>> {
    let dir = args.dir.display();
    let repo = git2::Repository::discover(&args.dir)
        .with_context(|| format!("--verify-signatures: {dir} is not inside a git repository"))?;
    let head = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .with_context(|| format!("--verify-signatures: the repository of {dir} has no HEAD commit"))?
        .id();
    let since = match &args.since {
        Some(rev) => Some(
            repo.revparse_single(rev)
                .and_then(|o| o.peel_to_commit())
                .with_context(|| format!("--since {rev:?} is not a commit of the repository of {dir}"))?
                .id(),
        ),
        None => None,
    };
    if let Some(work_tree) = repo.workdir() {
        verification.files.check_outside(work_tree)?;
    }
    verification.files.check_outside(repo.path())?;
    let trust = Trust::load(&verification.files)?;
    let commits = commits_to_verify(&repo, since, head, verification.mode)?;
    Ok(signature_states(
        &repo,
        &commits,
        &trust,
        jiff::Timestamp::now().as_second(),
    )?)
}

/// Adds the pre-flight findings of every valid cluster to the diagnostics (kept sorted); returns how many
/// errors and warnings they are. validate sees no history: see [`crate::preflight::validate_cluster`]. A
/// cluster with pre-flight errors stays valid (the service materializes it and refuses its runs), but the
/// errors make the exit code 1.
pub fn add_preflight(parsed: &mut Parsed) -> (usize, usize) {
    let mut counts = (0, 0);
    for cluster in &parsed.clusters {
        for finding in crate::preflight::validate_cluster(cluster) {
            match finding.severity {
                Severity::Error => counts.0 += 1,
                Severity::Warning => counts.1 += 1,
            }
            parsed.diagnostics.push(finding.to_diagnostic(&cluster.name));
        }
    }
    if counts != (0, 0) {
        parsed.diagnostics.sort();
    }
    counts
}

/// One line per diagnostic, as [`layout::Diagnostic`] displays it.
pub fn text_report(parsed: &Parsed) -> String {
    parsed.diagnostics.iter().map(|d| format!("{d}\n")).collect()
}

/// `{"clusters": [valid names], "invalid": [names], "diagnostics": [...]}` and, when checked,
/// `"signatures": [...]`, pretty-printed.
pub fn json_report(parsed: &Parsed, signatures: Option<&[CommitSignature]>) -> anyhow::Result<String> {
    let mut doc = serde_json::json!({
        "clusters": parsed.clusters.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        "invalid": parsed.invalid,
        "diagnostics": parsed.diagnostics,
    });
    if let Some(signatures) = signatures {
        doc["signatures"] = serde_json::to_value(signatures).context("encoding the signature states")?;
    }
    serde_json::to_string_pretty(&doc).context("encoding the validation report as JSON")
}

/// `2 clusters valid, 1 invalid, 3 errors, 1 warning`.
pub fn summary(parsed: &Parsed) -> String {
    let errors = parsed
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .count();
    let warnings = parsed.diagnostics.len() - errors;
    let plural = |n: usize, word: &str| {
        if n == 1 {
            format!("{n} {word}")
        } else {
            format!("{n} {word}s")
        }
    };
    format!(
        "{} valid, {} invalid, {}, {}",
        plural(parsed.clusters.len(), "cluster"),
        parsed.invalid.len(),
        plural(errors, "error"),
        plural(warnings, "warning")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Diagnostic;

    fn diag(severity: Severity) -> Diagnostic {
        Diagnostic {
            path: "clusters/a/hosts.yml".into(),
            line: 3,
            column: 5,
            severity,
            message: "bad".into(),
            cluster: Some("a".into()),
        }
    }

    #[test]
    fn summary_counts_clusters_errors_and_warnings_with_plurals() {
        let parsed = Parsed {
            clusters: vec![],
            invalid: vec!["a".into()],
            diagnostics: vec![diag(Severity::Error), diag(Severity::Warning)],
            ..Parsed::default()
        };
        assert_eq!(
            summary(&parsed),
            "0 clusters valid, 1 invalid, 1 error, 1 warning"
        );
    }

    #[test]
    fn text_report_marks_warnings_after_the_location() {
        let parsed = Parsed {
            diagnostics: vec![diag(Severity::Warning)],
            ..Parsed::default()
        };
        assert_eq!(text_report(&parsed), "clusters/a/hosts.yml:3:5: warning: bad\n");
    }

    #[test]
    fn json_report_lists_valid_invalid_and_diagnostics() {
        let parsed = Parsed {
            invalid: vec!["a".into()],
            diagnostics: vec![diag(Severity::Error)],
            ..Parsed::default()
        };
        let json: serde_json::Value = serde_json::from_str(&json_report(&parsed, None).unwrap()).unwrap();
        assert_eq!(json["clusters"], serde_json::json!([]));
        assert_eq!(json["invalid"], serde_json::json!(["a"]));
        assert_eq!(json["diagnostics"][0]["severity"], "error");
        assert_eq!(json["diagnostics"][0]["line"], 3);
    }
}
