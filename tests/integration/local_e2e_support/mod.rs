//! Fixtures of the local-mode end-to-end tests: a git work tree with a `local` cluster whose playbooks
//! leave marks in a temp directory, `kok run --local` as a child process, and bounded waits.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::git as git_cli;
use crate::common::kok as kok_process;
pub use crate::common::kubespray;
use crate::common::tools;
pub use git_cli::git;
#[allow(unused_imports)]
pub use kok_process::{wait_for, wait_within, LocalKok, WAIT};

use kok::api::ClusterOperation;
use kube::api::ListParams;
use kube::Api;

/// kok's namespace in local mode (the default).
pub const NS: &str = "kok-system";
/// The cluster every test operates on.
pub const CLUSTER: &str = "local";

/// The greeting vars.yml gives to the playbooks.
pub const GREETING: &str = "hello from the local e2e test";
/// The message the failing playbook fails with.
pub const FAILURE_MESSAGE: &str = "this playbook fails on purpose";

// Not every test that includes this module runs kubectl, or the project's ansible.
#[allow(unused_imports)]
pub use tools::{
    alertmanager_or_skip, ansible_or_skip, command, kubectl_or_skip, kubectl_table, prometheus_or_skip,
};

/// A playbook that writes `<marks>/<mark>.txt` (the mark is given with `-e mark=...`) holding the
/// greeting and the commit, and appends one line per run to `<marks>/<mark>.runs`.
const MARK_PLAYBOOK: &str = r#"- name: Leave a mark
  hosts: all
  become: false
  gather_facts: false
  tasks:
    - name: Count this run
      ansible.builtin.shell: echo run >> "{{ marks }}/{{ mark }}.runs"
    - name: Write the mark
      ansible.builtin.copy:
        dest: "{{ marks }}/{{ mark }}.txt"
        content: "{{ greeting }} at {{ lookup('env', 'KOK_COMMIT') }}\n"
        mode: "0644"
"#;

/// A playbook that fails with [`FAILURE_MESSAGE`].
const FAIL_PLAYBOOK: &str = r#"- name: Fail
  hosts: all
  become: false
  gather_facts: false
  tasks:
    - name: Fail on purpose
      ansible.builtin.fail:
        msg: "this playbook fails on purpose"
"#;

/// A playbook that counts its run in `<marks>/<mark>.runs`, then sleeps for a minute.
const SLEEP_PLAYBOOK: &str = r#"- name: Sleep
  hosts: all
  become: false
  gather_facts: false
  tasks:
    - name: Count this run
      ansible.builtin.shell: echo run >> "{{ marks }}/{{ mark }}.runs"
    - name: Sleep
      ansible.builtin.command: sleep 60
"#;

/// A playbook using kubespray's constructs: a `password` lookup under `inventory_dir/credentials` (the
/// certificate key, written to `<marks>/<mark>.txt`) and a kubeconfig left in `inventory_dir/artifacts`.
const CREDENTIALS_PLAYBOOK: &str = r#"- name: Credentials
  hosts: all
  become: false
  gather_facts: false
  tasks:
    - name: Count this run
      ansible.builtin.shell: echo run >> "{{ marks }}/{{ mark }}.runs"
    - name: The certificate key, as kubespray makes it
      ansible.builtin.copy:
        dest: "{{ marks }}/{{ mark }}.txt"
        content: "{{ lookup('password', inventory_dir + '/credentials/kubeadm_certificate_key.creds length=64 chars=hexdigits') }}"
        mode: "0600"
    - name: The new cluster's kubeconfig, as kubeconfig_localhost leaves it
      ansible.builtin.copy:
        dest: "{{ inventory_dir }}/artifacts/admin.conf"
        content: "kind: Config"
        mode: "0600"
"#;

/// A playbook that makes a new credential (`credentials/late.creds`) and then fails.
const LATE_CREDENTIAL_PLAYBOOK: &str = r#"- name: Late credential
  hosts: all
  become: false
  gather_facts: false
  tasks:
    - name: Fail after making a credential
      ansible.builtin.fail:
        msg: "failing after a {{ lookup('password', inventory_dir + '/credentials/late.creds length=16') | length }}-character credential"
"#;

/// A playbook that counts its run in `<marks>/<mark>.runs`, sleeps `nap` seconds (`-e nap=...`, default 8),
/// and then fails when the mark holds `fail`.
const NAP_PLAYBOOK: &str = r#"- name: Nap
  hosts: all
  become: false
  gather_facts: false
  tasks:
    - name: Count this run
      ansible.builtin.shell: echo run >> "{{ marks }}/{{ mark }}.runs"
    - name: Nap
      ansible.builtin.command: sleep {{ nap | default(8) }}
    - name: Fail when told to
      ansible.builtin.fail:
        msg: "{{ mark }} fails on purpose"
      when: "'fail' in mark"
"#;

/// A git work tree holding a `local` cluster (localhost without ssh) and three playbooks, with a
/// directory for the marks the playbooks leave and a state directory for kok, all in one temp dir.
pub struct LocalRepo {
    dir: tempfile::TempDir,
}

impl LocalRepo {
    /// The repository with its first commit: the cluster without operations and the playbooks.
    pub fn new() -> LocalRepo {
        let repo = LocalRepo {
            dir: tempfile::tempdir().expect("temp dir"),
        };
        for dir in [
            repo.path(),
            repo.marks(),
            repo.cluster_dir(),
            repo.path().join("playbooks"),
        ] {
            std::fs::create_dir_all(dir).expect("mkdir");
        }
        repo.write_cluster(CLUSTER);
        repo.write("playbooks/mark.yml", MARK_PLAYBOOK);
        repo.write("playbooks/fail.yml", FAIL_PLAYBOOK);
        repo.write("playbooks/sleep.yml", SLEEP_PLAYBOOK);
        repo.write("playbooks/credentials.yml", CREDENTIALS_PLAYBOOK);
        repo.write("playbooks/late.yml", LATE_CREDENTIAL_PLAYBOOK);
        repo.write("playbooks/nap.yml", NAP_PLAYBOOK);
        git(&repo.path(), &["init", "-q", "-b", "main"]);
        repo.commit("local cluster and playbooks");
        repo
    }

    /// The work tree kok reads (`--repo`).
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    /// Where the playbooks leave their marks.
    pub fn marks(&self) -> PathBuf {
        self.dir.path().join("marks")
    }

    /// kok's state directory (`--state-dir`).
    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// A scratch path inside the temp dir.
    pub fn scratch(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn cluster_dir(&self) -> PathBuf {
        self.path().join("clusters").join(CLUSTER)
    }

    /// Writes cluster `name` (localhost without ssh; the greeting and the marks directory in vars.yml),
    /// uncommitted.
    pub fn write_cluster(&self, name: &str) {
        std::fs::create_dir_all(self.path().join("clusters").join(name)).expect("mkdir");
        let hosts = "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n      \
                     ansible_python_interpreter: \"{{ ansible_playbook_python }}\"\n";
        let vars = format!("greeting: {GREETING}\nmarks: {}\n", self.marks().display());
        self.write(&format!("clusters/{name}/hosts.yml"), hosts);
        self.write(&format!("clusters/{name}/vars.yml"), &vars);
    }

    /// Writes operations.yml of cluster `name` with `entries` (`(id, playbook, mark)`), uncommitted.
    pub fn write_operations(&self, name: &str, entries: &[(&str, &str, &str)]) {
        let mut text = String::new();
        for (id, playbook, mark) in entries {
            text.push_str(&format!(
                "- id: {id}\n  action: playbooks/{playbook}\n  extraArgs: [\"-e\", \"mark={mark}\"]\n"
            ));
            // The admin.conf credentials.yml leaves names no cluster: there is nothing to verify.
            if *playbook == "credentials.yml" {
                text.push_str("  verify: none\n");
            }
        }
        self.write(&format!("clusters/{name}/operations.yml"), &text);
    }

    /// How many runs were counted in `<marks>/*.runs` altogether.
    pub fn all_runs(&self) -> usize {
        std::fs::read_dir(self.marks())
            .map(|dir| {
                dir.flatten()
                    .filter(|e| e.path().extension().is_some_and(|x| x == "runs"))
                    .map(|e| {
                        std::fs::read_to_string(e.path())
                            .map(|t| t.lines().count())
                            .unwrap_or(0)
                    })
                    .sum()
            })
            .unwrap_or(0)
    }

    /// Writes `content` at `relative` in the work tree, making its directory when missing.
    pub fn write(&self, relative: &str, content: &str) {
        let path = self.path().join(relative);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("make the file's directory");
        }
        std::fs::write(path, content).expect("write repository file");
    }

    /// Commits everything in the work tree; returns the commit sha.
    pub fn commit(&self, message: &str) -> String {
        git(&self.path(), &["add", "-A"]);
        git(&self.path(), &["commit", "-q", "-m", message]);
        git(&self.path(), &["rev-parse", "HEAD"])
    }

    /// Replaces operations.yml with `entries` (`(id, playbook, mark)`, the mark passed with
    /// `-e mark=<mark>`) and commits; returns the commit sha.
    pub fn commit_operations(&self, entries: &[(&str, &str, &str)]) -> String {
        self.write_operations(CLUSTER, entries);
        self.commit(&format!(
            "operations: {}",
            entries.last().map(|e| e.0).unwrap_or("none")
        ))
    }

    /// The content of `<marks>/<mark>.txt`, if written.
    pub fn mark(&self, mark: &str) -> Option<String> {
        std::fs::read_to_string(self.marks().join(format!("{mark}.txt"))).ok()
    }

    /// How many runs of the playbook leaving `mark` started.
    pub fn runs(&self, mark: &str) -> usize {
        std::fs::read_to_string(self.marks().join(format!("{mark}.runs")))
            .map(|text| text.lines().count())
            .unwrap_or(0)
    }

    /// The `refs/notes/kok` note of `sha` as `git log --notes=kok` shows it in the work tree.
    pub fn note(&self, sha: &str) -> String {
        git(&self.path(), &["log", "--notes=kok", "--format=%N", "-1", sha])
    }

    /// `kok history <cluster> --repo <work tree> <extra>` with its cache in the temp dir: its stdout,
    /// panicking when it fails.
    pub fn history(&self, cluster: &str, extra: &[&str]) -> String {
        let path = self.path();
        let cache = self.scratch("history-cache");
        let mut args = vec![
            "history".to_string(),
            cluster.to_string(),
            "--repo".to_string(),
            path.to_string_lossy().into_owned(),
            "--cache-dir".to_string(),
            cache.to_string_lossy().into_owned(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, stdout, stderr) = self.kok(&args);
        assert!(ok, "kok history {cluster} failed: {stderr}");
        stdout
    }

    /// Runs the kok binary with `args`; returns (success, stdout, stderr).
    pub fn kok(&self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_kok"))
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .expect("kok runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl LocalKok {
    /// Starts `kok run --local --repo . --state-dir <state> --interval 1s` in the work tree, as the
    /// README does, output appended to `<temp>/kok.log`.
    pub fn start(repo: &LocalRepo) -> LocalKok {
        LocalKok::start_with(repo, &[])
    }

    /// [`LocalKok::start`] with more arguments for `kok run`.
    pub fn start_with(repo: &LocalRepo, args: &[&str]) -> LocalKok {
        LocalKok::start_with_path(repo, args, tools::search_path())
    }

    /// [`LocalKok::start_with`] with `path` as the PATH of kok and of the ansible runs it starts.
    pub fn start_with_path(repo: &LocalRepo, args: &[&str], path: OsString) -> LocalKok {
        LocalKok::spawn_with(
            &repo.path(),
            &repo.state_dir(),
            &repo.scratch("kok.log"),
            path,
            args,
        )
    }

    /// A client of the embedded API server, once it answers.
    pub async fn client(&mut self, repo: &LocalRepo) -> kube::Client {
        self.client_of(&repo.state_dir()).await
    }
}

/// The ClusterOperation of operation `id` of the local cluster, if it exists.
pub async fn operation(client: &kube::Client, id: &str) -> Option<ClusterOperation> {
    operations(client)
        .await
        .into_iter()
        .find(|op| op.spec.cluster == CLUSTER && op.spec.id == id)
}

/// Every ClusterOperation (none when the API server does not answer).
pub async fn operations(client: &kube::Client) -> Vec<ClusterOperation> {
    let ops: Api<ClusterOperation> = Api::namespaced(client.clone(), NS);
    ops.list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

/// Waits until operation `id` reaches a terminal phase; returns it.
pub async fn finished(kok: &mut LocalKok, client: &kube::Client, id: &str) -> ClusterOperation {
    finished_within(kok, client, id, WAIT).await
}

/// [`finished`], waiting up to `limit`.
pub async fn finished_within(
    kok: &mut LocalKok,
    client: &kube::Client,
    id: &str,
    limit: Duration,
) -> ClusterOperation {
    wait_within(limit, &format!("operation {id} to finish"), kok, || async {
        operation(client, id)
            .await
            .filter(|op| op.status.as_ref().is_some_and(|s| s.phase.is_terminal()))
    })
    .await
}

/// `kok logs <cluster>/<id> --state-dir <state>`: the newest run's output, panicking when it fails.
pub fn run_log(repo: &LocalRepo, id: &str) -> String {
    let state = repo.state_dir();
    let target = format!("{CLUSTER}/{id}");
    let (ok, stdout, stderr) = repo.kok(&["logs", &target, "--state-dir", &state.to_string_lossy()]);
    assert!(ok, "kok logs {target} failed: {stderr}");
    stdout
}

/// Waits until the note of `sha` in the work tree has a line starting with `prefix`; returns the note.
pub async fn note_line(kok: &mut LocalKok, repo: &LocalRepo, sha: &str, prefix: &str) -> String {
    wait_for(&format!("a note line {prefix:?} on {sha}"), kok, || async {
        let note = repo.note(sha);
        note.lines().any(|l| l.starts_with(prefix)).then_some(note)
    })
    .await
}
