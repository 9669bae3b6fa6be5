//! The read-only view the pages are rendered from: snapshots of the controller's watch caches.
//!
//! A page asks the view, never the API server; the view hands out copies, so nothing a handler does
//! reaches back into the caches. Health, rollouts and maintenance windows join the view as methods
//! here when their caches exist.

use std::sync::{Arc, OnceLock};

use kube::ResourceExt;

use crate::api::{Cluster, ClusterOperation};
use crate::controller::live::LiveCache;

/// What the pages may read.
pub trait View: Send + Sync {
    /// Every Cluster kok manages.
    fn clusters(&self) -> Vec<Cluster>;
    /// The operations of `cluster`, in no particular order.
    fn operations_of(&self, cluster: &str) -> Vec<ClusterOperation>;
    /// One operation by name.
    fn operation(&self, name: &str) -> Option<ClusterOperation>;
    /// A number that changes whenever what the view shows may have changed (0 when it cannot tell).
    fn version(&self) -> u64 {
        0
    }
}

/// Where the service hands its watch caches to the view once it has made them.
pub type CacheSlot = Arc<OnceLock<Arc<LiveCache>>>;

/// The view over the service's watch caches; empty until the service has filled the slot.
#[derive(Clone, Debug, Default)]
pub struct CacheView {
    slot: CacheSlot,
}

impl CacheView {
    /// A view whose caches the service fills through [`CacheView::slot`].
    pub fn new() -> Self {
        CacheView::default()
    }

    /// The slot the service puts its caches in.
    pub fn slot(&self) -> CacheSlot {
        self.slot.clone()
    }
}

impl View for CacheView {
    fn clusters(&self) -> Vec<Cluster> {
        let Some(live) = self.slot.get() else {
            return Vec::new();
        };
        live.clusters.state().iter().map(|c| Cluster::clone(c)).collect()
    }

    fn operations_of(&self, cluster: &str) -> Vec<ClusterOperation> {
        self.slot
            .get()
            .map(|live| live.operations.operations_in(cluster))
            .unwrap_or_default()
    }

    fn operation(&self, name: &str) -> Option<ClusterOperation> {
        self.slot.get()?.operations.get(name)
    }

    fn version(&self) -> u64 {
        self.slot.get().map(|live| live.progress()).unwrap_or(0)
    }
}

/// A fixed set of objects as a view: tests and the benchmark.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The Clusters.
    pub clusters: Vec<Cluster>,
    /// The operations of every cluster.
    pub operations: Vec<ClusterOperation>,
}

impl View for Snapshot {
    fn clusters(&self) -> Vec<Cluster> {
        self.clusters.clone()
    }

    fn operations_of(&self, cluster: &str) -> Vec<ClusterOperation> {
        self.operations
            .iter()
            .filter(|op| op.spec.cluster == cluster)
            .cloned()
            .collect()
    }

    fn operation(&self, name: &str) -> Option<ClusterOperation> {
        self.operations.iter().find(|op| op.name_any() == name).cloned()
    }
}
