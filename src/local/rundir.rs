//! A run's own directory, `<state dir>/run/<key>/`: everything a Job's process uses or leaves on this machine,
//! so that a restarted kok finds it again and nothing of the run lands in the user's files.
//!
//! ```text
//! run.json          what kok needs to pick the run up again: Job, log, pid and the process's start time
//! output            the process's merged stdout and stderr (it writes there itself, not through kok)
//! copied            how many bytes of `output` are already in the operation's log
//! started           written by the wrapper just before the command starts
//! exit              the command's exit status, written by the wrapper when the command ends
//! termination-log   the termination message (KOK_TERMINATION_LOG)
//! tmp/              TMPDIR and ANSIBLE_LOCAL_TEMP (the entry script's writable inventory lives here)
//! facts/            ANSIBLE_CACHE_PLUGIN_CONNECTION: kubespray's jsonfile fact cache, this run's only
//! cp/               ANSIBLE_SSH_CONTROL_PATH_DIR: the ssh control sockets (a short directory under the
//!                   system temporary directory when this path is too long for a socket)
//! kok-<job>-<rand>/ the Job's volumes ([`super::volumes`])
//! ```
//!
//! The command runs behind a small shell wrapper ([`WRAPPER`]) in its own session (`setsid`), so it outlives
//! kok as a pod outlives its controller. The wrapper starts the command only once kok has recorded the
//! process in `run.json`, marks that moment in `started`, and records the command's exit status in `exit`:
//! a run without `started` never ran its command and may be started afresh. A process is the run's only
//! when both its pid and its start time (field 22 of `/proc/<pid>/stat`) match `run.json`.
//!
//! When a run ends, [`end_leftovers`] ends every ssh master it started (`ssh -O exit` on each socket in its
//! control directory) and kills what is left of its processes: those whose command line names the control
//! directory (ssh masters detach into their own session, out of reach of the process-group kill) or whose
//! environment carries the run's `KOK_RUN_DIR`.

use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::logs::LogWriter;

/// Directory of the state directory holding the runs' directories.
pub const RUNS_DIR: &str = "run";
/// Env var naming the run's directory, set for every run; it marks the run's processes.
pub const ENV_RUN_DIR: &str = "KOK_RUN_DIR";
/// Env vars pointing ansible's temporary files, fact cache and ssh control sockets into the run's directory.
pub const ENV_TMPDIR: &str = "TMPDIR";
/// ansible's local temporary directory (default `~/.ansible/tmp`).
pub const ENV_ANSIBLE_LOCAL_TEMP: &str = "ANSIBLE_LOCAL_TEMP";
/// Where ansible's fact cache plugin keeps its files (kubespray's `fact_caching_connection`).
pub const ENV_FACT_CACHE: &str = "ANSIBLE_CACHE_PLUGIN_CONNECTION";
/// Directory of ansible's ssh control sockets (default `~/.ansible/cp`).
pub const ENV_CONTROL_PATH_DIR: &str = "ANSIBLE_SSH_CONTROL_PATH_DIR";
/// ansible's ssh control path template; set only when an ansible.cfg sets `control_path`.
pub const ENV_CONTROL_PATH: &str = "ANSIBLE_SSH_CONTROL_PATH";
/// The control path used instead of an ansible.cfg's own: ssh's hash of the connection, in the control dir.
pub const CONTROL_PATH: &str = "%(directory)s/%%C";

const RECORD: &str = "run.json";
const OUTPUT: &str = "output";
const COPIED: &str = "copied";
const EXIT: &str = "exit";
const STARTED: &str = "started";
const TERMINATION_LOG: &str = "termination-log";
const TMP: &str = "tmp";
const FACTS: &str = "facts";
const CONTROL: &str = "cp";
/// Longest socket path Linux accepts (`sun_path` minus its NUL).
const MAX_SOCKET_PATH: usize = 107;
/// What ssh adds to a control path while it creates the socket (`.` and 16 random characters).
const SSH_TEMP_SUFFIX: usize = 17;
/// Longest socket name inside the control directory: ansible's 10-character hash, or ssh's `%C` (40).
const SOCKET_NAME: usize = 40;
/// How long leftover processes get between SIGTERM and SIGKILL.
const LEFTOVER_GRACE: Duration = Duration::from_secs(2);

/// The wrapper the command runs behind (`$0` is the run's directory). It waits for `go` on its stdin, which
/// kok writes once `run.json` names the process (kok gone before that: end of file, and nothing runs), marks
/// the run `started`, runs the command with stdin from /dev/null, then records its exit status in `exit`.
pub const WRAPPER: &str = r#"read -r kok_go && [ "$kok_go" = go ] || exit 125
: > "$0/started"
"$@" < /dev/null
kok_rc=$?
echo "$kok_rc" > "$0/exit.tmp" && mv -f "$0/exit.tmp" "$0/exit"
exit "$kok_rc""#;

/// What kok keeps about a run to pick it up again (mode 0600: it holds the lines of Secret content the log
/// redacts, as the volumes beside it hold the Secrets themselves).
#[derive(Clone, Default, Serialize, Deserialize)]
pub struct Record {
    /// The Job's name.
    pub job: String,
    /// The Job's uid.
    pub uid: String,
    /// The operation's log file.
    pub log: PathBuf,
    /// The wrapper's pid; it leads the run's session and process group.
    pub pid: u32,
    /// The wrapper's start time in clock ticks after boot (`/proc/<pid>/stat` field 22).
    pub start_ticks: u64,
    /// Secret content the log redacts.
    pub redactions: Vec<String>,
    /// What the Job's finished status says besides its outcome (which directory ran an unmapped image).
    pub note: Option<String>,
}

/// A run's directory.
#[derive(Clone, Debug)]
pub struct RunDir {
    root: PathBuf,
}

/// The directory name of the Job with `uid`: its first 12 hexadecimal digits (short, for socket paths).
pub fn key(uid: &str) -> String {
    uid.chars().filter(char::is_ascii_hexdigit).take(12).collect()
}

/// The directory of the run of the Job with `uid`.
pub fn path(state_dir: &Path, uid: &str) -> PathBuf {
    state_dir.join(RUNS_DIR).join(key(uid))
}

fn private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    std::fs::rename(&tmp, path)
}

impl RunDir {
    /// Creates the (fresh) directory of the run of the Job with `uid`, with its `tmp`, `facts` and control
    /// directories; a leftover of an earlier run with the same key is removed first.
    pub fn create(state_dir: &Path, uid: &str) -> std::io::Result<RunDir> {
        let root = path(state_dir, uid);
        remove_tree(&root)?;
        private_dir(&root)?;
        let run = RunDir { root };
        for dir in [run.tmp(), run.facts()] {
            private_dir(&dir)?;
        }
        private_dir(&run.control_dir())?;
        Ok(run)
    }

    /// The existing directory of the run of the Job with `uid`.
    pub fn open(state_dir: &Path, uid: &str) -> Option<RunDir> {
        let root = path(state_dir, uid);
        root.is_dir().then_some(RunDir { root })
    }

    /// Every run directory in `state_dir`.
    pub fn list(state_dir: &Path) -> Vec<RunDir> {
        let Ok(read) = std::fs::read_dir(state_dir.join(RUNS_DIR)) else {
            return Vec::new();
        };
        read.flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .map(|root| RunDir { root })
            .collect()
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file the process writes its output to.
    pub fn output(&self) -> PathBuf {
        self.root.join(OUTPUT)
    }

    /// True once the wrapper has started the command.
    pub fn started(&self) -> bool {
        self.root.join(STARTED).exists()
    }

    /// The file standing in for the container's `terminationMessagePath`.
    pub fn termination_log(&self) -> PathBuf {
        self.root.join(TERMINATION_LOG)
    }

    fn tmp(&self) -> PathBuf {
        self.root.join(TMP)
    }

    fn facts(&self) -> PathBuf {
        self.root.join(FACTS)
    }

    /// The directory of the run's ssh control sockets: `cp/` inside the run's directory, or, when that path
    /// leaves no room for a socket name, `kok-ssh-<key>` under the system temporary directory.
    pub fn control_dir(&self) -> PathBuf {
        let inside = self.root.join(CONTROL);
        if inside.as_os_str().len() + 1 + SOCKET_NAME + SSH_TEMP_SUFFIX <= MAX_SOCKET_PATH {
            return inside;
        }
        let name = self
            .root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        std::env::temp_dir().join(format!("kok-ssh-{name}"))
    }

    /// The environment that keeps the run's files in its directory: `KOK_RUN_DIR`, `TMPDIR`,
    /// `ANSIBLE_LOCAL_TEMP`, `ANSIBLE_CACHE_PLUGIN_CONNECTION`, `ANSIBLE_SSH_CONTROL_PATH_DIR`, and
    /// `ANSIBLE_SSH_CONTROL_PATH` when `control_path_configured` (an ansible.cfg the run reads sets one).
    pub fn env(&self, control_path_configured: bool) -> Vec<(String, String)> {
        let show = |p: PathBuf| p.display().to_string();
        let mut env = vec![
            (ENV_RUN_DIR.to_string(), show(self.root.clone())),
            (ENV_TMPDIR.to_string(), show(self.tmp())),
            (ENV_ANSIBLE_LOCAL_TEMP.to_string(), show(self.tmp())),
            (ENV_FACT_CACHE.to_string(), show(self.facts())),
            (ENV_CONTROL_PATH_DIR.to_string(), show(self.control_dir())),
        ];
        if control_path_configured {
            env.push((ENV_CONTROL_PATH.to_string(), CONTROL_PATH.to_string()));
        }
        env
    }

    /// Writes `run.json`.
    pub fn write_record(&self, record: &Record) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(record).map_err(std::io::Error::other)?;
        write_atomic(&self.root.join(RECORD), &bytes)
    }

    /// Reads `run.json`; `None` when it is missing or unreadable.
    pub fn record(&self) -> Option<Record> {
        let bytes = std::fs::read(self.root.join(RECORD)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// The exit status the wrapper recorded, once the command has ended.
    pub fn exit_status(&self) -> Option<i32> {
        std::fs::read_to_string(self.root.join(EXIT))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Opens `output` for the process to append to (created empty, mode 0600).
    pub fn open_output(&self) -> std::io::Result<std::fs::File> {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(self.output())
    }

    /// Removes the directory (and a control directory outside it).
    pub fn remove(&self) -> std::io::Result<()> {
        let control = self.control_dir();
        if !control.starts_with(&self.root) {
            remove_tree(&control)?;
        }
        remove_tree(&self.root)
    }
}

fn remove_tree(root: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(root) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// The state letter and start time (clock ticks after boot) of process `pid`, from `/proc/<pid>/stat`.
fn stat(pid: u32) -> Option<(String, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: the fields after it follow the last ")".
    let (_, rest) = stat.rsplit_once(") ")?;
    let mut fields = rest.split(' ');
    let state = fields.next()?.to_string();
    // `rest` starts at field 3 (state); the start time is field 22.
    let ticks = fields.nth(22 - 4)?.parse().ok()?;
    Some((state, ticks))
}

/// The start time (clock ticks after boot) of process `pid`, while it exists (a zombie included).
pub fn start_ticks(pid: u32) -> Option<u64> {
    stat(pid).map(|(_, ticks)| ticks)
}

/// True while process `pid` is the one that started at `ticks` and has not ended (is not a zombie).
pub fn same_process(pid: u32, ticks: u64) -> bool {
    stat(pid).is_some_and(|(state, t)| t == ticks && state != "Z")
}

/// Copies a run's `output` into its log: complete lines as they come, redacted, remembering in `copied` how
/// far it got so that a restarted kok goes on where this one stopped.
pub struct Tail {
    output: PathBuf,
    copied_file: PathBuf,
    offset: u64,
}

impl Tail {
    /// A tail of `run`'s output from where the last one stopped.
    pub fn new(run: &RunDir) -> Tail {
        let copied_file = run.root.join(COPIED);
        let offset = std::fs::read_to_string(&copied_file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        Tail {
            output: run.output(),
            copied_file,
            offset,
        }
    }

    /// Copies the lines written since the last call; with `last`, also a final line without newline.
    pub fn pump(&mut self, writer: &mut LogWriter, last: bool) -> std::io::Result<()> {
        let mut file = match std::fs::File::open(&self.output) {
            Ok(f) => f,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(err) => return Err(err),
        };
        file.seek(std::io::SeekFrom::Start(self.offset))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let mut consumed = 0;
        for line in bytes.split_inclusive(|b| *b == b'\n') {
            if line.last() != Some(&b'\n') && !last {
                break;
            }
            writer.write_line(line)?;
            consumed += line.len();
        }
        if consumed > 0 {
            self.offset += consumed as u64;
            write_atomic(&self.copied_file, self.offset.to_string().as_bytes())?;
        }
        Ok(())
    }
}

/// True when the ansible.cfg a run in `cwd` with `env` reads sets `control_path` (ansible reads the first of
/// `$ANSIBLE_CONFIG`, `./ansible.cfg`, `~/.ansible.cfg`, `/etc/ansible/ansible.cfg`).
pub fn control_path_configured(cwd: &Path, env: &[(String, String)]) -> bool {
    let var = |name: &str| env.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(cfg) = var("ANSIBLE_CONFIG").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(cfg);
        candidates.push(if p.is_relative() { cwd.join(p) } else { p });
    }
    candidates.push(cwd.join("ansible.cfg"));
    if let Some(home) = var("HOME") {
        candidates.push(Path::new(&home).join(".ansible.cfg"));
    }
    candidates.push(PathBuf::from("/etc/ansible/ansible.cfg"));
    candidates
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .is_some_and(|text| sets_control_path(&text))
}

/// True when the ansible.cfg `text` sets `control_path` in `[ssh_connection]` (pure).
pub fn sets_control_path(text: &str) -> bool {
    let mut section = String::new();
    for line in text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.trim().to_string();
        } else if section == "ssh_connection" && !line.starts_with(['#', ';']) {
            if let Some((key, value)) = line.split_once('=') {
                if key.trim() == "control_path" && !value.trim().is_empty() {
                    return true;
                }
            }
        }
    }
    false
}

/// The processes of this user whose command line names `dir` or whose environment has `KOK_RUN_DIR=<run>`.
fn leftovers(run: &Path, control_dir: &Path) -> Vec<u32> {
    let me = std::process::id();
    let marker = format!("{ENV_RUN_DIR}={}", run.display());
    let control = control_dir.display().to_string();
    let Ok(read) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in read.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me || stat(pid).is_none_or(|(state, _)| state == "Z") {
            continue;
        }
        let named = std::fs::read(entry.path().join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&control));
        let marked = || {
            std::fs::read(entry.path().join("environ"))
                .is_ok_and(|e| e.split(|b| *b == 0).any(|v| v == marker.as_bytes()))
        };
        if named || marked() {
            out.push(pid);
        }
    }
    out
}

fn signal(pid: u32, signal: rustix::process::Signal) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// Ends what a finished run left running: every ssh master in its control directory (`ssh -O exit`), then
/// every process still naming the control directory or marked with the run's `KOK_RUN_DIR` (SIGTERM, then
/// SIGKILL). Returns how many processes had to be killed. Blocking.
pub fn end_leftovers(run: &RunDir) -> usize {
    let control = run.control_dir();
    if let Ok(read) = std::fs::read_dir(&control) {
        for socket in read.flatten() {
            let _ = Command::new("ssh")
                .arg("-o")
                .arg(format!("ControlPath={}", socket.path().display()))
                .args(["-O", "exit", "kok-run"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
    let found = leftovers(&run.root, &control);
    if found.is_empty() {
        return 0;
    }
    let ticks: Vec<(u32, Option<u64>)> = found.iter().map(|&pid| (pid, start_ticks(pid))).collect();
    for &pid in &found {
        signal(pid, rustix::process::Signal::TERM);
    }
    let until = std::time::Instant::now() + LEFTOVER_GRACE;
    while std::time::Instant::now() < until
        && ticks
            .iter()
            .any(|&(pid, t)| t.is_some_and(|t| same_process(pid, t)))
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    for &(pid, t) in &ticks {
        if t.is_some_and(|t| same_process(pid, t)) {
            signal(pid, rustix::process::Signal::KILL);
        }
    }
    found.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_path_is_found_only_where_ansible_reads_it() {
        let kubespray = "[ssh_connection]\npipelining=True\n#control_path = ~/.ssh/ansible-%%r@%%h:%%p\n";
        assert!(!sets_control_path(kubespray));
        assert!(sets_control_path(
            "[defaults]\nx=1\n[ssh_connection]\ncontrol_path = /x/%%h\n"
        ));
        assert!(!sets_control_path("[defaults]\ncontrol_path = /x\n"));
    }

    #[test]
    fn a_process_is_known_by_its_pid_and_start_time() {
        let me = std::process::id();
        let ticks = start_ticks(me).expect("this process has a start time");
        assert!(same_process(me, ticks));
        assert!(
            !same_process(me, ticks + 1),
            "same pid, another start: another process"
        );
    }

    #[test]
    fn the_tail_copies_complete_lines_and_goes_on_where_it_stopped() {
        let state = tempfile::tempdir().unwrap();
        let run = RunDir::create(state.path(), "0123456789abcdef").unwrap();
        let log = state.path().join("op.log");
        let mut out = run.open_output().unwrap();
        out.write_all(b"one\ntw").unwrap();
        let mut writer = LogWriter::open(&log, vec!["secret-value".into()]).unwrap();
        Tail::new(&run).pump(&mut writer, false).unwrap();
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "one\n");
        // A restarted kok starts a new tail from what the last one copied.
        out.write_all(b"o secret-value\nthree").unwrap();
        Tail::new(&run).pump(&mut writer, true).unwrap();
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "one\ntwo <redacted>\nthree\n"
        );
    }

    #[test]
    fn the_control_dir_leaves_room_for_a_socket_name() {
        let run = RunDir {
            root: PathBuf::from("/s/run/0123456789ab"),
        };
        assert_eq!(run.control_dir(), PathBuf::from("/s/run/0123456789ab/cp"));
        let long = RunDir {
            root: PathBuf::from(format!("/{}/run/0123456789ab", "x".repeat(60))),
        };
        let dir = long.control_dir();
        assert!(dir.ends_with("kok-ssh-0123456789ab"), "{}", dir.display());
    }
}
