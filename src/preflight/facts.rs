//! A cluster directory's facts for the rules: its inventory as kubespray sees it, its settings, which of its
//! operations are still to run, and its history (the values before this commit, whether kok saw it installed).
//!
//! Pure. Validate, plan and the reconcile pass each say what they know of the history ([`History`]); the
//! paths of findings are relative to the repository root.

use std::collections::{BTreeMap, BTreeSet};

use super::rules::{cluster_release, nodes, playbook_name, Resolved};
use super::{
    Base, Before, ClusterFacts, Finding, Groups, OperationFacts, Previous, ReleaseSource, Releases, Setting,
    Tree, Version, Written, FIXED_SETTINGS,
};
use crate::api::{
    ActionType, Cluster, ClusterKubernetes, ClusterOperation, OperationPreflight, Phase, PreflightFinding,
    DEFAULT_IMAGE,
};
use crate::layout::{self, join, ClusterDir, Known, KubesprayView, Operation, Severity, OPERATIONS_YML};

/// What kok knows of a cluster's past, for rules 2, 3, 9, 11 and 12.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    /// The cluster before this commit; `None` for a cluster kok has not seen.
    pub previous: Option<Previous>,
    /// True when kok has seen the cluster installed (see [`installed`]).
    pub installed: bool,
    /// The inventory and settings at the base commit, where the caller has it ([`before_of`]).
    pub before: Option<Before>,
    /// The hosts `remove-node.yml` has removed ([`removed_hosts`]).
    pub removed: BTreeSet<String>,
}

/// Playbooks whose success shows the cluster runs (by normalised name): `cluster.yml`, and those that
/// need a running cluster.
const SHOWS_INSTALLED: [&str; 5] = [
    "cluster",
    "scale",
    "upgrade_cluster",
    "remove_node",
    "recover_control_plane",
];

/// The kubespray groups that make an inventory a kubespray cluster's: pre-flight checks nothing of an
/// inventory with none of them (a cluster kok runs other playbooks on).
const KUBESPRAY_GROUPS: [&str; 5] = [
    "kube_control_plane",
    "kube_node",
    "etcd",
    "k8s_cluster",
    "calico_rr",
];

/// True when the inventory has one of kubespray's groups (its legacy names included): the rules apply.
pub fn is_kubespray_inventory(groups: &Groups) -> bool {
    KUBESPRAY_GROUPS.iter().any(|g| groups.groups.contains_key(*g))
}

/// Where kok.yml is for the cluster directory `path` (`clusters/prod-bj` → `kok.yml`).
fn kok_yml_of(path: &str) -> String {
    let root = path
        .trim_end_matches('/')
        .rsplit_once('/')
        .map_or("", |(root, _)| root);
    layout::settings_path(root)
}

/// Where `cluster`'s release is read from: the image in effect (cluster.yml, kok.yml, or kok's default,
/// shown at kok.yml), and `kubesprayVersion`.
pub fn release_source(cluster: &ClusterDir) -> ReleaseSource {
    let settings = &cluster.settings;
    let image = match (&settings.defaults.image, &settings.image_at) {
        (Some(image), Some(at)) => Written {
            value: image.clone(),
            path: at.path.clone(),
            line: at.line,
        },
        (image, _) => Written {
            value: image.clone().unwrap_or_else(|| DEFAULT_IMAGE.to_string()),
            path: kok_yml_of(&cluster.path),
            line: 0,
        },
    };
    let declared = settings.kubespray_version.as_ref().map(|v| {
        let at = settings.kubespray_version_at.clone().unwrap_or_default();
        Written {
            value: v.clone(),
            path: at.path,
            line: at.line,
        }
    });
    ReleaseSource { image, declared }
}

/// A variable of the view as the rules take it; `None` when no host sets it.
fn setting_of(cluster: &ClusterDir, view: &KubesprayView, name: &str) -> Option<Setting> {
    Some(match view.vars.get(name)? {
        Ok(setting) => match &setting.value {
            Known::Value(value) => Setting::Known(Written {
                value: value.clone(),
                path: join(&cluster.path, &setting.origin.path),
                line: setting.origin.line.unwrap_or(0),
            }),
            Known::Unknown(why) => Setting::NotKnown {
                reason: why.to_string(),
            },
        },
        Err(why) => Setting::NotKnown { reason: why.clone() },
    })
}

/// The inventory's hosts and groups as kubespray sees them, with the lines of its groups.
pub fn groups_of(cluster: &ClusterDir, view: &KubesprayView) -> Groups {
    Groups {
        path: join(&cluster.path, &cluster.inventory_dir.inventory_file),
        hosts: view.hosts.clone(),
        groups: view.groups.clone(),
    }
}

/// `cluster` as it stood at the base commit `base`: its inventory and the settings a running cluster keeps
/// ([`FIXED_SETTINGS`]), for rules 11 and 12.
pub fn before_of(cluster: &ClusterDir, base: Base) -> Before {
    let view = cluster.kubespray_view();
    Before {
        base: Some(base),
        inventory: groups_of(cluster, &view),
        settings: FIXED_SETTINGS
            .iter()
            .filter_map(|name| Some((name.to_string(), setting_of(cluster, &view, name)?)))
            .collect(),
    }
}

/// The hosts the `remove-node.yml` runs of `operations` removed (`-e node=` of those that succeeded; with
/// `simulated`, a plan's picture of the base commit where none ran, of every one there).
pub fn removed_hosts<'o>(
    operations: impl IntoIterator<Item = &'o ClusterOperation>,
    simulated: bool,
) -> BTreeSet<String> {
    operations
        .into_iter()
        .filter(|op| {
            op.spec.action_type == ActionType::Playbook && playbook_name(&op.spec.action) == "remove_node"
        })
        .filter(|op| simulated || op.status.as_ref().is_some_and(|s| s.phase == Phase::Succeeded))
        .flat_map(|op| nodes(&op.spec.extra_args))
        .collect()
}

/// The facts of `operations` (in queue order, each with whether this commit would run it): its switches
/// as the entry writes them.
pub fn operation_facts<'a>(operations: Vec<(&'a Operation, bool)>) -> Vec<OperationFacts<'a>> {
    operations
        .into_iter()
        .map(|(operation, pending)| OperationFacts {
            operation,
            pending,
            preflight: operation.preflight,
            allow_release_skip: operation.allow_release_skip,
        })
        .collect()
}

/// The facts of `cluster` for the rules: `operations` are its entries in queue order, each with whether
/// this commit would run it.
pub fn cluster_facts<'a>(
    cluster: &'a ClusterDir,
    operations: Vec<(&'a Operation, bool)>,
    history: History,
    tree: Option<Tree>,
) -> ClusterFacts<'a> {
    let view = cluster.kubespray_view();
    ClusterFacts {
        cluster: &cluster.name,
        release: release_source(cluster),
        kube_version: setting_of(cluster, &view, "kube_version"),
        settings: layout::KUBESPRAY_VARS
            .iter()
            .filter(|name| **name != "kube_version")
            .filter_map(|name| Some((name.to_string(), setting_of(cluster, &view, name)?)))
            .collect(),
        inventory: groups_of(cluster, &view),
        operations_path: join(&cluster.path, OPERATIONS_YML),
        operations: operation_facts(operations),
        facts_playbook: cluster.settings.defaults.facts(),
        previous: history.previous,
        before: history.before,
        removed: history.removed,
        installed: history.installed || cluster.settings.installed.is_some(),
        tree,
        repository_steps: cluster
            .operations
            .iter()
            .flat_map(crate::layout::playbooks::step_actions)
            .filter(|action| cluster.repository_step(action).is_some())
            .map(str::to_string)
            .collect(),
    }
}

/// The findings of `facts` against the release data built into kok (none when that data does not parse,
/// which a unit test rules out).
pub fn check_embedded(facts: &ClusterFacts<'_>) -> Vec<Finding> {
    match Releases::embedded() {
        Ok(data) => super::check(facts, data),
        Err(_) => Vec::new(),
    }
}

/// `kok validate`'s findings for `cluster`, which it sees without a history: every entry counts as still to
/// run, in file order, and a cluster whose operations.yml has a `cluster.yml` entry counts as never
/// installed (so the file order decides rule 9) unless its cluster.yml says `installed:`. The versions
/// `installed:` gives are not compared (validate cannot tell whether kok has a record of the cluster
/// already, which wins over them). Which entries already ran is not known, so a finding about
/// one operation is a warning; those about the cluster as a whole keep their severity.
pub fn validate_cluster(cluster: &ClusterDir) -> Vec<Finding> {
    let installs = cluster
        .operations
        .iter()
        .any(|o| o.action_type == ActionType::Playbook && playbook_name(&o.action) == "cluster");
    let history = History {
        installed: !installs,
        ..History::default()
    };
    let operations = cluster.operations.iter().map(|o| (o, true)).collect();
    let mut found = check_embedded(&cluster_facts(cluster, operations, history, None));
    for f in found.iter_mut().filter(|f| f.operation.is_some()) {
        f.severity = Severity::Warning;
    }
    found
}

/// What a revision of `cluster` asks of kubespray, recorded on its Cluster object for the next commit's
/// rules 2 and 3: the release, and the effective `kube_version` (written, else the release's default).
/// `None` for an inventory that is not kubespray's.
pub fn recorded(cluster: &ClusterDir) -> Option<ClusterKubernetes> {
    let view = cluster.kubespray_view();
    if !KUBESPRAY_GROUPS.iter().any(|g| view.groups.contains_key(*g)) {
        return None;
    }
    let release = match cluster_release(&release_source(cluster)) {
        Resolved::Known(release) => Some(release.value),
        Resolved::Unknown(_) => None,
    };
    let kube_version = match setting_of(cluster, &view, "kube_version") {
        Some(Setting::Known(w)) => w.value.as_str().and_then(Version::parse),
        Some(Setting::NotKnown { .. }) => None,
        None => release
            .zip(Releases::embedded().ok())
            .and_then(|(r, data)| data.get(r))
            .map(|r| r.kube_version.value),
    };
    Some(ClusterKubernetes {
        kube_version: kube_version.map(|v| v.to_string()),
        kubespray_release: release.map(|v| v.to_string()),
    })
}

/// What a cluster adopted with the versions it runs (`installed: {kubeVersion, kubesprayVersion}` in its
/// cluster.yml) records on its new Cluster until kok gives it a run: those versions, each not given the
/// revision's own ([`recorded`]). `None` when cluster.yml gives no version, or for an inventory that is not
/// kubespray's.
pub fn adopted_record(cluster: &ClusterDir) -> Option<ClusterKubernetes> {
    let installed = cluster.settings.installed.as_ref()?;
    if installed.kube_version.is_none() && installed.kubespray_version.is_none() {
        return None;
    }
    let now = recorded(cluster)?;
    let kube_version = installed
        .kube_version
        .as_ref()
        .and_then(|(v, _)| Version::parse(v))
        .map(|v| v.to_string());
    Some(ClusterKubernetes {
        kube_version: kube_version.or(now.kube_version),
        kubespray_release: installed
            .kubespray_version
            .as_ref()
            .map(|(v, _)| v.clone())
            .or(now.kubespray_release),
    })
}

/// The cluster before kok's first commit of it, for a cluster adopted with the versions it runs
/// ([`adopted_record`]): what rules 2 and 3 compare with while kok has no Cluster of it.
pub fn adopted_previous(cluster: &ClusterDir) -> Option<Previous> {
    let record = adopted_record(cluster)?;
    Some(previous_from(&record, Base::Installed, None))
}

/// The cluster before this commit, from what its Cluster object recorded (`spec.kubernetes`) and the
/// version health saw running (`status.kubernetesVersion`); `None` when there is no Cluster yet.
pub fn previous_of(cluster: Option<&Cluster>, base: Base) -> Option<Previous> {
    let cluster = cluster?;
    let observed = cluster
        .status
        .as_ref()
        .and_then(|s| s.kubernetes_version.as_deref())
        .and_then(Version::parse);
    let recorded = cluster.spec.kubernetes.clone().unwrap_or_default();
    Some(previous_from(&recorded, base, observed))
}

/// The cluster before this commit from `recorded` versions (an absent `kube_version` is not known) and the
/// version health saw running.
fn previous_from(recorded: &ClusterKubernetes, base: Base, observed: Option<Version>) -> Previous {
    let kube_version = match recorded.kube_version.as_deref() {
        Some(v) => Setting::Known(Written {
            value: serde_json::Value::String(v.to_string()),
            path: String::new(),
            line: 0,
        }),
        None => Setting::NotKnown {
            reason: "not recorded".to_string(),
        },
    };
    Previous {
        base,
        release: recorded.kubespray_release.as_deref().and_then(Version::parse),
        kube_version: Some(kube_version),
        observed_kube_version: observed,
    }
}

/// True when kok has seen the cluster installed: health saw its API server (`status.kubernetesVersion`), or
/// one of its operations running `cluster.yml` (or a playbook that needs a running cluster) succeeded.
/// `simulated`: the operations are a plan's picture of the base commit (none ran): one running
/// `cluster.yml` counts as installed.
pub fn installed<'o>(
    cluster: Option<&Cluster>,
    operations: impl IntoIterator<Item = &'o ClusterOperation>,
    simulated: bool,
) -> bool {
    let seen = cluster
        .and_then(|c| c.status.as_ref())
        .is_some_and(|s| s.kubernetes_version.is_some());
    seen || operations.into_iter().any(|op| {
        let name = playbook_name(&op.spec.action);
        let phase = op.status.as_ref().map(|s| s.phase).unwrap_or_default();
        op.spec.action_type == ActionType::Playbook
            && match simulated {
                true => name == "cluster",
                false => phase == Phase::Succeeded && SHOWS_INSTALLED.contains(&name.as_str()),
            }
    })
}

/// The entries of `cluster` in queue order with whether each is still to run, from its desired operations
/// (`desired`, rendered from the entries) and the live ones by name: an entry whose operation does not exist
/// yet is new, one that exists is still to run until it finishes; live operations keep their queue
/// position. `simulated`: the live operations are a plan's picture of the base commit, taken as run.
/// Entries without a desired operation are left out.
pub fn queued<'a>(
    cluster: &'a ClusterDir,
    desired: &[ClusterOperation],
    live: &BTreeMap<String, ClusterOperation>,
    simulated: bool,
) -> Vec<(&'a Operation, bool)> {
    let mut out: Vec<(String, &'a Operation, bool)> = desired
        .iter()
        .filter_map(|d| {
            let entry = cluster.operations.iter().find(|o| o.id == d.spec.id)?;
            let name = d.metadata.name.clone().unwrap_or_default();
            Some(match live.get(&name) {
                Some(op) => {
                    let phase = op.status.as_ref().map(|s| s.phase).unwrap_or_default();
                    (
                        op.spec.queue_position.clone(),
                        entry,
                        !simulated && !phase.is_terminal(),
                    )
                }
                None => (d.spec.queue_position.clone(), entry, true),
            })
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.into_iter().map(|(_, o, pending)| (o, pending)).collect()
}

/// The spec's pre-flight of a new operation for `entry`: skipped for `preflight: false`; else the errors of
/// `findings` that refuse it (those about the cluster as a whole, for a playbook, and its own). `None` when
/// there is nothing to say.
pub fn pinned(entry: &Operation, findings: &[Finding]) -> Option<OperationPreflight> {
    if !entry.preflight {
        return Some(OperationPreflight {
            skipped: true,
            findings: Vec::new(),
        });
    }
    let playbook = entry.action_type == ActionType::Playbook;
    let findings: Vec<PreflightFinding> = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .filter(|f| match &f.operation {
            Some(id) => *id == entry.id,
            None => playbook,
        })
        .map(|f| PreflightFinding {
            rule: f.rule.id().to_string(),
            path: f.path.clone(),
            line: u32::try_from(f.line).unwrap_or(u32::MAX),
            message: f.message.clone(),
        })
        .collect();
    (!findings.is_empty()).then_some(OperationPreflight {
        skipped: false,
        findings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{parse_repo, DiskTree, Parsed};
    use crate::preflight::Rule;

    fn parse(files: &[(&str, &str)]) -> Parsed {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        parse_repo(&DiskTree::new(dir.path()), "clusters")
    }

    const INI: &str = "[kube_control_plane]\nnode1\nnode2\nnode3\n\n[etcd:children]\nkube_control_plane\n\n\
                       [etcd]\nnode4\n\n[kube_node]\nnode5\n";

    fn kubespray_dir(ops: &str) -> ClusterDir {
        let parsed = parse(&[
            ("kok.yml", "image: quay.io/kubespray/kubespray:v2.27.0\n"),
            ("clusters/bj/inventory.ini", INI),
            (
                "clusters/bj/group_vars/k8s_cluster/k8s-cluster.yml",
                "# the version\nkube_version: v1.29.10\nkube_network_plugin: calico\n",
            ),
            ("clusters/bj/operations.yml", ops),
            (
                "clusters/bj/cluster.yml",
                "sshAuthSecret: bj-ssh\nkubesprayVersion: v2.27.0\n",
            ),
        ]);
        assert!(!parsed.has_errors(), "{:#?}", parsed.diagnostics);
        parsed.clusters.into_iter().next().unwrap()
    }

    #[test]
    fn facts_point_at_the_files_and_lines_of_the_repository() {
        let dir = kubespray_dir("- id: install\n  action: cluster.yml\n");
        let facts = cluster_facts(&dir, vec![(&dir.operations[0], true)], History::default(), None);
        assert_eq!(facts.release.image.path, "kok.yml");
        assert_eq!(facts.release.image.line, 1);
        let declared = facts.release.declared.as_ref().unwrap();
        assert_eq!(
            (declared.path.as_str(), declared.line),
            ("clusters/bj/cluster.yml", 2)
        );
        let Some(Setting::Known(kube)) = &facts.kube_version else {
            panic!("{:?}", facts.kube_version)
        };
        assert_eq!(kube.value, "v1.29.10");
        assert_eq!(
            (kube.path.as_str(), kube.line),
            ("clusters/bj/group_vars/k8s_cluster/k8s-cluster.yml", 2)
        );
        assert!(facts.settings.contains_key("kube_network_plugin"));
        assert!(
            !facts.settings.contains_key("dns_mode"),
            "set nowhere: kubespray's default"
        );
        assert_eq!(facts.inventory.path, "clusters/bj/inventory.ini");
        assert_eq!(
            facts.inventory.hosts_of("etcd").unwrap(),
            ["node4", "node1", "node2", "node3"]
        );
        assert_eq!(facts.inventory.line_of("etcd"), 6);
        assert_eq!(facts.inventory.line_of("kube_node"), 12);
        assert_eq!(facts.inventory.line_of("k8s_cluster"), 0, "made at run time");
        assert_eq!(facts.operations_path, "clusters/bj/operations.yml");
    }

    #[test]
    fn validate_sees_an_even_etcd_as_an_error_and_an_operations_finding_as_a_warning() {
        let dir = kubespray_dir("- id: add\n  action: scale.yml\n  extraArgs: [--limit=node9]\n");
        let found = validate_cluster(&dir);
        let etcd = found.iter().find(|f| f.rule == Rule::EtcdOdd).unwrap();
        assert_eq!(etcd.severity, Severity::Error);
        assert_eq!((etcd.path.as_str(), etcd.line), ("clusters/bj/inventory.ini", 6));
        let limit = found.iter().find(|f| f.rule == Rule::LimitNames).unwrap();
        assert_eq!(limit.severity, Severity::Warning);
        assert!(
            found.iter().all(|f| f.rule != Rule::Order),
            "no cluster.yml entry: installed"
        );
    }

    #[test]
    fn in_validate_the_file_order_decides_the_order_rule() {
        let dir = kubespray_dir("- id: add\n  action: scale.yml\n- id: install\n  action: cluster.yml\n");
        let found = validate_cluster(&dir);
        let order = found.iter().find(|f| f.rule == Rule::Order).unwrap();
        assert_eq!(order.operation.as_deref(), Some("add"));
        assert_eq!(
            (order.path.as_str(), order.line),
            ("clusters/bj/operations.yml", 1)
        );
    }

    #[test]
    fn a_cluster_said_installed_may_start_with_scale_yml_in_validate_and_in_the_pass() {
        let mut dir = kubespray_dir("- id: add\n  action: scale.yml\n- id: install\n  action: cluster.yml\n");
        let order = |dir: &ClusterDir| {
            let ops = dir.operations.iter().map(|o| (o, true)).collect();
            let facts = cluster_facts(dir, ops, History::default(), None);
            let found = check_embedded(&facts);
            (
                facts.installed,
                found.iter().filter(|f| f.rule == Rule::Order).count(),
            )
        };
        assert_eq!(order(&dir), (false, 1));
        assert_eq!(
            validate_cluster(&dir)
                .iter()
                .filter(|f| f.rule == Rule::Order)
                .count(),
            1
        );
        dir.settings.installed = Some(layout::Installed::default());
        assert_eq!(order(&dir), (true, 0), "no history, but cluster.yml's word");
        assert!(validate_cluster(&dir).iter().all(|f| f.rule != Rule::Order));
        assert_eq!(adopted_previous(&dir), None, "no version given: the inventory's");
        assert_eq!(adopted_record(&dir), None);
    }

    #[test]
    fn the_versions_installed_gives_are_recorded_each_else_the_revisions() {
        let mut dir = kubespray_dir("");
        let at = layout::WrittenAt {
            path: "clusters/bj/cluster.yml".into(),
            line: 2,
        };
        dir.settings.installed = Some(layout::Installed {
            kube_version: Some(("1.28.6".into(), at.clone())),
            ..layout::Installed::default()
        });
        let record = adopted_record(&dir).unwrap();
        assert_eq!(record.kube_version.as_deref(), Some("v1.28.6"));
        assert_eq!(
            record.kubespray_release.as_deref(),
            Some("v2.27.0"),
            "the revision's"
        );
        let previous = adopted_previous(&dir).unwrap();
        assert_eq!(previous.base, Base::Installed);
        assert_eq!(previous.release, Version::parse("v2.27.0"));
        dir.settings.installed = Some(layout::Installed {
            kubespray_version: Some(("v2.25.0".into(), at)),
            ..layout::Installed::default()
        });
        let record = adopted_record(&dir).unwrap();
        assert_eq!(
            (
                record.kube_version.as_deref(),
                record.kubespray_release.as_deref()
            ),
            (Some("v1.29.10"), Some("v2.25.0")),
            "the inventory's kube_version"
        );
        let history = History {
            previous: adopted_previous(&dir),
            ..History::default()
        };
        let found = check_embedded(&cluster_facts(&dir, Vec::new(), history, None));
        let step = found.iter().find(|f| f.rule == Rule::ReleaseStep).unwrap();
        assert!(step
            .message
            .starts_with("kubespray v2.25.0 → v2.27.0 skips a minor release"));
        assert!(
            validate_cluster(&dir).iter().all(|f| f.rule != Rule::ReleaseStep),
            "validate does not compare: a record of kok's may be newer than cluster.yml's word"
        );
    }

    #[test]
    fn an_inventory_without_kubesprays_groups_is_not_checked() {
        let parsed = parse(&[
            ("clusters/local/hosts.yml", "all:\n  hosts:\n    localhost: {}\n"),
            ("clusters/local/vars.yml", "kube_version: v9.9.9\n"),
            (
                "clusters/local/operations.yml",
                "- id: hello\n  action: playbooks/hello.yml\n",
            ),
        ]);
        let dir = &parsed.clusters[0];
        assert_eq!(validate_cluster(dir), []);
        assert_eq!(recorded(dir), None);
    }

    #[test]
    fn a_revision_records_its_release_and_kube_version_or_the_releases_default() {
        let dir = kubespray_dir("");
        let recorded = recorded(&dir).unwrap();
        assert_eq!(recorded.kube_version.as_deref(), Some("v1.29.10"));
        assert_eq!(recorded.kubespray_release.as_deref(), Some("v2.27.0"));
        let mut unset = dir.clone();
        let mut view = unset.kubespray_view().into_owned();
        view.vars.remove("kube_version");
        unset.kubespray = Some(view);
        let default = Releases::embedded()
            .unwrap()
            .get(Version::parse("v2.27.0").unwrap())
            .unwrap();
        assert_eq!(
            super::recorded(&unset).unwrap().kube_version,
            Some(default.kube_version.value.to_string())
        );
    }

    fn op(name: &str, action: &str, phase: Option<Phase>, position: &str) -> ClusterOperation {
        let mut op = ClusterOperation::new(name, Default::default());
        op.spec.id = name.to_string();
        op.spec.action = action.to_string();
        op.spec.queue_position = position.to_string();
        op.status = phase.map(|phase| crate::api::ClusterOperationStatus {
            phase,
            ..Default::default()
        });
        op
    }

    #[test]
    fn installed_is_a_successful_install_or_what_health_saw() {
        let install = op("install", "cluster.yml", Some(Phase::Succeeded), "1");
        let failed = op("install", "cluster.yml", Some(Phase::Failed), "1");
        let ping = op("ping", "ping.yml", Some(Phase::Succeeded), "1");
        assert!(installed(None, [&install], false));
        assert!(!installed(None, [&failed, &ping], false));
        let planned = op("install", "cluster.yml", None, "1");
        assert!(!installed(None, [&planned], false));
        assert!(
            installed(None, [&planned], true),
            "a plan's base that has cluster.yml"
        );
        let mut cluster = Cluster::new("bj", crate::api::ClusterSpec::for_test());
        cluster.status = Some(crate::api::ClusterStatus {
            kubernetes_version: Some("v1.29.10".into()),
            ..Default::default()
        });
        assert!(installed(Some(&cluster), [&failed], false));
        let previous = previous_of(Some(&cluster), Base::LastReconciled).unwrap();
        assert_eq!(previous.observed_kube_version, Version::parse("v1.29.10"));
    }

    #[test]
    fn a_host_counts_as_removed_once_its_remove_node_yml_succeeded_or_in_a_plans_base() {
        let mut removal = op("rm", "remove-node.yml", Some(Phase::Succeeded), "1");
        removal.spec.extra_args = ["-e", "node=node5", "--limit=node5"].map(String::from).to_vec();
        let mut failed = op("rm2", "playbooks/remove_node.yml", Some(Phase::Failed), "2");
        failed.spec.extra_args = ["-e", "node=node6"].map(String::from).to_vec();
        let names = |set: BTreeSet<String>| set.into_iter().collect::<Vec<_>>();
        assert_eq!(names(removed_hosts([&removal, &failed], false)), ["node5"]);
        assert_eq!(
            names(removed_hosts([&removal, &failed], true)),
            ["node5", "node6"],
            "a plan's base: taken as run"
        );
    }

    #[test]
    fn live_operations_keep_their_place_and_count_as_pending_until_they_finish() {
        let dir = kubespray_dir(
            "- id: install\n  action: cluster.yml\n- id: add\n  action: scale.yml\n- id: old\n  action: ping.yml\n",
        );
        let desired = [
            op("install", "cluster.yml", None, "5.0"),
            op("add", "scale.yml", None, "5.1"),
            op("old", "ping.yml", None, "5.2"),
        ];
        let live: BTreeMap<String, ClusterOperation> = [
            (
                "add".to_string(),
                op("add", "scale.yml", Some(Phase::Queued), "1.0"),
            ),
            (
                "old".to_string(),
                op("old", "ping.yml", Some(Phase::Succeeded), "0.0"),
            ),
        ]
        .into();
        let order: Vec<(&str, bool)> = queued(&dir, &desired, &live, false)
            .into_iter()
            .map(|(o, pending)| (o.id.as_str(), pending))
            .collect();
        assert_eq!(order, [("old", false), ("add", true), ("install", true)]);
    }

    #[test]
    fn an_operation_pins_the_errors_about_it_and_about_the_cluster() {
        let dir = kubespray_dir(
            "- id: add\n  action: scale.yml\n  extraArgs: [--limit=node9]\n- id: info\n  type: shell\n  action: hostname\n\
             - id: skip\n  action: cluster.yml\n  preflight: false\n",
        );
        let ops = dir.operations.iter().map(|o| (o, true)).collect();
        let found = check_embedded(&cluster_facts(
            &dir,
            ops,
            History {
                installed: true,
                ..History::default()
            },
            None,
        ));
        let add = pinned(&dir.operations[0], &found).unwrap();
        let rules: Vec<&str> = add.findings.iter().map(|f| f.rule.as_str()).collect();
        assert_eq!(rules, ["etcd-odd", "limit-names"]);
        assert_eq!(add.findings[0].path, "clusters/bj/inventory.ini");
        assert_eq!(
            pinned(&dir.operations[1], &found),
            None,
            "a shell step is no kubespray run"
        );
        let skip = pinned(&dir.operations[2], &found).unwrap();
        assert!(skip.skipped && skip.findings.is_empty());
    }

    #[test]
    fn the_resolver_reads_kube_version_and_every_checked_setting() {
        let read: Vec<&str> = layout::KUBESPRAY_VARS.to_vec();
        assert_eq!(read[0], "kube_version");
        assert!(
            super::super::CHECKED_SETTINGS.iter().all(|s| read.contains(s)),
            "{read:?}"
        );
    }
}
