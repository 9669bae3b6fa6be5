//! testkit serving Nodes, DaemonSets and the health endpoints as a real API server does: the requests of
//! `fixtures/realapi/nodes.json` (recorded from kube-apiserver v1.36) are sent to testkit as recorded,
//! and what kok reads of the answers must be the same. What a kube-controller-manager adds by itself
//! (taints, conditions after missed heartbeats) is not played: tests write those fields.

use std::path::Path;

use crate::common;

use common::{send, send_typed};
use serde_json::{json, Value};
use testkit::ApiServer;

fn recorded() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/realapi/nodes.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[tokio::test]
async fn nodes_are_created_patched_through_status_listed_and_deleted_as_recorded() {
    let table = recorded();
    let server = ApiServer::start().await.unwrap();
    for node in ["a", "b", "c"] {
        let request = &table["create"][node]["request"];
        let got = send(
            &server,
            "POST",
            request["path"].as_str().unwrap(),
            Some(&request["body"]),
        )
        .await;
        let want = &table["create"][node]["response"];
        assert_eq!(
            u64::from(got.status),
            want["status"].as_u64().unwrap(),
            "{}",
            got.body
        );
        assert_eq!(
            (&got.body["kind"], &got.body["apiVersion"]),
            (&json!("Node"), &json!("v1"))
        );
        assert_eq!(got.body["metadata"]["name"], want["body"]["metadata"]["name"]);
        assert_eq!(
            got.body["metadata"].get("generation"),
            None,
            "Nodes have no generation"
        );
    }

    // The kubelet-like status patch, strategic merge on /status, as recorded.
    let patch = &table["status_patch"]["b"]["request"];
    let got = send_typed(
        &server,
        "PATCH",
        patch["path"].as_str().unwrap(),
        patch["headers"]["Content-Type"].as_str().unwrap(),
        &patch["body"].to_string(),
    )
    .await;
    assert_eq!(
        u64::from(got.status),
        table["status_patch"]["b"]["response"]["status"].as_u64().unwrap()
    );
    let after = &table["still_heartbeating_b"]["node"]["status"];
    assert_eq!(
        got.body["status"]["conditions"],
        patch["body"]["status"]["conditions"]
    );
    assert_eq!(
        got.body["status"]["nodeInfo"]["kubeletVersion"],
        after["nodeInfo"]["kubeletVersion"]
    );
    assert_eq!(got.body["status"]["addresses"], after["addresses"]);

    // A write to the main resource leaves the status alone.
    let path = patch["path"].as_str().unwrap().trim_end_matches("/status");
    let got = send_typed(
        &server,
        "PATCH",
        path,
        "application/merge-patch+json",
        r#"{"status": {"conditions": []}, "metadata": {"labels": {"x": "y"}}}"#,
    )
    .await;
    assert_eq!(
        got.body["status"]["conditions"],
        patch["body"]["status"]["conditions"]
    );

    for case in ["by-label", "no-match"] {
        let request = &table["list"][case]["request"];
        let want = &table["list"][case]["response"]["body"];
        let got = send(&server, "GET", request["path"].as_str().unwrap(), None).await;
        assert_eq!(got.status, 200);
        assert_eq!(
            (&got.body["kind"], &got.body["apiVersion"]),
            (&want["kind"], &want["apiVersion"])
        );
        let names = |list: &Value| -> Vec<Value> {
            list["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["metadata"]["name"].clone())
                .collect()
        };
        assert_eq!(names(&got.body), names(want), "{case}");
        assert_eq!(
            got.body["items"].is_array(),
            want["items"].is_array(),
            "{case}: items: []"
        );
    }

    let missing = &table["get_missing"];
    let got = send(&server, "GET", missing["request"]["path"].as_str().unwrap(), None).await;
    assert_eq!(
        u64::from(got.status),
        missing["response"]["status"].as_u64().unwrap()
    );
    assert_eq!(got.body["message"], missing["response"]["body"]["message"]);
    assert_eq!(got.body["details"], missing["response"]["body"]["details"]);

    let delete = &table["delete_c"];
    let got = send(
        &server,
        "DELETE",
        delete["request"]["path"].as_str().unwrap(),
        None,
    )
    .await;
    assert_eq!(
        u64::from(got.status),
        delete["response"]["status"].as_u64().unwrap()
    );
}

#[tokio::test]
async fn the_health_endpoints_answer_as_recorded() {
    let table = recorded();
    let server = ApiServer::start().await.unwrap();
    for case in ["readyz-admin", "livez-admin", "healthz-admin"] {
        let endpoint = &table["endpoints"][case];
        let path = endpoint["request"]["path"].as_str().unwrap();
        let got = common::request(server.port(), "GET", path, "application/json", "")
            .await
            .unwrap();
        assert_eq!(
            u64::from(got.status),
            endpoint["response"]["status"].as_u64().unwrap(),
            "{case}"
        );
        assert_eq!(got.body, endpoint["response"]["body"], "{case}");
    }
    let version = send(&server, "GET", "/version", None).await;
    let want = &table["endpoints"]["version-admin"]["response"]["body"];
    for field in ["major", "minor", "gitVersion", "platform"] {
        assert!(version.body[field].is_string(), "{field}: {}", version.body);
        assert!(want[field].is_string());
    }
}

#[tokio::test]
async fn daemon_sets_are_served_with_their_status_as_recorded() {
    let table = recorded();
    let server = ApiServer::start().await.unwrap();
    let recorded = &table["workloads"]["daemonset-one-ready-node"];
    let mut object = recorded["object"].clone();
    let ns = object["metadata"]["namespace"].as_str().unwrap().to_string();
    send(
        &server,
        "POST",
        "/api/v1/namespaces",
        Some(&json!({"metadata": {"name": ns}})),
    )
    .await;
    let status = object["status"].take();
    let meta = object["metadata"].take();
    object["metadata"] = json!({"name": meta["name"], "labels": meta["labels"]});
    let collection = format!("/apis/apps/v1/namespaces/{ns}/daemonsets");
    let got = send(&server, "POST", &collection, Some(&object)).await;
    assert_eq!(got.status, 201, "{}", got.body);
    assert_eq!(got.body["metadata"]["generation"], json!(1));
    let name = meta["name"].as_str().unwrap();
    let got = send_typed(
        &server,
        "PATCH",
        &format!("{collection}/{name}/status"),
        "application/merge-patch+json",
        &json!({"status": status}).to_string(),
    )
    .await;
    assert_eq!(got.status, 200, "{}", got.body);
    assert_eq!(got.body["status"], status);
    let list = send(&server, "GET", &collection, None).await;
    assert_eq!(list.body["kind"], "DaemonSetList");
    assert_eq!(list.body["items"][0]["status"]["numberUnavailable"], json!(1));
}
