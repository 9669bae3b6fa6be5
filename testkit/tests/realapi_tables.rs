//! Tables of built-in kinds against a real API server's: every case of `fixtures/realapi/tables.json`
//! (kube-apiserver v1.36, recorded by `record-tables-events.py`).
//!
//! First the printing: each recorded row is printed again from the object it shows, at the time of its
//! recording, and must have the same cells (and conditions), under the same columns. Then the serving:
//! the recording's objects are created in testkit as the recording created them, and each recorded
//! request is sent as kubectl sent it: status, columns, what rows carry (`includeObject`, `v1beta1`),
//! paging, empty Tables and errors must be the same, and so must every cell that does not depend on
//! when it is read.

use std::collections::HashMap;
use std::path::Path;

mod common;

use common::{request_with, with_query, Answer};
use serde_json::{json, Value};
use testkit::printers;
use testkit::ApiServer;

fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/realapi")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The group and resource of a request path (`/api/v1/namespaces/ns/pods/x` is `("", "pods")`).
fn resource_of(path: &str) -> (String, String) {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match segs.as_slice() {
        ["api", _, rest @ ..] => ("", rest),
        ["apis", group, _, rest @ ..] => (*group, rest),
        _ => panic!("not a resource path: {path}"),
    };
    let resource = match rest {
        ["namespaces", _, resource, ..] => resource,
        [resource, ..] => resource,
        [] => panic!("no resource in {path}"),
    };
    (group.to_string(), resource.to_string())
}

/// Columns without their descriptions, as the fixture's `columns` lists them.
fn column_keys(columns: &Value) -> Value {
    columns
        .as_array()
        .unwrap()
        .iter()
        .map(|c| json!({"name": c["name"], "type": c["type"], "format": c["format"], "priority": c["priority"]}))
        .collect()
}

/// The name of a row's object: from the object it carries, else from the `name` column.
fn row_name(row: &Value, columns: &Value) -> String {
    if let Some(name) = row.pointer("/object/metadata/name").and_then(Value::as_str) {
        return name.to_string();
    }
    let at = columns
        .as_array()
        .unwrap()
        .iter()
        .position(|c| c["format"] == "name")
        .unwrap();
    row["cells"][at].as_str().unwrap().to_string()
}

/// Applies a JSON merge patch.
fn merge(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

/// Every object the recording shows whole, by resource and name: the rows that carry the object, the
/// Jobs and Pods `kubectl logs` read (pods-log.json) and the Events (events.json).
fn whole_objects(tables: &Value) -> HashMap<(String, String), Value> {
    let mut found = HashMap::new();
    for case in tables["cases"].as_array().unwrap() {
        let (_, resource) = resource_of(case["request"]["path"].as_str().unwrap());
        for row in case["response"]["body"]["rows"].as_array().into_iter().flatten() {
            let obj = &row["object"];
            if obj.is_object() && obj["kind"] != "PartialObjectMetadata" {
                let name = obj["metadata"]["name"].as_str().unwrap().to_string();
                found.insert((resource.clone(), name), obj.clone());
            }
        }
    }
    for run in fixture("pods-log.json")["kubectl_runs"].as_array().unwrap() {
        for step in run["requests"].as_array().unwrap() {
            let body = &step["response"]["body"];
            let resource = match body["kind"].as_str() {
                Some("Job") => "jobs",
                Some("Pod") => "pods",
                _ => continue,
            };
            let name = body["metadata"]["name"].as_str().unwrap().to_string();
            found
                .entry((resource.to_string(), name))
                .or_insert_with(|| body.clone());
        }
    }
    let events = fixture("events.json");
    let all = events["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "list/core/all")
        .unwrap();
    for item in all["response"]["body"]["items"].as_array().unwrap() {
        let mut event = item.clone();
        event["apiVersion"] = json!("v1");
        event["kind"] = json!("Event");
        let name = event["metadata"]["name"].as_str().unwrap().to_string();
        found.insert(("events".to_string(), name), event);
    }
    found
}

/// An object the recording shows only the metadata of: as the recording created it (and patched its
/// status), with that metadata and what the server adds on its own: a namespace's `Active` phase, and
/// the one certificate each of the two ConfigMaps the cluster puts in every namespace holds.
fn rebuilt(tables: &Value, resource: &str, name: &str, metadata: &Value) -> Value {
    let mut obj = json!({});
    for step in tables["setup"].as_array().unwrap() {
        let (request, status) = match (step.get("create"), step.get("status_patch")) {
            (Some(create), _) => (create, false),
            (None, Some(patch)) => (patch, true),
            _ => continue,
        };
        let path = request["path"].as_str().unwrap();
        let matches = if status {
            path.ends_with(&format!("/{resource}/{name}/status"))
        } else {
            resource_of(path).1 == resource && request["body"]["metadata"]["name"] == name
        };
        if matches {
            merge(&mut obj, &request["body"]);
        }
    }
    match (resource, name) {
        ("namespaces", _) if obj["status"].is_null() => obj["status"] = json!({"phase": "Active"}),
        ("configmaps", "kube-root-ca.crt") => obj["data"] = json!({"ca.crt": "a certificate"}),
        ("configmaps", "openshift-service-ca.crt") => {
            obj["data"] = json!({"service-ca.crt": "a certificate"})
        }
        _ => {}
    }
    obj["metadata"] = metadata.clone();
    obj
}

#[test]
fn every_recorded_row_prints_again_with_the_same_cells_under_the_same_columns() {
    let tables = fixture("tables.json");
    let whole = whole_objects(&tables);
    let mut rows = 0;
    for case in tables["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let body = &case["response"]["body"];
        if body["kind"] != "Table" {
            continue;
        }
        let (group, resource) = resource_of(case["request"]["path"].as_str().unwrap());
        let columns = printers::columns(&group, &resource).unwrap_or_else(|| panic!("{name}: no columns"));
        let printed: Value = columns
            .iter()
            .map(|c| json!({"name": c.name, "type": c.type_, "format": c.format, "priority": c.priority}))
            .collect();
        assert_eq!(
            printed,
            column_keys(&body["columnDefinitions"]),
            "{name}: columns"
        );
        let recorded_columns = case_columns(&tables, &resource, &group);
        assert_eq!(printed, recorded_columns, "{name}: the fixture's column list");
        let at: jiff::Timestamp = case["at"].as_str().unwrap().parse().unwrap();
        for row in body["rows"].as_array().unwrap() {
            let object = row_name(row, &body["columnDefinitions"]);
            let obj = match whole.get(&(resource.clone(), object.clone())) {
                Some(obj) => obj.clone(),
                None => rebuilt(&tables, &resource, &object, &row["object"]["metadata"]),
            };
            let got = printers::row(&group, &resource, &obj, at).unwrap();
            assert_eq!(Value::from(got.cells), row["cells"], "{name}: {object}");
            assert_eq!(
                got.conditions.unwrap_or(Value::Null),
                row.get("conditions").cloned().unwrap_or(Value::Null),
                "{name}: {object}: conditions"
            );
            rows += 1;
        }
    }
    assert!(rows > 150, "every row of every Table case ({rows})");
}

/// The fixture's `columns` entry for a resource (`events.k8s.io` for that group's Events).
fn case_columns(tables: &Value, resource: &str, group: &str) -> Value {
    let key = if group == "events.k8s.io" {
        "events.k8s.io"
    } else {
        resource
    };
    tables["columns"][key].clone()
}

async fn send(
    server: &ApiServer,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> Answer {
    let body = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    request_with(server.port(), method, path, headers, &body)
        .await
        .unwrap()
}

const JSON: &[(&str, &str)] = &[
    ("Accept", "application/json"),
    ("Content-Type", "application/json"),
];
const MERGE: &[(&str, &str)] = &[
    ("Accept", "application/json"),
    ("Content-Type", "application/merge-patch+json"),
];

/// An object to create again: without what the server assigns or what ties it to recorded uids.
fn creatable(obj: &Value) -> Value {
    let mut obj = obj.clone();
    if let Some(meta) = obj["metadata"].as_object_mut() {
        for key in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "ownerReferences",
        ] {
            meta.remove(key);
        }
    }
    if let Some(m) = obj.as_object_mut() {
        m.remove("status");
    }
    obj
}

/// A testkit server holding what the recording made: its setup replayed as recorded, and what the
/// cluster's controllers made meanwhile (the Job controller's pods, statuses and Events, a namespace's
/// `default` ServiceAccount and CA ConfigMaps) created from the recorded objects.
async fn recorded_server(tables: &Value) -> ApiServer {
    let server = ApiServer::start().await.unwrap();
    let whole = whole_objects(tables);
    let ns = tables["namespace"].as_str().unwrap();
    let created = send(
        &server,
        "POST",
        "/api/v1/nodes",
        JSON,
        &tables["node_setup"]["create"],
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.body);
    for step in tables["setup"].as_array().unwrap() {
        let (method, request) = match (step.get("create"), step.get("status_patch"), step.get("delete")) {
            (Some(r), _, _) => ("POST", r),
            (_, Some(r), _) => ("PATCH", r),
            (_, _, Some(r)) => ("DELETE", r),
            _ => continue,
        };
        let path = request["path"].as_str().unwrap();
        let headers = if method == "PATCH" { MERGE } else { JSON };
        if method == "PATCH" && path.contains("/pods/job-") {
            // The Job controller's pod, made before the recording patched its status.
            let name = path.rsplit('/').nth(1).unwrap();
            let pod = creatable(&whole[&("pods".to_string(), name.to_string())]);
            let got = send(
                &server,
                "POST",
                &format!("/api/v1/namespaces/{ns}/pods"),
                JSON,
                &pod,
            )
            .await;
            assert_eq!(got.status, 201, "{name}: {}", got.body);
        }
        let got = send(&server, method, path, headers, &request["body"]).await;
        assert!(got.status < 300, "{method} {path}: {}", got.body);
    }
    let pending_job_pod = creatable(&whole[&("pods".to_string(), "job-active-5ckqw".to_string())]);
    let got = send(
        &server,
        "POST",
        &format!("/api/v1/namespaces/{ns}/pods"),
        JSON,
        &pending_job_pod,
    )
    .await;
    assert_eq!(got.status, 201, "{}", got.body);
    for ((resource, name), obj) in &whole {
        if resource == "jobs" {
            let path = format!("/apis/batch/v1/namespaces/{ns}/jobs/{name}/status");
            let got = send(&server, "PATCH", &path, MERGE, &json!({"status": obj["status"]})).await;
            assert_eq!(got.status, 200, "{name}: {}", got.body);
        }
        if resource == "events" && obj["metadata"]["namespace"] == ns {
            let path = format!("/api/v1/namespaces/{ns}/events");
            let mut event = obj.clone();
            if let Some(meta) = event["metadata"].as_object_mut() {
                for key in ["uid", "resourceVersion", "creationTimestamp"] {
                    meta.remove(key);
                }
            }
            let got = send(&server, "POST", &path, JSON, &event).await;
            assert_eq!(got.status, 201, "{name}: {}", got.body);
        }
    }
    for (resource, body) in [
        ("serviceaccounts", json!({"metadata": {"name": "default"}})),
        (
            "configmaps",
            json!({"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": "a certificate"}}),
        ),
        (
            "configmaps",
            json!({"metadata": {"name": "openshift-service-ca.crt"}, "data": {"service-ca.crt": "a certificate"}}),
        ),
    ] {
        let got = send(
            &server,
            "POST",
            &format!("/api/v1/namespaces/{ns}/{resource}"),
            JSON,
            &body,
        )
        .await;
        assert_eq!(got.status, 201, "{}", got.body);
    }
    server
}

/// The columns whose cells depend on when the Table is read (or on uids testkit assigns anew).
fn depends_on_time_or_uid(column: &str) -> bool {
    matches!(
        column,
        "Age" | "Duration" | "Last Seen" | "First Seen" | "Created At" | "Selector"
    )
}

/// A `Restarts` cell's count, without `(5m ago)`.
fn restart_count(cell: &Value) -> String {
    let text = cell.as_str().unwrap_or("");
    text.split(" (").next().unwrap_or("").to_string()
}

#[tokio::test]
async fn every_recorded_table_request_is_answered_as_the_real_server_answered_it() {
    let tables = fixture("tables.json");
    let server = recorded_server(&tables).await;
    // The recording created this pod (for the pod-log cases) after it recorded the Tables.
    let ns = tables["namespace"].as_str().unwrap();
    let path = format!("/api/v1/namespaces/{ns}/pods/on-missing-node");
    assert_eq!(
        send(&server, "DELETE", &path, JSON, &Value::Null).await.status,
        200
    );
    let mut previous_continue = String::new();
    let mut compared = 0;
    for case in tables["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let request = &case["request"];
        let mut query = request["query"].clone();
        if query.get("continue").is_some() {
            // testkit's continue tokens are its own: the one its previous page gave.
            query["continue"] = json!(previous_continue);
        }
        let path = with_query(request["path"].as_str().unwrap(), &query);
        let accept = request["headers"]["Accept"].as_str().unwrap();
        let got = send(&server, "GET", &path, &[("Accept", accept)], &Value::Null).await;
        let want = &case["response"];
        assert_eq!(
            u64::from(got.status),
            want["status"].as_u64().unwrap(),
            "{name}: {}",
            got.body
        );
        let (got, want) = (&got.body, &want["body"]);
        if want["kind"] != "Table" {
            assert_eq!(got, want, "{name}");
            continue;
        }
        assert_eq!(got["apiVersion"], want["apiVersion"], "{name}");
        assert_eq!(
            column_keys(&got["columnDefinitions"]),
            column_keys(&want["columnDefinitions"]),
            "{name}: columns"
        );
        let keys = |meta: &Value| -> Vec<String> { meta.as_object().unwrap().keys().cloned().collect() };
        assert_eq!(
            keys(&got["metadata"]),
            keys(&want["metadata"]),
            "{name}: metadata"
        );
        assert_eq!(
            got["metadata"]["remainingItemCount"], want["metadata"]["remainingItemCount"],
            "{name}"
        );
        previous_continue = got["metadata"]["continue"].as_str().unwrap_or("").to_string();
        let (got_rows, want_rows) = (got["rows"].as_array().unwrap(), want["rows"].as_array().unwrap());
        let names = |rows: &[Value]| -> Vec<String> {
            rows.iter()
                .map(|r| row_name(r, &want["columnDefinitions"]))
                .collect()
        };
        assert_eq!(names(got_rows), names(want_rows), "{name}: rows");
        let columns = want["columnDefinitions"].as_array().unwrap();
        for (g, w) in got_rows.iter().zip(want_rows) {
            let row = row_name(w, &want["columnDefinitions"]);
            assert_eq!(
                g.get("conditions"),
                w.get("conditions"),
                "{name}: {row}: conditions"
            );
            match (&g["object"], &w["object"]) {
                (Value::Null, Value::Null) => assert!(g.get("object").is_some(), "{name}: the key is kept"),
                (g, w) => {
                    assert_eq!(g["kind"], w["kind"], "{name}: {row}: object");
                    assert_eq!(g["apiVersion"], w["apiVersion"], "{name}: {row}: object");
                }
            }
            for (i, column) in columns.iter().enumerate() {
                let column = column["name"].as_str().unwrap();
                let (gc, wc) = (&g["cells"][i], &w["cells"][i]);
                match column {
                    "Restarts" => assert_eq!(restart_count(gc), restart_count(wc), "{name}: {row}"),
                    c if depends_on_time_or_uid(c) => {
                        assert_eq!(gc.is_string(), wc.is_string(), "{name}: {row}: {c}");
                        assert_eq!(gc == "", wc == "", "{name}: {row}: {c} is empty or not");
                    }
                    c => assert_eq!(gc, wc, "{name}: {row}: {c}"),
                }
            }
            compared += 1;
        }
    }
    assert!(compared > 150, "every row of every Table ({compared})");
}
