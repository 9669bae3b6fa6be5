//! The recording behind `fixtures/realapi/tables.json`, `events.json` and `pods-log.json` made again in
//! testkit: the fixtures, the objects the recording shows whole, and a server holding what it made.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{json, Value};
use testkit::ApiServer;

use super::{request_with, Answer};

/// A fixture of `fixtures/realapi/`, parsed.
pub fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/realapi")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The group and resource of a request path (`/api/v1/namespaces/ns/pods/x` is `("", "pods")`).
pub fn resource_of(path: &str) -> (String, String) {
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

/// Applies a JSON merge patch.
pub fn merge(target: &mut Value, patch: &Value) {
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
pub fn whole_objects(tables: &Value) -> HashMap<(String, String), Value> {
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

/// One request with these headers and a JSON body (none for `null`).
pub async fn send(
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

/// Headers of a JSON request.
pub const JSON: &[(&str, &str)] = &[
    ("Accept", "application/json"),
    ("Content-Type", "application/json"),
];

/// Headers of a JSON merge patch.
pub const MERGE: &[(&str, &str)] = &[
    ("Accept", "application/json"),
    ("Content-Type", "application/merge-patch+json"),
];

/// An object to create again: without what the server assigns or what ties it to recorded uids.
pub fn creatable(obj: &Value) -> Value {
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

/// Makes a pod of the Job controller's again, owned by (and labelled with the uid of) its Job in testkit.
async fn create_job_pod(server: &ApiServer, ns: &str, recorded: &Value) {
    let mut pod = creatable(recorded);
    let job = pod["metadata"]["labels"]["batch.kubernetes.io/job-name"]
        .as_str()
        .unwrap()
        .to_string();
    let path = format!("/apis/batch/v1/namespaces/{ns}/jobs/{job}");
    let uid = send(server, "GET", &path, JSON, &Value::Null).await.body["metadata"]["uid"].clone();
    for label in ["batch.kubernetes.io/controller-uid", "controller-uid"] {
        pod["metadata"]["labels"][label] = uid.clone();
    }
    pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "Job", "name": job,
        "uid": uid, "controller": true, "blockOwnerDeletion": true}]);
    let got = send(
        server,
        "POST",
        &format!("/api/v1/namespaces/{ns}/pods"),
        JSON,
        &pod,
    )
    .await;
    assert_eq!(got.status, 201, "{job}'s pod: {}", got.body);
}

/// A testkit server holding what the recording made: its setup replayed as recorded, and what the
/// cluster's controllers made meanwhile (the Job controller's pods, statuses and Events, a namespace's
/// `default` ServiceAccount and CA ConfigMaps) created from the recorded objects.
pub async fn recorded_server(tables: &Value) -> ApiServer {
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
            create_job_pod(&server, ns, &whole[&("pods".to_string(), name.to_string())]).await;
        }
        let got = send(&server, method, path, headers, &request["body"]).await;
        assert!(got.status < 300, "{method} {path}: {}", got.body);
    }
    create_job_pod(
        &server,
        ns,
        &whole[&("pods".to_string(), "job-active-5ckqw".to_string())],
    )
    .await;
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
            // An Event about a pod names that pod's uid, which testkit assigned anew.
            let about = &event["involvedObject"];
            if about["kind"] == "Pod" && about["uid"].is_string() {
                let pod = format!("/api/v1/namespaces/{ns}/pods/{}", about["name"].as_str().unwrap());
                let uid =
                    send(&server, "GET", &pod, JSON, &Value::Null).await.body["metadata"]["uid"].clone();
                event["involvedObject"]["uid"] = uid;
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
