//! The fleet's gauges at scrape time, read from the watch caches: operations by cluster and phase, the
//! longest-waiting operation of each cluster and why it waits, the failed runs that hold a cluster, each
//! cluster's health conditions, nodes and first certificate to expire, and each rollout's phase and waves.
//!
//! Nothing is counted ahead: a scrape reads the caches (one pass over the operation records, and the
//! operations of the clusters with a failed run for their holds), so the gauges cannot drift from what
//! the controller decides on, and a cluster that is gone has no series.

use std::collections::HashSet;

use kube::ResourceExt;

use super::live::LiveCache;
use super::queue::{holds, wait_reason};
use crate::api::Phase;
use crate::health::conditions::{HEALTHY, HEALTH_CONDITIONS};
use crate::metrics::{ClusterGauges, Fleet, FleetView, Held, RolloutGauges, Waiting};

impl FleetView for LiveCache {
    fn fleet(&self) -> Fleet {
        let now = jiff::Timestamp::now();
        let mut queues = self.operations.queue_gauges();
        let mut clusters: Vec<ClusterGauges> = Vec::new();
        for cluster in self.clusters.state() {
            let mut gauges = ClusterGauges {
                name: cluster.name_any(),
                ..ClusterGauges::default()
            };
            if let Some(status) = &cluster.status {
                gauges.conditions = status
                    .conditions
                    .iter()
                    .filter(|c| c.type_ == HEALTHY || HEALTH_CONDITIONS.contains(&c.type_.as_str()))
                    .map(|c| (c.type_.clone(), c.status.clone()))
                    .collect();
                gauges.nodes = status.nodes.as_ref().map(|n| (n.ready, n.total));
                gauges.certificate_expiry = status
                    .certificates
                    .iter()
                    .map(|c| c.not_after.0.as_second())
                    .min();
            }
            clusters.push(gauges);
        }
        // Operations of a cluster whose Cluster object is not cached (yet, or any more) still count.
        let cached: HashSet<&str> = clusters.iter().map(|c| c.name.as_str()).collect();
        let uncached: Vec<ClusterGauges> = queues
            .keys()
            .filter(|name| !cached.contains(name.as_str()))
            .map(|name| ClusterGauges {
                name: name.clone(),
                ..ClusterGauges::default()
            })
            .collect();
        clusters.extend(uncached);
        for gauges in &mut clusters {
            let Some(queue) = queues.remove(&gauges.name) else {
                continue;
            };
            gauges.phases = queue.phases;
            gauges.oldest_waiting = queue.oldest.map(|o| Waiting {
                operation: o.id,
                reason: match (o.phase, o.message.as_deref()) {
                    (Phase::Pending, _) | (_, None) => "pending",
                    (_, Some(message)) => wait_reason(message),
                },
                seconds: now.duration_since(o.created).as_secs() as f64,
            });
            if queue.any_failed {
                let ops = self.operations.operations_in(&gauges.name);
                let siblings: Vec<&crate::api::ClusterOperation> = ops.iter().collect();
                gauges.held_by = ops
                    .iter()
                    .filter(|op| holds(op, &siblings))
                    .map(|op| Held {
                        operation: op.spec.id.clone(),
                        commit: op.spec.source.commit.chars().take(12).collect(),
                    })
                    .collect();
            }
        }
        clusters.sort_by(|a, b| a.name.cmp(&b.name));
        let mut rollouts: Vec<RolloutGauges> = self
            .rollouts
            .state()
            .iter()
            .map(|r| {
                let status = r.status.clone().unwrap_or_default();
                RolloutGauges {
                    name: r.name_any(),
                    phase: format!("{:?}", status.phase),
                    waves: status
                        .waves
                        .iter()
                        .map(|w| (w.name.clone(), w.pending, w.running, w.succeeded, w.failed))
                        .collect(),
                }
            })
            .collect();
        rollouts.sort_by(|a, b| a.name.cmp(&b.name));
        Fleet { clusters, rollouts }
    }
}
