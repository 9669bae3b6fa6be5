//! The CI snippets of docs/ci.md run: the GitHub Actions workflow's `run:` steps and the GitLab CI job's
//! `before_script` and `script`, on a scratch repository whose pull request adds an operation, with the
//! variables they use set as GitHub and GitLab would, must pass and leave the markdown plan of the range.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_yaml::Value;

use super::{fixture, git, read};

const PAGE: &str = "docs/ci.md";
const WORKFLOW: &str = ".github/workflows/kok-plan.yml";
const GITLAB: &str = ".gitlab-ci.yml";
/// The base branch of the scratch pull request.
const BASE_BRANCH: &str = "main";

/// The YAML block of the page that starts `# <file>`, parsed.
fn snippet(file: &str) -> Value {
    let doc = read(Path::new(PAGE));
    let block = doc
        .blocks
        .iter()
        .find(|b| {
            b.lang == "yaml"
                && b.lines
                    .first()
                    .is_some_and(|(_, l)| l.trim() == format!("# {file}"))
        })
        .unwrap_or_else(|| panic!("{PAGE} has no ```yaml block starting `# {file}`"));
    let text: String = block.lines.iter().map(|(_, l)| format!("{l}\n")).collect();
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{PAGE}:{}: `{file}` is not YAML: {e}", block.line))
}

/// A scratch checkout of a pull request: `origin/main` is the base (the example repository), HEAD the
/// pull request's commit (an added operation); returns it and the base commit.
fn scratch_pull_request(name: &str) -> (tempfile::TempDir, PathBuf, String) {
    let fixture = fixture();
    let dir = tempfile::tempdir_in(&fixture.root).expect("a temp dir");
    let origin = fixture.root.join("origin.git");
    git::git(dir.path(), &["clone", "-q", &origin.display().to_string(), name]);
    let repo = dir.path().join(name);
    git::git(
        &repo,
        &["fetch", "-q", &fixture.repo.display().to_string(), BASE_BRANCH],
    );
    git::git(&repo, &["checkout", "-q", "-b", "pull-request", "FETCH_HEAD"]);
    let base = git::git(&repo, &["rev-parse", &format!("origin/{BASE_BRANCH}")])
        .trim()
        .to_string();
    assert_ne!(
        base,
        git::git(&repo, &["rev-parse", "HEAD"]).trim(),
        "the pull request adds a commit"
    );
    (dir, repo, base)
}

/// The markdown plan of the scratch pull request, as kok gives it.
fn expected_plan(repo: &Path) -> String {
    let out = fixture()
        .command(env!("CARGO_BIN_EXE_kok"))
        .args([
            "plan",
            "--repo",
            ".",
            "--from",
            &format!("origin/{BASE_BRANCH}"),
            "--to",
            "HEAD",
        ])
        .args(["--output", "markdown"])
        .current_dir(repo)
        .output()
        .expect("kok runs");
    assert!(
        out.status.success(),
        "kok plan: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(
        plan.contains("facts"),
        "the plan shows the pull request's operation:\n{plan}"
    );
    plan
}

/// The string values of a YAML mapping (`env:`, `variables:`), numbers and booleans as YAML writes them.
fn string_map(value: &Value) -> BTreeMap<String, String> {
    value
        .as_mapping()
        .into_iter()
        .flatten()
        .map(|(k, v)| {
            let v = match v {
                Value::String(s) => s.clone(),
                other => serde_yaml::to_string(other).expect("a scalar").trim().to_string(),
            };
            (k.as_str().expect("a string key").to_string(), v)
        })
        .collect()
}

/// `text` with each GitHub expression `${{ expr }}` replaced from `known`; an unknown one is an error.
fn expand_expressions(text: &str, known: &BTreeMap<&str, String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${{") {
        let end = rest[start..]
            .find("}}")
            .ok_or_else(|| format!("unclosed expression in {text:?}"))?
            + start;
        let expr = rest[start + 3..end].trim();
        let value = known
            .get(expr)
            .ok_or_else(|| format!("the test does not know the expression `${{{{ {expr} }}}}`"))?;
        out.push_str(&rest[..start]);
        out.push_str(value);
        rest = &rest[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The shell variables `script` reads (`$NAME`, `${NAME}`) that neither `env` gives nor the script sets.
fn unknown_variables(script: &str, env: &BTreeMap<String, String>) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let assigned: BTreeSet<String> = script
        .split(|c: char| c.is_whitespace() || c == ';')
        .filter_map(|word| word.split_once('=').map(|(name, _)| name.to_string()))
        .filter(|name| !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .collect();
    script
        .split('$')
        .skip(1)
        .map(|after| ident(after.strip_prefix('{').unwrap_or(after)))
        .filter(|name| !name.is_empty() && !name.starts_with(|c: char| c.is_ascii_digit()))
        .filter(|name| {
            !env.contains_key(name) && !assigned.contains(name) && !["PATH", "HOME"].contains(&name.as_str())
        })
        .collect()
}

/// Runs `script` with bash (`-eo pipefail`, as `shell: bash` and GitLab's runner do) in `dir` with `env`
/// added; panics with its output when it fails.
fn run_script(what: &str, script: &str, dir: &Path, env: &BTreeMap<String, String>) {
    let unknown = unknown_variables(script, env);
    assert!(
        unknown.is_empty(),
        "{what}: reads {unknown:?}, which the test does not set:\n{script}"
    );
    let out = fixture()
        .command("bash")
        .args(["--noprofile", "--norc", "-eo", "pipefail", "-c", script])
        .envs(env)
        .current_dir(dir)
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{script}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("ok     {what}");
}

#[test]
fn the_github_actions_workflow_of_the_ci_page_validates_and_plans_a_pull_request() {
    let workflow = snippet(WORKFLOW);
    assert!(
        workflow["on"].get("pull_request").is_some(),
        "{WORKFLOW} runs on pull requests: {workflow:?}"
    );
    let (dir, repo, base) = scratch_pull_request("github");
    let summary = dir.path().join("step-summary.md");
    // What GitHub sets on a pull_request event, for this scratch repository.
    let mut env: BTreeMap<String, String> = [
        ("CI", "true".to_string()),
        ("GITHUB_EVENT_NAME", "pull_request".into()),
        ("GITHUB_BASE_REF", BASE_BRANCH.into()),
        ("GITHUB_HEAD_REF", "pull-request".into()),
        ("GITHUB_WORKSPACE", repo.display().to_string()),
        ("GITHUB_STEP_SUMMARY", summary.display().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let mut expressions: BTreeMap<&str, String> = [
        ("github.event.pull_request.base.sha", base.clone()),
        ("github.base_ref", BASE_BRANCH.to_string()),
        ("github.head_ref", "pull-request".to_string()),
    ]
    .into();
    let top = string_map(&workflow["env"]);
    for (k, v) in &top {
        env.insert(
            k.clone(),
            expand_expressions(v, &expressions).unwrap_or_else(|e| panic!("{WORKFLOW}: {e}")),
        );
    }
    let rev = top.get("KOK_REV").cloned().unwrap_or_default();
    expressions.insert("env.KOK_REV", rev);
    let jobs = workflow["jobs"].as_mapping().expect("jobs");
    let mut ran = 0;
    let mut installs = 0;
    for (name, job) in jobs {
        let name = name.as_str().unwrap_or_default();
        let mut job_env = env.clone();
        job_env.extend(string_map(&job["env"]));
        for (i, step) in job["steps"].as_sequence().expect("steps").iter().enumerate() {
            let Some(script) = step["run"].as_str() else {
                continue; // `uses:` steps: the scratch repository is the checkout; nothing is cached.
            };
            assert_eq!(
                step["shell"].as_str(),
                Some("bash"),
                "{WORKFLOW}: step {i} of {name} runs with `shell: bash`"
            );
            let mut step_env = job_env.clone();
            for (k, v) in string_map(&step["env"]) {
                step_env.insert(
                    k,
                    expand_expressions(&v, &expressions).unwrap_or_else(|e| panic!("{WORKFLOW}: {e}")),
                );
            }
            let script =
                expand_expressions(script, &expressions).unwrap_or_else(|e| panic!("{WORKFLOW}: {e}"));
            if script.contains("cargo install") {
                installs += 1;
                assert!(
                    script.contains("command -v kok ||") && script.contains("cargo install --locked"),
                    "{WORKFLOW}: the install builds the locked dependencies, and only when kok is missing: {script}"
                );
            }
            let what = format!(
                "{WORKFLOW}: job {name}, step {i} ({})",
                step["name"].as_str().unwrap_or("unnamed")
            );
            run_script(&what, &script, &repo, &step_env);
            ran += 1;
        }
    }
    assert_eq!(installs, 1, "{WORKFLOW} installs kok once");
    assert!(ran >= 3, "{WORKFLOW}: ran {ran} steps");
    let posted = std::fs::read_to_string(&summary).expect("the workflow writes the job summary");
    assert_eq!(
        posted.trim_end(),
        expected_plan(&repo).trim_end(),
        "the job summary is the markdown plan"
    );
}

#[test]
fn the_gitlab_ci_job_of_the_ci_page_validates_and_plans_a_merge_request() {
    let pipeline = snippet(GITLAB);
    let jobs: Vec<(&str, &Value)> = pipeline
        .as_mapping()
        .expect("a mapping")
        .iter()
        .filter(|(_, job)| job.get("script").is_some())
        .map(|(name, job)| (name.as_str().unwrap_or_default(), job))
        .collect();
    assert_eq!(jobs.len(), 1, "{GITLAB} has one job");
    let (name, job) = jobs[0];
    let rules = serde_yaml::to_string(&job["rules"]).expect("rules");
    assert!(
        rules.contains("merge_request_event"),
        "{GITLAB}: {name} runs on merge requests: {rules}"
    );
    let (_dir, repo, base) = scratch_pull_request("gitlab");
    let mut env: BTreeMap<String, String> = [
        ("CI", "true".to_string()),
        ("CI_PIPELINE_SOURCE", "merge_request_event".into()),
        ("CI_PROJECT_DIR", repo.display().to_string()),
        ("CI_MERGE_REQUEST_DIFF_BASE_SHA", base),
        ("CI_MERGE_REQUEST_TARGET_BRANCH_NAME", BASE_BRANCH.into()),
        ("CI_MERGE_REQUEST_SOURCE_BRANCH_NAME", "pull-request".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    env.extend(string_map(&job["variables"]));
    let lines = |key: &str| -> Vec<String> {
        job[key]
            .as_sequence()
            .into_iter()
            .flatten()
            .map(|l| l.as_str().expect("a script line").to_string())
            .collect()
    };
    let (before, script) = (lines("before_script"), lines("script"));
    let install: Vec<&String> = before
        .iter()
        .chain(&script)
        .filter(|l| l.contains("cargo install"))
        .collect();
    assert!(
        install.len() == 1
            && install[0].contains("command -v kok ||")
            && install[0].contains("cargo install --locked"),
        "{GITLAB}: one install of the locked dependencies, only when kok is missing: {install:?}"
    );
    let whole = before
        .iter()
        .chain(&script)
        .cloned()
        .collect::<Vec<_>>()
        .join("\n");
    run_script(&format!("{GITLAB}: job {name}"), &whole, &repo, &env);
    let artifacts = serde_yaml::to_string(&job["artifacts"]["paths"]).expect("artifact paths");
    assert!(
        artifacts.contains("kok-plan.md"),
        "{GITLAB}: the plan is an artifact: {artifacts}"
    );
    let plan = std::fs::read_to_string(repo.join("kok-plan.md")).expect("the job writes kok-plan.md");
    assert_eq!(
        plan.trim_end(),
        expected_plan(&repo).trim_end(),
        "kok-plan.md is the markdown plan"
    );
}

#[test]
fn expressions_and_variables_the_test_does_not_know_are_refused() {
    let known: BTreeMap<&str, String> = [("github.base_ref", "main".to_string())].into();
    assert_eq!(
        expand_expressions("x ${{ github.base_ref }} y", &known).unwrap(),
        "x main y"
    );
    assert!(expand_expressions("${{ secrets.TOKEN }}", &known).is_err());
    let env: BTreeMap<String, String> = [("A".to_string(), String::new())].into();
    let unknown = unknown_variables("status=0\necho \"$A\" ${B} $status $? $1 > \"$C\"", &env);
    assert_eq!(unknown, ["B", "C"].map(String::from).into());
}
