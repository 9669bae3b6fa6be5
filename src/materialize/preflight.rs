//! Pre-flight where operations are created: a rendered cluster's findings seen from its live objects, the
//! errors pinned into the specs of the operations the commit creates, and the versions its Cluster records.
//!
//! Pure; shared by the reconcile pass (which writes what it decides) and the plan (which shows it).

use kube::ResourceExt;

use super::apply::Live;
use super::render::{stamp, DesiredCluster};
use crate::api::{ActionType, ClusterOperation, ANNOTATION_CONTENT_HASH};
use crate::layout::{ClusterDir, Operation};
use crate::preflight::{self, Base, Before, ClusterFacts, Finding, History, Tree};

/// How the live objects a cluster's pre-flight starts from were seen.
#[derive(Clone, Debug)]
pub struct Seen {
    /// Which commit the live Cluster's recorded values are from.
    pub base: Base,
    /// True for a plan without a meta-cluster: the live objects are the base commit's render, none run.
    pub simulated: bool,
    /// Local mode: the checked-out kubespray tree the cluster's runs use.
    pub tree: Option<Tree>,
    /// The cluster's inventory and settings at the base commit, where the caller read it (a plan), for
    /// rules 11 and 12.
    pub before: Option<Before>,
}

/// What pre-flight found for one rendered cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Checked {
    /// The findings of the cluster and its operations.yml entries (see [`preflight::check`]).
    pub entries: Vec<Finding>,
    /// For each of the cluster's runs of a rollout (`DesiredCluster::rollouts`, in order), the findings of
    /// the cluster and of the rollout's operation, which point at the rollout file.
    pub runs: Vec<Vec<Finding>>,
}

impl Checked {
    /// Every finding once: the entries', then what the runs of rollouts add about their operations.
    pub fn all(&self) -> impl Iterator<Item = &Finding> {
        let runs = self.runs.iter().flatten().filter(|f| f.operation.is_some());
        self.entries.iter().chain(runs)
    }
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

/// True when the commit creates an operation of the cluster: an entry's, or a run of a rollout (at the
/// rollout's current `rerun`).
pub fn creates_operations(desired: &DesiredCluster, live: &Live) -> bool {
    new_operations(desired, live).next().is_some()
        || desired
            .rollouts
            .iter()
            .any(|r| !live.operations.contains_key(&r.operation.name_any()))
}

/// Every finding of `cluster` (rendered as `desired`) against the history `live` shows: the values its
/// Cluster recorded (and health saw; without a Cluster, those cluster.yml's `installed:` gives), whether
/// it was seen installed, and which entries are still to run; and those of each of its runs of a rollout.
pub fn check(cluster: &ClusterDir, desired: &DesiredCluster, live: &Live, seen: &Seen) -> Checked {
    let queued = preflight::queued(cluster, &desired.operations, &live.operations, seen.simulated);
    let history = History {
        previous: preflight::previous_of(live.cluster.as_ref(), seen.base)
            .or_else(|| preflight::adopted_previous(cluster)),
        installed: preflight::installed(live.cluster.as_ref(), live.operations.values(), seen.simulated),
        before: seen.before.clone(),
        removed: preflight::removed_hosts(live.operations.values(), seen.simulated),
    };
    let facts = preflight::cluster_facts(cluster, queued.clone(), history.clone(), seen.tree.clone());
    let runs = desired
        .rollouts
        .iter()
        .map(|run| {
            // A run queues after the entries of its commit: a pending cluster.yml entry comes first.
            let mut operations: Vec<(&Operation, bool)> = queued
                .iter()
                .copied()
                .filter(|(op, pending)| *pending && installs(op))
                .collect();
            operations.push((&run.entry, true));
            let facts = ClusterFacts {
                operations_path: run.path.clone(),
                operations: preflight::operation_facts(operations),
                // A rollout's steps are paths in the runner image (see super::rollout).
                repository_steps: Default::default(),
                ..facts.clone()
            };
            preflight::check_embedded(&facts)
                .into_iter()
                .filter(|f| f.operation.as_deref().is_none_or(|id| id == run.entry.id))
                .collect()
        })
        .collect();
    Checked {
        entries: preflight::check_embedded(&facts),
        runs,
    }
}

/// True for an entry that runs `cluster.yml`.
fn installs(op: &Operation) -> bool {
    op.action_type == ActionType::Playbook
        && op
            .action
            .rsplit('/')
            .next()
            .is_some_and(|f| f == "cluster.yml" || f == "cluster.yaml")
}

/// Pins what `checked` found into the operations `desired` creates (each gets the errors that refuse it;
/// a run of a rollout gets them at whatever `rerun` it is created), and keeps on the Cluster the versions
/// it recorded before unless one of them may run: the recorded values are those kok last gave a run,
/// which the next commit's rules 2 and 3 compare with. A new Cluster of a cluster installed outside kok
/// records, until a run may start, the versions its `installed:` gives (the last run was the install).
pub fn pin(desired: &mut DesiredCluster, cluster: &ClusterDir, live: &Live, checked: &Checked) {
    let mut runnable = false;
    for op in desired
        .operations
        .iter_mut()
        .filter(|op| !live.operations.contains_key(&op.name_any()))
    {
        let Some(entry) = cluster.operations.iter().find(|e| e.id == op.spec.id) else {
            continue;
        };
        runnable |= set(op, preflight::pinned(entry, &checked.entries));
    }
    for (run, found) in desired.rollouts.iter_mut().zip(&checked.runs) {
        let pinned = preflight::pinned(&run.entry, found);
        let new = !live.operations.contains_key(&run.operation.name_any());
        runnable |= set(&mut run.operation, pinned) && new;
    }
    let recorded = match &live.cluster {
        Some(c) => Some(c.spec.kubernetes.clone()),
        None => preflight::adopted_record(cluster).map(Some),
    };
    if let Some(recorded) = recorded.filter(|r| !runnable && *r != desired.cluster.spec.kubernetes) {
        desired.cluster.spec.kubernetes = recorded;
        restamp(&mut desired.cluster);
    }
}

/// Sets the pre-flight of `op`; true when nothing refuses it.
fn set(op: &mut ClusterOperation, pinned: Option<crate::api::OperationPreflight>) -> bool {
    let runnable = pinned.as_ref().is_none_or(|p| p.findings.is_empty());
    op.spec.preflight = pinned;
    runnable
}

fn restamp<K: kube::Resource + serde::Serialize>(obj: &mut K) {
    if let Some(annotations) = obj.meta_mut().annotations.as_mut() {
        annotations.remove(ANNOTATION_CONTENT_HASH);
    }
    stamp(obj);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::api::{ClusterKubernetes, ClusterOperationStatus, Phase};
    use crate::layout::rollouts::Rollout;
    use crate::layout::{parse_repo, DiskTree};
    use crate::materialize::render::{render_cluster, RenderContext};
    use crate::materialize::rollout::add_rollouts;

    /// prod-bj on kubespray v2.27.0 with `etcd` members and `kube_version`, its operations.yml `ops`.
    fn cluster(etcd: &[&str], kube_version: &str, ops: &str) -> ClusterDir {
        cluster_with(etcd, kube_version, ops, "")
    }

    /// [`cluster`] with `settings` as its cluster.yml.
    fn cluster_with(etcd: &[&str], kube_version: &str, ops: &str, settings: &str) -> ClusterDir {
        let dir = tempfile::tempdir().unwrap();
        let members: String = etcd.iter().map(|h| format!("{h}\n")).collect();
        let files = [
            ("clusters/prod-bj/cluster.yml", settings.to_string()),
            (
                "kok.yml",
                "image: quay.io/kubespray/kubespray:v2.27.0\n".to_string(),
            ),
            (
                "clusters/prod-bj/inventory.ini",
                format!("[kube_control_plane]\nn1\n\n[etcd]\n{members}\n[kube_node]\nn4\n"),
            ),
            (
                "clusters/prod-bj/vars.yml",
                format!("kube_version: {kube_version}\n"),
            ),
            ("clusters/prod-bj/operations.yml", ops.to_string()),
        ];
        for (path, text) in files.into_iter().filter(|(_, text)| !text.is_empty()) {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let parsed = parse_repo(&DiskTree::new(dir.path()), "clusters");
        assert!(!parsed.has_errors(), "{:#?}", parsed.diagnostics);
        parsed.clusters.into_iter().next().unwrap()
    }

    fn seen() -> Seen {
        Seen {
            base: Base::LastReconciled,
            simulated: false,
            tree: None,
            before: None,
        }
    }

    /// The live objects a pass leaves for `desired`: its Cluster, and its operations with `phase`.
    fn live(desired: &DesiredCluster, phase: Phase) -> Live {
        Live {
            cluster: Some(desired.cluster.clone()),
            config_maps: Default::default(),
            operations: desired
                .operations
                .iter()
                .map(|op| {
                    let mut op = op.clone();
                    op.status = Some(ClusterOperationStatus {
                        phase,
                        ..Default::default()
                    });
                    (op.name_any(), op)
                })
                .collect(),
        }
    }

    const INSTALL: &str = "- id: install\n  action: cluster.yml\n";

    #[test]
    fn a_new_operation_pins_what_refuses_it_and_the_cluster_keeps_the_versions_last_given_a_run() {
        let ctx = RenderContext::new("kok-system", "main", "1".repeat(40));
        let before = cluster(&["n1"], "v1.29.10", INSTALL);
        let first = render_cluster(&before, &ctx);
        let recorded = Some(ClusterKubernetes {
            kube_version: Some("v1.29.10".into()),
            kubespray_release: Some("v2.27.0".into()),
        });
        assert_eq!(first.cluster.spec.kubernetes, recorded);
        let live = live(&first, Phase::Succeeded);

        // A jump over v1.30 with an upgrade: refused; the Cluster keeps v1.29.10.
        let after = cluster(
            &["n1"],
            "v1.31.4",
            &format!("{INSTALL}- id: upgrade\n  action: upgrade-cluster.yml\n"),
        );
        let mut desired = render_cluster(&after, &ctx);
        assert!(creates_operations(&desired, &live));
        let checked = check(&after, &desired, &live, &seen());
        pin(&mut desired, &after, &live, &checked);
        let upgrade = desired
            .operations
            .iter()
            .find(|o| o.spec.id == "upgrade")
            .unwrap();
        let pinned = upgrade.spec.preflight.as_ref().unwrap();
        assert_eq!(pinned.findings[0].rule, "kube-version-step");
        assert_eq!(
            (pinned.findings[0].path.as_str(), pinned.findings[0].line),
            ("clusters/prod-bj/vars.yml", 1)
        );
        assert_eq!(
            desired.cluster.spec.kubernetes, recorded,
            "nothing ran with v1.31.4"
        );
        assert!(
            !upgrade
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(ANNOTATION_CONTENT_HASH)),
            "a run is created once, never compared: it carries no content hash"
        );

        // One minor at a time: the upgrade may run, and the Cluster records v1.30.4.
        let step = cluster(
            &["n1"],
            "v1.30.4",
            &format!("{INSTALL}- id: upgrade\n  action: upgrade-cluster.yml\n"),
        );
        let mut desired = render_cluster(&step, &ctx);
        let checked = check(&step, &desired, &live, &seen());
        assert_eq!(checked.entries, []);
        pin(&mut desired, &step, &live, &checked);
        assert!(desired.operations.iter().all(|o| o.spec.preflight.is_none()));
        assert_eq!(
            desired.cluster.spec.kubernetes.unwrap().kube_version.as_deref(),
            Some("v1.30.4")
        );
    }

    /// The rules of the errors pinned into the operation `id` of `desired`.
    fn refusing(desired: &DesiredCluster, id: &str) -> Vec<String> {
        let op = desired.operations.iter().find(|o| o.spec.id == id).unwrap();
        let findings = op.spec.preflight.as_ref().map(|p| p.findings.clone());
        findings.unwrap_or_default().into_iter().map(|f| f.rule).collect()
    }

    #[test]
    fn a_cluster_installed_outside_kok_may_start_with_scale_yml_and_without_installed_it_may_not() {
        let ctx = RenderContext::new("kok-system", "main", "1".repeat(40));
        let scale = "- id: add-n5\n  action: scale.yml\n  extraArgs: [--limit=n4]\n";
        let new = Live::default();
        for (settings, refused) in [
            ("installed: true\n", vec![]),
            ("installed: {kubeVersion: v1.29.10}\n", vec![]),
            ("", vec!["operation-order".to_string()]),
            ("installed: false\n", vec!["operation-order".to_string()]),
        ] {
            let dir = cluster_with(&["n1"], "v1.29.10", scale, settings);
            let mut desired = render_cluster(&dir, &ctx);
            let checked = check(&dir, &desired, &new, &seen());
            pin(&mut desired, &dir, &new, &checked);
            assert_eq!(refusing(&desired, "add-n5"), refused, "cluster.yml: {settings:?}");
        }
    }

    #[test]
    fn the_versions_installed_gives_are_the_old_ones_until_the_cluster_is_recorded() {
        let ctx = RenderContext::new("kok-system", "main", "1".repeat(40));
        let upgrade = "- id: upgrade\n  action: upgrade-cluster.yml\n";
        let adopted = "installed:\n  kubeVersion: v1.29.10\n  kubesprayVersion: v2.26.0\n";
        let new = Live::default();

        // Adopted at v1.29.10, asked for v1.31.4 at once: the step over v1.30 is refused, from cluster.yml's word.
        let jump = cluster_with(&["n1"], "v1.31.4", upgrade, adopted);
        let mut desired = render_cluster(&jump, &ctx);
        let checked = check(&jump, &desired, &new, &seen());
        let step = checked
            .entries
            .iter()
            .find(|f| f.rule == preflight::Rule::KubeVersionStep)
            .unwrap();
        assert!(
            step.message.starts_with(
                "kube_version v1.29.10 (installed outside kok, as cluster.yml's installed says) → v1.31.4 skips v1.30"
            ),
            "{}",
            step.message
        );
        pin(&mut desired, &jump, &new, &checked);
        assert_eq!(refusing(&desired, "upgrade"), ["kube-version-step"]);
        let adopted_versions = Some(ClusterKubernetes {
            kube_version: Some("v1.29.10".into()),
            kubespray_release: Some("v2.26.0".into()),
        });
        assert_eq!(
            desired.cluster.spec.kubernetes, adopted_versions,
            "nothing ran: the Cluster records what runs"
        );

        // One minor up, and one kubespray release up: it may run, and the Cluster records the revision's.
        let one = cluster_with(&["n1"], "v1.30.4", upgrade, adopted);
        let mut desired = render_cluster(&one, &ctx);
        let checked = check(&one, &desired, &new, &seen());
        assert_eq!(checked.entries, []);
        pin(&mut desired, &one, &new, &checked);
        assert_eq!(refusing(&desired, "upgrade"), Vec::<String>::new());
        assert_eq!(
            desired
                .cluster
                .spec
                .kubernetes
                .clone()
                .unwrap()
                .kube_version
                .as_deref(),
            Some("v1.30.4")
        );

        // Once kok has the Cluster, its record wins over cluster.yml's word, which may grow old.
        let live = live(&desired, Phase::Succeeded);
        let later = cluster_with(
            &["n1"],
            "v1.31.4",
            &format!("{upgrade}- id: again\n  action: upgrade-cluster.yml\n"),
            adopted,
        );
        let desired = render_cluster(&later, &ctx);
        assert_eq!(check(&later, &desired, &live, &seen()).entries, []);
    }

    #[test]
    fn a_run_of_a_rollout_is_checked_against_its_clusters_inventory_and_points_at_its_file() {
        let ctx = RenderContext::new("kok-system", "main", "1".repeat(40));
        let even = cluster(&["n1", "n2"], "v1.29.10", INSTALL);
        let mut desired = render_cluster(&even, &ctx);
        let installed = live(&desired, Phase::Succeeded);
        let mut rollout = Rollout::of_waves(
            "upgrade-1-30",
            "upgrade_cluster.yml",
            &[("all", &["prod-bj"], None)],
        );
        rollout.operation.line = 3;
        add_rollouts(&mut desired, &even, &[(&rollout, "all")], &BTreeSet::new(), &ctx);
        assert!(creates_operations(&desired, &installed));
        let checked = check(&even, &desired, &installed, &seen());
        pin(&mut desired, &even, &installed, &checked);
        let run = &desired.rollouts[0].operation;
        let rules: Vec<(&str, &str)> = run
            .spec
            .preflight
            .as_ref()
            .unwrap()
            .findings
            .iter()
            .map(|f| (f.rule.as_str(), f.path.as_str()))
            .collect();
        assert_eq!(
            rules,
            [
                ("etcd-odd", "clusters/prod-bj/inventory.ini"),
                ("playbook-exists", "rollouts/upgrade-1-30.yml")
            ]
        );
        let all: Vec<&str> = checked.all().map(|f| f.rule.id()).collect();
        assert_eq!(all, ["etcd-odd", "playbook-exists"], "the cluster's finding once");
    }
}
