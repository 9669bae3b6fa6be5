//! Pre-flight where operations are created: a rendered cluster's findings seen from its live objects, the
//! errors pinned into the specs of the operations the commit creates, and the versions its Cluster records.
//!
//! Pure; shared by the reconcile pass (which writes what it decides) and the plan (which shows it).

use kube::ResourceExt;

use super::apply::Live;
use super::render::{stamp, DesiredCluster};
use crate::api::{ClusterOperation, ANNOTATION_CONTENT_HASH};
use crate::layout::ClusterDir;
use crate::preflight::{self, Base, Finding, History, Tree};

/// How the live objects a cluster's pre-flight starts from were seen.
#[derive(Clone, Debug)]
pub struct Seen {
    /// Which commit the live Cluster's recorded values are from.
    pub base: Base,
    /// True for a plan without a meta-cluster: the live objects are the base commit's render, none run.
    pub simulated: bool,
    /// Local mode: the checked-out kubespray tree the cluster's runs use.
    pub tree: Option<Tree>,
}

/// The operations of `desired` (entries of operations.yml) that `live` does not have: the ones the commit
/// creates.
pub fn new_operations<'d>(
    desired: &'d DesiredCluster,
    live: &'d Live,
) -> impl Iterator<Item = &'d ClusterOperation> + 'd {
    desired
        .operations
        .iter()
        .filter(|op| !live.operations.contains_key(&op.name_any()))
}

/// Every finding of `cluster` (rendered as `desired`) against the history `live` shows: the values its
/// Cluster recorded (and health saw), whether it was seen installed, and which entries are still to run.
pub fn findings(cluster: &ClusterDir, desired: &DesiredCluster, live: &Live, seen: &Seen) -> Vec<Finding> {
    let operations = preflight::queued(cluster, &desired.operations, &live.operations);
    let history = History {
        previous: preflight::previous_of(live.cluster.as_ref(), seen.base),
        installed: preflight::installed(live.cluster.as_ref(), live.operations.values(), seen.simulated),
    };
    let facts = preflight::cluster_facts(cluster, operations, history, seen.tree.clone());
    preflight::check_embedded(&facts)
}

/// Pins `findings` into the operations `desired` creates (each gets the errors that refuse it), and keeps
/// on the Cluster the versions it recorded before unless one of them may run: the recorded values are those
/// kok last gave a run, which the next commit's rules 2 and 3 compare with.
pub fn pin(desired: &mut DesiredCluster, cluster: &ClusterDir, live: &Live, findings: &[Finding]) {
    let mut runnable = false;
    for op in desired
        .operations
        .iter_mut()
        .filter(|op| !live.operations.contains_key(&op.name_any()))
    {
        let Some(entry) = cluster.operations.iter().find(|e| e.id == op.spec.id) else {
            continue;
        };
        let pinned = preflight::pinned(entry, findings);
        runnable |= pinned.as_ref().is_none_or(|p| p.findings.is_empty());
        if op.spec.preflight != pinned {
            op.spec.preflight = pinned;
            restamp(op);
        }
    }
    let recorded = live.cluster.as_ref().map(|c| &c.spec.kubernetes);
    if let Some(recorded) = recorded.filter(|r| !runnable && **r != desired.cluster.spec.kubernetes) {
        desired.cluster.spec.kubernetes = recorded.clone();
        restamp(&mut desired.cluster);
    }
}

fn restamp<K: kube::Resource + serde::Serialize>(obj: &mut K) {
    if let Some(annotations) = obj.meta_mut().annotations.as_mut() {
        annotations.remove(ANNOTATION_CONTENT_HASH);
    }
    stamp(obj);
}
