//! Shared fixtures of the controller and apply tests: cluster directories, a testkit server, the
//! controller running in-process, and a bounded polling helper.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, ListParams, PostParams};
use kube::Client;

use kok::api::{ClusterOperation, Phase};
use kok::controller::{run, ControllerConfig};
use kok::layout::{ClusterDir, Inventory, Operation, Settings};
use kok::materialize::{render_cluster, Attribution, DesiredCluster, RenderContext};

/// Namespace of every test object.
pub const NS: &str = "kok-system";

/// One operations.yml entry: id, action and extra args.
pub fn entry(id: &str, action: &str, extra: &[&str]) -> Operation {
    let mut op = Operation::playbook(id, action, 0);
    if !extra.is_empty() {
        op.entry["extraArgs"] = serde_json::json!(extra);
        op.extra_args = extra.iter().map(|s| s.to_string()).collect();
    }
    op.line = 1;
    op
}

/// A valid cluster directory with the given hosts.yml text, operations and ssh Secret name.
pub fn cluster_dir(name: &str, hosts: &str, ops: Vec<Operation>, secret: Option<&str>) -> ClusterDir {
    let operations = ops.into_iter().enumerate().map(|(i, mut o)| {
        o.index = i;
        o
    });
    ClusterDir {
        name: name.into(),
        path: format!("clusters/{name}"),
        inventory_dir: kok::layout::InventoryDir {
            inventory_file: "hosts.yml".into(),
            hosts_yml: hosts.into(),
            vars_yml: Some("kube_version: v1.33.0\n".into()),
            vars_files: vec![],
        },
        inventory: Inventory::default(),
        operations: operations.collect(),
        settings: Settings {
            ssh_auth_secret: secret.map(Into::into),
            ..Settings::default()
        },
        kubespray: None,
        repository_files: Default::default(),
    }
}

/// Renders `dir` at commit number `n` (a fake 40-hex sha), attributing its operations to `attribution`
/// (`(id, commit number)`), queue base fixed-width so later commits sort after earlier ones.
pub fn render(dir: &ClusterDir, n: u32, attribution: &[(&str, u32)]) -> DesiredCluster {
    let mut ctx = RenderContext::new(NS, "main", sha(n));
    ctx.queue_base = format!("{n:08}");
    for (id, c) in attribution {
        ctx.attribute(
            &dir.name,
            id,
            Attribution {
                commit: sha(*c),
                commit_index: 0,
            },
        );
    }
    render_cluster(dir, &ctx)
}

/// A fake commit sha for commit number `n`.
pub fn sha(n: u32) -> String {
    format!("{n:040x}")
}

/// A testkit server with kok's CRDs installed.
pub async fn server() -> testkit::ApiServer {
    let server = testkit::ApiServer::start().await.expect("testkit starts");
    server
        .install_crds(&kok::api::crds())
        .await
        .expect("CRDs install");
    server
}

/// Creates an ssh-auth Secret named `name`.
pub async fn create_secret(client: &Client, name: &str) {
    let api: Api<Secret> = Api::namespaced(client.clone(), NS);
    let mut s = Secret {
        type_: Some("kubernetes.io/ssh-auth".into()),
        data: Some(BTreeMap::from([(
            "ssh-privatekey".to_string(),
            ByteString(b"not-a-real-key".to_vec()),
        )])),
        ..Secret::default()
    };
    s.metadata.name = Some(name.into());
    api.create(&PostParams::default(), &s)
        .await
        .expect("secret created");
}

/// The controller running in-process; dropping the handle does not stop it, [`Running::stop`] does.
pub struct Running {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops the controller and waits until its loops have ended.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), &mut self.task).await;
        self.task.abort();
    }

    /// Kills the controller at once, as a crash would.
    pub fn kill(self) {
        self.task.abort();
    }
}

/// Controller settings for tests.
pub fn config(max_concurrent_jobs: usize) -> ControllerConfig {
    let mut c = ControllerConfig::new(NS);
    c.max_concurrent_jobs = max_concurrent_jobs;
    c.queue_resync = Duration::from_secs(5);
    c
}

/// Starts the controller in-process.
pub fn start(client: &Client, config: ControllerConfig) -> Running {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let client = client.clone();
    let feeds = kok::controller::live::caches(&config.namespace);
    let task = tokio::spawn(async move {
        run(client, config, feeds, async move {
            let _ = rx.await;
        })
        .await
    });
    Running { stop: Some(tx), task }
}

/// Polls `check` every 50 ms for up to 10 s; panics naming `what` when it never holds.
pub async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after 10 s waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The operation named `name`, if it exists.
/// The commit status `op` should show now, as the reporter computes it (no `--status-url`).
pub fn desired(op: &ClusterOperation) -> kok::api::CommitStatus {
    kok::report::status::desired_status(op, None, NS).expect("a commit status is desired")
}

pub async fn op(client: &Client, name: &str) -> Option<ClusterOperation> {
    Api::<ClusterOperation>::namespaced(client.clone(), NS)
        .get_opt(name)
        .await
        .ok()
        .flatten()
}

/// The phase of operation `name` (Pending without status).
pub async fn phase(client: &Client, name: &str) -> Option<Phase> {
    op(client, name)
        .await
        .map(|o| o.status.map(|s| s.phase).unwrap_or_default())
}

/// Waits until operation `name` is in `want`, and returns it.
pub async fn wait_phase(client: &Client, name: &str, want: Phase) -> ClusterOperation {
    wait_for(&format!("{name} to be {want}"), || async {
        op(client, name)
            .await
            .filter(|o| o.status.as_ref().map(|s| s.phase) == Some(want))
    })
    .await
}

/// Names of the Jobs in the namespace, sorted.
pub async fn jobs(client: &Client) -> Vec<String> {
    let api: Api<Job> = Api::namespaced(client.clone(), NS);
    let mut names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .map(|l| l.items.into_iter().filter_map(|j| j.metadata.name).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// Waits until a Job named `name` exists.
pub async fn wait_job(client: &Client, name: &str) {
    wait_for(&format!("Job {name}"), || async {
        jobs(client).await.contains(&name.to_string()).then_some(())
    })
    .await
}

/// The name of the (only) operation with id `id` in a rendered cluster.
pub fn op_name(desired: &DesiredCluster, id: &str) -> String {
    desired
        .operations
        .iter()
        .find(|o| o.spec.id == id)
        .and_then(|o| o.metadata.name.clone())
        .expect("operation")
}

/// The render context of commit number `n`, as [`render`] uses it.
pub fn context(n: u32) -> RenderContext {
    let mut ctx = RenderContext::new(NS, "main", sha(n));
    ctx.queue_base = format!("{n:08}");
    ctx
}

/// Renders `dir` at commit number `n` with its runs of `rollouts` (each with the wave that took it).
pub fn render_in_rollouts(
    dir: &ClusterDir,
    n: u32,
    rollouts: &[(&kok::layout::rollouts::Rollout, &str)],
) -> DesiredCluster {
    let ctx = context(n);
    let mut desired = render_cluster(dir, &ctx);
    let broken = std::collections::BTreeSet::new();
    kok::materialize::rollout::add_rollouts(&mut desired, dir, rollouts, &broken, &ctx);
    desired
}

/// Writes the `FleetRollout` objects of `rollouts` rendered at commit number `n` (those of the
/// namespace that are not among them are deleted), as a pass does.
pub async fn apply_rollouts(client: &Client, n: u32, rollouts: &[&kok::layout::rollouts::Rollout]) {
    use kok::materialize::fleet;
    let ctx = context(n);
    let desired: Vec<_> = rollouts
        .iter()
        .map(|r| kok::materialize::rollout::render_rollout(r, &ctx))
        .collect();
    let live = fleet::live_rollouts(client, NS).await.expect("rollouts listed");
    let writes = fleet::decide_rollouts(&live, &desired, &Default::default());
    fleet::apply_rollouts(client, NS, &writes)
        .await
        .expect("rollouts applied");
}

/// The current run of rollout `rollout` in a rendered cluster, resolved against `live` operations.
pub fn run_name(desired: &DesiredCluster, rollout: &str) -> String {
    desired
        .rollouts
        .iter()
        .find(|r| r.rollout == rollout)
        .and_then(|r| r.operation.metadata.name.clone())
        .expect("a run of the rollout")
}

/// The `FleetRollout` named `name`, if it exists.
pub async fn fleet_rollout(client: &Client, name: &str) -> Option<kok::api::FleetRollout> {
    Api::<kok::api::FleetRollout>::namespaced(client.clone(), NS)
        .get_opt(name)
        .await
        .ok()
        .flatten()
}
