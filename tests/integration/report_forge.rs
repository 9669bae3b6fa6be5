//! The forge sinks send each forge's documented statuses request and classify its answers.

use crate::forge;

use forge::{ForgeServer, Reply};
use kok::api::{CommitStatus, StatusState};
use kok::report::{DeliveryError, Forge, ForgeSink, Sink, Token};

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
const SECRET: &str = "tok-3f9a-very-secret";

fn status(state: StatusState, description: &str) -> CommitStatus {
    CommitStatus {
        context: "kok/prod-bj/add-node7".into(),
        state,
        description: description.into(),
        target_url: Some("https://logs.example/kok-system/kok-job".into()),
        run: None,
    }
}

#[tokio::test]
async fn github_sink_posts_the_documented_request() {
    let server = ForgeServer::start().await;
    let sink = ForgeSink::new(
        Forge::GitHub,
        Some(&format!("{}/api/v3", server.url())),
        "acme/infra",
        &Token::new(SECRET),
    )
    .unwrap();
    sink.deliver(
        SHA,
        &status(StatusState::Running, "running: scale.yml --limit=node7"),
    )
    .await
    .unwrap();
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, format!("/api/v3/repos/acme/infra/statuses/{SHA}"));
    assert_eq!(r.header("authorization"), format!("Bearer {SECRET}"));
    assert_eq!(r.header("accept"), "application/vnd.github+json");
    assert_eq!(r.header("x-github-api-version"), "2022-11-28");
    assert!(
        r.header("user-agent").starts_with("kok/"),
        "{}",
        r.header("user-agent")
    );
    assert_eq!(r.header("content-type"), "application/json");
    assert_eq!(
        r.json(),
        serde_json::json!({
            "state": "pending",
            "target_url": "https://logs.example/kok-system/kok-job",
            "description": "running: scale.yml --limit=node7",
            "context": "kok/prod-bj/add-node7",
        })
    );
}

#[tokio::test]
async fn gitlab_sink_posts_state_and_name_with_a_private_token_to_the_encoded_project() {
    let server = ForgeServer::start().await;
    let sink = ForgeSink::new(
        Forge::GitLab,
        Some(&server.url()),
        "platform/infra",
        &Token::new(SECRET),
    )
    .unwrap();
    sink.deliver(SHA, &status(StatusState::Running, "running: scale.yml"))
        .await
        .unwrap();
    sink.deliver(SHA, &status(StatusState::Failure, "failed: BackoffLimitExceeded"))
        .await
        .unwrap();
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let r = &requests[0];
    assert_eq!(r.method, "POST");
    assert_eq!(
        r.path,
        format!("/api/v4/projects/platform%2Finfra/statuses/{SHA}")
    );
    assert_eq!(r.header("private-token"), SECRET);
    assert_eq!(r.header("authorization"), "");
    assert_eq!(
        r.json(),
        serde_json::json!({
            "state": "running",
            "name": "kok/prod-bj/add-node7",
            "target_url": "https://logs.example/kok-system/kok-job",
            "description": "running: scale.yml",
        })
    );
    assert_eq!(requests[1].json()["state"], "failed");
}

#[tokio::test]
async fn gitea_sink_posts_with_a_token_authorization() {
    let server = ForgeServer::start().await;
    let sink = ForgeSink::new(
        Forge::Gitea,
        Some(&server.url()),
        "acme/infra",
        &Token::new(SECRET),
    )
    .unwrap();
    let mut s = status(StatusState::Success, "succeeded in 3m12s");
    s.target_url = None;
    sink.deliver(SHA, &s).await.unwrap();
    let r = &server.requests()[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, format!("/api/v1/repos/acme/infra/statuses/{SHA}"));
    assert_eq!(r.header("authorization"), format!("token {SECRET}"));
    assert_eq!(
        r.json(),
        serde_json::json!({"state": "success", "description": "succeeded in 3m12s", "context": "kok/prod-bj/add-node7"})
    );
}

#[tokio::test]
async fn descriptions_are_cut_to_140_on_github_and_255_on_gitlab() {
    let server = ForgeServer::start().await;
    let long = "d".repeat(400);
    let github = ForgeSink::new(Forge::GitHub, Some(&server.url()), "o/r", &Token::new(SECRET)).unwrap();
    let gitlab = ForgeSink::new(Forge::GitLab, Some(&server.url()), "7", &Token::new(SECRET)).unwrap();
    let mut s = status(StatusState::Failure, &long);
    s.context = format!("kok/{}/op", "c".repeat(300));
    github.deliver(SHA, &s).await.unwrap();
    gitlab.deliver(SHA, &s).await.unwrap();
    let requests = server.requests();
    let gh = requests[0].json();
    let gl = requests[1].json();
    assert_eq!(gh["description"].as_str().unwrap().chars().count(), 140);
    assert_eq!(gl["description"].as_str().unwrap().chars().count(), 255);
    assert_eq!(gh["context"].as_str().unwrap().chars().count(), 255);
    assert_eq!(gl["name"].as_str().unwrap().chars().count(), 255);
    assert_eq!(gh["context"], gl["name"]);
}

#[tokio::test]
async fn server_errors_and_429_are_retryable_with_retry_after_and_other_4xx_permanent() {
    let server = ForgeServer::start().await;
    server.script([
        Reply::new(502, "bad gateway"),
        Reply::new(429, "slow down").header("retry-after", "7"),
        Reply::new(422, r#"{"message":"Validation Failed"}"#),
    ]);
    let sink = ForgeSink::new(Forge::GitHub, Some(&server.url()), "o/r", &Token::new(SECRET)).unwrap();
    let s = status(StatusState::Pending, "queued");
    let e = sink.deliver(SHA, &s).await.unwrap_err();
    assert!(e.is_retryable(), "{e}");
    assert_eq!(e.retry_after(), None);
    let e = sink.deliver(SHA, &s).await.unwrap_err();
    assert!(e.is_retryable(), "{e}");
    assert_eq!(e.retry_after(), Some(std::time::Duration::from_secs(7)));
    let e = sink.deliver(SHA, &s).await.unwrap_err();
    assert!(matches!(e, DeliveryError::Permanent { .. }), "{e}");
    assert!(e.to_string().contains("Validation Failed"), "{e}");
}

#[tokio::test]
async fn github_rate_limit_403_is_retryable() {
    let server = ForgeServer::start().await;
    server.script([Reply::new(403, "rate limited").header("retry-after", "3")]);
    let sink = ForgeSink::new(Forge::GitHub, Some(&server.url()), "o/r", &Token::new(SECRET)).unwrap();
    let e = sink
        .deliver(SHA, &status(StatusState::Pending, "queued"))
        .await
        .unwrap_err();
    assert_eq!(e.retry_after(), Some(std::time::Duration::from_secs(3)), "{e}");
}

#[tokio::test]
async fn gitlab_same_state_refusal_counts_as_delivered_but_other_refusals_do_not() {
    let server = ForgeServer::start().await;
    server.script([
        Reply::new(400, r#"{"message":"Cannot transition status via :run from :running (Reason(s): Status cannot transition via \"run\")"}"#),
        Reply::new(400, r#"{"message":"Cannot transition status via :run from :success (Reason(s): Status cannot transition via \"run\")"}"#),
    ]);
    let sink = ForgeSink::new(Forge::GitLab, Some(&server.url()), "7", &Token::new(SECRET)).unwrap();
    let running = status(StatusState::Running, "running: scale.yml");
    sink.deliver(SHA, &running).await.unwrap();
    let e = sink.deliver(SHA, &running).await.unwrap_err();
    assert!(matches!(e, DeliveryError::Permanent { .. }), "{e}");
}

#[tokio::test]
async fn the_token_never_appears_in_errors_or_debug_output() {
    let server = ForgeServer::start().await;
    server.script([Reply::new(401, r#"{"message":"Bad credentials"}"#)]);
    let token = Token::new(SECRET);
    let sink = ForgeSink::new(Forge::GitHub, Some(&server.url()), "o/r", &token).unwrap();
    let e = sink
        .deliver(SHA, &status(StatusState::Pending, "queued"))
        .await
        .unwrap_err();
    for text in [
        e.to_string(),
        format!("{e:?}"),
        format!("{sink:?}"),
        format!("{token:?}"),
        format!("{token}"),
    ] {
        assert!(!text.contains(SECRET), "token leaked in: {text}");
    }
    assert!(e.to_string().contains("401"), "{e}");

    // A connection that fails is retryable and names the request, not the token.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let sink = ForgeSink::new(Forge::Gitea, Some(&format!("http://{closed}")), "o/r", &token).unwrap();
    let e = sink
        .deliver(SHA, &status(StatusState::Pending, "queued"))
        .await
        .unwrap_err();
    assert!(e.is_retryable(), "{e}");
    assert!(!format!("{e} {e:?}").contains(SECRET));
}

/// A `MakeWriter` collecting log output in memory.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What a forge sink logs, at `level`, for a status GitHub refuses once (401) and then takes.
async fn delivery_logs(level: tracing::Level) -> String {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let server = ForgeServer::start().await;
    server.script([
        Reply::new(401, r#"{"message":"Bad credentials"}"#),
        Reply::new(201, "{}"),
    ]);
    let sink = ForgeSink::new(Forge::GitHub, Some(&server.url()), "o/r", &Token::new(SECRET)).unwrap();
    let metrics = kok::metrics::Metrics::new();
    let sinks = kok::report::Sinks::new(vec![std::sync::Arc::new(sink)], metrics);
    let s = status(StatusState::Pending, "queued");
    assert!(sinks.deliver(SHA, &s).await.is_err());
    sinks.deliver(SHA, &s).await.unwrap();
    assert!(!format!("{sinks:?}").contains(SECRET));
    let logs = captured.0.lock().unwrap().clone();
    String::from_utf8(logs).unwrap()
}

#[tokio::test]
async fn the_token_never_appears_in_delivery_logs() {
    let logs = delivery_logs(tracing::Level::DEBUG).await;
    assert!(logs.contains("commit status not delivered"), "{logs}");
    assert!(logs.contains("commit status delivered"), "{logs}");
    assert!(!logs.contains(SECRET), "token leaked in logs:\n{logs}");
}

/// kok's default level is info: a refused status is logged, a delivered one only at debug (a fleet's
/// first pass delivers hundreds of thousands; the sink and `kok_status_deliveries_total` show them).
#[tokio::test]
async fn at_info_a_refused_status_is_logged_and_a_delivered_one_is_not() {
    let logs = delivery_logs(tracing::Level::INFO).await;
    assert!(logs.contains("WARN"), "{logs}");
    assert!(logs.contains("commit status not delivered"), "{logs}");
    assert!(!logs.contains("commit status delivered"), "{logs}");
    assert!(!logs.contains(SECRET), "token leaked in logs:\n{logs}");
}

#[tokio::test]
async fn with_several_sinks_a_retry_only_goes_to_the_sinks_that_failed() {
    let github = ForgeServer::start().await;
    let gitea = ForgeServer::start().await;
    gitea.script([Reply::new(503, "maintenance")]);
    let metrics = kok::metrics::Metrics::new();
    let sinks = kok::report::Sinks::new(
        vec![
            std::sync::Arc::new(
                ForgeSink::new(Forge::GitHub, Some(&github.url()), "o/r", &Token::new("a")).unwrap(),
            ),
            std::sync::Arc::new(
                ForgeSink::new(Forge::Gitea, Some(&gitea.url()), "o/r", &Token::new("b")).unwrap(),
            ),
        ],
        metrics.clone(),
    );
    let s = status(StatusState::Success, "succeeded in 5s");
    let err = sinks.deliver(SHA, &s).await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    sinks.deliver(SHA, &s).await.unwrap();
    assert_eq!(
        github.requests().len(),
        1,
        "the sink that took it is not sent it again"
    );
    assert_eq!(gitea.requests().len(), 2);
    assert_eq!(metrics.status_deliveries("gitea", "retry"), 1);
    assert_eq!(metrics.status_deliveries("gitea", "delivered"), 1);
}
