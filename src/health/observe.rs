//! The reads on a workload cluster: `/readyz` and `/version`, then its Nodes and the kube-system Deployments and
//! DaemonSets (GET and LIST only), bounded in time; a failure becomes one short reason without credentials.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use kube::Client;

use super::checks::{NodeView, Observed, WorkloadView};

/// Namespace whose Deployments and DaemonSets must be available.
pub const KUBE_SYSTEM: &str = "kube-system";
/// Longest one observation may take in all.
pub const OBSERVE_TIMEOUT: Duration = Duration::from_secs(30);

/// What `client`'s cluster shows now.
pub async fn observe(client: &Client) -> Observed {
    match tokio::time::timeout(OBSERVE_TIMEOUT, read(client)).await {
        Ok(Ok(observed)) => observed,
        Ok(Err(why)) => Observed {
            api: Err(crate::redact::scrub(&why)),
            ..Observed::default()
        },
        Err(_) => Observed {
            api: Err("unreachable: timed out".to_string()),
            ..Observed::default()
        },
    }
}

async fn read(client: &Client) -> Result<Observed, String> {
    let readyz = axum::http::Request::get("/readyz")
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    client.request_text(readyz).await.map_err(|e| match &e {
        kube::Error::Api(s) => format!("not ready: /readyz answered {} {}", s.code, s.message.trim()),
        _ => format!("unreachable: {}", cause(&e)),
    })?;
    let version = client.apiserver_version().await.ok().map(|info| info.git_version);
    let listing = |what: &'static str| move |e: kube::Error| format!("refused listing {what}: {}", cause(&e));
    let params = ListParams::default();
    let (nodes, deployments, daemon_sets) = futures::try_join!(
        async {
            Api::<Node>::all(client.clone())
                .list(&params)
                .await
                .map_err(listing("nodes"))
        },
        async {
            Api::<Deployment>::namespaced(client.clone(), KUBE_SYSTEM)
                .list(&params)
                .await
                .map_err(listing("kube-system deployments"))
        },
        async {
            Api::<DaemonSet>::namespaced(client.clone(), KUBE_SYSTEM)
                .list(&params)
                .await
                .map_err(listing("kube-system daemonsets"))
        },
    )?;
    let mut workloads: Vec<WorkloadView> = deployments
        .items
        .iter()
        .map(WorkloadView::of_deployment)
        .collect();
    workloads.extend(daemon_sets.items.iter().map(WorkloadView::of_daemon_set));
    Ok(Observed {
        api: Ok(()),
        nodes: nodes.items.iter().map(NodeView::of).collect(),
        workloads,
        version,
    })
}

/// The root cause of `e` in a few words: `connection refused`, `timed out`, or the innermost message.
pub fn cause(e: &kube::Error) -> String {
    if let kube::Error::Api(s) = e {
        return format!("{} {}", s.code, s.message.trim());
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut last = e.to_string();
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::ConnectionRefused => "connection refused".to_string(),
                std::io::ErrorKind::TimedOut => "timed out".to_string(),
                std::io::ErrorKind::ConnectionReset => "connection reset".to_string(),
                _ => io.to_string(),
            };
        }
        last = err.to_string();
        source = err.source();
    }
    last
}
