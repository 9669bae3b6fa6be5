//! A validated rollout file → its desired `FleetRollout` object, and each participating cluster's run
//! of its operation (pure).
//!
//! A cluster's run of a rollout is a ClusterOperation in the cluster's own queue, rendered as an entry
//! its operations.yml gained in the reconciled commit would be (after the entries of that commit), with:
//!
//! - `spec.rollout`: the rollout's name and the `rerun` the run was created at;
//! - `spec.digest`: [`run_digest`] of the operation entry's digest, the rollout and that `rerun`, so the
//!   name `<cluster>-<id>-<digest8>` is new when the entry is edited (a new run everywhere) or when a
//!   `rerun` bump runs the cluster again, and the same otherwise (editing waves, bake, maxParallel,
//!   maxFailures or stopAfter runs nothing again);
//! - labels `kok.dev/rollout=<name>` ([`LABEL_ROLLOUT`]) and `kok.dev/wave=<wave>` ([`LABEL_WAVE`], kept
//!   current when the cluster moves to another wave), besides the cluster's and `kok.dev/current`.
//!
//! Which `rerun` a cluster's run has is decided at apply time from the live runs ([`resolve_runs`]):
//! the latest run of the same entry is kept unless it failed or was canceled and the rollout's `rerun`
//! is higher; then a new run replaces it.

use std::collections::{BTreeMap, BTreeSet};

use kube::api::ObjectMeta;
use kube::ResourceExt;
use serde_json::json;

use super::names::{operation_digest, operation_name};
use super::render::{cluster_operation, push_document, queue_position, stamp, DesiredCluster};
use super::render::{RenderContext, RenderError};
use crate::api::{
    ClusterOperation, FleetRollout, FleetRolloutSpec, OperationRollout, Phase, RolloutSource, RolloutWave,
    ANNOTATION_REVISION, ANNOTATION_SOURCE_PATH, LABEL_CURRENT, LABEL_MANAGED_BY, LABEL_ROLLOUT, LABEL_WAVE,
    MANAGED_BY,
};
use crate::layout::rollouts::{MaxParallel, Rollout};
use crate::layout::{ClusterDir, Operation};

/// Commit index of the rollouts' runs in their queue position: after every entry the cluster's own
/// operations.yml gained in the reconciled range.
const ROLLOUT_COMMIT_INDEX: usize = 999_999;
/// File index of the first rollout's runs (rollouts in name order), after any operations.yml entry.
const ROLLOUT_FILE_INDEX: usize = 9_000;

/// The digest of a cluster's run of rollout `rollout` at `rerun`, for an operation entry of digest
/// `entry_digest`.
pub fn run_digest(entry_digest: &str, rollout: &str, rerun: u64) -> String {
    operation_digest(&json!({"operation": entry_digest, "rollout": rollout, "rerun": rerun}))
}

/// One cluster's run of a rollout as rendered at the rollout's current `rerun`; [`RolloutOperation::at`]
/// gives it at another.
#[derive(Clone, Debug, PartialEq)]
pub struct RolloutOperation {
    /// The rollout's name.
    pub rollout: String,
    /// The rollout's current `rerun`.
    pub rerun: u64,
    /// Digest of the rollout's operation entry.
    pub entry_digest: String,
    /// The run at `rerun`.
    pub operation: ClusterOperation,
    /// The rollout's operation entry, for pre-flight.
    pub entry: Operation,
    /// The rollout file's path relative to the repository root, where pre-flight's findings about the
    /// run point.
    pub path: String,
}

impl RolloutOperation {
    /// The run created at `rerun` (its name and digest follow).
    pub fn at(&self, rerun: u64) -> ClusterOperation {
        if rerun == self.rerun {
            return self.operation.clone();
        }
        let mut op = self.operation.clone();
        op.spec.digest = run_digest(&self.entry_digest, &self.rollout, rerun);
        if let Some(r) = op.spec.rollout.as_mut() {
            r.rerun = rerun;
        }
        op.metadata.name = Some(operation_name(&op.spec.cluster, &op.spec.id, &op.spec.digest));
        op
    }

    /// The wave the cluster is in.
    pub fn wave(&self) -> &str {
        wave_of(&self.operation).unwrap_or_default()
    }
}

/// The `kok.dev/wave` label of an operation.
pub fn wave_of(op: &ClusterOperation) -> Option<&str> {
    op.metadata.labels.as_ref()?.get(LABEL_WAVE).map(String::as_str)
}

/// Each cluster's rollouts, with the wave that took it: what [`add_rollouts`] takes for each cluster.
/// Every cluster a pass (or `kok plan`) decides must be given its rollouts, else its live runs of them
/// count as removed.
pub fn memberships(rollouts: &[Rollout]) -> BTreeMap<String, Vec<(&Rollout, &str)>> {
    let mut m: BTreeMap<String, Vec<(&Rollout, &str)>> = BTreeMap::new();
    for r in rollouts {
        for w in &r.waves {
            for c in &w.clusters {
                m.entry(c.clone()).or_default().push((r, w.name.as_str()));
            }
        }
    }
    m
}

/// Adds to `desired` (rendered from `cluster`) its runs of `rollouts`, each given with the wave that
/// took the cluster; `broken` names the rollouts whose file is broken, whose runs stay as they are.
pub fn add_rollouts(
    desired: &mut DesiredCluster,
    cluster: &ClusterDir,
    rollouts: &[(&Rollout, &str)],
    broken: &BTreeSet<String>,
    ctx: &RenderContext,
) {
    let pins = desired.cluster.spec.clone();
    for (i, (rollout, wave)) in rollouts.iter().enumerate() {
        let op = rollout_operation(cluster, rollout, wave, ctx, &pins, ROLLOUT_FILE_INDEX + i);
        desired.rollouts.push(op);
    }
    desired.kept_rollouts = broken.clone();
}

fn rollout_operation(
    cluster: &ClusterDir,
    rollout: &Rollout,
    wave: &str,
    ctx: &RenderContext,
    pins: &crate::api::ClusterSpec,
    file_index: usize,
) -> RolloutOperation {
    let entry_digest = operation_digest(&rollout.operation.entry);
    let mut op = cluster_operation(cluster, &rollout.operation, ctx, pins);
    let spec = &mut op.spec;
    // A rollout's steps are paths in the runner image: its file is read apart from the clusters, so their
    // repository files are not known here (and a run must not depend on what the cluster's own entries pin).
    spec.repository_files = Vec::new();
    spec.digest = run_digest(&entry_digest, &rollout.name, rollout.rerun);
    spec.rollout = Some(OperationRollout {
        name: rollout.name.clone(),
        rerun: rollout.rerun,
    });
    spec.source.commit = ctx.commit.clone();
    spec.source.revision = ctx.revision();
    spec.queue_position = queue_position(&ctx.queue_base, ROLLOUT_COMMIT_INDEX, file_index);
    op.metadata.name = Some(operation_name(
        &cluster.name,
        &rollout.operation.id,
        &op.spec.digest,
    ));
    let labels = op.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(LABEL_ROLLOUT.to_string(), rollout.name.clone());
    labels.insert(LABEL_WAVE.to_string(), wave.to_string());
    let annotations = op.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(ANNOTATION_REVISION.to_string(), ctx.revision());
    RolloutOperation {
        rollout: rollout.name.clone(),
        rerun: rollout.rerun,
        entry_digest,
        operation: op,
        entry: rollout.operation.clone(),
        path: rollout.path.clone(),
    }
}

/// The rollout a live operation is a run of, when it is one.
pub fn rollout_of(op: &ClusterOperation) -> Option<&OperationRollout> {
    op.spec.rollout.as_ref()
}

fn is_current(op: &ClusterOperation) -> bool {
    op.labels().get(LABEL_CURRENT).map(String::as_str) == Some("true")
}

/// The runs `desired`'s cluster should have of its rollouts, given its live operations: for each
/// rollout, the latest current run of the same entry is kept (at its `rerun`) unless it failed or was
/// canceled and the rollout's `rerun` is higher (rule 3); without one, a run at the rollout's `rerun`.
pub fn resolve_runs<'a>(
    live: impl Iterator<Item = &'a ClusterOperation> + Clone,
    desired: &DesiredCluster,
) -> Vec<ClusterOperation> {
    desired
        .rollouts
        .iter()
        .map(|r| {
            let latest = live
                .clone()
                .filter(|op| is_current(op))
                .filter_map(|op| Some((op, rollout_of(op)?)))
                .filter(|(op, of)| {
                    of.name == r.rollout
                        && op.spec.digest == run_digest(&r.entry_digest, &r.rollout, of.rerun)
                })
                .max_by_key(|(_, of)| of.rerun);
            let rerun = match latest {
                Some((op, of)) => {
                    let phase = op.status.as_ref().map(|s| s.phase).unwrap_or_default();
                    let failed = matches!(phase, Phase::Failed | Phase::Canceled);
                    if failed && of.rerun < r.rerun {
                        r.rerun
                    } else {
                        of.rerun
                    }
                }
                None => r.rerun,
            };
            r.at(rerun)
        })
        .collect()
}

/// The `FleetRollout` named after `rollout`'s file: its operation's id and digest, its waves with their
/// clusters, bake, maxFailures, stopAfter and rerun, labelled with [`LABEL_ROLLOUT`] and stamped with its
/// content hash.
pub fn render_rollout(rollout: &Rollout, ctx: &RenderContext) -> FleetRollout {
    let revision = ctx.revision();
    let waves = rollout
        .waves
        .iter()
        .map(|w| RolloutWave {
            name: w.name.clone(),
            clusters: w.clusters.clone(),
            max_parallel: w.max_parallel.map(|m| match m {
                MaxParallel::Count(n) => n.to_string(),
                MaxParallel::Percent(p) => format!("{p}%"),
            }),
        })
        .collect();
    let mut obj = FleetRollout::new(
        &rollout.name,
        FleetRolloutSpec {
            operation_id: rollout.operation.id.clone(),
            digest: operation_digest(&rollout.operation.entry),
            action: rollout.operation.action.clone(),
            waves,
            bake_seconds: rollout.bake.as_secs(),
            max_failures: rollout.max_failures,
            stop_after: rollout.stop_after.map(|i| rollout.waves[i].name.clone()),
            rerun: rollout.rerun,
            source: RolloutSource {
                path: rollout.path.clone(),
                revision: revision.clone(),
            },
        },
    );
    obj.metadata = ObjectMeta {
        name: Some(rollout.name.clone()),
        namespace: Some(ctx.namespace.clone()),
        labels: Some(BTreeMap::from([
            (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
            (LABEL_ROLLOUT.to_string(), rollout.name.clone()),
        ])),
        annotations: Some(BTreeMap::from([
            (ANNOTATION_REVISION.to_string(), revision),
            (ANNOTATION_SOURCE_PATH.to_string(), rollout.path.clone()),
        ])),
        ..ObjectMeta::default()
    };
    stamp(&mut obj);
    obj
}

/// The rollouts as one YAML stream, each document starting with `---`, like `kok render`'s clusters.
pub fn rollouts_yaml(rollouts: &[FleetRollout]) -> Result<String, RenderError> {
    let mut out = String::new();
    for r in rollouts {
        push_document(&mut out, r, r.metadata.name.as_deref().unwrap_or_default())?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ANNOTATION_CONTENT_HASH;

    fn rollout() -> Rollout {
        let mut r = Rollout::of_waves(
            "upgrade-1-31",
            "upgrade-cluster.yml",
            &[
                ("canary", &["prod-sh-1"], None),
                (
                    "rest",
                    &["prod-bj-1", "prod-sh-2"],
                    Some(MaxParallel::Percent(25)),
                ),
            ],
        );
        r.bake = jiff::SignedDuration::from_mins(30);
        (r.max_failures, r.stop_after, r.rerun) = (1, Some(0), 2);
        r
    }

    fn desired(r: &Rollout) -> DesiredCluster {
        let dir = ClusterDir {
            name: "prod-bj-1".into(),
            path: "clusters/prod-bj-1".into(),
            inventory_dir: crate::layout::InventoryDir {
                inventory_file: "hosts.yml".into(),
                hosts_yml: "all: {}\n".into(),
                vars_yml: Some("{}\n".into()),
                vars_files: vec![],
            },
            inventory: Default::default(),
            operations: vec![],
            settings: Default::default(),
            kubespray: None,
            repository_files: Default::default(),
        };
        let ctx = RenderContext::new("kok-system", "main", "2".repeat(40));
        let mut d = super::super::render_cluster(&dir, &ctx);
        add_rollouts(&mut d, &dir, &[(r, "rest")], &BTreeSet::new(), &ctx);
        d
    }

    fn with_phase(mut op: ClusterOperation, phase: Phase, current: bool) -> ClusterOperation {
        op.status = Some(crate::api::ClusterOperationStatus {
            phase,
            ..Default::default()
        });
        if current {
            op.metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .insert(LABEL_CURRENT.into(), "true".into());
        }
        op
    }

    #[test]
    fn a_rerun_bump_makes_a_new_run_only_where_the_latest_failed_or_was_canceled() {
        let mut r = rollout();
        let first = desired(&r);
        let run0 = first.rollouts[0].operation.clone();
        assert_eq!(wave_of(&run0), Some("rest"));
        assert_eq!(run0.labels()[LABEL_ROLLOUT], "upgrade-1-31");
        assert_eq!(run0.spec.rollout.as_ref().map(|x| x.rerun), Some(2));

        r.rerun = 3;
        let bumped = desired(&r);
        let name = |ops: Vec<ClusterOperation>| ops[0].name_any();
        for (phase, again) in [
            (Phase::Failed, true),
            (Phase::Canceled, true),
            (Phase::Succeeded, false),
            (Phase::Running, false),
            (Phase::Queued, false),
        ] {
            let live = [with_phase(run0.clone(), phase, true)];
            let resolved = name(resolve_runs(live.iter(), &bumped));
            assert_eq!(resolved != run0.name_any(), again, "{phase:?}");
        }
        let none: [ClusterOperation; 0] = [];
        assert_ne!(
            name(resolve_runs(none.iter(), &bumped)),
            run0.name_any(),
            "a cluster new to it"
        );
        let retired = [with_phase(run0.clone(), Phase::Succeeded, false)];
        assert_eq!(
            name(resolve_runs(retired.iter(), &first)),
            run0.name_any(),
            "not current: rendered afresh, at the rollout's rerun"
        );
        let mut edited = r.clone();
        edited.operation.entry["extraArgs"] = serde_json::json!(["-e", "x=1"]);
        let live = [with_phase(run0.clone(), Phase::Succeeded, true)];
        assert_ne!(
            name(resolve_runs(live.iter(), &desired(&edited))),
            run0.name_any(),
            "an edit"
        );
    }

    #[test]
    fn a_rollout_renders_its_waves_limits_and_the_operation_digest() {
        let ctx = RenderContext::new("kok-system", "main", "1".repeat(40));
        let obj = render_rollout(&rollout(), &ctx);
        let spec = &obj.spec;
        assert_eq!(obj.metadata.name.as_deref(), Some("upgrade-1-31"));
        assert_eq!(
            obj.metadata.labels.as_ref().unwrap()[LABEL_ROLLOUT],
            "upgrade-1-31"
        );
        assert!(obj
            .metadata
            .annotations
            .as_ref()
            .unwrap()
            .contains_key(ANNOTATION_CONTENT_HASH));
        assert_eq!(spec.digest, operation_digest(&rollout().operation.entry));
        assert_eq!(spec.waves[1].clusters, ["prod-bj-1", "prod-sh-2"]);
        assert_eq!(spec.waves[1].max_parallel.as_deref(), Some("25%"));
        assert_eq!(spec.waves[0].max_parallel, None);
        assert_eq!((spec.bake_seconds, spec.max_failures, spec.rerun), (1800, 1, 2));
        assert_eq!(spec.stop_after.as_deref(), Some("canary"));
        assert_eq!(spec.source.revision, format!("main@sha1:{}", "1".repeat(40)));

        let mut moved = rollout();
        moved.stop_after = Some(1);
        let again = render_rollout(&moved, &ctx);
        assert_eq!(
            again.spec.digest, spec.digest,
            "moving stopAfter is not a new run"
        );
        let mut edited = rollout();
        edited.operation.entry["extraArgs"] = serde_json::json!(["-e", "kube_version=v1.31.5"]);
        assert_ne!(
            render_rollout(&edited, &ctx).spec.digest,
            spec.digest,
            "editing the operation is"
        );
    }
}
