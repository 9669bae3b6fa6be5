//! docs/day-two.md's recipes as tests: the page's YAML blocks are the recipes' commits, applied in order to
//! a scratch repository that starts from the page's cluster; each commit passes `kok validate` and
//! `kok plan` without a pre-flight finding, and the wrong way of each recipe ([`WRONG`]) fails (or warns)
//! with its rule.

use std::path::Path;

/// The page.
const PAGE: &str = "docs/day-two.md";
/// The section holding the cluster every recipe starts from.
const START: &str = "The cluster the recipes start from";
/// kok.yml of the scratch repositories: the release the page's cluster runs.
const KOK_YML: &str = "image: quay.io/kubespray/kubespray:v2.27.0\n";

/// The recipes kubespray's day-two pages describe, which the page must have.
const RECIPES: [&str; 11] = [
    "Add a worker",
    "Add a control-plane node",
    "Remove a worker",
    "Remove a dead node",
    "Replace the first control-plane node",
    "Upgrade one minor",
    "Upgrade over two minors",
    "Move the kubespray release one tag at a time",
    "Renew certificates",
    "Reset",
    "Recover the control plane after losing etcd quorum",
];

/// What makes a recipe wrong.
enum Change {
    /// Commit `n` (1-based) with the first `from` of its file `path` replaced by `to`.
    Replace {
        path: &'static str,
        from: &'static str,
        to: &'static str,
    },
    /// Commit `n` left out: the next one planned from the one before it.
    Skip,
}

/// The wrong ways: recipe, commit, change, the rule that must say so, and whether it is an error (else a
/// warning).
const WRONG: [(&str, usize, Change, &str, bool); 13] = [
    (
        "Add a worker",
        1,
        Change::Replace {
            path: "clusters/prod-bj/operations.yml",
            from: "- id: add-node6\n  action: scale.yml\n  extraArgs: [--limit=node6]\n",
            to: "",
        },
        "host-not-reached",
        false,
    ),
    (
        "Add a control-plane node",
        1,
        Change::Replace {
            path: "clusters/prod-bj/operations.yml",
            from: "- id: add-node6\n  action: cluster.yml\n",
            to: "- id: add-node6\n  action: scale.yml\n  extraArgs: [--limit=node6]\n",
        },
        "host-not-reached",
        false,
    ),
    ("Remove a worker", 1, Change::Skip, "host-dropped", true),
    (
        "Remove a worker",
        1,
        Change::Replace {
            path: "clusters/prod-bj/operations.yml",
            from: ", -e, skip_confirmation=true",
            to: "",
        },
        "confirmation-prompt",
        true,
    ),
    (
        "Remove a dead node",
        1,
        Change::Replace {
            path: "clusters/prod-bj/operations.yml",
            from: "node=node5",
            to: "node=",
        },
        "remove-node",
        true,
    ),
    (
        "Replace the first control-plane node",
        1,
        Change::Skip,
        "remove-node",
        true,
    ),
    (
        "Upgrade one minor",
        1,
        Change::Replace {
            path: "clusters/prod-bj/vars.yml",
            from: "kube_version: v1.30.8",
            to: "kube_version: v1.31.4",
        },
        "kube-version-step",
        true,
    ),
    (
        "Upgrade over two minors",
        1,
        Change::Skip,
        "kube-version-step",
        true,
    ),
    (
        "Move the kubespray release one tag at a time",
        1,
        Change::Replace {
            path: "clusters/prod-bj/cluster.yml",
            from: "kubespray:v2.27.1",
            to: "kubespray:v2.29.1",
        },
        "release-step",
        true,
    ),
    (
        "Renew certificates",
        1,
        Change::Replace {
            path: "clusters/prod-bj/operations.yml",
            from: "--limit=kube_control_plane",
            to: "--limit=control_plane",
        },
        "limit-names",
        true,
    ),
    (
        "Reset",
        1,
        Change::Replace {
            path: "clusters/prod-bj/operations.yml",
            from: "reset_confirmation=yes",
            to: "skip_confirmation=true",
        },
        "confirmation-prompt",
        true,
    ),
    (
        "Reset",
        1,
        Change::Replace {
            path: "clusters/prod-bj/operations.yml",
            from: "- id: reset\n  action: reset.yml\n  extraArgs: [-e, reset_confirmation=yes]\n",
            to: "",
        },
        "setting-fixed",
        true,
    ),
    (
        "Recover the control plane after losing etcd quorum",
        1,
        Change::Replace {
            path: "clusters/prod-bj/operations.yml",
            from: "- id: recover-control-plane\n  action: recover-control-plane.yml\n  extraArgs: \
                   [--limit=etcd,kube_control_plane, -e, etcd_retries=10]\n",
            to: "",
        },
        "host-not-reached",
        false,
    ),
];

/// One commit of a recipe: the files it writes (path, whole content).
#[derive(Clone, Debug, Default)]
struct Commit {
    files: Vec<(String, String)>,
}

/// A recipe: its heading and commits.
#[derive(Debug)]
struct Recipe {
    title: String,
    commits: Vec<Commit>,
}

/// The page's starting cluster and its recipes, from its `##` sections, `**Commit N**` paragraphs and
/// ```yaml blocks (each named by its first line, `# <path>`).
fn read_page(text: &str) -> (Commit, Vec<Recipe>) {
    let mut start = Commit::default();
    let mut recipes: Vec<Recipe> = Vec::new();
    let mut section = String::new();
    let mut lines = text.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        if let Some(title) = line.strip_prefix("## ") {
            section = title.trim().to_string();
            if RECIPES.contains(&section.as_str()) {
                recipes.push(Recipe {
                    title: section.clone(),
                    commits: Vec::new(),
                });
            }
        } else if line.starts_with("**Commit ") {
            let recipe = recipes
                .last_mut()
                .filter(|r| r.title == section)
                .unwrap_or_else(|| panic!("{PAGE}:{}: a commit outside a recipe", i + 1));
            recipe.commits.push(Commit::default());
        } else if line.trim_start().starts_with("```yaml") {
            let block: Vec<&str> = lines
                .by_ref()
                .map(|(_, l)| l)
                .take_while(|l| !l.starts_with("```"))
                .collect();
            let path = block
                .first()
                .and_then(|l| l.strip_prefix("# "))
                .unwrap_or_else(|| panic!("{PAGE}:{}: a yaml block names its file first", i + 1))
                .trim()
                .to_string();
            let content: String = block.iter().map(|l| format!("{l}\n")).collect();
            let commit = if section == START {
                &mut start
            } else {
                let recipe = recipes.last_mut().filter(|r| r.title == section);
                recipe
                    .and_then(|r| r.commits.last_mut())
                    .unwrap_or_else(|| panic!("{PAGE}:{}: a yaml block before its **Commit N**", i + 1))
            };
            commit.files.push((path, content));
        }
    }
    (start, recipes)
}

fn page() -> (Commit, Vec<Recipe>) {
    let text = std::fs::read_to_string(super::root().join(PAGE)).expect("docs/day-two.md");
    read_page(&text)
}

/// A scratch repository with `kok.yml` and the starting cluster committed; returns it and that commit.
fn scratch(start: &Commit) -> (tempfile::TempDir, String) {
    let fixture = super::fixture();
    let dir = tempfile::tempdir_in(&fixture.root).expect("a temp dir");
    super::git::git(dir.path(), &["init", "-q", "-b", "main"]);
    let mut first = start.clone();
    first.files.push(("kok.yml".into(), KOK_YML.into()));
    let sha = commit(dir.path(), &first, "the cluster the recipes start from");
    (dir, sha)
}

/// Writes `files` and commits them; returns the commit.
fn commit(repo: &Path, commit: &Commit, message: &str) -> String {
    for (path, content) in &commit.files {
        let file = repo.join(path);
        std::fs::create_dir_all(file.parent().expect("a parent")).expect("the file's directory");
        std::fs::write(file, content).expect("write a recipe's file");
    }
    super::git::git(repo, &["add", "-A"]);
    super::git::git(
        repo,
        &[
            "-c",
            "commit.gpgsign=false",
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            message,
        ],
    );
    super::git::git(repo, &["rev-parse", "HEAD"]).trim().to_string()
}

/// `kok <args>` on the fixture's PATH: its exit code and stdout.
fn kok(args: &[&str]) -> (i32, String) {
    let out = super::fixture()
        .command(env!("CARGO_BIN_EXE_kok"))
        .args(args)
        .output()
        .expect("kok runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

/// `kok plan` of `(from, to]` in `repo`, with `--detailed-exitcode`.
fn plan(repo: &Path, from: &str, to: &str) -> (i32, String) {
    let repo = repo.to_str().expect("a UTF-8 path");
    kok(&[
        "plan",
        "--repo",
        repo,
        "--from",
        from,
        "--to",
        to,
        "--detailed-exitcode",
    ])
}

#[test]
fn the_day_two_page_has_every_recipe_each_with_commits_of_whole_files() {
    let (start, recipes) = page();
    let titles: Vec<&str> = recipes.iter().map(|r| r.title.as_str()).collect();
    assert_eq!(
        titles, RECIPES,
        "{PAGE} has kubespray's day-two tasks, in this order"
    );
    let files: Vec<&str> = start.files.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        files,
        [
            "clusters/prod-bj/hosts.yml",
            "clusters/prod-bj/vars.yml",
            "clusters/prod-bj/cluster.yml",
            "clusters/prod-bj/operations.yml"
        ]
    );
    for recipe in &recipes {
        assert!(
            !recipe.commits.is_empty() && recipe.commits.iter().all(|c| !c.files.is_empty()),
            "{}: every commit shows a file: {recipe:?}",
            recipe.title
        );
        assert!(
            WRONG.iter().any(|(title, ..)| *title == recipe.title),
            "{}: the test knows its wrong way",
            recipe.title
        );
    }
}

#[test]
fn every_day_two_recipe_passes_validate_and_plan_commit_by_commit() {
    let (start, recipes) = page();
    let mut failures = Vec::new();
    for recipe in &recipes {
        let (repo, mut before) = scratch(&start);
        for (i, step) in recipe.commits.iter().enumerate() {
            let at = format!("{}, commit {}", recipe.title, i + 1);
            let sha = commit(repo.path(), step, &at);
            let (code, text) = kok(&["validate", repo.path().to_str().expect("UTF-8")]);
            if code != 0 {
                failures.push(format!("{at}: kok validate exits {code}:\n{text}"));
            }
            let (code, text) = plan(repo.path(), &before, &sha);
            if code != 2 || text.contains("pre-flight:") {
                failures.push(format!(
                    "{at}: kok plan exits {code} (2: it would run), with no pre-flight finding:\n{text}"
                ));
            } else {
                eprintln!("ok     {at}");
            }
            before = sha;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn the_wrong_way_of_every_day_two_recipe_fails_its_plan_with_the_rule_the_page_names() {
    let (start, recipes) = page();
    let text = std::fs::read_to_string(super::root().join(PAGE)).expect("the page");
    let mut failures = Vec::new();
    for (title, n, change, rule, error) in &WRONG {
        let recipe = recipes
            .iter()
            .find(|r| r.title == *title)
            .expect("a recipe of the page");
        let at = format!("{title}, commit {n}, wrong");
        let (repo, mut before) = scratch(&start);
        for step in &recipe.commits[..n - 1] {
            before = commit(repo.path(), step, "a step");
        }
        let wrong = match change {
            Change::Skip => recipe
                .commits
                .get(*n)
                .cloned()
                .expect("a commit after the one left out"),
            Change::Replace { path, from, to } => {
                let mut step = recipe.commits[n - 1].clone();
                let (_, content) = step
                    .files
                    .iter_mut()
                    .find(|(p, _)| p == path)
                    .unwrap_or_else(|| panic!("{at}: the commit writes {path}"));
                assert!(content.contains(from), "{at}: {path} has {from:?}: {content}");
                *content = content.replacen(from, to, 1);
                step
            }
        };
        let sha = commit(repo.path(), &wrong, &at);
        let (code, out) = plan(repo.path(), &before, &sha);
        let (expected, word) = if *error { (1, "error") } else { (2, "warning") };
        if code != expected || !out.contains(&format!("    {word}: {rule}: ")) {
            failures.push(format!(
                "{at}: kok plan exits {code} ({expected} expected) with `{word}: {rule}`:\n{out}"
            ));
        } else {
            eprintln!("ok     {at}: {word}: {rule}");
        }
        let section = text
            .split("\n## ")
            .find(|s| s.starts_with(title))
            .unwrap_or_default();
        if !section.contains(&format!("`{rule}`")) {
            failures.push(format!(
                "{PAGE}: section {title:?} names the rule its wrong way breaks, `{rule}`"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
