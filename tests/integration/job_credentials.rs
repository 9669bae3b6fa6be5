//! A Job's pod played by the test against testkit, with the real `ansible-playbook` on localhost: the pinned
//! inventory is mounted read-only (a read-only bind mount in a private mount namespace), kubespray's
//! `password` lookup under `inventory_dir/credentials` works on the writable copy, and what the run made
//! reaches the cluster's Secrets, where the next run finds it.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::Role;
use kok::api::{ClusterOperation, ClusterOperationSpec, ConfigMapRef};
use kok::controller::credentials::ensure;
use kok::controller::job::{build_job, JobConfig};
use kok::controller::summary::read_termination_message;
use kube::api::Api;

const NS: &str = "kok-system";

use crate::common::conf;
use crate::common::tools;

const PLAYBOOK: &str = r#"- hosts: all
  gather_facts: false
  become: false
  tasks:
    - name: The certificate key, as kubespray makes it
      ansible.builtin.copy:
        dest: "{{ marks }}/key-{{ run }}"
        content: "{{ lookup('password', inventory_dir + '/credentials/kubeadm_certificate_key.creds length=64 chars=hexdigits') }}"
    - name: The kubeconfig, as kubeconfig_localhost leaves it
      ansible.builtin.copy:
        dest: "{{ inventory_dir }}/artifacts/admin.conf"
        content: "kind: Config"
    - name: A late credential, then a failure when asked
      ansible.builtin.fail:
        msg: "failing with a {{ lookup('password', inventory_dir + '/credentials/late.creds length=16') | length }}-character credential"
      when: fail | default(false) | bool
"#;

fn operation(action: &Path, run: &str, fail: bool) -> ClusterOperation {
    let mut op = ClusterOperation::new(
        &format!("prod-{run}-0123abcd"),
        ClusterOperationSpec {
            cluster: "prod".into(),
            id: run.into(),
            digest: "0123abcd".into(),
            action: action.display().to_string(),
            extra_args: vec!["-e".into(), format!("run={run} fail={fail}")],
            image: "unused".into(),
            hosts_conf_ref: ConfigMapRef { name: "h".into() },
            vars_conf_ref: Some(ConfigMapRef { name: "v".into() }),
            queue_position: "0".into(),
            ..Default::default()
        },
    );
    op.metadata.namespace = Some(NS.into());
    op
}

/// Plays the kubelet for `job`: mounts the credentials Secret as files, the conf directory read-only,
/// runs the container's command with its env; returns success, output and the termination message.
async fn run_pod(server: &testkit::ApiServer, job: &Job, work: &Path, conf: &Path) -> (bool, String, String) {
    let secrets: Api<Secret> = Api::namespaced(server.client(), NS);
    let container = &job
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0];
    let mount = tempfile::tempdir_in(work).unwrap();
    let name = format!("{}-credentials", "prod");
    let data: BTreeMap<_, _> = secrets.get(&name).await.unwrap().data.unwrap_or_default();
    for (key, value) in data {
        std::fs::write(mount.path().join(key), value.0).unwrap();
    }
    let termination = work.join("termination-log");
    let _ = std::fs::remove_file(&termination);
    let command = container.command.clone().unwrap();
    let mut cmd = Command::new("unshare");
    cmd.env("PATH", tools::search_path());
    // A private mount namespace: the conf directory is bind-mounted onto itself read-only, as a ConfigMap
    // volume is; then the container's own command runs.
    cmd.args(["-m", "/bin/sh", "-c"])
        .arg("mount --bind \"$0\" \"$0\" && mount -o remount,bind,ro \"$0\" && exec /bin/sh -c \"$1\" kok-entry")
        .arg(conf)
        .arg(&command[2]);
    for var in container.env.iter().flatten() {
        if let Some(value) = &var.value {
            cmd.env(&var.name, value);
        }
    }
    cmd.env("KOK_NAMESPACE", NS)
        .env("KOK_CONF_DIR", conf)
        .env("KOK_CREDENTIALS_DIR", mount.path())
        .env("KOK_API_URL", server.url())
        .env("KOK_TERMINATION_LOG", &termination)
        .env("TMPDIR", work)
        .env("ANSIBLE_LOCAL_TEMP", work.join("ansible-tmp"))
        .env("ANSIBLE_NOCOLOR", "1");
    // The in-process API server answers the pod's requests meanwhile.
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .expect("unshare runs (util-linux)");
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !output.contains("unshare: ") && !output.contains("mount: "),
        "the read-only mount could not be made (root and util-linux are needed): {output}"
    );
    let message = std::fs::read_to_string(&termination).unwrap_or_default();
    (out.status.success(), output, message)
}

#[tokio::test(flavor = "multi_thread")]
async fn two_runs_see_the_same_generated_credential_and_the_kubeconfig_becomes_a_secret() {
    if !tools::ansible_or_skip("two_runs_see_the_same_generated_credential") {
        return;
    }
    let server = testkit::ApiServer::start().await.unwrap();
    let client = server.client();
    let work = tempfile::tempdir().unwrap();
    let marks = work.path().join("marks");
    let conf = work.path().join("conf");
    std::fs::create_dir_all(&marks).unwrap();
    conf::write_conf(
        &conf,
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n      \
         ansible_python_interpreter: \"{{ ansible_playbook_python }}\"\n",
        &format!("marks: {}\n", marks.display()),
    );
    let playbook = work.path().join("credentials.yml");
    std::fs::write(&playbook, PLAYBOOK).unwrap();

    ensure(&client, NS, "prod", None).await.unwrap();
    let role = Api::<Role>::namespaced(client.clone(), NS)
        .get("kok-prod-credentials")
        .await
        .unwrap();
    assert_eq!(
        role.rules.unwrap()[0].resource_names.as_deref(),
        Some(&["prod-credentials".to_string(), "prod-kubeconfig".to_string()][..])
    );

    let first = build_job(&operation(&playbook, "first", false), &JobConfig::default());
    let (ok, output, message) = run_pod(&server, &first, work.path(), &conf).await;
    assert!(ok, "{output}");
    assert!(
        !conf.join("credentials").exists(),
        "nothing is written beside the pinned inventory"
    );
    let key = std::fs::read_to_string(marks.join("key-first")).unwrap();
    assert_eq!(key.len(), 64);
    assert_eq!(
        read_termination_message(&message).kubeconfig.as_deref(),
        Some("prod-kubeconfig"),
        "{message}"
    );

    let second = build_job(&operation(&playbook, "second", false), &JobConfig::default());
    let (ok, output, message) = run_pod(&server, &second, work.path(), &conf).await;
    assert!(ok, "{output}");
    assert_eq!(std::fs::read_to_string(marks.join("key-second")).unwrap(), key);
    assert_eq!(
        read_termination_message(&message).kubeconfig,
        None,
        "unchanged: {message}"
    );

    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let kubeconfig = secrets.get("prod-kubeconfig").await.unwrap().data.unwrap();
    assert_eq!(kubeconfig["value"].0, b"kind: Config");

    let failing = build_job(&operation(&playbook, "third", true), &JobConfig::default());
    let (ok, output, _) = run_pod(&server, &failing, work.path(), &conf).await;
    assert!(!ok, "{output}");
    let credentials = secrets.get("prod-credentials").await.unwrap().data.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&credentials["kubeadm_certificate_key.creds"].0).trim(),
        key
    );
    let late = String::from_utf8_lossy(&credentials["late.creds"].0)
        .trim()
        .to_string();
    assert_eq!(late.len(), 16, "the failed run's credential was saved");
    assert!(!output.contains(&key) && !output.contains(&late), "{output}");
}
