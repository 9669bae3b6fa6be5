//! cluster.yml and kok.yml: run settings, validated, and merged per key (cluster.yml wins).

use std::collections::BTreeMap;

use super::diag::{get, keyed_map, parse_yaml, FileDiags};
use super::labels::parse_labels;
use super::maintenance::parse_maintenance;
use super::names::is_dns1123_subdomain;
use super::notifications::parse_notifications;
use super::yaml::{Kind, Node};
use super::{Installed, Settings, WrittenAt};
use crate::spec::{DEFAULT_FACTS_PLAYBOOK, FACTS_PLAYBOOK_NONE};

/// Keys cluster.yml and kok.yml may hold.
pub const SETTINGS_KEYS: &[&str] = &[
    "sshAuthSecret",
    "image",
    "serviceAccount",
    "resources",
    "activeDeadlineSeconds",
    "startTimeout",
    "historyLimit",
    "factsPlaybook",
    "kubeconfigSecret",
    "vaultPasswordSecret",
    "kubesprayVersion",
    "labels",
    "maintenance",
    "notifications",
    "installed",
    "certificateWindowDays",
];

/// Parses and validates a settings file (`file` is `cluster.yml` or `kok.yml`, for messages).
pub(crate) fn parse_settings(text: &str, file: &str, diags: &mut FileDiags<'_>) -> Settings {
    let mut settings = Settings::default();
    let Ok(Some(root)) = parse_yaml(text, diags) else {
        return settings;
    };
    if root.is_null() {
        return settings;
    }
    let expected = || {
        format!(
            "{file} must be a mapping of settings ({})",
            SETTINGS_KEYS.join(", ")
        )
    };
    let Some(map) = keyed_map(&root, SETTINGS_KEYS, file, expected, diags) else {
        return settings;
    };
    secret_names(map, &mut settings, diags);
    release_and_image(map, &mut settings, diags);
    run_limits(map, &mut settings, diags);
    settings.defaults.facts_playbook = get(map, "factsPlaybook").and_then(|node| facts_playbook(node, diags));
    settings.labels = get(map, "labels")
        .and_then(|node| parse_labels(node, diags))
        .unwrap_or_default();
    settings.maintenance = get(map, "maintenance").and_then(|node| parse_maintenance(node, diags));
    file_bound_sections(map, file, &mut settings, diags);
    settings
}

/// `sshAuthSecret`, `kubeconfigSecret` and `vaultPasswordSecret`: names of Secrets in kok's namespace.
fn secret_names(map: &[(Node, Node)], settings: &mut Settings, diags: &mut FileDiags<'_>) {
    settings.ssh_auth_secret = get(map, "sshAuthSecret").and_then(|node| {
        subdomain(
            node,
            "sshAuthSecret",
            "the name of a kubernetes.io/ssh-auth Secret in kok's namespace",
            diags,
        )
    });
    settings.kubeconfig_secret = get(map, "kubeconfigSecret").and_then(|node| {
        subdomain(
            node,
            "kubeconfigSecret",
            "the name of a Secret in kok's namespace holding the kubeconfig",
            diags,
        )
    });
    settings.vault_password_secret = get(map, "vaultPasswordSecret").and_then(|node| {
        subdomain(
            node,
            "vaultPasswordSecret",
            "the name of a Secret in kok's namespace whose key `password` is the ansible-vault password",
            diags,
        )
    });
}

/// `kubesprayVersion` and `image`: the release and the image that runs it, with where each was written.
fn release_and_image(map: &[(Node, Node)], settings: &mut Settings, diags: &mut FileDiags<'_>) {
    let at = |node: &Node| WrittenAt {
        path: diags.path.clone(),
        line: node.line,
    };
    settings.kubespray_version_at = get(map, "kubesprayVersion").map(at);
    settings.image_at = get(map, "image").map(at);
    settings.kubespray_version = get(map, "kubesprayVersion").and_then(|node| match node.as_str() {
        Some(v) if is_release_tag(v) => Some(v.to_string()),
        _ => {
            diags.error(
                node,
                "kubesprayVersion must be a kubespray release tag such as v2.27.0: the release of an image \
                 whose tag does not say it (a mirror, a custom build)",
            );
            None
        }
    });
    settings.defaults.image = get(map, "image").and_then(|node| match node.as_str() {
        Some(s) if !s.trim().is_empty() => Some(s.to_string()),
        _ => {
            diags.error(
                node,
                "image must be a non-empty string, e.g. quay.io/kubespray/kubespray:v2.27.0",
            );
            None
        }
    });
}

/// The account, resources and limits of a run (`serviceAccount` to `historyLimit`), and
/// `certificateWindowDays`.
fn run_limits(map: &[(Node, Node)], settings: &mut Settings, diags: &mut FileDiags<'_>) {
    settings.defaults.service_account = get(map, "serviceAccount").and_then(|node| {
        subdomain(
            node,
            "serviceAccount",
            "the name of a ServiceAccount in kok's namespace",
            diags,
        )
    });
    settings.defaults.resources = get(map, "resources").and_then(|node| resources(node, diags));
    settings.defaults.active_deadline_seconds = get(map, "activeDeadlineSeconds").and_then(|node| {
        positive_seconds(
            node,
            "activeDeadlineSeconds must be an integer greater than 0 (seconds), e.g. 7200",
            diags,
        )
    });
    settings.defaults.start_timeout = get(map, "startTimeout").and_then(|node| {
        positive_seconds(
            node,
            "startTimeout must be an integer greater than 0 (seconds), e.g. 600",
            diags,
        )
    });
    settings.defaults.history_limit = get(map, "historyLimit").and_then(|node| match node.kind {
        Kind::Int(n) if n >= 1 => u32::try_from(n).ok().or_else(|| {
            diags.error(node, "historyLimit is too large: keep it below 4294967296");
            None
        }),
        _ => {
            diags.error(
                node,
                "historyLimit must be an integer of at least 1 (finished operations kept per cluster)",
            );
            None
        }
    });
    settings.certificate_window_days = get(map, "certificateWindowDays").and_then(|node| match node.kind {
        Kind::Int(n) if (1..=3650).contains(&n) => u32::try_from(n).ok(),
        _ => {
            diags.error(
                node,
                "certificateWindowDays must be a whole number of days from 1 to 3650: how long before a \
                 certificate of the cluster expires that its CertificatesValid condition turns False (default 30)",
            );
            None
        }
    });
}

/// An integer number of seconds greater than 0; `message` said otherwise.
fn positive_seconds(node: &Node, message: &str, diags: &mut FileDiags<'_>) -> Option<i64> {
    match node.kind {
        Kind::Int(n) if n > 0 => Some(n),
        _ => {
            diags.error(node, message);
            None
        }
    }
}

/// `installed` (cluster.yml's alone) and `notifications` (kok.yml's alone), each refused in the other file.
fn file_bound_sections(map: &[(Node, Node)], file: &str, settings: &mut Settings, diags: &mut FileDiags<'_>) {
    if let Some(node) = get(map, "installed") {
        if file.ends_with(super::CLUSTER_YML) {
            settings.installed = installed(node, diags);
        } else {
            diags.error(
                node,
                "installed belongs in cluster.yml, not kok.yml: it says that one cluster was installed outside \
                 kok; set it in the cluster.yml of each cluster kok adopts",
            );
        }
    }
    if let Some(node) = get(map, "notifications") {
        if file.ends_with(super::CLUSTER_YML) {
            diags.error(
                node,
                "notifications belong in kok.yml, not cluster.yml: they are the repository's; a receiver picks \
                 clusters with clusters: {selector: ...}",
            );
        } else {
            settings.notifications = parse_notifications(node, diags);
        }
    }
}

/// What `installed` must be, for messages.
const INSTALLED_SHAPE: &str = "installed must be true, or a mapping of what the cluster runs (e.g. {kubeVersion: \
                               v1.30.4, kubesprayVersion: v2.26.0}): it tells kok that the cluster was installed \
                               outside kok";

/// `installed`: `true` (or a mapping of the versions the cluster runs) for a cluster installed outside kok;
/// `false` is the default, said.
fn installed(node: &Node, diags: &mut FileDiags<'_>) -> Option<Installed> {
    let path = diags.path.clone();
    let at = |node: &Node| WrittenAt {
        path: path.clone(),
        line: node.line,
    };
    let mut adopted = Installed {
        at: at(node),
        ..Installed::default()
    };
    match &node.kind {
        Kind::Bool(true) => return Some(adopted),
        Kind::Bool(false) => return None,
        Kind::Map(_) => {}
        _ => {
            diags.error(node, format!("{INSTALLED_SHAPE}, not {}", node.type_name()));
            return None;
        }
    }
    let map = keyed_map(
        node,
        &["kubeVersion", "kubesprayVersion"],
        "installed",
        || INSTALLED_SHAPE.to_string(),
        diags,
    )?;
    if let Some(node) = get(map, "kubeVersion") {
        match node.as_str().map(str::trim) {
            Some(v) if is_release_tag(v) || is_release_tag(&format!("v{v}")) => {
                adopted.kube_version = Some((v.to_string(), at(node)));
            }
            _ => diags.error(
                node,
                "installed.kubeVersion must be the Kubernetes version the cluster runs, as a string such as \
                 v1.30.4 (kubectl version shows it)",
            ),
        }
    }
    if let Some(node) = get(map, "kubesprayVersion") {
        match node.as_str() {
            Some(v) if is_release_tag(v) => adopted.kubespray_version = Some((v.to_string(), at(node))),
            _ => diags.error(
                node,
                "installed.kubesprayVersion must be the kubespray release tag that installed the cluster, such \
                 as v2.26.0",
            ),
        }
    }
    Some(adopted)
}

/// `factsPlaybook`: a playbook path, or `none` / `false` (stored as [`FACTS_PLAYBOOK_NONE`]) to turn it off.
fn facts_playbook(node: &Node, diags: &mut FileDiags<'_>) -> Option<String> {
    match &node.kind {
        Kind::Bool(false) => Some(FACTS_PLAYBOOK_NONE.to_string()),
        Kind::Str(s) if s.trim() == s && !s.is_empty() && !s.starts_with('-') => Some(s.clone()),
        _ => {
            diags.error(
                node,
                format!(
                    "factsPlaybook must be the path of the playbook run without --limit before an operation \
                     that limits its hosts (e.g. {DEFAULT_FACTS_PLAYBOOK}), or `none` (or false) to run none"
                ),
            );
            None
        }
    }
}

/// True for a release tag `vMAJOR.MINOR.PATCH`.
fn is_release_tag(v: &str) -> bool {
    let Some(rest) = v.strip_prefix('v') else {
        return false;
    };
    let parts: Vec<&str> = rest.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// `over` merged over `base`, key by key (a key set in `over` wins).
pub fn merge_settings(base: &Settings, over: &Settings) -> Settings {
    let (b, o) = (&base.defaults, &over.defaults);
    Settings {
        ssh_auth_secret: over
            .ssh_auth_secret
            .clone()
            .or_else(|| base.ssh_auth_secret.clone()),
        kubeconfig_secret: over
            .kubeconfig_secret
            .clone()
            .or_else(|| base.kubeconfig_secret.clone()),
        vault_password_secret: over
            .vault_password_secret
            .clone()
            .or_else(|| base.vault_password_secret.clone()),
        kubespray_version: over
            .kubespray_version
            .clone()
            .or_else(|| base.kubespray_version.clone()),
        defaults: crate::spec::RunDefaults {
            image: o.image.clone().or_else(|| b.image.clone()),
            service_account: o.service_account.clone().or_else(|| b.service_account.clone()),
            resources: o.resources.clone().or_else(|| b.resources.clone()),
            active_deadline_seconds: o.active_deadline_seconds.or(b.active_deadline_seconds),
            start_timeout: o.start_timeout.or(b.start_timeout),
            history_limit: o.history_limit.or(b.history_limit),
            facts_playbook: o.facts_playbook.clone().or_else(|| b.facts_playbook.clone()),
        },
        labels: base
            .labels
            .iter()
            .chain(&over.labels)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        maintenance: over.maintenance.clone().or_else(|| base.maintenance.clone()),
        // The repository's receivers are kok.yml's alone; a cluster's settings carry none.
        notifications: Vec::new(),
        image_at: match o.image {
            Some(_) => over.image_at.clone(),
            None => base.image_at.clone(),
        },
        kubespray_version_at: match over.kubespray_version {
            Some(_) => over.kubespray_version_at.clone(),
            None => base.kubespray_version_at.clone(),
        },
        // A cluster's own: kok.yml holds none.
        installed: over.installed.clone(),
        certificate_window_days: over.certificate_window_days.or(base.certificate_window_days),
    }
}

fn subdomain(node: &Node, key: &str, what: &str, diags: &mut FileDiags<'_>) -> Option<String> {
    match node.as_str() {
        Some(s) if is_dns1123_subdomain(s) => Some(s.to_string()),
        Some(s) => {
            diags.error(
                node,
                format!(
                    "{key} \"{s}\" is not a valid Kubernetes name: {what} uses lowercase letters, digits, '-' and '.'"
                ),
            );
            None
        }
        None => {
            diags.error(node, format!("{key} must be a string: {what}"));
            None
        }
    }
}

fn resources(node: &Node, diags: &mut FileDiags<'_>) -> Option<crate::spec::Resources> {
    let expected = || {
        "resources must be a mapping with requests and limits (e.g. requests: {cpu: 500m, memory: 1Gi})"
            .to_string()
    };
    let map = keyed_map(node, &["requests", "limits"], "resources", expected, diags)?;
    let requests = get(map, "requests").and_then(|n| quantities(n, "requests", diags));
    let limits = get(map, "limits").and_then(|n| quantities(n, "limits", diags));
    Some(crate::spec::Resources { requests, limits })
}

fn quantities(node: &Node, key: &str, diags: &mut FileDiags<'_>) -> Option<BTreeMap<String, String>> {
    let Some(map) = node.as_map() else {
        diags.error(
            node,
            format!("resources.{key} must be a mapping like {{cpu: 500m, memory: 1Gi}}"),
        );
        return None;
    };
    let mut out = BTreeMap::new();
    for (name, value) in map {
        let name_text = name.scalar_text().unwrap_or_default();
        let name_ok = !name_text.is_empty()
            && name_text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'/' | b'_'));
        if !name_ok {
            diags.error(
                name,
                format!("\"{name_text}\" is not a resource name: use e.g. cpu, memory, ephemeral-storage"),
            );
            continue;
        }
        let text = match &value.kind {
            Kind::Str(s) => s.clone(),
            Kind::Int(i) => i.to_string(),
            Kind::Float(f) => f.clone(),
            _ => String::new(),
        };
        if is_quantity(&text) {
            out.insert(name_text, text);
        } else {
            diags.error(
                value,
                format!(
                    "resources.{key}.{name_text} \"{text}\" is not a Kubernetes quantity: write e.g. 500m, 2, 1Gi, 512Mi"
                ),
            );
        }
    }
    Some(out)
}

/// True when `s` looks like a Kubernetes quantity: a decimal number with an optional suffix
/// (`m`, `k`, `M`, `G`, `T`, `P`, `E`, `Ki` ... `Ei`, or an exponent like `e3`).
pub fn is_quantity(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let digits_end = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(digits_end);
    let number_ok = !number.is_empty()
        && number != "."
        && number.matches('.').count() <= 1
        && number.bytes().any(|b| b.is_ascii_digit());
    let suffix_ok = matches!(
        suffix,
        "" | "n" | "u" | "m" | "k" | "M" | "G" | "T" | "P" | "E" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei"
    ) || suffix
        .strip_prefix(['e', 'E'])
        .map(|exp| exp.strip_prefix(['+', '-']).unwrap_or(exp))
        .is_some_and(|exp| !exp.is_empty() && exp.bytes().all(|b| b.is_ascii_digit()));
    number_ok && suffix_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Diagnostic;

    fn check(text: &str) -> (Settings, Vec<Diagnostic>) {
        let mut out = Vec::new();
        let s = parse_settings(
            text,
            "cluster.yml",
            &mut FileDiags::new("cluster.yml", None, &mut out),
        );
        (s, out)
    }

    fn first_error(text: &str) -> String {
        let (_, d) = check(text);
        d.first().map(Diagnostic::at).unwrap_or_default()
    }

    #[test]
    fn every_setting_is_read() {
        let text = "sshAuthSecret: prod-ssh\nimage: img:1\nserviceAccount: runner\nresources:\n  requests: {cpu: 500m, memory: 1Gi}\n  limits: {cpu: 2}\nactiveDeadlineSeconds: 600\nhistoryLimit: 5\n";
        let (s, d) = check(text);
        assert_eq!(d, vec![]);
        assert_eq!(s.ssh_auth_secret.as_deref(), Some("prod-ssh"));
        assert_eq!(s.defaults.service_account.as_deref(), Some("runner"));
        let res = s.defaults.resources.unwrap();
        assert_eq!(res.requests.unwrap()["memory"], "1Gi");
        assert_eq!(res.limits.unwrap()["cpu"], "2");
        assert_eq!(
            (s.defaults.active_deadline_seconds, s.defaults.history_limit),
            (Some(600), Some(5))
        );
    }

    #[test]
    fn the_facts_playbook_is_a_path_or_none() {
        assert_eq!(
            check("factsPlaybook: site/facts.yml\n")
                .0
                .defaults
                .facts_playbook
                .as_deref(),
            Some("site/facts.yml")
        );
        for off in ["factsPlaybook: none\n", "factsPlaybook: false\n"] {
            let (s, d) = check(off);
            assert_eq!(d, vec![]);
            assert_eq!(
                s.defaults.facts_playbook.as_deref(),
                Some(FACTS_PLAYBOOK_NONE),
                "{off}"
            );
            assert_eq!(s.defaults.facts(), None, "{off}");
        }
        assert_eq!(
            check("image: x\n").0.defaults.facts(),
            Some(crate::spec::FactsPlaybook {
                path: DEFAULT_FACTS_PLAYBOOK.into(),
                optional: true,
            })
        );
        for bad in [
            "factsPlaybook: true\n",
            "factsPlaybook: ''\n",
            "factsPlaybook: --limit=x\n",
            "factsPlaybook: [a]\n",
        ] {
            assert!(
                first_error(bad).starts_with("1:16: factsPlaybook must be the path of the playbook"),
                "{bad}: {}",
                first_error(bad)
            );
        }
    }

    #[test]
    fn a_configured_facts_playbook_is_required_and_wins_over_kok_yml() {
        let (base, _) = check("factsPlaybook: none\n");
        let (over, _) = check("factsPlaybook: site/facts.yml\n");
        let facts = merge_settings(&base, &over).defaults.facts().unwrap();
        assert_eq!((facts.path.as_str(), facts.optional), ("site/facts.yml", false));
        assert_eq!(merge_settings(&over, &base).defaults.facts(), None);
        assert_eq!(merge_settings(&base, &Settings::default()).defaults.facts(), None);
    }

    #[test]
    fn kubespray_version_and_vault_password_secret_are_read_and_cluster_yml_wins() {
        let (base, d) = check("kubesprayVersion: v2.27.0\nvaultPasswordSecret: fleet-vault\n");
        assert_eq!(d, vec![]);
        assert_eq!(base.kubespray_version.as_deref(), Some("v2.27.0"));
        let (over, _) = check("kubesprayVersion: v2.28.1\n");
        let merged = merge_settings(&base, &over);
        assert_eq!(merged.kubespray_version.as_deref(), Some("v2.28.1"));
        assert_eq!(merged.vault_password_secret.as_deref(), Some("fleet-vault"));
        assert!(first_error("kubesprayVersion: 2.27\n")
            .starts_with("1:19: kubesprayVersion must be a kubespray release tag"));
        assert!(first_error("vaultPasswordSecret: Bad_Name\n")
            .starts_with("1:22: vaultPasswordSecret \"Bad_Name\" is not a valid"));
    }

    #[test]
    fn kubeconfig_secret_names_a_secret_and_cluster_yml_wins() {
        let (base, d) = check("kubeconfigSecret: fleet-reader\n");
        assert_eq!(
            (base.kubeconfig_secret.as_deref(), d),
            (Some("fleet-reader"), vec![])
        );
        let (over, _) = check("kubeconfigSecret: prod-reader\n");
        assert_eq!(
            merge_settings(&base, &over).kubeconfig_secret.as_deref(),
            Some("prod-reader")
        );
        assert_eq!(
            merge_settings(&base, &Settings::default())
                .kubeconfig_secret
                .as_deref(),
            Some("fleet-reader")
        );
        assert!(first_error("kubeconfigSecret: Prod_Admin\n")
            .starts_with("1:19: kubeconfigSecret \"Prod_Admin\" is not a valid Kubernetes name"));
        assert!(first_error("kubeconfigSecret: [a]\n").starts_with("1:19: kubeconfigSecret must be a string"));
    }

    #[test]
    fn certificate_window_days_is_a_number_of_days_and_cluster_yml_wins() {
        let (base, d) = check("certificateWindowDays: 45\n");
        assert_eq!((base.certificate_window_days, d), (Some(45), vec![]));
        let (over, _) = check("certificateWindowDays: 14\n");
        assert_eq!(merge_settings(&base, &over).certificate_window_days, Some(14));
        assert_eq!(
            merge_settings(&base, &Settings::default()).certificate_window_days,
            Some(45)
        );
        for bad in ["0", "30d", "3651", "-1"] {
            assert!(
                first_error(&format!("certificateWindowDays: {bad}\n"))
                    .starts_with("1:24: certificateWindowDays must be a whole number of days from 1 to 3650"),
                "{bad}"
            );
        }
    }

    #[test]
    fn labels_are_checked_and_merged_per_key_with_cluster_yml_winning() {
        let (s, d) = check("labels:\n  env: prod\n  example.com/tier: 1\n");
        assert_eq!(d, vec![]);
        assert_eq!(s.labels["env"], "prod");
        assert_eq!(s.labels["example.com/tier"], "1");
        assert!(first_error("labels:\n  env: prod\n  bad key: x\n")
            .starts_with("3:3: label key \"bad key\" is not a Kubernetes label name"));
        assert!(first_error("labels:\n  env: has space\n")
            .starts_with("2:8: label value \"has space\" is not a Kubernetes label value"));
        assert!(first_error("labels:\n  kok.dev/cluster: x\n").contains("kok's own"));
        assert!(first_error("labels:\n  canary: true\n").contains("quote it"));
        assert!(first_error("labels: [env]\n").starts_with("1:9: labels must be a mapping"));
        let (base, _) = check("labels: {env: prod, owner: platform}\n");
        let (over, _) = check("labels: {env: staging, region: bj}\n");
        let merged = merge_settings(&base, &over).labels;
        let merged: Vec<(&str, &str)> = merged.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            merged,
            vec![("env", "staging"), ("owner", "platform"), ("region", "bj")]
        );
    }

    #[test]
    fn maintenance_of_cluster_yml_replaces_kok_yml_s() {
        let (base, _) = check("maintenance: {freezes: [{from: 2026-12-20, to: 2027-01-04}]}\n");
        let (over, _) = check("maintenance: {windows: [{start: \"02:00\", duration: 4h}]}\n");
        let merged = merge_settings(&base, &over).maintenance.unwrap();
        assert_eq!((merged.windows.len(), merged.freezes.len()), (1, 0));
        let kept = merge_settings(&base, &Settings::default()).maintenance.unwrap();
        assert_eq!(kept.freezes[0].to, "2027-01-04");
    }

    #[test]
    fn installed_is_true_or_the_versions_the_cluster_runs_with_their_lines() {
        let (s, d) = check("sshAuthSecret: bj-ssh\ninstalled: true\n");
        assert_eq!(d, vec![]);
        let adopted = s.installed.unwrap();
        assert_eq!((adopted.at.path.as_str(), adopted.at.line), ("cluster.yml", 2));
        assert_eq!((adopted.kube_version, adopted.kubespray_version), (None, None));
        let (s, d) = check("installed:\n  kubeVersion: v1.30.4\n  kubesprayVersion: v2.26.0\n");
        assert_eq!(d, vec![]);
        let adopted = s.installed.unwrap();
        let (kube, at) = adopted.kube_version.unwrap();
        assert_eq!((kube.as_str(), at.line), ("v1.30.4", 2));
        let (release, at) = adopted.kubespray_version.unwrap();
        assert_eq!((release.as_str(), at.line), ("v2.26.0", 3));
        assert_eq!(
            check("installed: {kubeVersion: 1.31.4}\n")
                .0
                .installed
                .unwrap()
                .kube_version
                .unwrap()
                .0,
            "1.31.4",
            "kubespray v2.28 writes versions without their v"
        );
        assert_eq!(check("installed: false\n"), (Settings::default(), vec![]));
    }

    #[test]
    fn a_bad_installed_is_an_error_at_its_line_saying_what_to_write() {
        assert!(
            first_error("image: x\ninstalled: maybe\n").starts_with(
                "2:12: installed must be true, or a mapping of what the cluster runs (e.g. {kubeVersion: \
                 v1.30.4, kubesprayVersion: v2.26.0}): it tells kok that the cluster was installed outside kok, \
                 not a string"
            ),
            "{}",
            first_error("image: x\ninstalled: maybe\n")
        );
        assert!(first_error("installed:\n  kubeVersion: 1.30\n")
            .starts_with("2:16: installed.kubeVersion must be the Kubernetes version the cluster runs"));
        assert!(first_error("installed: {kubesprayVersion: 2.26}\n")
            .starts_with("1:31: installed.kubesprayVersion must be the kubespray release tag"));
        assert_eq!(
            first_error("installed: {kubeVersoin: v1.30.4}\n"),
            "1:13: unknown key \"kubeVersoin\" in installed; did you mean \"kubeVersion\"?"
        );
        assert_eq!(
            first_error("instaled: true\n"),
            "1:1: unknown key \"instaled\" in cluster.yml; did you mean \"installed\"?"
        );
    }

    #[test]
    fn installed_in_kok_yml_is_an_error_adoption_is_per_cluster() {
        let mut out = Vec::new();
        let s = parse_settings(
            "image: x\ninstalled: true\n",
            "kok.yml",
            &mut FileDiags::new("kok.yml", None, &mut out),
        );
        assert_eq!(s.installed, None);
        assert!(
            out[0]
                .at()
                .starts_with("2:12: installed belongs in cluster.yml, not kok.yml"),
            "{out:?}"
        );
        let (over, _) = check("installed: true\n");
        assert!(merge_settings(&Settings::default(), &over).installed.is_some());
        assert!(merge_settings(&over, &Settings::default()).installed.is_none());
    }

    #[test]
    fn an_invalid_secret_name_is_refused() {
        assert!(first_error("sshAuthSecret: Prod_SSH\n")
            .starts_with("1:16: sshAuthSecret \"Prod_SSH\" is not a valid Kubernetes name"));
    }

    #[test]
    fn unknown_settings_are_errors_with_a_hint() {
        assert_eq!(
            first_error("sshSecret: x\n"),
            "1:1: unknown key \"sshSecret\" in cluster.yml; did you mean \"sshAuthSecret\"?"
        );
    }

    #[test]
    fn numbers_and_quantities_are_checked() {
        assert!(first_error("activeDeadlineSeconds: -5\n").contains("greater than 0"));
        assert_eq!(
            first_error("image: i\nstartTimeout: 0\n"),
            "2:15: startTimeout must be an integer greater than 0 (seconds), e.g. 600"
        );
        assert!(first_error("startTimeout: 10m\n").contains("greater than 0"));
        assert_eq!(check("startTimeout: 120\n").0.defaults.start_timeout, Some(120));
        assert!(first_error("historyLimit: 0\n").contains("at least 1"));
        assert!(first_error("resources: {requests: {memory: lots}}\n").contains("not a Kubernetes quantity"));
        assert!(first_error("resources: {request: {}}\n").contains("did you mean \"requests\""));
        assert!(first_error("serviceAccount: Runner\n").contains("not a valid Kubernetes name"));
        assert!(first_error("- a\n").contains("must be a mapping of settings"));
    }

    #[test]
    fn quantities_are_validated_loosely() {
        for ok in ["1", "500m", "1Gi", "0.5", "1e3", "+2", "128974848", "1.5G"] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in ["", "lots", "1GB", "Gi", ".", "1..2", "1e"] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }

    #[test]
    fn cluster_settings_win_per_key_over_repo_settings() {
        let (base, _) = check("sshAuthSecret: base\nimage: base:1\nhistoryLimit: 3\n");
        let (over, _) = check("image: over:2\n");
        let merged = merge_settings(&base, &over);
        assert_eq!(merged.ssh_auth_secret.as_deref(), Some("base"));
        assert_eq!(merged.defaults.image.as_deref(), Some("over:2"));
        assert_eq!(merged.defaults.history_limit, Some(3));
    }
}
