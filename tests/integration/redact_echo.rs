//! No secret leaks through an echoing server: a fake forge or git server on loopback answers with the
//! request's credentials in its body, and kok's errors, logs and statuses show `<redacted>` instead.

use crate::e2e;
use crate::forge;

use base64::Engine as _;
use e2e::{github_args, meta_cluster, wait_for, Kok, Remote, TOKEN};
use forge::{ForgeServer, Reply};
use kok::api::{CommitStatus, StatusState};
use kok::report::{Forge, ForgeSink, Sink, Token};
use kok::source::{Credentials, Source, SourceConfig};

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

fn status() -> CommitStatus {
    CommitStatus {
        context: "kok/sync".into(),
        state: StatusState::Success,
        description: "materialized 1 cluster".into(),
        target_url: None,
        run: None,
    }
}

#[tokio::test]
async fn every_forge_sink_scrubs_its_token_from_an_echoed_error_body() {
    for (forge, secret) in [
        (Forge::GitHub, "ghp_echoGithubToken0123456789"),
        (Forge::GitLab, "glpat-echoGitlabToken012345"),
        (Forge::Gitea, "gitea_echoToken0123456789abcd"),
    ] {
        let server = ForgeServer::start().await;
        server.script([Reply::echo(500), Reply::echo(401)]);
        let sink = ForgeSink::new(forge, Some(&server.url()), "acme/infra", &Token::new(secret)).unwrap();
        for attempt in 0..2 {
            let err = sink.deliver(SHA, &status()).await.unwrap_err();
            let text = err.to_string();
            assert!(
                !text.contains(secret),
                "{forge:?} attempt {attempt} leaked the token: {text}"
            );
            assert!(text.contains("boom") && text.contains("<redacted>"), "{text}");
            assert!(
                !format!("{err:?}").contains(secret),
                "{forge:?} Debug leaked the token"
            );
        }
        let echoed = server.requests();
        assert!(
            echoed.iter().all(
                |r| format!("{}{}", r.header("authorization"), r.header("private-token")).contains(secret)
            ),
            "{forge:?}: the server saw the token, so its answer echoed it"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_git_credentials_echoed_by_the_remote_are_scrubbed_from_the_error() {
    let secret = "ghs_echoGitToken0123456789abcdef";
    let header = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{secret}"))
    );
    // The smart-HTTP advertisement of a server that fails with the request's Authorization header.
    let err_line = format!("ERR access denied for {header}\n");
    let body = format!(
        "001e# service=git-upload-pack\n0000{:04x}ERR access denied for {{authorization}}\n",
        4 + err_line.len()
    );
    let server = ForgeServer::start().await;
    server.script([
        Reply::new(401, "").header("www-authenticate", "Basic realm=\"git\""),
        Reply::new(200, &body).header("content-type", "application/x-git-upload-pack-advertisement"),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{secret}\n")).unwrap();
    let mut config = SourceConfig::new(
        format!("{}/acme/infra.git", server.url()),
        "main",
        dir.path().join("cache"),
    );
    config.credentials = Credentials {
        token_file: Some(token_file),
        ..Credentials::default()
    };
    let err = tokio::task::spawn_blocking(move || {
        let mut source = Source::open(config).expect("cache opens");
        source.fetch().expect_err("the remote refuses")
    })
    .await
    .unwrap();
    let requests = server.requests();
    assert_eq!(
        requests.last().map(|r| r.header("authorization")),
        Some(header.clone())
    );
    let text = err.to_string();
    assert!(
        !text.contains(secret) && !text.contains(&header[6..]),
        "leaked: {text}"
    );
    assert!(text.contains("access denied for Basic <redacted>"), "{text}");
    assert!(
        !format!("{err:?}").contains(&header[6..]),
        "Debug leaked the credentials"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kok_run_logs_and_records_a_scrubbed_reason_when_github_echoes_the_token() {
    let api = meta_cluster().await;
    let forge = ForgeServer::start().await;
    forge.script((0..50).map(|_| Reply::echo(500)));
    let remote = Remote::new();
    remote.cluster("prod-bj");
    remote.push("prod-bj");
    let args: Vec<String> = github_args(&forge.url())
        .into_iter()
        .map(|a| {
            if a == "notes,github" {
                "github".to_string()
            } else {
                a
            }
        })
        .collect();
    let kok = Kok::run(&api, &remote, &args);
    wait_for("a failed delivery logged", Some(&kok), || async {
        kok.log().contains("boom Bearer <redacted>").then_some(())
    })
    .await;
    assert!(
        forge
            .requests()
            .iter()
            .any(|r| r.header("authorization").contains(TOKEN)),
        "the forge saw the token"
    );
    let log = kok.log();
    assert!(!log.contains(TOKEN), "kok's log holds the token:\n{log}");
    let config_maps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(api.client(), e2e::NS);
    let stored = serde_json::to_string(&config_maps.list(&Default::default()).await.unwrap().items).unwrap();
    assert!(!stored.contains(TOKEN), "a ConfigMap holds the token");
}
