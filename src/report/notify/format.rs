//! A notification as each receiver type wants it (pure): a CloudEvents 1.0 event in JSON signed with
//! HMAC-SHA256 for `webhook`, a Block Kit message for a Slack incoming webhook, an Adaptive Card for a
//! Microsoft Teams Workflows webhook. Each carries the cluster, operation, commit, the outcome line, the
//! first failure (task, host, message) and the run's link when there is one.

use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

use super::event::Notification;
use crate::layout::notifications::ReceiverType;

/// Header carrying the webhook body's signature: `sha256=<hex of HMAC-SHA256(key, body)>`.
pub const SIGNATURE_HEADER: &str = "X-Kok-Signature";
/// `Content-Type` of a CloudEvent in structured mode.
pub const CLOUDEVENTS_CONTENT_TYPE: &str = "application/cloudevents+json";
/// Prefix of the CloudEvents `type` of kok's events: `dev.kok.operation-failed`.
pub const CLOUDEVENTS_TYPE_PREFIX: &str = "dev.kok.";

/// Slack's limits (Block Kit reference): a header's text, a section's text, a field, a button's text.
const SLACK_HEADER_MAX: usize = 150;
const SLACK_TEXT_MAX: usize = 3000;
const SLACK_FIELD_MAX: usize = 2000;
const SLACK_BUTTON_MAX: usize = 75;

/// The request body and `Content-Type` for a receiver of type `kind`; `source` is the CloudEvents
/// `source` (kok's namespace, as `kok/<namespace>`).
pub fn body(kind: ReceiverType, n: &Notification, source: &str) -> (Vec<u8>, &'static str) {
    let value = match kind {
        ReceiverType::Webhook => cloud_event(n, source),
        ReceiverType::Slack => slack(n),
        ReceiverType::MsTeams => teams(n),
    };
    let content_type = match kind {
        ReceiverType::Webhook => CLOUDEVENTS_CONTENT_TYPE,
        _ => "application/json",
    };
    (value.to_string().into_bytes(), content_type)
}

/// `sha256=<hex>` of HMAC-SHA256 over `body` with `key`.
pub fn signature(key: &[u8], body: &[u8]) -> String {
    // An HMAC key may be of any length.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// The facts every format lists: (title, value).
fn facts(n: &Notification) -> Vec<(&'static str, String)> {
    let mut facts = Vec::new();
    if let Some(c) = &n.cluster {
        facts.push(("Cluster", c.clone()));
    }
    if let Some(o) = &n.operation {
        facts.push(("Operation", o.clone()));
    }
    if let Some(r) = &n.rollout {
        facts.push(("Rollout", r.clone()));
    }
    if let Some(sha) = &n.commit {
        facts.push(("Commit", sha[..sha.len().min(12)].to_string()));
    }
    if let Some(f) = &n.failure {
        if let Some(task) = &f.task {
            facts.push(("Failed task", task.clone()));
        }
        if let Some(host) = &f.host {
            facts.push(("Host", host.clone()));
        }
    }
    facts
}

/// A CloudEvents 1.0 event in structured JSON mode: the required `specversion`, `id`, `source`, `type`,
/// and `time`, `subject`, `datacontenttype`, with kok's own fields as `data`.
pub fn cloud_event(n: &Notification, source: &str) -> Value {
    let subject = match (&n.cluster, &n.operation, &n.rollout) {
        (Some(c), Some(o), _) => format!("{c}/{o}"),
        (Some(c), None, _) => c.clone(),
        (None, _, Some(r)) => format!("rollout/{r}"),
        _ => n.commit.clone().unwrap_or_default(),
    };
    json!({
        "specversion": "1.0",
        "id": n.id,
        "source": source,
        "type": format!("{CLOUDEVENTS_TYPE_PREFIX}{}", n.kind.as_str()),
        "time": n.time,
        "subject": subject,
        "datacontenttype": "application/json",
        "data": {
            "event": n.kind.as_str(),
            "title": n.title(),
            "cluster": n.cluster,
            "operation": n.operation,
            "rollout": n.rollout,
            "commit": n.commit,
            "outcome": n.outcome,
            "failure": n.failure,
            "url": n.url,
        },
    })
}

fn cut(text: &str, max: usize) -> String {
    crate::report::status::cut(text, max)
}

/// Slack's mrkdwn needs `&`, `<` and `>` escaped.
fn mrkdwn(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A Slack incoming-webhook message: `text` (the notification's fallback) and Block Kit `blocks`: a
/// header, the outcome, the facts as fields, the first failure, and a button to the run.
pub fn slack(n: &Notification) -> Value {
    let mut blocks = vec![
        json!({"type": "header", "text": {"type": "plain_text", "text": cut(&n.title(), SLACK_HEADER_MAX)}}),
        json!({"type": "section", "text": {"type": "mrkdwn", "text": cut(&mrkdwn(&n.outcome), SLACK_TEXT_MAX)}}),
    ];
    let fields: Vec<Value> = facts(n)
        .into_iter()
        .take(10)
        .map(|(title, value)| {
            json!({"type": "mrkdwn", "text": cut(&format!("*{title}*\n{}", mrkdwn(&value)), SLACK_FIELD_MAX)})
        })
        .collect();
    if !fields.is_empty() {
        blocks.push(json!({"type": "section", "fields": fields}));
    }
    if let Some(line) = n.failure_line() {
        blocks.push(json!({
            "type": "section",
            "text": {"type": "mrkdwn", "text": cut(&format!("*First failure*\n{}", mrkdwn(&line)), SLACK_TEXT_MAX)},
        }));
    }
    if let Some(url) = &n.url {
        blocks.push(json!({
            "type": "actions",
            "elements": [{
                "type": "button",
                "text": {"type": "plain_text", "text": cut("Open the run", SLACK_BUTTON_MAX)},
                "url": url,
            }],
        }));
    }
    blocks.push(json!({
        "type": "context",
        "elements": [{"type": "mrkdwn", "text": format!("kok · {} · {}", n.kind.as_str(), n.time)}],
    }));
    json!({
        "text": cut(&format!("{}: {}", n.title(), n.outcome), SLACK_TEXT_MAX),
        "blocks": blocks,
    })
}

/// A message for a Teams Workflows webhook ("post to a channel when a webhook request is received"): one
/// attachment of content type `application/vnd.microsoft.card.adaptive` holding an Adaptive Card 1.4
/// with the title, the outcome, a FactSet and an Action.OpenUrl to the run.
pub fn teams(n: &Notification) -> Value {
    let mut body = vec![
        json!({"type": "TextBlock", "text": n.title(), "weight": "Bolder", "size": "Medium", "wrap": true,
               "color": if n.kind.as_str().contains("failed") || n.kind.as_str().contains("halted")
                   || n.kind.as_str().contains("degraded") || n.kind.as_str().contains("refused") { "Attention" } else { "Default" }}),
        json!({"type": "TextBlock", "text": n.outcome, "wrap": true}),
    ];
    let facts: Vec<Value> = facts(n)
        .into_iter()
        .map(|(title, value)| json!({"title": title, "value": value}))
        .collect();
    if !facts.is_empty() {
        body.push(json!({"type": "FactSet", "facts": facts}));
    }
    if let Some(line) = n.failure_line() {
        body.push(json!({"type": "TextBlock", "text": format!("First failure: {line}"), "wrap": true, "isSubtle": true}));
    }
    let mut card = json!({
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": body,
    });
    if let Some(url) = &n.url {
        card["actions"] = json!([{"type": "Action.OpenUrl", "title": "Open the run", "url": url}]);
    }
    json!({
        "type": "message",
        "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive",
            "contentUrl": null,
            "content": card,
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::super::event::Failure;
    use super::*;
    use crate::layout::notifications::EventKind;

    fn failed() -> Notification {
        Notification {
            id: "0123456789abcdef".into(),
            kind: EventKind::OperationFailed,
            time: "2026-11-28T03:00:00Z".into(),
            cluster: Some("prod".into()),
            operation: Some("upgrade".into()),
            rollout: None,
            commit: Some("1a2b3c4d5e6f7a8b9c0d1a2b3c4d5e6f7a8b9c0d".into()),
            outcome: "failed at TASK [x] on node1: <swap> & more".into(),
            failure: Some(Failure {
                task: Some("x".into()),
                host: Some("node1".into()),
                message: Some("swap is on".into()),
            }),
            url: Some("https://kok.example/operations/prod-upgrade".into()),
        }
    }

    #[test]
    fn the_webhook_body_is_a_cloud_event_and_its_signature_is_hmac_sha256_of_it() {
        let (body, content_type) = body(ReceiverType::Webhook, &failed(), "kok/kok-system");
        assert_eq!(content_type, "application/cloudevents+json");
        let event: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(event["specversion"], "1.0");
        assert_eq!(event["type"], "dev.kok.operation-failed");
        assert_eq!(event["subject"], "prod/upgrade");
        assert_eq!(event["data"]["failure"]["host"], "node1");
        // RFC 4231 test case 2.
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn slack_gets_blocks_within_its_limits_with_mrkdwn_escaped() {
        let message = slack(&failed());
        let blocks = message["blocks"].as_array().unwrap();
        assert_eq!(blocks[0]["type"], "header");
        assert!(blocks[1]["text"]["text"]
            .as_str()
            .unwrap()
            .contains("&lt;swap&gt; &amp; more"));
        assert!(blocks.iter().any(|b| b["type"] == "actions"));
        assert!(message["text"]
            .as_str()
            .unwrap()
            .starts_with("prod/upgrade failed"));
        let mut long = failed();
        long.outcome = "x".repeat(5000);
        long.cluster = Some("c".repeat(200));
        let message = slack(&long);
        assert!(
            message["blocks"][0]["text"]["text"]
                .as_str()
                .unwrap()
                .chars()
                .count()
                <= 150
        );
        assert!(
            message["blocks"][1]["text"]["text"]
                .as_str()
                .unwrap()
                .chars()
                .count()
                <= 3000
        );
    }

    #[test]
    fn teams_gets_an_adaptive_card_attachment() {
        let message = teams(&failed());
        assert_eq!(message["type"], "message");
        let attachment = &message["attachments"][0];
        assert_eq!(
            attachment["contentType"],
            "application/vnd.microsoft.card.adaptive"
        );
        assert_eq!(attachment["content"]["type"], "AdaptiveCard");
        assert_eq!(attachment["content"]["actions"][0]["type"], "Action.OpenUrl");
    }
}
