//! Upgrade paths: the steps from a cluster's `kube_version` and kubespray release to the ones a commit asks
//! for, one Kubernetes minor and one kubespray minor release at a time, each step with the release (from the
//! data) that installs its `kube_version`; and the commits that would take them, ready to paste.

use super::{Minor, Release, Releases, Version};

/// One step of an upgrade path: a commit that sets `kube_version` (and the image, when the release moves) and
/// runs `upgrade-cluster.yml`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpgradeStep {
    /// The Kubernetes version of the step, as its release writes it (`v1.30.6`, from v2.28 `1.30.6`).
    pub kube_version: String,
    /// The kubespray release that installs it.
    pub release: Version,
    /// True when the step moves the release (its image changes).
    pub release_moves: bool,
}

impl UpgradeStep {
    /// `v1.30.6 (kubespray v2.27.0)`.
    pub fn short(&self) -> String {
        format!("{} (kubespray {})", self.kube_version, self.release)
    }
}

/// How many steps a path may have: more is a loop in the data, not an upgrade.
const MOST_STEPS: usize = 64;

/// The kube version of `minor` a step on `release` sets: `target` where it is of that minor and the release
/// installs it, else the newest patch the release installs of it.
fn pick(release: &Release, minor: Minor, target: Version) -> Option<Version> {
    if target.minor_line() == minor && release.installs(target) {
        return Some(target);
    }
    release.versions_of(minor).last().copied()
}

/// The release one minor release after `from` on the way to `to`: `to` itself on its own minor line, else
/// the newest patch release of the next line in the data.
fn next_release(from: Version, to: Version, data: &Releases) -> Option<Version> {
    if from.minor_line() == to.minor_line() || from >= to {
        return (from < to).then_some(to);
    }
    let next = from.minor_line().next();
    if next == to.minor_line() {
        return Some(to);
    }
    data.iter().rev().map(|(v, _)| v).find(|v| v.minor_line() == next)
}

/// The steps from `kube_version` `from_kube` on `from_release` to `to_kube` on `to_release`: each moves the
/// Kubernetes minor by one (on the release of the step before, when it installs the next minor) or the
/// release by one minor release (keeping the Kubernetes minor when the new release installs it, else moving
/// it by one too). Empty when there is nothing to do or kok's data cannot tell; a path that the data cannot
/// finish stops where it can go no further.
pub fn upgrade_path(
    from_kube: Version,
    from_release: Version,
    to_kube: Version,
    to_release: Version,
    data: &Releases,
) -> Vec<UpgradeStep> {
    let mut steps = Vec::new();
    let (mut kube, mut release) = (from_kube, from_release);
    let target = to_kube.minor_line();
    while steps.len() < MOST_STEPS && (kube != to_kube || release != to_release) {
        let here = data.get(release);
        let writes = |r: Version, k: Version| match data.get(r).is_some_and(Release::writes_v) {
            true => k.to_string(),
            false => k.to_string().trim_start_matches('v').to_string(),
        };
        // A Kubernetes minor on the release the cluster has.
        if kube.minor_line() < target {
            let next = kube.minor_line().next();
            if let Some(k) = here.and_then(|r| pick(r, next, to_kube)) {
                kube = k;
                steps.push(UpgradeStep {
                    kube_version: writes(release, k),
                    release,
                    release_moves: false,
                });
                continue;
            }
        }
        // The release by one minor release, with the Kubernetes minor it can keep or reach.
        if let Some(r) = next_release(release, to_release, data) {
            let Some(data_r) = data.get(r) else { break };
            let keep = match kube.minor_line() == target {
                true => pick(data_r, target, to_kube),
                false => data_r.versions_of(kube.minor_line()).last().copied(),
            };
            let moved =
                || (kube.minor_line() < target).then(|| pick(data_r, kube.minor_line().next(), to_kube))?;
            let Some(k) = keep.filter(|k| *k >= kube).or_else(moved) else {
                break;
            };
            kube = k;
            release = r;
            steps.push(UpgradeStep {
                kube_version: writes(r, k),
                release: r,
                release_moves: true,
            });
            continue;
        }
        // Only the patch is left, on the release asked for.
        if kube.minor_line() == target && release == to_release && here.is_some_and(|r| r.installs(to_kube)) {
            kube = to_kube;
            steps.push(UpgradeStep {
                kube_version: writes(release, to_kube),
                release,
                release_moves: false,
            });
            continue;
        }
        break;
    }
    steps
}

/// The steps as the `operations.yml` entries (and the values to set beside them) that take them, one commit
/// each, ready to paste: `kube_version` written at `kube_version_at`, the image (`image` with the step's tag)
/// at `image_at`.
pub fn paste(steps: &[UpgradeStep], image: &str, kube_version_at: &str, image_at: &str) -> String {
    let repository = image
        .rsplit_once(':')
        .map_or(image, |(name, tag)| if tag.contains('/') { image } else { name });
    let mut out = String::new();
    for (i, step) in steps.iter().enumerate() {
        let id = format!(
            "upgrade-{}",
            step.kube_version.trim_start_matches('v').replace('.', "-")
        );
        out.push_str(&format!(
            "# commit {} of {}: kube_version: {} in {kube_version_at}",
            i + 1,
            steps.len(),
            step.kube_version
        ));
        if step.release_moves {
            out.push_str(&format!("; image: {repository}:{} in {image_at}", step.release));
        }
        out.push_str(&format!("\n- id: {id}\n  action: upgrade-cluster.yml\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(text: &str) -> Version {
        Version::parse(text).unwrap()
    }

    fn data() -> &'static Releases {
        Releases::embedded().unwrap()
    }

    #[test]
    fn two_minors_on_one_release_are_two_steps_each_on_it() {
        let steps = upgrade_path(v("v1.29.10"), v("v2.27.0"), v("v1.31.4"), v("v2.27.0"), data());
        let shown: Vec<String> = steps.iter().map(UpgradeStep::short).collect();
        let r = data().get(v("v2.27.0")).unwrap();
        let newest_30 = r
            .versions_of(Minor { major: 1, minor: 30 })
            .last()
            .copied()
            .unwrap();
        assert_eq!(
            shown,
            [
                format!("{newest_30} (kubespray v2.27.0)"),
                "v1.31.4 (kubespray v2.27.0)".to_string()
            ]
        );
        assert!(steps.iter().all(|s| !s.release_moves));
    }

    #[test]
    fn a_release_jump_goes_one_minor_release_at_a_time_and_ends_on_the_versions_asked_for() {
        let steps = upgrade_path(v("v1.28.6"), v("v2.25.0"), v("v1.31.4"), v("v2.27.0"), data());
        assert!(!steps.is_empty());
        let last = steps.last().unwrap();
        assert_eq!(
            (last.kube_version.as_str(), last.release),
            ("v1.31.4", v("v2.27.0"))
        );
        let mut kube = v("v1.28.6");
        let mut release = v("v2.25.0");
        for step in &steps {
            let k = Version::parse(&step.kube_version).unwrap();
            assert!(k.minor <= kube.minor + 1 && k >= kube, "{steps:?}");
            assert!(
                step.release.minor <= release.minor + 1 && step.release >= release,
                "{steps:?}"
            );
            assert!(
                data().get(step.release).unwrap().installs(k),
                "{step:?} installs its version"
            );
            (kube, release) = (k, step.release);
        }
        assert!(steps
            .iter()
            .any(|s| s.release.minor_line() == Minor { major: 2, minor: 26 }));
    }

    #[test]
    fn the_steps_paste_as_one_entry_and_the_values_of_each_commit() {
        let steps = [
            UpgradeStep {
                kube_version: "v1.30.6".into(),
                release: v("v2.27.0"),
                release_moves: true,
            },
            UpgradeStep {
                kube_version: "v1.31.4".into(),
                release: v("v2.27.0"),
                release_moves: false,
            },
        ];
        let text = paste(
            &steps,
            "quay.io/kubespray/kubespray:v2.26.0",
            "clusters/a/vars.yml",
            "clusters/a/cluster.yml",
        );
        assert_eq!(
            text,
            "# commit 1 of 2: kube_version: v1.30.6 in clusters/a/vars.yml; image: \
             quay.io/kubespray/kubespray:v2.27.0 in clusters/a/cluster.yml\n- id: upgrade-1-30-6\n  action: \
             upgrade-cluster.yml\n# commit 2 of 2: kube_version: v1.31.4 in clusters/a/vars.yml\n- id: \
             upgrade-1-31-4\n  action: upgrade-cluster.yml\n"
        );
    }
}
