//! testkit: an in-memory Kubernetes API server on 127.0.0.1 for kok's tests and benchmarks.
//!
//! Architecture: [`server`] routes HTTP paths (axum) to [`api`], which implements the API
//! semantics on [`store`] (objects as JSON, a global resourceVersion and each resource's event
//! history) and [`resources`] (built-in kinds plus CRD-served ones). [`watch`] streams events,
//! [`patch`] and [`apply`] handle PATCH flavours and managedFields, [`selectors`] filter lists,
//! [`table`] renders `kubectl get` tables (the built-in kinds' columns from [`printers`]),
//! [`discovery`] and [`openapi`] answer discovery, [`errors`] renders `Status` objects, [`protobuf`]
//! reads and writes Kubernetes protobuf, [`schema`] (with [`formats`]) checks custom resources
//! against their CRD, [`typed`] prunes built-ins and [`validation`] checks names and immutability;
//! [`events`] serves `v1` and `events.k8s.io/v1` Events from one storage, converted and validated as
//! the real server does. Garbage collection of dependents lives in [`api`].
//! [`auth`] answers TokenReviews and SubjectAccessReviews (RBAC on the stored roles and bindings);
//! [`pod_logs`] answers `pods/<name>/log` with what a node's kubelet (a test's, or one a program
//! registers) says the pod printed.
//! With [`Options::data_dir`], [`persist`] keeps the store on disk (SQLite, one row per object;
//! [`legacy`] imports the earlier format).
//!
//! Jobs are stored, never run: no pods are created. Tests play the kubelet with
//! [`ApiServer::complete_job`], [`ApiServer::fail_job`] and [`ApiServer::start_job`].
#![forbid(unsafe_code)]

pub mod api;
pub mod apply;
pub mod auth;
pub mod discovery;
pub mod errors;
pub mod events;
pub mod formats;
pub mod gnostic;
pub mod legacy;
pub mod openapi;
pub mod patch;
pub mod persist;
pub mod pod_logs;
pub mod printers;
pub mod protobuf;
pub mod resources;
pub mod schema;
pub mod selectors;
pub mod server;
pub mod store;
pub mod table;
pub mod typed;
pub mod util;
pub mod validation;
pub mod watch;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{json, Value};
use tokio::sync::watch as signal;

use crate::api::{State, WriteCtx};
use crate::patch::PatchKind;
use crate::server::Shared;

/// Requests counted by verb and resource, shared with the running server.
#[derive(Debug, Clone, Default)]
pub struct RequestLog {
    counts: Arc<Mutex<HashMap<(String, String), usize>>>,
}

const WRITE_VERBS: &[&str] = &["create", "update", "patch", "delete", "deletecollection"];

impl RequestLog {
    /// Counts one request; `resource` is the plural, or `plural/subresource`.
    pub fn record(&self, verb: &str, resource: &str) {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        *c.entry((verb.to_string(), resource.to_string())).or_default() += 1;
    }

    fn sum(&self, f: impl Fn(&str, &str) -> bool) -> usize {
        let c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        c.iter().filter(|((v, r), _)| f(v, r)).map(|(_, n)| n).sum()
    }

    /// Requests with this verb on this resource. `"jobs"` also counts `jobs/status`;
    /// `"jobs/status"` counts only the subresource.
    pub fn count(&self, verb: &str, resource: &str) -> usize {
        self.sum(|v, r| v == verb && matches_resource(r, resource))
    }

    /// Writes (create, update, patch, delete, deletecollection) on any resource.
    pub fn writes(&self) -> usize {
        self.sum(|v, _| WRITE_VERBS.contains(&v))
    }

    /// Writes on one resource (subresources included, as in [`RequestLog::count`]).
    pub fn writes_to(&self, resource: &str) -> usize {
        self.sum(|v, r| WRITE_VERBS.contains(&v) && matches_resource(r, resource))
    }

    /// Every counted resource request (discovery and OpenAPI requests are not counted).
    pub fn total(&self) -> usize {
        self.sum(|_, _| true)
    }

    /// Forgets all counts.
    pub fn reset(&self) {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// All counts, as `((verb, resource), n)`, sorted.
    pub fn snapshot(&self) -> Vec<((String, String), usize)> {
        let c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<_> = c.iter().map(|(k, n)| (k.clone(), *n)).collect();
        v.sort();
        v
    }
}

fn matches_resource(recorded: &str, wanted: &str) -> bool {
    recorded == wanted
        || recorded
            .strip_prefix(wanted)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// A fault to inject: the next `count` requests matching every given filter fail with `code`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fault {
    /// Kubernetes verb (get, list, watch, create, update, patch, delete, deletecollection), or any.
    pub verb: Option<String>,
    /// Plural resource (or `plural/status`), or any.
    pub resource: Option<String>,
    /// Object name, or any.
    pub name: Option<String>,
    /// HTTP code of the failure, answered with a matching `Status`.
    pub code: u16,
    /// How many requests fail.
    pub count: usize,
}

impl Fault {
    /// The next `count` requests with `verb` on `resource` fail with `code`.
    pub fn on(verb: &str, resource: &str, code: u16, count: usize) -> Fault {
        Fault {
            verb: Some(verb.into()),
            resource: Some(resource.into()),
            name: None,
            code,
            count,
        }
    }

    /// Restricts the fault to one object name.
    pub fn named(mut self, name: &str) -> Fault {
        self.name = Some(name.into());
        self
    }
}

/// A delay to inject: the next `count` requests matching every given filter are held back `duration`
/// before they are served (as a busy API server answers a large list late), in the order they came.
///
/// The filters read as [`Fault`]'s. As on the real API server, a `?watch=true` request is verb `watch`,
/// not `list`: a delay of `list` holds back a watcher's initial list, and never its watch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delay {
    /// Kubernetes verb (get, list, watch, create, update, patch, delete, deletecollection), or any.
    pub verb: Option<String>,
    /// Plural resource (or `plural/status`), or any.
    pub resource: Option<String>,
    /// Object name, or any.
    pub name: Option<String>,
    /// How long each matching request is held back.
    pub duration: Duration,
    /// How many requests are held back.
    pub count: usize,
}

impl Delay {
    /// The next `count` requests with `verb` on `resource` are held back `duration` each.
    pub fn on(verb: &str, resource: &str, duration: Duration, count: usize) -> Delay {
        Delay {
            verb: Some(verb.into()),
            resource: Some(resource.into()),
            name: None,
            duration,
            count,
        }
    }

    /// Restricts the delay to one object name.
    pub fn named(mut self, name: &str) -> Delay {
        self.name = Some(name.into());
        self
    }
}

/// Server options beyond the defaults.
#[derive(Debug, Clone)]
pub struct Options {
    /// Port on 127.0.0.1 (0 picks a free one).
    pub port: u16,
    /// Events kept per resource for watches; a watch from before its resource's oldest kept event
    /// gets 410 Gone.
    pub event_window: usize,
    /// Interval between watch bookmarks.
    pub bookmark_interval: Duration,
    /// Directory the store persists to (a SQLite database, each write committed before it is
    /// acknowledged, see [`persist`]); `None` keeps it in memory only. A missing directory is created
    /// (an empty store).
    pub data_dir: Option<PathBuf>,
    /// Caps the database at this many 4 KiB pages, as a nearly full disk would (for tests of
    /// what a full disk does); `None`: no cap.
    pub db_page_limit: Option<u64>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            port: 0,
            event_window: 10_000,
            bookmark_interval: Duration::from_secs(1),
            data_dir: None,
            db_page_limit: None,
        }
    }
}

/// Group, version and plural resource naming what [`ApiServer::object`] peeks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gvr {
    /// API group (empty for core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Plural resource.
    pub resource: String,
}

impl From<(&str, &str, &str)> for Gvr {
    fn from((g, v, r): (&str, &str, &str)) -> Self {
        Gvr {
            group: g.into(),
            version: v.into(),
            resource: r.into(),
        }
    }
}

impl From<&str> for Gvr {
    /// `"v1/configmaps"`, `"batch/v1/jobs"`, or a bare plural of a built-in (`"jobs"`).
    fn from(s: &str) -> Self {
        let parts: Vec<&str> = s.split('/').collect();
        match parts.as_slice() {
            [g, v, r] => (*g, *v, *r).into(),
            [v, r] => ("", *v, *r).into(),
            [r] => {
                let reg = resources::Registry::builtin();
                let found = reg
                    .groups()
                    .iter()
                    .flat_map(|g| reg.versions(g).into_iter().flat_map(|v| reg.resources(g, &v)))
                    .find(|i| i.resource == *r);
                match found {
                    Some(i) => (i.group.as_str(), i.version.as_str(), i.resource.as_str()).into(),
                    None => ("", "v1", *r).into(),
                }
            }
            _ => ("", "v1", s).into(),
        }
    }
}

impl From<&kube::discovery::ApiResource> for Gvr {
    fn from(ar: &kube::discovery::ApiResource) -> Self {
        (ar.group.as_str(), ar.version.as_str(), ar.plural.as_str()).into()
    }
}

impl From<kube::core::GroupVersionResource> for Gvr {
    fn from(g: kube::core::GroupVersionResource) -> Self {
        (g.group.as_str(), g.version.as_str(), g.resource.as_str()).into()
    }
}

/// A running API server. [`ApiServer::shutdown`] stops it and returns once its data directory is
/// released; dropping it stops it too, without waiting for its tasks.
pub struct ApiServer {
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    url: String,
    port: u16,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
    client: kube::Client,
}

/// Error of the test controls.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The API refused the change.
    #[error("{what} failed: {source}")]
    Api {
        /// What was attempted.
        what: String,
        /// The API error.
        #[source]
        source: errors::ApiError,
    },
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer")
            .field("url", &self.url)
            .field("kubeconfig", &self.kubeconfig)
            .finish()
    }
}

impl ApiServer {
    /// Starts on a free port of 127.0.0.1, with namespaces `default`, `kok-system` and `kube-system`.
    pub async fn start() -> anyhow::Result<ApiServer> {
        ApiServer::start_with(Options::default()).await
    }

    /// Starts on a given port.
    pub async fn start_on(port: u16) -> anyhow::Result<ApiServer> {
        ApiServer::start_with(Options {
            port,
            ..Options::default()
        })
        .await
    }

    /// Starts with explicit options.
    pub async fn start_with(opts: Options) -> anyhow::Result<ApiServer> {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], opts.port)))
            .await
            .with_context(|| format!("binding the testkit API server to 127.0.0.1:{}", opts.port))?;
        let addr = listener.local_addr().context("reading the bound address")?;
        let mut state = State::new(opts.event_window);
        if let Some(dir) = &opts.data_dir {
            persist::open(dir, opts.db_page_limit, &mut state)
                .with_context(|| format!("restoring the API server's store from {}", dir.display()))?;
        }
        let ctx = WriteCtx {
            namespace: None,
            manager: "testkit".into(),
            dry_run: false,
            ..Default::default()
        };
        let ns_info = state
            .registry
            .get("", "v1", "namespaces")
            .context("namespaces are built in")?;
        for ns in ["default", "kube-system", "kok-system"] {
            if state.exists(&ns_info, None, ns) {
                continue;
            }
            state
                .create(&ns_info, &ctx, json!({"metadata": {"name": ns}}))
                .with_context(|| format!("creating namespace {ns}"))?;
        }
        let (cut, _) = signal::channel(0u64);
        let (shutdown, mut shutdown_rx) = signal::channel(false);
        let durability = state.store.durability();
        let shared = Arc::new(Shared {
            durability,
            connections: Default::default(),
            state: Mutex::new(state),
            log: RequestLog::default(),
            faults: Mutex::new(Vec::new()),
            delays: Mutex::new(Vec::new()),
            latency: Mutex::new(Duration::ZERO),
            cut,
            shutdown,
            bookmark_interval: opts.bookmark_interval,
            addr: addr.to_string(),
            tokens: Mutex::default(),
            pod_logs: pod_logs::PodLogs::default(),
            kubelets: pod_logs::Kubelets::default(),
        });
        let app = axum::Router::new()
            .fallback(server::handle)
            .with_state(shared.clone());
        let mut stop = shutdown_rx.clone();
        let counted = shared.clone();
        let listener = axum::serve::ListenerExt::tap_io(listener, move |_| {
            counted
                .connections
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        let serving = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            });
            if let Err(e) = serve.await {
                tracing::warn!(error = %e, "testkit API server stopped with an error");
            }
        });
        let gc = Arc::downgrade(&shared);
        let sweeping = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = shutdown_rx.changed() => return,
                }
                let Some(shared) = gc.upgrade() else { return };
                shared.lock().sweep_orphans();
            }
        });
        let url = format!("http://{addr}");
        let dir = tempfile::tempdir().context("creating a directory for the kubeconfig")?;
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_yaml(&url))
            .with_context(|| format!("writing {}", kubeconfig.display()))?;
        let mut config = kube::Config::new(url.parse().context("parsing the server URL")?);
        config.default_namespace = "default".into();
        let client =
            kube::Client::try_from(config).context("building a kube client for the testkit server")?;
        Ok(ApiServer {
            shared,
            tasks: vec![serving, sweeping],
            url,
            port: addr.port(),
            kubeconfig,
            _dir: dir,
            client,
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// The port served.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A kubeconfig (server URL and a dummy token user, namespace `default`), owned by the handle.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// A client for this server, default namespace `default`.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// Creates (or replaces the spec of) CRDs; they are served once this returns.
    pub async fn install_crds(&self, crds: &[CustomResourceDefinition]) -> anyhow::Result<()> {
        self.store_crds(crds)?;
        if let Some(source) = self.acknowledged().await {
            return Err(ControlError::Api {
                what: "installing CRDs".into(),
                source,
            }
            .into());
        }
        Ok(())
    }

    fn store_crds(&self, crds: &[CustomResourceDefinition]) -> anyhow::Result<()> {
        let mut state = self.shared.lock();
        let info = state
            .registry
            .get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
            .context("CRDs are built in")?;
        let ctx = WriteCtx {
            namespace: None,
            manager: "testkit".into(),
            dry_run: false,
            ..Default::default()
        };
        for crd in crds {
            let mut v = serde_json::to_value(crd).context("serializing a CRD")?;
            v["apiVersion"] = json!("apiextensions.k8s.io/v1");
            v["kind"] = json!("CustomResourceDefinition");
            let name = v
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let body = serde_json::to_vec(&v).context("serializing a CRD")?;
            state
                .patch(&info, &ctx, &name, PatchKind::Apply, &body, false, true)
                .map_err(|source| ControlError::Api {
                    what: format!("installing CRD {name}"),
                    source,
                })?;
            if let Some(source) = state.store.persist_failure() {
                return Err(ControlError::Api {
                    what: format!("installing CRD {name}"),
                    source,
                }
                .into());
            }
            let group = v.pointer("/spec/group").and_then(Value::as_str).unwrap_or("");
            let plural = v
                .pointer("/spec/names/plural")
                .and_then(Value::as_str)
                .unwrap_or("");
            anyhow::ensure!(
                !state.registry.versions(group).is_empty()
                    && state.registry.resources(group, &state.registry.versions(group)[0]).iter().any(|i| i.resource == plural),
                "CRD {name} was stored but {plural}.{group} is not served; check spec.versions has a served version"
            );
        }
        Ok(())
    }

    /// Why the server stopped persisting (a write to its data directory failed, for example on a full
    /// disk), if it did; from then on it refuses every request with 503 until restarted.
    pub fn persist_failure(&self) -> Option<String> {
        self.shared.lock().store.persist_failure().map(|e| e.message)
    }

    /// Resolves with the reason once a write could not be persisted; never without a data directory.
    pub fn persist_failed(&self) -> impl std::future::Future<Output = String> + Send + 'static {
        let rx = self.shared.lock().store.persist_failed();
        async move {
            let Some(mut rx) = rx else {
                return std::future::pending().await;
            };
            let why = rx
                .wait_for(Option::is_some)
                .await
                .ok()
                .and_then(|why| why.clone());
            match why {
                Some(why) => why,
                None => std::future::pending().await,
            }
        }
    }

    /// Request counts (a live view: later requests show up in it).
    pub fn requests(&self) -> RequestLog {
        self.shared.log.clone()
    }

    /// How many TCP connections clients have opened to this server since it started.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits until every write so far is on disk; then why the store refuses writes, if it does.
    async fn acknowledged(&self) -> Option<errors::ApiError> {
        if let Some(durability) = &self.shared.durability {
            durability.all_synced().await;
        }
        self.shared.lock().store.persist_failure()
    }

    async fn job(
        &self,
        ns: &str,
        name: &str,
        what: &str,
        f: impl FnOnce(&mut Value, &str),
    ) -> anyhow::Result<()> {
        let result = self.shared.lock().job_status(ns, name, f);
        let result = match self.acknowledged().await {
            Some(e) => Err(e),
            None => result.map(|_| ()),
        };
        result.map_err(|source| ControlError::Api {
            what: format!("{what} Job {ns}/{name}"),
            source,
        })?;
        Ok(())
    }

    /// Marks a Job succeeded like the Job controller: startTime (if unset), completionTime,
    /// succeeded=1, active=0, conditions SuccessCriteriaMet and Complete.
    pub async fn complete_job(&self, namespace: &str, name: &str) -> anyhow::Result<()> {
        self.job(namespace, name, "completing", |st, now| {
            if st["startTime"].is_null() {
                st["startTime"] = json!(now);
            }
            st["completionTime"] = json!(now);
            st["succeeded"] = json!(1);
            st["active"] = json!(0);
            st["ready"] = json!(0);
            st["terminating"] = json!(0);
            st["conditions"] = json!([
                {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached",
                 "message": "Reached expected number of succeeded pods", "lastProbeTime": now, "lastTransitionTime": now},
                {"type": "Complete", "status": "True", "reason": "CompletionsReached",
                 "message": "Reached expected number of succeeded pods", "lastProbeTime": now, "lastTransitionTime": now},
            ]);
        })
        .await
    }

    /// Marks a Job failed like the Job controller: failed=1, active=0, conditions FailureTarget
    /// and Failed with the given reason (e.g. `BackoffLimitExceeded`, `DeadlineExceeded`).
    pub async fn fail_job(
        &self,
        namespace: &str,
        name: &str,
        reason: &str,
        message: &str,
    ) -> anyhow::Result<()> {
        self.job(namespace, name, "failing", |st, now| {
            if st["startTime"].is_null() {
                st["startTime"] = json!(now);
            }
            st["failed"] = json!(1);
            st["active"] = json!(0);
            st["ready"] = json!(0);
            st["terminating"] = json!(0);
            st["conditions"] = json!([
                {"type": "FailureTarget", "status": "True", "reason": reason, "message": message,
                 "lastProbeTime": now, "lastTransitionTime": now},
                {"type": "Failed", "status": "True", "reason": reason, "message": message,
                 "lastProbeTime": now, "lastTransitionTime": now},
            ]);
        })
        .await
    }

    /// Marks a Job started: startTime and active=1 (as if its pod were running).
    pub async fn start_job(&self, namespace: &str, name: &str) -> anyhow::Result<()> {
        self.job(namespace, name, "starting", |st, now| {
            if st["startTime"].is_null() {
                st["startTime"] = json!(now);
            }
            st["active"] = json!(1);
            st["ready"] = json!(1);
        })
        .await
    }

    /// The next matching requests fail with the fault's code and a proper `Status` body.
    pub fn inject_fault(&self, fault: Fault) {
        self.shared
            .faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(fault);
    }

    /// The next matching requests are held back the delay's duration (or until the server stops), then
    /// served; one request meets at most one delay.
    pub fn inject_delay(&self, delay: Delay) {
        self.shared
            .delays
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(delay);
    }

    /// Adds this latency to every resource request (zero removes it).
    pub fn set_latency(&self, d: Duration) {
        *self.shared.latency.lock().unwrap_or_else(|p| p.into_inner()) = d;
    }

    /// Ends every open watch stream now (clients see the stream close and re-watch).
    pub fn cut_watches(&self) {
        self.shared.cut.send_modify(|n| *n += 1);
    }

    /// A stored object as served at that group/version, for assertions.
    pub fn object(&self, gvr: impl Into<Gvr>, namespace: impl AsNamespace, name: &str) -> Option<Value> {
        let gvr = gvr.into();
        let state = self.shared.lock();
        let info = state.registry.get(&gvr.group, &gvr.version, &gvr.resource)?;
        state
            .get(&info, namespace.as_namespace(), name)
            .ok()
            .map(|o| (*o).clone())
    }

    /// Number of stored objects of a resource (all namespaces).
    pub fn count(&self, gvr: impl Into<Gvr>) -> usize {
        let gvr = gvr.into();
        let state = self.shared.lock();
        state
            .registry
            .get(&gvr.group, &gvr.version, &gvr.resource)
            .map_or(0, |i| state.store.count(&i.key()))
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.lock().store.resource_version()
    }

    /// Registers `token` as `user`'s: TokenReviews of it authenticate (while it has not expired, its
    /// audiences match and its ServiceAccount, if any, exists), and a review sent with it is `user`'s.
    pub fn add_token(&self, token: &str, user: auth::TokenUser) {
        self.tokens().insert(token, user);
    }

    /// A new token of ServiceAccount `namespace/name` (created when missing), as `kubectl create token`
    /// makes: a JWT for the API audience whose reviews fail once the ServiceAccount is deleted.
    pub async fn service_account_token(&self, namespace: &str, name: &str) -> anyhow::Result<String> {
        {
            let mut state = self.shared.lock();
            let info = state
                .registry
                .get("", "v1", "serviceaccounts")
                .context("ServiceAccounts are built in")?;
            if !state.exists(&info, Some(namespace), name) {
                let ctx = WriteCtx {
                    namespace: Some(namespace.into()),
                    manager: "testkit".into(),
                    ..Default::default()
                };
                state
                    .create(
                        &info,
                        &ctx,
                        json!({"metadata": {"name": name, "namespace": namespace}}),
                    )
                    .map_err(|source| ControlError::Api {
                        what: format!("creating ServiceAccount {namespace}/{name}"),
                        source,
                    })?;
            }
        }
        if let Some(source) = self.acknowledged().await {
            return Err(ControlError::Api {
                what: format!("creating ServiceAccount {namespace}/{name}"),
                source,
            }
            .into());
        }
        let user = auth::TokenUser::service_account(namespace, name);
        let token = auth::mint(&user);
        self.add_token(&token, user);
        Ok(token)
    }

    /// Makes `token` expired: its reviews say so from now on.
    pub fn expire_token(&self, token: &str) {
        self.tokens().expire(token);
    }

    fn tokens(&self) -> std::sync::MutexGuard<'_, auth::Tokens> {
        self.shared.tokens.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `text` to what pod `namespace/name` printed (`GET .../pods/<name>/log`; followers get it at
    /// once). A pod a test gives a log is served that log wherever it runs, as if its node's kubelet
    /// kept it.
    pub fn append_pod_log(&self, namespace: &str, name: &str, text: &str) {
        self.shared.pod_logs.append(namespace, name, text);
    }

    /// Ends pod `namespace/name`'s log, as its container's end does: followed logs end.
    pub fn end_pod_log(&self, namespace: &str, name: &str) {
        self.shared.pod_logs.end(namespace, name);
    }

    /// Makes `kubelet` the kubelet of node `node`: the logs of the pods bound to it (`spec.nodeName`)
    /// are its (see [`pod_logs`]).
    pub fn set_kubelet(&self, node: &str, kubelet: std::sync::Arc<dyn pod_logs::Kubelet>) {
        self.shared.kubelets.set(node, kubelet);
    }
}

/// A namespace argument: `"ns"`, `""` or `None` for cluster-scoped objects.
pub trait AsNamespace {
    /// The namespace, if any.
    fn as_namespace(&self) -> Option<&str>;
}

impl AsNamespace for &str {
    fn as_namespace(&self) -> Option<&str> {
        (!self.is_empty()).then_some(*self)
    }
}

impl AsNamespace for &String {
    fn as_namespace(&self) -> Option<&str> {
        (!self.is_empty()).then_some(self.as_str())
    }
}

impl AsNamespace for Option<&str> {
    fn as_namespace(&self) -> Option<&str> {
        self.filter(|s| !s.is_empty())
    }
}

impl ApiServer {
    /// How long [`ApiServer::shutdown`] lets open requests finish before it ends them.
    pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

    /// Stops serving and returns once the server is gone: its watches are cut, open requests end (or
    /// are ended after [`ApiServer::SHUTDOWN_GRACE`]), every acknowledged write is on disk and the data
    /// directory's lock is released, so a server started on the same directory right after never
    /// finds it in use.
    pub async fn shutdown(mut self) {
        let _ = self.shared.shutdown.send(true);
        self.cut_watches();
        for task in std::mem::take(&mut self.tasks) {
            let abort = task.abort_handle();
            if tokio::time::timeout(Self::SHUTDOWN_GRACE, task).await.is_err() {
                abort.abort();
            }
        }
        if let Some(durability) = &self.shared.durability {
            durability.all_synced().await;
        }
        self.shared.lock().store.close_db();
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.shared.lock().store.close_db();
        let _ = self.shared.shutdown.send(true);
        self.cut_watches();
    }
}

/// The kubeconfig text for a server URL.
pub fn kubeconfig_yaml(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: testkit\n  cluster:\n    server: {url}\ncontexts:\n- name: testkit\n  context:\n    cluster: testkit\n    user: testkit\n    namespace: default\ncurrent-context: testkit\nusers:\n- name: testkit\n  user:\n    token: testkit-dummy-token\npreferences: {{}}\n"
    )
}
