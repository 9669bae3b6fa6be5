//! `pods/<name>/log` against a real API server's answers: every case of `fixtures/realapi/pods-log.json`
//! (kube-apiserver v1.36 with no kubelet anywhere, recorded by `record-tables-events.py`) is sent to
//! testkit holding the same pods and Node, and so are the log requests `kubectl logs` sent. Status,
//! `Content-Type` and body must be the same: options refused (400/422 in the server's words) before the
//! pod is looked up, a pod with no node answering 204 with no body, a node that does not exist 404, a
//! node without addresses 500. The recorded `kubectl logs` commands, run with the real kubectl, end and
//! print as they did. Then the same log through a node's kubelet: what `tailLines`, `sinceSeconds`,
//! `timestamps`, `limitBytes`, `previous` and `follow` make of it.

use std::sync::Arc;

use crate::common;
use crate::tools;

use common::recording::{fixture, recorded_server, send, JSON};
use common::{request_with, with_query, Answer};
use serde_json::{json, Value};
use testkit::pod_logs::{ContainerLog, Kubelet, LogLine};
use testkit::ApiServer;

async fn replay(server: &ApiServer, request: &Value) -> Answer {
    let path = with_query(request["path"].as_str().unwrap(), &request["query"]);
    let accept = request["headers"]["Accept"]
        .as_str()
        .unwrap_or("application/json");
    request_with(
        server.port(),
        request["method"].as_str().unwrap(),
        &path,
        &[("Accept", accept)],
        "",
    )
    .await
    .unwrap()
}

fn assert_answered_as_recorded(what: &str, got: &Answer, want: &Value) {
    assert_eq!(
        u64::from(got.status),
        want["status"].as_u64().unwrap(),
        "{what}: {}",
        got.body
    );
    assert_eq!(
        got.content_type.as_deref(),
        want["headers"]["Content-Type"].as_str(),
        "{what}: Content-Type"
    );
    assert_eq!(got.body, want["body"], "{what}: body");
}

#[tokio::test]
async fn every_recorded_log_request_is_answered_as_the_real_server_answered_it() {
    let server = recorded_server(&fixture("tables.json")).await;
    let logs = fixture("pods-log.json");
    let cases = logs["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 48, "every recorded case");
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let got = replay(&server, &case["request"]).await;
        assert_answered_as_recorded(name, &got, &case["response"]);
    }
    let mut asked = 0;
    for run in logs["kubectl_runs"].as_array().unwrap() {
        for step in run["requests"].as_array().unwrap() {
            if !step["request"]["path"].as_str().unwrap().ends_with("/log") {
                continue;
            }
            asked += 1;
            let got = replay(&server, &step["request"]).await;
            let mut want = step["response"].clone();
            if want.get("same_as_case").is_some() {
                let case = cases.iter().find(|c| c["name"] == want["same_as_case"]).unwrap();
                want = case["response"].clone();
            }
            assert_answered_as_recorded(run["command"].as_str().unwrap(), &got, &want);
        }
    }
    assert!(
        asked >= 8,
        "the log requests of every kubectl logs run that sent one ({asked})"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_logs_ends_and_prints_as_it_did_against_the_real_server() {
    if !tools::kubectl_or_skip("kubectl_logs_ends_and_prints_as_it_did_against_the_real_server") {
        return;
    }
    let server = recorded_server(&fixture("tables.json")).await;
    let cache = tempfile::tempdir().unwrap();
    let runs = fixture("pods-log.json")["kubectl_runs"]
        .as_array()
        .unwrap()
        .clone();
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
        assert_eq!(
            i64::from(out.status.code().unwrap_or(-1)),
            run["exit_code"].as_i64().unwrap(),
            "{command}: {stderr}"
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            run["stdout"].as_str().unwrap(),
            "{command}"
        );
        assert_eq!(stderr.trim(), run["stderr"].as_str().unwrap().trim(), "{command}");
    }
    assert_eq!(runs.len(), 13, "every recorded kubectl logs run");
}

/// A kubelet whose container printed three lines a minute apart, an hour ago, and is still running.
struct Printed;

const PRINTED: [&str; 3] = ["PLAY [all]\n", "TASK [ping]\n", "ok: [node1]\n"];

impl Kubelet for Printed {
    fn container_log(
        &self,
        _pod: &Value,
        _container: &str,
    ) -> Result<ContainerLog, testkit::errors::ApiError> {
        let hour_ago = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(3600);
        let lines = PRINTED
            .iter()
            .enumerate()
            .map(|(i, text)| LogLine {
                time: hour_ago + jiff::SignedDuration::from_secs(60 * i as i64),
                text: text.as_bytes().to_vec().into(),
            })
            .collect();
        let later = LogLine {
            time: jiff::Timestamp::now(),
            text: b"PLAY RECAP\n".to_vec().into(),
        };
        Ok(ContainerLog {
            lines,
            rest: Some(Box::pin(futures::stream::iter([later]))),
        })
    }
}

#[tokio::test]
async fn a_nodes_kubelet_serves_its_pods_log_shaped_by_the_options() {
    let server = ApiServer::start().await.unwrap();
    server.set_kubelet("node-1", Arc::new(Printed));
    let pod = json!({"metadata": {"name": "run"},
        "spec": {"nodeName": "node-1", "containers": [{"name": "ansible", "image": "kubespray"}]}});
    assert_eq!(
        send(&server, "POST", "/api/v1/namespaces/default/pods", JSON, &pod)
            .await
            .status,
        201
    );
    let log = |query: &str| {
        let server = &server;
        let path = format!("/api/v1/namespaces/default/pods/run/log{query}");
        async move {
            let got = send(server, "GET", &path, &[("Accept", "*/*")], &Value::Null).await;
            assert_eq!(got.status, 200, "{path}: {}", got.body);
            assert_eq!(got.content_type.as_deref(), Some("text/plain"));
            got.body.as_str().unwrap_or_default().to_string()
        }
    };
    assert_eq!(log("").await, PRINTED.concat());
    assert_eq!(log("?tailLines=1").await, PRINTED[2]);
    assert_eq!(log("?tailLines=0").await, "");
    assert_eq!(log("?sinceSeconds=3570").await, PRINTED[1..].concat());
    assert_eq!(log("?limitBytes=13").await, "PLAY [all]\nTA");
    assert_eq!(
        log("?follow=true").await,
        [&PRINTED.concat(), "PLAY RECAP\n"].concat()
    );
    assert_eq!(
        log("?follow=true&tailLines=1&sinceSeconds=10").await,
        "PLAY RECAP\n"
    );
    let stamped = log("?timestamps=true&tailLines=1").await;
    let (stamp, line) = stamped.split_once(' ').unwrap();
    assert_eq!(line, PRINTED[2]);
    let stamp: jiff::Timestamp = stamp.parse().unwrap();
    assert!(stamp < jiff::Timestamp::now(), "{stamped}");
    assert_eq!(
        stamped.split_once('.').unwrap().1.find('Z'),
        Some(9),
        "nanoseconds: {stamped}"
    );

    let previous = send(
        &server,
        "GET",
        "/api/v1/namespaces/default/pods/run/log?previous=true",
        &[("Accept", "*/*")],
        &Value::Null,
    )
    .await;
    assert_eq!(previous.status, 400);
    assert_eq!(
        previous.body["message"],
        "previous terminated container \"ansible\" in pod \"run\" not found"
    );
}
