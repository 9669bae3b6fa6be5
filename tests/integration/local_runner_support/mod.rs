//! Fixtures shared by the local runner tests: an API server with kok's inputs, a runner task, Job helpers.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, EnvVar, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use kok::api::{
    ActionType, ClusterOperation, ClusterOperationSpec, ConfigMapRef, OperationSource, SecretRef,
    DEFAULT_NAMESPACE,
};
use kok::local::runner::{RunnerConfig, Workdir};
use kube::api::{Api, PostParams};
use kube::ResourceExt;
use testkit::ApiServer;
use tokio::sync::oneshot;

pub use crate::common::tools;

/// hosts.yml of the test cluster.
pub const HOSTS_YML: &str = "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n";
/// vars.yml of the test cluster.
pub const VARS_YML: &str = "greeting: hello from vars\n";
/// Body of the fake ssh key; must never appear in a log.
pub const KEY_BODY: &str = "c2VjcmV0LWtleS1tYXRlcmlhbC1uZXZlci1sb2dnZWQ";
/// Commit every test operation claims to come from.
pub const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
/// Longest wait for a Job to finish; only a safety net, nothing is timed.
const PATIENCE: Duration = Duration::from_secs(90);

/// An API server holding the cluster's ConfigMaps and Secret, and a state directory.
pub struct Env {
    pub server: ApiServer,
    pub jobs: Api<Job>,
    pub state: tempfile::TempDir,
}

/// A runner task; [`Runner::stop`] ends it the way kok's shutdown does.
pub struct Runner {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), kok::local::runner::Error>>,
}

impl Runner {
    /// Ends the runner abruptly, as a crash of kok would: nothing of it runs any more, its Jobs' processes go on.
    pub async fn crash(self) {
        self.task.abort();
        let _ = self.task.await;
    }

    /// Stops the runner and waits until it has returned.
    pub async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        self.task.await??;
        Ok(())
    }
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(DEFAULT_NAMESPACE.to_string()),
        ..ObjectMeta::default()
    }
}

impl Env {
    /// Starts the API server and creates the inputs every test operation names.
    pub async fn start() -> anyhow::Result<Env> {
        let server = ApiServer::start().await?;
        let client = server.client();
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), DEFAULT_NAMESPACE);
        for (name, key, value) in [
            ("a-hosts-1111", "hosts.yml", HOSTS_YML),
            ("a-vars-2222", "vars.yml", VARS_YML),
        ] {
            let cm = ConfigMap {
                metadata: meta(name),
                data: Some([(key.to_string(), value.to_string())].into_iter().collect()),
                immutable: Some(true),
                ..ConfigMap::default()
            };
            cms.create(&PostParams::default(), &cm)
                .await
                .with_context(|| format!("creating {name}"))?;
        }
        let secrets: Api<Secret> = Api::namespaced(client.clone(), DEFAULT_NAMESPACE);
        let key =
            format!("-----BEGIN OPENSSH PRIVATE KEY-----\n{KEY_BODY}\n-----END OPENSSH PRIVATE KEY-----\n");
        let secret = Secret {
            metadata: meta("ssh"),
            type_: Some("kubernetes.io/ssh-auth".to_string()),
            data: Some(
                [("ssh-privatekey".to_string(), ByteString(key.into_bytes()))]
                    .into_iter()
                    .collect(),
            ),
            ..Secret::default()
        };
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .context("creating the ssh Secret")?;
        Ok(Env {
            jobs: Api::namespaced(client, DEFAULT_NAMESPACE),
            server,
            state: tempfile::tempdir()?,
        })
    }

    /// Creates ConfigMap `name` holding `key: value`.
    pub async fn config_map(&self, name: &str, key: &str, value: &str) -> anyhow::Result<()> {
        let cms: Api<ConfigMap> = Api::namespaced(self.server.client(), DEFAULT_NAMESPACE);
        let cm = ConfigMap {
            metadata: meta(name),
            data: Some([(key.to_string(), value.to_string())].into_iter().collect()),
            ..ConfigMap::default()
        };
        cms.create(&PostParams::default(), &cm)
            .await
            .with_context(|| format!("creating {name}"))?;
        Ok(())
    }

    /// Replaces the private key of the `ssh` Secret every test operation names.
    pub async fn set_ssh_key(&self, key: &str) -> anyhow::Result<()> {
        let secrets: Api<Secret> = Api::namespaced(self.server.client(), DEFAULT_NAMESPACE);
        let patch = serde_json::json!({"data": {"ssh-privatekey": ByteString(key.as_bytes().to_vec())}});
        secrets
            .patch("ssh", &Default::default(), &kube::api::Patch::Merge(&patch))
            .await
            .context("replacing the ssh key")?;
        Ok(())
    }

    /// Starts a runner on this server.
    pub fn runner(&self, workdir: Workdir) -> Runner {
        self.runner_with_images(workdir, BTreeMap::new())
    }

    /// Starts a runner on this server that runs the images `image_workdirs` maps in their directories.
    pub fn runner_with_images(&self, workdir: Workdir, image_workdirs: BTreeMap<String, PathBuf>) -> Runner {
        let cfg = RunnerConfig {
            namespace: DEFAULT_NAMESPACE.to_string(),
            state_dir: self.state.path().to_path_buf(),
            workdir,
            max_parallel: 2,
            api_url: Some(self.server.url()),
            image_workdirs,
        };
        let (stop, rx) = oneshot::channel::<()>();
        let client = self.server.client();
        let task = tokio::spawn(async move {
            kok::local::runner::run(client, cfg, async move {
                let _ = rx.await;
            })
            .await
        });
        Runner { stop, task }
    }

    /// Creates the Job the controller builds for `op`, its PATH set to the tests' (see
    /// [`tools::search_path`]); returns its name.
    pub async fn create_job(&self, op: &ClusterOperation) -> anyhow::Result<String> {
        let mut job = kok::controller::job::build_job(op, &Default::default());
        let path = tools::search_path().into_string().expect("PATH is UTF-8");
        for container in job
            .spec
            .iter_mut()
            .flat_map(|s| s.template.spec.iter_mut())
            .flat_map(|p| p.containers.iter_mut())
        {
            container.env.get_or_insert_with(Vec::new).push(EnvVar {
                name: "PATH".into(),
                value: Some(path.clone()),
                ..EnvVar::default()
            });
        }
        self.create(job).await
    }

    /// Creates `job`; returns its name.
    pub async fn create(&self, job: Job) -> anyhow::Result<String> {
        let created = self
            .jobs
            .create(&PostParams::default(), &job)
            .await
            .context("creating the Job")?;
        Ok(created.name_any())
    }

    /// Waits until the Job has a Complete or Failed condition.
    pub async fn wait_finished(&self, name: &str) -> anyhow::Result<Job> {
        let started = tokio::time::Instant::now();
        loop {
            let job = self.jobs.get(name).await?;
            if kok::local::status::is_finished(&job) {
                return Ok(job);
            }
            anyhow::ensure!(
                started.elapsed() < PATIENCE,
                "Job {name} did not finish; status: {:?}",
                job.status
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Deletes Job `job` of `op` and waits until the runner logs the deletion.
    pub async fn delete_job(&self, job: &str, op: &ClusterOperation) -> anyhow::Result<()> {
        self.jobs.delete(job, &Default::default()).await?;
        let log_path = self.log_path(op);
        wait_until("the runner to log the deletion", || {
            std::fs::read_to_string(&log_path).is_ok_and(|log| log.contains("result=Deleted"))
        })
        .await
    }

    /// Path of the log of `op`.
    pub fn log_path(&self, op: &ClusterOperation) -> PathBuf {
        kok::local::logs::log_path(self.state.path(), &op.name_any())
    }

    /// The log of `op`.
    pub fn log(&self, op: &ClusterOperation) -> anyhow::Result<String> {
        let path = self.log_path(op);
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
    }
}

/// A ClusterOperation of cluster `a` as the controller sees it, with the fixtures' inputs.
pub fn operation(id: &str, action: &str, action_type: ActionType) -> ClusterOperation {
    let mut op = ClusterOperation::new(
        &format!("a-{id}-0123abcd"),
        ClusterOperationSpec {
            cluster: "a".into(),
            id: id.into(),
            digest: "0123abcd".repeat(8),
            action: action.into(),
            action_type,
            image: kok::api::DEFAULT_IMAGE.into(),
            hosts_conf_ref: ConfigMapRef {
                name: "a-hosts-1111".into(),
            },
            vars_conf_ref: Some(ConfigMapRef {
                name: "a-vars-2222".into(),
            }),
            ssh_auth_ref: Some(SecretRef { name: "ssh".into() }),
            source: OperationSource {
                commit: COMMIT.into(),
                revision: format!("main@sha1:{COMMIT}"),
                path: "clusters/a".into(),
            },
            queue_position: "0".into(),
            ..Default::default()
        },
    );
    op.metadata.namespace = Some(DEFAULT_NAMESPACE.into());
    op
}

fn container(job: &mut Job) -> &mut k8s_openapi::api::core::v1::Container {
    let spec = job.spec.as_mut().and_then(|s| s.template.spec.as_mut());
    &mut spec.expect("the Job builder sets a pod spec").containers[0]
}

/// Replaces the container's command.
pub fn set_command(job: &mut Job, argv: &[&str]) {
    let c = container(job);
    c.command = Some(argv.iter().map(|s| s.to_string()).collect());
    c.args = None;
}

/// Adds a plain env var to the container.
pub fn add_env(job: &mut Job, name: &str, value: &str) {
    container(job).env.get_or_insert_with(Vec::new).push(EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..EnvVar::default()
    });
}

fn find_condition(job: &Job, type_: &str) -> Option<k8s_openapi::api::batch::v1::JobCondition> {
    let conds = job.status.as_ref()?.conditions.as_ref()?;
    conds
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .cloned()
}

/// Reason of the Job's true condition of this type.
pub fn condition(job: &Job, type_: &str) -> Option<String> {
    find_condition(job, type_).and_then(|c| c.reason)
}

/// Message of the Job's true condition of this type.
/// Asserts that `job` completed, showing `context` (the run's log) when it did not.
pub fn assert_completed(job: &Job, context: &str) {
    assert_eq!(
        condition(job, "Complete").as_deref(),
        Some(kok::local::status::REASON_COMPLETIONS_REACHED),
        "{context}"
    );
}

pub fn message(job: &Job, type_: &str) -> Option<String> {
    find_condition(job, type_).and_then(|c| c.message)
}

/// True while the process exists and is not a zombie.
pub fn alive(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// The directory of the run of Job `name` (see `kok::local::rundir`).
pub async fn run_dir(env: &Env, name: &str) -> anyhow::Result<PathBuf> {
    let job = env.jobs.get(name).await?;
    Ok(kok::local::rundir::path(
        env.state.path(),
        &job.metadata.uid.unwrap_or_default(),
    ))
}

/// The pids of the processes whose command line holds `text` (an ssh master shows its control path there).
pub fn processes_mentioning(text: &str) -> Vec<u32> {
    let Ok(read) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    read.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| alive(&pid.to_string()))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(text))
        })
        .collect()
}

/// Waits until `ready` holds.
pub async fn wait_until(what: &str, ready: impl Fn() -> bool) -> anyhow::Result<()> {
    let started = tokio::time::Instant::now();
    while !ready() {
        anyhow::ensure!(started.elapsed() < PATIENCE, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Commits `files` (path, content) on top of HEAD in `repo`; returns the commit id.
pub fn commit(repo: &git2::Repository, files: &[(&str, &str)]) -> anyhow::Result<git2::Oid> {
    let mut index = repo.index()?;
    if let Ok(head) = repo.head().and_then(|h| h.peel_to_tree()) {
        index.read_tree(&head)?;
    }
    for (path, content) in files {
        let blob = repo.blob(content.as_bytes())?;
        index.add(&git2::IndexEntry {
            ctime: git2::IndexTime::new(0, 0),
            mtime: git2::IndexTime::new(0, 0),
            dev: 0,
            ino: 0,
            mode: 0o100644,
            uid: 0,
            gid: 0,
            file_size: content.len() as u32,
            id: blob,
            flags: 0,
            flags_extended: 0,
            path: path.as_bytes().to_vec(),
        })?;
    }
    let tree = repo.find_tree(index.write_tree_to(repo)?)?;
    let sig = git2::Signature::now("kok tests", "tests@kok.invalid")?;
    let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
    let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
    Ok(repo.commit(Some("HEAD"), &sig, &sig, "test commit", &tree, &parents)?)
}
