//! Real kubespray for the tests: its source tree and the ansible its `requirements.txt` pins, where
//! `scripts/setup.sh` puts them, and whether this machine may be one of its hosts.
//!
//! The source comes from `../shared/kubespray` beside the checkout (or `$KOK_KUBESPRAY_SOURCE`); the
//! set-up extracts it into `.kubespray/` and installs its requirements into `.venv-kubespray` (or
//! `$KOK_KUBESPRAY_VENV`). Without that source the tests skip and say why, except under `CI=true`, where
//! they fail. kubespray logs in as root and bootstraps every host; the tests' hosts are this machine on
//! 127.0.0.x, so they run only where that bootstrap finds nothing to install or change.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;

/// The kubespray release the tests run.
pub const VERSION: &str = "v2.27.0";

/// kubespray set up for the tests.
pub struct Kubespray {
    /// The extracted source: kok's `--workdir`.
    pub tree: PathBuf,
    /// The virtual environment holding the ansible release kubespray pins.
    pub venv: PathBuf,
}

impl Kubespray {
    /// PATH for kok and the ansible it runs: kubespray's environment first, then the tests' PATH.
    pub fn search_path(&self) -> OsString {
        let rest = super::tools::search_path();
        let dirs = std::iter::once(self.venv.join("bin")).chain(std::env::split_paths(&rest));
        std::env::join_paths(dirs).expect("no PATH entry holds a ':'")
    }
}

/// `$var` relative to the repository's top, else `default` there.
fn setting(var: &str, default: &str) -> PathBuf {
    let root = super::tools::workspace_root();
    match std::env::var_os(var).filter(|dir| !dir.is_empty()) {
        Some(dir) => root.join(dir),
        None => root.join(default),
    }
}

/// kubespray as the set-up left it, or None when `test` must not run (it prints why). Panics when the
/// source is missing under `CI=true`, and when the source is there but the set-up has not run.
pub fn kubespray_or_skip(test: &str) -> Option<Kubespray> {
    let kubespray = installed_or_skip(test)?;
    if let Some(why) = refusal() {
        eprintln!("skipping {test}: {why}");
        return None;
    }
    Some(kubespray)
}

/// Like [`kubespray_or_skip`] for a test that only runs kubespray's ansible on its own files, never
/// against this machine: no check that kubespray could log in here.
pub fn installed_or_skip(test: &str) -> Option<Kubespray> {
    let source = setting("KOK_KUBESPRAY_SOURCE", "../shared/kubespray");
    let tarball = source.join(format!("kubespray-{VERSION}.tar.gz"));
    if !tarball.is_file() {
        let why = format!(
            "{} is missing (kubespray's source sits beside the checkout in CI; KOK_KUBESPRAY_SOURCE=DIR \
             names another directory)",
            tarball.display()
        );
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: {why}, and CI=true: the tests against real kubespray must run in CI"
        );
        eprintln!("skipping {test}: {why}");
        return None;
    }
    let kubespray = Kubespray {
        tree: super::tools::workspace_root()
            .join(".kubespray")
            .join(format!("kubespray-{VERSION}")),
        venv: setting("KOK_KUBESPRAY_VENV", ".venv-kubespray"),
    };
    for needed in [
        kubespray.tree.join("ansible.cfg"),
        kubespray.venv.join("bin/ansible-playbook"),
    ] {
        assert!(
            needed.exists(),
            "{test}: {} is missing: run `bash scripts/setup.sh` (it extracts {} and installs its \
             requirements.txt)",
            needed.display(),
            tarball.display()
        );
    }
    eprintln!(
        "{test}: using kubespray {VERSION} at {} with {}",
        kubespray.tree.display(),
        kubespray.venv.join("bin/ansible-playbook").display()
    );
    Some(kubespray)
}

/// Why kubespray's bootstrap (`bootstrap-os`, run by `playbooks/facts.yml`) would change this machine, or
/// why its ssh login cannot work here; None when the tests may point kubespray at it.
pub fn refusal() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next().map(str::to_string));
    if uid.as_deref() != Some("0") {
        return Some(
            "the test does not run as root: kubespray logs in as root over ssh, and the test's sshd can \
             only let in the user it runs as"
                .to_string(),
        );
    }
    if !std::path::Path::new("/usr/sbin/sshd").exists() {
        return Some("/usr/sbin/sshd is missing (scripts/setup.sh installs openssh-server)".to_string());
    }
    let os_release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let field = |key: &str| {
        os_release
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(|v| v.trim_matches('"').to_string())
            .unwrap_or_default()
    };
    let (id, version) = (field("ID"), field("VERSION_ID"));
    if id != "debian" && id != "ubuntu" {
        return Some(format!(
            "/etc/os-release says ID={id:?}, not debian or ubuntu: kubespray's bootstrap-os would run \
             another distribution's tasks on this machine"
        ));
    }
    if id == "debian" && (version == "10" || version == "11") {
        return Some(format!(
            "this is Debian {version}: kubespray's bootstrap-os would run `apt-get update` on it"
        ));
    }
    let python = Command::new("/usr/bin/python3")
        .args(["-c", "import apt"])
        .output();
    match python {
        Err(_) => {
            return Some(
                "/usr/bin/python3 is missing: kubespray's bootstrap-os would install python3-minimal"
                    .to_string(),
            )
        }
        Ok(out) if !out.status.success() => {
            return Some(
                "/usr/bin/python3 cannot import apt: ansible's apt module (kubespray's iproute2 check) \
                 would install python3-apt"
                    .to_string(),
            )
        }
        Ok(_) => {}
    }
    let iproute2 = Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", "iproute2"])
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .unwrap_or_default();
    if iproute2 != "install ok installed" {
        return Some(
            "iproute2 (`ip`) is not installed: kubespray's bootstrap-os would install it".to_string(),
        );
    }
    None
}

/// Why a playbook that gets past kubespray's `--limit` fact-cache assertion would go on to install
/// things on this machine: None when its next assertion, "Stop if non systemd OS type", stops it (pid 1
/// is not systemd, as ansible's `service_mgr` fact sees it).
pub fn systemd_refusal() -> Option<String> {
    let pid1 = std::fs::read_to_string("/proc/1/comm").unwrap_or_default();
    let pid1 = pid1.trim();
    let init_links_to_systemd = std::fs::read_link("/sbin/init")
        .map(|target| target.file_name().is_some_and(|name| name == "systemd"))
        .unwrap_or(false);
    let systemd = pid1 == "systemd"
        || ((pid1.is_empty() || pid1 == "init" || pid1.ends_with("sh"))
            && (std::path::Path::new("/run/systemd/system").exists() || init_links_to_systemd));
    systemd.then(|| {
        format!(
            "pid 1 ({pid1}) is systemd: kubespray's \"Stop if non systemd OS type\" would pass and the \
             playbook would go on to install a container runtime on this machine"
        )
    })
}
