//! The docs say what the code does: the names and labels of a run's objects, the conditions of a Cluster,
//! the flags that set a status's link, where a generated file is regenerated, the figures of the
//! performance page, and where the health checks read the inventory. Each check takes what it compares
//! from the code (or from the page's own tables) rather than from a copy in the test.

use std::collections::BTreeSet;
use std::path::Path;

use clap::CommandFactory;
use kok::cli::reference::Page;

use super::markdown::{Doc, Kind};
use super::{assert_none, doc_pages, read, root};

// ---------------------------------------------------------------------------------------------------
// Names of a run's objects

/// The forms of the names kok gives a run's objects, as the code builds them, with `<cluster>`, `<id>`,
/// `<digest8>` and `<yyyymmddhhmm>` for their parts: the ClusterOperation, a scheduled run of it, its Job.
fn run_name_forms() -> [(&'static str, String); 3] {
    use kok::materialize::names::{operation_name, scheduled_operation_name};
    let digest = "0123456789abcdef".repeat(4);
    let operation = operation_name("CLUSTER", "ID", &digest);
    let time: jiff::Timestamp = "2026-01-02T03:04:00Z".parse().expect("a timestamp");
    let scheduled = scheduled_operation_name(&operation, time);
    let job = kok::controller::job::job_name(&operation);
    let form = |name: &str| {
        name.replace("CLUSTER", "<cluster>")
            .replace("ID", "<id>")
            .replace("202601020304", "<yyyymmddhhmm>")
            .replace("01234567", "<digest8>")
    };
    [
        ("ClusterOperation", form(&operation)),
        ("scheduled run", form(&scheduled)),
        ("Job", form(&job)),
    ]
}

/// A name or form as a sequence of literal characters and `<placeholder>`s.
#[derive(Clone, Debug, PartialEq)]
enum Piece {
    Char(char),
    Hole(String),
}

fn pieces(text: &str) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c == '<' {
            if let Some(end) = rest.find('>') {
                out.push(Piece::Hole(rest[1..end].to_string()));
                rest = &rest[end + 1..];
                continue;
            }
        }
        out.push(Piece::Char(c));
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// Whether the characters of a hole of the form may be `c`, and how many the hole takes (min, max).
fn hole_class(hole: &str) -> (fn(char) -> bool, usize, usize) {
    match hole {
        "digest8" => (|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase(), 8, 8),
        "yyyymmddhhmm" => (|c| c.is_ascii_digit(), 12, 12),
        _ => (
            |c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-',
            1,
            63,
        ),
    }
}

/// Whether `written` (a name as the docs write it: literal, with the form's placeholders, or both) is
/// one the form `form` can give.
fn fits(written: &[Piece], form: &[Piece]) -> bool {
    match (written.first(), form.first()) {
        (None, None) => true,
        (_, None) => false,
        (Some(Piece::Hole(w)), Some(Piece::Hole(f))) if w == f => fits(&written[1..], &form[1..]),
        (Some(Piece::Char(w)), Some(Piece::Char(f))) => w == f && fits(&written[1..], &form[1..]),
        (_, Some(Piece::Hole(f))) => {
            let (class, min, max) = hole_class(f);
            let run = written
                .iter()
                .take_while(|p| matches!(p, Piece::Char(c) if class(*c)))
                .count();
            (min..=max.min(run)).any(|n| fits(&written[n..], &form[1..]))
        }
        _ => false,
    }
}

/// The code spans right after `word` on `line` (`ClusterOperation \`x\``, `ClusterOperation named
/// \`x\``, a table row `| ClusterOperation | \`x\``).
fn spans_after(line: &str, word: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (at, _) in line.match_indices(word) {
        // The word itself, not a code span of it (`ClusterOperation` objects) or a longer word.
        if line[..at].ends_with('`') || !line[at + word.len()..].starts_with([' ', '|']) {
            continue;
        }
        let rest = line[at + word.len()..].trim_start_matches([' ', '|']);
        let rest = rest.strip_prefix("named ").unwrap_or(rest);
        if let Some(span) = rest.strip_prefix('`').and_then(|r| r.split('`').next()) {
            out.push(span.to_string());
        }
    }
    out
}

#[test]
fn names_of_a_runs_objects_in_the_docs_have_the_form_the_code_gives() {
    let forms = run_name_forms();
    let [(_, operation), (_, scheduled), (_, job)] = &forms;
    assert_eq!(
        operation, "<cluster>-<id>-<digest8>",
        "the form changed: update the docs and this line"
    );
    let mut failures = Vec::new();
    let mut checked = 0;
    for page in doc_pages() {
        let doc = read(&page);
        for (i, line) in doc.lines.iter().enumerate() {
            let at = format!("{}:{}", page.display(), i + 1);
            let mut claims: Vec<(String, Vec<&String>)> = spans_after(line, "ClusterOperation")
                .into_iter()
                .map(|s| (s, vec![operation, scheduled]))
                .collect();
            claims.extend(spans_after(line, "Job").into_iter().map(|s| (s, vec![job])));
            // `kubectl logs job/<name>`: the Job's name, unless the docs name it with one placeholder.
            for (at_job, _) in line.match_indices("job/") {
                let name: String = line[at_job + 4..]
                    .chars()
                    .take_while(|c| !c.is_whitespace() && *c != '`')
                    .collect();
                if name != "kok-<name>" && name != "<job>" {
                    claims.push((name, vec![job]));
                }
            }
            for (written, allowed) in claims {
                checked += 1;
                if !allowed.iter().any(|form| fits(&pieces(&written), &pieces(form))) {
                    failures.push(format!(
                        "{at}: `{written}` is not a name kok gives: it names them {}",
                        allowed
                            .iter()
                            .map(|f| format!("`{f}`"))
                            .collect::<Vec<_>>()
                            .join(" or ")
                    ));
                }
            }
        }
    }
    eprintln!("checked {checked} names of ClusterOperations and Jobs");
    assert_none("names of a run's objects that kok never gives", &failures);
}

#[test]
fn name_forms_match_literal_names_and_their_own_placeholders_only() {
    let form = pieces("<cluster>-<id>-<digest8>");
    for good in [
        "local-hello-again-1a2b3c4d",
        "<cluster>-<id>-<digest8>",
        "local-hello-again-<digest8>",
    ] {
        assert!(fits(&pieces(good), &form), "{good}");
    }
    for bad in [
        "hello-again",
        "<operation>-<yyyymmddhhmm>",
        "local-hello-1A2B3C4D",
        "prod-bj-x-1a2b3c4",
    ] {
        assert!(!fits(&pieces(bad), &form), "{bad}");
    }
    assert_eq!(
        spans_after(
            "a ClusterOperation named `x-y` and | ClusterOperation | `z` |",
            "ClusterOperation"
        ),
        ["x-y", "z"]
    );
}

/// The labels kok sets on a run's objects, from the code.
fn run_labels() -> BTreeSet<String> {
    use kok::api::*;
    let mut labels: BTreeSet<String> = [
        LABEL_MANAGED_BY,
        LABEL_CLUSTER,
        LABEL_OPERATION,
        LABEL_CLUSTER_OPERATION,
        LABEL_CONTENT,
        LABEL_CURRENT,
        LABEL_ROLLOUT,
        LABEL_WAVE,
        kok::controller::job::JOB_NAME_LABEL,
    ]
    .map(String::from)
    .into();
    labels.insert("app.kubernetes.io/name".into());
    labels
}

/// The keys of every `-l key=value,...` selector on `line`.
fn selector_keys(line: &str) -> Vec<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[0] == "-l" || w[0] == "--selector")
        .flat_map(|w| {
            w[1].trim_matches('`')
                .split(',')
                .map(|kv| kv.split(['=', '!']).next().unwrap_or_default().to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn label_selectors_in_the_docs_use_the_labels_kok_sets() {
    let known = run_labels();
    let mut failures = Vec::new();
    for page in doc_pages() {
        let doc = read(&page);
        for (i, line) in doc.lines.iter().enumerate() {
            for key in selector_keys(line) {
                if !known.contains(&key) {
                    failures.push(format!(
                        "{}:{}: `-l {key}=...`: kok sets no label {key} (it sets {known:?})",
                        page.display(),
                        i + 1
                    ));
                }
            }
        }
    }
    assert_none("label selectors with labels kok does not set", &failures);
}

#[test]
fn runbooks_say_how_to_go_from_an_alert_to_a_runs_operation_job_pod_and_log() {
    use kok::api::{LABEL_CLUSTER, LABEL_OPERATION};
    let page = Path::new("docs/runbooks.md");
    let doc = read(page);
    let section = section_text(&doc, "From an alert to a run's log")
        .unwrap_or_else(|| panic!("{} has no section `From an alert to a run's log`", page.display()));
    // The labels the section selects a Job's objects by are on the Job and its pods.
    let mut op = kok::api::ClusterOperation::new("prod-bj-upgrade-1a2b3c4d", Default::default());
    op.spec.cluster = "prod-bj".into();
    op.spec.id = "upgrade".into();
    let on_job = kok::controller::job::job_labels(&op);
    for label in [LABEL_CLUSTER, LABEL_OPERATION] {
        assert!(
            on_job.contains_key(label),
            "a Job has no label {label}: {on_job:?}"
        );
    }
    let selector = format!("-l {LABEL_CLUSTER}=prod-bj,{LABEL_OPERATION}=upgrade");
    let job = kok::controller::job::job_name("prod-bj-upgrade-1a2b3c4d");
    for wanted in [
        format!("get clusterops {selector}"),
        format!("get jobs {selector}"),
        format!("get pods {selector}"),
        format!("logs job/{job}"),
    ] {
        assert!(
            section.contains(&wanted),
            "{}: the section lacks `{wanted}`",
            page.display()
        );
    }
    for (what, form) in run_name_forms() {
        assert!(
            section.contains(&format!("`{form}`")),
            "the section does not give the {what}'s name `{form}`"
        );
    }
}

/// The lines of the section under the heading `title`, up to the next heading of its level or above.
fn section_text(doc: &Doc, title: &str) -> Option<String> {
    let heading = doc.headings.iter().find(|h| h.text == title)?;
    let end = doc
        .headings
        .iter()
        .find(|h| h.line > heading.line && h.level <= heading.level)
        .map_or(doc.lines.len(), |h| h.line - 1);
    Some(doc.lines[heading.line..end].join("\n"))
}

// ---------------------------------------------------------------------------------------------------
// Conditions and flags in the CRD reference

#[test]
fn every_cluster_condition_kok_sets_is_in_the_crd_reference() {
    let page = "docs/reference/crds.md";
    let text = std::fs::read_to_string(root().join(page)).expect("the CRD reference");
    // The Cluster's section comes first; its `status.conditions` row says which conditions kok sets.
    let cluster = text
        .split("\n## ")
        .find(|s| s.starts_with("Cluster\n"))
        .expect("a `## Cluster` section");
    let row = cluster
        .lines()
        .find(|l| l.starts_with("| `status.conditions` |"))
        .expect("a status.conditions row");
    let missing: Vec<String> = kok::api::CLUSTER_CONDITIONS
        .iter()
        .chain(kok::health::conditions::HEALTH_CONDITIONS.iter())
        .filter(|c| !row.contains(*c))
        .map(|c| format!("{page}: Cluster's `status.conditions` does not name the condition {c}"))
        .collect();
    assert_none(
        "Cluster conditions kok sets that the CRD reference leaves out (the field's `///` in src/api/mod.rs)",
        &missing,
    );
}

#[test]
fn a_crd_field_set_by_one_of_two_exclusive_flags_names_both() {
    let mut cli = kok::cli::Cli::command();
    cli.build();
    let run = cli.find_subcommand("run").expect("kok run");
    let page = "docs/reference/crds.md";
    let text = std::fs::read_to_string(root().join(page)).expect("the CRD reference");
    let mut failures = Vec::new();
    let mut pairs = 0;
    let long = |arg: &clap::Arg| format!("`--{}`", arg.get_long().unwrap_or_default());
    for arg in run.get_arguments() {
        for other in run.get_arg_conflicts_with(arg) {
            pairs += 1;
            // A conflict is declared on one of the two: check both ways.
            for (flag, other_flag) in [(long(arg), long(other)), (long(other), long(arg))] {
                for (i, line) in text.lines().enumerate() {
                    if line.contains(&flag) && !line.contains(&other_flag) {
                        failures.push(format!(
                            "{page}:{}: names {flag} but not {other_flag}, which sets the same instead of it",
                            i + 1
                        ));
                    }
                }
            }
        }
    }
    assert!(
        pairs > 0,
        "kok run has no flags that exclude each other: is this check still needed?"
    );
    assert_none("CRD fields that name one of two exclusive flags", &failures);
}

// ---------------------------------------------------------------------------------------------------
// Where the health checks read the inventory

/// The paragraphs and list items of `doc`, each with its first line's number.
fn paragraphs(doc: &Doc) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut open = false;
    for (i, (kind, line)) in doc.kinds.iter().zip(&doc.lines).enumerate() {
        let trimmed = line.trim_start();
        let item = trimmed.starts_with("- ")
            || trimmed
                .split_once(". ")
                .is_some_and(|(n, _)| n.chars().all(|c| c.is_ascii_digit()));
        match kind {
            Kind::Text if open && !item => out.last_mut().expect("open").1.push_str(&format!("\n{line}")),
            Kind::Text => {
                out.push((i + 1, line.clone()));
                open = true;
            }
            _ => open = false,
        }
    }
    out
}

#[test]
fn the_inventory_checks_are_said_to_read_the_whole_inventory_directory() {
    use kok::api::{HOSTS_KEY, VARS_KEY};
    // What the inventory checks read is the whole directory: `kube_version` and the hosts' addresses may
    // come from group_vars/ and host_vars/ as well as the inventory file and vars.yml.
    let checks = [
        kok::health::checks::INVENTORY_MATCHES,
        kok::health::checks::VERSION_MATCHES,
    ];
    let mut failures = Vec::new();
    for page in doc_pages() {
        for (line, text) in paragraphs(&read(&page)) {
            let about_checks = checks.iter().any(|c| text.contains(&format!("`{c}`")));
            let single_file = [HOSTS_KEY, VARS_KEY]
                .iter()
                .any(|f| text.contains(&format!("`{f}`")));
            if about_checks && single_file && !text.contains("group_vars/") {
                failures.push(format!(
                    "{}:{line}: says what {} compare with from `{HOSTS_KEY}` or `{VARS_KEY}` alone; they read \
                     the inventory directory (group_vars/ and host_vars/ too)",
                    page.display(),
                    checks.join(" or ")
                ));
            }
        }
    }
    assert_none(
        "paragraphs that give one file as what the inventory checks read",
        &failures,
    );
}

// ---------------------------------------------------------------------------------------------------
// Generated files are regenerated as the page that generates them says

#[test]
fn a_page_that_says_to_regenerate_a_generated_file_links_to_where_its_generator_is_documented() {
    // The generated files and the command that generates each, from the code: the reference pages (each
    // says its own command), and the kubespray data built into the binary, whose reader names its script.
    let mut generated: Vec<(String, String)> = [Page::Cli, Page::Crds]
        .map(|p| (p.path().to_string(), p.regenerate_command()))
        .into();
    let releases = "src/preflight/releases.rs";
    let reader = std::fs::read_to_string(root().join(releases)).expect("the kubespray data's reader");
    let script = reader
        .split('`')
        .find(|s| s.starts_with("scripts/") && s.ends_with(".py"))
        .expect("the reader names the script that writes its data");
    assert!(
        reader.contains("include_str!(\"releases.json\")"),
        "{releases} no longer embeds releases.json"
    );
    generated.push(("src/preflight/releases.json".into(), script.to_string()));
    let pages: Vec<_> = doc_pages().into_iter().map(|p| (read(&p), p)).collect();
    let mut failures = Vec::new();
    for (file, generator) in &generated {
        // The pages whose ```sh blocks run the generator.
        let homes: Vec<&Path> = pages
            .iter()
            .filter(|(doc, _)| {
                doc.blocks
                    .iter()
                    .any(|b| b.lang == "sh" && b.lines.iter().any(|(_, l)| l.contains(generator.as_str())))
            })
            .map(|(_, p)| p.as_path())
            .collect();
        for (doc, page) in &pages {
            if homes.contains(&page.as_path()) {
                continue;
            }
            for (line, text) in paragraphs(doc) {
                if !(text.contains("regenerate") && text.contains(&format!("`{file}`"))) {
                    continue;
                }
                let last = line + text.lines().count();
                let linked = doc
                    .links
                    .iter()
                    .filter(|l| (line..last).contains(&l.line))
                    .any(|l| {
                        let target = l.dest.split('#').next().unwrap_or_default();
                        let target = page.parent().unwrap_or(Path::new("")).join(target);
                        homes.iter().any(|h| markdown_path_eq(&target, h))
                    });
                if !linked && !homes.is_empty() {
                    failures.push(format!(
                        "{}:{line}: says to regenerate `{file}` but links to none of {homes:?}, where `{generator}` is run",
                        page.display()
                    ));
                }
            }
        }
    }
    assert_none(
        "instructions to regenerate a file that send the reader elsewhere",
        &failures,
    );
}

/// Whether two relative page paths name the same page (`docs/../docs/a.md` and `docs/a.md`).
fn markdown_path_eq(a: &Path, b: &Path) -> bool {
    super::normalize(a).is_some_and(|a| a == b)
}

// ---------------------------------------------------------------------------------------------------
// The performance page agrees with its own tables

#[test]
fn the_performance_targets_give_the_latest_measured_figures() {
    let page = Path::new("docs/performance.md");
    let doc = read(page);
    let row_start = "| 1000 × 10 | service |";
    let latest = doc
        .lines
        .iter()
        .rfind(|l| l.starts_with(row_start))
        .expect("a fleet table row of 1000 × 10 in service mode");
    let cells: Vec<&str> = latest.split('|').map(str::trim).collect();
    let header = doc
        .lines
        .iter()
        .find(|l| l.starts_with("| fleet | mode |"))
        .expect("the fleet table's header");
    let columns: Vec<&str> = header.split('|').map(str::trim).collect();
    let cell = |name: &str| {
        let i = columns
            .iter()
            .position(|c| *c == name)
            .unwrap_or_else(|| panic!("no column {name}"));
        cells[i].split_whitespace().take(2).collect::<Vec<_>>().join(" ")
    };
    let targets = section_text(&doc, "The targets").expect("a section `The targets`");
    let targets = targets.split_whitespace().collect::<Vec<_>>().join(" ");
    for column in ["commit reconciled", "peak RSS"] {
        let figure = cell(column);
        assert!(
            targets.contains(&figure),
            "{}: `## The targets` does not give the latest {column} at 1,000 × 10 in service mode, {figure} \
             (the last table row of it on the page)",
            page.display()
        );
    }
}

// ---------------------------------------------------------------------------------------------------
// Deadlines and start timeouts

/// What the docs call the two bounds of a run, and their defaults in the code.
fn run_bounds() -> [(&'static str, i64); 2] {
    [
        ("startTimeout", kok::api::DEFAULT_START_TIMEOUT_SECONDS),
        ("activeDeadlineSeconds", kok::api::DEFAULT_ACTIVE_DEADLINE_SECONDS),
    ]
}

/// The number after the first "default " in `text`, if any.
fn default_in(text: &str) -> Option<i64> {
    let after = &text[text.find("default ")? + "default ".len()..];
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[test]
fn run_bounds_in_the_docs_have_the_codes_defaults_and_a_stuck_run_is_bounded_by_both() {
    let bounds = run_bounds();
    let mut failures = Vec::new();
    for page in doc_pages() {
        let doc = read(&page);
        let code = doc
            .blocks
            .iter()
            .flat_map(|b| b.lines.iter().map(|(n, l)| (*n, l.clone())));
        for (line, text) in paragraphs(&doc).into_iter().chain(code) {
            let at = format!("{}:{line}", page.display());
            for (name, default) in bounds {
                for (start, _) in text.match_indices(name) {
                    // What follows the name, up to the other bound's name.
                    let rest = &text[start + name.len()..];
                    let end = bounds
                        .iter()
                        .filter_map(|(other, _)| rest.find(other))
                        .min()
                        .unwrap_or(rest.len())
                        .min(120.min(rest.len()));
                    let end = (0..=end).rev().find(|i| rest.is_char_boundary(*i)).unwrap_or(0);
                    if let Some(said) = default_in(&rest[..end]) {
                        if said != default {
                            failures.push(format!("{at}: {name} defaults to {default} seconds, not {said}"));
                        }
                    }
                }
            }
            // A stuck run is bounded by both: its pod may never start.
            if text.contains("stuck")
                && text.contains("`activeDeadlineSeconds`")
                && !text.contains("`startTimeout`")
            {
                failures.push(format!(
                    "{at}: says a stuck run ends at its activeDeadlineSeconds and not that one whose pod \
                     cannot start fails after its startTimeout"
                ));
            }
        }
    }
    assert_none("deadlines and start timeouts the docs get wrong", &failures);
}
