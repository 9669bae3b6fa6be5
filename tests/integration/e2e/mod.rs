//! End-to-end fixtures: a bare git remote fed from a work clone, `kok run` as a separate process
//! against an in-process testkit API server (killed on drop), and bounded waits.

use std::fs::File;
use std::future::Future;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::common::git as git_cli;
pub use git_cli::{git, git_output};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kok::api::{Cluster, ClusterOperation, Phase};
use kube::api::ListParams;
use kube::Api;

/// kok's namespace in every test.
pub const NS: &str = "kok-system";
/// The forge token handed to kok through `KOK_STATUS_TOKEN`.
pub const TOKEN: &str = "ghp_e2eSecretToken0123456789";
/// How long a wait may last before the test fails.
pub const WAIT: Duration = Duration::from_secs(20);

/// hosts.yml with `node1`..`node3` and, when `node7` is set, `node7`: node1 is the control plane and the one
/// etcd member (a valid kubespray inventory, so pre-flight lets its operations run), every node a worker.
pub fn hosts(node7: bool) -> String {
    let mut nodes = vec![
        ("node1", "10.0.0.1"),
        ("node2", "10.0.0.2"),
        ("node3", "10.0.0.3"),
    ];
    if node7 {
        nodes.push(("node7", "10.0.0.7"));
    }
    let mut text = String::from("all:\n  hosts:\n");
    for (name, ip) in &nodes {
        text.push_str(&format!("    {name}:\n      ansible_host: {ip}\n"));
    }
    text.push_str("  children:\n    kube_control_plane:\n      hosts:\n        node1:\n");
    text.push_str("    etcd:\n      hosts:\n        node1:\n");
    text.push_str("    kube_node:\n      hosts:\n");
    for (name, _) in &nodes {
        text.push_str(&format!("        {name}:\n"));
    }
    text
}

/// A bare repository (the remote kok polls and pushes notes to) and a work clone commits are made in.
pub struct Remote {
    dir: tempfile::TempDir,
}

impl Remote {
    /// An empty bare remote on branch `main` and its work clone.
    pub fn new() -> Remote {
        let dir = tempfile::tempdir().expect("temp dir");
        let remote = Remote { dir };
        std::fs::create_dir_all(remote.bare()).expect("mkdir bare");
        git(&remote.bare(), &["init", "-q", "--bare", "-b", "main"]);
        std::fs::create_dir_all(remote.work()).expect("mkdir work");
        git(&remote.work(), &["init", "-q", "-b", "main"]);
        git(&remote.work(), &["config", "commit.gpgsign", "false"]);
        let bare = remote.bare().display().to_string();
        git(&remote.work(), &["remote", "add", "origin", &bare]);
        remote
    }

    /// The bare repository kok is pointed at (`--repo`).
    pub fn bare(&self) -> PathBuf {
        self.dir.path().join("remote.git")
    }

    /// The work clone.
    pub fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// A scratch directory for this test (caches, logs).
    pub fn scratch(&self, name: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::create_dir_all(&path).expect("mkdir scratch");
        path
    }

    /// Writes `content` at `rel` in the work clone.
    pub fn write(&self, rel: &str, content: &str) -> &Self {
        let path = self.work().join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, content).expect("write");
        self
    }

    /// A valid cluster directory with hosts (node1..node3) and vars.
    pub fn cluster(&self, name: &str) -> &Self {
        self.write(&format!("clusters/{name}/hosts.yml"), &hosts(false));
        self.write(
            &format!("clusters/{name}/vars.yml"),
            &format!("cluster_name: {name}\n"),
        )
    }

    /// Commits everything and pushes `main` to the bare remote; returns the commit's sha.
    pub fn push(&self, message: &str) -> String {
        self.push_to("main", message)
    }

    /// Commits everything and pushes it to the remote's `branch`; returns the commit's sha.
    pub fn push_to(&self, branch: &str, message: &str) -> String {
        let sha = self.commit(message);
        self.push_head(branch);
        sha
    }

    /// Commits everything in the work clone, without pushing; returns the commit's sha.
    pub fn commit(&self, message: &str) -> String {
        git(&self.work(), &["add", "-A"]);
        git(&self.work(), &["commit", "-q", "--allow-empty", "-m", message]);
        git(&self.work(), &["rev-parse", "HEAD"])
    }

    /// Pushes the work clone's `HEAD` to the remote's `branch`.
    pub fn push_head(&self, branch: &str) {
        git(
            &self.work(),
            &["push", "-q", "origin", &format!("HEAD:refs/heads/{branch}")],
        );
    }

    /// The `refs/notes/kok` note of `sha` in the bare remote ("" when there is none).
    pub fn note(&self, sha: &str) -> String {
        let out = git_output(&self.bare(), &["notes", "--ref=kok", "show", sha]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// `kok run` as a child process; killed (SIGKILL) when dropped, even when the test fails.
pub struct Kok {
    child: Child,
    /// Port of kok's HTTP listener on 127.0.0.1.
    pub port: u16,
    log: PathBuf,
}

/// How to start kok.
pub struct KokOptions {
    /// kubeconfig of the meta-cluster.
    pub kubeconfig: PathBuf,
    /// `--repo`.
    pub repo: PathBuf,
    /// `--cache-dir`.
    pub cache: PathBuf,
    /// Where stdout and stderr go (appended to, so a restart keeps the earlier log).
    pub log: PathBuf,
    /// More arguments (`--status ...`).
    pub args: Vec<String>,
    /// Environment variables set on top of the defaults (`KOK_LOG`, ...).
    pub env: Vec<(String, String)>,
}

/// A free TCP port on 127.0.0.1 (bound then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// The `--status` arguments for both notes and the recording GitHub server at `forge_url`.
pub fn github_args(forge_url: &str) -> Vec<String> {
    [
        "--status",
        "notes,github",
        "--status-repo",
        "acme/infra",
        "--status-base-url",
        forge_url,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

impl Kok {
    /// Starts `kok run` on `remote`'s bare repository with the cache and log in its scratch space
    /// (so a second start resumes from the same cache) and `args` added.
    pub fn run(api: &testkit::ApiServer, remote: &Remote, args: &[String]) -> Kok {
        Kok::start(&KokOptions {
            kubeconfig: api.kubeconfig_path().to_path_buf(),
            repo: remote.bare(),
            cache: remote.scratch("cache"),
            log: remote.scratch("logs").join("kok.log"),
            args: args.to_vec(),
            env: Vec::new(),
        })
    }

    /// Starts `kok run` polling every 500 ms, without leader election, the token in `KOK_STATUS_TOKEN`.
    pub fn start(opts: &KokOptions) -> Kok {
        let port = free_port();
        let log = File::options()
            .create(true)
            .append(true)
            .open(&opts.log)
            .expect("open kok log");
        let child = Command::new(env!("CARGO_BIN_EXE_kok"))
            .arg("run")
            .arg("--repo")
            .arg(&opts.repo)
            .arg("--cache-dir")
            .arg(&opts.cache)
            .args(
                (!opts.args.iter().any(|a| a == "--namespace"))
                    .then_some(["--namespace", NS])
                    .into_iter()
                    .flatten(),
            )
            .args(["--interval", "500ms", "--leader-elect", "false"])
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .args(&opts.args)
            .env("KUBECONFIG", &opts.kubeconfig)
            .env("KOK_STATUS_TOKEN", TOKEN)
            .env("KOK_LOG", "info,kok=debug")
            .env_remove("KOK_STATUS")
            .env_remove("KOK_STATUS_TOKEN_FILE")
            .envs(opts.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log"))
            .stderr(log)
            .spawn()
            .expect("kok starts");
        Kok {
            child,
            port,
            log: opts.log.clone(),
        }
    }

    /// Everything kok wrote so far (stdout and stderr).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills kok with SIGKILL and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "sending SIGTERM to kok failed");
    }

    /// Sends SIGTERM and waits up to [`WAIT`] for kok to exit; panics with its log when it does not,
    /// or exits with a failure.
    pub async fn stop(&mut self) {
        self.terminate();
        let deadline = Instant::now() + WAIT;
        let status = loop {
            if let Some(status) = self.try_wait() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "kok still runs {WAIT:?} after SIGTERM; its log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(
            status.success(),
            "kok exited with {status}; its log:\n{}",
            self.log()
        );
    }

    /// The exit status, if kok has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }

    /// Panics with kok's log when it has exited.
    pub fn assert_running(&mut self) {
        if let Some(status) = self.try_wait() {
            panic!("kok exited early with {status}; its log:\n{}", self.log());
        }
    }
}

impl Drop for Kok {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Polls `check` every 100 ms for up to [`WAIT`]; panics naming `what` (and kok's log) when it never
/// yields a value.
pub async fn wait_for<T, F, Fut>(what: &str, kok: Option<&Kok>, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if Instant::now() > deadline {
            let log = kok.map(Kok::log).unwrap_or_default();
            panic!("timed out after {WAIT:?} waiting for {what}; kok's log:\n{log}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A testkit API server with kok's CRDs.
pub async fn meta_cluster() -> testkit::ApiServer {
    let api = testkit::ApiServer::start().await.expect("testkit starts");
    api.install_crds(&kok::api::crds()).await.expect("CRDs install");
    api
}

/// Typed access to kok's objects on the testkit server.
pub struct Objects {
    client: kube::Client,
}

impl Objects {
    /// Objects on `api`.
    pub fn new(api: &testkit::ApiServer) -> Objects {
        Objects { client: api.client() }
    }

    /// Every ClusterOperation.
    pub async fn operations(&self) -> Vec<ClusterOperation> {
        let api: Api<ClusterOperation> = Api::namespaced(self.client.clone(), NS);
        api.list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    /// The ClusterOperation of `cluster` with operation id `id`, if any.
    pub async fn operation(&self, cluster: &str, id: &str) -> Option<ClusterOperation> {
        self.operations()
            .await
            .into_iter()
            .find(|o| o.spec.cluster == cluster && o.spec.id == id)
    }

    /// The operation's phase (Pending when it has no status).
    pub async fn phase(&self, cluster: &str, id: &str) -> Option<Phase> {
        self.operation(cluster, id)
            .await
            .map(|o| o.status.map(|s| s.phase).unwrap_or_default())
    }

    /// Every Job.
    pub async fn jobs(&self) -> Vec<Job> {
        let api: Api<Job> = Api::namespaced(self.client.clone(), NS);
        api.list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    /// The Job of the operation `cluster`/`id`, once the operation records it and it exists.
    pub async fn job_of(&self, cluster: &str, id: &str) -> Option<Job> {
        let op = self.operation(cluster, id).await?;
        let name = op.status?.job_ref?;
        let api: Api<Job> = Api::namespaced(self.client.clone(), NS);
        api.get_opt(&name).await.ok().flatten()
    }

    /// A Cluster.
    pub async fn cluster(&self, name: &str) -> Option<Cluster> {
        let api: Api<Cluster> = Api::namespaced(self.client.clone(), NS);
        api.get_opt(name).await.ok().flatten()
    }

    /// The `hosts.yml` key of a ConfigMap.
    pub async fn hosts_of(&self, config_map: &str) -> Option<String> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), NS);
        let cm = api.get_opt(config_map).await.ok().flatten()?;
        cm.data?.get(kok::api::HOSTS_KEY).cloned()
    }
}

/// The name of a Job.
pub fn job_name(job: &Job) -> String {
    job.metadata.name.clone().unwrap_or_default()
}

/// One status the recording forge received: (sha, context, state, description).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Posted {
    /// The commit in the URL.
    pub sha: String,
    /// `context` of the body.
    pub context: String,
    /// `state` of the body.
    pub state: String,
    /// `description` of the body.
    pub description: String,
    /// The Authorization header.
    pub authorization: String,
}

/// The commit statuses the recording forge received, in order (requests that are not GitHub status
/// posts are skipped).
pub fn posted(requests: &[super::forge::Recorded]) -> Vec<Posted> {
    requests
        .iter()
        .filter_map(|r| {
            let sha = r.path.strip_prefix("/repos/acme/infra/statuses/")?.to_string();
            let body: serde_json::Value = serde_json::from_slice(&r.body).ok()?;
            let field = |name: &str| body[name].as_str().unwrap_or_default().to_string();
            Some(Posted {
                sha,
                context: field("context"),
                state: field("state"),
                description: field("description"),
                authorization: r.header("authorization"),
            })
        })
        .collect()
}

/// The statuses posted for one context on one commit.
pub fn posted_for(requests: &[super::forge::Recorded], sha: &str, context: &str) -> Vec<Posted> {
    posted(requests)
        .into_iter()
        .filter(|p| p.sha == sha && p.context == context)
        .collect()
}

/// Asserts the statuses of one context: pending ones first, then exactly one final `last` state, and
/// no status sent twice.
pub fn assert_pending_then(statuses: &[Posted], last: &str) {
    let states: Vec<&str> = statuses.iter().map(|p| p.state.as_str()).collect();
    assert!(
        states.len() >= 2 && states[..states.len() - 1].iter().all(|s| *s == "pending"),
        "expected pending…, {last}; got {statuses:#?}"
    );
    assert_eq!(states.last(), Some(&last), "{statuses:#?}");
    for (i, a) in statuses.iter().enumerate() {
        for b in &statuses[i + 1..] {
            assert!(
                (a.state.as_str(), a.description.as_str()) != (b.state.as_str(), b.description.as_str()),
                "the same status was delivered twice: {a:?}"
            );
        }
    }
}
