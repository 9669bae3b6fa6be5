//! Tables of built-in kinds against a real API server's: every case of `fixtures/realapi/tables.json`
//! (kube-apiserver v1.36, recorded by `record-tables-events.py`).
//!
//! First the printing: each recorded row is printed again from the object it shows, at the time of its
//! recording, and must have the same cells (and conditions), under the same columns. Then the serving:
//! the recording's objects are created in testkit as the recording created them, and each recorded
//! request is sent as kubectl sent it: status, columns, what rows carry (`includeObject`, `v1beta1`),
//! paging, empty Tables and errors must be the same, and so must every cell that does not depend on
//! when it is read.

use crate::common;
use crate::tools;

use common::recording::{fixture, merge, recorded_server, resource_of, send, whole_objects, JSON};
use common::with_query;
use serde_json::{json, Value};
use testkit::printers;

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

/// kubectl's output with what depends on when, or on uids, made alike: ages and durations (`13s`,
/// `5m13s`, `(71s ago)`), RFC 3339 times and uids; and whitespace, as columns widen with their cells.
fn comparable_output(out: &str) -> Vec<Vec<String>> {
    let uid = regex::Regex::new("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}").unwrap();
    let time = regex::Regex::new(r"^\(?[0-9]+[smhdy]([0-9]+[smhd])?$|^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]+Z$")
        .unwrap();
    out.lines()
        .map(|line| {
            line.split_whitespace()
                .map(|word| {
                    let word = uid.replace_all(word, "<uid>");
                    if time.is_match(&word) {
                        "<time>".to_string()
                    } else {
                        word.into_owned()
                    }
                })
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_get_prints_what_it_printed_against_the_real_server() {
    if !tools::kubectl_or_skip("kubectl_get_prints_what_it_printed_against_the_real_server") {
        return;
    }
    let tables = fixture("tables.json");
    let server = recorded_server(&tables).await;
    let ns = tables["namespace"].as_str().unwrap();
    let path = format!("/api/v1/namespaces/{ns}/pods/on-missing-node");
    assert_eq!(
        send(&server, "DELETE", &path, JSON, &Value::Null).await.status,
        200
    );
    let cache = tempfile::tempdir().unwrap();
    let runs = tables["kubectl_runs"].as_array().unwrap();
    for run in runs {
        let command = run["command"].as_str().unwrap();
        let args: Vec<&str> = command.split_whitespace().skip(1).collect();
        let out = tools::command("kubectl")
            .arg("--kubeconfig")
            .arg(server.kubeconfig_path())
            .arg("--cache-dir")
            .arg(cache.path())
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(
            i64::from(out.status.code().unwrap_or(-1)),
            run["exit_code"].as_i64().unwrap(),
            "{command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        // The recording's server (microshift) gave pods with a nodeName their Node's zone label; upstream
        // kube-apiserver does not.
        let recorded = run["stdout"]
            .as_str()
            .unwrap()
            .replace(&format!(",topology.kubernetes.io/zone={ns}"), "");
        assert_eq!(
            comparable_output(&stdout),
            comparable_output(&recorded),
            "{command}:\n{stdout}"
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stderr).trim(),
            run["stderr"].as_str().unwrap().trim(),
            "{command}"
        );
    }
    assert_eq!(runs.len(), 15, "every recorded kubectl run");
}
