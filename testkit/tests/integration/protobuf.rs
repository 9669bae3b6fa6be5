//! Protobuf responses for a client that asks for them first: objects, lists, Status errors and watch
//! streams of built-in kinds, decoded here with `k8s-pb`'s generated types; JSON or 406 for custom
//! resources and tables.

use crate::common;

use common::{cm, Widget};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_pb::api::batch::v1 as pb_batch;
use k8s_pb::api::core::v1 as pb_core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb_meta;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use kube::api::{Api, PostParams};
use kube::CustomResourceExt;
use prost::Message;
use serde_json::json;
use testkit::ApiServer;

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// The `k8s\0` envelope of a response: its apiVersion, kind and raw object.
fn unwrap_envelope(body: &[u8]) -> (String, String, Vec<u8>) {
    let inner = body
        .strip_prefix(b"k8s\0")
        .unwrap_or_else(|| panic!("no k8s\\0 prefix: {body:?}"));
    let unknown = Unknown::decode(inner).expect("a runtime.Unknown");
    let tm = unknown.type_meta.unwrap_or_default();
    (
        tm.api_version.unwrap_or_default(),
        tm.kind.unwrap_or_default(),
        unknown.raw.unwrap_or_default(),
    )
}

async fn get(server: &ApiServer, path: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("{}{path}", server.url()))
        .header("accept", PROTOBUF)
        .send()
        .await
        .expect("request")
}

async fn protobuf_body(resp: reqwest::Response, code: u16) -> Vec<u8> {
    assert_eq!(resp.status().as_u16(), code);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        PROTOBUF,
        "content type"
    );
    resp.bytes().await.expect("body").to_vec()
}

#[tokio::test]
async fn objects_lists_and_errors_are_protobuf_when_nothing_else_is_accepted() {
    let server = ApiServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    let created = cms
        .create(&PostParams::default(), &cm("settings", "mode", "fast"))
        .await
        .unwrap();

    let body = protobuf_body(
        get(&server, "/api/v1/namespaces/default/configmaps/settings").await,
        200,
    )
    .await;
    let (api_version, kind, raw) = unwrap_envelope(&body);
    assert_eq!((api_version.as_str(), kind.as_str()), ("v1", "ConfigMap"));
    let got = pb_core::ConfigMap::decode(&raw[..]).expect("a ConfigMap");
    let meta = got.metadata.expect("metadata");
    assert_eq!(meta.name.as_deref(), Some("settings"));
    assert_eq!(meta.uid, created.metadata.uid);
    assert_eq!(meta.resource_version, created.metadata.resource_version);
    assert!(meta.creation_timestamp.and_then(|t| t.seconds).unwrap_or(0) > 0);
    assert_eq!(got.data.get("mode").map(String::as_str), Some("fast"));

    let body = protobuf_body(get(&server, "/api/v1/namespaces/default/configmaps").await, 200).await;
    let (_, kind, raw) = unwrap_envelope(&body);
    assert_eq!(kind, "ConfigMapList");
    let list = pb_core::ConfigMapList::decode(&raw[..]).expect("a ConfigMapList");
    assert!(list.metadata.and_then(|m| m.resource_version).is_some());
    let names: Vec<_> = list
        .items
        .iter()
        .filter_map(|i| i.metadata.as_ref()?.name.clone())
        .collect();
    assert_eq!(names, ["settings"]);

    let body = protobuf_body(
        get(&server, "/api/v1/namespaces/default/configmaps/missing").await,
        404,
    )
    .await;
    let (api_version, kind, raw) = unwrap_envelope(&body);
    assert_eq!((api_version.as_str(), kind.as_str()), ("v1", "Status"));
    let status = pb_meta::Status::decode(&raw[..]).expect("a Status");
    assert_eq!(status.code, Some(404));
    assert_eq!(status.reason.as_deref(), Some("NotFound"));
    assert_eq!(
        status.message.as_deref(),
        Some("configmaps \"missing\" not found")
    );

    // A Job's status, as the Job controller writes it, reads back in protobuf.
    let jobs: Api<Job> = Api::default_namespaced(server.client());
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "once"},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}}}
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    server.complete_job("default", "once").await.unwrap();
    let body = protobuf_body(
        get(&server, "/apis/batch/v1/namespaces/default/jobs/once").await,
        200,
    )
    .await;
    let (_, _, raw) = unwrap_envelope(&body);
    let job = pb_batch::Job::decode(&raw[..]).expect("a Job");
    let status = job.status.expect("status");
    assert_eq!(status.succeeded, Some(1));
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.r#type.as_deref() == Some("Complete") && c.status.as_deref() == Some("True")),
        "{status:?}"
    );
    let spec = job
        .spec
        .expect("spec")
        .template
        .expect("template")
        .spec
        .expect("pod spec");
    assert_eq!(spec.containers[0].command, ["true"]);
}

#[tokio::test]
async fn a_protobuf_create_is_answered_in_protobuf() {
    let server = ApiServer::start().await.unwrap();
    let secret = pb_core::Secret {
        metadata: Some(pb_meta::ObjectMeta {
            name: Some("key".into()),
            ..Default::default()
        }),
        data: [("k".to_string(), b"v".to_vec())].into(),
        ..Default::default()
    };
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some("v1".into()),
            kind: Some("Secret".into()),
        }),
        raw: Some(secret.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let resp = reqwest::Client::new()
        .post(format!("{}/api/v1/namespaces/default/secrets", server.url()))
        .header("accept", PROTOBUF)
        .header("content-type", PROTOBUF)
        .body([&b"k8s\0"[..], &unknown.encode_to_vec()].concat())
        .send()
        .await
        .unwrap();
    let body = protobuf_body(resp, 201).await;
    let (_, kind, raw) = unwrap_envelope(&body);
    assert_eq!(kind, "Secret");
    let stored = pb_core::Secret::decode(&raw[..]).unwrap();
    assert_eq!(stored.r#type.as_deref(), Some("Opaque"));
    assert_eq!(stored.data.get("k").map(Vec::as_slice), Some(&b"v"[..]));
}

/// Reads the next length-prefixed frame of a protobuf watch stream.
async fn next_frame(resp: &mut reqwest::Response, buf: &mut Vec<u8>) -> pb_meta::WatchEvent {
    loop {
        if buf.len() >= 4 {
            let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if buf.len() >= 4 + len {
                let frame: Vec<u8> = buf.drain(..4 + len).skip(4).collect();
                return pb_meta::WatchEvent::decode(&frame[..]).expect("a WatchEvent");
            }
        }
        let chunk = resp.chunk().await.expect("stream").expect("stream ended");
        buf.extend_from_slice(&chunk);
    }
}

#[tokio::test]
async fn watch_streams_are_length_prefixed_watch_events() {
    let server = ApiServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    cms.create(&PostParams::default(), &cm("first", "k", "v"))
        .await
        .unwrap();
    let mut resp = get(
        &server,
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=0",
    )
    .await;
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "application/vnd.kubernetes.protobuf;stream=watch"
    );
    let mut buf = Vec::new();
    let event = next_frame(&mut resp, &mut buf).await;
    assert_eq!(event.r#type.as_deref(), Some("ADDED"));
    let (_, kind, raw) = unwrap_envelope(&event.object.and_then(|o| o.raw).expect("object"));
    assert_eq!(kind, "ConfigMap");
    let first = pb_core::ConfigMap::decode(&raw[..]).unwrap();
    assert_eq!(first.metadata.and_then(|m| m.name).as_deref(), Some("first"));

    cms.delete("first", &Default::default()).await.unwrap();
    let event = next_frame(&mut resp, &mut buf).await;
    assert_eq!(event.r#type.as_deref(), Some("DELETED"));
}

#[tokio::test]
async fn custom_resources_refuse_a_protobuf_only_client_as_the_apiserver_does() {
    let server = ApiServer::start().await.unwrap();
    server.install_crds(&[Widget::crd()]).await.unwrap();
    let resp = get(&server, "/apis/example.test/v1/namespaces/default/widgets").await;
    assert_eq!(resp.status().as_u16(), 406);
    let status: serde_json::Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    assert_eq!(status["reason"], "NotAcceptable");
    assert_eq!(
        status["message"],
        "only the following media types are accepted: application/json, application/yaml"
    );
}

#[tokio::test]
async fn a_client_preferring_protobuf_gets_it_where_it_exists_and_json_elsewhere() {
    let server = ApiServer::start().await.unwrap();
    server.install_crds(&[Widget::crd()]).await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    cms.create(&PostParams::default(), &cm("settings", "mode", "fast"))
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let ask = |path: &str, accept: &str| {
        http.get(format!("{}{path}", server.url()))
            .header("accept", accept.to_string())
            .send()
    };
    let kubectl = "application/vnd.kubernetes.protobuf,application/json";
    let content_type = |r: &reqwest::Response| r.headers()["content-type"].to_str().unwrap().to_string();

    let resp = ask("/api/v1/namespaces/default/configmaps/settings", kubectl)
        .await
        .unwrap();
    assert_eq!(content_type(&resp), PROTOBUF);
    let resp = ask("/apis/example.test/v1/namespaces/default/widgets", kubectl)
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(content_type(&resp), "application/json");
    // Tables have no protobuf form here.
    let table = "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    let resp = ask("/api/v1/namespaces/default/configmaps", table).await.unwrap();
    assert_eq!(content_type(&resp), "application/json");
    let body: serde_json::Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    assert_eq!(body["kind"], "Table");
}
