//! What kok knows of each kubespray release: `releases.json`, generated from kubespray's tags by
//! `scripts/kubespray-releases.py`, embedded in the binary and parsed once.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::LazyLock;

use serde::Deserialize;

/// The generated data, as built into the binary.
const EMBEDDED: &str = include_str!("releases.json");

/// A problem with release data or with a version written somewhere.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReleasesError {
    /// The data file is not what `scripts/kubespray-releases.py` writes.
    #[error("kubespray release data does not parse: {0}: regenerate it with scripts/kubespray-releases.py")]
    ParseData(String),
    /// A checksums file (of a checked-out kubespray tree) does not parse.
    #[error("kubespray checksums file does not parse: {0}")]
    ParseChecksums(String),
}

/// A `major.minor.patch` version, a kubespray release (`v2.27.0`) or a Kubernetes version (`v1.31.4`). It is
/// read with or without the leading `v` and always shown with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// `2` in `v2.27.0`.
    pub major: u64,
    /// `27` in `v2.27.0`.
    pub minor: u64,
    /// `0` in `v2.27.0`.
    pub patch: u64,
}

impl Version {
    /// `v1.31.4` or `1.31.4`; anything else (a pre-release, a template, two numbers) is `None`.
    pub fn parse(text: &str) -> Option<Version> {
        let text = text.trim();
        let text = text.strip_prefix('v').unwrap_or(text);
        let mut parts = text.split('.');
        let mut number = || -> Option<u64> {
            let part = parts.next()?;
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            part.parse().ok()
        };
        let version = Version {
            major: number()?,
            minor: number()?,
            patch: number()?,
        };
        parts.next().is_none().then_some(version)
    }

    /// The `major.minor` line this version belongs to.
    pub fn minor_line(&self) -> Minor {
        Minor {
            major: self.major,
            minor: self.minor,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Version::parse(&text).ok_or_else(|| serde::de::Error::custom(format!("{text:?} is not a version")))
    }
}

/// A `major.minor` line (`v1.30`, `v2.27`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Minor {
    /// `1` in `v1.30`.
    pub major: u64,
    /// `30` in `v1.30`.
    pub minor: u64,
}

impl Minor {
    /// The next minor line of the same major.
    pub fn next(&self) -> Minor {
        Minor {
            major: self.major,
            minor: self.minor + 1,
        }
    }
}

impl fmt::Display for Minor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}", self.major, self.minor)
    }
}

/// A place in kubespray's tree: the file and 1-based line a rule cites.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Place {
    /// Path inside kubespray's repository, e.g. `roles/validate_inventory/tasks/main.yml`.
    pub path: String,
    /// 1-based line.
    pub line: usize,
}

/// A default value of kubespray's role defaults, and where it is written.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct RoleDefault<T> {
    /// The value, evaluated when kubespray writes it as a template of the checksums.
    pub value: T,
    /// File of kubespray's role defaults.
    pub path: String,
    /// 1-based line.
    pub line: usize,
    /// The template as kubespray writes it, when the value had to be evaluated.
    #[serde(default)]
    pub template: Option<String>,
}

/// One of kubespray's assertions kok repeats, where it lives and what it says.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Check {
    /// The task's name, e.g. `Stop if even number of etcd hosts`.
    pub task: String,
    /// File of the task inside kubespray's repository.
    pub path: String,
    /// 1-based line of the task (or of the assertion's expression, when the task asserts several).
    pub line: usize,
    /// The asserted expression, as kubespray writes it.
    #[serde(default)]
    pub that: Option<String>,
    /// The task's `when` conditions.
    #[serde(default)]
    pub when: Vec<String>,
    /// The groups that must not be empty (for `control_plane_not_empty`).
    #[serde(default)]
    pub groups: Vec<String>,
    /// The group counted when `etcd` is not defined (for `etcd_odd` from v2.28: `kube_control_plane`).
    #[serde(default)]
    pub fallback_group: Option<String>,
}

/// The assertions of a release kok repeats; `None` where the release has no such assertion.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Checks {
    /// `Stop if kube_control_plane group is empty` (up to v2.25 also `kube_node`).
    pub control_plane_not_empty: Option<Check>,
    /// `Stop if etcd group is empty in external etcd mode`.
    pub etcd_not_empty: Option<Check>,
    /// `Stop if even number of etcd hosts`.
    pub etcd_odd: Option<Check>,
    /// `Stop if any host not in '--limit' does not have a fact cache` (from v2.27).
    pub limit_fact_cache: Option<Check>,
    /// `Stop if unsupported version of Kubernetes` (`kube_version_min_required`).
    pub kube_version_min: Option<Check>,
    /// `Check if requested Kubernetes are supported` (the checksums, asserted from v2.31).
    pub kube_version_checksums: Option<Check>,
    /// `Stop if some versions have a 'v' left at the start` (v2.28).
    pub kube_version_without_v: Option<Check>,
    /// `Assert that nodes are specified for removal` in remove_node.yml (from v2.28).
    pub remove_node_needs_node: Option<Check>,
}

/// The values a release's assertion accepts for one setting.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Accepted {
    /// The accepted values, sorted.
    pub values: Vec<String>,
    /// The value the release uses when the inventory sets none.
    pub default: RoleDefault<String>,
    /// The asserting task's name.
    pub task: String,
    /// File of the task.
    pub path: String,
    /// 1-based line of the expression.
    pub line: usize,
}

/// A condition `setting != value` under which an assertion holds.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Unless {
    /// The other setting, e.g. `container_manager`.
    pub setting: String,
    /// The value that lifts the assertion, e.g. `docker`.
    pub value: String,
}

/// An assertion on a setting that holds unless another setting has a value, e.g. `etcd_deployment_type in
/// ['host', 'kubeadm'] or container_manager == 'docker'`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Conditional {
    /// The setting asserted.
    pub setting: String,
    /// The values accepted unless the condition lifts it.
    pub values: Vec<String>,
    /// What lifts the assertion.
    pub unless: Unless,
    /// The asserting task's name.
    pub task: String,
    /// File of the task.
    pub path: String,
    /// 1-based line of the expression.
    pub line: usize,
}

/// A sentence of kubespray's documentation kok quotes.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct DocLine {
    /// File inside kubespray's repository, e.g. `docs/operations/upgrades.md`.
    pub path: String,
    /// 1-based line.
    pub line: usize,
    /// The line as written.
    pub text: String,
}

/// The documentation kok quotes, where the release has it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Docs {
    /// "Do not skip (minor) releases when upgrading--upgrade by one tag at a time."
    pub upgrade_one_tag: Option<DocLine>,
    /// "Currently you can't remove the first node in your kube_control_plane and etcd-master list."
    pub remove_first_node: Option<DocLine>,
}

/// What kok knows of one kubespray release.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Release {
    /// The commit the tag points to.
    pub commit: String,
    /// The checksums file and the line of its `kubeadm_checksums`.
    pub checksums: Place,
    /// How the release writes Kubernetes versions: `v` (up to v2.27) or empty (from v2.28).
    pub kube_version_prefix: String,
    /// The Kubernetes versions the release can install (a non-zero amd64 kubeadm checksum), oldest first.
    pub kube_versions: Vec<Version>,
    /// The default `kube_version`.
    pub kube_version: RoleDefault<Version>,
    /// The default `kube_version_min_required`.
    pub kube_version_min_required: RoleDefault<Version>,
    /// Playbooks at the root and under `playbooks/`, e.g. `upgrade-cluster.yml`, `playbooks/facts.yml`.
    pub playbooks: BTreeSet<String>,
    /// Accepted values per setting; a setting the release does not assert is absent (anything goes).
    pub settings: BTreeMap<String, Accepted>,
    /// Assertions on a setting that depend on another.
    pub conditional_settings: Vec<Conditional>,
    /// The assertions kok repeats.
    pub checks: Checks,
    /// The documentation kok quotes.
    pub docs: Docs,
}

impl Release {
    /// True when the release can install `version`.
    pub fn installs(&self, version: Version) -> bool {
        self.kube_versions.binary_search(&version).is_ok()
    }

    /// The versions of `minor` the release can install, oldest first.
    pub fn versions_of(&self, minor: Minor) -> Vec<Version> {
        self.kube_versions
            .iter()
            .copied()
            .filter(|v| v.minor_line() == minor)
            .collect()
    }

    /// True when the release writes Kubernetes versions with their `v`.
    pub fn writes_v(&self) -> bool {
        self.kube_version_prefix == "v"
    }
}

#[derive(Deserialize)]
struct File {
    releases: BTreeMap<String, Release>,
}

/// Every release kok knows, by version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Releases {
    releases: BTreeMap<Version, Release>,
}

/// What kok can say of a release it is asked about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// In the data.
    Known(&'a Release),
    /// Newer than every release in the data (the newest is given).
    Newer(Version),
    /// Older than every release in the data (the oldest is given).
    Older(Version),
    /// Between two known releases but not one of them (no such tag was read).
    Missing,
}

static PARSED: LazyLock<Result<Releases, ReleasesError>> = LazyLock::new(|| Releases::parse(EMBEDDED));

impl Releases {
    /// The data built into the binary, parsed on first use.
    pub fn embedded() -> Result<&'static Releases, ReleasesError> {
        PARSED.as_ref().map_err(Clone::clone)
    }

    /// Data in the form `scripts/kubespray-releases.py` writes.
    pub fn parse(json: &str) -> Result<Releases, ReleasesError> {
        let file: File = serde_json::from_str(json).map_err(|e| ReleasesError::ParseData(e.to_string()))?;
        let mut releases = BTreeMap::new();
        for (tag, release) in file.releases {
            let version = Version::parse(&tag)
                .ok_or_else(|| ReleasesError::ParseData(format!("{tag:?} is not a tag")))?;
            releases.insert(version, release);
        }
        if releases.is_empty() {
            return Err(ReleasesError::ParseData("no release".into()));
        }
        Ok(Releases { releases })
    }

    /// The release `version`, if known.
    pub fn get(&self, version: Version) -> Option<&Release> {
        self.releases.get(&version)
    }

    /// What kok knows of `version`.
    pub fn lookup(&self, version: Version) -> Lookup<'_> {
        if let Some(release) = self.releases.get(&version) {
            return Lookup::Known(release);
        }
        match (self.oldest(), self.newest()) {
            (_, newest) if version > newest => Lookup::Newer(newest),
            (oldest, _) if version < oldest => Lookup::Older(oldest),
            _ => Lookup::Missing,
        }
    }

    /// The oldest release in the data.
    pub fn oldest(&self) -> Version {
        self.releases.keys().next().copied().unwrap_or(Version {
            major: 0,
            minor: 0,
            patch: 0,
        })
    }

    /// The newest release in the data.
    pub fn newest(&self) -> Version {
        self.releases.keys().next_back().copied().unwrap_or(Version {
            major: 0,
            minor: 0,
            patch: 0,
        })
    }

    /// Every release, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (Version, &Release)> {
        self.releases.iter().map(|(v, r)| (*v, r))
    }

    /// The release nearest to `from` (fewest releases away; the newer one on a tie) that can install
    /// `kube`, if any.
    pub fn nearest_installing(&self, kube: Version, from: Version) -> Option<Version> {
        let at = self.releases.range(..from).count();
        self.releases
            .iter()
            .enumerate()
            .filter(|(_, (_, release))| release.installs(kube))
            .min_by_key(|(i, (v, _))| (i.abs_diff(at), std::cmp::Reverse(**v)))
            .map(|(_, (v, _))| *v)
    }

    /// The plain sentence for a release kok has no data for, naming what it does not check.
    pub fn unknown_message(&self, version: Version) -> Option<String> {
        let what = "version rules not checked";
        match self.lookup(version) {
            Lookup::Known(_) => None,
            Lookup::Newer(newest) => Some(format!(
                "kubespray {version} is newer than kok's data ({newest}): {what}"
            )),
            Lookup::Older(oldest) => Some(format!(
                "kubespray {version} is older than kok's data ({oldest}): {what}"
            )),
            Lookup::Missing => Some(format!(
                "kubespray {version} is not a release in kok's data ({} … {}): {what}",
                self.oldest(),
                self.newest()
            )),
        }
    }
}

/// Where a checked-out kubespray tree keeps its checksums, newest layout first (from v2.28, then up to v2.27).
pub const CHECKSUMS_PATHS: [&str; 2] = [
    "roles/kubespray_defaults/vars/main/checksums.yml",
    "roles/kubespray-defaults/defaults/main/checksums.yml",
];

/// The Kubernetes versions a checksums file (of a checked-out kubespray tree, see [`CHECKSUMS_PATHS`]) can
/// install: those with a non-zero amd64 kubeadm checksum, oldest first. The same reading as the script's.
pub fn kube_versions_from_checksums(yaml: &str) -> Result<Vec<Version>, ReleasesError> {
    let doc: serde_yaml::Value =
        serde_yaml::from_str(yaml).map_err(|e| ReleasesError::ParseChecksums(e.to_string()))?;
    let amd64 = doc
        .get("kubeadm_checksums")
        .and_then(|k| k.get("amd64"))
        .and_then(serde_yaml::Value::as_mapping)
        .ok_or_else(|| ReleasesError::ParseChecksums("no kubeadm_checksums.amd64 mapping".into()))?;
    let mut versions: Vec<Version> = amd64
        .iter()
        .filter(|(_, sum)| match sum {
            serde_yaml::Value::Number(n) => n.as_u64() != Some(0),
            serde_yaml::Value::String(s) => !s.is_empty() && s != "0",
            _ => false,
        })
        .filter_map(|(key, _)| match key {
            serde_yaml::Value::String(s) => Version::parse(s),
            _ => None,
        })
        .collect();
    versions.sort();
    versions.dedup();
    Ok(versions)
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
    fn the_embedded_data_loads() {
        assert!(data().iter().count() >= 16);
    }

    #[test]
    fn every_release_from_v2_24_0_to_v2_31_0_is_known() {
        for tag in [
            "v2.24.0", "v2.24.1", "v2.24.2", "v2.24.3", "v2.25.0", "v2.25.1", "v2.26.0", "v2.26.1",
            "v2.27.0", "v2.27.1", "v2.28.0", "v2.28.1", "v2.29.0", "v2.29.1", "v2.30.0", "v2.31.0",
        ] {
            assert!(data().get(v(tag)).is_some(), "{tag}");
        }
    }

    #[test]
    fn v2_27_0_installs_v1_31_4_by_default() {
        let release = data().get(v("v2.27.0")).unwrap();
        assert!(release.installs(v("v1.31.4")));
        assert_eq!(release.kube_version.value, v("v1.31.4"));
        assert_eq!(
            release.kube_version.path,
            "roles/kubespray-defaults/defaults/main/main.yml"
        );
        assert_eq!(release.kube_version_min_required.value, v("v1.29.0"));
        assert!(!release.installs(v("v1.31.5")));
        assert!(release.writes_v());
    }

    #[test]
    fn from_v2_28_versions_lose_their_v_in_kubespray_but_not_in_the_data() {
        let release = data().get(v("v2.28.0")).unwrap();
        assert!(!release.writes_v());
        assert_eq!(
            release.checksums.path,
            "roles/kubespray_defaults/vars/main/checksums.yml"
        );
        assert!(release.installs(v("1.32.5")));
        assert_eq!(release.kube_versions.first(), Some(&v("v1.30.0")));
        assert!(
            release.kube_version.template.is_some(),
            "the default is templated from the checksums"
        );
        assert_eq!(release.kube_version.value, v("v1.32.5"));
        assert_eq!(release.kube_version_min_required.value, v("v1.30.0"));
        assert!(release.checks.kube_version_without_v.is_some());
    }

    #[test]
    fn versions_read_with_or_without_v_and_nothing_else() {
        assert_eq!(v("1.32.5"), v("v1.32.5"));
        assert_eq!(v("v1.32.5").to_string(), "v1.32.5");
        for bad in ["v1.32", "1.32.5-rc.1", "{{ x }}", "", "v1..2", "1.2.3.4"] {
            assert_eq!(Version::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn an_unknown_release_is_said_plainly() {
        assert_eq!(
            data().unknown_message(v("v2.32.0")).as_deref(),
            Some("kubespray v2.32.0 is newer than kok's data (v2.31.0): version rules not checked")
        );
        assert!(data()
            .unknown_message(v("v2.23.1"))
            .unwrap()
            .contains("older than kok's data (v2.24.0)"));
        assert!(data()
            .unknown_message(v("v2.26.7"))
            .unwrap()
            .contains("not a release in kok's data"));
        assert_eq!(data().unknown_message(v("v2.27.0")), None);
    }

    #[test]
    fn the_nearest_release_installing_a_version_is_found() {
        assert_eq!(
            data().nearest_installing(v("v1.31.9"), v("v2.27.0")),
            Some(v("v2.27.1"))
        );
        assert_eq!(
            data().nearest_installing(v("v1.26.5"), v("v2.27.0")),
            Some(v("v2.24.3"))
        );
        assert_eq!(data().nearest_installing(v("v1.99.0"), v("v2.27.0")), None);
    }

    #[test]
    fn settings_and_checks_move_with_the_releases() {
        let old = data().get(v("v2.24.0")).unwrap();
        assert_eq!(
            old.checks.control_plane_not_empty.as_ref().unwrap().groups,
            ["kube_control_plane", "kube_node"]
        );
        assert_eq!(old.checks.etcd_odd.as_ref().unwrap().fallback_group, None);
        assert!(old.checks.limit_fact_cache.is_none());
        assert!(old.settings["kube_network_plugin"]
            .values
            .contains(&"weave".to_string()));
        let new = data().get(v("v2.31.0")).unwrap();
        assert_eq!(
            new.checks.etcd_odd.as_ref().unwrap().fallback_group.as_deref(),
            Some("kube_control_plane")
        );
        assert!(new.checks.limit_fact_cache.is_some());
        assert!(!new.settings["kube_network_plugin"]
            .values
            .contains(&"weave".to_string()));
        assert!(new.settings["kube_proxy_mode"]
            .values
            .contains(&"nftables".to_string()));
        assert!(
            new.playbooks.contains("upgrade_cluster.yml") && !old.playbooks.contains("upgrade_cluster.yml")
        );
    }

    #[test]
    fn a_checked_out_trees_checksums_give_its_versions() {
        let yaml =
            "kubeadm_checksums:\n  arm:\n    1.32.1: 0\n  amd64:\n    1.32.1: sha256:ab\n    1.32.0: 0\n    \
                    v1.31.9: cd\n";
        assert_eq!(
            kube_versions_from_checksums(yaml).unwrap(),
            [v("v1.31.9"), v("v1.32.1")]
        );
        assert!(kube_versions_from_checksums("a: 1\n").is_err());
    }
}
