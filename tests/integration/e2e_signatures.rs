//! `kok run --verify-signatures all` end to end: signed commits (SSH and OpenPGP) run, an unsigned
//! commit pushed on top of them never runs anything and gets `kok/sync: error` naming it, and the
//! refusal lasts until a force push removes it from the branch.

use crate::common::signing;
use crate::e2e;
use crate::forge;

use e2e::{git, github_args, meta_cluster, posted_for, wait_for, Kok, Objects, Posted, Remote};
use forge::ForgeServer;
use signing::{Gpg, SshKey};

fn configure(remote: &Remote, config: &[(String, String)]) {
    for (key, value) in config {
        git(&remote.work(), &["config", key, value]);
    }
}

/// Waits for the `kok/sync` status `state` on `sha` at the recording forge.
async fn sync_status(kok: &Kok, forge: &ForgeServer, sha: &str, state: &str) -> Posted {
    wait_for(&format!("kok/sync {state} on {sha}"), Some(kok), || async {
        posted_for(&forge.requests(), sha, "kok/sync")
            .into_iter()
            .find(|p| p.state == state)
    })
    .await
}

/// `kok run` on `remote` with a GitHub sink and `--verify-signatures mode` plus `trust` flags.
fn run_verifying(
    api: &testkit::ApiServer,
    remote: &Remote,
    forge: &ForgeServer,
    mode: &str,
    trust: &[String],
) -> Kok {
    let mut args = github_args(&forge.url());
    args.extend(["--verify-signatures".to_string(), mode.to_string()]);
    args.extend(trust.iter().cloned());
    Kok::run(api, remote, &args)
}

fn ops(ids: &[&str]) -> String {
    ids.iter()
        .map(|id| format!("- id: {id}\n  action: {id}.yml\n"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsigned_commit_on_top_of_signed_ones_never_runs_and_is_refused_until_force_pushed_away() {
    let api = meta_cluster().await;
    let forge = ForgeServer::start().await;
    let remote = Remote::new();
    let keys = remote.scratch("keys");
    let alice = SshKey::new(&keys, "alice");
    let gpg = Gpg::new(&keys);
    let bob = gpg.generate("Bob <bob@example.com>", "never", None);
    let allowed = keys.join("allowed_signers");
    std::fs::write(&allowed, alice.allowed("alice@example.com", "namespaces=\"git\"")).unwrap();
    let trusted = keys.join("trusted");
    gpg.export(&bob, &trusted, true);

    configure(&remote, &alice.git_config());
    remote.cluster("prod-bj");
    remote.write("clusters/prod-bj/operations.yml", &ops(&["install"]));
    let signed = remote.push("prod-bj: install (signed by alice)");

    let trust = [
        "--allowed-signers".to_string(),
        allowed.display().to_string(),
        "--trusted-keys".to_string(),
        trusted.display().to_string(),
    ];
    let kok = run_verifying(&api, &remote, &forge, "all", &trust);
    let objects = &Objects::new(&api);
    wait_for("the install operation of the signed commit", Some(&kok), || {
        objects.operation("prod-bj", "install")
    })
    .await;

    // An unsigned commit on top of the signed one.
    git(&remote.work(), &["config", "commit.gpgsign", "false"]);
    remote.write("clusters/prod-bj/operations.yml", &ops(&["install", "evil"]));
    let unsigned = remote.push("prod-bj: unsigned");
    let refused = sync_status(&kok, &forge, &unsigned, "error").await;
    assert_eq!(refused.state, "error");
    assert!(refused.description.contains(&unsigned[..12]), "{refused:?}");
    assert!(refused.description.contains("unsigned"), "{refused:?}");

    // A signed commit on top does not launder the unsigned one below it.
    configure(&remote, &alice.git_config());
    remote.write(
        "clusters/prod-bj/operations.yml",
        &ops(&["install", "evil", "evil2"]),
    );
    let on_top = remote.push("prod-bj: signed on top of the unsigned one");
    let refused_on_top = sync_status(&kok, &forge, &on_top, "error").await;
    assert_eq!(refused_on_top.state, "error");
    assert!(
        refused_on_top.description.contains(&unsigned[..12]),
        "{refused_on_top:?}"
    );
    assert!(
        refused_on_top.description.contains("force push"),
        "{refused_on_top:?}"
    );

    // The team force-pushes the unsigned commits away; a commit signed with OpenPGP proceeds.
    git(&remote.work(), &["reset", "-q", "--hard", &signed]);
    configure(&remote, &gpg.git_config(&bob, None));
    remote.write("clusters/prod-bj/operations.yml", &ops(&["install", "upgrade"]));
    git(&remote.work(), &["add", "-A"]);
    git(
        &remote.work(),
        &["commit", "-q", "-m", "prod-bj: upgrade (signed by bob)"],
    );
    git(
        &remote.work(),
        &["push", "-q", "--force", "origin", "HEAD:refs/heads/main"],
    );
    let pgp_signed = git(&remote.work(), &["rev-parse", "HEAD"]);
    wait_for(
        "the upgrade operation of the OpenPGP-signed commit",
        Some(&kok),
        || objects.operation("prod-bj", "upgrade"),
    )
    .await;
    sync_status(&kok, &forge, &pgp_signed, "success").await;

    for id in ["evil", "evil2"] {
        assert!(
            objects.operation("prod-bj", id).await.is_none(),
            "operation {id} of a refused commit was materialized"
        );
    }
    let metrics = reqwest::get(kok.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("kok_signature_refusals_total{reason=\"unsigned\"}"),
        "{metrics}"
    );
    let events: kube::Api<k8s_openapi::api::events::v1::Event> = kube::Api::namespaced(api.client(), e2e::NS);
    let refusals: Vec<String> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("CommitRefused"))
        .filter_map(|e| e.note)
        .collect();
    assert!(
        refusals.iter().any(|note| note == &refused.description),
        "the Event says what the status says: {refusals:?}"
    );
    let log = kok.log();
    assert!(log.contains("commit refused"), "{log}");
    assert!(
        log.contains(&refused.description),
        "the log says what the status says:\n{log}"
    );
    assert!(log.contains(&unsigned), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tip_a_signed_commit_on_top_of_an_unsigned_one_proceeds() {
    let api = meta_cluster().await;
    let forge = ForgeServer::start().await;
    let remote = Remote::new();
    let keys = remote.scratch("keys");
    let alice = SshKey::new(&keys, "alice");
    let allowed = keys.join("allowed_signers");
    std::fs::write(&allowed, alice.allowed("alice@example.com", "")).unwrap();
    remote.cluster("prod-bj");
    remote.write("clusters/prod-bj/operations.yml", &ops(&["install"]));
    let unsigned = remote.push("prod-bj: unsigned");
    let trust = ["--allowed-signers".to_string(), allowed.display().to_string()];
    let kok = run_verifying(&api, &remote, &forge, "tip", &trust);
    let refused = sync_status(&kok, &forge, &unsigned, "error").await;
    assert!(refused.description.contains("unsigned"), "{refused:?}");
    let objects = &Objects::new(&api);
    assert!(
        objects.cluster("prod-bj").await.is_none(),
        "nothing of a refused commit is materialized"
    );

    configure(&remote, &alice.git_config());
    remote.write("clusters/prod-bj/operations.yml", &ops(&["install", "upgrade"]));
    let signed = remote.push("prod-bj: upgrade (signed by alice)");
    sync_status(&kok, &forge, &signed, "success").await;
    for id in ["install", "upgrade"] {
        assert!(
            objects.operation("prod-bj", id).await.is_some(),
            "{id} runs from the signed tip"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_refused_for_an_untrusted_key_proceeds_once_the_key_is_trusted_at_the_next_resync() {
    let api = meta_cluster().await;
    let forge = ForgeServer::start().await;
    let remote = Remote::new();
    let keys = remote.scratch("keys");
    let alice = SshKey::new(&keys, "alice");
    let carol = SshKey::new(&keys, "carol");
    let allowed = keys.join("allowed_signers");
    std::fs::write(&allowed, alice.allowed("alice@example.com", "")).unwrap();
    configure(&remote, &carol.git_config());
    remote.cluster("prod-bj");
    remote.write("clusters/prod-bj/operations.yml", &ops(&["install"]));
    let by_carol = remote.push("prod-bj: install (signed by carol, new on the team)");
    let trust = [
        "--allowed-signers".to_string(),
        allowed.display().to_string(),
        "--resync-interval".to_string(),
        "1s".to_string(),
    ];
    let kok = run_verifying(&api, &remote, &forge, "all", &trust);
    let refused = sync_status(&kok, &forge, &by_carol, "error").await;
    assert!(refused.description.contains(&carol.fingerprint()), "{refused:?}");

    // The team adds carol's key (a ConfigMap edit in a cluster); no new push is needed.
    std::fs::write(
        &allowed,
        alice.allowed("alice@example.com", "") + &carol.allowed("carol@example.com", ""),
    )
    .unwrap();
    sync_status(&kok, &forge, &by_carol, "success").await;
    let objects = Objects::new(&api);
    assert!(objects.operation("prod-bj", "install").await.is_some());
}
