//! Pre-flight in local mode: with `--workdir` the checked-out kubespray tree's own playbooks and checksums
//! win over kok's release data. A playbook the tree has runs though kubespray's release lacks it, a
//! `kube_version` its checksums list passes, and an action the tree lacks is refused before it runs. A
//! playbook kept in the repository is not looked for in kubespray and runs from its commit's files, even
//! where the tree has a playbook of the same path.

use crate::local_e2e_support;

use kok::api::Phase;
use local_e2e_support::{ansible_or_skip, finished, LocalKok, LocalRepo, CLUSTER};

/// A kubespray-shaped inventory of localhost alone: control plane, etcd member and worker.
const HOSTS: &str = "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n      \
                     ansible_python_interpreter: \"{{ ansible_playbook_python }}\"\n  children:\n    \
                     kube_control_plane:\n      hosts:\n        localhost:\n    etcd:\n      hosts:\n        \
                     localhost:\n    kube_node:\n      hosts:\n        localhost:\n";

/// A playbook that leaves `<marks>/<mark>.txt`.
const MARK: &str =
    "- hosts: all\n  become: false\n  gather_facts: false\n  tasks:\n    - ansible.builtin.copy:\n        \
                    dest: \"{{ marks }}/{{ mark }}.txt\"\n        content: ran\n";

#[tokio::test(flavor = "multi_thread")]
async fn the_workdirs_own_playbooks_and_checksums_win_over_the_release_data() {
    if !ansible_or_skip("the_workdirs_own_playbooks_and_checksums_win") {
        return;
    }
    // A checkout of a kubespray of its own: cluster.yml, its facts playbook, a playbook kubespray v2.27.0
    // does not have, and checksums for one Kubernetes version v2.27.0 does not install.
    let tree = tempfile::tempdir().unwrap();
    let checksums = tree
        .path()
        .join("roles/kubespray-defaults/defaults/main/checksums.yml");
    std::fs::create_dir_all(checksums.parent().unwrap()).unwrap();
    std::fs::write(&checksums, "kubeadm_checksums:\n  amd64:\n    v1.30.99: abc123\n").unwrap();
    std::fs::create_dir_all(tree.path().join("playbooks")).unwrap();
    for playbook in ["cluster.yml", "playbooks/facts.yml", "site-extra.yml"] {
        std::fs::write(tree.path().join(playbook), MARK).unwrap();
    }

    let repo = LocalRepo::new();
    let marks = repo.marks();
    repo.write(&format!("clusters/{CLUSTER}/hosts.yml"), HOSTS);
    repo.write(
        &format!("clusters/{CLUSTER}/vars.yml"),
        &format!("kube_version: v1.30.99\nmarks: {}\n", marks.display()),
    );
    repo.write(
        &format!("clusters/{CLUSTER}/operations.yml"),
        "- id: extra\n  action: site-extra.yml\n  extraArgs: [-e, mark=extra]\n\
         - id: absent\n  action: upgrade-cluster.yml\n",
    );
    repo.commit("a playbook of the checked-out tree");
    // What kok's data alone says of the same repository: both refused.
    let (ok, stdout, _) = repo.kok(&["validate", repo.path().to_str().unwrap()]);
    assert!(!ok, "kubespray v2.27.0 installs no v1.30.99: {stdout}");
    assert!(stdout.contains("[kube-version-supported"), "{stdout}");
    assert!(
        stdout.contains("warning: action site-extra.yml is not a playbook of kubespray v2.27.0"),
        "{stdout}"
    );

    let workdir = tree.path().to_str().unwrap();
    let mut kok = LocalKok::start_with(&repo, &["--workdir", workdir]);
    let client = kok.client(&repo).await;
    let extra = finished(&mut kok, &client, "extra").await;
    let status = extra.status.clone().unwrap();
    assert_eq!(
        status.phase,
        Phase::Succeeded,
        "the tree has the playbook and installs the version: {:?} {:?}",
        status.message,
        extra.spec.preflight
    );
    assert!(marks.join("extra.txt").exists(), "the playbook ran");
    let absent = finished(&mut kok, &client, "absent").await;
    let status = absent.status.unwrap();
    assert_eq!(status.phase, Phase::Failed);
    let message = status.message.unwrap_or_default();
    assert!(
        message.starts_with(
            "pre-flight: playbook-exists: action upgrade-cluster.yml is not a playbook of the checked-out \
             kubespray tree v2.27.0"
        ),
        "{message}"
    );
    assert_eq!(status.job_ref, None);
    assert!(kok.stop(), "kok exits 0 on SIGTERM; its log:\n{}", kok.log());
}

/// A repository whose kubespray-shaped cluster runs `operations` with `playbooks/ok.yml` committed beside
/// `clusters/`; returns it and its marks directory.
fn kubespray_cluster_with_repository_playbook(operations: &str) -> (LocalRepo, std::path::PathBuf) {
    let repo = LocalRepo::new();
    let marks = repo.marks();
    repo.write(&format!("clusters/{CLUSTER}/hosts.yml"), HOSTS);
    repo.write(
        &format!("clusters/{CLUSTER}/vars.yml"),
        &format!("marks: {}\n", marks.display()),
    );
    repo.write("playbooks/ok.yml", MARK);
    repo.write(&format!("clusters/{CLUSTER}/operations.yml"), operations);
    repo.commit("a playbook kept in the repository");
    (repo, marks)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_playbook_kept_in_the_repository_runs_on_a_kubespray_cluster_and_one_in_neither_is_refused() {
    if !ansible_or_skip("a_playbook_kept_in_the_repository_runs_on_a_kubespray_cluster") {
        return;
    }
    let (repo, marks) = kubespray_cluster_with_repository_playbook(
        "- id: ok\n  action: playbooks/ok.yml\n  extraArgs: [-e, mark=ok]\n\
         - id: absent\n  action: playbooks/absent.yml\n",
    );
    let (_, stdout, _) = repo.kok(&["validate", repo.path().to_str().unwrap()]);
    assert!(
        !stdout.contains("action playbooks/ok.yml is not a playbook"),
        "the repository's playbook exists: {stdout}"
    );
    assert!(
        stdout.contains("warning: action playbooks/absent.yml is not a playbook of kubespray v2.27.0"),
        "{stdout}"
    );

    let mut kok = LocalKok::start(&repo);
    let client = kok.client(&repo).await;
    let ok = finished(&mut kok, &client, "ok").await;
    let status = ok.status.clone().unwrap();
    assert_eq!(
        status.phase,
        Phase::Succeeded,
        "pre-flight lets the repository's playbook run: {:?} {:?}",
        status.message,
        ok.spec.preflight
    );
    let pinned: Vec<&str> = ok.spec.repository_files.iter().map(|f| f.path.as_str()).collect();
    assert!(
        pinned.contains(&"playbooks/ok.yml") && pinned.iter().all(|p| p.starts_with("playbooks/")),
        "the run pins the playbook it runs and the directory it is in: {pinned:?}"
    );
    assert!(marks.join("ok.txt").exists(), "the playbook ran");
    let absent = finished(&mut kok, &client, "absent").await;
    let status = absent.status.unwrap();
    assert_eq!(status.phase, Phase::Failed);
    let message = status.message.unwrap_or_default();
    assert!(
        message.starts_with(
            "pre-flight: playbook-exists: action playbooks/absent.yml is not a playbook of kubespray v2.27.0"
        ),
        "{message}"
    );
    assert!(kok.stop(), "kok exits 0 on SIGTERM; its log:\n{}", kok.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_repository_playbook_runs_from_its_commit_even_where_the_workdir_has_one_of_that_name() {
    if !ansible_or_skip("a_repository_playbook_runs_from_its_commit_even_where_the_workdir_has_one") {
        return;
    }
    // The kubespray checkout the runs are pointed at has a playbooks/ok.yml of its own, which fails.
    let tree = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tree.path().join("playbooks")).unwrap();
    std::fs::write(tree.path().join("cluster.yml"), MARK).unwrap();
    std::fs::write(
        tree.path().join("playbooks/ok.yml"),
        "- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.fail:\n        msg: the workdir's\n",
    )
    .unwrap();
    let (repo, marks) = kubespray_cluster_with_repository_playbook(
        "- id: ok\n  action: playbooks/ok.yml\n  extraArgs: [-e, mark=ok]\n",
    );
    let mut kok = LocalKok::start_with(&repo, &["--workdir", tree.path().to_str().unwrap()]);
    let client = kok.client(&repo).await;
    let ok = finished(&mut kok, &client, "ok").await;
    let status = ok.status.clone().unwrap();
    assert_eq!(
        status.phase,
        Phase::Succeeded,
        "the commit's playbook ran, not the workdir's: {:?}",
        status.message
    );
    assert!(
        marks.join("ok.txt").exists(),
        "the repository's playbook left its mark"
    );
    assert!(kok.stop(), "kok exits 0 on SIGTERM; its log:\n{}", kok.log());
}
