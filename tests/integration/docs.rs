//! The docs keep their promises (docs/writing-docs.md, the conventions of issue 39): relative links and
//! anchors resolve, pages have their shape and sentence-case headings, the offline commands of ```sh
//! blocks run, YAML examples name their file and validate, troubleshooting's messages are in the code, the
//! docs say what the code does (`docs/truth.rs`), and the CI snippets of docs/ci.md run (`docs/ci.rs`).

mod ci;
mod commands;
mod day_two;
use crate::common::git;
mod markdown;
mod messages;
mod style;
use crate::common::tools;
mod truth;

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use commands::{Fate, Place};
use markdown::{Doc, Kind};

/// The cluster whose files a YAML example of a cluster the example repository lacks starts from.
const TEMPLATE_CLUSTER: &str = "prod-bj";
/// What HEAD's commit of "your repository" appends to the template cluster's operations.yml, so that
/// `kok plan --repo . --from origin/main --to HEAD` has a run to show.
const ADDED_OPERATION: &str =
    "\n# Added by the commit after origin/main.\n- {id: facts, action: playbooks/facts.yml}\n";
/// Longest a documented command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);
/// How many of a failed command's last output lines a failure shows.
const TAIL_LINES: usize = 20;

/// The project's top directory.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The documentation: README.md and every page under docs/, relative to the project's top, sorted.
fn doc_pages() -> Vec<PathBuf> {
    let mut pages = vec![PathBuf::from("README.md")];
    collect_markdown(&root(), Path::new("docs"), &mut pages);
    pages
}

/// The pages whose links are checked: the documentation and the READMEs of deploy/ and the example.
fn linked_pages() -> Vec<PathBuf> {
    let mut pages = doc_pages();
    pages.extend(["deploy/README.md", "examples/repo-layout/README.md"].map(PathBuf::from));
    pages
}

/// Adds the `.md` files under `dir` (relative to `top`) to `pages`, sorted.
fn collect_markdown(top: &Path, dir: &Path, pages: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(top.join(dir)) else {
        return;
    };
    let mut names: Vec<_> = entries
        .map(|e| e.expect("a directory entry").file_name())
        .collect();
    names.sort();
    for name in names {
        let path = dir.join(name);
        if top.join(&path).is_dir() {
            collect_markdown(top, &path, pages);
        } else if path.extension().is_some_and(|ext| ext == "md") {
            pages.push(path);
        }
    }
}

/// Reads and parses `page` (relative to the project's top).
fn read(page: &Path) -> Doc {
    let text = std::fs::read_to_string(root().join(page))
        .unwrap_or_else(|e| panic!("reading {}: {e}", page.display()));
    markdown::parse(&text)
}

/// Panics with every failure, one paragraph each, when there is any.
fn assert_none(what: &str, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} {what}:\n\n{}\n",
        failures.len(),
        failures.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------------
// 1. Links and anchors

/// Whether `dest` names a scheme (`https:`, `mailto:`): not checked, there is no network.
fn is_external(dest: &str) -> bool {
    let scheme = dest.split(':').next().unwrap_or_default();
    dest.contains(':')
        && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
}

/// `%20` and the like decoded.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = text
            .get(i + 1..i + 3)
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `path` with `.` and `..` resolved; None when it climbs out of the project.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    Some(out)
}

/// What is wrong with the relative link `dest` of `page`, if anything. `anchors` caches pages' anchors.
fn check_link(page: &Path, dest: &str, anchors: &mut HashMap<PathBuf, HashSet<String>>) -> Option<String> {
    let (path, anchor) = dest.split_once('#').unwrap_or((dest, ""));
    let path = percent_decode(path.split('?').next().unwrap_or_default());
    let target = if path.is_empty() {
        page.to_path_buf()
    } else if let Some(from_top) = path.strip_prefix('/') {
        match normalize(Path::new(from_top)) {
            Some(target) => target,
            None => return Some("it leaves the repository".into()),
        }
    } else {
        match normalize(&page.parent().unwrap_or(Path::new("")).join(&path)) {
            Some(target) => target,
            None => return Some("it leaves the repository".into()),
        }
    };
    let full = root().join(&target);
    if !full.exists() {
        return Some(format!("{} does not exist", target.display()));
    }
    if anchor.is_empty() {
        return None;
    }
    // A directory shows its README.md; other files than Markdown have no heading anchors to check.
    let page_of_anchor = if full.is_dir() {
        target.join("README.md")
    } else {
        target
    };
    if page_of_anchor.extension().is_none_or(|ext| ext != "md") || !root().join(&page_of_anchor).is_file() {
        return None;
    }
    let known = anchors
        .entry(page_of_anchor.clone())
        .or_insert_with(|| markdown::anchors(&read(&page_of_anchor)));
    let anchor = percent_decode(anchor);
    (!known.contains(&anchor)).then(|| {
        format!(
            "{} has no heading or <a id> with the anchor #{anchor}",
            page_of_anchor.display()
        )
    })
}

#[test]
fn relative_links_and_anchors_resolve() {
    let mut anchors = HashMap::new();
    let mut failures = Vec::new();
    let mut checked = 0;
    for page in linked_pages() {
        if !root().join(&page).is_file() {
            failures.push(format!("{}: the page does not exist", page.display()));
            continue;
        }
        let doc = read(&page);
        for link in doc.links.iter().filter(|l| !is_external(&l.dest)) {
            checked += 1;
            if let Some(problem) = check_link(&page, &link.dest, &mut anchors) {
                failures.push(format!(
                    "{}:{}: link ({}): {problem}",
                    page.display(),
                    link.line,
                    link.dest
                ));
            }
        }
    }
    eprintln!("checked {checked} relative links");
    assert_none("broken relative links or anchors", &failures);
}

// ---------------------------------------------------------------------------------------------------
// 2. Page shape and sentence-case headings

/// The pages of docs/ that have the task-page shape: docs/*.md and docs/reference/*.md.
fn shaped_pages() -> Vec<PathBuf> {
    doc_pages()
        .into_iter()
        .filter(|page| {
            let dir = page.parent().unwrap_or(Path::new(""));
            dir == Path::new("docs") || dir == Path::new("docs/reference")
        })
        .collect()
}

/// Whether a text line starts a list, a table, a quote or an HTML block rather than a paragraph.
fn is_not_paragraph(line: &str) -> bool {
    let line = line.trim_start();
    let ordered = line
        .split_once(". ")
        .is_some_and(|(n, _)| n.chars().all(|c| c.is_ascii_digit()));
    ["- ", "* ", "+ ", "|", ">", "<"]
        .iter()
        .any(|p| line.starts_with(p))
        || ordered
}

/// What is wrong with the shape of `page`: `# Title`, a paragraph, ..., `## Where to go next` with a
/// relative link.
fn shape_problems(page: &Path, doc: &Doc) -> Vec<String> {
    let page = page.display();
    let mut out = Vec::new();
    let mut non_blank = doc.kinds.iter().enumerate().filter(|(_, k)| **k != Kind::Blank);
    match non_blank.next() {
        Some((i, Kind::Heading)) if doc.lines[i].starts_with("# ") => match non_blank.next() {
            Some((j, Kind::Text)) if !is_not_paragraph(&doc.lines[j]) => {}
            Some((j, _)) => out.push(format!(
                "{page}:{}: after the title comes a paragraph saying what the page is for, not {:?}",
                j + 1,
                doc.lines[j]
            )),
            None => out.push(format!("{page}: the page has nothing after its title")),
        },
        Some((i, _)) => out.push(format!(
            "{page}:{}: a page starts with its `# Title`, not {:?}",
            i + 1,
            doc.lines[i]
        )),
        None => out.push(format!("{page}: the page is empty")),
    }
    match doc.headings.iter().rfind(|h| h.level == 2) {
        None => out.push(format!(
            "{page}: the page has no `## Where to go next` section at its end"
        )),
        Some(last) if last.text != "Where to go next" => out.push(format!(
            "{page}:{}: the last section is `## {}`; it must be `## Where to go next`",
            last.line, last.text
        )),
        Some(last) => {
            let linked = doc
                .links
                .iter()
                .any(|l| l.line > last.line && !is_external(&l.dest));
            if !linked {
                out.push(format!(
                    "{page}:{}: `## Where to go next` holds no relative link",
                    last.line
                ));
            }
        }
    }
    out
}

#[test]
fn task_pages_open_with_a_title_and_a_paragraph_and_end_with_where_to_go_next() {
    let pages = shaped_pages();
    let failures: Vec<String> = pages.iter().flat_map(|p| shape_problems(p, &read(p))).collect();
    eprintln!("checked the shape of {} pages", pages.len());
    assert_none("problems with the shape of docs/ pages", &failures);
}

#[test]
fn headings_are_in_sentence_case() {
    let mut failures = Vec::new();
    for page in doc_pages() {
        for heading in read(&page).headings {
            for problem in style::problems(&heading.text) {
                failures.push(format!(
                    "{}:{}: {} {}: {problem}",
                    page.display(),
                    heading.line,
                    "#".repeat(heading.level),
                    heading.text
                ));
            }
        }
    }
    assert_none("words that break sentence case in headings", &failures);
}

// ---------------------------------------------------------------------------------------------------
// "Your repository": the example repository with an origin one commit behind

/// The one-time set-up of the commands and YAML examples, in `target/tmp/docs-<pid>` (an earlier run's
/// directory is removed when its process is gone).
struct Fixture {
    root: PathBuf,
    /// "Your repository".
    repo: PathBuf,
    /// A directory holding `kok`, the test build's binary, for the front of PATH.
    bin: PathBuf,
    /// kok's git cache.
    cache: PathBuf,
}

static FIXTURE: OnceLock<Fixture> = OnceLock::new();

fn fixture() -> &'static Fixture {
    FIXTURE.get_or_init(Fixture::build)
}

impl Fixture {
    fn build() -> Fixture {
        let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        remove_stale_fixtures(&tmp);
        let root = tmp.join(format!("docs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let (repo, bin, cache) = (root.join("repo"), root.join("bin"), root.join("cache"));
        for dir in [&repo, &bin, &cache] {
            std::fs::create_dir_all(dir).expect("fixture directory");
        }
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_kok"), bin.join("kok")).expect("kok on PATH");
        copy_dir(&self::root().join("examples/repo-layout"), &repo);

        let commit = |message: &str| {
            git::git(
                &repo,
                &["-c", "commit.gpgsign=false", "commit", "-q", "-a", "-m", message],
            );
        };
        git::git(&repo, &["init", "-q", "-b", "main"]);
        git::git(&repo, &["add", "-A"]);
        commit("The example repository");
        let origin = root.join("origin.git");
        git::git(&root, &["init", "-q", "--bare", "origin.git"]);
        let url = format!("file://{}", origin.display());
        git::git(&repo, &["remote", "add", "origin", &url]);
        git::git(&repo, &["push", "-q", "origin", "main"]);
        let operations = repo.join(format!("clusters/{TEMPLATE_CLUSTER}/operations.yml"));
        let mut text = std::fs::read_to_string(&operations).expect("the example's operations.yml");
        text.push_str(ADDED_OPERATION);
        std::fs::write(&operations, text).expect("write operations.yml");
        commit(&format!("{TEMPLATE_CLUSTER}: gather facts"));
        assert_eq!(
            git::git(&repo, &["rev-parse", "origin/main"]),
            git::git(&repo, &["rev-parse", "HEAD~1"]),
            "origin/main is one commit behind HEAD"
        );
        Fixture {
            root,
            repo,
            bin,
            cache,
        }
    }

    /// A command for `program` with kok's settings from this process's environment left out, the test
    /// build's kok first on PATH, its cache here, and a kubeconfig that names nothing (kubectl would only
    /// try loopback).
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("KOK_") {
                cmd.env_remove(name);
            }
        }
        let inherited = tools::search_path();
        let dirs = std::iter::once(self.bin.clone()).chain(std::env::split_paths(&inherited));
        cmd.env(
            "PATH",
            std::env::join_paths(dirs).expect("no PATH entry holds a ':'"),
        )
        .env("KOK_CACHE_DIR", &self.cache)
        .env("KUBECONFIG", self.root.join("no-kubeconfig"))
        .stdin(Stdio::null());
        cmd
    }
}

/// Removes the `docs-<pid>` directories of runs whose process is gone.
fn remove_stale_fixtures(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("docs-").and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Copies the files under `from` into `to`, leaving out `.git`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create a directory");
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let entry = entry.expect("a directory entry");
        if entry.file_name() == ".git" {
            continue;
        }
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        if source.is_dir() {
            copy_dir(&source, &target);
        } else {
            std::fs::copy(&source, &target).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// 3. Runnable commands

/// A documented command's exit code (None when a signal ended it) and its output's last lines.
fn run_line(line: &str, dir: &Path) -> (Option<i32>, String) {
    let timeout = COMMAND_TIMEOUT.as_secs().to_string();
    let out = fixture()
        .command("timeout")
        .args(["--kill-after=5", &timeout, "bash", "-o", "pipefail", "-c", line])
        .current_dir(dir)
        .output()
        .expect("timeout and bash run");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n    ");
    (out.status.code(), tail)
}

#[test]
fn offline_commands_of_sh_blocks_run() {
    let mut failures = Vec::new();
    let mut kubectl: Option<bool> = None;
    let (mut ran, mut skipped) = (0, 0);
    // The READMEs of deploy/ and the example too: they send readers to the same commands.
    for page in linked_pages() {
        let doc = read(&page);
        for line in doc
            .blocks
            .iter()
            .filter(|b| b.lang == "sh")
            .flat_map(commands::runnable)
        {
            let at = format!("{}:{}", page.display(), line.line);
            let (place, codes) = match line.fate {
                Fate::Skip(why) => {
                    skipped += 1;
                    eprintln!("skipped {at}: {}\n    because {why}", line.text);
                    continue;
                }
                Fate::Run(place, codes) => (place, codes),
            };
            if line.text.starts_with("kubectl ")
                && !*kubectl.get_or_insert_with(|| tools::kubectl_or_skip("docs: kubectl kustomize"))
            {
                skipped += 1;
                eprintln!("skipped {at}: {}\n    because kubectl is missing", line.text);
                continue;
            }
            let (dir, place) = match place {
                Place::Project => (root(), "the project's root"),
                Place::Repository => (fixture().repo.clone(), "your repository"),
            };
            let started = Instant::now();
            let (code, tail) = run_line(&line.text, &dir);
            ran += 1;
            let shown = code.map_or("killed by a signal".to_string(), |c| format!("exit {c}"));
            let ok = code.is_some_and(|c| codes.contains(&c));
            eprintln!(
                "{} {at}: {} ({shown}, {:.1}s, in {place})",
                if ok { "ok    " } else { "FAILED" },
                line.text,
                started.elapsed().as_secs_f64()
            );
            if !ok {
                failures.push(format!(
                    "{at}: `{}` in {place}: {shown}, expected {codes:?}; its output ends:\n    {tail}\n",
                    line.text
                ));
            }
        }
    }
    eprintln!("ran {ran} documented commands, skipped {skipped}");
    assert_none("documented commands that failed", &failures);
}

// ---------------------------------------------------------------------------------------------------
// 4. YAML and INI examples

/// The file a block's first line names: `# clusters/prod-bj/operations.yml` gives that path.
fn named_file(first_line: &str) -> Option<&str> {
    let path = first_line.trim().strip_prefix('#')?.split_whitespace().next()?;
    let path_like = path
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "._/-".contains(c))
        && (path.contains('.') || path.contains('/'));
    path_like.then_some(path)
}

/// Whether `path` is a file of the repository contract, which `kok validate` checks.
fn is_repository_file(path: &str) -> bool {
    const CLUSTER_FILES: [&str; 6] = [
        "hosts.yml",
        "hosts.yaml",
        "inventory.ini",
        "vars.yml",
        "operations.yml",
        "cluster.yml",
    ];
    match path.split('/').collect::<Vec<_>>().as_slice() {
        ["kok.yml"] => true,
        ["rollouts", name] => name.ends_with(".yml"),
        ["clusters", _, file] => CLUSTER_FILES.contains(file),
        ["clusters", _, "group_vars" | "host_vars", rest @ ..] => !rest.is_empty(),
        _ => false,
    }
}

/// The errors `kok validate` reports in `path` once `text` is written over it in a fresh copy of "your
/// repository" (a cluster the example lacks first gets a copy of the template cluster's files), with the
/// `earlier` blocks of the same change (path, text) written first, each as (line, column, message).
fn validate_example(
    path: &str,
    text: &str,
    earlier: &[(String, String)],
) -> Result<Vec<(u64, u64, String)>, String> {
    let fixture = fixture();
    let copy = tempfile::tempdir_in(&fixture.root).expect("a temp dir");
    copy_dir(&fixture.repo, copy.path());
    for (other, content) in earlier.iter().filter(|(other, _)| other != path) {
        let file = copy.path().join(other);
        std::fs::create_dir_all(file.parent().expect("a parent")).expect("the file's directory");
        std::fs::write(&file, content).expect("write an earlier block of the change");
    }
    if let ["clusters", cluster, ..] = path.split('/').collect::<Vec<_>>().as_slice() {
        let dir = copy.path().join("clusters").join(cluster);
        if !dir.exists() {
            copy_dir(&copy.path().join("clusters").join(TEMPLATE_CLUSTER), &dir);
        }
    }
    let file = copy.path().join(path);
    std::fs::create_dir_all(file.parent().expect("a parent")).expect("the file's directory");
    std::fs::write(&file, text).expect("write the example");
    let out = fixture
        .command(env!("CARGO_BIN_EXE_kok"))
        .args(["validate", "--output", "json"])
        .arg(copy.path())
        .output()
        .expect("kok runs");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "kok validate --output json ({}) printed no JSON report ({e}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })?;
    let diagnostics = report["diagnostics"].as_array().cloned().unwrap_or_default();
    Ok(diagnostics
        .iter()
        .filter(|d| d["severity"] == "error" && d["path"] == path)
        .map(|d| {
            let at = |key: &str| d[key].as_u64().unwrap_or(0);
            let message = d["message"].as_str().unwrap_or_default().to_string();
            (at("line"), at("column"), message)
        })
        .collect())
}

/// What is wrong with a ```yaml or ```ini block of `page`: a missing `# <path>`, a repository file with
/// errors, a YAML file that does not parse. Prints what passed.
fn example_problems(page: &Path, block: &markdown::Block, earlier: &[(String, String)]) -> Vec<String> {
    let lang = block.lang.as_str();
    let at = format!("{}:{}", page.display(), block.line);
    let first = block.lines.first().map_or("", |(_, l)| l.as_str());
    let path = match (lang, named_file(first)) {
        ("ini", Some(path)) if path.ends_with("/inventory.ini") && is_repository_file(path) => path,
        ("ini", _) => return Vec::new(),
        (_, Some(path)) => path,
        (_, None) => {
            return vec![format!(
                "{at}: a ```{lang} block starts with a `# <path>` comment naming the file it shows, not \
                 {first:?}"
            )]
        }
    };
    let text: String = block.lines.iter().map(|(_, l)| format!("{l}\n")).collect();
    if !is_repository_file(path) {
        let parsed: Result<Vec<serde_yaml::Value>, _> = serde_yaml::Deserializer::from_str(&text)
            .map(serde::Deserialize::deserialize)
            .collect();
        return match parsed {
            Ok(_) => {
                eprintln!("ok     {at}: {path} is YAML");
                Vec::new()
            }
            Err(e) => vec![format!("{at}: `# {path}` is not YAML: {e}")],
        };
    }
    match validate_example(path, &text, earlier) {
        Ok(errors) if errors.is_empty() => {
            eprintln!("ok     {at}: {path} validates");
            Vec::new()
        }
        // Line 1 of the file is the line after the fence.
        Ok(errors) => errors
            .into_iter()
            .map(|(line, column, message)| {
                let doc_line = block.line + line as usize;
                let page = page.display();
                format!("{page}:{doc_line}: `# {path}`: kok validate: {line}:{column}: {message}")
            })
            .collect(),
        Err(problem) => vec![format!("{at}: `# {path}`: {problem}")],
    }
}

#[test]
fn yaml_examples_name_their_file_and_validate() {
    let mut failures = Vec::new();
    for page in doc_pages() {
        let doc = read(&page);
        let lines: Vec<String> = std::fs::read_to_string(root().join(&page))
            .expect("the page")
            .lines()
            .map(str::to_string)
            .collect();
        let examples = doc
            .blocks
            .iter()
            .filter(|b| ["yaml", "yml", "ini"].contains(&b.lang.as_str()));
        // Blocks with nothing but blank lines between them are one change: each validates with the
        // repository files of the ones before it written too.
        let mut change: Vec<(String, String)> = Vec::new();
        let mut end = 0;
        for block in examples {
            let between = lines.get(end..block.line.saturating_sub(1)).unwrap_or_default();
            if end == 0 || !between.iter().all(|l| l.trim().is_empty()) {
                change.clear();
            }
            failures.extend(example_problems(&page, block, &change));
            let first = block.lines.first().map_or("", |(_, l)| l.as_str());
            if let Some(path) = named_file(first).filter(|p| is_repository_file(p)) {
                let text: String = block.lines.iter().map(|(_, l)| format!("{l}\n")).collect();
                change.push((path.to_string(), text));
            }
            // The closing fence's line, 1-based, is the index of the line after it.
            end = block.lines.last().map_or(block.line, |(n, _)| *n) + 1;
        }
    }
    assert_none("YAML or INI examples that fail", &failures);
}

// ---------------------------------------------------------------------------------------------------
// 5. Troubleshooting messages

/// Each literal piece of a `###` message heading of `doc` that `source` lacks, as a failure of `page`;
/// and how many message headings there are.
fn missing_pieces(page: &str, doc: &Doc, source: &str) -> (Vec<String>, usize) {
    let mut failures = Vec::new();
    let mut messages = 0;
    for heading in doc.headings.iter().filter(|h| h.level == 3) {
        let Some(message) = messages::message(&heading.text) else {
            continue;
        };
        messages += 1;
        for piece in messages::pieces(&message) {
            if !messages::found(source, &piece) {
                failures.push(format!(
                    "{page}:{}: {piece:?} (of `{message}`) is in no src/**/*.rs or layout/src/**/*.rs (comment lines left out)",
                    heading.line
                ));
            }
        }
    }
    (failures, messages)
}

#[test]
fn troubleshooting_messages_are_in_the_code() {
    let page = "docs/troubleshooting.md";
    assert!(
        root().join(page).is_file(),
        "{page} does not exist on this branch: it lists the messages a user can meet (convention 6), and \
         this test checks each is in the code"
    );
    let source = messages::source_text(&[&root().join("src"), &root().join("layout/src")]);
    let (failures, messages) = missing_pieces(page, &read(Path::new(page)), &source);
    assert!(
        messages > 0,
        "{page} has no `###` heading made of one code span (a message)"
    );
    eprintln!("checked {messages} messages of {page}");
    assert_none(
        "pieces of troubleshooting messages that are not in the code: write the fixed parts exactly as \
         the code has them, and a <placeholder> where it inserts a value",
        &failures,
    );
}

// ---------------------------------------------------------------------------------------------------
// The checks' own parts, on inline samples

#[test]
fn slugs_drop_punctuation_and_backticks_and_number_repeated_headings() {
    for (heading, slug) in [
        ("Set-up and tool versions", "set-up-and-tool-versions"),
        (
            "`kok/plan` on every pull request",
            "kokplan-on-every-pull-request",
        ),
        (
            "What a cluster's runs keep: credentials and the kubeconfig",
            "what-a-clusters-runs-keep-credentials-and-the-kubeconfig",
        ),
        (
            "Metrics, alerts and notifications",
            "metrics-alerts-and-notifications",
        ),
        ("[Linked](other.md) `KOK_PATH` v1.31", "linked-kok_path-v131"),
        (
            "`waiting for the maintenance window: <when>`",
            "waiting-for-the-maintenance-window-when",
        ),
    ] {
        assert_eq!(markdown::slug(heading), slug, "{heading}");
    }
    let doc = markdown::parse("# A\n## Usage\n## Usage\n### Usage\n<a id=\"custom\"></a>\n## Usage-1\n");
    let anchors = markdown::anchors(&doc);
    for anchor in ["a", "usage", "usage-1", "usage-2", "custom", "usage-1-1"] {
        assert!(anchors.contains(anchor), "{anchor} in {anchors:?}");
    }
}

#[test]
fn links_are_found_outside_code_only() {
    let sample = "# Page\n\nSee [a](a.md#x), ![img](web/i.png \"title\") and `[no](code.md)`, and\n\
                  a [link over\ntwo lines](b.md).\n\n```sh\n[not](fenced.md)\n```\n\n[ref]: c.md#y\n\
                  <img src=\"d.png\"> and [web](https://example.com)\n";
    let doc = markdown::parse(sample);
    let links: Vec<(usize, &str)> = doc.links.iter().map(|l| (l.line, l.dest.as_str())).collect();
    assert_eq!(
        links,
        [
            (3, "a.md#x"),
            (3, "web/i.png"),
            (5, "b.md"),
            (11, "c.md#y"),
            (12, "https://example.com"),
            (12, "d.png")
        ]
    );
    assert!(is_external("https://example.com") && is_external("mailto:a@b.c"));
    assert!(!is_external("docs/plan.md#a:b") && !is_external("#anchor"));
    assert_eq!(doc.blocks[0].lang, "sh");
    assert_eq!(doc.blocks[0].lines, [(8, "[not](fenced.md)".to_string())]);
}

#[test]
fn fences_close_only_with_their_own_kind_and_length() {
    let doc = markdown::parse("````markdown\n```yaml\n# kok.yml\n```\n````\n   ```sh\n   kok plan\n   ```\n");
    assert_eq!(doc.blocks.len(), 2);
    assert_eq!(doc.blocks[0].lang, "markdown");
    assert_eq!(doc.blocks[0].lines.len(), 3);
    assert_eq!(doc.blocks[1].lines, [(7, "kok plan".to_string())]);
}

#[test]
fn commands_are_joined_normalized_and_given_their_place_and_exit_codes() {
    let sample = "kok validate examples/repo-layout   # exit 0\n\
                  cargo run -q -- plan --repo . --from origin/main \\\n  --to HEAD --detailed-exitcode\n\
                  cargo run --quiet -- render . | head   # exits 1\n\
                  kubectl kustomize deploy/\n\
                  kok logs local/hello\n\
                  kok validate DIR\n\
                  kok plan --repo URL --from REV\n\
                  kok render <repo>\n\
                  kok plan ...\n\
                  kok validate \"$REPO\"/x   # a shell variable is no placeholder\n\
                  kok plan --repo https://github.com/example/fleet\n\
                  echo '# kok validate'\n";
    let lines: Vec<(usize, String)> = sample
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.into()))
        .collect();
    let block = markdown::Block {
        lang: "sh".into(),
        line: 0,
        lines,
    };
    let got = commands::runnable(&block);
    let run = |place, codes: &[i32]| Fate::Run(place, codes.to_vec());
    let skip = |why: &str| Fate::Skip(format!("it holds a placeholder ({why})"));
    let expected = [
        (1, "kok validate examples/repo-layout", run(Place::Project, &[0])),
        (
            2,
            "kok plan --repo . --from origin/main --to HEAD --detailed-exitcode",
            run(Place::Repository, &[0, 2]),
        ),
        (4, "kok render . | head", run(Place::Repository, &[1])),
        (5, "kubectl kustomize deploy/", run(Place::Project, &[0])),
        (7, "kok validate DIR", skip("DIR")),
        (8, "kok plan --repo URL --from REV", skip("URL")),
        (9, "kok render <repo>", skip("<repo>")),
        (10, "kok plan ...", skip("...")),
        (11, "kok validate \"$REPO\"/x", run(Place::Repository, &[0])),
    ];
    for (got, (line, text, fate)) in got.iter().zip(&expected) {
        assert_eq!((got.line, got.text.as_str(), &got.fate), (*line, *text, fate));
    }
    assert_eq!(got.len(), expected.len() + 1, "{got:#?}");
    let remote = &got[expected.len()];
    assert!(
        matches!(&remote.fate, Fate::Skip(why) if why.contains("loopback")),
        "{remote:?}"
    );
}

#[test]
fn examples_name_their_file_and_repository_files_are_told_apart() {
    assert_eq!(
        named_file("# clusters/prod-bj/operations.yml"),
        Some("clusters/prod-bj/operations.yml")
    );
    assert_eq!(
        named_file("# my-kok/kustomization.yaml (excerpt)"),
        Some("my-kok/kustomization.yaml")
    );
    assert_eq!(named_file("# The operations of prod-bj"), None);
    assert_eq!(named_file("route:"), None);
    for path in [
        "kok.yml",
        "rollouts/upgrade-1-31.yml",
        "clusters/prod-sh/inventory.ini",
        "clusters/prod-sh/group_vars/all/vault.yml",
        "clusters/new/hosts.yml",
    ] {
        assert!(is_repository_file(path), "{path}");
    }
    for path in [
        "my-kok/kustomization.yaml",
        "clusters/prod-bj/notes.yml",
        "deploy/config.yaml",
    ] {
        assert!(!is_repository_file(path), "{path}");
    }
}

#[test]
fn messages_split_at_placeholders_and_are_found_outside_comments() {
    assert_eq!(
        messages::pieces("waiting for the maintenance window: <when>"),
        ["waiting for the maintenance window:"]
    );
    assert_eq!(
        messages::pieces("<path>:<line>: host <host> is in group <group> but not defined under all.hosts"),
        [": host", "is in group", "but not defined under all.hosts"]
    );
    assert_eq!(messages::pieces("a <= b"), ["a <= b"]);
    let source = "// waiting for nothing at all\n\
                  bail!(\"cannot validate {}: the directory \\\n        is not readable\");\n\
                  format!(\"cluster \\\"{name}\\\" holds {{}} twice\")\n";
    let sample = "# Troubleshooting\n\n### `cannot validate <dir>: the directory is not readable`\n\n\
                  ### `waiting for nothing at all`\n\n### `cluster \"<name>\" holds {} twice`\n\n\
                  ### Not a message\n";
    let source = messages::join_continuations(
        &source
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    let (failures, count) = missing_pieces("t.md", &markdown::parse(sample), &source);
    assert_eq!(count, 3);
    assert_eq!(
        failures,
        [
            "t.md:5: \"waiting for nothing at all\" (of `waiting for nothing at all`) is in no src/**/*.rs or layout/src/**/*.rs \
          (comment lines left out)"
        ]
    );
}

#[test]
fn sentence_case_allows_proper_nouns_kinds_acronyms_and_code() {
    for heading in [
        "Commit statuses on a forge",
        "`kok/plan` on every pull request",
        "Secrets with ansible-vault",
        "Where the Job and its ConfigMaps run",
        "Alerts on GitHub and GitLab, as JSON over TLS",
        "kubespray",
        "CRDs and the `Cluster Operation` kind",
    ] {
        assert_eq!(style::problems(heading), Vec::<String>::new(), "{heading}");
    }
    let problems = style::problems("Commit Statuses on a Forge with Kok");
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(problems[0].starts_with("\"Statuses\" is capitalized"));
    assert!(problems[2].contains("always lowercase"));
}

#[test]
fn page_shape_wants_title_paragraph_and_where_to_go_next_with_a_link() {
    let good = "# Plans\n\nThis page shows you what a plan says.\n\n## Reading\n\nText.\n\n\
                ## Where to go next\n\n- [Rollouts](rollouts.md)\n";
    assert_eq!(
        shape_problems(Path::new("p.md"), &markdown::parse(good)),
        Vec::<String>::new()
    );
    let bad = "Intro.\n\n# Plans\n\n## Reading\n\n## Where to go next\n\nSee [the web](https://x.y).\n";
    let problems = shape_problems(Path::new("p.md"), &markdown::parse(bad));
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].starts_with("p.md:1: a page starts with its `# Title`"));
    assert!(problems[1].starts_with("p.md:7: `## Where to go next` holds no relative link"));
    let no_paragraph = "# Plans\n\n## Reading\n\n## Next steps\n\n[x](x.md)\n";
    let problems = shape_problems(Path::new("p.md"), &markdown::parse(no_paragraph));
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[1].contains("the last section is `## Next steps`"));
}
