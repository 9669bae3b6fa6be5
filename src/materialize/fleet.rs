//! Writing the `FleetRollout` objects: which to apply or delete, and which clusters each change
//! touches (pure, [`decide_rollouts`]); then the writes ([`apply_rollouts`]).
//!
//! A rollout whose spec is unchanged but for the revision it was rendered at is not written again, so
//! its object keeps naming the commit that introduced or last changed it (where its commit status goes).
//! A rollout whose file is broken keeps its object as it is.

use std::collections::{BTreeMap, BTreeSet};

use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use tracing::info;

use super::apply::ApplyError;
use crate::api::{managed_selector, FleetRollout, FIELD_MANAGER, FLEET_ROLLOUT_KIND};

/// What the rollout objects need: the ones to apply, the ones to delete, and the clusters whose runs
/// of them may change (the clusters of their waves before and after).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RolloutWrites {
    /// Objects to apply (created or changed).
    pub apply: Vec<FleetRollout>,
    /// Names of the objects to delete (their file is gone).
    pub delete: Vec<String>,
    /// Clusters that take or took part in a rollout that changed.
    pub touched: BTreeSet<String>,
}

fn clusters_of(r: &FleetRollout) -> impl Iterator<Item = &String> {
    r.spec.waves.iter().flat_map(|w| &w.clusters)
}

/// The spec and labels of a rollout, its revision left out.
fn unrevised(r: &FleetRollout) -> (crate::api::FleetRolloutSpec, Option<&BTreeMap<String, String>>) {
    let mut spec = r.spec.clone();
    spec.source.revision.clear();
    (spec, r.metadata.labels.as_ref())
}

/// Decides the writes from the `live` rollout objects and the `desired` ones; `broken` names the
/// rollouts whose file is present but refused (kept as they are).
pub fn decide_rollouts(
    live: &[FleetRollout],
    desired: &[FleetRollout],
    broken: &BTreeSet<String>,
) -> RolloutWrites {
    let live: BTreeMap<String, &FleetRollout> = live.iter().map(|r| (r.name_any(), r)).collect();
    let mut out = RolloutWrites::default();
    let wanted: BTreeSet<String> = desired.iter().map(|r| r.name_any()).collect();
    for r in desired {
        let before = live.get(&r.name_any());
        if before.is_some_and(|b| unrevised(b) == unrevised(r)) {
            continue;
        }
        out.touched.extend(clusters_of(r).cloned());
        out.touched
            .extend(before.into_iter().flat_map(|b| clusters_of(b)).cloned());
        out.apply.push(r.clone());
    }
    for (name, r) in &live {
        if !wanted.contains(name) && !broken.contains(name) {
            out.touched.extend(clusters_of(r).cloned());
            out.delete.push(name.clone());
        }
    }
    out
}

/// The rollout objects kok manages in `namespace` (one list).
pub async fn live_rollouts(client: &Client, namespace: &str) -> Result<Vec<FleetRollout>, ApplyError> {
    let api: Api<FleetRollout> = Api::namespaced(client.clone(), namespace);
    let lp = ListParams::default().labels(&managed_selector());
    let list = api.list(&lp).await.map_err(|source| ApplyError::List {
        kind: FLEET_ROLLOUT_KIND,
        cluster: "*".to_string(),
        namespace: namespace.to_string(),
        source: Box::new(source),
    })?;
    Ok(list.items)
}

/// Makes `writes` (server-side apply, and deletes where NotFound is success); returns how many.
pub async fn apply_rollouts(
    client: &Client,
    namespace: &str,
    writes: &RolloutWrites,
) -> Result<usize, ApplyError> {
    let api: Api<FleetRollout> = Api::namespaced(client.clone(), namespace);
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    for r in &writes.apply {
        let name = r.name_any();
        api.patch(&name, &pp, &Patch::Apply(r))
            .await
            .map_err(|source| ApplyError::WriteRollout {
                name: name.clone(),
                namespace: namespace.to_string(),
                source: Box::new(source),
            })?;
        info!(rollout = %name, revision = %r.spec.source.revision, "rollout applied");
    }
    for name in &writes.delete {
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => info!(rollout = %name, "rollout removed"),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => {
                return Err(ApplyError::Delete {
                    kind: FLEET_ROLLOUT_KIND,
                    name: name.clone(),
                    namespace: namespace.to_string(),
                    source: Box::new(source),
                })
            }
        }
    }
    Ok(writes.apply.len() + writes.delete.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{FleetRolloutSpec, RolloutSource, RolloutWave};

    fn rollout(name: &str, waves: &[(&str, &[&str])], revision: &str) -> FleetRollout {
        let mut r = FleetRollout::new(
            name,
            FleetRolloutSpec {
                operation_id: "up".into(),
                digest: "d".into(),
                action: "up.yml".into(),
                waves: waves
                    .iter()
                    .map(|(w, cs)| RolloutWave {
                        name: w.to_string(),
                        clusters: cs.iter().map(|c| c.to_string()).collect(),
                        max_parallel: None,
                    })
                    .collect(),
                source: RolloutSource {
                    path: format!("rollouts/{name}.yml"),
                    revision: revision.into(),
                },
                ..FleetRolloutSpec::default()
            },
        );
        r.metadata.name = Some(name.into());
        r
    }

    #[test]
    fn an_unchanged_rollout_is_not_written_at_a_later_commit_and_a_changed_one_touches_its_clusters() {
        let live = [rollout(
            "up",
            &[("canary", &["a"]), ("rest", &["b"])],
            "main@sha1:1",
        )];
        let same = [rollout(
            "up",
            &[("canary", &["a"]), ("rest", &["b"])],
            "main@sha1:2",
        )];
        assert_eq!(
            decide_rollouts(&live, &same, &BTreeSet::new()),
            RolloutWrites::default()
        );

        let moved = [rollout(
            "up",
            &[("canary", &["a"]), ("rest", &["c"])],
            "main@sha1:2",
        )];
        let w = decide_rollouts(&live, &moved, &BTreeSet::new());
        assert_eq!(w.apply, moved);
        assert_eq!(w.touched, ["a", "b", "c"].map(String::from).into());
    }

    #[test]
    fn a_removed_rollout_is_deleted_and_a_broken_one_kept() {
        let live = [rollout("up", &[("all", &["a"])], "main@sha1:1")];
        let w = decide_rollouts(&live, &[], &BTreeSet::new());
        assert_eq!(
            (w.delete, w.touched),
            (vec!["up".to_string()], ["a".to_string()].into())
        );
        let kept = decide_rollouts(&live, &[], &["up".to_string()].into());
        assert_eq!(kept, RolloutWrites::default());
    }
}
