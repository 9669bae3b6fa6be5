//! What a notification receiver requires of a request, per its format's documentation, checked on what a
//! loopback receiver recorded: a CloudEvents 1.0 event in structured JSON mode with kok's HMAC signature,
//! a Slack incoming-webhook message of Block Kit blocks, a Teams Workflows message with an Adaptive Card.

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

/// A CloudEvents 1.0 event in structured mode (spec: `specversion`, `id`, `source`, `type` required and
/// non-empty; `time` RFC 3339; `Content-Type: application/cloudevents+json`), signed with
/// `X-Kok-Signature: sha256=<hex HMAC-SHA256(key, body)>`. Returns the event.
pub fn cloud_event(content_type: &str, signature: &str, body: &[u8], hmac_key: &[u8]) -> Value {
    assert!(
        content_type.starts_with("application/cloudevents+json"),
        "structured mode needs Content-Type application/cloudevents+json, not {content_type}"
    );
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(hmac_key).unwrap();
    mac.update(body);
    let want = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    assert_eq!(signature, want, "X-Kok-Signature is HMAC-SHA256 of the body");
    let event: Value = serde_json::from_slice(body).expect("a JSON event");
    assert_eq!(event["specversion"], "1.0");
    for attribute in ["id", "source", "type"] {
        assert!(
            event[attribute].as_str().is_some_and(|v| !v.is_empty()),
            "CloudEvents requires a non-empty {attribute}: {event}"
        );
    }
    let time = event["time"].as_str().expect("time");
    assert!(
        time.parse::<jiff::Timestamp>().is_ok(),
        "time is RFC 3339: {time}"
    );
    assert_eq!(event["datacontenttype"], "application/json");
    assert!(event["data"].is_object(), "{event}");
    event
}

/// A Slack incoming-webhook message: `text` (the fallback of notifications) and `blocks` whose every block
/// has a known `type`; a header's plain_text at most 150 characters, a section's text at most 3000, at
/// most 10 fields of at most 2000 each, a button's text at most 75 and its url at most 3000. Returns the
/// text of every block, joined.
pub fn slack(message: &Value) -> String {
    assert!(
        message["text"].as_str().is_some_and(|t| !t.is_empty()),
        "{message}"
    );
    let blocks = message["blocks"].as_array().expect("blocks");
    assert!(!blocks.is_empty() && blocks.len() <= 50, "{message}");
    let mut text = String::new();
    let chars = |v: &Value| v.as_str().map_or(0, |s| s.chars().count());
    for block in blocks {
        match block["type"].as_str().expect("block type") {
            "header" => {
                assert_eq!(block["text"]["type"], "plain_text", "{block}");
                assert!(chars(&block["text"]["text"]) <= 150, "{block}");
            }
            "section" => {
                assert!(block["text"].is_object() || block["fields"].is_array(), "{block}");
                if block["text"].is_object() {
                    assert!(chars(&block["text"]["text"]) <= 3000, "{block}");
                }
                if let Some(fields) = block["fields"].as_array() {
                    assert!(fields.len() <= 10, "{block}");
                    assert!(fields.iter().all(|f| chars(&f["text"]) <= 2000), "{block}");
                }
            }
            "actions" => {
                for element in block["elements"].as_array().expect("elements") {
                    assert_eq!(element["type"], "button");
                    assert_eq!(element["text"]["type"], "plain_text");
                    assert!(chars(&element["text"]["text"]) <= 75, "{element}");
                    assert!(chars(&element["url"]) <= 3000, "{element}");
                }
            }
            "context" => assert!(block["elements"].is_array(), "{block}"),
            other => panic!("block type {other} is not one kok sends"),
        }
        text.push_str(&block.to_string());
    }
    text
}

/// A Teams Workflows webhook message: `type: message` with an attachment of content type
/// `application/vnd.microsoft.card.adaptive` whose content is an AdaptiveCard with `$schema`, a
/// `version` and a non-empty `body`. Returns the card.
pub fn teams(message: &Value) -> Value {
    assert_eq!(message["type"], "message", "{message}");
    let attachment = &message["attachments"][0];
    assert_eq!(
        attachment["contentType"],
        "application/vnd.microsoft.card.adaptive"
    );
    let card = attachment["content"].clone();
    assert_eq!(card["type"], "AdaptiveCard");
    assert!(card["$schema"].as_str().is_some(), "{card}");
    assert!(card["version"].as_str().is_some(), "{card}");
    assert!(card["body"].as_array().is_some_and(|b| !b.is_empty()), "{card}");
    for element in card["body"].as_array().unwrap() {
        assert!(
            ["TextBlock", "FactSet"].contains(&element["type"].as_str().unwrap_or_default()),
            "{element}"
        );
    }
    card
}
