//! The web view on loopback for HTTP tests: one operation fixture and a listener serving given routes.

use kok::api::{ClusterOperation, ClusterOperationSpec, ClusterOperationStatus, Phase};
use kok::server::{self, Readiness, ServerState};
use tokio::sync::watch;

/// The fixture operation's name.
pub const OP: &str = "prod-install-0123abcd";

/// Operation `install` of cluster `prod` (`cluster.yml`) in `phase`.
pub fn operation(phase: Phase) -> ClusterOperation {
    let mut op = ClusterOperation::new(
        OP,
        ClusterOperationSpec {
            cluster: "prod".into(),
            id: "install".into(),
            action: "cluster.yml".into(),
            ..Default::default()
        },
    );
    op.status = Some(ClusterOperationStatus {
        phase,
        ..Default::default()
    });
    op
}

/// Serves the routes `make` builds (given the signal that turns true when the server stops) on
/// loopback; returns the base URL and the sender that stops the server when dropped.
pub async fn serve(
    make: impl FnOnce(watch::Receiver<bool>) -> axum::Router,
) -> (String, watch::Sender<bool>) {
    let listener = server::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopping) = watch::channel(false);
    let mut state = ServerState::new(
        Readiness::new(std::time::Duration::from_secs(60)),
        kok::metrics::Metrics::new(),
    );
    state.web = Some(make(stopping.clone()));
    let mut stopped = stopping;
    tokio::spawn(server::serve(listener, state, async move {
        let _ = stopped.wait_for(|s| *s).await;
    }));
    (base, stop)
}
