//! A validated rollout file → its desired `FleetRollout` object (pure).

use std::collections::BTreeMap;

use kube::api::ObjectMeta;

use super::names::operation_digest;
use super::render::{push_document, stamp, RenderContext, RenderError};
use crate::api::{
    FleetRollout, FleetRolloutSpec, RolloutSource, RolloutWave, ANNOTATION_REVISION, ANNOTATION_SOURCE_PATH,
    LABEL_MANAGED_BY, LABEL_ROLLOUT, MANAGED_BY,
};
use crate::layout::rollouts::{MaxParallel, Rollout};

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
