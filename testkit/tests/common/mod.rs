//! Shared test fixtures: a small custom resource with a status subresource and printer columns.
#![allow(dead_code)]

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use testkit::ApiServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Spec of the test resource.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, JsonSchema, PartialEq)]
#[kube(
    group = "example.test",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus"
)]
#[kube(shortname = "wd", category = "all")]
#[kube(printcolumn = r#"{"name":"Size","type":"integer","jsonPath":".spec.size"}"#)]
pub struct WidgetSpec {
    /// Size.
    pub size: i64,
}

/// Status of the test resource.
#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema, PartialEq)]
pub struct WidgetStatus {
    /// Phase.
    pub phase: String,
}

/// A ConfigMap with one key.
pub fn cm(name: &str, key: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some([(key.to_string(), value.to_string())].into()),
        ..Default::default()
    }
}

/// The status of a kube API error, or a panic naming what happened instead.
pub fn status_of<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> Box<kube::core::Status> {
    match r {
        Err(kube::Error::Api(s)) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// What a raw request got back (kube's client would retry a 503 instead).
pub struct Answer {
    pub status: u16,
    pub warnings: Vec<String>,
    /// The JSON body, or a text body as a JSON string.
    pub body: Value,
}

/// One JSON request.
pub async fn send(server: &ApiServer, method: &str, path: &str, body: Option<&Value>) -> Answer {
    let body = body.map(Value::to_string).unwrap_or_default();
    send_typed(server, method, path, "application/json", &body).await
}

/// One HTTP/1.1 request on a fresh connection, read to the end.
pub async fn send_typed(
    server: &ApiServer,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> Answer {
    request(server.port(), method, path, content_type, body)
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

/// One HTTP/1.1 request to 127.0.0.1:`port`; an error when the connection fails or the answer is cut.
pub async fn request(
    port: u16,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
) -> std::io::Result<Answer> {
    let cut = || std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the answer was cut");
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let text = String::from_utf8(raw).map_err(|_| cut())?;
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(cut)?;
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(cut)?;
    let warnings = lines
        .filter_map(|l| l.split_once(": "))
        .filter(|(k, _)| k.eq_ignore_ascii_case("warning"))
        .map(|(_, v)| v.to_string())
        .collect();
    Ok(Answer {
        status,
        warnings,
        // A text answer (`ok` of /readyz) is kept as a JSON string.
        body: serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_string())),
    })
}
