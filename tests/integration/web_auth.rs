//! Who may look at the web view in a meta-cluster: a Kubernetes token checked against testkit's
//! TokenReview and SubjectAccessReview (RBAC from deploy/ and from Roles the tests create), 401 and 403
//! with the view's headers, the login form's cookie, the cached answers, and `kok run --web` against
//! testkit serving every page, with the run's log read from its pod and redacted.

use crate::e2e;

use std::path::Path;
use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kok::api::{ClusterOperation, Phase};
use kok::web::auth::{self, Gate};
use kok::web::logs::LogSource;
use kok::web::view::Snapshot;
use kok::web::{Web, CONTENT_SECURITY_POLICY};
use kube::api::{Api, PostParams};

use crate::common::web;
use e2e::{meta_cluster, wait_for, Kok, KokOptions, Objects, Remote, NS};
use web::{operation, OP};

const LOG: &str = "PLAY [all]\nTASK [ping]\n";

/// Creates every object of a YAML file (RBAC kinds only) on `api`, as `kubectl create -f` would.
async fn create_from(api: &testkit::ApiServer, path: &Path) {
    use serde::Deserialize as _;
    let text = std::fs::read_to_string(path).unwrap();
    let http = reqwest::Client::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let doc = serde_json::to_value(serde_yaml::Value::deserialize(doc).unwrap()).unwrap();
        let kind = doc["kind"].as_str().unwrap();
        let scope = match kind {
            "Role" | "RoleBinding" => format!("namespaces/{NS}/"),
            "ClusterRole" | "ClusterRoleBinding" => String::new(),
            other => panic!("{}: unexpected kind {other}", path.display()),
        };
        let url = format!(
            "{}/apis/rbac.authorization.k8s.io/v1/{scope}{}s",
            api.url(),
            kind.to_lowercase()
        );
        let r = http.post(url).json(&doc).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 201, "{}: {kind}", path.display());
    }
}

/// kok's RBAC from deploy/ (its Role and the token reviewer ClusterRole), and viewers:
/// `viewer` may get clusteroperations and pods/log, `looker` only clusteroperations, `outsider` nothing.
/// Returns kok's token and the three viewers' tokens.
async fn identities(api: &testkit::ApiServer) -> (String, [String; 3]) {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    for file in ["role.yaml", "rolebinding.yaml", "token-reviewer.yaml"] {
        create_from(api, &deploy.join(file)).await;
    }
    let grants = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: kok-viewer, namespace: {NS}}}\n\
         rules: [{{apiGroups: [kok.dev], resources: [clusteroperations], verbs: [get, list, watch]}}]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: kok-log-reader, namespace: {NS}}}\n\
         rules: [{{apiGroups: [''], resources: [pods/log], verbs: [get]}}]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: kok-viewers, namespace: {NS}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: kok-viewer}}\n\
         subjects: [{{kind: ServiceAccount, name: viewer, namespace: {NS}}}, {{kind: ServiceAccount, name: looker, namespace: {NS}}}]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: kok-log-readers, namespace: {NS}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: kok-log-reader}}\n\
         subjects: [{{kind: ServiceAccount, name: viewer, namespace: {NS}}}]\n"
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("viewers.yaml"), grants).unwrap();
    create_from(api, &dir.path().join("viewers.yaml")).await;
    let token = |name: &'static str| api.service_account_token(NS, name);
    let kok = token("kok").await.unwrap();
    let viewers = [
        token("viewer").await.unwrap(),
        token("looker").await.unwrap(),
        token("outsider").await.unwrap(),
    ];
    (kok, viewers)
}

/// A client of `api` that sends `token`, as kok's kubeconfig would.
fn client_with(api: &testkit::ApiServer, token: &str) -> kube::Client {
    let mut config = kube::Config::new(api.url().parse().unwrap());
    config.auth_info.token = Some(token.to_string().into());
    kube::Client::try_from(config).unwrap()
}

struct FixedLog;

impl LogSource for FixedLog {
    fn read(&self, _op: &ClusterOperation) -> BoxFuture<'static, Option<String>> {
        Box::pin(async { Some(LOG.to_string()) })
    }
}

/// The protected view of one finished operation on loopback, its gate asking `api` as kok (with
/// `kok_token`); stops when the sender drops.
async fn serve(api: &testkit::ApiServer, kok_token: &str) -> (String, tokio::sync::watch::Sender<bool>) {
    let gate = Gate::new(client_with(api, kok_token), NS);
    web::serve(|stopping| {
        let fleet = Snapshot {
            operations: vec![operation(Phase::Succeeded)],
            ..Snapshot::default()
        };
        let view = Web::new(Arc::new(fleet), Arc::new(FixedLog), stopping);
        auth::protect(kok::web::router(view), gate)
    })
    .await
}

fn assert_view_headers(response: &reqwest::Response, what: &str) {
    let headers = response.headers();
    assert_eq!(
        headers["content-security-policy"], CONTENT_SECURITY_POLICY,
        "{what}"
    );
    assert_eq!(headers["x-content-type-options"], "nosniff", "{what}");
}

async fn get(url: &str, token: Option<&str>, accept: &str) -> reqwest::Response {
    let mut request = reqwest::Client::new().get(url).header("accept", accept);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap()
}

#[tokio::test]
async fn without_a_valid_token_the_view_answers_401_and_a_browser_gets_the_login_link() {
    let api = meta_cluster().await;
    let (kok, _) = identities(&api).await;
    let (base, _stop) = serve(&api, &kok).await;

    let plain = get(&format!("{base}/"), None, "*/*").await;
    assert_eq!(plain.status().as_u16(), 401);
    assert_view_headers(&plain, "401");
    assert_eq!(plain.headers()["www-authenticate"], "Bearer realm=\"kok\"");

    let browser = get(&format!("{base}/clusters/prod"), None, "text/html,*/*").await;
    assert_eq!(browser.status().as_u16(), 401);
    assert_view_headers(&browser, "401 for a browser");
    assert_eq!(browser.headers()["content-type"], "text/html; charset=utf-8");
    let html = browser.text().await.unwrap();
    assert!(html.contains(r#"<a href="/login">"#), "{html}");
    assert!(!html.contains("<script"), "{html}");

    for token in ["not-a-real-token", "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"] {
        let r = get(&format!("{base}/"), Some(token), "*/*").await;
        assert_eq!(r.status().as_u16(), 401, "{token}");
    }
    let expired = api.service_account_token(NS, "viewer").await.unwrap();
    api.expire_token(&expired);
    assert_eq!(
        get(&format!("{base}/"), Some(&expired), "*/*")
            .await
            .status()
            .as_u16(),
        401
    );
    let assets = get(&format!("{base}/assets/kok.css"), None, "*/*").await;
    assert_eq!(
        assets.status().as_u16(),
        200,
        "the login form's stylesheet needs no token"
    );
}

#[tokio::test]
async fn a_user_who_may_not_get_clusteroperations_is_403_and_one_who_may_sees_every_page() {
    let api = meta_cluster().await;
    let (kok, [viewer, _, outsider]) = identities(&api).await;
    let (base, _stop) = serve(&api, &kok).await;

    let denied = get(&format!("{base}/"), Some(&outsider), "*/*").await;
    assert_eq!(denied.status().as_u16(), 403);
    assert_view_headers(&denied, "403");
    let text = denied.text().await.unwrap();
    assert!(
        text.contains("system:serviceaccount:kok-system:outsider may not get clusteroperations.kok.dev"),
        "{text}"
    );
    let page = get(&format!("{base}/operations/{OP}"), Some(&outsider), "text/html").await;
    assert_eq!(page.status().as_u16(), 403);

    for path in [
        "/",
        "/clusters/prod",
        &format!("/operations/{OP}"),
        "/commits/0123456",
    ] {
        let r = get(&format!("{base}{path}"), Some(&viewer), "text/html").await;
        assert_eq!(r.status().as_u16(), 200, "{path}");
        assert_view_headers(&r, path);
    }
    let post = reqwest::Client::new()
        .post(format!("{base}/"))
        .bearer_auth(&viewer)
        .send()
        .await
        .unwrap();
    assert_eq!(post.status().as_u16(), 405, "the pages stay GET only");
}

#[tokio::test]
async fn a_viewer_without_pods_log_sees_a_run_without_its_log_and_not_the_live_log() {
    let api = meta_cluster().await;
    let (kok, [viewer, looker, _]) = identities(&api).await;
    let (base, _stop) = serve(&api, &kok).await;

    let full = get(&format!("{base}/operations/{OP}"), Some(&viewer), "text/html").await;
    assert!(full.text().await.unwrap().contains("TASK [ping]"));
    let without = get(&format!("{base}/operations/{OP}"), Some(&looker), "text/html").await;
    assert_eq!(without.status().as_u16(), 200);
    let html = without.text().await.unwrap();
    assert!(!html.contains("TASK [ping]"), "{html}");

    let live = get(&format!("{base}/operations/{OP}/log"), Some(&looker), "*/*").await;
    assert_eq!(live.status().as_u16(), 403);
    assert!(live.text().await.unwrap().contains("may not get pods/log"));
}

#[tokio::test]
async fn the_login_form_checks_the_token_and_sets_an_http_only_secure_strict_cookie() {
    let api = meta_cluster().await;
    let (kok, [viewer, _, outsider]) = identities(&api).await;
    let (base, _stop) = serve(&api, &kok).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    let form = http.get(format!("{base}/login")).send().await.unwrap();
    assert_eq!(form.status().as_u16(), 200);
    assert_view_headers(&form, "the login form");
    let html = form.text().await.unwrap();
    assert!(html.contains(r#"<form method="post" action="/login">"#), "{html}");

    let login = |token: &str| {
        http.post(format!("{base}/login"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={token}"))
            .send()
    };
    let refused = login("not-a-real-token").await.unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    assert!(!refused.headers().contains_key("set-cookie"));
    let forbidden = login(&outsider).await.unwrap();
    assert_eq!(forbidden.status().as_u16(), 403);
    assert!(!forbidden.headers().contains_key("set-cookie"));

    let signed_in = login(&viewer).await.unwrap();
    assert_eq!(signed_in.status().as_u16(), 303);
    assert_eq!(signed_in.headers()["location"], "/");
    assert_view_headers(&signed_in, "the login answer");
    let cookie = signed_in.headers()["set-cookie"].to_str().unwrap().to_string();
    let attributes: Vec<&str> = cookie.split("; ").collect();
    assert_eq!(attributes[0], format!("{}={viewer}", auth::COOKIE));
    for attribute in ["HttpOnly", "Secure", "SameSite=Strict", "Path=/"] {
        assert!(attributes.contains(&attribute), "{cookie}");
    }

    let page = http
        .get(format!("{base}/clusters/prod"))
        .header("cookie", attributes[0])
        .send()
        .await
        .unwrap();
    assert_eq!(page.status().as_u16(), 200);
}

#[tokio::test]
async fn the_answer_about_a_token_is_cached_so_the_next_requests_ask_the_api_server_nothing() {
    let api = meta_cluster().await;
    let (kok, [viewer, _, _]) = identities(&api).await;
    let (base, _stop) = serve(&api, &kok).await;
    let requests = api.requests();

    assert_eq!(
        get(&format!("{base}/"), Some(&viewer), "*/*")
            .await
            .status()
            .as_u16(),
        200
    );
    let reviews = || {
        (
            requests.count("create", "tokenreviews"),
            requests.count("create", "subjectaccessreviews"),
        )
    };
    assert_eq!(
        reviews(),
        (1, 2),
        "one TokenReview, one access review for the pages and one for logs"
    );
    for path in ["/", "/clusters/prod", "/commits/0123456"] {
        assert_eq!(
            get(&format!("{base}{path}"), Some(&viewer), "*/*")
                .await
                .status()
                .as_u16(),
            200
        );
    }
    assert_eq!(reviews(), (1, 2), "the cached answer was used");
    let garbage = "not-a-real-token";
    for _ in 0..2 {
        assert_eq!(
            get(&format!("{base}/"), Some(garbage), "*/*")
                .await
                .status()
                .as_u16(),
            401
        );
    }
    assert_eq!(
        reviews(),
        (2, 2),
        "a token that does not authenticate is asked about once too"
    );
}

#[tokio::test]
async fn kok_cannot_check_tokens_without_the_reviewer_binding_and_says_so_with_503() {
    let api = meta_cluster().await;
    let (_, [viewer, _, _]) = identities(&api).await;
    // A ServiceAccount with kok's namespaced Role but not the token reviewer ClusterRole.
    let unbound = api.service_account_token(NS, "kok-unbound").await.unwrap();
    let (base, _stop) = serve(&api, &unbound).await;
    let r = get(&format!("{base}/"), Some(&viewer), "*/*").await;
    assert_eq!(r.status().as_u16(), 503);
    assert_view_headers(&r, "503");
    let text = r.text().await.unwrap();
    assert!(!text.contains(&viewer), "{text}");
}

/// A kubeconfig for `api` whose user sends `token`.
fn kubeconfig_with(api: &testkit::ApiServer, token: &str, dir: &Path) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    let text = testkit::kubeconfig_yaml(&api.url()).replace("testkit-dummy-token", token);
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_mode_kok_with_web_serves_every_page_to_a_viewer_with_the_log_of_the_runs_pod_redacted() {
    let api = meta_cluster().await;
    let (kok_token, [viewer, _, outsider]) = identities(&api).await;
    let remote = Remote::new();
    remote.cluster("prod");
    remote.write(
        "clusters/prod/operations.yml",
        "- id: install\n  action: cluster.yml\n",
    );
    let sha = remote.push("prod: install");
    let secret = "whsec-Sup3rSecretHookValue";
    let scratch = remote.scratch("web");
    std::fs::write(scratch.join("hook-secret"), secret).unwrap();
    let kok = Kok::start(&KokOptions {
        kubeconfig: kubeconfig_with(&api, &kok_token, &scratch),
        repo: remote.bare(),
        cache: remote.scratch("cache"),
        log: remote.scratch("logs").join("kok.log"),
        args: ["--web", "--status", "notes", "--webhook-secret-file"]
            .iter()
            .map(|s| s.to_string())
            .chain([scratch.join("hook-secret").display().to_string()])
            .collect(),
        env: Vec::new(),
    });
    let objects = &Objects::new(&api);
    let job = wait_for("the install Job", Some(&kok), || {
        objects.job_of("prod", "install")
    })
    .await;
    let job = job.metadata.name.unwrap();
    api.start_job(NS, &job).await.unwrap();
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{job}-x7k2p"), "labels": {"job-name": job}},
        "spec": {"containers": [{"name": "ansible", "image": "kubespray"}]},
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(api.client(), NS);
    pods.create(&PostParams::default(), &pod).await.unwrap();
    api.append_pod_log(
        NS,
        &format!("{job}-x7k2p"),
        &format!("PLAY [all]\nTASK [echo the hook secret] {secret}\n"),
    );
    let op = objects.operation("prod", "install").await.unwrap();
    let op_name = op.metadata.name.unwrap();

    let paths = [
        "/".to_string(),
        "/clusters/prod".into(),
        format!("/operations/{op_name}"),
        format!("/commits/{sha}"),
    ];
    let denied = get(&kok.url("/"), None, "text/html").await;
    assert_eq!(denied.status().as_u16(), 401, "no token, no view");
    assert_eq!(
        get(&kok.url("/"), Some(&outsider), "*/*").await.status().as_u16(),
        403
    );
    let operation_page = wait_for("the operation's page with its pod's log", Some(&kok), || async {
        let page = get(&kok.url(&paths[2]), Some(&viewer), "text/html").await;
        let html = page.text().await.ok()?;
        html.contains("TASK [echo the hook secret]").then_some(html)
    })
    .await;
    assert!(!operation_page.contains(secret), "the log is redacted");
    assert!(operation_page.contains(kok::redact::REDACTED) || operation_page.contains("&lt;redacted&gt;"));
    for path in &paths {
        let r = get(&kok.url(path), Some(&viewer), "text/html").await;
        assert_eq!(r.status().as_u16(), 200, "{path}");
        assert_view_headers(&r, path);
        let html = r.text().await.unwrap();
        assert!(html.starts_with("<!doctype html>"), "{path}: {html}");
        if path == "/" || path == "/clusters/prod" {
            assert!(html.contains("prod"), "{path}: {html}");
        }
    }
    assert!(api.requests().count("get", "pods/log") >= 1);

    // While the run goes on, lines the pod prints reach an open page's live log, from where it ends.
    let stream = operation_page
        .split_once(r#"data-stream=""#)
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(url, _)| url.to_string())
        .unwrap_or_else(|| panic!("a running operation's page streams its log: {operation_page}"));
    let mut live = get(&kok.url(&stream), Some(&viewer), "text/event-stream").await;
    assert_eq!(live.status().as_u16(), 200);
    api.append_pod_log(NS, &format!("{job}-x7k2p"), "TASK [kubernetes : join nodes]\n");
    let mut seen = String::new();
    let read = async {
        while !seen.contains("TASK [kubernetes : join nodes]") {
            match live.chunk().await.unwrap() {
                Some(chunk) => seen.push_str(&String::from_utf8_lossy(&chunk)),
                None => panic!("the live log ended early; it sent:\n{seen}"),
            }
        }
    };
    if tokio::time::timeout(e2e::WAIT, read).await.is_err() {
        panic!("the new line did not arrive; kok's log:\n{}", kok.log());
    }
    assert!(
        !seen.contains("PLAY [all]"),
        "lines before ?from= are not sent again: {seen}"
    );
    let log = kok.log();
    assert!(
        !log.contains(&viewer) && !log.contains(&outsider),
        "no token in kok's log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_prints_the_secrets_its_job_mounts_shows_them_redacted_in_its_log_status_events_and_notes()
{
    use k8s_openapi::api::core::v1::Secret;
    use k8s_openapi::api::events::v1::Event;
    use k8s_openapi::ByteString;
    use kube::api::{ListParams, Patch, PatchParams};

    const VAULT_PASSWORD: &str = "vault-Pw-e2e-41b7";
    const KEY_LINE: &str = "b3BlbnNzaC1rZXktdjEAAAAACmFlczI1Ni1jdHI";
    const CREDENTIAL: &str = "kubeadm-cert-key-e2e-99a1";
    let leaked = |text: &str| {
        [VAULT_PASSWORD, KEY_LINE, CREDENTIAL]
            .into_iter()
            .find(|s| text.contains(s))
    };

    let api = meta_cluster().await;
    let (kok_token, [viewer, _, _]) = identities(&api).await;
    let secrets: Api<Secret> = Api::namespaced(api.client(), NS);
    let key = format!("-----BEGIN OPENSSH PRIVATE KEY-----\n{KEY_LINE}\n-----END OPENSSH PRIVATE KEY-----\n");
    for (name, k, value) in [
        ("prod-ssh", "ssh-privatekey", key),
        ("prod-vault", "password", VAULT_PASSWORD.into()),
    ] {
        let mut secret = Secret {
            data: Some([(k.to_string(), ByteString(value.into_bytes()))].into()),
            ..Secret::default()
        };
        secret.metadata.name = Some(name.into());
        secrets.create(&PostParams::default(), &secret).await.unwrap();
    }
    let remote = Remote::new();
    remote.cluster("prod");
    remote.write(
        "clusters/prod/cluster.yml",
        "sshAuthSecret: prod-ssh\nvaultPasswordSecret: prod-vault\n",
    );
    remote.write(
        "clusters/prod/operations.yml",
        "- id: install\n  action: cluster.yml\n",
    );
    let sha = remote.push("prod: install");
    let scratch = remote.scratch("web");
    let kok = Kok::start(&KokOptions {
        kubeconfig: kubeconfig_with(&api, &kok_token, &scratch),
        repo: remote.bare(),
        cache: remote.scratch("cache"),
        log: remote.scratch("logs").join("kok.log"),
        args: ["--web", "--status", "notes"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        env: Vec::new(),
    });
    let objects = &Objects::new(&api);
    let job = wait_for("the install Job", Some(&kok), || {
        objects.job_of("prod", "install")
    })
    .await;
    let job = job.metadata.name.unwrap();
    api.start_job(NS, &job).await.unwrap();
    let pod_name = format!("{job}-q8v4n");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": pod_name, "labels": {"job-name": job}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "ansible", "image": "kubespray"}]},
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(api.client(), NS);
    pods.create(&PostParams::default(), &pod).await.unwrap();
    api.append_pod_log(
        NS,
        &pod_name,
        &format!("TASK [debug]\n{KEY_LINE}\nvault: {VAULT_PASSWORD}\ncreds: {CREDENTIAL}\n"),
    );
    // The run saves a credential it generated, then fails on a task that prints all three.
    let encoded = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(CREDENTIAL)
    };
    let saved = serde_json::json!({"data": {"kubeadm_certificate_key.creds": encoded}});
    secrets
        .patch("prod-credentials", &PatchParams::default(), &Patch::Merge(&saved))
        .await
        .unwrap();
    let message = serde_json::json!({
        "hosts": {"node1": {"ok": 2, "changed": 0, "failed": 1, "unreachable": 0, "skipped": 0}},
        "total": {"ok": 2, "changed": 0, "failed": 1, "unreachable": 0, "skipped": 0}, "hostCount": 1,
        "failure": {"step": "action: cluster.yml", "play": "all", "task": "debug", "host": "node1",
            "message": format!("vault {VAULT_PASSWORD}, key {KEY_LINE}, credential {CREDENTIAL}")},
    });
    let status = serde_json::json!({"status": {"phase": "Failed",
        "containerStatuses": [{"name": "ansible", "image": "kubespray", "imageID": "", "ready": false,
            "restartCount": 0, "state": {"terminated": {"exitCode": 2, "message": message.to_string()}}}]}});
    pods.patch_status(&pod_name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    api.fail_job(
        NS,
        &job,
        "BackoffLimitExceeded",
        "Job has reached the specified backoff limit",
    )
    .await
    .unwrap();

    let failed = wait_for("the install to fail", Some(&kok), || async {
        objects
            .operation("prod", "install")
            .await
            .filter(|o| o.status.as_ref().is_some_and(|s| s.phase == Phase::Failed))
    })
    .await;
    let text = serde_json::to_string(&failed.status).unwrap();
    assert_eq!(leaked(&text), None, "the status holds no secret: {text}");
    assert!(
        text.contains("vault <redacted>, key <redacted>, credential <redacted>"),
        "{text}"
    );
    let note = wait_for("the failure's note", Some(&kok), || async {
        let note = remote.note(&sha);
        note.contains("failure").then_some(note)
    })
    .await;
    assert_eq!(leaked(&note), None, "the note holds no secret: {note}");
    assert!(note.contains("<redacted>"), "{note}");
    let events: Api<Event> = Api::namespaced(api.client(), NS);
    let notes: Vec<String> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.note)
        .collect();
    assert!(notes.iter().any(|n| n.contains("<redacted>")), "{notes:?}");
    assert_eq!(
        leaked(&notes.join("\n")),
        None,
        "no Event holds a secret: {notes:?}"
    );

    let op_name = failed.metadata.name.unwrap();
    let page = get(
        &kok.url(&format!("/operations/{op_name}")),
        Some(&viewer),
        "text/html",
    )
    .await;
    let html = page.text().await.unwrap();
    assert!(
        html.contains("TASK [debug]"),
        "the page shows the run's log: {html}"
    );
    assert_eq!(leaked(&html), None, "the page holds no secret: {html}");
    assert!(html.contains("creds: &lt;redacted&gt;"), "{html}");
    assert_eq!(leaked(&kok.log()), None, "kok's own log holds no secret");
}
