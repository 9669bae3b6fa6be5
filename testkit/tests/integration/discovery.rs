//! Discovery through kube's `Discovery`, the version endpoint, and `kubectl get` tables.

use crate::common;

use common::{Widget, WidgetSpec};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::discovery::{Discovery, Scope};
use kube::CustomResourceExt;
use serde_json::{json, Value};
use testkit::ApiServer;

#[tokio::test]
async fn discovery_lists_built_in_kinds_and_served_crds() {
    let server = ApiServer::start().await.unwrap();
    server.install_crds(&[Widget::crd()]).await.unwrap();
    let discovery = Discovery::new(server.client()).run().await.unwrap();
    let find = |group: &str, kind: &str| {
        discovery
            .get(group)
            .and_then(|g| g.recommended_kind(kind))
            .unwrap_or_else(|| panic!("{group}/{kind} is not discovered"))
    };
    for (group, kind) in [
        ("", "ConfigMap"),
        ("", "Secret"),
        ("", "ServiceAccount"),
        ("", "Pod"),
        ("", "Event"),
        ("events.k8s.io", "Event"),
        ("batch", "Job"),
        ("coordination.k8s.io", "Lease"),
        ("apps", "Deployment"),
        ("rbac.authorization.k8s.io", "ClusterRole"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ] {
        find(group, kind);
    }
    let (ar, caps) = find("example.test", "Widget");
    assert_eq!((ar.plural.as_str(), ar.version.as_str()), ("widgets", "v1"));
    assert_eq!(caps.scope, Scope::Namespaced);
    assert!(caps
        .subresources
        .iter()
        .any(|(s, _)| s.plural == "widgets/status" || s.plural == "status"));
    let (_, ns_caps) = find("", "Namespace");
    assert_eq!(ns_caps.scope, Scope::Cluster);
    let req = http::Request::get("/apis/batch").body(Vec::new()).unwrap();
    let group: Value = serde_json::from_str(&server.client().request_text(req).await.unwrap()).unwrap();
    assert_eq!(
        (
            group["kind"].as_str(),
            group["preferredVersion"]["version"].as_str()
        ),
        (Some("APIGroup"), Some("v1"))
    );
    let aggregated = Discovery::new(server.client()).run_aggregated().await.unwrap();
    let (ar, caps) = aggregated
        .get("example.test")
        .and_then(|g| g.recommended_kind("Widget"))
        .unwrap();
    assert_eq!(
        (ar.plural.as_str(), caps.scope.clone()),
        ("widgets", Scope::Namespaced)
    );
    assert!(aggregated
        .get("")
        .and_then(|g| g.recommended_kind("ConfigMap"))
        .is_some());
    assert!(aggregated
        .get("batch")
        .and_then(|g| g.recommended_kind("Job"))
        .is_some());
    let version = server.client().apiserver_version().await.unwrap();
    assert_eq!(version.major, "1");
}

async fn get_table(server: &ApiServer, path: &str) -> Value {
    let req = http::Request::get(path)
        .header(
            "Accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Vec::new())
        .unwrap();
    serde_json::from_str(&server.client().request_text(req).await.unwrap()).unwrap()
}

#[tokio::test]
async fn tables_evaluate_printer_columns_including_condition_filters() {
    let server = ApiServer::start().await.unwrap();
    let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
        serde_yaml::from_str(include_str!("../fixtures/widget-crd.yaml")).unwrap();
    server.install_crds(&[crd]).await.unwrap();
    let widgets: Api<Widget> = Api::default_namespaced(server.client());
    widgets
        .create(&PostParams::default(), &Widget::new("w", WidgetSpec { size: 3 }))
        .await
        .unwrap();
    let status = json!({"status": {"phase": "x", "conditions": [{"type": "Other", "status": "False"},
        {"type": "Ready", "status": "True"}]}});
    widgets
        .patch_status("w", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let t = get_table(&server, "/apis/example.test/v1/namespaces/default/widgets").await;
    assert_eq!(t["kind"], "Table");
    let headers: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(headers, vec!["Name", "Ready", "Size", "Age"]);
    let cells = &t["rows"][0]["cells"];
    assert_eq!(
        (&cells[0], &cells[1], &cells[2]),
        (&json!("w"), &json!("True"), &json!(3))
    );
    assert!(
        cells[3].as_str().unwrap().ends_with('s'),
        "age is human-readable: {}",
        cells[3]
    );
    assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    let built_in = get_table(&server, "/api/v1/namespaces").await;
    assert_eq!(built_in["rows"].as_array().unwrap().len(), 3);
    let one = get_table(&server, "/api/v1/namespaces/default").await;
    assert_eq!(one["rows"][0]["cells"][0], "default");
}

#[tokio::test]
async fn openapi_v2_is_one_swagger_document_of_built_in_and_crd_schemas() {
    let server = ApiServer::start().await.unwrap();
    server.install_crds(&[Widget::crd()]).await.unwrap();
    let http = reqwest::Client::new();
    let url = format!("{}/openapi/v2", server.url());
    let resp = http
        .get(&url)
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let text = resp.text().await.unwrap();
    assert!(!text.contains("#/components/"), "v3 references left in v2");
    let doc: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["swagger"], "2.0");
    let defs = &doc["definitions"];
    assert_eq!(
        defs["io.k8s.api.core.v1.ConfigMap"]["x-kubernetes-group-version-kind"][0]["kind"],
        "ConfigMap"
    );
    let widget = &defs["test.example.v1.Widget"];
    assert_eq!(
        widget["properties"]["spec"]["properties"]["size"]["description"],
        "Size."
    );
    let patch = &doc["paths"]["/apis/example.test/v1/namespaces/{namespace}/widgets/{name}"]["patch"];
    assert_eq!(patch["parameters"][0]["name"], "fieldValidation");
    assert_eq!(patch["parameters"][0]["type"], "string");
    assert_eq!(
        patch["responses"]["200"]["schema"]["$ref"],
        "#/definitions/test.example.v1.Widget"
    );

    // A reference with a description is a `$ref` beside it, as in the apiserver's document.
    let template = &defs["io.k8s.api.batch.v1.JobSpec"]["properties"]["template"];
    assert_eq!(
        template["$ref"],
        "#/definitions/io.k8s.api.core.v1.PodTemplateSpec"
    );
    assert!(template["allOf"].is_null(), "{template}");

    // kubectl asks for the protobuf form: gnostic's Document with the same definitions.
    let resp = http
        .get(&url)
        .header(
            "accept",
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .contains("protobuf"));
    let doc = <testkit::gnostic::Document as prost::Message>::decode(resp.bytes().await.unwrap()).unwrap();
    assert_eq!(doc.swagger, "2.0");
    let defs = doc.definitions.unwrap().additional_properties;
    let widget = defs
        .iter()
        .find(|d| d.name == "test.example.v1.Widget")
        .and_then(|d| d.value.as_ref())
        .expect("the Widget schema");
    let gvk = widget
        .vendor_extension
        .iter()
        .find(|e| e.name == "x-kubernetes-group-version-kind")
        .and_then(|e| e.value.as_ref())
        .expect("the kind extension");
    assert!(gvk.yaml.contains("kind: Widget"), "{}", gvk.yaml);
}
