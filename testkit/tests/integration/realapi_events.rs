//! Events through both APIs against a real API server's answers: every case of
//! `fixtures/realapi/events.json` (kube-apiserver v1.36, recorded by `record-tables-events.py`) is sent
//! to testkit as recorded, in order — Events created through `events.k8s.io/v1` and read through `v1`
//! and back, the reverse, each API's refusals (exact `Status` bodies), updates, and lists with each API's
//! field selectors — and so are the requests `kubectl events --for`, `kubectl events --types` and
//! `kubectl describe` sent for Events; those commands, run with the real kubectl, print the same.

use crate::common;
use crate::tools;

use common::recording::fixture;
use common::{request_with, with_query, Answer};
use serde_json::{json, Value};
use testkit::ApiServer;

/// An object without what the server assigns (uid, resourceVersion, creation time, managedFields).
fn without_server_fields(mut obj: Value) -> Value {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in ["uid", "resourceVersion", "creationTimestamp", "managedFields"] {
            meta.remove(key);
        }
    }
    obj
}

/// A response body as compared: objects without server fields, lists without their resourceVersion
/// and their items without `kind` and `apiVersion` (the real server leaves them out of list items).
fn comparable(body: &Value) -> Value {
    match body["kind"].as_str() {
        Some(kind) if kind.ends_with("List") => {
            let items: Vec<Value> = body["items"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|item| {
                    let mut item = without_server_fields(item.clone());
                    if let Some(m) = item.as_object_mut() {
                        m.remove("kind");
                        m.remove("apiVersion");
                    }
                    item
                })
                .collect();
            json!({"kind": kind, "apiVersion": body["apiVersion"], "items": items})
        }
        Some("Status") => body.clone(),
        _ => without_server_fields(body.clone()),
    }
}

async fn replay(server: &ApiServer, request: &Value) -> Answer {
    let path = with_query(request["path"].as_str().unwrap(), &request["query"]);
    let mut headers = vec![("Accept", "application/json")];
    if let Some(ct) = request["headers"]["Content-Type"].as_str() {
        headers.push(("Content-Type", ct));
    }
    let body = match &request["body"] {
        Value::Null => String::new(),
        body => body.to_string(),
    };
    request_with(
        server.port(),
        request["method"].as_str().unwrap(),
        &path,
        &headers,
        &body,
    )
    .await
    .unwrap()
}

/// A server with the recording's namespace and the Events of the recording that no case creates (those
/// the Job controller wrote), created through `v1` as they were stored.
async fn recorded_server(table: &Value) -> ApiServer {
    let server = ApiServer::start().await.unwrap();
    let ns = table["namespace"].as_str().unwrap();
    let create = |path: String, body: Value| {
        let server = &server;
        async move {
            let got = request_with(
                server.port(),
                "POST",
                &path,
                &[
                    ("Accept", "application/json"),
                    ("Content-Type", "application/json"),
                ],
                &body.to_string(),
            )
            .await
            .unwrap();
            assert_eq!(got.status, 201, "{path}: {}", got.body);
        }
    };
    create("/api/v1/namespaces".into(), json!({"metadata": {"name": ns}})).await;
    let cases = table["cases"].as_array().unwrap();
    let created: Vec<&str> = cases
        .iter()
        .filter(|c| c["request"]["method"] == "POST" && c["response"]["status"] == 201)
        .map(|c| c["request"]["body"]["metadata"]["name"].as_str().unwrap())
        .collect();
    let all = cases.iter().find(|c| c["name"] == "list/core/all").unwrap();
    for item in all["response"]["body"]["items"].as_array().unwrap() {
        let name = item["metadata"]["name"].as_str().unwrap();
        if !created.contains(&name) {
            let mut body = without_server_fields(item.clone());
            body["apiVersion"] = json!("v1");
            body["kind"] = json!("Event");
            create(format!("/api/v1/namespaces/{ns}/events"), body).await;
        }
    }
    server
}

#[tokio::test]
async fn events_written_and_read_through_either_api_answer_as_a_real_api_server_does() {
    let table = fixture("events.json");
    let server = recorded_server(&table).await;
    let cases = table["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 79, "every recorded case");
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let got = replay(&server, &case["request"]).await;
        let want = &case["response"];
        assert_eq!(
            u64::from(got.status),
            want["status"].as_u64().unwrap(),
            "{name}: {}",
            got.body
        );
        assert_eq!(
            comparable(&got.body),
            comparable(&want["body"]),
            "{name}: the body"
        );
    }
}

#[tokio::test]
async fn the_event_lists_kubectl_events_and_describe_ask_for_are_answered_as_recorded() {
    let table = fixture("events.json");
    let server = recorded_server(&table).await;
    for case in table["cases"].as_array().unwrap() {
        // The Events as they were when kubectl ran: every case's writes.
        if case["request"]["method"] != "GET" {
            replay(&server, &case["request"]).await;
        }
    }
    let mut asked = 0;
    for run in table["kubectl_runs"].as_array().unwrap() {
        for step in run["requests"].as_array().unwrap() {
            let request = &step["request"];
            if !request["path"].as_str().unwrap().ends_with("/events") {
                continue;
            }
            asked += 1;
            let got = replay(&server, request).await;
            let want = &step["response"];
            let what = format!(
                "{}: {}",
                run["command"].as_str().unwrap(),
                with_query("", &request["query"])
            );
            assert_eq!(u64::from(got.status), want["status"].as_u64().unwrap(), "{what}");
            assert_eq!(comparable(&got.body), comparable(&want["body"]), "{what}");
        }
    }
    assert_eq!(
        asked, 6,
        "kubectl events (3 --for, --types) and describe (2) each list Events once"
    );
}

/// kubectl's output with what depends on when made alike (`2s`, `4m2s)`, `(x6`), and whitespace, as
/// columns widen with their cells.
fn comparable_output(out: &str) -> Vec<Vec<String>> {
    let time = regex::Regex::new(r"^[0-9]+[smhdy]([0-9]+[smhd])?\)?$").unwrap();
    out.lines()
        .map(|line| {
            line.split_whitespace()
                .map(|w| {
                    if time.is_match(w) {
                        "<time>".to_string()
                    } else {
                        w.to_string()
                    }
                })
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_events_and_describe_print_the_events_as_they_did_against_the_real_server() {
    let test = "kubectl_events_and_describe_print_the_events_as_they_did_against_the_real_server";
    if !tools::kubectl_or_skip(test) {
        return;
    }
    let server = common::recording::recorded_server(&fixture("tables.json")).await;
    let cache = tempfile::tempdir().unwrap();
    let runs = fixture("events.json")["kubectl_runs"].as_array().unwrap().clone();
    for run in &runs {
        let command = run["command"].as_str().unwrap();
        let out = tools::command("kubectl")
            .arg("--kubeconfig")
            .arg(server.kubeconfig_path())
            .arg("--cache-dir")
            .arg(cache.path())
            .args(command.split_whitespace().skip(1))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{command}: {stderr}");
        assert_eq!(stderr.trim(), run["stderr"].as_str().unwrap().trim(), "{command}");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let recorded = run["stdout"].as_str().unwrap();
        // describe prints the pod as stored, which the recording's controllers and admission filled in;
        // its Events section is what is compared.
        let events = |text: &str| {
            text.find("Events:")
                .map_or(text.to_string(), |at| text[at..].to_string())
        };
        let (got, want) = if command.contains(" describe ") {
            (events(&stdout), events(recorded))
        } else {
            (stdout.clone(), recorded.to_string())
        };
        assert_eq!(
            comparable_output(&got),
            comparable_output(&want),
            "{command}:\n{stdout}"
        );
    }
    assert_eq!(runs.len(), 6, "every recorded kubectl run");
}
