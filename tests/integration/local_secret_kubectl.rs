//! Local mode, as a new user meets it: an operation whose cluster names an ssh Secret that does not
//! exist waits, its status prints the `kubectl create secret` command that fixes it, and that command,
//! run as printed against the embedded API server, lets the operation run.

use crate::local_e2e_support;

use kok::api::Phase;
use local_e2e_support::{
    ansible_or_skip, command, finished, kubectl_or_skip, operation, wait_for, LocalKok, LocalRepo,
};

/// The `kubectl ... =PATH` command in an operation's status message, if it prints one.
fn printed_command(message: &str) -> Option<String> {
    let start = message.find("kubectl ")?;
    let end = start + message[start..].find("=PATH")? + "=PATH".len();
    Some(message[start..end].to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_printed_create_secret_command_works_as_printed_and_the_operation_then_runs() {
    let test = "the_printed_create_secret_command_works_as_printed_and_the_operation_then_runs";
    if !ansible_or_skip(test) || !kubectl_or_skip(test) {
        return;
    }
    let repo = LocalRepo::new();
    std::fs::write(
        repo.path().join("clusters/local/cluster.yml"),
        "sshAuthSecret: local-ssh\n",
    )
    .unwrap();
    repo.commit("the local cluster's ssh key comes from a Secret");
    repo.commit_operations(&[("keyed", "mark.yml", "keyed")]);
    let mut kok = LocalKok::start(&repo);
    let client = kok.client(&repo).await;

    let printed = wait_for(
        "the operation to print how to create its Secret",
        &mut kok,
        || async {
            let status = operation(&client, "keyed").await?.status?;
            (status.phase == Phase::Queued)
                .then(|| printed_command(status.message.as_deref().unwrap_or("")))
                .flatten()
        },
    )
    .await;
    assert!(
        printed.starts_with("kubectl -n kok-system create secret generic local-ssh "),
        "{printed}"
    );
    assert_eq!(repo.runs("keyed"), 0, "the operation waits for its Secret");

    // A throwaway key: the cluster's host is this machine with a local connection, no ssh is made.
    let key = repo.scratch("id_throwaway");
    std::fs::write(
        &key,
        "-----BEGIN OPENSSH PRIVATE KEY-----\nthrowaway\n-----END OPENSSH PRIVATE KEY-----\n",
    )
    .unwrap();
    let printed = printed.replace("PATH", &key.to_string_lossy());
    let words: Vec<&str> = printed.split_whitespace().collect();
    let out = command(words[0])
        .args(&words[1..])
        .env("KUBECONFIG", repo.state_dir().join("kubeconfig"))
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "{printed} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "secret/local-ssh created"
    );

    let op = finished(&mut kok, &client, "keyed").await;
    let status = op.status.unwrap_or_default();
    assert_eq!(status.phase, Phase::Succeeded, "{:?}", status.message);
    assert_eq!(repo.runs("keyed"), 1);
    assert!(
        !kok.log().contains("throwaway"),
        "the key's content never reaches kok's log"
    );
}
