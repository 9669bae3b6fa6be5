//! The corpus of invalid repositories under tests/invalid/: each case must produce exactly its expected diagnostics.
//!
//! A case is a small repository (`clusters/<name>/...`, optionally `kok.yml`) with `expected.txt` holding one
//! diagnostic line per line, exactly as `kok validate` prints it (a line starting with `~ ` is matched as a
//! substring instead), and optionally `valid.txt` naming the clusters that must stay valid. Cases needing a
//! symlink, a non-UTF-8 file or a file over 1 MiB get it created at run time in a temporary copy.
//! `KOK_BLESS_CORPUS=1` rewrites every expected.txt from the actual output (review the diff before committing).

use std::path::{Path, PathBuf};

use kok::layout::{parse_repo, DiskTree, DEFAULT_ROOT, MAX_FILE_SIZE};

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Files git cannot (or should not) carry, created in the temporary copy.
fn prepare_runtime_files(case: &str, repo: &Path) {
    let prod = repo.join("clusters/prod");
    match case {
        "symlinked-hosts" => {
            std::fs::write(repo.join("inventory.yml"), "all:\n  hosts:\n    node1:\n").unwrap();
            std::os::unix::fs::symlink("../../inventory.yml", prod.join("hosts.yml")).unwrap();
        }
        "symlinked-cluster-dir" => {
            std::os::unix::fs::symlink("prod", repo.join("clusters/prod-copy")).unwrap()
        }
        "non-utf8-vars" => std::fs::write(
            prod.join("vars.yml"),
            b"kube_version: v1.33.0\nowner: J\xfcrgen\n",
        )
        .unwrap(),
        "oversized-vars" => {
            let mut big = String::from("# generated\nblob: |\n");
            while big.len() as u64 <= MAX_FILE_SIZE {
                big.push_str("  0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n");
            }
            std::fs::write(prod.join("vars.yml"), big).unwrap();
        }
        _ => {}
    }
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|t| {
            t.lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// What is wrong with one case, or `None` when it matches.
fn check_case(case_dir: &Path, bless: bool) -> Option<String> {
    let case = case_dir.file_name().unwrap().to_string_lossy().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    copy_dir(case_dir, &repo);
    for meta in ["expected.txt", "valid.txt"] {
        let _ = std::fs::remove_file(repo.join(meta));
    }
    prepare_runtime_files(&case, &repo);

    let parsed = parse_repo(&DiskTree::new(&repo), DEFAULT_ROOT);
    let actual: Vec<String> = parsed.diagnostics.iter().map(ToString::to_string).collect();
    if bless {
        std::fs::write(
            case_dir.join("expected.txt"),
            actual.iter().map(|l| format!("{l}\n")).collect::<String>(),
        )
        .unwrap();
    }
    let expected = lines(&case_dir.join("expected.txt"));
    let mut problems = Vec::new();
    if expected.is_empty() {
        problems.push("expected.txt is empty: every case must expect at least one diagnostic".to_string());
    }
    let matches = |want: &str, got: &str| match want.strip_prefix("~ ") {
        Some(part) => got.contains(part),
        None => want == got,
    };
    let mut unmatched: Vec<&String> = actual.iter().collect();
    for want in &expected {
        match unmatched.iter().position(|got| matches(want, got)) {
            Some(i) => {
                unmatched.remove(i);
            }
            None => problems.push(format!("missing:    {want}")),
        }
    }
    problems.extend(unmatched.iter().map(|got| format!("unexpected: {got}")));
    let mut valid_expected = lines(&case_dir.join("valid.txt"));
    valid_expected.sort();
    let valid: Vec<String> = parsed.clusters.iter().map(|c| c.name.clone()).collect();
    if valid != valid_expected {
        problems.push(format!(
            "valid clusters: expected {valid_expected:?}, got {valid:?}"
        ));
    }
    if !parsed.has_errors() && valid_expected.is_empty() {
        problems.push("the repository has no error: an invalid case must fail".to_string());
    }
    (!problems.is_empty()).then(|| format!("{case}:\n    {}", problems.join("\n    ")))
}

#[test]
fn every_invalid_repository_produces_exactly_its_expected_diagnostics() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/invalid");
    let bless = std::env::var_os("KOK_BLESS_CORPUS").is_some();
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    assert!(cases.len() >= 35, "the corpus has only {} cases", cases.len());
    let failures: Vec<String> = cases.iter().filter_map(|c| check_case(c, bless)).collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases do not match:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
