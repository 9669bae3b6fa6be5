//! TokenReview, SubjectAccessReview and pod logs against a real API server's answers: the cases of
//! `fixtures/realapi/auth-reviews.json` (kube-apiserver v1.36, recorded by `record-auth-and-nodes.py`)
//! are sent to testkit as recorded, with the recording's tokens registered and its RBAC objects
//! stored, and the status and body must be the same.

use std::path::Path;

use serde_json::{json, Value};
use testkit::auth::TokenUser;
use testkit::ApiServer;

fn fixture() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/realapi/auth-reviews.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

async fn post(server: &ApiServer, token: Option<&str>, path: &str, body: &Value) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{}{path}", server.url()))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (
        status,
        serde_json::from_str(&response.text().await.unwrap()).unwrap(),
    )
}

async fn create(server: &ApiServer, path: &str, body: Value) {
    let (status, answer) = post(server, None, path, &body).await;
    assert_eq!(status, 201, "{path}: {answer}");
}

/// A server as the recording had it before its section c: the namespace, the ServiceAccounts whose
/// tokens still authenticate there, the viewer's Role and RoleBinding, and every token registered (the
/// expiring one with its real `exp`, the others as if just issued). Returns the fixture too.
async fn recorded() -> (Value, ApiServer) {
    let fixture = fixture();
    let ns = fixture["namespace"].as_str().unwrap().to_string();
    let server = ApiServer::start().await.unwrap();
    create(&server, "/api/v1/namespaces", json!({"metadata": {"name": ns}})).await;
    for sa in ["kok", "viewer", "expiring"] {
        let path = format!("/api/v1/namespaces/{ns}/serviceaccounts");
        create(&server, &path, json!({"metadata": {"name": sa}})).await;
    }
    for object in fixture["setup"].as_array().unwrap() {
        let plural = format!("{}s", object["kind"].as_str().unwrap().to_lowercase());
        if plural == "clusterrolebindings" {
            continue; // bound after section c
        }
        let path = format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/{plural}");
        create(&server, &path, object.clone()).await;
    }
    for (name, token) in fixture["tokens"].as_object().unwrap() {
        let jwt = token["token"].as_str().unwrap();
        let mut user = TokenUser::from_jwt(jwt).unwrap();
        if name != "expiring" {
            user.expires = None;
        }
        server.add_token(jwt, user);
    }
    (fixture, server)
}

fn caller<'a>(fixture: &'a Value, case: &Value) -> Option<&'a str> {
    let credential = case["request"]["identity"]["credential"].as_str().unwrap();
    let account = credential.strip_prefix("bearer token of ServiceAccount ")?;
    fixture["tokens"][account]["token"].as_str()
}

async fn replay(fixture: &Value, server: &ApiServer, case: &Value) {
    let name = case["case"].as_str().unwrap();
    let request = &case["request"];
    let (status, body) = post(
        server,
        caller(fixture, case),
        request["path"].as_str().unwrap(),
        &request["body"],
    )
    .await;
    let expected = &case["response"];
    assert_eq!(status, expected["status"], "{name}: {body}");
    assert_eq!(body, expected["body"], "{name}");
}

fn cases<'a>(fixture: &'a Value, section: &str) -> Vec<&'a Value> {
    fixture["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["section"] == section)
        .collect()
}

#[tokio::test]
async fn token_and_access_reviews_answer_as_a_real_api_server_does() {
    let (fixture, server) = recorded().await;
    // Section c, before the reviewer is bound: kok's own token may not review. (testkit takes an
    // unregistered or missing token for its administrator, so the anonymous and invalid callers differ.)
    let unbound: Vec<_> = cases(&fixture, "c")
        .into_iter()
        .filter(|c| c["case"].as_str().unwrap().ends_with("-without-auth-delegator"))
        .collect();
    assert_eq!(unbound.len(), 2);
    for case in unbound {
        replay(&fixture, &server, case).await;
    }

    create(
        &server,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        json!({"metadata": {"name": "system:auth-delegator"}, "rules": [
            {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
            {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
        ]}),
    )
    .await;
    let binding = fixture["setup"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "ClusterRoleBinding")
        .unwrap();
    create(
        &server,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        binding.clone(),
    )
    .await;
    // The non-resource case needs the default system:discovery binding a real server has.
    create(
        &server,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        json!({"metadata": {"name": "system:discovery"}, "rules": [
            {"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi",
                "/openapi/*", "/readyz", "/version", "/version/"], "verbs": ["get"]}]}),
    )
    .await;
    create(
        &server,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        json!({"metadata": {"name": "system:discovery"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:discovery"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}]}),
    )
    .await;

    let reviews = [cases(&fixture, "a"), cases(&fixture, "b")].concat();
    assert!(reviews.len() >= 20, "every token and access review case");
    for case in reviews {
        replay(&fixture, &server, case).await;
    }
    assert!(server.requests().count("create", "tokenreviews") >= 10);
}

#[tokio::test]
async fn a_reviewer_whose_own_token_does_not_authenticate_gets_the_real_401() {
    let (fixture, server) = recorded().await;
    let invalid = cases(&fixture, "c")
        .into_iter()
        .find(|c| c["case"] == "tokenreview-with-invalid-caller-token")
        .unwrap();
    let expiring = fixture["tokens"]["expiring"]["token"].as_str().unwrap();
    let (status, body) = post(
        &server,
        Some(expiring),
        "/apis/authentication.k8s.io/v1/tokenreviews",
        &invalid["request"]["body"],
    )
    .await;
    assert_eq!(status, 401);
    assert_eq!(body, invalid["response"]["body"]);
}

#[tokio::test]
async fn a_minted_service_account_token_authenticates_until_it_expires_or_its_account_goes() {
    let server = ApiServer::start().await.unwrap();
    let token = server
        .service_account_token("kok-system", "viewer")
        .await
        .unwrap();
    let review = |token: &str| json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}});
    let (status, body) = post(
        &server,
        None,
        "/apis/authentication.k8s.io/v1/tokenreviews",
        &review(&token),
    )
    .await;
    assert_eq!(status, 201);
    assert_eq!(body["status"]["authenticated"], true, "{body}");
    assert_eq!(
        body["status"]["user"]["username"],
        "system:serviceaccount:kok-system:viewer"
    );

    let other = server.service_account_token("kok-system", "other").await.unwrap();
    server.expire_token(&token);
    let (_, body) = post(
        &server,
        None,
        "/apis/authentication.k8s.io/v1/tokenreviews",
        &review(&token),
    )
    .await;
    assert_eq!(
        body["status"]["error"],
        "[invalid bearer token, service account token has expired]"
    );

    let delete = reqwest::Client::new()
        .delete(format!(
            "{}/api/v1/namespaces/kok-system/serviceaccounts/other",
            server.url()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(delete.status().as_u16(), 200);
    let (_, body) = post(
        &server,
        None,
        "/apis/authentication.k8s.io/v1/tokenreviews",
        &review(&other),
    )
    .await;
    assert_eq!(
        body["status"]["error"],
        "[invalid bearer token, serviceaccounts \"other\" not found]"
    );
}

#[tokio::test]
async fn a_pods_log_is_served_whole_and_followed_until_it_ends() {
    let server = ApiServer::start().await.unwrap();
    let http = reqwest::Client::new();
    let log_url = format!("{}/api/v1/namespaces/kok-system/pods/run-1/log", server.url());
    let missing = http.get(&log_url).send().await.unwrap();
    assert_eq!(missing.status().as_u16(), 404);
    let body: Value = serde_json::from_str(&missing.text().await.unwrap()).unwrap();
    assert_eq!(body["message"], "pods \"run-1\" not found");

    let pod = json!({"metadata": {"name": "run-1", "labels": {"job-name": "kok-run"}},
        "spec": {"containers": [{"name": "ansible", "image": "kubespray"}]}});
    let created = http
        .post(format!("{}/api/v1/namespaces/kok-system/pods", server.url()))
        .header("content-type", "application/json")
        .body(pod.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(created.status().as_u16(), 201);
    server.append_pod_log("kok-system", "run-1", "PLAY [all]\n");
    let whole = http.get(&log_url).send().await.unwrap();
    assert_eq!(whole.headers()["content-type"], "text/plain");
    assert_eq!(whole.text().await.unwrap(), "PLAY [all]\n");

    let mut followed = http.get(format!("{log_url}?follow=true")).send().await.unwrap();
    assert_eq!(&followed.chunk().await.unwrap().unwrap()[..], b"PLAY [all]\n");
    server.append_pod_log("kok-system", "run-1", "TASK [ping]\n");
    assert_eq!(&followed.chunk().await.unwrap().unwrap()[..], b"TASK [ping]\n");
    server.end_pod_log("kok-system", "run-1");
    assert!(
        followed.chunk().await.unwrap().is_none(),
        "the stream ends with the log"
    );
    assert_eq!(server.requests().count("get", "pods/log"), 3);
}
