//! Leader election on testkit: two replicas never both lead, a standby takes over after the Lease
//! expires, and a replica that steps down hands over at once.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kok::leader::{self, LeaderConfig, Round};
use kube::Api;

fn config(identity: &str, secs: u64) -> LeaderConfig {
    let mut cfg = LeaderConfig::new("kok-system", identity);
    cfg.lease_duration = Duration::from_secs(secs);
    cfg
}

async fn holder(api: &Api<Lease>) -> Option<String> {
    api.get(leader::LEASE_NAME)
        .await
        .ok()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

#[tokio::test]
async fn a_second_replica_follows_while_the_first_holds_the_lease() -> anyhow::Result<()> {
    let server = testkit::ApiServer::start().await?;
    let api: Api<Lease> = Api::namespaced(server.client(), "kok-system");
    let (a, b) = (config("replica-a", 15), config("replica-b", 15));
    assert_eq!(leader::try_lead(&api, &a).await?, Round::Leading);
    assert_eq!(
        leader::try_lead(&api, &b).await?,
        Round::Following {
            holder: "replica-a".into()
        }
    );
    // Renewing keeps it with a; b still follows.
    assert_eq!(leader::try_lead(&api, &a).await?, Round::Leading);
    assert!(matches!(
        leader::try_lead(&api, &b).await?,
        Round::Following { .. }
    ));
    assert_eq!(holder(&api).await.as_deref(), Some("replica-a"));
    Ok(())
}

#[tokio::test]
async fn a_standby_takes_over_after_the_lease_expires() -> anyhow::Result<()> {
    let server = testkit::ApiServer::start().await?;
    let api: Api<Lease> = Api::namespaced(server.client(), "kok-system");
    let (a, b) = (config("replica-a", 1), config("replica-b", 1));
    assert_eq!(leader::try_lead(&api, &a).await?, Round::Leading);
    // a stops renewing (it crashed); once its 1 s Lease has expired, b takes it.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match leader::try_lead(&api, &b).await? {
            Round::Leading => break,
            Round::Following { .. } => {
                assert!(
                    Instant::now() < deadline,
                    "standby never took over the expired Lease"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    assert_eq!(holder(&api).await.as_deref(), Some("replica-b"));
    let lease = api.get(leader::LEASE_NAME).await?;
    assert_eq!(lease.spec.and_then(|s| s.lease_transitions), Some(1));
    // The old leader, coming back, must not take it back while b renews.
    assert!(matches!(
        leader::try_lead(&api, &a).await?,
        Round::Following { .. }
    ));
    Ok(())
}

#[tokio::test]
async fn stepping_down_hands_the_lease_over_at_once() -> anyhow::Result<()> {
    let server = testkit::ApiServer::start().await?;
    let api: Api<Lease> = Api::namespaced(server.client(), "kok-system");
    let leadership = leader::lead(server.client(), config("replica-a", 30)).await?;
    assert!(*leadership.watch().borrow());
    assert!(matches!(
        leader::try_lead(&api, &config("replica-b", 30)).await?,
        Round::Following { .. }
    ));
    leadership.step_down().await?;
    assert_eq!(holder(&api).await, None);
    assert_eq!(
        leader::try_lead(&api, &config("replica-b", 30)).await?,
        Round::Leading
    );
    Ok(())
}

#[tokio::test]
async fn racing_candidates_for_a_free_lease_elect_exactly_one() -> anyhow::Result<()> {
    let server = testkit::ApiServer::start().await?;
    let api: Api<Lease> = Api::namespaced(server.client(), "kok-system");
    let names: Vec<String> = (0..6).map(|i| format!("replica-{i}")).collect();
    let rounds = futures::future::join_all(names.iter().map(|n| {
        let api = api.clone();
        let cfg = config(n, 15);
        async move { leader::try_lead(&api, &cfg).await }
    }))
    .await;
    let leaders = rounds
        .into_iter()
        .filter(|r| matches!(r, Ok(Round::Leading)))
        .count();
    assert_eq!(leaders, 1, "exactly one candidate must win the Lease");
    Ok(())
}
