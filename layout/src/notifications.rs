//! `notifications:` in kok.yml: the receivers events go to (pure parsing and validation).
//!
//! ```yaml
//! notifications:
//!   - name: oncall                 # DNS-1123 label, unique: the metrics' `receiver` label
//!     type: webhook                # webhook | slack | msteams
//!     urlSecret: kok-notify-oncall # Secret in kok's namespace: key `url` (and `hmac` for webhook)
//!     events: [operation-failed, health-degraded, rollout-halted]   # default: every event
//!     clusters:
//!       selector: {env: prod}      # cluster labels to match; default: every cluster
//! ```
//!
//! The URL is a credential (a Slack or Teams webhook URL lets anyone post): it never appears in the
//! repository, only the name of the Secret that holds it.

use std::collections::BTreeMap;

use super::diag::{get, keyed_map, FileDiags};
use super::labels::parse_labels;
use super::names::{is_dns1123_label, is_dns1123_subdomain};
use super::yaml::Node;

/// Keys of one receiver.
const RECEIVER_KEYS: &[&str] = &["name", "type", "urlSecret", "events", "clusters"];
/// Keys of a receiver's `clusters`.
const CLUSTERS_KEYS: &[&str] = &["selector"];

/// How a receiver is posted to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReceiverType {
    /// A CloudEvents 1.0 JSON event, signed with HMAC-SHA256 when the Secret has an `hmac` key.
    Webhook,
    /// A Slack incoming webhook: a Block Kit message.
    Slack,
    /// A Microsoft Teams Workflows webhook: an Adaptive Card.
    MsTeams,
}

impl ReceiverType {
    /// The spelling in kok.yml.
    pub fn as_str(self) -> &'static str {
        match self {
            ReceiverType::Webhook => "webhook",
            ReceiverType::Slack => "slack",
            ReceiverType::MsTeams => "msteams",
        }
    }
}

/// What happened, as a receiver subscribes to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    /// An operation's run failed.
    OperationFailed,
    /// An operation's run succeeded.
    OperationSucceeded,
    /// An operation waits behind a failed one of its cluster.
    OperationHeld,
    /// A cluster's health check found it unhealthy.
    HealthDegraded,
    /// A cluster found unhealthy is healthy again.
    HealthRecovered,
    /// A rollout halted: more runs failed than it allows.
    RolloutHalted,
    /// Every cluster of a rollout finished.
    RolloutFinished,
    /// A commit was refused: invalid input or an untrusted signature (`kok/sync: error`).
    CommitRefused,
}

impl EventKind {
    /// Every kind, in the order the docs list them.
    pub const ALL: [EventKind; 8] = [
        EventKind::OperationFailed,
        EventKind::OperationSucceeded,
        EventKind::OperationHeld,
        EventKind::HealthDegraded,
        EventKind::HealthRecovered,
        EventKind::RolloutHalted,
        EventKind::RolloutFinished,
        EventKind::CommitRefused,
    ];

    /// The spelling in kok.yml: `operation-failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::OperationFailed => "operation-failed",
            EventKind::OperationSucceeded => "operation-succeeded",
            EventKind::OperationHeld => "operation-held",
            EventKind::HealthDegraded => "health-degraded",
            EventKind::HealthRecovered => "health-recovered",
            EventKind::RolloutHalted => "rollout-halted",
            EventKind::RolloutFinished => "rollout-finished",
            EventKind::CommitRefused => "commit-refused",
        }
    }

    /// The kind spelled `name` in kok.yml.
    pub fn parse(name: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// One receiver of `notifications:`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Receiver {
    /// Unique name.
    pub name: String,
    /// How it is posted to.
    pub kind: ReceiverType,
    /// The Secret in kok's namespace holding `url` (and `hmac`).
    pub url_secret: String,
    /// The events it gets; empty: every event.
    pub events: Vec<EventKind>,
    /// The labels a cluster must have for its events to reach it; empty: every cluster. Events without a
    /// cluster (rollouts, refused commits) reach it whatever its selector.
    pub selector: BTreeMap<String, String>,
}

impl Receiver {
    /// Whether an event of `kind` about a cluster with `labels` (none for events without a cluster) goes
    /// to this receiver.
    pub fn wants(&self, kind: EventKind, labels: Option<&BTreeMap<String, String>>) -> bool {
        let subscribed = self.events.is_empty() || self.events.contains(&kind);
        let selected = match labels {
            None => true,
            Some(labels) => self.selector.iter().all(|(k, v)| labels.get(k) == Some(v)),
        };
        subscribed && selected
    }
}

/// Parses `notifications:`; problems go to `diags` and the receiver that has them is left out.
pub(crate) fn parse_notifications(node: &Node, diags: &mut FileDiags<'_>) -> Vec<Receiver> {
    let Some(items) = node.as_seq() else {
        diags.error(
            node,
            format!(
                "notifications must be a list of receivers, e.g. [{{name: oncall, type: webhook, urlSecret: \
                 kok-notify}}], not {}",
                node.type_name()
            ),
        );
        return Vec::new();
    };
    let mut receivers: Vec<Receiver> = Vec::new();
    for item in items {
        let Some(receiver) = parse_receiver(item, diags) else {
            continue;
        };
        if receivers.iter().any(|r| r.name == receiver.name) {
            diags.error(
                item,
                format!(
                    "receiver name \"{}\" is used twice; give each receiver its own name",
                    receiver.name
                ),
            );
            continue;
        }
        receivers.push(receiver);
    }
    receivers
}

/// One receiver of `notifications`; `None` when any of its keys was wrong (each one said).
fn parse_receiver(node: &Node, diags: &mut FileDiags<'_>) -> Option<Receiver> {
    let expected = || "a receiver must be a mapping of name, type, urlSecret, events, clusters".to_string();
    let map = keyed_map(node, RECEIVER_KEYS, "a notifications receiver", expected, diags)?;
    let before = diags.error_count();
    let name = receiver_name(node, map, diags);
    let kind = receiver_type(node, map, diags);
    let url_secret = url_secret(node, map, diags);
    let events = receiver_events(map, diags);
    let selector = cluster_selector(map, diags);
    if diags.error_count() > before {
        return None;
    }
    Some(Receiver {
        name: name?,
        kind: kind?,
        url_secret: url_secret?,
        events,
        selector,
    })
}

/// A receiver's `name`: required, a DNS-1123 label.
fn receiver_name(node: &Node, map: &[(Node, Node)], diags: &mut FileDiags<'_>) -> Option<String> {
    match get(map, "name").and_then(Node::as_str) {
        Some(name) if is_dns1123_label(name, 63) => Some(name.to_string()),
        Some(name) => {
            diags.error(
                node,
                format!("receiver name \"{name}\" must be a DNS-1123 label (lowercase letters, digits, '-')"),
            );
            None
        }
        None => {
            diags.error(node, "a receiver needs a name, e.g. name: oncall");
            None
        }
    }
}

/// A receiver's `type`: required, webhook, slack or msteams.
fn receiver_type(node: &Node, map: &[(Node, Node)], diags: &mut FileDiags<'_>) -> Option<ReceiverType> {
    let Some(t) = get(map, "type") else {
        diags.error(node, "a receiver needs a type: webhook, slack or msteams");
        return None;
    };
    match t.as_str() {
        Some("webhook") => Some(ReceiverType::Webhook),
        Some("slack") => Some(ReceiverType::Slack),
        Some("msteams") => Some(ReceiverType::MsTeams),
        _ => {
            diags.error(
                t,
                format!(
                    "type must be webhook, slack or msteams, not {}",
                    t.scalar_text().unwrap_or_else(|| t.type_name().to_string())
                ),
            );
            None
        }
    }
}

/// A receiver's `urlSecret`: required, the name of the Secret holding its URL.
fn url_secret(node: &Node, map: &[(Node, Node)], diags: &mut FileDiags<'_>) -> Option<String> {
    let Some(s) = get(map, "urlSecret") else {
        diags.error(
            node,
            "a receiver needs urlSecret: the Secret in kok's namespace whose key url holds its URL",
        );
        return None;
    };
    match s.as_str() {
        Some(name) if is_dns1123_subdomain(name) => Some(name.to_string()),
        _ => {
            diags.error(
                s,
                "urlSecret must name a Secret in kok's namespace (key url: the receiver's URL; key hmac: \
                 the webhook's signing key); the URL itself never goes in the repository",
            );
            None
        }
    }
}

/// A receiver's `events`: the kinds it is sent (none written: empty), each unknown one said.
fn receiver_events(map: &[(Node, Node)], diags: &mut FileDiags<'_>) -> Vec<EventKind> {
    let Some(list) = get(map, "events") else {
        return Vec::new();
    };
    let Some(items) = list.as_seq() else {
        diags.error(
            list,
            "events must be a list, e.g. [operation-failed, rollout-halted]",
        );
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|item| {
            let kind = item.as_str().and_then(EventKind::parse);
            if kind.is_none() {
                let names: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
                diags.error(
                    item,
                    format!(
                        "unknown event {}; events are {}",
                        item.scalar_text().unwrap_or_default(),
                        names.join(", ")
                    ),
                );
            }
            kind
        })
        .collect()
}

/// A receiver's `clusters: {selector: ...}`: the labels of the clusters it hears about (none: all).
fn cluster_selector(map: &[(Node, Node)], diags: &mut FileDiags<'_>) -> BTreeMap<String, String> {
    let Some(clusters) = get(map, "clusters") else {
        return BTreeMap::new();
    };
    let expected = || "clusters must be a mapping with a selector, e.g. {selector: {env: prod}}".to_string();
    keyed_map(clusters, CLUSTERS_KEYS, "clusters", expected, diags)
        .and_then(|m| get(m, "selector"))
        .and_then(|s| parse_labels(s, diags))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::super::diag::{parse_yaml, FileDiags};
    use super::*;

    fn parse(text: &str) -> (Vec<Receiver>, Vec<String>) {
        let mut out = Vec::new();
        let receivers = {
            let mut d = FileDiags::new("kok.yml", None, &mut out);
            let root = parse_yaml(text, &mut d).unwrap().unwrap();
            parse_notifications(&root, &mut d)
        };
        (receivers, out.iter().map(|d| d.to_string()).collect())
    }

    #[test]
    fn receivers_with_their_events_and_selector_are_read() {
        let (receivers, errors) = parse(
            "- name: oncall\n  type: webhook\n  urlSecret: kok-notify\n  events: [operation-failed, rollout-halted]\n  \
             clusters: {selector: {env: prod}}\n- {name: chat, type: slack, urlSecret: slack-url}\n",
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(receivers.len(), 2);
        let oncall = &receivers[0];
        assert_eq!(oncall.kind, ReceiverType::Webhook);
        assert_eq!(
            oncall.events,
            [EventKind::OperationFailed, EventKind::RolloutHalted]
        );
        let prod = BTreeMap::from([("env".to_string(), "prod".to_string())]);
        let dev = BTreeMap::from([("env".to_string(), "dev".to_string())]);
        assert!(oncall.wants(EventKind::OperationFailed, Some(&prod)));
        assert!(!oncall.wants(EventKind::OperationFailed, Some(&dev)));
        assert!(!oncall.wants(EventKind::OperationSucceeded, Some(&prod)));
        assert!(
            oncall.wants(EventKind::RolloutHalted, None),
            "no cluster: the selector does not apply"
        );
        assert!(
            receivers[1].wants(EventKind::HealthRecovered, Some(&dev)),
            "no events: every event"
        );
    }

    #[test]
    fn a_bad_receiver_is_refused_with_what_to_write() {
        let (receivers, errors) = parse(
            "- {name: a, type: email, urlSecret: s}\n- {name: b, type: slack, url: https://hooks.example/x}\n\
             - {name: c, type: msteams, urlSecret: s, events: [operation-exploded]}\n\
             - {name: d, type: slack, urlSecret: s}\n- {name: d, type: slack, urlSecret: s}\n",
        );
        assert_eq!(receivers.len(), 1, "{receivers:?}");
        let all = errors.join("\n");
        for wanted in [
            "type must be webhook, slack or msteams, not email",
            "unknown key \"url\"",
            "a receiver needs urlSecret",
            "unknown event operation-exploded",
            "receiver name \"d\" is used twice",
        ] {
            assert!(all.contains(wanted), "{wanted} not in:\n{all}");
        }
    }
}
