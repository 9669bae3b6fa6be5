//! Test fixtures for the git source: a repository builder driving the real `git` CLI, and throwaway
//! `git daemon` and `sshd` servers on 127.0.0.1 that stop when dropped.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::git as git_cli;
pub use git_cli::git;

/// A minimal valid hosts.yml (a kubespray inventory pre-flight lets run: one control-plane and etcd node).
pub const HOSTS: &str = "all:\n  hosts:\n    node1:\n      ansible_host: 10.0.0.1\n  children:\n    kube_control_plane:\n      hosts:\n        node1:\n    etcd:\n      hosts:\n        node1:\n";

/// A work repository in a temp dir, on branch `main`, with `clusters/` as root.
pub struct RepoBuilder {
    dir: tempfile::TempDir,
}

impl RepoBuilder {
    /// An empty repository.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        git(dir.path(), &["init", "-q", "-b", "main"]);
        git(dir.path(), &["config", "commit.gpgsign", "false"]);
        RepoBuilder { dir }
    }

    /// A clone of `url` (`git clone <extra...> url`), e.g. a CI checkout of a pull request.
    pub fn clone_of(url: &str, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut args = vec!["clone", "-q"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[url, "."]);
        git(dir.path(), &args);
        git(dir.path(), &["config", "commit.gpgsign", "false"]);
        RepoBuilder { dir }
    }

    /// The work tree.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `file://` URL of the repository.
    pub fn url(&self) -> String {
        format!("file://{}", self.path().display())
    }

    /// Writes `content` at `rel` (creating directories).
    pub fn file(&mut self, rel: &str, content: &str) -> &mut Self {
        let path = self.path().join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, content).expect("write");
        self
    }

    /// A valid cluster directory `clusters/<name>` with hosts.yml and vars.yml.
    pub fn cluster(&mut self, name: &str) -> &mut Self {
        self.file(&format!("clusters/{name}/hosts.yml"), HOSTS);
        self.file(
            &format!("clusters/{name}/vars.yml"),
            &format!("cluster_name: {name}\n"),
        )
    }

    /// Appends an operation `{id, action}` to the cluster's operations.yml.
    pub fn op(&mut self, cluster: &str, id: &str, action: &str) -> &mut Self {
        let rel = format!("clusters/{cluster}/operations.yml");
        let path = self.path().join(&rel);
        let mut text = std::fs::read_to_string(&path).unwrap_or_default();
        text.push_str(&format!("- id: {id}\n  action: {action}\n"));
        self.file(&rel, &text)
    }

    /// Deletes a file or directory.
    pub fn remove(&mut self, rel: &str) -> &mut Self {
        git(self.path(), &["rm", "-r", "-q", rel]);
        self
    }

    /// Renames a file or directory.
    pub fn rename(&mut self, from: &str, to: &str) -> &mut Self {
        git(self.path(), &["mv", from, to]);
        self
    }

    /// Commits everything; returns the new commit's sha.
    pub fn commit(&mut self, message: &str) -> String {
        git(self.path(), &["add", "-A"]);
        git(self.path(), &["commit", "-q", "--allow-empty", "-m", message]);
        self.head()
    }

    /// The sha of HEAD.
    pub fn head(&self) -> String {
        git(self.path(), &["rev-parse", "HEAD"])
    }

    /// Runs git in the repository.
    pub fn git(&self, args: &[&str]) -> String {
        git(self.path(), args)
    }
}

/// A free TCP port on 127.0.0.1 (bound then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

fn wait_for_port(port: u16, child: &mut Child, what: &str) {
    wait_for_address("127.0.0.1", port, child, what);
}

fn wait_for_address(address: &str, port: u16, child: &mut Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if TcpStream::connect((address, port)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited before listening: {status} (see its log in the test's temp dir)");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} did not listen on {address}:{port} within 20s");
}

/// True when the ssh/daemon tests may be skipped (`KOK_SKIP_SSH=1`); prints why.
pub fn skip_servers(what: &str) -> bool {
    if std::env::var("KOK_SKIP_SSH").as_deref() == Ok("1") {
        eprintln!("skipping: KOK_SKIP_SSH=1 is set, so the {what} test does not run");
        return true;
    }
    false
}

/// A `git daemon` serving every repository under `base` on 127.0.0.1; killed on drop.
pub struct GitDaemon {
    child: Child,
    /// The port.
    pub port: u16,
}

impl GitDaemon {
    /// Starts the daemon; panics with what to install when git-daemon is missing.
    pub fn start(base: &Path) -> GitDaemon {
        let exec_path = Command::new("git").arg("--exec-path").output().expect("git runs");
        let exec_path = PathBuf::from(String::from_utf8_lossy(&exec_path.stdout).trim());
        assert!(
            exec_path.join("git-daemon").exists(),
            "git daemon is not installed ({}/git-daemon missing): install git with its daemon \
             (Debian/Ubuntu: apt-get install git; some distributions ship it as git-daemon) \
             or set KOK_SKIP_SSH=1",
            exec_path.display()
        );
        let port = free_port();
        let mut child = Command::new("git")
            .args(["daemon", "--reuseaddr", "--export-all", "--listen=127.0.0.1"])
            .arg(format!("--port={port}"))
            .arg(format!("--base-path={}", base.display()))
            .arg(base)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("git daemon starts");
        wait_for_port(port, &mut child, "git daemon");
        GitDaemon { child, port }
    }

    /// `git://127.0.0.1:PORT/<name>`.
    pub fn url(&self, name: &str) -> String {
        format!("git://127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An `sshd` on 127.0.0.1 (or on other loopback addresses, one port for all) with throwaway host and
/// user keys; killed on drop.
pub struct Sshd {
    child: Child,
    dir: tempfile::TempDir,
    /// The port.
    pub port: u16,
}

fn keygen(path: &Path) {
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "kok-test", "-f"])
        .arg(path)
        .stdout(Stdio::null())
        .status()
        .expect("ssh-keygen runs (install openssh-client)");
    assert!(status.success(), "ssh-keygen failed");
}

impl Sshd {
    /// Starts sshd on 127.0.0.1 accepting `user_key.pub`; panics with what to install when sshd is missing.
    pub fn start() -> Sshd {
        Sshd::start_on(&["127.0.0.1"])
    }

    /// Starts sshd listening on each of `addresses` (loopback addresses such as 127.0.0.2, all on one
    /// port) accepting `user_key.pub`, for the login of the user the test runs as (root included).
    pub fn start_on(addresses: &[&str]) -> Sshd {
        assert!(
            addresses.iter().all(|a| a.starts_with("127.")),
            "the test sshd listens on loopback only, not on {addresses:?}"
        );
        let sshd = Path::new("/usr/sbin/sshd");
        assert!(
            sshd.exists(),
            "sshd is not installed (/usr/sbin/sshd missing): install openssh-server \
             (apt-get install openssh-server) or set KOK_SKIP_SSH=1"
        );
        let privsep = Command::new("getent")
            .args(["passwd", "sshd"])
            .output()
            .map(|o| o.status.success());
        assert!(
            privsep.unwrap_or(true),
            "sshd's privilege-separation user `sshd` does not exist: finish the openssh-server install \
             (dpkg --configure -a) or set KOK_SKIP_SSH=1"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        keygen(&d.join("host_key"));
        keygen(&d.join("user_key"));
        keygen(&d.join("other_key"));
        std::fs::copy(d.join("user_key.pub"), d.join("authorized_keys")).expect("authorized_keys");
        let _ = std::fs::create_dir_all("/run/sshd");
        let port = free_port();
        let listen: String = addresses
            .iter()
            .map(|address| format!("ListenAddress {address}\n"))
            .collect();
        let config = format!(
            "Port {port}\n{listen}HostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\n\
             PidFile {d}/sshd.pid\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nPubkeyAuthentication yes\nPermitRootLogin prohibit-password\n\
             LogLevel ERROR\n",
            d = d.display()
        );
        std::fs::write(d.join("sshd_config"), config).expect("sshd_config");
        let mut child = Command::new(sshd)
            .args(["-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("sshd.log")).expect("sshd.log"))
            .spawn()
            .expect("sshd starts");
        for address in addresses {
            wait_for_address(address, port, &mut child, "sshd");
        }
        let known_hosts = |key_file: &str| -> String {
            let public = std::fs::read_to_string(d.join(key_file)).expect("public key");
            let mut fields = public.split_whitespace();
            let (kind, key) = (fields.next().expect("type"), fields.next().expect("key"));
            addresses
                .iter()
                .map(|address| format!("[{address}]:{port} {kind} {key}\n"))
                .collect()
        };
        std::fs::write(d.join("known_hosts"), known_hosts("host_key.pub")).expect("known_hosts");
        std::fs::write(d.join("wrong_known_hosts"), known_hosts("other_key.pub")).expect("wrong known_hosts");
        std::fs::write(d.join("empty_known_hosts"), "").expect("empty known_hosts");
        Sshd { child, dir, port }
    }

    /// A file in the server's temp dir: `user_key`, `other_key`, `known_hosts`, `wrong_known_hosts`,
    /// `empty_known_hosts`.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The sessions this server holds open as `pid: command line`: one per connected client, an ssh
    /// master kept alive by `ControlPersist` included.
    pub fn sessions(&self) -> Vec<String> {
        self.session_pids()
            .into_iter()
            .map(|pid| {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                format!("{pid}: {}", cmdline.trim())
            })
            .collect()
    }

    /// The server's live child processes: its sessions.
    fn session_pids(&self) -> Vec<u32> {
        let listener = self.child.id();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| live_child_of(*pid) == Some(listener))
            .collect()
    }

    /// `ssh://<current user>@127.0.0.1:PORT<abs path>`.
    pub fn url(&self, repo: &Path) -> String {
        let out = Command::new("id").arg("-un").output().expect("id runs");
        let user = String::from_utf8_lossy(&out.stdout).trim().to_string();
        format!("ssh://{user}@127.0.0.1:{}{}", self.port, repo.display())
    }
}

/// The parent of process `pid`, from `/proc/<pid>/stat`; None once it is gone or a zombie.
fn live_child_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`: comm may hold spaces and parentheses, the last `)` ends it.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    if fields.next()? == "Z" {
        return None;
    }
    fields.next()?.parse().ok()
}

impl Drop for Sshd {
    fn drop(&mut self) {
        // Sessions outlive their listener (and keep the clients' ssh masters alive): end them first and
        // let the listener reap them.
        let sessions = self.session_pids();
        for pid in &sessions {
            if let Some(pid) = i32::try_from(*pid).ok().and_then(rustix::process::Pid::from_raw) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while !sessions.is_empty() && !self.session_pids().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
