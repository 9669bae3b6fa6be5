//! Local mode's meta-cluster: the embedded API server on loopback, with kok's CRDs installed, the runs' log
//! files served as their pods' logs ([`super::kubelet`]) and its kubeconfig written into the state directory,
//! so that `kubectl` can inspect what kok does.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ObjectMeta, PostParams};
use kube::Api;

/// Name of the kubeconfig file inside the state directory.
pub const KUBECONFIG_FILE: &str = "kubeconfig";

/// Directory of the embedded API server's store (a SQLite database) inside the state directory.
pub const API_DATA_DIR: &str = "api";

/// The running embedded API server.
pub struct Embedded {
    server: testkit::ApiServer,
    kubeconfig: PathBuf,
    data_dir: PathBuf,
}

/// How long in-flight work gets to stop once the store cannot be written.
pub const STORE_FAILURE_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Variable capping the embedded store's database at this many 4 KiB pages, as a nearly full disk
/// would; only tests of what a full disk does set it.
pub const DB_PAGE_LIMIT_ENV: &str = "KOK_TEST_API_DB_PAGE_LIMIT";

fn store_error(data_dir: &Path, why: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "the embedded API server could not write its store in {dir}, so kok stopped reconciling: {why}. \
         Free disk space on the filesystem holding {dir} (or repair it), then start `kok run --local` again; \
         every acknowledged write is kept",
        dir = data_dir.display()
    )
}

impl Embedded {
    /// A client for the embedded server.
    pub fn client(&self) -> kube::Client {
        self.server.client()
    }

    /// The server's URL (`http://127.0.0.1:<port>`).
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// The kubeconfig written into the state directory.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Resolves once the server could not persist a write (a full disk, a failing filesystem): from then
    /// on it refuses every request, so local mode stops; the error names the state directory and what
    /// to do.
    pub fn store_failed(&self) -> impl std::future::Future<Output = anyhow::Error> + Send + 'static {
        let failed = self.server.persist_failed();
        let dir = self.data_dir.clone();
        async move { store_error(&dir, &failed.await) }
    }

    /// Resolves [`STORE_FAILURE_GRACE`] after [`Embedded::store_failed`]: work still retrying against
    /// the refusing server by then is abandoned (it is redone from the store at the next start).
    pub fn store_failed_past_grace(
        &self,
    ) -> impl std::future::Future<Output = anyhow::Error> + Send + 'static {
        let failed = self.store_failed();
        async move {
            let e = failed.await;
            tokio::time::sleep(STORE_FAILURE_GRACE).await;
            e
        }
    }

    /// The error of [`Embedded::store_failed`], if the server has stopped persisting.
    pub fn store_failure(&self) -> Option<anyhow::Error> {
        let why = self.server.persist_failure()?;
        Some(store_error(&self.data_dir, &why))
    }

    /// Stops serving and returns once the store is on disk and the state directory's lock is released.
    pub async fn stop(self) {
        self.server.shutdown().await;
    }
}

/// The port of the server the kubeconfig in `state_dir` names (the previous start's).
fn previous_port(state_dir: &Path) -> Option<u16> {
    let kubeconfig = kube::config::Kubeconfig::read_from(state_dir.join(KUBECONFIG_FILE)).ok()?;
    let server = kubeconfig.clusters.first()?.cluster.as_ref()?.server.clone()?;
    let port = server.rsplit(':').next()?.trim_end_matches('/');
    port.parse().ok().filter(|p| *p != 0)
}

/// Starts the embedded API server on 127.0.0.1:`port` (0: the previous start's port, from the kubeconfig
/// left in the state directory, when it is free, else any free port), writes its kubeconfig to
/// `<state_dir>/kubeconfig`, installs kok's CRDs and makes sure `namespace` exists.
///
/// The store persists to `<state_dir>/api/store.db` (SQLite; every write committed before it is
/// acknowledged), so a restart finds every object as it was; damaged or locked state stops the start
/// with an error naming the file, and a write that cannot be stored later is reported by
/// [`Embedded::store_failed`].
pub async fn start(state_dir: &Path, port: u16, namespace: &str) -> anyhow::Result<Embedded> {
    let data_dir = state_dir.join(API_DATA_DIR);
    let db_page_limit = match std::env::var(DB_PAGE_LIMIT_ENV) {
        Ok(v) => Some(
            v.parse()
                .with_context(|| format!("{DB_PAGE_LIMIT_ENV}={v} is not a number of pages"))?,
        ),
        Err(_) => None,
    };
    let options = |port| testkit::Options {
        port,
        data_dir: Some(data_dir.clone()),
        db_page_limit,
        ..testkit::Options::default()
    };
    // Runs that outlived a crash of kok reach the server at the URL they were given: keep its port when free.
    let previous = (port == 0).then(|| previous_port(state_dir)).flatten();
    let server = match previous {
        Some(previous) => match testkit::ApiServer::start_with(options(previous)).await {
            Ok(server) => server,
            Err(err) => {
                tracing::debug!(port = previous, %err, "the previous port is taken; picking a free one");
                testkit::ApiServer::start_with(options(0))
                    .await
                    .context("starting the embedded API server")?
            }
        },
        None => testkit::ApiServer::start_with(options(port))
            .await
            .context("starting the embedded API server")?,
    };
    server.set_kubelet(
        super::pod::NODE_NAME,
        std::sync::Arc::new(super::kubelet::LocalKubelet::new(state_dir)),
    );
    let kubeconfig = state_dir.join(KUBECONFIG_FILE);
    std::fs::copy(server.kubeconfig_path(), &kubeconfig)
        .with_context(|| format!("writing the kubeconfig {}", kubeconfig.display()))?;
    server
        .install_crds(&crate::api::crds())
        .await
        .context("installing kok's CRDs into the embedded API server")?;
    let namespaces: Api<Namespace> = Api::all(server.client());
    if namespaces.get_opt(namespace).await?.is_none() {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(namespace.to_string()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {namespace}"))?;
    }
    tracing::info!(
        url = %server.url(),
        kubeconfig = %kubeconfig.display(),
        "embedded API server ready; inspect it with KUBECONFIG={} kubectl get clusters,clusterops,jobs -A",
        kubeconfig.display()
    );
    Ok(Embedded {
        server,
        kubeconfig,
        data_dir,
    })
}
