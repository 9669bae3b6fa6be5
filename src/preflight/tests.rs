//! The rules checked end to end through [`super::check`], on releases from the embedded data.

use std::collections::BTreeMap;

use super::rules::{self, cluster_release, image_release, Resolved};
use super::*;
use crate::api::{Hook, RunDefaults};

const CLUSTER_YML: &str = "clusters/prod-bj/cluster.yml";
const OPERATIONS_YML: &str = "clusters/prod-bj/operations.yml";
const HOSTS_YML: &str = "clusters/prod-bj/hosts.yml";
const GROUP_VARS: &str = "clusters/prod-bj/group_vars/k8s_cluster/k8s-cluster.yml";

fn v(text: &str) -> Version {
    Version::parse(text).unwrap()
}

fn data() -> &'static Releases {
    Releases::embedded().unwrap()
}

fn at<T>(value: T, path: &str, line: usize) -> Written<T> {
    Written {
        value,
        path: path.into(),
        line,
    }
}

fn known(value: &str, line: usize) -> Setting {
    Setting::Known(at(serde_json::json!(value), GROUP_VARS, line))
}

/// An inventory of `groups` (hosts in the order given), group lines numbered from 1.
fn inventory(groups: &[(&str, &[&str])]) -> Groups {
    let mut out = Groups {
        path: HOSTS_YML.into(),
        ..Groups::default()
    };
    for (i, (name, hosts)) in groups.iter().enumerate() {
        out.hosts.extend(hosts.iter().map(|h| h.to_string()));
        out.groups.insert(
            name.to_string(),
            Group {
                hosts: hosts.iter().map(|h| h.to_string()).collect(),
                line: 10 * (i + 1),
            },
        );
    }
    out
}

/// Three control plane and etcd hosts, two workers.
fn three_masters() -> Groups {
    inventory(&[
        ("kube_control_plane", &["node1", "node2", "node3"]),
        ("etcd", &["node1", "node2", "node3"]),
        ("kube_node", &["node4", "node5"]),
        ("k8s_cluster", &["node1", "node2", "node3", "node4", "node5"]),
    ])
}

fn op(id: &str, action: &str, index: usize, args: &[&str]) -> Operation {
    let mut op = Operation::playbook(id, action, index);
    op.extra_args = args.iter().map(|a| a.to_string()).collect();
    op
}

/// A cluster running `release` from its image, installed, with [`three_masters`] and `ops` all pending.
fn facts<'a>(release: &str, ops: &'a [Operation]) -> ClusterFacts<'a> {
    ClusterFacts {
        cluster: "prod-bj",
        release: ReleaseSource {
            image: at(format!("quay.io/kubespray/kubespray:{release}"), CLUSTER_YML, 1),
            declared: None,
        },
        kube_version: None,
        settings: BTreeMap::new(),
        inventory: three_masters(),
        operations_path: OPERATIONS_YML.into(),
        operations: ops
            .iter()
            .map(|operation| OperationFacts {
                operation,
                pending: true,
                preflight: true,
                allow_release_skip: false,
            })
            .collect(),
        facts_playbook: RunDefaults::default().facts(),
        previous: None,
        before: None,
        removed: Default::default(),
        installed: true,
        tree: None,
        repository_steps: Default::default(),
    }
}

fn previous(release: &str, kube: Option<&str>) -> Option<Previous> {
    Some(Previous {
        base: Base::LastReconciled,
        release: Some(v(release)),
        kube_version: kube.map(|k| known(k, 3)),
        observed_kube_version: None,
    })
}

fn of(findings: &[Finding], rule: Rule) -> Vec<&Finding> {
    findings.iter().filter(|f| f.rule == rule).collect()
}

fn only(findings: &[Finding], rule: Rule) -> &Finding {
    let found = of(findings, rule);
    assert_eq!(found.len(), 1, "{rule}: {findings:#?}");
    found[0]
}

fn cited(f: &Finding) -> String {
    f.cites.as_ref().map(ToString::to_string).unwrap_or_default()
}

// ---- the release ----

#[test]
fn the_release_is_the_images_tag_even_from_a_mirror() {
    assert_eq!(
        image_release("quay.io/kubespray/kubespray:v2.27.0"),
        Some(v("v2.27.0"))
    );
    assert_eq!(
        image_release("registry.local:5000/mirror/kubespray:v2.28.1"),
        Some(v("v2.28.1"))
    );
    assert_eq!(image_release("kubespray:v2.24.3"), Some(v("v2.24.3")));
    for silent in [
        "quay.io/kubespray/kubespray@sha256:0123abcd",
        "quay.io/kubespray/kubespray:v2.27.0@sha256:0123abcd",
        "quay.io/kubespray/kubespray:latest",
        "quay.io/kubespray/kubespray",
        "registry.local:5000/runner:v2.27.0",
        "ghcr.io/kubean-io/spray-job:v0.20.0",
    ] {
        assert_eq!(image_release(silent), None, "{silent}");
    }
}

#[test]
fn kubespray_version_wins_over_an_image_that_says_nothing() {
    let source = ReleaseSource {
        image: at("registry.local/custom/runner:2024-05".into(), CLUSTER_YML, 2),
        declared: Some(at("v2.26.1".into(), CLUSTER_YML, 5)),
    };
    assert_eq!(
        cluster_release(&source),
        Resolved::Known(at(v("v2.26.1"), CLUSTER_YML, 5))
    );
    let unknown = ReleaseSource {
        declared: None,
        ..source
    };
    let Resolved::Unknown(why) = cluster_release(&unknown) else {
        panic!("a custom image without kubesprayVersion has no known release");
    };
    assert!(why.value.contains("set kubesprayVersion"), "{}", why.value);
}

#[test]
fn a_release_newer_than_the_data_is_said_plainly_and_checks_nothing_it_cannot_know() {
    let ops = [op("up", "upgrade_cluster_v3.yml", 0, &[])];
    let mut f = facts("v2.32.0", &ops);
    f.kube_version = Some(known("v1.36.1", 4));
    f.settings.insert("kube_network_plugin".into(), known("weave", 5));
    let found = check(&f, data());
    let warning = only(&found, Rule::ReleaseKnown);
    assert_eq!(warning.severity, Severity::Warning);
    assert_eq!(
        warning.message,
        "kubespray v2.32.0 is newer than kok's data (v2.31.0): version rules not checked"
    );
    assert_eq!(found.len(), 1, "{found:#?}");
}

// ---- rule 1 ----

#[test]
fn kube_version_the_release_installs_passes() {
    for (release, kube) in [
        ("v2.24.3", "v1.28.14"),
        ("v2.27.0", "v1.31.4"),
        ("v2.28.0", "1.32.5"),
        ("v2.31.0", "1.35.4"),
    ] {
        let mut f = facts(release, &[]);
        f.kube_version = Some(known(kube, 4));
        assert_eq!(check(&f, data()), [], "{release} {kube}");
    }
}

#[test]
fn kube_version_the_release_cannot_install_names_its_versions_of_that_minor_and_the_nearest_release() {
    let mut f = facts("v2.27.0", &[]);
    f.kube_version = Some(known("v1.31.9", 4));
    let found = check(&f, data());
    let finding = only(&found, Rule::KubeVersionSupported);
    assert_eq!((finding.path.as_str(), finding.line), (GROUP_VARS, 4));
    assert!(
        finding.message.contains("of v1.31 it installs v1.31.0 … v1.31.4"),
        "{}",
        finding.message
    );
    assert!(finding
        .message
        .contains("kubespray v2.27.1 is the nearest release that installs it"));
    assert!(
        cited(finding).starts_with("kubespray v2.27.0 roles/kubespray-defaults/defaults/main/checksums.yml:")
    );
}

#[test]
fn kube_version_of_a_minor_the_release_lacks_points_to_a_release_that_has_it() {
    let mut f = facts("v2.24.0", &[]);
    f.kube_version = Some(known("v1.30.4", 4));
    let finding = check(&f, data()).remove(0);
    assert_eq!(finding.rule, Rule::KubeVersionSupported);
    assert!(finding.message.contains("and no v1.30"), "{}", finding.message);
    assert!(
        finding
            .message
            .contains("kubespray v2.26.0 is the nearest release"),
        "{}",
        finding.message
    );
}

#[test]
fn kube_version_below_the_minimum_cites_kubesprays_minimum_assertion() {
    let mut f = facts("v2.31.0", &[]);
    f.kube_version = Some(known("1.31.4", 4));
    let finding = check(&f, data()).remove(0);
    assert_eq!(finding.rule, Rule::KubeVersionSupported);
    assert!(cited(&finding).starts_with("kubespray v2.31.0 roles/validate_inventory/tasks/main.yml:"));
    let line = data()
        .get(v("v2.31.0"))
        .unwrap()
        .checks
        .kube_version_min
        .as_ref()
        .unwrap()
        .line;
    assert!(cited(&finding).ends_with(&format!(":{line}")));
}

#[test]
fn from_v2_28_kube_version_is_written_without_its_v_and_before_with_it() {
    let mut f = facts("v2.28.0", &[]);
    f.kube_version = Some(known("v1.32.5", 4));
    let finding = only(&check(&f, data()), Rule::KubeVersionSupported).clone();
    assert!(
        finding.message.ends_with("write kube_version: 1.32.5"),
        "{}",
        finding.message
    );
    assert!(cited(&finding).contains("roles/validate_inventory/tasks/main.yml"));
    let mut f = facts("v2.27.0", &[]);
    f.kube_version = Some(known("1.31.4", 4));
    let finding = only(&check(&f, data()), Rule::KubeVersionSupported).clone();
    assert!(
        finding.message.ends_with("write kube_version: v1.31.4"),
        "{}",
        finding.message
    );
}

#[test]
fn a_templated_kube_version_is_not_checked() {
    let mut f = facts("v2.27.0", &[]);
    f.kube_version = Some(Setting::NotKnown {
        reason: "a template".into(),
    });
    f.previous = previous("v2.27.0", Some("v1.29.10"));
    assert_eq!(check(&f, data()), []);
}

#[test]
fn the_checked_out_trees_versions_win_over_the_data() {
    let mut f = facts("v2.27.0", &[]);
    f.kube_version = Some(known("v1.31.5", 4));
    f.tree = Some(Tree {
        playbooks: None,
        kube_versions: Some(vec![v("v1.31.4"), v("v1.31.5")]),
    });
    assert_eq!(check(&f, data()), []);
}

// ---- rule 2 ----

#[test]
fn a_kube_version_bump_over_a_minor_names_the_next_step() {
    let mut f = facts("v2.27.0", &[]);
    f.kube_version = Some(known("v1.31.4", 4));
    f.previous = previous("v2.27.0", Some("v1.29.10"));
    let found = check(&f, data());
    let finding = only(&found, Rule::KubeVersionStep);
    let last = data()
        .get(v("v2.27.0"))
        .unwrap()
        .versions_of(Minor { major: 1, minor: 30 });
    assert_eq!(
        finding.message,
        format!(
            "kube_version v1.29.10 (at the last reconciled commit) → v1.31.4 skips v1.30: set kube_version to \
             v1.30.x first (kubespray v2.27.0 installs v1.30.0 … {}); kubeadm and kubespray upgrade one minor at \
             a time; the whole path, one commit each: {} (kubespray v2.27.0) → v1.31.4 (kubespray v2.27.0)",
            last.last().unwrap(),
            last.last().unwrap()
        )
    );
    assert_eq!(
        (finding.path.as_str(), finding.line, finding.severity),
        (GROUP_VARS, 4, Severity::Error)
    );
    assert_eq!(found.len(), 1, "{found:#?}");
}

#[test]
fn one_minor_at_a_time_passes_and_a_downgrade_is_refused() {
    let mut f = facts("v2.27.0", &[]);
    f.kube_version = Some(known("v1.30.4", 4));
    f.previous = previous("v2.27.0", Some("v1.29.10"));
    assert_eq!(check(&f, data()), []);
    f.previous = previous("v2.27.0", Some("v1.31.0"));
    let found = check(&f, data());
    assert!(only(&found, Rule::KubeVersionDowngrade)
        .message
        .contains("is a downgrade"));
}

#[test]
fn the_version_seen_running_is_the_old_value() {
    let mut f = facts("v2.28.0", &[]);
    f.kube_version = Some(known("1.32.5", 4));
    f.previous = Some(Previous {
        base: Base::PullRequest,
        release: Some(v("v2.28.0")),
        kube_version: Some(known("1.32.0", 4)),
        observed_kube_version: Some(v("v1.30.2")),
    });
    let finding = only(&check(&f, data()), Rule::KubeVersionStep).clone();
    assert!(finding
        .message
        .starts_with("kube_version v1.30.2 (seen running) → v1.32.5 skips v1.31"));
    assert!(
        finding.message.contains("(kubespray v2.28.0 installs v1.31.0 … "),
        "{}",
        finding.message
    );
}

#[test]
fn a_new_release_moves_an_unset_kube_version_by_its_default() {
    let mut f = facts("v2.27.0", &[]);
    f.previous = previous("v2.25.1", None);
    f.operations = Vec::new();
    let found = check(&f, data());
    let step = only(&found, Rule::KubeVersionStep);
    assert!(step
        .message
        .starts_with("kube_version v1.29.10 (at the last reconciled commit) → v1.31.4"));
    assert_eq!((step.path.as_str(), step.line), (CLUSTER_YML, 1));
}

// ---- rule 3 ----

#[test]
fn moving_over_a_minor_release_is_refused_unless_the_operation_allows_it() {
    let ops = [op("upgrade", "upgrade-cluster.yml", 0, &[])];
    let mut f = facts("v2.27.0", &ops);
    f.previous = previous("v2.25.1", Some("v1.29.10"));
    f.kube_version = Some(known("v1.30.4", 4));
    let found = check(&f, data());
    let finding = only(&found, Rule::ReleaseStep);
    assert!(finding
        .message
        .contains("do not skip minor releases when upgrading: upgrade by one tag at a time"));
    assert!(
        finding.message.contains("move to v2.26.1 first"),
        "{}",
        finding.message
    );
    assert!(cited(finding).starts_with("kubespray v2.27.0 docs/operations/upgrades.md:"));
    f.operations[0].allow_release_skip = true;
    assert_eq!(of(&check(&f, data()), Rule::ReleaseStep), Vec::<&Finding>::new());
    f.previous = previous("v2.26.1", Some("v1.29.10"));
    f.operations[0].allow_release_skip = false;
    assert_eq!(check(&f, data()), []);
}

#[test]
fn an_operations_own_image_is_held_to_the_same_step() {
    let mut upgrade = op("upgrade", "upgrade_cluster.yml", 0, &[]);
    upgrade.image = Some("quay.io/kubespray/kubespray:v2.31.0".into());
    let ops = [upgrade];
    let mut f = facts("v2.29.1", &ops);
    f.previous = previous("v2.29.1", Some("1.33.5"));
    let found = check(&f, data());
    let finding = only(&found, Rule::ReleaseStep);
    assert_eq!(finding.operation.as_deref(), Some("upgrade"));
    assert_eq!(
        (finding.path.as_str(), finding.line),
        (OPERATIONS_YML, ops[0].line)
    );
}

// ---- rule 4 ----

#[test]
fn a_fourth_etcd_host_fails_the_odd_count() {
    for release in ["v2.24.0", "v2.27.0", "v2.28.1", "v2.31.0"] {
        let mut f = facts(release, &[]);
        f.inventory = inventory(&[
            ("kube_control_plane", &["node1", "node2", "node3"]),
            ("etcd", &["node1", "node2", "node3", "node4"]),
            ("kube_node", &["node4", "node5"]),
        ]);
        let found = check(&f, data());
        let finding = only(&found, Rule::EtcdOdd);
        assert!(
            finding.message.starts_with("etcd has 4 hosts: "),
            "{}",
            finding.message
        );
        assert!(finding.message.contains("\"Stop if even number of etcd hosts\""));
        assert_eq!((finding.path.as_str(), finding.line), (HOSTS_YML, 20));
        let check = data().get(v(release)).unwrap().checks.etcd_odd.clone().unwrap();
        assert_eq!(
            cited(finding),
            format!("kubespray {release} {}:{}", check.path, check.line)
        );
    }
}

#[test]
fn without_an_etcd_group_kubespray_from_v2_28_counts_the_control_plane() {
    let mut f = facts("v2.31.0", &[]);
    f.settings
        .insert("etcd_deployment_type".into(), known("kubeadm", 6));
    f.inventory = inventory(&[
        ("kube_control_plane", &["node1", "node2"]),
        ("kube_node", &["node3"]),
    ]);
    let found = check(&f, data());
    assert!(only(&found, Rule::EtcdOdd)
        .message
        .contains("counts kube_control_plane"));
    let mut f = facts("v2.27.0", &[]);
    f.settings
        .insert("etcd_deployment_type".into(), known("kubeadm", 6));
    f.inventory = inventory(&[
        ("kube_control_plane", &["node1", "node2"]),
        ("kube_node", &["node3"]),
    ]);
    assert_eq!(check(&f, data()), []);
}

#[test]
fn empty_groups_are_refused_as_each_release_refuses_them() {
    let mut f = facts("v2.24.0", &[]);
    f.inventory = inventory(&[
        ("kube_control_plane", &["node1"]),
        ("etcd", &["node1"]),
        ("kube_node", &[]),
    ]);
    let found = check(&f, data());
    assert!(only(&found, Rule::GroupNotEmpty)
        .message
        .starts_with("kube_node has no host"));
    f.release.image.value = "quay.io/kubespray/kubespray:v2.27.0".into();
    assert_eq!(check(&f, data()), []);
    f.inventory = inventory(&[("kube_control_plane", &["node1"]), ("kube_node", &["node2"])]);
    let found = check(&f, data());
    assert!(only(&found, Rule::GroupNotEmpty)
        .message
        .starts_with("etcd has no host"));
    f.settings
        .insert("etcd_deployment_type".into(), known("kubeadm", 6));
    assert_eq!(check(&f, data()), []);
}

// ---- rule 5 ----

#[test]
fn removing_the_first_control_plane_host_is_refused() {
    let ops = [op("rm", "remove-node.yml", 0, &["-e", "node=node1"])];
    let found = check(&facts("v2.27.0", &ops), data());
    let first: Vec<&str> = of(&found, Rule::RemoveNode)
        .iter()
        .map(|f| f.message.as_str())
        .collect();
    assert_eq!(first.len(), 2, "{found:#?}");
    assert!(first[0].starts_with("node1 is the first host of kube_control_plane"));
    assert!(first[1].starts_with("node1 is the first host of etcd"));
    let finding = of(&found, Rule::RemoveNode)[0];
    assert_eq!(finding.operation.as_deref(), Some("rm"));
    assert!(cited(finding).starts_with("kubespray v2.27.0 docs/operations/nodes.md:"));
}

#[test]
fn removing_a_host_the_inventory_lacks_is_refused() {
    let ops = [op(
        "rm",
        "remove-node.yml",
        0,
        &["-e", "node=node9 skip_confirmation=true"],
    )];
    let found = check(&facts("v2.31.0", &ops), data());
    assert!(only(&found, Rule::RemoveNode)
        .message
        .starts_with("node=node9 is not a host of the inventory"));
}

#[test]
fn removing_a_worker_passes_and_the_counts_must_hold_after_removing_an_etcd_host() {
    let ops = [op(
        "rm",
        "remove-node.yml",
        0,
        &["-e", "node=node5", "-e", "skip_confirmation=true"],
    )];
    assert_eq!(check(&facts("v2.28.0", &ops), data()), []);
    let ops = [op("rm", "remove-node.yml", 0, &["-e", "node=node3"])];
    let found = check(&facts("v2.28.0", &ops), data());
    let after = only(&found, Rule::EtcdOdd);
    assert!(after
        .message
        .starts_with("once remove-node.yml has removed node3, etcd has 2 hosts"));
    assert_eq!(
        (after.path.as_str(), after.operation.as_deref()),
        (OPERATIONS_YML, Some("rm"))
    );
}

#[test]
fn remove_node_without_a_node_is_refused_in_each_releases_words() {
    let ops = [op("rm", "playbooks/remove_node.yml", 0, &[])];
    let old = check(&facts("v2.24.2", &ops), data());
    assert!(only(&old, Rule::RemoveNode)
        .message
        .contains("runs on every host of etcd:k8s_cluster:calico_rr"));
    let new = check(&facts("v2.28.0", &ops), data());
    let finding = only(&new, Rule::RemoveNode);
    assert!(finding.message.contains("kubespray v2.28.0 stops without it"));
    assert!(cited(finding).starts_with("kubespray v2.28.0 playbooks/remove_node.yml:"));
}

#[test]
fn an_empty_node_is_refused_because_kubespray_then_removes_every_worker() {
    for args in [
        &["-e", "node="][..],
        &["-e", "node=\"\" skip_confirmation=true"][..],
    ] {
        let ops = [op("rm", "remove-node.yml", 0, args)];
        let found = check(&facts("v2.27.0", &ops), data());
        let finding = only(&found, Rule::RemoveNode);
        assert!(
            finding
                .message
                .starts_with("remove-node.yml with an empty -e node= names no host"),
            "{finding:?}"
        );
        assert_eq!(cited(finding), rules::EMPTY_NODE_ISSUE);
    }
}

// ---- rule 10 ----

#[test]
fn remove_node_and_reset_without_their_answers_are_refused_as_a_job_has_no_terminal() {
    let ops = [op("rm", "remove-node.yml", 0, &["-e", "node=node5"])];
    let found = check(&facts("v2.27.0", &ops), data());
    let prompt = only(&found, Rule::Prompt);
    assert!(
        prompt.message.ends_with("add `-e skip_confirmation=true`"),
        "{prompt:?}"
    );
    assert!(prompt.message.contains("a Job has no terminal"));
    assert_eq!(cited(prompt), "kubespray v2.27.0 playbooks/remove_node.yml:9");
    assert_eq!(
        (prompt.path.as_str(), prompt.operation.as_deref()),
        (OPERATIONS_YML, Some("rm"))
    );
    for answered in [
        &["-e", "node=node5", "-e", "skip_confirmation=true"][..],
        &["-e", "node=node5 skip_confirmation=yes"][..],
        &["-e", "{\"node\": \"node5\", \"skip_confirmation\": true}"][..],
        &["-e", "node=node5", "-e", "@answers.yml"][..],
    ] {
        let ops = [op("rm", "remove-node.yml", 0, answered)];
        assert_eq!(
            of(&check(&facts("v2.27.0", &ops), data()), Rule::Prompt),
            Vec::<&Finding>::new(),
            "{answered:?}"
        );
    }
    let ops = [op(
        "rm",
        "remove-node.yml",
        0,
        &["-e", "node=node5", "-e", "skip_confirmation=false"],
    )];
    assert_eq!(of(&check(&facts("v2.27.0", &ops), data()), Rule::Prompt).len(), 1);

    let ops = [op("reset", "reset.yml", 0, &[])];
    let reset = check(&facts("v2.27.0", &ops), data());
    let prompt = only(&reset, Rule::Prompt);
    assert!(
        prompt.message.ends_with("add `-e reset_confirmation=yes`"),
        "{prompt:?}"
    );
    assert_eq!(cited(prompt), "kubespray v2.27.0 playbooks/reset.yml:21");
    let ops = [op("reset", "reset.yml", 0, &["-e", "skip_confirmation=true"])];
    let skipped = check(&facts("v2.27.0", &ops), data());
    assert!(
        only(&skipped, Rule::Prompt)
            .message
            .contains("still fails without reset_confirmation"),
        "kubespray v2.27.0's Check confirmation fails with skip_confirmation alone"
    );
    let ops = [op("reset", "reset.yml", 0, &["-e", "reset_confirmation=yes"])];
    assert_eq!(
        of(&check(&facts("v2.27.0", &ops), data()), Rule::Prompt),
        Vec::<&Finding>::new()
    );
}

#[test]
fn an_upgrade_that_pauses_for_a_keypress_is_refused_where_the_switch_is_written() {
    let ops = [op("up", "upgrade-cluster.yml", 0, &[])];
    let mut cluster = facts("v2.27.0", &ops);
    cluster.settings.insert(
        "upgrade_node_post_upgrade_confirm".into(),
        Setting::Known(at(serde_json::json!(true), GROUP_VARS, 7)),
    );
    let found = check(&cluster, data());
    let prompt = only(&found, Rule::Prompt);
    assert_eq!((prompt.path.as_str(), prompt.line), (GROUP_VARS, 7));
    assert!(
        prompt
            .message
            .starts_with("upgrade_node_post_upgrade_confirm is true"),
        "{prompt:?}"
    );
    assert_eq!(
        cited(prompt),
        "kubespray v2.27.0 roles/upgrade/post-upgrade/tasks/main.yml:14"
    );
    let ops = [op(
        "up",
        "upgrade-cluster.yml",
        0,
        &["-e", "upgrade_node_confirm=true"],
    )];
    let found = check(&facts("v2.27.0", &ops), data());
    assert_eq!(
        cited(only(&found, Rule::Prompt)),
        "kubespray v2.27.0 roles/upgrade/pre-upgrade/tasks/main.yml:3"
    );
    let ops = [op(
        "up",
        "upgrade-cluster.yml",
        0,
        &["-e", "upgrade_node_confirm=false"],
    )];
    assert_eq!(
        of(&check(&facts("v2.27.0", &ops), data()), Rule::Prompt),
        Vec::<&Finding>::new()
    );
}

// ---- rules 11 and 12 ----

/// [`facts`] with the base commit's inventory `before` and settings.
fn changed<'a>(ops: &'a [Operation], before: Groups, settings: &[(&str, &str)]) -> ClusterFacts<'a> {
    let mut facts = facts("v2.27.0", ops);
    facts.before = Some(Before {
        base: Some(Base::PullRequest),
        inventory: before,
        settings: settings
            .iter()
            .map(|(n, v)| (n.to_string(), known(v, 2)))
            .collect(),
    });
    facts
}

/// [`three_masters`] with `node6` more in `group` (and in k8s_cluster).
fn with_node6(group: &str) -> Groups {
    let mut groups = three_masters();
    groups.hosts.insert("node6".into());
    for name in [group, "k8s_cluster"] {
        groups.groups.get_mut(name).unwrap().hosts.push("node6".into());
    }
    groups
}

#[test]
fn a_worker_added_without_an_operation_that_reaches_it_is_a_warning_naming_the_entry() {
    let mut facts = changed(&[], three_masters(), &[]);
    facts.inventory = with_node6("kube_node");
    let found = check(&facts, data());
    let added = only(&found, Rule::HostNotReached);
    assert_eq!(added.severity, Severity::Warning);
    assert_eq!((added.path.as_str(), added.line), (HOSTS_YML, 30));
    assert!(
        added.message.starts_with(
            "node6 is new in kube_node and no pending operation reaches it: add - {id: add-node6, action: \
             scale.yml, extraArgs: [--limit=node6]} to operations.yml"
        ),
        "{added:?}"
    );
    assert_eq!(cited(added), "kubespray v2.27.0 docs/operations/nodes.md:63");
    for (action, args) in [
        ("scale.yml", &["--limit=node6"][..]),
        ("scale.yml", &[][..]),
        ("cluster.yml", &["--limit=kube_node"][..]),
    ] {
        let ops = [op("add", action, 0, args)];
        let mut facts = changed(&ops, three_masters(), &[]);
        facts.inventory = with_node6("kube_node");
        assert_eq!(
            of(&check(&facts, data()), Rule::HostNotReached),
            Vec::<&Finding>::new(),
            "{action} {args:?}"
        );
    }
    let ops = [op("add", "scale.yml", 0, &["--limit=node5"])];
    let mut facts = changed(&ops, three_masters(), &[]);
    facts.inventory = with_node6("kube_node");
    assert_eq!(
        of(&check(&facts, data()), Rule::HostNotReached).len(),
        1,
        "a limit that misses it"
    );
}

#[test]
fn a_control_plane_host_is_reached_by_cluster_yml_and_not_by_scale_yml() {
    let ops = [op("add", "scale.yml", 0, &["--limit=node6"])];
    let mut facts = changed(&ops, three_masters(), &[]);
    facts.inventory = with_node6("kube_control_plane");
    let found = check(&facts, data());
    let added = only(&found, Rule::HostNotReached);
    assert!(added.message.contains("cluster.yml, not scale.yml"), "{added:?}");
    assert!(
        added
            .message
            .contains("add - {id: add-node6, action: cluster.yml} to"),
        "{added:?}"
    );
    let ops = [op("add", "cluster.yml", 0, &[])];
    let mut facts = changed(&ops, three_masters(), &[]);
    facts.inventory = with_node6("kube_control_plane");
    assert_eq!(
        of(&check(&facts, data()), Rule::HostNotReached),
        Vec::<&Finding>::new()
    );
}

#[test]
fn a_host_dropped_before_remove_node_succeeded_is_an_error_naming_the_two_commits() {
    let mut facts = changed(&[], with_node6("kube_node"), &[]);
    let found = check(&facts, data());
    let dropped = only(&found, Rule::HostDropped);
    assert_eq!(dropped.severity, Severity::Error);
    assert!(
        dropped
            .message
            .starts_with("node6 is dropped from clusters/prod-bj/hosts.yml (kube_node)"),
        "{dropped:?}"
    );
    assert!(dropped.message.contains("Take two commits: first, with node6 still in the inventory, add - {id: remove-node6, action: remove-node.yml, extraArgs: [-e, node=node6, -e, skip_confirmation=true]}"));
    facts.removed.insert("node6".into());
    assert_eq!(
        check(&facts, data()),
        [],
        "removed first: dropping it is the second commit"
    );
    facts.removed.clear();
    facts.installed = false;
    assert_eq!(
        of(&check(&facts, data()), Rule::HostDropped),
        Vec::<&Finding>::new(),
        "nothing to remove yet"
    );
}

#[test]
fn a_setting_a_running_cluster_keeps_may_change_only_with_reset_then_cluster_yml() {
    let mut facts = changed(&[], three_masters(), &[("kube_network_plugin", "calico")]);
    facts
        .settings
        .insert("kube_network_plugin".into(), known("cilium", 9));
    let found = check(&facts, data());
    let fixed = only(&found, Rule::SettingFixed);
    assert_eq!((fixed.path.as_str(), fixed.line), (GROUP_VARS, 9));
    assert!(
        fixed.message.starts_with(
            "kube_network_plugin: calico (at the pull request's base) → cilium on a running cluster"
        ),
        "{fixed:?}"
    );
    assert_eq!(cited(fixed), "kubespray v2.27.0 docs/ansible/vars.md:72");
    // Unset at the base is kubespray's default.
    let mut facts = changed(&[], three_masters(), &[]);
    facts
        .settings
        .insert("kube_pods_subnet".into(), known("10.234.64.0/18", 4));
    assert!(only(&check(&facts, data()), Rule::SettingFixed)
        .message
        .starts_with("kube_pods_subnet: 10.233.64.0/18 (at"));
    facts
        .settings
        .insert("kube_pods_subnet".into(), known("10.233.64.0/18", 4));
    assert_eq!(check(&facts, data()), [], "the default written out is no change");
    let ops = [
        op("reset", "reset.yml", 0, &["-e", "reset_confirmation=yes"]),
        op("reinstall", "cluster.yml", 1, &[]),
    ];
    let mut facts = changed(&ops, three_masters(), &[("container_manager", "containerd")]);
    facts
        .settings
        .insert("container_manager".into(), known("crio", 5));
    assert_eq!(
        of(&check(&facts, data()), Rule::SettingFixed),
        Vec::<&Finding>::new(),
        "reset then cluster.yml"
    );
    let swapped = [ops[1].clone(), ops[0].clone()];
    let mut facts = changed(&swapped, three_masters(), &[("container_manager", "containerd")]);
    facts
        .settings
        .insert("container_manager".into(), known("crio", 5));
    assert_eq!(
        of(&check(&facts, data()), Rule::SettingFixed).len(),
        1,
        "cluster.yml before reset.yml"
    );
}

// ---- upgrade paths ----

#[test]
fn a_refused_jump_lists_the_whole_path_and_the_commits_to_paste() {
    let mut cluster = facts("v2.27.0", &[]);
    cluster.previous = previous("v2.27.0", Some("v1.29.10"));
    cluster.kube_version = Some(known("v1.31.4", 3));
    let found = check(&cluster, data());
    let step = only(&found, Rule::KubeVersionStep);
    assert!(
        step.message.contains("; the whole path, one commit each: v1.30."),
        "{step:?}"
    );
    assert!(
        step.message.ends_with("→ v1.31.4 (kubespray v2.27.0)"),
        "{step:?}"
    );
    let paste = step.upgrade_path.as_deref().unwrap();
    assert!(
        paste.starts_with("# commit 1 of 2: kube_version: v1.30."),
        "{paste}"
    );
    assert!(
        paste.contains(&format!("in {GROUP_VARS}:3\n- id: upgrade-1-30-")),
        "{paste}"
    );
    assert!(
        paste.ends_with("- id: upgrade-1-31-4\n  action: upgrade-cluster.yml\n"),
        "{paste}"
    );

    let mut cluster = facts("v2.27.0", &[]);
    cluster.previous = previous("v2.25.0", Some("v1.29.10"));
    cluster.kube_version = Some(known("v1.30.4", 3));
    let found = check(&cluster, data());
    let release = only(&found, Rule::ReleaseStep);
    let paste = release.upgrade_path.as_deref().unwrap();
    assert!(
        paste.contains("; image: quay.io/kubespray/kubespray:v2.26."),
        "{paste}"
    );
    assert!(
        paste.contains(&format!(
            "; image: quay.io/kubespray/kubespray:v2.27.0 in {CLUSTER_YML}"
        )),
        "{paste}"
    );
}

// ---- rule 6 ----

#[test]
fn an_action_the_release_lacks_names_the_one_it_has() {
    let ops = [op("up", "upgrade_cluster.yml", 0, &[])];
    let found = check(&facts("v2.27.0", &ops), data());
    let finding = only(&found, Rule::PlaybookExists);
    assert_eq!(
        finding.message,
        "action upgrade_cluster.yml is not a playbook of kubespray v2.27.0: it has upgrade-cluster.yml"
    );
    assert_eq!(check(&facts("v2.31.0", &ops), data()), []);
}

#[test]
fn hooks_are_looked_for_too_and_the_images_workdir_is_understood() {
    let mut up = op("up", "/kubespray/upgrade-cluster.yml", 0, &[]);
    up.pre_hooks = vec![Hook {
        action: "facts.yml".into(),
        action_type: Default::default(),
        extra_args: vec![],
    }];
    up.post_hooks = vec![Hook {
        action: "check.sh".into(),
        action_type: crate::api::ActionType::Shell,
        extra_args: vec![],
    }];
    let ops = [up];
    let found = check(&facts("v2.24.1", &ops), data());
    let finding = only(&found, Rule::PlaybookExists);
    assert!(finding
        .message
        .starts_with("hook facts.yml is not a playbook of kubespray v2.24.1: it has playbooks/facts.yml"));
}

#[test]
fn a_step_kept_in_the_repository_is_not_looked_for_in_the_release() {
    let mut hello = op("hello", "playbooks/hello.yml", 0, &[]);
    hello.post_hooks = vec![Hook {
        action: "upgrade_cluster.yml".into(),
        action_type: Default::default(),
        extra_args: vec![],
    }];
    let ops = [hello];
    let mut f = facts("v2.27.0", &ops);
    assert_eq!(of(&check(&f, data()), Rule::PlaybookExists).len(), 2);
    f.repository_steps = ["playbooks/hello.yml".to_string()].into();
    let found = check(&f, data());
    let finding = only(&found, Rule::PlaybookExists);
    assert!(
        finding
            .message
            .starts_with("hook upgrade_cluster.yml is not a playbook of kubespray v2.27.0"),
        "a path in neither is still refused: {}",
        finding.message
    );
}

#[test]
fn the_checked_out_trees_playbooks_win_over_the_data() {
    let ops = [op("site", "site.yml", 0, &[])];
    let mut f = facts("v2.27.0", &ops);
    assert_eq!(of(&check(&f, data()), Rule::PlaybookExists).len(), 1);
    f.tree = Some(Tree {
        playbooks: Some(["site.yml".to_string(), "cluster.yml".to_string()].into()),
        kube_versions: None,
    });
    assert_eq!(check(&f, data()), []);
}

// ---- rule 7 ----

#[test]
fn a_limit_naming_nothing_of_the_inventory_is_refused() {
    let ops = [op("add", "scale.yml", 0, &["--limit=node9,kube_node"])];
    let found = check(&facts("v2.26.0", &ops), data());
    let finding = only(&found, Rule::LimitNames);
    assert!(finding
        .message
        .starts_with("--limit names node9, neither a host nor a group"));
}

#[test]
fn a_limit_run_keeps_the_facts_step_where_the_release_asserts_a_fact_cache() {
    let ops = [op("add", "scale.yml", 0, &["--limit=node5"])];
    let mut f = facts("v2.27.0", &ops);
    assert_eq!(check(&f, data()), []);
    f.facts_playbook = None;
    let found = check(&f, data());
    let finding = only(&found, Rule::LimitFacts);
    assert!(finding.message.contains("factsPlaybook: none"));
    assert!(cited(finding)
        .starts_with("kubespray v2.27.0 roles/kubernetes/preinstall/tasks/0040-verify-settings.yml:"));
    f.release.image.value = "quay.io/kubespray/kubespray:v2.26.1".into();
    assert_eq!(check(&f, data()), [], "v2.26 has no fact-cache assertion");
    f.release.image.value = "quay.io/kubespray/kubespray:v2.31.0".into();
    f.facts_playbook = Some(crate::api::FactsPlaybook {
        path: "facts.yml".into(),
        optional: false,
    });
    assert!(only(&check(&f, data()), Rule::LimitFacts)
        .message
        .contains("the facts step facts.yml is not one"));
}

// ---- rule 8 ----

#[test]
fn settings_hold_a_value_their_release_accepts() {
    let mut f = facts("v2.31.0", &[]);
    f.settings.insert("kube_network_plugin".into(), known("weave", 7));
    let found = check(&f, data());
    let finding = only(&found, Rule::SettingAccepted);
    assert!(finding
        .message
        .starts_with("kube_network_plugin: \"weave\" is not a value kubespray v2.31.0 accepts"));
    assert!(cited(finding).starts_with("kubespray v2.31.0 roles/validate_inventory/tasks/main.yml:"));
    f.release.image.value = "quay.io/kubespray/kubespray:v2.24.0".into();
    assert_eq!(check(&f, data()), []);
    f.settings.clear();
    f.settings.insert("kube_proxy_mode".into(), known("nftables", 7));
    assert_eq!(
        of(&check(&f, data()), Rule::SettingAccepted).len(),
        1,
        "nftables comes with v2.28"
    );
    f.release.image.value = "quay.io/kubespray/kubespray:v2.28.0".into();
    assert_eq!(check(&f, data()), []);
}

#[test]
fn etcd_in_docker_needs_docker_as_the_container_manager() {
    let mut f = facts("v2.27.0", &[]);
    f.settings
        .insert("etcd_deployment_type".into(), known("docker", 8));
    let found = check(&f, data());
    let finding = only(&found, Rule::SettingAccepted);
    assert!(finding
        .message
        .starts_with("etcd_deployment_type: docker needs container_manager: docker"));
    assert_eq!(finding.line, 8);
    f.settings.insert("container_manager".into(), known("docker", 9));
    assert_eq!(check(&f, data()), []);
}

// ---- rule 9 ----

#[test]
fn on_a_cluster_never_installed_scale_before_cluster_yml_is_refused() {
    let ops = [
        op("add", "scale.yml", 0, &[]),
        op("install", "cluster.yml", 1, &[]),
    ];
    let mut f = facts("v2.27.0", &ops);
    f.installed = false;
    let found = check(&f, data());
    let finding = only(&found, Rule::Order);
    assert!(finding
        .message
        .contains("is queued before cluster.yml (operation install, line 3)"));
    assert_eq!(finding.operation.as_deref(), Some("add"));
    let ops = [
        op("install", "cluster.yml", 0, &[]),
        op("add", "scale.yml", 1, &[]),
    ];
    let mut f = facts("v2.27.0", &ops);
    f.installed = false;
    assert_eq!(check(&f, data()), []);
    // In file order after cluster.yml, but queued before it: the entry was changed in an earlier commit.
    f.operations.reverse();
    let finding = only(&check(&f, data()), Rule::Order).clone();
    assert!(
        finding
            .message
            .contains("an entry queues by the commit that last changed it and install was changed later"),
        "{}",
        finding.message
    );
    f.operations.reverse();
    f.installed = true;
    let ops = [op("up", "upgrade-cluster.yml", 0, &[])];
    let mut f = facts("v2.27.0", &ops);
    f.installed = false;
    assert!(only(&check(&f, data()), Rule::Order)
        .message
        .contains("queue cluster.yml before it"));
}

// ---- switches ----

#[test]
fn preflight_false_skips_the_operations_rules_and_alone_the_clusters() {
    let ops = [op("up", "upgrade_cluster.yml", 0, &["--limit=node9"])];
    let mut f = facts("v2.27.0", &ops);
    f.inventory = inventory(&[("kube_control_plane", &["node1"]), ("etcd", &["node1", "node2"])]);
    assert!(!check(&f, data()).is_empty());
    f.operations[0].preflight = false;
    assert_eq!(check(&f, data()), []);
    let done = [op("old", "cluster.yml", 0, &[])];
    let mut f = facts("v2.27.0", &done);
    f.operations[0].pending = false;
    f.inventory = inventory(&[("kube_control_plane", &["node1"]), ("etcd", &["node1", "node2"])]);
    assert_eq!(
        of(&check(&f, data()), Rule::EtcdOdd).len(),
        1,
        "no pending operation opts out"
    );
}

#[test]
fn a_finding_becomes_a_diagnostic_naming_its_rule_and_source() {
    let mut f = facts("v2.27.0", &[]);
    f.settings.insert("dns_mode".into(), known("core_dns", 9));
    let finding = check(&f, data()).remove(0);
    let diagnostic = finding.to_diagnostic("prod-bj");
    assert_eq!(diagnostic.path, GROUP_VARS);
    assert_eq!(diagnostic.line, 9);
    assert!(diagnostic
        .message
        .contains("(did you mean coredns?) [setting-accepted: kubespray v2.27.0 roles/"));
    assert_eq!(
        Rule::ALL.map(Rule::id).len(),
        Rule::ALL.iter().collect::<std::collections::BTreeSet<_>>().len()
    );
}
