//! Local mode end to end: a scale-up whose playbook succeeds but whose node never joins ends Failed,
//! naming the node. Real ansible runs the playbook, which leaves the new cluster's admin.conf (the
//! kubeconfig of a testkit playing the workload cluster, where only node1 exists).

use crate::local_e2e_support;

use k8s_openapi::api::core::v1::Node;
use kok::api::{Phase, VerificationState};
use kube::api::{Api, Patch, PatchParams, PostParams};
use local_e2e_support::{ansible_or_skip, finished, note_line, LocalKok, LocalRepo};
use serde_json::json;

/// node1 runs the control plane; node7 is the node being added. The play runs on localhost only.
const HOSTS: &str = "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n      \
                     ansible_python_interpreter: \"{{ ansible_playbook_python }}\"\n    node1:\n    node7:\n  \
                     children:\n    kube_control_plane:\n      hosts:\n        node1:\n    kube_node:\n      hosts:\n        \
                     node7:\n";

#[tokio::test(flavor = "multi_thread")]
async fn a_scale_up_whose_node_never_joins_fails_naming_the_node_though_the_playbook_succeeded() {
    if !ansible_or_skip("a_scale_up_whose_node_never_joins_fails") {
        return;
    }
    let workload = testkit::ApiServer::start().await.unwrap();
    let nodes: Api<Node> = Api::all(workload.client());
    let mut node1 = Node::default();
    node1.metadata.name = Some("node1".into());
    nodes.create(&PostParams::default(), &node1).await.unwrap();
    let ready =
        json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}});
    nodes
        .patch_status("node1", &PatchParams::default(), &Patch::Merge(&ready))
        .await
        .unwrap();

    let repo = LocalRepo::new();
    let playbook = format!(
        "- name: Scale\n  hosts: localhost\n  become: false\n  gather_facts: false\n  tasks:\n    \
         - name: The cluster's kubeconfig, as kubeconfig_localhost leaves it\n      ansible.builtin.copy:\n        \
         dest: \"{{{{ inventory_dir }}}}/artifacts/admin.conf\"\n        src: \"{}\"\n        mode: \"0600\"\n",
        workload.kubeconfig_path().display()
    );
    std::fs::write(repo.path().join("playbooks/scale.yml"), playbook).unwrap();
    std::fs::write(repo.path().join("clusters/local/hosts.yml"), HOSTS).unwrap();
    std::fs::write(
        repo.path().join("clusters/local/operations.yml"),
        // The repository's own stand-in for scale.yml on a cluster kok never installed: not kubespray's
        // playbook, so its rules do not apply.
        "- id: add-node7\n  action: playbooks/scale.yml\n  verifyTimeout: 2s\n  preflight: false\n",
    )
    .unwrap();
    let sha = repo.commit("add node7");

    let mut kok = LocalKok::start(&repo);
    let client = kok.client(&repo).await;
    let op = finished(&mut kok, &client, "add-node7").await;
    let status = op.status.clone().unwrap();
    assert_eq!(status.phase, Phase::Failed, "{:?}", status.message);
    assert_eq!(
        status.message.as_deref(),
        Some("playbook succeeded, verification failed: node7 is in hosts.yml but not a node of the cluster")
    );
    assert_eq!(status.verification.unwrap().state, VerificationState::Failed);
    assert!(status.summary.is_some(), "the playbook's own summary is kept");
    let note = note_line(&mut kok, &repo, &sha, "kok/local/add-node7: failure ").await;
    assert!(
        note.contains(
            "playbook succeeded, verification failed: node7 is in hosts.yml but not a node of the cluster"
        ),
        "{note}"
    );
}
