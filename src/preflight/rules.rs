//! The pre-flight rules, one function each: from a cluster's facts and the release data to findings.

use std::collections::BTreeSet;

use super::{
    Cites, ClusterFacts, Finding, Groups, Minor, OperationFacts, Release, ReleaseSource, Releases, Rule,
    Setting, Tree, Version, Written, CHECKED_SETTINGS,
};
use crate::api::ActionType;
use crate::layout::{did_you_mean, host_references, limits_hosts, Severity};

/// The kubeadm page that says minors are not skipped when upgrading (rule 2 cites it).
pub const KUBEADM_UPGRADE_DOC: &str =
    "https://kubernetes.io/docs/tasks/administer-cluster/kubeadm/kubeadm-upgrade/";

/// kubespray's upgrade documentation, cited by rule 3 when the release data has no line for it.
pub const KUBESPRAY_UPGRADE_DOC: &str =
    "https://github.com/kubernetes-sigs/kubespray/blob/master/docs/operations/upgrades.md";

/// The kubespray issue about an empty `node=` (rule 5 cites it).
pub const EMPTY_NODE_ISSUE: &str = "https://github.com/kubernetes-sigs/kubespray/issues/12061";

/// Where kubespray's image keeps its playbooks: an absolute action under it is checked like a relative one.
const IMAGE_WORKDIR: &str = "/kubespray/";

/// Playbooks (by normalised name, see [`playbook_name`]) that need a cluster already running (rule 9).
const NEEDS_RUNNING_CLUSTER: [&str; 4] = ["scale", "upgrade_cluster", "remove_node", "recover_control_plane"];

/// The kubespray release an image's tag names: `quay.io/kubespray/kubespray:v2.27.0` → v2.27.0, also from
/// a mirror that keeps the repository's name (`registry.local:5000/mirror/kubespray:v2.27.0`). A digest, a
/// tag that is not a release, or another image name say nothing: `None`.
pub fn image_release(image: &str) -> Option<Version> {
    if image.contains('@') {
        return None;
    }
    let last = image.rsplit_once('/').map_or(image, |(_, last)| last);
    let (name, tag) = last.split_once(':')?;
    if name != "kubespray" {
        return None;
    }
    Version::parse(tag)
}

/// The release an operation (or the cluster) runs, or why kok cannot tell, and where that is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// The release.
    Known(Written<Version>),
    /// kok cannot tell: what to do about it.
    Unknown(Written<String>),
}

/// The cluster's release: `kubesprayVersion` when written, else the image's tag.
pub fn cluster_release(source: &ReleaseSource) -> Resolved {
    if let Some(declared) = &source.declared {
        return match Version::parse(&declared.value) {
            Some(version) => Resolved::Known(written(version, declared)),
            None => Resolved::Unknown(written(
                format!(
                    "kubesprayVersion {:?} is not a release like v2.27.0: version rules not checked",
                    declared.value
                ),
                declared,
            )),
        };
    }
    match image_release(&source.image.value) {
        Some(version) => Resolved::Known(written(version, &source.image)),
        None => Resolved::Unknown(written(
            format!(
                "the kubespray release of image {} is not known (its tag names none): set kubesprayVersion \
                 (e.g. v2.27.0) in cluster.yml or kok.yml; version rules not checked",
                source.image.value
            ),
            &source.image,
        )),
    }
}

fn written<T, U>(value: T, at: &Written<U>) -> Written<T> {
    Written {
        value,
        path: at.path.clone(),
        line: at.line,
    }
}

/// The release an operation runs: its own image's tag when it names one and says a release, else the
/// cluster's.
fn operation_release(facts: &ClusterFacts<'_>, op: &OperationFacts<'_>) -> Resolved {
    match op
        .operation
        .image
        .as_deref()
        .map(|image| (image, image_release(image)))
    {
        Some((_, Some(version))) => Resolved::Known(Written {
            value: version,
            path: facts.operations_path.clone(),
            line: op.operation.line,
        }),
        Some((image, None)) if facts.release.declared.is_none() => Resolved::Unknown(Written {
            value: format!(
                "the kubespray release of image {image} is not known (its tag names none): version rules \
                 not checked for this operation"
            ),
            path: facts.operations_path.clone(),
            line: op.operation.line,
        }),
        _ => cluster_release(&facts.release),
    }
}

/// What the rules know of one release: the data, and a checked-out tree's own files that win over it.
struct View<'a> {
    version: Version,
    data: Option<&'a Release>,
    tree: Option<&'a Tree>,
}

impl<'a> View<'a> {
    fn new(version: Version, data: &'a Releases, tree: Option<&'a Tree>) -> View<'a> {
        View {
            version,
            data: data.get(version),
            tree,
        }
    }

    fn playbooks(&self) -> Option<&'a BTreeSet<String>> {
        self.tree
            .and_then(|t| t.playbooks.as_ref())
            .or(self.data.map(|d| &d.playbooks))
    }

    fn kube_versions(&self) -> Option<&'a [Version]> {
        self.tree
            .and_then(|t| t.kube_versions.as_deref())
            .or(self.data.map(|d| d.kube_versions.as_slice()))
    }

    fn cite(&self, path: &str, line: usize) -> Option<Cites> {
        Some(Cites::Kubespray {
            release: self.version,
            path: path.to_string(),
            line,
        })
    }

    fn cite_check(&self, check: Option<&super::Check>) -> Option<Cites> {
        check.and_then(|c| self.cite(&c.path, c.line))
    }
}

fn finding(rule: Rule, at: (&str, usize), message: String, cites: Option<Cites>) -> Finding {
    Finding {
        rule,
        severity: Severity::Error,
        path: at.0.to_string(),
        line: at.1,
        operation: None,
        message,
        cites,
        upgrade_path: None,
    }
}

/// `v1.30.0, v1.30.1` for a few versions, `v1.30.0 … v1.30.6` for more.
fn span(versions: &[Version]) -> String {
    match versions {
        [] => "none".to_string(),
        [first, .., last] if versions.len() > 3 => format!("{first} … {last}"),
        _ => versions
            .iter()
            .map(Version::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// The findings about the cluster as a whole: its release (and rule 3 for it), rules 1, 2, 4 and 8.
pub(super) fn cluster(facts: &ClusterFacts<'_>, data: &Releases) -> Vec<Finding> {
    let mut out = Vec::new();
    let release = match cluster_release(&facts.release) {
        Resolved::Known(release) => release,
        Resolved::Unknown(why) => {
            out.push(release_unknown(why, None));
            if let Some(step) = kube_version_step(facts, None, data) {
                out.push(step);
            }
            return out;
        }
    };
    if let Some(message) = data.unknown_message(release.value) {
        out.push(release_unknown(written(message, &release), None));
    }
    let view = View::new(release.value, data, facts.tree.as_ref());
    let allowed = facts.operations.iter().any(|o| o.pending && o.allow_release_skip);
    if !allowed {
        out.extend(release_step(facts, &release, data));
    }
    out.extend(kube_version_supported(facts, &view, data));
    out.extend(kube_version_step(facts, Some(&view), data));
    out.extend(groups(facts, &view, &facts.inventory, None));
    out.extend(settings(facts, &view));
    out
}

fn release_unknown(why: Written<String>, operation: Option<&str>) -> Finding {
    Finding {
        rule: Rule::ReleaseKnown,
        severity: Severity::Warning,
        path: why.path,
        line: why.line,
        operation: operation.map(str::to_string),
        message: why.value,
        cites: None,
        upgrade_path: None,
    }
}

/// The findings about one pending operation: its own release (and rule 3 for it), rules 5, 6 and 7.
pub(super) fn operation(facts: &ClusterFacts<'_>, data: &Releases, op: &OperationFacts<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    let own_image = op.operation.image.is_some();
    let view = match operation_release(facts, op) {
        Resolved::Known(release) => {
            if own_image {
                if let Some(message) = data.unknown_message(release.value) {
                    out.push(release_unknown(
                        written(message, &release),
                        Some(&op.operation.id),
                    ));
                }
                if !op.allow_release_skip {
                    out.extend(release_step(facts, &release, data));
                }
            }
            Some(View::new(release.value, data, facts.tree.as_ref()))
        }
        Resolved::Unknown(why) => {
            if own_image {
                out.push(release_unknown(why, Some(&op.operation.id)));
            }
            None
        }
    };
    if op.operation.action_type == ActionType::Playbook {
        out.extend(prompts(facts, op));
        out.extend(remove_node(facts, view.as_ref(), op));
        if let Some(view) = &view {
            out.extend(playbooks_exist(facts, view, op));
        }
    }
    out.extend(limits(facts, view.as_ref(), op));
    for f in &mut out {
        f.operation.get_or_insert_with(|| op.operation.id.clone());
    }
    out
}

// ---- rule 1 ----

/// Rule 1: the effective `kube_version`, when written and known, is one the release can install, written
/// with or without its `v` as the release writes versions.
fn kube_version_supported(facts: &ClusterFacts<'_>, view: &View<'_>, data: &Releases) -> Vec<Finding> {
    let Some(Setting::Known(kube)) = &facts.kube_version else {
        return Vec::new();
    };
    let at = (kube.path.as_str(), kube.line);
    let (text, version) = match written_kube_version(&kube.value) {
        Ok(Some(written)) => written,
        Ok(None) => return Vec::new(),
        Err(message) => return vec![finding(Rule::KubeVersionSupported, at, message, None)],
    };
    let mut out: Vec<Finding> = kube_version_v(view, &text, version, at).into_iter().collect();
    let Some(versions) = view.kube_versions() else {
        return out;
    };
    if versions.binary_search(&version).is_ok() {
        return out;
    }
    out.push(kube_version_not_installed(view, data, versions, version, at));
    out
}

/// The written `kube_version` `value`, trimmed, and the version it reads as; `None` for a template, and
/// what to tell when it is not a version.
fn written_kube_version(value: &serde_json::Value) -> Result<Option<(String, Version)>, String> {
    let text = match value {
        serde_json::Value::String(s) => s.trim().to_string(),
        other => {
            return Err(format!(
                "kube_version {other} is not a version: write it as a string, e.g. \"v1.31.4\""
            ))
        }
    };
    if text.contains("{{") {
        return Ok(None);
    }
    match Version::parse(&text) {
        Some(version) => Ok(Some((text, version))),
        None => Err(format!(
            "kube_version {text:?} is not a Kubernetes version (major.minor.patch, e.g. v1.31.4)"
        )),
    }
}

/// The finding when `text` has a `v` the release does not write, or lacks one it writes; only with
/// kok's data of the release and no checked-out tree.
fn kube_version_v(view: &View<'_>, text: &str, version: Version, at: (&str, usize)) -> Option<Finding> {
    let rule = Rule::KubeVersionSupported;
    let (Some(release), None) = (view.data, view.tree) else {
        return None;
    };
    let has_v = text.starts_with('v');
    if release.writes_v() && !has_v {
        Some(finding(
            rule,
            at,
            format!(
                "kubespray {} writes Kubernetes versions with their v: write kube_version: {version}",
                view.version
            ),
            view.cite(&release.checksums.path, release.checksums.line),
        ))
    } else if !release.writes_v() && has_v {
        let cites = view
            .cite_check(release.checks.kube_version_without_v.as_ref())
            .or(view.cite(&release.checksums.path, release.checksums.line));
        Some(finding(
            rule,
            at,
            format!(
                "kubespray {} writes Kubernetes versions without the v (from v2.28): write kube_version: {}",
                view.version,
                text.trim_start_matches('v')
            ),
            cites,
        ))
    } else {
        None
    }
}

/// The finding for a `version` the release does not install (`versions` are the ones it does): what it
/// installs of that minor line, or its span, and the nearest release that installs it.
fn kube_version_not_installed(
    view: &View<'_>,
    data: &Releases,
    versions: &[Version],
    version: Version,
    at: (&str, usize),
) -> Finding {
    let minor = version.minor_line();
    let same: Vec<Version> = versions
        .iter()
        .copied()
        .filter(|v| v.minor_line() == minor)
        .collect();
    let nearest = match data.nearest_installing(version, view.version) {
        Some(other) if other != view.version => {
            format!("kubespray {other} is the nearest release that installs it")
        }
        _ => format!(
            "no release in kok's data ({} … {}) installs it",
            data.oldest(),
            data.newest()
        ),
    };
    let message = if same.is_empty() {
        format!(
            "kube_version {version} is not one kubespray {} can install: it installs {} and no {minor}; \
             {nearest}: pick a version it installs or change the release",
            view.version,
            span(versions)
        )
    } else {
        format!(
            "kube_version {version} is not one kubespray {} can install: of {minor} it installs {}; {nearest}: \
             pick one of those or change the release",
            view.version,
            span(&same)
        )
    };
    let cites = view.data.and_then(|release| {
        let below_min = version < release.kube_version_min_required.value;
        let check = if below_min {
            release.checks.kube_version_min.as_ref()
        } else {
            release.checks.kube_version_checksums.as_ref()
        };
        view.cite_check(check)
            .or(view.cite(&release.checksums.path, release.checksums.line))
    });
    finding(Rule::KubeVersionSupported, at, message, cites)
}

// ---- rule 2 ----

/// The version a `kube_version` setting gives: written, or the release's default when set nowhere; `None`
/// when not known (a template, an unknown release default).
fn effective_kube_version(setting: Option<&Setting>, release: Option<&Release>) -> Option<Version> {
    match setting {
        Some(Setting::Known(w)) => w.value.as_str().and_then(Version::parse),
        Some(Setting::NotKnown { .. }) => None,
        None => release.map(|r| r.kube_version.value),
    }
}

/// Rule 2: the commit moves `kube_version` (written, or the release's default) one minor up at most, and
/// never down. The old value is the one kok saw running, else the one at the base.
fn kube_version_step(facts: &ClusterFacts<'_>, view: Option<&View<'_>>, data: &Releases) -> Option<Finding> {
    let previous = facts.previous.as_ref()?;
    let (old, said) = match previous.observed_kube_version {
        Some(seen) => (seen, "seen running".to_string()),
        None => {
            let base_release = previous.release.and_then(|r| data.get(r));
            let old = effective_kube_version(previous.kube_version.as_ref(), base_release)?;
            (old, previous.base.to_string())
        }
    };
    let new = effective_kube_version(facts.kube_version.as_ref(), view.and_then(|v| v.data))?;
    let at = match &facts.kube_version {
        Some(Setting::Known(w)) => (w.path.as_str(), w.line),
        _ => (facts.release.image.path.as_str(), facts.release.image.line),
    };
    let cites = Some(Cites::Url(KUBEADM_UPGRADE_DOC));
    if new < old {
        return Some(finding(
            Rule::KubeVersionDowngrade,
            at,
            format!(
                "kube_version {old} ({said}) → {new} is a downgrade: kubeadm and kubespray do not downgrade a \
                 cluster; keep kube_version at {old} or later"
            ),
            cites,
        ));
    }
    let (from, to) = (old.minor_line(), new.minor_line());
    if from.major == to.major && to.minor <= from.minor + 1 {
        return None;
    }
    let next = from.next();
    let skipped: Vec<String> = (next.minor..to.minor)
        .map(|minor| {
            Minor {
                major: from.major,
                minor,
            }
            .to_string()
        })
        .collect();
    let skipped = if from.major == to.major {
        skipped.join(", ")
    } else {
        format!("{next} and later")
    };
    let step = finding(
        Rule::KubeVersionStep,
        at,
        format!(
            "kube_version {old} ({said}) → {new} skips {skipped}: set kube_version to {next}.x first{}; kubeadm \
             and kubespray upgrade one minor at a time",
            where_to_find(next, view, data)
        ),
        cites,
    );
    Some(match view {
        Some(view) => {
            let from_release = previous.release.unwrap_or(view.version);
            with_path(step, facts, (old, from_release), (new, view.version), data)
        }
        None => step,
    })
}

/// `finding` with the whole path from `from` to `to` (each a `kube_version` and a release): the steps
/// named at the end of its message, and the commits that take them, ready to paste. Unchanged when kok's
/// data has no path.
fn with_path(
    mut finding: Finding,
    facts: &ClusterFacts<'_>,
    from: (Version, Version),
    to: (Version, Version),
    data: &Releases,
) -> Finding {
    let steps = super::path::upgrade_path(from.0, from.1, to.0, to.1, data);
    if steps.is_empty() {
        return finding;
    }
    let shown: Vec<String> = steps.iter().map(super::UpgradeStep::short).collect();
    let done = steps
        .last()
        .is_some_and(|s| s.release == to.1 && Version::parse(&s.kube_version) == Some(to.0));
    let end = match done {
        true => String::new(),
        false => " (kok's data has no release for the rest)".to_string(),
    };
    finding.message.push_str(&format!(
        "; the whole path, one commit each: {}{end}",
        shown.join(" → ")
    ));
    let kube_at = match &facts.kube_version {
        Some(Setting::Known(w)) if !w.path.is_empty() => format!("{}:{}", w.path, w.line),
        _ => "the inventory's group_vars".to_string(),
    };
    let image_at = match &facts.release.declared {
        Some(declared) => format!(
            "{} (and kubesprayVersion in {}:{})",
            facts.release.image.path, declared.path, declared.line
        ),
        None => facts.release.image.path.clone(),
    };
    finding.upgrade_path = Some(super::path::paste(
        &steps,
        &facts.release.image.value,
        &kube_at,
        &image_at,
    ));
    finding
}

/// ` (kubespray v2.27.0 installs v1.30.0 … v1.30.6)`, or the nearest release that installs `minor`.
fn where_to_find(minor: Minor, view: Option<&View<'_>>, data: &Releases) -> String {
    if let Some(view) = view {
        let here: Vec<Version> = view
            .kube_versions()
            .unwrap_or_default()
            .iter()
            .copied()
            .filter(|v| v.minor_line() == minor)
            .collect();
        if !here.is_empty() {
            return format!(" (kubespray {} installs {})", view.version, span(&here));
        }
    }
    let from = view.map_or(data.newest(), |v| v.version);
    let nearest = data
        .iter()
        .filter(|(_, r)| !r.versions_of(minor).is_empty())
        .min_by_key(|(v, _)| (v.minor.abs_diff(from.minor), std::cmp::Reverse(*v)));
    match nearest {
        Some((release, data)) => format!(
            " (kubespray {release} installs {})",
            span(&data.versions_of(minor))
        ),
        None => String::new(),
    }
}

// ---- rule 3 ----

/// Rule 3: the release moves from the one at the base by one minor release at most (patch releases are
/// free). The caller skips it for `allowReleaseSkip: true`.
fn release_step(facts: &ClusterFacts<'_>, release: &Written<Version>, data: &Releases) -> Option<Finding> {
    let old = facts.previous.as_ref()?.release?;
    let new = release.value;
    if new.major == old.major && new.minor <= old.minor + 1 {
        return None;
    }
    let next = old.minor_line().next();
    let first_step = data
        .iter()
        .filter(|(v, _)| v.minor_line() == next)
        .map(|(v, _)| v)
        .next_back()
        .map_or(format!("{next}.x"), |v| v.to_string());
    let doc = data
        .get(new)
        .or(data.get(old))
        .and_then(|r| r.docs.upgrade_one_tag.as_ref().map(|d| (r, d)));
    let cites = match doc {
        Some((_, line)) => Some(Cites::Kubespray {
            release: if data.get(new).is_some() { new } else { old },
            path: line.path.clone(),
            line: line.line,
        }),
        None => Some(Cites::Url(KUBESPRAY_UPGRADE_DOC)),
    };
    let step = finding(
        Rule::ReleaseStep,
        (&release.path, release.line),
        format!(
            "kubespray {old} → {new} skips a minor release: do not skip minor releases when upgrading: upgrade \
             by one tag at a time; move to {first_step} first, or set allowReleaseSkip: true on the operation \
             that upgrades"
        ),
        cites,
    );
    let previous = facts.previous.as_ref()?;
    let old_kube = previous
        .observed_kube_version
        .or_else(|| effective_kube_version(previous.kube_version.as_ref(), data.get(old)));
    let new_kube = effective_kube_version(facts.kube_version.as_ref(), data.get(new));
    Some(match old_kube.zip(new_kube) {
        Some((old_kube, new_kube)) => with_path(step, facts, (old_kube, old), (new_kube, new), data),
        None => step,
    })
}

// ---- rule 4 ----

/// The effective value of one of [`CHECKED_SETTINGS`]: written, else the release default; `None` when not
/// known.
fn effective_setting<'a>(facts: &'a ClusterFacts<'_>, view: &'a View<'_>, name: &str) -> Option<&'a str> {
    match facts.settings.get(name) {
        Some(Setting::Known(w)) => w.value.as_str(),
        Some(Setting::NotKnown { .. }) => None,
        None => view.data?.settings.get(name).map(|a| a.default.value.as_str()),
    }
}

/// Rule 4 on `inventory` (the cluster's, or what a queued `remove-node.yml` leaves, named by `after`):
/// `kube_control_plane` (and up to v2.25 `kube_node`) not empty; `etcd` not empty unless etcd is
/// kubeadm-managed; the etcd count (or, from v2.28, the control plane's when etcd is not defined) odd.
fn groups(
    facts: &ClusterFacts<'_>,
    view: &View<'_>,
    inventory: &Groups,
    after: Option<&str>,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let path = facts.inventory.path.as_str();
    let r = view.version;
    let when = after.map_or(String::new(), |what| format!("once {what}, "));
    let checks = view.data.map(|d| &d.checks);
    let not_empty = checks.and_then(|c| c.control_plane_not_empty.as_ref());
    let must_have: Vec<&str> = match not_empty {
        Some(check) => check.groups.iter().map(String::as_str).collect(),
        None => vec!["kube_control_plane"],
    };
    for group in must_have {
        if inventory.hosts_of(group).unwrap_or_default().is_empty() {
            out.push(finding(
                Rule::GroupNotEmpty,
                (path, inventory.line_of(group)),
                format!("{when}{group} has no host: kubespray {r} stops on an empty {group}; add its hosts"),
                view.cite_check(not_empty),
            ));
        }
    }
    let etcd = inventory.hosts_of("etcd");
    let kubeadm_etcd = match effective_setting(facts, view, "etcd_deployment_type") {
        Some(kind) => kind == "kubeadm",
        None => true,
    };
    if !kubeadm_etcd && etcd.unwrap_or_default().is_empty() {
        let check = checks.and_then(|c| c.etcd_not_empty.as_ref());
        out.push(finding(
            Rule::GroupNotEmpty,
            (path, inventory.line_of("etcd")),
            format!(
                "{when}etcd has no host: kubespray {r} needs etcd hosts unless etcd_deployment_type is kubeadm; \
                 add an odd number of etcd hosts"
            ),
            view.cite_check(check),
        ));
    }
    let odd = checks.and_then(|c| c.etcd_odd.as_ref());
    let fallback = odd.and_then(|c| c.fallback_group.as_deref());
    let counted = match (etcd, fallback) {
        (Some(hosts), _) if !hosts.is_empty() || fallback.is_some() => Some(("etcd", hosts)),
        (None, Some(group)) => inventory.hosts_of(group).map(|hosts| (group, hosts)),
        _ => None,
    };
    if let Some((group, hosts)) = counted.filter(|(_, hosts)| hosts.len() % 2 == 0) {
        let counted_as = if group == "etcd" {
            String::new()
        } else {
            format!(" (etcd is not defined, so kubespray {r} counts {group})")
        };
        out.push(finding(
            Rule::EtcdOdd,
            (path, inventory.line_of(group)),
            format!(
                "{when}{group} has {} hosts{counted_as}: kubespray {r} stops on an even number (\"Stop if even \
                 number of etcd hosts\"); etcd needs a majority, so use an odd number of hosts (1, 3, 5)",
                hosts.len()
            ),
            view.cite_check(odd),
        ));
    }
    out
}

// ---- rule 5 ----

/// True when argument `i` of `args` is (or holds) the value of `--limit` / `-l`.
fn is_limit(args: &[String], i: usize) -> bool {
    let arg = args[i].as_str();
    let before = i.checked_sub(1).map(|j| args[j].as_str());
    arg.starts_with("--limit=")
        || (arg.starts_with("-l") && !arg.starts_with("--"))
        || matches!(before, Some("--limit" | "-l"))
}

/// The names `-e node=...` gives in `args`.
pub(super) fn nodes(args: &[String]) -> Vec<String> {
    host_references(args)
        .into_iter()
        .filter(|r| !is_limit(args, r.arg))
        .map(|r| r.name)
        .collect()
}

/// The names `--limit` gives in `args`.
pub(super) fn limit_names(args: &[String]) -> Vec<String> {
    host_references(args)
        .into_iter()
        .filter(|r| is_limit(args, r.arg))
        .map(|r| r.name)
        .collect()
}

/// The normalised name of a playbook action (`upgrade-cluster.yml`, `playbooks/upgrade_cluster.yml` →
/// `upgrade_cluster`).
pub(super) fn playbook_name(action: &str) -> String {
    let file = action.rsplit('/').next().unwrap_or(action);
    let stem = file
        .strip_suffix(".yml")
        .or(file.strip_suffix(".yaml"))
        .unwrap_or(file);
    stem.replace('-', "_")
}

/// Rule 5: `remove-node.yml` names (with `-e node=`) hosts of the inventory, never the first host of
/// `kube_control_plane` or `etcd`; and rule 4 holds for what it leaves.
fn remove_node(facts: &ClusterFacts<'_>, view: Option<&View<'_>>, op: &OperationFacts<'_>) -> Vec<Finding> {
    let operation = op.operation;
    if playbook_name(&operation.action) != "remove_node" {
        return Vec::new();
    }
    let at = (facts.operations_path.as_str(), operation.line);
    let args = &operation.extra_args;
    let names = nodes(args);
    if names.is_empty() {
        return remove_node_unnamed(view, args, at);
    }
    let inventory = &facts.inventory;
    let (removed, mut out) = removed_hosts(inventory, &names, at);
    out.extend(first_hosts_removed(inventory, view, &removed, at));
    // kubespray passes through an even etcd during a replacement when told to (`ignore_assert_errors`).
    let ignoring = matches!(var_of(facts, args, "ignore_assert_errors"), Some((true, _)));
    if let Some(view) = view.filter(|_| !ignoring) {
        out.extend(groups_after_removal(facts, view, &removed, at));
    }
    out
}

/// Rule 5 for a `remove-node.yml` that names no host: an empty `-e node=` removes every host, and none
/// at all stops or runs everywhere by release; nothing when the hosts come from elsewhere (a file, JSON).
fn remove_node_unnamed(view: Option<&View<'_>>, args: &[String], at: (&str, usize)) -> Vec<Finding> {
    let release = view.map_or("this release".to_string(), |v| format!("kubespray {}", v.version));
    if matches!(extra_var(args, "node"), Var::Set(v) if v.as_str().is_some_and(|v| v.trim().is_empty())) {
        return vec![finding(
            Rule::RemoveNode,
            at,
            "remove-node.yml with an empty -e node= names no host, and kubespray then removes every host of \
             etcd:k8s_cluster:calico_rr (kubernetes-sigs/kubespray#12061): name the host to remove, -e node=<host>"
                .to_string(),
            Some(Cites::Url(EMPTY_NODE_ISSUE)),
        )];
    }
    if args
        .iter()
        .any(|a| a.contains("node=") || a.starts_with('@') || a.contains('{'))
    {
        return Vec::new();
    }
    let needs = view.and_then(|v| v.data.map(|d| (v, d))).and_then(|(v, d)| {
        d.checks
            .remove_node_needs_node
            .as_ref()
            .map(|c| v.cite(&c.path, c.line))
    });
    let message = match needs {
        Some(_) => {
            format!("remove-node.yml needs -e node=<host>: {release} stops without it; name the hosts")
        }
        None => format!(
            "remove-node.yml without -e node=<host> runs on every host of etcd:k8s_cluster:calico_rr with \
             {release}: name the hosts to remove"
        ),
    };
    vec![finding(Rule::RemoveNode, at, message, needs.flatten())]
}

/// The hosts `names` (hosts or groups of `inventory`) remove, and a finding for each name that is
/// neither.
fn removed_hosts(
    inventory: &Groups,
    names: &[String],
    at: (&str, usize),
) -> (BTreeSet<String>, Vec<Finding>) {
    let mut out = Vec::new();
    let mut removed = BTreeSet::new();
    for name in names {
        if inventory.hosts.contains(name) {
            removed.insert(name.clone());
        } else if let Some(hosts) = inventory.hosts_of(name) {
            removed.extend(hosts.iter().cloned());
        } else {
            out.push(finding(
                Rule::RemoveNode,
                at,
                format!(
                    "node={name} is not a host of the inventory: remove-node.yml must run while the host is \
                     still in {}; fix the name, or put the host back until it is removed",
                    inventory.path
                ),
                None,
            ));
        }
    }
    (removed, out)
}

/// A finding for each of `kube_control_plane` and `etcd` whose first host is `removed`: kubespray
/// cannot remove the first node.
fn first_hosts_removed(
    inventory: &Groups,
    view: Option<&View<'_>>,
    removed: &BTreeSet<String>,
    at: (&str, usize),
) -> Vec<Finding> {
    let doc = view.and_then(|v| v.data.map(|d| (v, d))).and_then(|(v, d)| {
        d.docs
            .remove_first_node
            .as_ref()
            .and_then(|line| v.cite(&line.path, line.line))
    });
    let mut out = Vec::new();
    for group in ["kube_control_plane", "etcd"] {
        let Some(first) = inventory.hosts_of(group).and_then(|hosts| hosts.first()) else {
            continue;
        };
        if removed.contains(first) {
            out.push(finding(
                Rule::RemoveNode,
                at,
                format!(
                    "{first} is the first host of {group}, and kubespray cannot remove the first node: move \
                     another host to the top of {group} in a commit before, then remove {first}"
                ),
                doc.clone(),
            ));
        }
    }
    out
}

/// Rule 4's findings on the inventory without the `removed` hosts that it does not make on the
/// inventory as written, placed at the operation (`at`).
fn groups_after_removal(
    facts: &ClusterFacts<'_>,
    view: &View<'_>,
    removed: &BTreeSet<String>,
    at: (&str, usize),
) -> Vec<Finding> {
    let inventory = &facts.inventory;
    let left = Groups {
        path: inventory.path.clone(),
        hosts: inventory.hosts.difference(removed).cloned().collect(),
        groups: inventory
            .groups
            .iter()
            .map(|(name, group)| {
                let mut group = group.clone();
                group.hosts.retain(|h| !removed.contains(h));
                (name.clone(), group)
            })
            .collect(),
    };
    let what = format!(
        "remove-node.yml has removed {}",
        removed.iter().cloned().collect::<Vec<_>>().join(", ")
    );
    let before = groups(facts, view, inventory, None);
    groups(facts, view, &left, Some(&what))
        .into_iter()
        .filter(|f| !before.iter().any(|b| b.rule == f.rule && b.line == f.line))
        .map(|f| Finding {
            path: at.0.to_string(),
            line: at.1,
            ..f
        })
        .collect()
}

// ---- rule 6 ----

/// The path of a playbook action inside the runner's working directory, or `None` for an absolute path
/// elsewhere (not checked).
fn playbook_path(action: &str) -> Option<&str> {
    let action = action.trim_start_matches("./");
    match action.strip_prefix(IMAGE_WORKDIR) {
        Some(inside) => Some(inside),
        None if action.starts_with('/') => None,
        None => Some(action),
    }
}

/// Rule 6: the action and every playbook hook exist in the release, unless kept in the repository.
fn playbooks_exist(facts: &ClusterFacts<'_>, view: &View<'_>, op: &OperationFacts<'_>) -> Vec<Finding> {
    let Some(playbooks) = view.playbooks() else {
        return Vec::new();
    };
    let operation = op.operation;
    let hooks = operation
        .pre_hooks
        .iter()
        .chain(&operation.post_hooks)
        .filter(|h| h.action_type == ActionType::Playbook)
        .map(|h| ("hook", h.action.as_str()));
    let all: Vec<&str> = playbooks.iter().map(String::as_str).collect();
    std::iter::once(("action", operation.action.as_str()))
        .chain(hooks)
        // A step kept in the repository runs from the commit's files: it exists.
        .filter(|(_, action)| !facts.repository_steps.contains(*action))
        .filter_map(|(what, action)| {
            let path = playbook_path(action)?;
            if playbooks.contains(path) {
                return None;
            }
            let hint = match same_playbook(path, &all).or_else(|| did_you_mean(path, &all)) {
                Some(close) => format!(": it has {close}"),
                None => format!("; its playbooks are {}", all.join(", ")),
            };
            let source = if view.tree.and_then(|t| t.playbooks.as_ref()).is_some() {
                "the checked-out kubespray tree"
            } else {
                "kubespray"
            };
            Some(finding(
                Rule::PlaybookExists,
                (&facts.operations_path, operation.line),
                format!(
                    "{what} {action} is not a playbook of {source} {}{hint}",
                    view.version
                ),
                None,
            ))
        })
        .collect()
}

/// The playbook of `playbooks` with the same normalised name as `path` (`upgrade_cluster.yml` →
/// `upgrade-cluster.yml`), one in the same folder first.
fn same_playbook<'p>(path: &str, playbooks: &[&'p str]) -> Option<&'p str> {
    let folder = |p: &str| p.rsplit_once('/').map_or("", |(dir, _)| dir).to_string();
    let name = playbook_name(path);
    playbooks
        .iter()
        .filter(|p| playbook_name(p) == name)
        .min_by_key(|p| (folder(p) != folder(path), **p))
        .copied()
}

// ---- rule 7 ----

/// Rule 7: `--limit` (of the action or a hook) names hosts or groups of the inventory; and on a release that
/// stops a `--limit` run without a fact cache, kok's facts step is kept and exists.
fn limits(facts: &ClusterFacts<'_>, view: Option<&View<'_>>, op: &OperationFacts<'_>) -> Vec<Finding> {
    let operation = op.operation;
    let at = (facts.operations_path.as_str(), operation.line);
    let steps: Vec<&[String]> = std::iter::once(operation.extra_args.as_slice())
        .chain(
            operation
                .pre_hooks
                .iter()
                .chain(&operation.post_hooks)
                .map(|h| h.extra_args.as_slice()),
        )
        .collect();
    let inventory = &facts.inventory;
    let mut out: Vec<Finding> = steps
        .iter()
        .flat_map(|args| limit_names(args))
        .filter(|name| {
            !inventory.hosts.contains(name)
                && !inventory.groups.contains_key(name)
                && !matches!(name.as_str(), "all" | "ungrouped")
        })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .map(|name| {
            finding(
                Rule::LimitNames,
                at,
                format!(
                    "--limit names {name}, neither a host nor a group of {}: ansible would run on fewer hosts \
                     than meant; fix the name, or add the host in a commit before",
                    inventory.path
                ),
                None,
            )
        })
        .collect();
    let Some(view) = view else {
        return out;
    };
    let Some(check) = view.data.and_then(|d| d.checks.limit_fact_cache.as_ref()) else {
        return out;
    };
    if !steps.iter().any(|args| limits_hosts(args)) {
        return out;
    }
    let cites = view.cite(&check.path, check.line);
    let r = view.version;
    match &facts.facts_playbook {
        None => out.push(finding(
            Rule::LimitFacts,
            at,
            format!(
                "kubespray {r} stops a --limit run when a host outside the limit has no cached facts, and \
                 factsPlaybook: none turns kok's facts step off: remove factsPlaybook: none, or drop the --limit"
            ),
            cites,
        )),
        Some(step) => {
            let missing = playbook_path(&step.path)
                .zip(view.playbooks())
                .is_some_and(|(path, playbooks)| !playbooks.contains(path));
            if missing {
                out.push(finding(
                    Rule::LimitFacts,
                    at,
                    format!(
                        "kubespray {r} stops a --limit run when a host outside the limit has no cached facts, and \
                         the facts step {} is not one of its playbooks: set factsPlaybook to one it has \
                         (playbooks/facts.yml)",
                        step.path
                    ),
                    cites,
                ));
            }
        }
    }
    out
}

// ---- rule 8 ----

/// Rule 8: each of [`CHECKED_SETTINGS`] written with a known value holds one the release accepts, also
/// under the assertions that depend on another setting.
fn settings(facts: &ClusterFacts<'_>, view: &View<'_>) -> Vec<Finding> {
    let Some(release) = view.data else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for name in CHECKED_SETTINGS {
        let (Some(Setting::Known(w)), Some(accepted)) =
            (facts.settings.get(name), release.settings.get(name))
        else {
            continue;
        };
        if w.value
            .as_str()
            .is_some_and(|v| accepted.values.iter().any(|a| a == v))
        {
            continue;
        }
        let values: Vec<&str> = accepted.values.iter().map(String::as_str).collect();
        let close = w
            .value
            .as_str()
            .and_then(|given| did_you_mean(given, &values))
            .map_or(String::new(), |close| format!(" (did you mean {close}?)"));
        out.push(finding(
            Rule::SettingAccepted,
            (&w.path, w.line),
            format!(
                "{name}: {} is not a value kubespray {} accepts: use one of {}{close}",
                w.value,
                view.version,
                values.join(", ")
            ),
            view.cite(&accepted.path, accepted.line),
        ));
    }
    for cond in &release.conditional_settings {
        let (Some(value), Some(other)) = (
            effective_setting(facts, view, &cond.setting),
            effective_setting(facts, view, &cond.unless.setting),
        ) else {
            continue;
        };
        if other == cond.unless.value || cond.values.iter().any(|v| v == value) {
            continue;
        }
        let at = [&cond.setting, &cond.unless.setting]
            .into_iter()
            .find_map(|name| match facts.settings.get(name.as_str()) {
                Some(Setting::Known(w)) => Some((w.path.as_str(), w.line)),
                _ => None,
            });
        let Some(at) = at else { continue };
        out.push(finding(
            Rule::SettingAccepted,
            at,
            format!(
                "{}: {value} needs {}: {} on kubespray {} ({}: {other}): use one of {}, or set {} to {}",
                cond.setting,
                cond.unless.setting,
                cond.unless.value,
                view.version,
                cond.unless.setting,
                cond.values.join(", "),
                cond.unless.setting,
                cond.unless.value
            ),
            view.cite(&cond.path, cond.line),
        ));
    }
    out
}

// ---- rule 9 ----

/// Rule 9: on a cluster kok has never seen installed (and whose cluster.yml does not say `installed:`), no
/// pending operation that needs a running cluster
/// (`scale.yml`, `upgrade-cluster.yml`, `remove-node.yml`, `recover-control-plane.yml`) is queued before
/// its `cluster.yml`.
pub fn order(facts: &ClusterFacts<'_>) -> Vec<Finding> {
    if facts.installed {
        return Vec::new();
    }
    let playbook = |o: &&OperationFacts<'_>| o.pending && o.operation.action_type == ActionType::Playbook;
    let install = facts
        .operations
        .iter()
        .position(|o| playbook(&o) && playbook_name(&o.operation.action) == "cluster");
    let mut out = Vec::new();
    for (i, op) in facts.operations.iter().enumerate() {
        let name = playbook_name(&op.operation.action);
        if !playbook(&op) || !op.preflight || !NEEDS_RUNNING_CLUSTER.contains(&name.as_str()) {
            continue;
        }
        let action = &op.operation.action;
        let message = match install.map(|j| (j, &facts.operations[j])) {
            Some((j, _)) if j < i => continue,
            Some((_, install)) if install.operation.index < op.operation.index => format!(
                "{action} needs a running cluster and is queued before cluster.yml (operation {}, line {}), on \
                 a cluster kok has never seen installed: it stands after it in the file, but an entry queues by \
                 the commit that last changed it and {} was changed later; change this entry in a commit after \
                 that one",
                install.operation.id, install.operation.line, install.operation.id
            ),
            Some((_, install)) => format!(
                "{action} needs a running cluster and is queued before cluster.yml (operation {}, line {}), on \
                 a cluster kok has never seen installed: move it after cluster.yml",
                install.operation.id, install.operation.line
            ),
            None => format!(
                "{action} needs a running cluster, and kok has never seen {} installed (no successful \
                 cluster.yml, no health): queue cluster.yml before it; for a cluster installed outside kok, say \
                 so in its cluster.yml: installed: true (or installed: {{kubeVersion: <the version it runs>}})",
                facts.cluster
            ),
        };
        let mut f = finding(
            Rule::Order,
            (&facts.operations_path, op.operation.line),
            message,
            None,
        );
        f.operation = Some(op.operation.id.clone());
        out.push(f);
    }
    out
}

// ---- rule 10 ----

/// The release whose prompts rule 10 cites: where `tests/integration/kubespray_real.rs` shows each one stop a run kok
/// starts, and the setting let it through.
const PROMPTS_AT: Version = Version {
    major: 2,
    minor: 27,
    patch: 0,
};

/// `remove_node.yml`'s "Confirm Execution" pause, answered by `skip_confirmation`.
const REMOVE_NODE_PROMPT: (&str, usize) = ("playbooks/remove_node.yml", 9);
/// `reset.yml`'s "Check confirmation", which fails unless `reset_confirmation` is true (or typed `yes`).
const RESET_CHECK: (&str, usize) = ("playbooks/reset.yml", 21);
/// The upgrade's "Confirm node upgrade" and "Confirm node uncordon" pauses, by the switch that turns each on.
const UPGRADE_PROMPTS: [(&str, &str, usize); 2] = [
    (
        "upgrade_node_confirm",
        "roles/upgrade/pre-upgrade/tasks/main.yml",
        3,
    ),
    (
        "upgrade_node_post_upgrade_confirm",
        "roles/upgrade/post-upgrade/tasks/main.yml",
        14,
    ),
];

/// An extra variable as the arguments of a step give it.
#[derive(Clone, Debug, PartialEq)]
enum Var {
    /// Not given.
    Absent,
    /// Given, with this value (the last one given wins, as in ansible).
    Set(serde_json::Value),
    /// Maybe given: a file of variables (`-e @vars.yml`) kok does not read.
    Unknown,
}

/// The value `args` give the extra variable `name` (`-e name=value`, `--extra-vars name=value`, or a JSON /
/// YAML mapping).
fn extra_var(args: &[String], name: &str) -> Var {
    let mut found = Var::Absent;
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        let value = if arg == "-e" || arg == "--extra-vars" {
            i += 1;
            args.get(i).map(String::as_str)
        } else if let Some(v) = arg.strip_prefix("--extra-vars=") {
            Some(v)
        } else {
            arg.strip_prefix("-e")
                .filter(|v| !v.is_empty() && !arg.starts_with("--"))
        };
        i += 1;
        let Some(value) = value.map(str::trim) else {
            continue;
        };
        if value.starts_with('@') {
            found = Var::Unknown;
        } else if value.starts_with('{') {
            match serde_yaml::from_str::<serde_json::Value>(value) {
                Ok(map) => {
                    if let Some(v) = map.get(name) {
                        found = Var::Set(v.clone());
                    }
                }
                Err(_) => found = Var::Unknown,
            }
        } else {
            for pair in value.split_whitespace() {
                if let Some(v) = pair.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')) {
                    found = Var::Set(serde_json::Value::String(v.trim_matches(['"', '\'']).to_string()));
                }
            }
        }
    }
    found
}

/// True when ansible's `| bool` makes `value` true.
fn truthy(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::Bool(b) => *b,
        serde_json::Value::Number(n) => n.as_f64() == Some(1.0),
        serde_json::Value::String(s) => {
            matches!(
                s.trim().to_ascii_lowercase().as_str(),
                "yes" | "on" | "1" | "true" | "y" | "t"
            )
        }
        _ => false,
    }
}

/// The value `name` has for a step: its extra variable, else the inventory's; `None` when kok cannot tell
/// (a file of extra variables, a templated value), and where it is set.
fn var_of(facts: &ClusterFacts<'_>, args: &[String], name: &str) -> Option<(bool, Option<(String, usize)>)> {
    match extra_var(args, name) {
        Var::Set(v) => Some((truthy(&v), None)),
        Var::Unknown => None,
        Var::Absent => match facts.settings.get(name) {
            Some(Setting::Known(w)) => Some((truthy(&w.value), Some((w.path.clone(), w.line)))),
            Some(Setting::NotKnown { .. }) => None,
            None => Some((false, None)),
        },
    }
}

fn cite_prompt((path, line): (&str, usize)) -> Option<Cites> {
    Some(Cites::Kubespray {
        release: PROMPTS_AT,
        path: path.to_string(),
        line,
    })
}

/// Rule 10: no run waits for an answer on a terminal, which a Job does not have (ansible answers a prompt
/// with nothing when stdin is not a terminal). `remove-node.yml` says `skip_confirmation=true`;
/// `reset.yml` says `reset_confirmation=yes` (its "Check confirmation" fails without it, even with
/// `skip_confirmation=true`); `upgrade-cluster.yml` does not set `upgrade_node_confirm` or
/// `upgrade_node_post_upgrade_confirm`, whose pauses would pass unanswered.
fn prompts(facts: &ClusterFacts<'_>, op: &OperationFacts<'_>) -> Vec<Finding> {
    let operation = op.operation;
    let args = &operation.extra_args;
    let at = (facts.operations_path.as_str(), operation.line);
    let action = &operation.action;
    match playbook_name(action).as_str() {
        "remove_node" => match var_of(facts, args, "skip_confirmation") {
            Some((false, _)) => vec![finding(
                Rule::Prompt,
                at,
                format!(
                    "{action} asks \"Are you sure you want to delete nodes state?\" unless skip_confirmation is \
                     true, and a Job has no terminal: the prompt gets no answer and the run stops at \"Fail if \
                     user does not confirm deletion\"; add `-e skip_confirmation=true`"
                ),
                cite_prompt(REMOVE_NODE_PROMPT),
            )],
            _ => Vec::new(),
        },
        "reset" => match var_of(facts, args, "reset_confirmation") {
            Some((false, _)) => {
                let skip = matches!(var_of(facts, args, "skip_confirmation"), Some((true, _)));
                let why = match skip {
                    true => "skip_confirmation=true skips the prompt, but reset.yml's \"Check confirmation\" \
                             still fails without reset_confirmation"
                        .to_string(),
                    false => "a Job has no terminal: the prompt \"Are you sure you want to reset cluster \
                              state?\" gets no answer and \"Check confirmation\" fails"
                        .to_string(),
                };
                vec![finding(
                    Rule::Prompt,
                    at,
                    format!("{action} would stop before it resets anything: {why}; add `-e reset_confirmation=yes`"),
                    cite_prompt(RESET_CHECK),
                )]
            }
            _ => Vec::new(),
        },
        "upgrade_cluster" => UPGRADE_PROMPTS
            .iter()
            .filter_map(|(name, path, line)| {
                let (true, set_at) = var_of(facts, args, name)? else {
                    return None;
                };
                let (where_, at) = match &set_at {
                    Some((path, line)) => (format!("{path}:{line}"), (path.as_str(), *line)),
                    None => ("its extraArgs".to_string(), at),
                };
                Some(finding(
                    Rule::Prompt,
                    at,
                    format!(
                        "{name} is true ({where_}): {action} pauses at every node for someone to press Enter, and \
                         a Job has no terminal: ansible passes the pause unanswered (\"Not waiting for response \
                         to prompt as stdin is not interactive\"), so no node is approved by anyone; set {name}: \
                         false, or wait a fixed time with upgrade_node_pause_seconds"
                    ),
                    cite_prompt((path, *line)),
                ))
            })
            .collect(),
        _ => Vec::new(),
    }
}
