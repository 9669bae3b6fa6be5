//! The ansible-vault password Secret (`vaultPasswordSecret`): an operation waits for it, saying how to create
//! it, as for a missing ssh Secret; once it exists the Job mounts it read-only and ansible gets it.

use crate::controller_support;

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};

use controller_support::*;
use kok::api::Phase;
use kok::controller::job::job_name;
use kok::materialize::apply::apply_cluster;

const HOSTS: &str = "all:\n  hosts:\n    node1: {}\n";

#[tokio::test]
async fn an_operation_waits_for_its_vault_password_secret_saying_how_to_create_it() {
    let server = server().await;
    let client = server.client();
    let mut dir = cluster_dir("prod", HOSTS, vec![entry("install", "cluster.yml", &[])], None);
    dir.settings.vault_password_secret = Some("prod-vault".into());
    let d = render(&dir, 1, &[]);
    apply_cluster(&client, NS, &d).await.unwrap();
    let ctl = start(&client, config(4));
    let name = op_name(&d, "install");
    let queued = wait_phase(&client, &name, Phase::Queued).await;
    let message = queued.status.unwrap().message.unwrap();
    assert!(
        message.contains("Secret prod-vault (vaultPasswordSecret) does not exist in namespace kok-system")
            && message.contains(
                "kubectl -n kok-system create secret generic prod-vault --from-file=password=./vault-pass"
            ),
        "{message}"
    );
    assert!(
        jobs(&client).await.is_empty(),
        "no Job before the password exists"
    );

    let password = "vault-secret-9d2f";
    let mut secret = Secret {
        data: Some(BTreeMap::from([(
            "password".to_string(),
            ByteString(password.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    };
    secret.metadata.name = Some("prod-vault".into());
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let running = wait_phase(&client, &name, Phase::Running).await;
    let status = serde_json::to_string(&running.status).unwrap();
    assert!(
        !status.contains(password),
        "the password is in no status: {status}"
    );
    let job: Job = Api::namespaced(client.clone(), NS)
        .get(&job_name(&name))
        .await
        .unwrap();
    let pod = job.spec.unwrap().template.spec.unwrap();
    let vault = pod
        .volumes
        .unwrap()
        .into_iter()
        .find(|v| v.name == "vault")
        .expect("the vault volume");
    let source = vault.secret.unwrap();
    assert_eq!(source.secret_name.as_deref(), Some("prod-vault"));
    assert_eq!(source.default_mode, Some(0o400));
    let script = pod.containers[0].command.as_ref().unwrap().join(" ");
    assert!(
        script.contains("--vault-password-file \"$KOK_VAULT_PASSWORD_FILE\""),
        "{script}"
    );
    ctl.stop().await;
}
