//! Sentence-case headings (convention 1): after the first word, a capital only for a proper noun, a
//! Kubernetes kind or an acronym; kok and kubespray always lowercase; words in code spans ignored.

use super::markdown::{segments, strip_destinations, Segment};

/// Proper nouns and Kubernetes kinds a heading may capitalize after its first word. Add to it when a
/// heading needs another one.
#[rustfmt::skip]
pub const ALLOWED: &[&str] = &[
    // Proper nouns: projects, products, companies, systems, places.
    "Kubernetes", "GitHub", "GitLab", "Gitea", "Forgejo", "Prometheus", "Alertmanager", "Grafana", "Slack",
    "Teams", "Microsoft", "PagerDuty", "CloudEvents", "Debian", "Ubuntu", "Linux", "Chromium", "OpenSSH",
    "OpenPGP", "SQLite", "Git", "GitOps", "Ansible", "Rust", "Python", "Docker", "Helm", "Kustomize",
    "Calico", "Markdown", "WebDriver", "Europe", "Berlin", "Beijing", "Shanghai",
    // Days and months.
    "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "Mon", "Tue", "Wed",
    "Thu", "Fri", "Sat", "Sun", "January", "February", "March", "April", "May", "June", "July", "August",
    "September", "October", "November", "December",
    // kok's kinds and the Kubernetes kinds the docs name.
    "Cluster", "ClusterOperation", "FleetRollout", "ConfigMap", "Secret", "Job", "Event", "Node", "Lease",
    "Pod", "Deployment", "Service", "ServiceAccount", "Namespace", "Role", "RoleBinding", "ClusterRole",
    "ClusterRoleBinding", "CustomResourceDefinition", "ServiceMonitor", "PrometheusRule", "TokenReview",
    "SubjectAccessReview", "NetworkPolicy", "Ingress", "PersistentVolumeClaim", "StatefulSet", "DaemonSet",
    "CronJob", "Kustomization",
];

/// Names always written in lowercase.
const LOWERCASE: [&str; 2] = ["kok", "kubespray"];

/// The words of a heading that break sentence case, each with why.
pub fn problems(heading: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut first = true;
    for segment in segments(heading) {
        let Segment::Text(text) = segment else {
            first = false;
            continue;
        };
        for word in strip_destinations(text).split_whitespace() {
            let word = word.trim_matches(|c: char| !c.is_alphanumeric());
            if word.is_empty() {
                continue;
            }
            for (index, part) in word.split(['-', '/']).enumerate() {
                if let Some(problem) = check_part(part, first && index == 0) {
                    out.push(problem);
                }
            }
            first = false;
        }
    }
    out
}

/// Why `part` (of a word split at `-` and `/`) breaks sentence case, if it does.
fn check_part(part: &str, first: bool) -> Option<String> {
    let bare = part
        .strip_suffix("'s")
        .or_else(|| part.strip_suffix("’s"))
        .unwrap_or(part);
    let lower = bare.to_lowercase();
    if LOWERCASE.contains(&lower.as_str()) && bare != lower {
        return Some(format!("{part:?}: kok and kubespray are always lowercase"));
    }
    if first || !bare.starts_with(|c: char| c.is_uppercase()) {
        return None;
    }
    let singular = bare.strip_suffix('s').unwrap_or(bare);
    let acronym =
        |w: &str| w.chars().count() >= 2 && w.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
    if ALLOWED.contains(&bare) || ALLOWED.contains(&singular) || acronym(bare) || acronym(singular) {
        return None;
    }
    Some(format!(
        "{part:?} is capitalized: only proper nouns, Kubernetes kinds and acronyms are (add a proper noun to \
         ALLOWED in tests/integration/docs/style.rs)"
    ))
}
