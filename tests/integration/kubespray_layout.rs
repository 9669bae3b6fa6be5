//! A cluster directory in kubespray's own layout means to a run what it means to ansible by hand: kok's local
//! mode runs a playbook on an `inventory.ini` with `group_vars/` and `host_vars/` (one file of them vaulted),
//! and every host's variables in that run equal what `ansible-inventory --list` gives in the checkout, with
//! the ansible release kubespray pins. The vault password reaches ansible and nothing kok writes. And
//! kubespray v2.27.0's own `inventory/sample`, copied as it ships, validates.

use crate::local_e2e_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kok::api::Phase;
use kube::api::{Api, PostParams};
use local_e2e_support::kubespray::{installed_or_skip, Kubespray};
use local_e2e_support::{finished_within, note_line, run_log, LocalKok, LocalRepo, CLUSTER, NS};
use serde_json::Value;

/// The ansible-vault password of the test's vaulted file; it must appear nowhere kok writes.
const VAULT_PASSWORD: &str = "vault-pw-3c9e1d";
/// The Secret holding it (`vaultPasswordSecret`).
const VAULT_SECRET: &str = "local-vault";
/// The decrypted value of the vaulted variable.
const REGISTRY_PASSWORD: &str = "registry-secret-value";
/// Longest wait for the dump run.
const RUN_WAIT: Duration = Duration::from_secs(300);

/// The playbook kok runs: writes, for every host, the variables ansible gives it (delegated to the
/// controller, so no host is contacted) into `out_dir`.
const DUMP_PLAYBOOK: &str = r#"- name: Write every host's variables
  hosts: all
  become: false
  gather_facts: false
  tasks:
    - name: What ansible gives this host
      ansible.builtin.copy:
        content: "{{ hostvars[inventory_hostname] | to_nice_json }}"
        dest: "{{ out_dir }}/{{ inventory_hostname }}.json"
        mode: "0600"
      delegate_to: localhost
"#;

/// The cluster directory, by path inside it: one variable (`layer`) set at every level ansible knows, so
/// that precedence decides each host's value, plus INI ranges, typed inline values, a json file, nested
/// groups, `ansible_group_priority` and a whole-file vault.
fn cluster_files() -> Vec<(&'static str, String)> {
    vec![
        (
            "inventory.ini",
            "\
# a kubespray inventory, INI style
[kube_control_plane]
cp[1:2] ansible_connection=local ip=10.0.0.1 port_number=6443 enabled=True ratio=0.5

[etcd:children]
kube_control_plane

[kube_node]
w[01:02] ansible_connection=local
w03 ansible_connection=local layer=inventory-host

[kube_node:vars]
layer=inventory-kube-node
node_labels={'role': 'worker'}

[workers:children]
kube_node

[all:vars]
layer=inventory-all
ansible_python_interpreter=/usr/bin/python3
"
            .into(),
        ),
        (
            "group_vars/all/all.yml",
            "layer: group-vars-all\nshared: from-all\nflag: yes\n".into(),
        ),
        (
            "group_vars/all/zz-later.yml",
            "shared: from-a-later-file\n".into(),
        ),
        (
            "group_vars/workers.yml",
            "layer: group-vars-workers\nworkers_only: true\n".into(),
        ),
        (
            "group_vars/kube_node/main.json",
            "{\"layer\": \"group-vars-kube-node\", \"list\": [1, 2]}\n".into(),
        ),
        (
            "group_vars/etcd.yml",
            "etcd_deployment_type: host\nansible_group_priority: 10\n".into(),
        ),
        (
            "group_vars/kube_control_plane.yml",
            "layer: group-vars-control-plane\n".into(),
        ),
        ("host_vars/w01.yml", "layer: host-vars-w01\n".into()),
        ("host_vars/cp2/main.yml", "layer: host-vars-cp2\n".into()),
    ]
}

/// ansible-vault's encryption of `text` with [`VAULT_PASSWORD`], made with kubespray's pinned ansible.
fn vault_encrypt(kubespray: &Kubespray, dir: &Path, text: &str) -> String {
    let plain = dir.join("vault-plain.yml");
    let password = dir.join("vault-pass");
    std::fs::write(&plain, text).unwrap();
    std::fs::write(&password, format!("{VAULT_PASSWORD}\n")).unwrap();
    let out = Command::new(kubespray.venv.join("bin/ansible-vault"))
        .args(["encrypt", "--vault-password-file"])
        .arg(&password)
        .arg(&plain)
        .output()
        .expect("ansible-vault runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::read_to_string(&plain).unwrap()
}

/// What `ansible-inventory -i <inventory> --list` gives every host, run in the checkout as a person would.
fn ansible_inventory(kubespray: &Kubespray, inventory: &Path, password: &Path) -> BTreeMap<String, Value> {
    let out = Command::new(kubespray.venv.join("bin/ansible-inventory"))
        .arg("-i")
        .arg(inventory)
        .arg("--list")
        .arg("--vault-password-file")
        .arg(password)
        .output()
        .expect("ansible-inventory runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let list: Value = serde_json::from_slice(&out.stdout).expect("ansible-inventory prints JSON");
    serde_json::from_value(list["_meta"]["hostvars"].clone()).expect("hostvars by host")
}

/// kubespray v2.27.0's `inventory/sample/group_vars/` as it ships, by path inside the inventory directory,
/// and an `inventory.ini` filled in as kubespray's Quick Start has one do.
fn sample_files(kubespray: &Kubespray) -> Vec<(String, String)> {
    let sample = kubespray.tree.join("inventory/sample");
    let mut files = Vec::new();
    for entry in walk(&sample.join("group_vars")) {
        let relative = entry.strip_prefix(&sample).unwrap().to_str().unwrap().to_string();
        files.push((relative, std::fs::read_to_string(&entry).unwrap()));
    }
    files.push(("inventory.ini".into(), SAMPLE_INVENTORY.into()));
    files.sort();
    files
}

/// The sample's inventory.ini with its three example nodes filled in.
const SAMPLE_INVENTORY: &str =
    "[kube_control_plane]\nnode1 ansible_host=95.54.0.12 ip=10.3.0.1 etcd_member_name=etcd1\n\
    node2 ansible_host=95.54.0.13 ip=10.3.0.2 etcd_member_name=etcd2\n\
    node3 ansible_host=95.54.0.14 ip=10.3.0.3 etcd_member_name=etcd3\n\n\
    [etcd:children]\nkube_control_plane\n\n[kube_node]\nnode1\nnode2\nnode3\n";

/// What one comparison found.
struct Compared {
    /// ansible-inventory's variables of every host, by host.
    expected: BTreeMap<String, Value>,
    /// How many (host, variable) pairs were compared.
    values: usize,
}

/// Commits `files` as the `local` cluster (replacing the harness's short layout), runs the dump playbook
/// through kok's local mode (with the vault password Secret), and checks every host's variables in the run
/// against `ansible-inventory --list` in the checkout. A value ansible-inventory shows as a template is
/// rendered by the run when it is read, so it is left out of the comparison. Then checks that the vault
/// password is in nothing kok wrote.
async fn run_and_compare(kubespray: &Kubespray, files: &[(String, String)]) -> Compared {
    let repo = LocalRepo::new();
    let cluster = repo.path().join("clusters").join(CLUSTER);
    for file in ["hosts.yml", "vars.yml"] {
        std::fs::remove_file(cluster.join(file)).expect("the harness's short layout");
    }
    for (path, text) in files {
        repo.write(&format!("clusters/{CLUSTER}/{path}"), text);
    }
    std::fs::write(
        cluster.join("cluster.yml"),
        format!("vaultPasswordSecret: {VAULT_SECRET}\n"),
    )
    .unwrap();
    let scratch = repo.scratch("vault");
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::write(scratch.join("vault-pass"), format!("{VAULT_PASSWORD}\n")).unwrap();
    let out_dir = repo.scratch("dump");
    std::fs::create_dir_all(&out_dir).unwrap();
    repo.write("playbooks/dump.yml", DUMP_PLAYBOOK);
    repo.write(
        &format!("clusters/{CLUSTER}/operations.yml"),
        &format!(
            // The repository's own playbook on a directory of two etcd members: kubespray's rules (an odd
            // etcd, its playbooks) are not this run's.
            "- id: dump\n  action: playbooks/dump.yml\n  extraArgs: [-e, 'out_dir={}']\n  preflight: false\n",
            out_dir.display()
        ),
    );
    let sha = repo.commit("the local cluster in kubespray's layout");

    let (ok, stdout, stderr) = repo.kok(&["validate", repo.path().to_str().unwrap()]);
    assert!(ok, "kok validate: {stdout}{stderr}");

    let mut kok = LocalKok::start_with_path(&repo, &[], kubespray.search_path());
    let client = kok.client(&repo).await;
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(VAULT_SECRET.into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        data: Some(
            [(
                "password".to_string(),
                ByteString(format!("{VAULT_PASSWORD}\n").into_bytes()),
            )]
            .into(),
        ),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create the vault password Secret");
    let op = finished_within(&mut kok, &client, "dump", RUN_WAIT).await;
    let status = op.status.clone().unwrap_or_default();
    assert_eq!(
        status.phase,
        Phase::Succeeded,
        "{:?}; the run's log:\n{}",
        status.message,
        run_log(&repo, "dump")
    );
    let note = note_line(&mut kok, &repo, &sha, &format!("kok/{CLUSTER}/dump: success")).await;

    // The oracle: ansible itself, on the checkout.
    let expected = ansible_inventory(
        kubespray,
        &cluster.join("inventory.ini"),
        &scratch.join("vault-pass"),
    );
    let mut values = 0;
    for (host, vars) in &expected {
        let dumped: BTreeMap<String, Value> = serde_json::from_slice(
            &std::fs::read(out_dir.join(format!("{host}.json")))
                .expect("the run wrote every host's variables"),
        )
        .expect("JSON");
        for (name, value) in vars.as_object().expect("a host's variables") {
            if value
                .as_str()
                .is_some_and(|v| v.contains("{{") || v.contains("{%"))
            {
                continue;
            }
            assert_eq!(
                dumped.get(name),
                Some(value),
                "{host}'s {name} in the run differs from ansible-inventory in the checkout"
            );
            values += 1;
        }
    }

    // The password is in nothing kok wrote: the run's log, the commit's note, kok's own log, the run's files.
    let mut places = vec![
        ("the run's log", run_log(&repo, "dump")),
        ("the note", repo.note(&sha)),
        ("kok's log", kok.log()),
        ("the note line", note),
    ];
    for entry in walk(&repo.state_dir()) {
        // The embedded API server's own storage holds the Secret, as etcd would.
        if entry.components().any(|c| c.as_os_str() == "api") {
            continue;
        }
        if let Ok(text) = std::fs::read(&entry) {
            places.push((
                "a file of the state directory",
                format!("{}: {}", entry.display(), String::from_utf8_lossy(&text)),
            ));
        }
    }
    for (what, text) in &places {
        assert!(
            !text.contains(VAULT_PASSWORD),
            "the vault password is in {what}: {text}"
        );
    }
    assert!(kok.stop(), "kok exits 0 on SIGTERM; its log:\n{}", kok.log());
    Compared { expected, values }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_sees_every_hosts_variables_as_ansible_inventory_does_and_the_vault_password_stays_out() {
    let Some(kubespray) = installed_or_skip("a_run_sees_every_hosts_variables_as_ansible_inventory_does")
    else {
        return;
    };
    // The tricky inventory, one of its group_vars files vaulted.
    let mut files: Vec<(String, String)> = cluster_files()
        .into_iter()
        .map(|(path, text)| (path.to_string(), text))
        .collect();
    let scratch = tempfile::tempdir().unwrap();
    let vaulted = vault_encrypt(
        &kubespray,
        scratch.path(),
        &format!("registry_password: {REGISTRY_PASSWORD}\nlayer: vaulted-all\n"),
    );
    files.push(("group_vars/all/vault.yml".into(), vaulted));
    let tricky = run_and_compare(&kubespray, &files).await;
    let hosts: Vec<&String> = tricky.expected.keys().collect();
    assert_eq!(hosts, ["cp1", "cp2", "w01", "w02", "w03"], "ansible's hosts");
    // Precedence, spelled out for some hosts, so that the test says what it pins.
    assert_eq!(tricky.expected["w01"]["layer"], "host-vars-w01");
    assert_eq!(tricky.expected["w03"]["layer"], "inventory-host");
    assert_eq!(tricky.expected["cp1"]["layer"], "group-vars-control-plane");
    assert_eq!(tricky.expected["cp2"]["layer"], "host-vars-cp2");
    assert_eq!(
        tricky.expected["cp1"]["registry_password"], REGISTRY_PASSWORD,
        "the vaulted file was decrypted"
    );

    // kubespray's own sample, as it ships.
    let sample = run_and_compare(&kubespray, &sample_files(&kubespray)).await;
    assert_eq!(sample.expected.len(), 3);
    assert!(
        sample.values >= 3 * 20,
        "the sample's variables were compared: {} values",
        sample.values
    );
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}

#[test]
fn kubesprays_own_sample_inventory_copied_as_it_ships_validates() {
    let Some(kubespray) = installed_or_skip("kubesprays_own_sample_inventory_copied_as_it_ships_validates")
    else {
        return;
    };
    let repo = tempfile::tempdir().unwrap();
    let cluster = repo.path().join("clusters/ks");
    std::fs::create_dir_all(repo.path().join("clusters")).unwrap();
    let status = Command::new("cp")
        .arg("-rp")
        .arg(kubespray.tree.join("inventory/sample"))
        .arg(&cluster)
        .status()
        .expect("cp runs");
    assert!(status.success());
    std::fs::write(cluster.join("inventory.ini"), SAMPLE_INVENTORY).unwrap();
    std::fs::write(
        cluster.join("operations.yml"),
        "- id: facts\n  action: playbooks/facts.yml\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kok"))
        .arg("validate")
        .arg(repo.path())
        .output()
        .expect("kok runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 cluster valid, 0 invalid, 0 errors"), "{text}");
}
