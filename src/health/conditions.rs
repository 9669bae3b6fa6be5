//! A verdict as Cluster conditions (pure): `Reachable`, `NodesReady`, `InventoryMatches`,
//! `VersionMatches`, and `Healthy` when every check held, with reasons and messages after the
//! Kubernetes condition conventions. (`CertificatesValid`, also the health checks', is made in
//! [`super::certificates`].)

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::certificates::CERTIFICATES_VALID;
use super::checks::{Verdict, INVENTORY_MATCHES, NODES_READY, REACHABLE, VERSION_MATCHES};
use crate::api::NodeCounts;

/// The conditions health checks own on a Cluster (`CertificatesValid` only where it has certificates).
pub const HEALTH_CONDITIONS: [&str; 6] = [
    REACHABLE,
    NODES_READY,
    INVENTORY_MATCHES,
    VERSION_MATCHES,
    HEALTHY,
    CERTIFICATES_VALID,
];
/// The condition that is True when every check held.
pub const HEALTHY: &str = "Healthy";

/// The health conditions `verdict` gives a Cluster of `generation`, their transition time `now`.
pub fn conditions(verdict: &Verdict, generation: Option<i64>, now: Timestamp) -> Vec<Condition> {
    let reachable = verdict.checks.iter().any(|c| c.name == REACHABLE && c.passed);
    let condition = |type_: &str, status: &str, reason: &str, message: String| Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        last_transition_time: Time(now),
        observed_generation: generation,
    };
    let mut out = Vec::new();
    for (name, (held, failed)) in [
        (REACHABLE, ("ApiServerAnswers", "Unreachable")),
        (NODES_READY, ("AllNodesReady", "NodesNotReady")),
        (
            INVENTORY_MATCHES,
            ("NodesMatchInventory", "NodesDifferFromInventory"),
        ),
        (
            VERSION_MATCHES,
            ("KubeletsAtKubeVersion", "KubeletsAtOtherVersions"),
        ),
    ] {
        let check = verdict.checks.iter().find(|c| c.name == name);
        out.push(match check {
            Some(c) if c.passed => condition(name, "True", held, c.message.clone()),
            Some(c) => condition(name, "False", failed, c.message.clone()),
            None if !reachable => condition(
                name,
                "Unknown",
                "Unreachable",
                "the API server did not answer".into(),
            ),
            None => condition(
                name,
                "Unknown",
                "NoKubeVersion",
                "vars.yml sets no kube_version".into(),
            ),
        });
    }
    out.push(if verdict.passed {
        condition(HEALTHY, "True", "AllChecksPassed", verdict.message.clone())
    } else {
        condition(HEALTHY, "False", "ChecksFailed", verdict.message.clone())
    });
    out
}

/// Ready and total Nodes of what was observed.
pub fn node_counts(observed: &super::Observed) -> NodeCounts {
    let total = u32::try_from(observed.nodes.len()).unwrap_or(u32::MAX);
    let ready = observed.nodes.iter().filter(|n| n.not_ready.is_none()).count();
    let ready = u32::try_from(ready).unwrap_or(u32::MAX);
    NodeCounts {
        ready,
        total,
        summary: format!("{ready}/{total}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Verify;
    use crate::health::{verify, Expected, NodeView, Observed};

    fn observed(nodes: &[(&str, bool)]) -> Observed {
        Observed {
            nodes: nodes
                .iter()
                .map(|(name, ready)| NodeView {
                    name: name.to_string(),
                    not_ready: (!ready).then(|| "KubeletNotReady".to_string()),
                    internal_ips: vec![],
                    kubelet_version: "v1.31.4".into(),
                })
                .collect(),
            ..Observed::default()
        }
    }

    fn expected() -> Expected {
        let hosts = "all:\n  hosts:\n    node1:\n    node2:\n  children:\n    kube_node:\n      hosts:\n        node1:\n        node2:\n";
        Expected::from_dir(
            &crate::layout::InventoryDir::short(hosts, "{}\n"),
            "cluster.yml",
            &[],
        )
        .unwrap()
    }

    fn statuses(conditions: &[Condition]) -> Vec<(String, String, String)> {
        conditions
            .iter()
            .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
            .collect()
    }

    #[test]
    fn each_check_becomes_its_condition_and_healthy_sums_them_up() {
        let o = observed(&[("node1", true), ("node2", false)]);
        let got = conditions(
            &verify(Verify::Full, &expected(), &o),
            Some(3),
            Timestamp::UNIX_EPOCH,
        );
        let want: Vec<(String, String, String)> = [
            ("Reachable", "True", "ApiServerAnswers"),
            ("NodesReady", "False", "NodesNotReady"),
            ("InventoryMatches", "True", "NodesMatchInventory"),
            ("VersionMatches", "Unknown", "NoKubeVersion"),
            ("Healthy", "False", "ChecksFailed"),
        ]
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect();
        assert_eq!(statuses(&got), want);
        assert_eq!(got[1].message, "1/2 nodes not Ready: node2 (KubeletNotReady)");
        assert!(got.iter().all(|c| c.observed_generation == Some(3)));
        assert_eq!(node_counts(&o).summary, "1/2");
    }

    #[test]
    fn an_unreachable_cluster_is_unknown_but_for_reachable_and_healthy() {
        let o = Observed {
            api: Err("unreachable: connection refused".into()),
            ..Observed::default()
        };
        let got = conditions(
            &verify(Verify::Full, &expected(), &o),
            None,
            Timestamp::UNIX_EPOCH,
        );
        let got = statuses(&got);
        assert_eq!(got[0].1, "False");
        assert!(
            got[1..4].iter().all(|c| c.1 == "Unknown" && c.2 == "Unreachable"),
            "{got:?}"
        );
        assert_eq!(got[4].1, "False");
    }
}
