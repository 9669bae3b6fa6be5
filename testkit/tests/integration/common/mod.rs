//! Shared test fixtures: a small custom resource with a status subresource and printer columns.

pub mod recording;

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
    /// The `Content-Type` header, if any.
    pub content_type: Option<String>,
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
    let headers = [("Accept", "application/json"), ("Content-Type", content_type)];
    request_with(port, method, path, &headers, body).await
}

/// A query string's value, percent-encoded.
pub fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `path?name=value&...` with the values encoded, in the object's key order.
pub fn with_query(path: &str, query: &Value) -> String {
    let pairs: Vec<String> = query
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", encode(v.as_str().unwrap_or_default())))
        .collect();
    if pairs.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", pairs.join("&"))
    }
}

/// One HTTP/1.1 request with these headers to 127.0.0.1:`port`, read to the end (a chunked body is
/// joined).
pub async fn request_with(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> std::io::Result<Answer> {
    let cut = || std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the answer was cut");
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ));
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
    let fields: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
        .collect();
    let header = |name: &'static str| {
        fields
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let body = if header("transfer-encoding").any(|v| v == "chunked") {
        dechunk(body).ok_or_else(cut)?
    } else {
        body.to_string()
    };
    Ok(Answer {
        status,
        warnings: header("warning").collect(),
        content_type: header("content-type").next(),
        // A text answer (`ok` of /readyz) is kept as a JSON string.
        body: serde_json::from_str(&body).unwrap_or(Value::String(body)),
    })
}

/// A chunked body, joined.
fn dechunk(mut rest: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n")?;
        let size = usize::from_str_radix(size.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.push_str(after.get(..size)?);
        rest = after.get(size + 2..)?;
    }
}
