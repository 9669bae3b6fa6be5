//! HTTP layer: routes Kubernetes API paths to the API semantics, counts requests, injects faults and
//! delays.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, Request, State as AxumState};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::api::{served_json, DeleteOpts, State, WriteCtx};
use crate::discovery;
use crate::errors::{reason_for_code, ApiError};
use crate::patch::PatchKind;
use crate::persist::Durability;
use crate::pod_logs::LogOptions;
use crate::resources::ResourceInfo;
use crate::schema::FieldValidation;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::table::{self, Include, TableRequest};
use crate::watch::{self as watches, Signals, WatchRequest};
use crate::{Delay, Fault, RequestLog};

/// Everything the handlers share.
#[derive(Debug)]
pub struct Shared {
    /// The group sync of the store's database, when it has one: answers wait for it.
    pub durability: Option<Durability>,
    /// TCP connections accepted since the start.
    pub connections: std::sync::atomic::AtomicUsize,
    /// Objects and the registry, under one lock.
    pub state: Mutex<State>,
    /// Request counts.
    pub log: RequestLog,
    /// Pending injected faults.
    pub faults: Mutex<Vec<Fault>>,
    /// Pending injected delays.
    pub delays: Mutex<Vec<Delay>>,
    /// Added latency per resource request.
    pub latency: Mutex<Duration>,
    /// Bumped to cut every watch.
    pub cut: watch::Sender<u64>,
    /// Set to stop the server.
    pub shutdown: watch::Sender<bool>,
    /// Interval between watch bookmarks.
    pub bookmark_interval: Duration,
    /// `host:port` for discovery.
    pub addr: String,
    /// The bearer tokens TokenReviews know.
    pub tokens: Mutex<crate::auth::Tokens>,
    /// What tests say pods printed, for `pods/<name>/log`.
    pub pod_logs: crate::pod_logs::PodLogs,
    /// The kubelets programs registered, by node, for `pods/<name>/log`.
    pub kubelets: crate::pod_logs::Kubelets,
}

impl Shared {
    /// The state lock (a poisoned lock is still usable: every mutation is complete or absent).
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A parsed resource path.
#[derive(Debug, Clone, Default)]
struct ResourcePath {
    group: String,
    version: String,
    namespace: Option<String>,
    resource: String,
    name: Option<String>,
    subresource: Option<String>,
}

fn json_response(code: u16, v: &Value) -> Response {
    let body = serde_json::to_vec(v).unwrap_or_default();
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// Adds one `Warning: 299 - "text"` header per warning, as the real server words them.
fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let text = format!("299 - {}", serde_json::to_string(w).unwrap_or_default());
        if let Ok(v) = header::HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, v);
        }
    }
    response
}

fn error_response(e: &ApiError) -> Response {
    json_response(e.code, &e.status())
}

fn not_found_path() -> Response {
    json_response(
        404,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "the server could not find the requested resource", "reason": "NotFound",
            "details": {}, "code": 404}),
    )
}

/// Splits `/api/v1/...` or `/apis/g/v/...` into its parts; None for non-resource paths.
fn parse_path(path: &str, state: &State) -> Option<ResourcePath> {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let mut p = ResourcePath {
        group: group.into(),
        version: version.into(),
        ..Default::default()
    };
    let rest: Vec<&str> = rest.to_vec();
    let is_namespaced_collection = |r: &str| {
        state
            .registry
            .get(group, version, r)
            .is_some_and(|i| i.namespaced)
    };
    match rest.as_slice() {
        [] => {}
        ["namespaces", ns, r, tail @ ..] if is_namespaced_collection(r) => {
            p.namespace = Some(ns.to_string());
            p.resource = r.to_string();
            p.name = tail.first().map(|s| s.to_string());
            p.subresource = tail.get(1).map(|s| s.to_string());
            if tail.len() > 2 {
                return Some(ResourcePath {
                    resource: "\u{0}".into(),
                    ..p
                });
            }
        }
        [r, tail @ ..] => {
            p.resource = r.to_string();
            p.name = tail.first().map(|s| s.to_string());
            p.subresource = tail.get(1).map(|s| s.to_string());
            if tail.len() > 2 {
                return Some(ResourcePath {
                    resource: "\u{0}".into(),
                    ..p
                });
            }
        }
    }
    Some(p)
}

fn query_map(uri: &Uri) -> HashMap<String, String> {
    Query::<HashMap<String, String>>::try_from_uri(uri)
        .map(|q| q.0)
        .unwrap_or_default()
}

fn truthy(q: &HashMap<String, String>, k: &str) -> bool {
    matches!(q.get(k).map(String::as_str), Some("true" | "1"))
}

fn parse_body(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(Value::Null);
    }
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if ct.starts_with(crate::protobuf::CONTENT_TYPE) {
        return crate::protobuf::decode(body);
    }
    if ct.contains("protobuf") || ct.contains("cbor") {
        return Err(ApiError::new(
            415,
            format!("testkit decodes JSON, YAML and Kubernetes protobuf bodies only, not {ct}; send JSON (e.g. kubectl create -f FILE)"),
        ));
    }
    if ct.contains("yaml") {
        serde_yaml::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML body: {e}")))
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding JSON body: {e}")))
    }
}

fn wants_aggregated(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .and_then(|a| a.split(',').next())
        .is_some_and(|first| first.contains("as=APIGroupDiscoveryList") && first.contains("v=v2;"))
}

/// The media types of the Accept header, without parameters; None without the header.
fn accepted(headers: &HeaderMap) -> Option<Vec<&str>> {
    let accept = headers.get(header::ACCEPT)?.to_str().ok()?;
    Some(
        accept
            .split(',')
            .map(|t| t.split(';').next().unwrap_or("").trim())
            .collect(),
    )
}

fn is_json(media_type: &str) -> bool {
    matches!(media_type, "application/json" | "*/*" | "application/*" | "")
}

/// Whether the client takes JSON (or anything): no Accept, `*/*` or `application/json`.
fn accepts_json(headers: &HeaderMap) -> bool {
    accepted(headers).is_none_or(|types| types.iter().any(|t| is_json(t)))
}

/// How a response is written, by the client's first choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    Json,
    /// Protobuf; `or_json`: JSON is acceptable too, for what has no protobuf form.
    Protobuf {
        or_json: bool,
    },
}

fn wire(headers: &HeaderMap) -> Wire {
    match accepted(headers) {
        Some(types) if types.first() == Some(&crate::protobuf::CONTENT_TYPE) => Wire::Protobuf {
            or_json: types.iter().any(|t| is_json(t)),
        },
        _ => Wire::Json,
    }
}

/// The Table the client asks for with its first media type (`application/json;as=Table;v=v1;g=meta.k8s.io`),
/// if it asks for one; a bad `includeObject` is refused then.
fn table_request(headers: &HeaderMap, q: &HashMap<String, String>) -> Result<Option<TableRequest>, ApiError> {
    let first = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .and_then(|a| a.split(',').next())
        .unwrap_or("");
    let params: Vec<&str> = first.split(';').map(str::trim).collect();
    if !params.contains(&"as=Table") {
        return Ok(None);
    }
    let version = if params.contains(&"v=v1beta1") {
        "v1beta1"
    } else {
        "v1"
    };
    let include = Include::parse(q.get("includeObject").map(String::as_str))?;
    Ok(Some(TableRequest { version, include }))
}

/// A list's metadata: its resourceVersion, and under a limit the continue token and how many remain.
fn list_meta(rv: u64, cont: Option<&str>, remaining: Option<usize>) -> Value {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        meta["continue"] = json!(c);
    }
    if let Some(n) = remaining {
        meta["remainingItemCount"] = json!(n);
    }
    meta
}

fn manager(q: &HashMap<String, String>, headers: &HeaderMap) -> String {
    if let Some(m) = q.get("fieldManager").filter(|m| !m.is_empty()) {
        return m.clone();
    }
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|ua| ua.split('/').next())
        .filter(|s| !s.is_empty())
        .unwrap_or("unknown")
        .to_string()
}

/// A list of items given as JSON.
fn list_body(info: &ResourceInfo, items: impl IntoIterator<Item = Bytes>, meta: Value) -> Vec<u8> {
    let head =
        json!({"kind": format!("{}List", info.kind), "apiVersion": info.api_version(), "metadata": meta});
    let mut out = serde_json::to_vec(&head).unwrap_or_default();
    out.pop();
    out.extend_from_slice(b",\"items\":[");
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&item);
    }
    out.extend_from_slice(b"]}");
    out
}

/// The single handler behind every path.
pub async fn handle(AxumState(shared): AxumState<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, 256 * 1024 * 1024).await {
        Ok(b) => b,
        Err(e) => {
            return error_response(&ApiError::bad_request(format!(
                "reading the request body failed: {e}"
            )))
        }
    };
    let path = parts.uri.path().to_string();
    if let Some(response) = fixed_path(&shared, &parts.method, path.trim_end_matches('/'), &parts.headers) {
        return response;
    }
    if parts.method == Method::POST {
        if let Some(response) = review(&shared, &parts.headers, path.trim_end_matches('/'), &body) {
            return response;
        }
    }
    let parsed = {
        let state = shared.lock();
        parse_path(&path, &state)
    };
    let Some(rp) = parsed else { return not_found_path() };
    if rp.resource.is_empty() {
        return resource_list(&shared, &parts.method, &rp);
    }
    let wire = match answer_wire(&shared, &parts.headers, &rp) {
        Ok(wire) => wire,
        Err(e) => return error_response(&e),
    };
    let q = query_map(&parts.uri);
    if rp.resource == "pods" && rp.subresource.as_deref() == Some("log") && parts.method != Method::GET {
        return json_response(
            405,
            &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "the server does not allow this method on the requested resource",
                "reason": "MethodNotAllowed", "details": {}, "code": 405}),
        );
    }
    let Some(verb) = verb_of(&parts.method, rp.name.is_some(), &q) else {
        return error_response(&ApiError::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({} {path})",
            parts.method
        )));
    };
    let logged = logged_name(&rp);
    shared.log.record(verb, &logged);
    let latency = *shared.latency.lock().unwrap_or_else(|p| p.into_inner());
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let delay = take(&shared.delays, verb, &rp.resource, &logged, rp.name.as_deref());
    if let Some(held) = delay.map(|d| d.duration) {
        let mut stopping = shared.shutdown.subscribe();
        tokio::select! {
            () = tokio::time::sleep(held) => {}
            _ = stopping.wait_for(|stop| *stop) => {}
        }
    }
    if let Some(refusal) = refusal(&shared, verb, &rp, &logged) {
        return negotiated(wire, false, refusal).await;
    }
    let response = serve(&shared, &parts.headers, &q, rp, verb, body).await;
    negotiated(wire, verb == "watch", response).await
}

/// The paths that name no resource (`path` without its trailing `/`): version, discovery, health and
/// OpenAPI documents; `None` for any other path.
fn fixed_path(shared: &Shared, method: &Method, path: &str, headers: &HeaderMap) -> Option<Response> {
    let response = match (method.clone(), path) {
        (Method::GET, "/version") => json_response(200, &discovery::version()),
        (Method::GET, "/api" | "/apis") if wants_aggregated(headers) => {
            let doc = discovery::aggregated(&shared.lock().registry, path == "/api");
            let body = serde_json::to_vec(&doc).unwrap_or_default();
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, discovery::AGGREGATED_CONTENT_TYPE)],
                body,
            )
                .into_response()
        }
        (Method::GET, "/api") => json_response(200, &discovery::core_versions(&shared.addr)),
        (Method::GET, "/apis") => json_response(200, &discovery::groups(&shared.lock().registry)),
        (Method::GET, "/healthz" | "/livez" | "/readyz") => (StatusCode::OK, "ok").into_response(),
        (Method::GET, "/openapi/v3") => json_response(200, &crate::openapi::index(&shared.lock())),
        (Method::GET, p) if p.starts_with("/openapi/v3/") => {
            crate::openapi::document(&shared.lock(), &p["/openapi/v3/".len()..])
                .map(|doc| json_response(200, &doc))
                .unwrap_or_else(not_found_path)
        }
        (Method::GET, "/openapi/v2") if !accepts_json(headers) => {
            let doc = crate::gnostic::encode(&crate::openapi::swagger(&shared.lock()));
            (
                StatusCode::OK,
                [(
                    header::CONTENT_TYPE,
                    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                )],
                doc,
            )
                .into_response()
        }
        (Method::GET, "/openapi/v2") => json_response(200, &crate::openapi::swagger(&shared.lock())),
        (Method::GET, p) if p.starts_with("/apis/") && p.matches('/').count() == 2 => {
            let group = &p["/apis/".len()..];
            discovery::api_group(&shared.lock().registry, group)
                .map(|g| json_response(200, &g))
                .unwrap_or_else(not_found_path)
        }
        _ => return None,
    };
    Some(response)
}

/// The resource list of a group version (`rp` names no resource); read-only.
fn resource_list(shared: &Shared, method: &Method, rp: &ResourcePath) -> Response {
    if method != Method::GET {
        return error_response(&ApiError::method_not_allowed("discovery documents are read-only"));
    }
    let state = shared.lock();
    match (rp.group.as_str(), rp.version.as_str()) {
        ("", v) => discovery::resource_list(&state.registry, "", v),
        (g, v) => discovery::resource_list(&state.registry, g, v),
    }
    .map(|v| json_response(200, &v))
    .unwrap_or_else(not_found_path)
}

/// How the answer is encoded: protobuf when the client asks for it first and the resource has that form,
/// JSON when it does not but the client also takes JSON; the refusal otherwise.
fn answer_wire(shared: &Shared, headers: &HeaderMap, rp: &ResourcePath) -> Result<Wire, ApiError> {
    let wire = wire(headers);
    if let Wire::Protobuf { or_json } = wire {
        if let Some(e) = no_protobuf_form(&shared.lock(), rp) {
            if !or_json {
                return Err(e);
            }
            return Ok(Wire::Json);
        }
    }
    Ok(wire)
}

/// The API verb of a request by its method, whether it names an object, and its query; `None` for a
/// method the path does not allow.
fn verb_of(method: &Method, named: bool, q: &HashMap<String, String>) -> Option<&'static str> {
    Some(match (method, named) {
        (&Method::GET, true) => "get",
        (&Method::GET, false) if truthy(q, "watch") => "watch",
        (&Method::GET, false) => "list",
        (&Method::POST, false) => "create",
        (&Method::PUT, true) => "update",
        (&Method::PATCH, true) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        _ => return None,
    })
}

/// The resource of `rp` as the request log and injected faults name it: with its subresource, if any.
fn logged_name(rp: &ResourcePath) -> String {
    match &rp.subresource {
        Some(s) => format!("{}/{s}", rp.resource),
        None => rp.resource.clone(),
    }
}

/// The error a request gets before it is served: a fault the test injected for it, or the store's
/// refusal to write while it cannot persist.
fn refusal(shared: &Shared, verb: &str, rp: &ResourcePath, logged: &str) -> Option<Response> {
    if let Some(code) = take(&shared.faults, verb, &rp.resource, logged, rp.name.as_deref()).map(|f| f.code) {
        let mut e = ApiError::new(
            code,
            format!("testkit injected fault: {verb} {logged} failed with {code}"),
        );
        e.reason = reason_for_code(code).into();
        return Some(error_response(&e.on(
            &rp.group,
            &rp.resource,
            rp.name.as_deref().unwrap_or(""),
        )));
    }
    let refused = shared.lock().store.persist_failure();
    refused.map(|e| error_response(&e))
}

/// Serves `verb` on `rp` (a pod's log, or the store's objects) and answers once it is on disk.
async fn serve(
    shared: &Arc<Shared>,
    headers: &HeaderMap,
    q: &HashMap<String, String>,
    rp: ResourcePath,
    verb: &str,
    body: Bytes,
) -> Response {
    let response = if rp.resource == "pods" && rp.subresource.as_deref() == Some("log") && verb == "get" {
        pod_log(shared, &rp, q)
    } else {
        resource_request(shared, headers, q, rp, verb, body)
    };
    // Nothing is shown before it is on disk: the answer waits for the sync of every write committed
    // so far (its own, and any it read). A write that could not be persisted is not acknowledged.
    if let Some(durability) = &shared.durability {
        durability.all_synced().await;
    }
    let refused = shared.lock().store.persist_failure();
    match refused {
        Some(e) => error_response(&e),
        None => response,
    }
}

/// TokenReviews and SubjectAccessReviews (`crate::auth`), counted as creates; `None` for other paths.
fn review(shared: &Shared, headers: &HeaderMap, path: &str, body: &[u8]) -> Option<Response> {
    let (group, resource) = match path {
        "/apis/authentication.k8s.io/v1/tokenreviews" => ("authentication.k8s.io", "tokenreviews"),
        "/apis/authorization.k8s.io/v1/subjectaccessreviews" => {
            ("authorization.k8s.io", "subjectaccessreviews")
        }
        _ => return None,
    };
    shared.log.record("create", resource);
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let state = shared.lock();
    let tokens = shared.tokens.lock().unwrap_or_else(|p| p.into_inner());
    let answer = crate::auth::admit_reviewer(&state, &tokens, bearer, group, resource)
        .and_then(|()| parse_body(headers, body))
        .and_then(|body| match resource {
            "tokenreviews" => crate::auth::token_review(&state, &tokens, &body),
            _ => crate::auth::subject_access_review(&state, &body),
        });
    Some(match answer {
        Ok(review) => json_response(201, &review),
        Err(e) => error_response(&e),
    })
}

/// `GET .../pods/<name>/log`, in the real server's order (see [`crate::pod_logs`]): options, pod,
/// container, then the node's kubelet.
fn pod_log(shared: &Shared, rp: &ResourcePath, q: &HashMap<String, String>) -> Response {
    let namespace = rp.namespace.as_deref().unwrap_or_default();
    let name = rp.name.as_deref().unwrap_or_default();
    let opts = match LogOptions::parse(q, name) {
        Ok(opts) => opts,
        Err(e) => return error_response(&e),
    };
    let found = {
        let state = shared.lock();
        let pod = state
            .registry
            .get("", "v1", "pods")
            .and_then(|info| state.get(&info, Some(namespace), name).ok());
        pod.map(|pod| {
            let node_name = pod["spec"]["nodeName"].as_str().unwrap_or("").to_string();
            let node = state
                .registry
                .get("", "v1", "nodes")
                .and_then(|info| state.get(&info, None, &node_name).ok());
            (pod, node_name, node)
        })
    };
    let Some((pod, node_name, node)) = found else {
        return error_response(&ApiError::not_found("", "pods", name));
    };
    let container = match crate::pod_logs::container(&pod, opts.container.as_deref()) {
        Ok(c) => c,
        Err(e) => return error_response(&e),
    };
    let shutdown = shared.shutdown.subscribe();
    if shared.pod_logs.has(namespace, name) {
        return crate::pod_logs::serve(&shared.pod_logs, &pod, &container, &opts, shutdown);
    }
    if node_name.is_empty() {
        return StatusCode::NO_CONTENT.into_response();
    }
    if let Some(kubelet) = shared.kubelets.get(&node_name) {
        return crate::pod_logs::serve(&*kubelet, &pod, &container, &opts, shutdown);
    }
    let Some(node) = node else {
        return error_response(&ApiError::not_found("", "pods", &node_name));
    };
    let addresses: Vec<String> = node["status"]["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["address"].as_str().map(str::to_string))
        .collect();
    let mut e = if addresses.is_empty() {
        ApiError::new(500, "no preferred addresses found; known addresses: []")
    } else {
        ApiError::new(
            500,
            format!(
                "testkit reaches no kubelet on node {node_name} ({}); register one with ApiServer::set_kubelet",
                addresses.join(", ")
            ),
        )
    };
    e.reason = String::new();
    error_response(&e)
}

/// Why a client that asks for protobuf cannot be answered so: custom resources are JSON and YAML
/// only (406, worded as the apiserver words it), and some built-ins have no protobuf form in testkit.
fn no_protobuf_form(state: &State, rp: &ResourcePath) -> Option<ApiError> {
    let info = state.registry.get(&rp.group, &rp.version, &rp.resource)?;
    let message = if info.custom {
        "only the following media types are accepted: application/json, application/yaml".to_string()
    } else if !crate::protobuf::encodes(&info.api_version(), &info.kind) {
        format!(
            "testkit cannot write {} {} as protobuf; accept application/json as well",
            info.api_version(),
            info.kind
        )
    } else {
        return None;
    };
    let mut e = ApiError::new(406, message);
    e.reason = "NotAcceptable".into();
    Some(e)
}

/// The response in protobuf when that is the client's first choice: objects, lists and Status
/// bodies enveloped, watch events as length-prefixed frames. What has no protobuf form (a Table)
/// stays JSON when the client takes JSON too, and is a 406 otherwise.
async fn negotiated(wire: Wire, watch: bool, response: Response) -> Response {
    let Wire::Protobuf { or_json } = wire else {
        return response;
    };
    let (mut parts, body) = response.into_parts();
    let content_type = if watch {
        let frames = body
            .into_data_stream()
            .map(|line| line.map(|line| Bytes::from(crate::protobuf::watch_frame(&line))));
        parts.headers.insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static(crate::protobuf::WATCH_CONTENT_TYPE),
        );
        return Response::from_parts(parts, Body::from_stream(frames));
    } else {
        crate::protobuf::CONTENT_TYPE
    };
    let json = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(json) => json,
        Err(e) => return error_response(&ApiError::new(500, format!("reading the response failed: {e}"))),
    };
    let encoded = serde_json::from_slice::<Value>(&json)
        .map_err(|e| ApiError::new(500, format!("testkit wrote an unreadable response: {e}")))
        .and_then(|v| crate::protobuf::encode(&v));
    match encoded {
        Ok(bytes) => {
            parts.headers.insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(content_type),
            );
            Response::from_parts(parts, Body::from(bytes))
        }
        Err(_) if or_json => Response::from_parts(parts, Body::from(json)),
        Err(e) => error_response(&e),
    }
}

/// An injected fault or delay, waiting for the requests it takes.
trait Injected: Clone {
    /// Its verb, resource and object name filters (`None`: any).
    fn filters(&self) -> (Option<&str>, Option<&str>, Option<&str>);
    /// How many more requests it takes.
    fn count(&mut self) -> &mut usize;
}

/// Fault and Delay share their filters and count.
macro_rules! injected {
    ($($kind:ty),*) => {$(
        impl Injected for $kind {
            fn filters(&self) -> (Option<&str>, Option<&str>, Option<&str>) {
                (self.verb.as_deref(), self.resource.as_deref(), self.name.as_deref())
            }

            fn count(&mut self) -> &mut usize {
                &mut self.count
            }
        }
    )*};
}

injected!(Fault, Delay);

/// The first of `pending` that takes a request with `verb` on `resource` (`logged`: with its
/// subresource) naming `name`, counted against it; one that has taken its last request is dropped.
fn take<T: Injected>(
    pending: &Mutex<Vec<T>>,
    verb: &str,
    resource: &str,
    logged: &str,
    name: Option<&str>,
) -> Option<T> {
    let mut pending = pending.lock().unwrap_or_else(|p| p.into_inner());
    let pos = pending.iter_mut().position(|injected| {
        if *injected.count() == 0 {
            return false;
        }
        let (want_verb, want_resource, want_name) = injected.filters();
        want_verb.is_none_or(|v| v == verb)
            && want_resource.is_none_or(|r| r == resource || r == logged)
            && want_name.is_none_or(|n| Some(n) == name)
    })?;
    let taken = &mut pending[pos];
    *taken.count() -= 1;
    let out = taken.clone();
    if *taken.count() == 0 {
        pending.remove(pos);
    }
    Some(out)
}

/// Serves `verb` on the resource path `rp`: finds the resource, reads the query, and runs the verb on
/// the store.
fn resource_request(
    shared: &Arc<Shared>,
    headers: &HeaderMap,
    q: &HashMap<String, String>,
    rp: ResourcePath,
    verb: &str,
    body: Bytes,
) -> Response {
    // Bodies are decoded before the store is locked and answers encoded after it is released, so
    // concurrent requests wait for each other only while the store changes.
    let parsed = matches!(verb, "create" | "update" | "delete" | "deletecollection")
        .then(|| parse_body(headers, &body));
    let mut state = shared.lock();
    let Some(info) = state.registry.get(&rp.group, &rp.version, &rp.resource) else {
        return not_found_path();
    };
    let status = match rp.subresource.as_deref() {
        None => false,
        Some("status") if info.status && matches!(verb, "get" | "update" | "patch") => true,
        Some(_) => return not_found_path(),
    };
    if info.namespaced && rp.namespace.is_none() && !matches!(verb, "list" | "watch" | "deletecollection") {
        return not_found_path();
    }
    if !info.namespaced && rp.namespace.is_some() {
        return not_found_path();
    }
    let call = match ResourceCall::new(info, &rp, headers, q, status) {
        Ok(call) => call,
        Err(e) => return error_response(&e),
    };
    let take_body = || parsed.unwrap_or_else(|| parse_body(headers, &body));
    match verb {
        "get" => call.get(state),
        "list" => call.list(state),
        "watch" => call.watch(shared, state),
        "create" => match take_body() {
            Ok(v) => {
                let r = state.create(&call.info, &call.ctx, v);
                drop(state);
                call.written(201, r)
            }
            Err(e) => error_response(&e),
        },
        "update" => match take_body() {
            Ok(v) => {
                let r = state.update(&call.info, &call.ctx, &call.name, v, status);
                drop(state);
                call.written(200, r)
            }
            Err(e) => error_response(&e),
        },
        "patch" => call.patch(state, &body),
        "delete" => call.delete(state, take_body()),
        "deletecollection" => call.delete_collection(state, take_body()),
        _ => error_response(&ApiError::method_not_allowed(format!(
            "verb {verb} is not supported"
        ))),
    }
}

/// A request on a resource: the resource, the object it names and what its query asks.
struct ResourceCall<'a> {
    info: Arc<ResourceInfo>,
    namespace: Option<&'a str>,
    /// The object's name (empty for a collection).
    name: String,
    headers: &'a HeaderMap,
    q: &'a HashMap<String, String>,
    labels: LabelSelector,
    fields: FieldSelector,
    table: Option<TableRequest>,
    ctx: WriteCtx,
    /// Whether the request is on the status subresource.
    status: bool,
}

impl<'a> ResourceCall<'a> {
    /// Reads the query of a request on `rp`: its selectors, whether it asks for a Table, how writes
    /// validate fields and who makes them; the first of them that is wrong is the error.
    fn new(
        info: Arc<ResourceInfo>,
        rp: &'a ResourcePath,
        headers: &'a HeaderMap,
        q: &'a HashMap<String, String>,
        status: bool,
    ) -> Result<ResourceCall<'a>, ApiError> {
        let labels = q
            .get("labelSelector")
            .map(|s| LabelSelector::parse(s))
            .transpose()?;
        let fields = q
            .get("fieldSelector")
            .map(|s| FieldSelector::parse(s, &rp.group, &rp.resource))
            .transpose()?;
        let table = table_request(headers, q)?;
        let field_validation = FieldValidation::parse(q.get("fieldValidation").map(String::as_str))?;
        let ctx = WriteCtx {
            namespace: rp.namespace.clone(),
            manager: manager(q, headers),
            dry_run: q.get("dryRun").is_some_and(|d| d == "All"),
            field_validation,
            warnings: Default::default(),
        };
        Ok(ResourceCall {
            info,
            namespace: rp.namespace.as_deref(),
            name: rp.name.clone().unwrap_or_default(),
            headers,
            q,
            labels: labels.unwrap_or_default(),
            fields: fields.unwrap_or_default(),
            table,
            ctx,
            status,
        })
    }

    /// The answer to a write: the object with the write's warnings, or the error.
    fn written(&self, code: u16, r: Result<Value, ApiError>) -> Response {
        match r {
            Ok(v) => with_warnings(json_response(code, &v), &self.ctx.warnings.borrow()),
            Err(e) => error_response(&e),
        }
    }

    /// `get`: the object, or its row of a Table.
    fn get(&self, state: MutexGuard<'_, State>) -> Response {
        match state.get(&self.info, self.namespace, &self.name) {
            Ok(o) => match &self.table {
                Some(request) => {
                    let rv = o
                        .pointer("/metadata/resourceVersion")
                        .cloned()
                        .unwrap_or(Value::Null);
                    let meta = json!({"resourceVersion": rv});
                    let now = jiff::Timestamp::now();
                    json_response(200, &table::table(&self.info, &[&o], request, meta, now))
                }
                None => json_response(200, &o),
            },
            Err(e) => error_response(&e),
        }
    }

    /// `list`: a page of the objects the selectors choose, or its Table; encoded once the store is
    /// released.
    fn list(&self, state: MutexGuard<'_, State>) -> Response {
        let limit = self.q.get("limit").and_then(|l| l.parse().ok());
        let page = state.list(
            &self.info,
            self.namespace,
            &self.labels,
            &self.fields,
            limit,
            self.q.get("continue").map(String::as_str),
        );
        let page = match page {
            Ok(page) => page,
            Err(e) => return error_response(&e),
        };
        drop(state);
        let meta = list_meta(
            page.resource_version,
            page.continue_token.as_deref(),
            page.remaining,
        );
        let info = &self.info;
        match &self.table {
            Some(request) => {
                let values = page.values(info);
                let objs: Vec<&Value> = values.iter().map(|a| &**a).collect();
                let now = jiff::Timestamp::now();
                json_response(200, &table::table(info, &objs, request, meta, now))
            }
            None => (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                list_body(info, page.items.iter().map(|o| served_json(info, o)), meta),
            )
                .into_response(),
        }
    }

    /// `watch`: a stream of the events the selectors choose, from the resource version asked for; a
    /// watch that fell behind the store resyncs from its events.
    fn watch(self, shared: &Arc<Shared>, state: MutexGuard<'_, State>) -> Response {
        let q = self.q;
        let req = WatchRequest {
            info: self.info.clone(),
            namespace: self.namespace.map(str::to_string),
            labels: self.labels,
            fields: self.fields,
            resource_version: q.get("resourceVersion").cloned(),
            bookmarks: truthy(q, "allowWatchBookmarks"),
            send_initial_events: truthy(q, "sendInitialEvents"),
            timeout: q
                .get("timeoutSeconds")
                .and_then(|t| t.parse().ok())
                .map(Duration::from_secs),
            table: self.table,
        };
        let signals = Signals {
            durability: shared.durability.clone(),
            cut: shared.cut.subscribe(),
            shutdown: shared.shutdown.subscribe(),
            bookmark_interval: shared.bookmark_interval,
        };
        let weak = Arc::downgrade(shared);
        let resource = self.info.key();
        let resync: watches::Resync = Arc::new(move |rv| {
            let shared = weak.upgrade()?;
            let state = shared.lock();
            if rv < state.store.compacted(&resource) {
                return None;
            }
            Some((
                state.store.events_since(&resource, rv).cloned().collect(),
                state.store.subscribe(),
                state.store.resource_version(),
            ))
        });
        let rx = watches::start(&state, req, signals, resync);
        drop(state);
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            Body::from_stream(rx),
        )
            .into_response()
    }

    /// `patch` with `body`, of the kind its content type says (apply wants a field manager): 201 when
    /// it created the object.
    fn patch(&self, mut state: MutexGuard<'_, State>, body: &[u8]) -> Response {
        let ct = self
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let kind = match PatchKind::from_content_type(ct) {
            Ok(k) => k,
            Err(e) => return error_response(&e),
        };
        if kind == PatchKind::Apply && !self.q.contains_key("fieldManager") {
            return error_response(&ApiError::invalid(
                "",
                "PatchOptions",
                "",
                vec![crate::errors::cause(
                    "FieldValueRequired",
                    "fieldManager",
                    "Required value: is required for apply patch",
                )],
            ));
        }
        let (info, ctx, name) = (&self.info, &self.ctx, &self.name);
        let existed = state.exists(info, self.namespace, name);
        let r = state.patch(info, ctx, name, kind, body, self.status, truthy(self.q, "force"));
        drop(state);
        self.written(if existed { 200 } else { 201 }, r)
    }

    /// `delete` with the options in `body` and the query: 202 while finalizers keep the object.
    fn delete(&self, mut state: MutexGuard<'_, State>, body: Result<Value, ApiError>) -> Response {
        let opts = match body.and_then(|b| self.delete_opts(&b)) {
            Ok(opts) => opts,
            Err(e) => return error_response(&e),
        };
        let r = state.delete(&self.info, &self.ctx, &self.name, &opts);
        let pending = state.exists(&self.info, self.namespace, &self.name) && !self.ctx.dry_run;
        drop(state);
        self.written(if pending { 202 } else { 200 }, r)
    }

    /// `deletecollection` of what the selectors choose, with the options in `body` and the query: the
    /// list of the objects deleted.
    fn delete_collection(&self, mut state: MutexGuard<'_, State>, body: Result<Value, ApiError>) -> Response {
        let opts = match body.and_then(|b| self.delete_opts(&b)) {
            Ok(opts) => opts,
            Err(e) => return error_response(&e),
        };
        match state.delete_collection(&self.info, &self.ctx, &self.labels, &self.fields, &opts) {
            Ok(items) => {
                let rv = state.store.resource_version();
                drop(state);
                let items = items.iter().map(|o| Bytes::from(o.to_string()));
                (
                    StatusCode::OK,
                    [(header::CONTENT_TYPE, "application/json")],
                    list_body(&self.info, items, list_meta(rv, None, None)),
                )
                    .into_response()
            }
            Err(e) => error_response(&e),
        }
    }

    /// The delete options of a `body` and the query's `propagationPolicy`.
    fn delete_opts(&self, body: &Value) -> Result<DeleteOpts, ApiError> {
        DeleteOpts::parse(body, self.q.get("propagationPolicy").map(String::as_str))
    }
}
