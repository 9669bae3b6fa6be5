//! testkit against a real API server's answers: every case of `fixtures/realapi/crd-validation.json`
//! (recorded from kube-apiserver v1.36 by `fixtures/realapi/record-crd-validation.py`) is sent to
//! testkit as recorded, and the status, the `Status` body, the `Warning` headers and the stored spec
//! must be the same.

use std::path::Path;

use crate::common;

use common::{send, send_typed};
use serde_json::{json, Value};
use testkit::ApiServer;

/// The recorded table, and a server with its namespace and CRD, as the recording started.
async fn recorded() -> (Value, ApiServer) {
    let table: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/realapi/crd-validation.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let server = ApiServer::start().await.unwrap();
    let ns = json!({"metadata": {"name": "valprobe"}});
    send(&server, "POST", "/api/v1/namespaces", Some(&ns)).await;
    server
        .install_crds(&[serde_json::from_value(table["crd"].clone()).unwrap()])
        .await
        .unwrap();
    (table, server)
}

#[tokio::test]
async fn crd_validation_answers_match_a_real_api_server() {
    let (table, server) = recorded().await;
    let cases = table["cases"].as_array().unwrap();
    assert!(cases.len() >= 20, "the table has every rule");
    for case in cases {
        let name = case["case"].as_str().unwrap();
        let request = &case["request"];
        let path = request["path"].as_str().unwrap();
        let mut body = request["body"].clone();
        if name.starts_with("unknown-field") {
            send(
                &server,
                "DELETE",
                "/apis/probe.kok.dev/v1/namespaces/valprobe/gadgets/unknown",
                None,
            )
            .await;
        }
        if request["method"] == "PUT" {
            // The object the recorded update replaced, created here with the recorded spec before the change.
            let collection = path.rsplit_once('/').unwrap().0;
            let mut first = json!({"apiVersion": body["apiVersion"], "kind": body["kind"],
                "metadata": {"name": body["metadata"]["name"]}, "spec": {"id": "ok", "size": 2}});
            let created = send(&server, "POST", collection, Some(&first.take())).await;
            assert_eq!(created.status, 201, "{name}: {}", created.body);
            for field in ["resourceVersion", "uid", "creationTimestamp"] {
                body["metadata"][field] = created.body["metadata"][field].clone();
            }
        }
        let got = send(&server, request["method"].as_str().unwrap(), path, Some(&body)).await;
        let want = &case["response"];
        assert_eq!(
            u64::from(got.status),
            want["status"].as_u64().unwrap(),
            "{name}: {}",
            got.body
        );
        let want_warnings: Vec<String> = want["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap().to_string())
            .collect();
        assert_eq!(got.warnings, want_warnings, "{name}: Warning headers");
        if got.status >= 400 {
            assert_eq!(got.body, want["body"], "{name}: Status body");
        } else {
            assert_eq!(got.body["spec"], want["body"]["spec"], "{name}: returned spec");
        }
        if let Some(stored) = case.get("stored_spec") {
            let object = server.object(("probe.kok.dev", "v1", "gadgets"), "valprobe", "unknown");
            assert_eq!(
                object.map(|o| o["spec"].clone()).unwrap_or(Value::Null),
                *stored,
                "{name}: stored spec"
            );
        }
    }
}

#[tokio::test]
async fn patches_and_server_side_apply_are_validated_and_pruned_too() {
    let (_, server) = recorded().await;
    let path = "/apis/probe.kok.dev/v1/namespaces/valprobe/gadgets";
    let apply = |spec: &str| {
        format!(
            r#"{{"apiVersion":"probe.kok.dev/v1","kind":"Gadget","metadata":{{"name":"g"}},"spec":{spec}}}"#
        )
    };
    let ssa = "application/apply-patch+yaml";

    // Apply creates; an unknown field is refused under Strict, pruned with a warning otherwise.
    let strict = format!("{path}/g?fieldManager=t&fieldValidation=Strict");
    let got = send_typed(
        &server,
        "PATCH",
        &strict,
        ssa,
        &apply(r#"{"id":"ok","size":2,"extra":1}"#),
    )
    .await;
    assert_eq!(got.status, 400, "{}", got.body);
    assert_eq!(
        got.body["message"],
        "Gadget in version \"v1\" cannot be handled as a Gadget: strict decoding error: unknown field \"spec.extra\""
    );
    let warn = format!("{path}/g?fieldManager=t");
    let got = send_typed(
        &server,
        "PATCH",
        &warn,
        ssa,
        &apply(r#"{"id":"ok","size":2,"extra":1}"#),
    )
    .await;
    assert_eq!(got.status, 201, "{}", got.body);
    assert_eq!(
        got.warnings,
        vec![r#"299 - "unknown field \"spec.extra\"""#.to_string()]
    );
    assert_eq!(got.body["spec"], json!({"id": "ok", "size": 2}));

    // The spec is immutable (CEL `self == oldSelf`) through merge patches and apply alike.
    let got = send_typed(
        &server,
        "PATCH",
        &format!("{path}/g"),
        "application/merge-patch+json",
        r#"{"spec":{"size":3}}"#,
    )
    .await;
    assert_eq!(got.status, 422, "{}", got.body);
    assert_eq!(
        got.body["details"]["causes"][0]["message"],
        "Invalid value: spec is immutable"
    );
    let got = send_typed(&server, "PATCH", &warn, ssa, &apply(r#"{"id":"ok","size":4}"#)).await;
    assert_eq!(got.status, 422, "{}", got.body);

    // Values are checked before the rules: a JSON patch to a bad type names the field.
    let got = send_typed(
        &server,
        "PATCH",
        &format!("{path}/g"),
        "application/json-patch+json",
        r#"[{"op":"replace","path":"/spec/size","value":"big"}]"#,
    )
    .await;
    assert_eq!(got.status, 422, "{}", got.body);
    assert_eq!(got.body["details"]["causes"][0]["field"], "spec.size");
    assert_eq!(
        got.body["details"]["causes"][0]["reason"],
        "FieldValueTypeInvalid"
    );

    // Metadata and status changes leave the spec alone and pass.
    let got = send_typed(
        &server,
        "PATCH",
        &format!("{path}/g"),
        "application/merge-patch+json",
        r#"{"metadata":{"labels":{"a":"b"}}}"#,
    )
    .await;
    assert_eq!(got.status, 200, "{}", got.body);
}
