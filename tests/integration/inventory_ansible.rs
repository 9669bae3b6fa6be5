//! kok's reading of inventory directories checked against ansible itself (the release kubespray pins):
//! `ansible-inventory --list` for hosts, groups and every host's variables, and a playbook importing
//! kubespray's `boilerplate.yml` for the groups it adds at run time. The corpus is `tests/inventories/`
//! plus kubespray's own `inventory/sample`.

use crate::common::kubespray;
use crate::common::tools;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use kok::layout::ansible::kubespray::{GROUP_MAPPINGS, UNMATCHED_GROUP};
use kok::layout::{read_inventory_dir, AnsibleInventory, InventorySource, Known, Severity, Unknown};
use kubespray::{installed_or_skip, Kubespray};
use serde_json::{Map, Value};

/// Variables ansible adds to every host itself (and so kok does not resolve).
const MAGIC_VARS: &[&str] = &[
    "ansible_check_mode",
    "ansible_config_file",
    "ansible_diff_mode",
    "ansible_facts",
    "ansible_forks",
    "ansible_inventory_sources",
    "ansible_limit",
    "ansible_play_batch",
    "ansible_play_hosts",
    "ansible_play_hosts_all",
    "ansible_play_name",
    "ansible_play_role_names",
    "ansible_playbook_python",
    "ansible_role_names",
    "ansible_run_tags",
    "ansible_search_path",
    "ansible_skip_tags",
    "ansible_verbosity",
    "ansible_version",
    "group_names",
    "groups",
    "inventory_dir",
    "inventory_file",
    "inventory_hostname",
    "inventory_hostname_short",
    "omit",
    "play_hosts",
    "playbook_dir",
    "role_names",
    "ansible_dependent_role_names",
];

/// A copy of one inventory directory in a temporary directory.
struct Case {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    inventory: &'static str,
    vault_password: Option<PathBuf>,
}

impl Case {
    /// `tests/inventories/<name>`, copied.
    fn corpus(name: &str, inventory: &'static str) -> Case {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(name);
        let source = tools::workspace_root().join("tests/inventories").join(name);
        copy_dir(&source, &dir);
        Case {
            _tmp: tmp,
            dir,
            inventory,
            vault_password: None,
        }
    }

    fn inventory_path(&self) -> PathBuf {
        self.dir.join(self.inventory)
    }

    /// The directory as kok reads it.
    fn kok(&self) -> AnsibleInventory {
        let files: Vec<(String, String)> = walk(&self.dir)
            .into_iter()
            .filter(|rel| rel != self.inventory)
            .map(|rel| {
                let text = std::fs::read_to_string(self.dir.join(&rel)).unwrap();
                (rel, text)
            })
            .collect();
        let text = std::fs::read_to_string(self.inventory_path()).unwrap();
        let source = InventorySource {
            dir: "",
            cluster: None,
            inventory_name: self.inventory,
            inventory_text: &text,
            files: &files,
        };
        let mut diags = Vec::new();
        let inventory = read_inventory_dir(&source, &mut diags);
        let errors: Vec<String> = diags
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .map(ToString::to_string)
            .collect();
        assert_eq!(errors, Vec::<String>::new(), "{}", self.dir.display());
        inventory.unwrap()
    }

    fn vault_args(&self, command: &mut Command) {
        if let Some(password) = &self.vault_password {
            command.arg("--vault-password-file").arg(password);
        }
    }

    /// `ansible-inventory --list`, with a configuration of ansible's defaults.
    fn ansible_list(&self, kubespray: &Kubespray) -> Value {
        let config = self._tmp.path().join("ansible.cfg");
        std::fs::write(&config, "[defaults]\n").unwrap();
        let mut command = Command::new(kubespray.venv.join("bin/ansible-inventory"));
        command
            .arg("-i")
            .arg(self.inventory_path())
            .arg("--list")
            .current_dir(self._tmp.path())
            .env("ANSIBLE_CONFIG", &config)
            .env("PATH", kubespray.search_path());
        self.vault_args(&mut command);
        serde_json::from_slice(&run(&mut command)).unwrap()
    }

    /// `groups` and every host's raw `hostvars` after kubespray's boilerplate play, from a playbook run in
    /// kubespray's tree with its `ansible.cfg` (one fork, so hosts join run-time groups in play order).
    fn ansible_after_boilerplate(&self, kubespray: &Kubespray) -> Value {
        let out = self._tmp.path().join("after-boilerplate.json");
        let playbook = self._tmp.path().join("dump.yml");
        let boilerplate = kubespray.tree.join("playbooks/boilerplate.yml");
        let dump =
            "{% set d = {} %}{% for h in groups['all'] %}{% set _ = d.update({h: hostvars.raw_get(h)}) %}\
                    {% endfor %}{{ {'groups': groups, 'hostvars': d} | to_json }}";
        std::fs::write(
            &playbook,
            format!(
                "- import_playbook: {}\n- hosts: all\n  gather_facts: false\n  tasks:\n    - name: dump\n      \
                 run_once: true\n      delegate_to: localhost\n      copy:\n        dest: {}\n        content: \"{dump}\"\n",
                boilerplate.display(),
                out.display()
            ),
        )
        .unwrap();
        let facts = self._tmp.path().join("facts");
        let mut command = Command::new(kubespray.venv.join("bin/ansible-playbook"));
        command
            .arg("-i")
            .arg(self.inventory_path())
            .args(["--forks", "1"])
            .arg(&playbook)
            .current_dir(&kubespray.tree)
            .env("ANSIBLE_CONFIG", kubespray.tree.join("ansible.cfg"))
            .env("ANSIBLE_CACHE_PLUGIN_CONNECTION", &facts)
            .env("ANSIBLE_CALLBACKS_ENABLED", "")
            .env("ANSIBLE_RETRY_FILES_ENABLED", "false")
            .env("PATH", kubespray.search_path());
        self.vault_args(&mut command);
        run(&mut command);
        serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap()
    }
}

fn run(command: &mut Command) -> Vec<u8> {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{command:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

fn copy_dir(from: &Path, to: &Path) {
    for rel in walk(from) {
        let target = to.join(&rel);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(from.join(&rel), target).unwrap();
    }
}

/// Every file under `dir`, as paths relative to it with '/'.
fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        for entry in std::fs::read_dir(dir.join(&rel)).unwrap() {
            let entry = entry.unwrap();
            let path = rel.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                todo.push(path);
            } else {
                out.push(path.to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    out
}

/// Checks kok's variables of `host` against ansible's: every value kok knows is ansible's, a template is
/// ansible's text as written, and ansible sets nothing kok misses (unless a vault file of the host may).
fn check_vars(kok: &AnsibleInventory, host: &str, ansible: &Map<String, Value>, case: &str) {
    let settings = kok.settings(host);
    for (name, setting) in &settings {
        let theirs = ansible.get(name);
        assert!(
            theirs.is_some(),
            "{case}: {host}.{name}: kok has {setting:?}, ansible has nothing"
        );
        match &setting.value {
            Known::Value(ours) | Known::Unknown(Unknown::Templated(ours)) => {
                assert_eq!(
                    Some(ours),
                    theirs,
                    "{case}: {host}.{name} (kok: from {})",
                    setting.origin
                )
            }
            Known::Unknown(_) => {}
        }
    }
    for name in ansible.keys() {
        if settings.contains_key(name) || MAGIC_VARS.contains(&name.as_str()) {
            continue;
        }
        let ours = kok.var(host, name);
        assert!(
            matches!(ours, Some(Known::Unknown(Unknown::VaultFile(_)))),
            "{case}: {host}.{name}: ansible has {:?}, kok has {ours:?}",
            ansible[name]
        );
    }
}

/// Checks hosts, groups (their own hosts and children, in order) and every host's variables against
/// `ansible-inventory --list`.
fn check_list(kok: &AnsibleInventory, list: &Value, case: &str) {
    let mut theirs: BTreeMap<String, (Vec<String>, Vec<String>)> = BTreeMap::new();
    for (group, body) in list.as_object().unwrap() {
        if group == "_meta" {
            continue;
        }
        let strings = |key: &str| -> Vec<String> {
            body.get(key)
                .and_then(Value::as_array)
                .map(|items| items.iter().map(|i| i.as_str().unwrap().to_string()).collect())
                .unwrap_or_default()
        };
        theirs.insert(group.clone(), (strings("hosts"), strings("children")));
    }
    let mut ours = BTreeMap::new();
    for group in kok.groups() {
        let hosts: Vec<String> = match group {
            "all" => vec![],
            _ => kok
                .direct_hosts(group)
                .unwrap()
                .into_iter()
                .map(String::from)
                .collect(),
        };
        let children: Vec<String> = kok
            .children(group)
            .unwrap()
            .into_iter()
            .map(String::from)
            .collect();
        if !hosts.is_empty() || !children.is_empty() {
            ours.insert(group.to_string(), (hosts, children));
        }
    }
    assert_eq!(ours, theirs, "{case}: groups");
    let hostvars = list["_meta"]["hostvars"].as_object().cloned().unwrap_or_default();
    let listed: BTreeSet<&str> = theirs
        .values()
        .flat_map(|(hosts, _)| hosts.iter().map(String::as_str))
        .collect();
    let kok_hosts: BTreeSet<&str> = kok.hosts().into_iter().collect();
    assert_eq!(kok_hosts, listed, "{case}: hosts");
    for host in kok.hosts() {
        let empty = Value::Object(Map::new());
        let vars = hostvars.get(host).unwrap_or(&empty).as_object().unwrap();
        check_vars(kok, host, vars, case);
    }
}

/// True when ansible's host order for `group` depends on a Python set: two groups at one level below it
/// both have children.
fn order_unspecified(kok: &AnsibleInventory, group: &str) -> bool {
    let mut level: Vec<String> = kok
        .children(group)
        .unwrap()
        .into_iter()
        .map(String::from)
        .collect();
    let mut seen: BTreeSet<String> = level.iter().cloned().collect();
    while !level.is_empty() {
        let parents: Vec<&String> = level
            .iter()
            .filter(|g| !kok.children(g).unwrap().is_empty())
            .collect();
        if parents.len() > 1 {
            return true;
        }
        let next: Vec<String> = parents
            .iter()
            .flat_map(|g| kok.children(g).unwrap())
            .map(String::from)
            .filter(|g| seen.insert(g.clone()))
            .collect();
        level = next;
    }
    false
}

/// Checks kok's kubespray view (`with_kubespray_groups`) against `groups` and `hostvars` after the
/// boilerplate play.
fn check_after_boilerplate(kok: &AnsibleInventory, after: &Value, case: &str) {
    let kok = kok.with_kubespray_groups();
    // The boilerplate adds hosts in play order, which is groups['all']'s.
    let play_order_unspecified = order_unspecified(&kok, "all");
    let added: Vec<&str> = GROUP_MAPPINGS
        .iter()
        .map(|(name, _)| *name)
        .chain([UNMATCHED_GROUP])
        .collect();
    let groups = after["groups"].as_object().unwrap();
    let names: BTreeSet<&str> = groups.keys().map(String::as_str).collect();
    let kok_names: BTreeSet<&str> = kok.groups().into_iter().collect();
    assert_eq!(kok_names, names, "{case}: groups after the boilerplate");
    for (group, hosts) in groups {
        let theirs: Vec<&str> = hosts
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h.as_str().unwrap())
            .collect();
        let ours = kok.group_hosts(group).unwrap();
        if order_unspecified(&kok, group) || (play_order_unspecified && added.contains(&group.as_str())) {
            let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
            assert_eq!(set(&ours), set(&theirs), "{case}: groups['{group}']");
        } else {
            assert_eq!(ours, theirs, "{case}: groups['{group}']");
        }
    }
    for (host, vars) in after["hostvars"].as_object().unwrap() {
        check_vars(&kok, host, vars.as_object().unwrap(), case);
    }
}

fn oracle(test: &str) -> Option<Kubespray> {
    installed_or_skip(test)
}

#[test]
fn ini_inventories_with_ranges_children_vars_and_layered_group_vars_resolve_as_ansible_does() {
    let Some(kubespray) = oracle("ini_inventories_with_ranges_children_vars_and_layered_group_vars") else {
        return;
    };
    let case = Case::corpus("ini_layers", "inventory.ini");
    let kok = case.kok();
    check_list(&kok, &case.ansible_list(&kubespray), "ini_layers");
    check_after_boilerplate(&kok, &case.ansible_after_boilerplate(&kubespray), "ini_layers");
    // The rules the corpus is there for, spelled out.
    let value = |host: &str, name: &str| kok.var(host, name).and_then(|k| k.value().cloned());
    assert_eq!(
        kok.group_hosts("kube_control_plane").unwrap(),
        ["node01", "node02", "node03"]
    );
    assert_eq!(
        value("node03", "v_prio"),
        Some("control".into()),
        "ansible_group_priority"
    );
    assert_eq!(value("node04", "v_inv"), Some("inv_kube_node".into()));
    assert_eq!(value("node04", "v_mix"), Some("gv_all".into()));
    assert_eq!(value("node04", "v_files"), Some("gv_kube_node_json".into()));
    assert_eq!(value("node04", "v_host"), Some("host_vars_node04".into()));
    assert_eq!(value("worker-b", "ansible_port"), Some(2222.into()));
    assert!(matches!(
        kok.var("lonely", "template"),
        Some(Known::Unknown(Unknown::Templated(_)))
    ));
    let kubespray_view = kok.with_kubespray_groups();
    assert_eq!(
        kubespray_view.var("node01", "kube_version").unwrap().as_str(),
        Some("v1.31.4")
    );
}

#[test]
fn yaml_inventories_and_priorities_in_group_vars_files_resolve_as_ansible_does() {
    let Some(kubespray) = oracle("yaml_inventories_and_priorities_in_group_vars_files") else {
        return;
    };
    for (name, inventory) in [("yaml_hosts", "hosts.yml"), ("priority", "inventory.ini")] {
        let case = Case::corpus(name, inventory);
        let kok = case.kok();
        check_list(&kok, &case.ansible_list(&kubespray), name);
    }
}

#[test]
fn vault_values_are_not_known_and_ansible_never_knows_another_value() {
    let Some(kubespray) = oracle("vault_values_are_not_known") else {
        return;
    };
    let mut case = Case::corpus("vault", "inventory.ini");
    let password = case._tmp.path().join("vault-password");
    std::fs::write(&password, "throwaway-test-password\n").unwrap();
    let vault = |args: &[&str]| {
        let mut command = Command::new(kubespray.venv.join("bin/ansible-vault"));
        command.args(args).arg("--vault-password-file").arg(&password);
        String::from_utf8(run(&mut command)).unwrap()
    };
    let inline = vault(&["encrypt_string", "--name", "inline_secret", "s3cret"]);
    // Sorted after vault.yml, so the whole-file vault cannot override it.
    std::fs::write(case.dir.join("group_vars/all/w.yml"), inline).unwrap();
    let whole = case.dir.join("group_vars/all/vault.yml");
    std::fs::write(&whole, "secret_level: from_vault\nvault_only: hidden\n").unwrap();
    vault(&["encrypt", whole.to_str().unwrap()]);
    case.vault_password = Some(password);
    let kok = case.kok();
    check_list(&kok, &case.ansible_list(&kubespray), "vault");
    let vault_file = Known::Unknown(Unknown::VaultFile("group_vars/all/vault.yml".into()));
    assert_eq!(kok.var("v3", "secret_level"), Some(vault_file.clone()));
    assert_eq!(kok.var("v3", "plain"), Some(vault_file.clone()));
    assert_eq!(kok.var("v3", "vault_only"), Some(vault_file));
    assert_eq!(
        kok.var("v3", "inline_secret"),
        Some(Known::Unknown(Unknown::Vault))
    );
    assert_eq!(
        kok.var("v1", "secret_level").unwrap().as_str(),
        Some("inline_host")
    );
    assert_eq!(
        kok.var("v2", "secret_level").unwrap().as_str(),
        Some("host_vars_v2")
    );
    assert_eq!(kok.var("v3", "after_vault").unwrap().as_str(), Some("known"));
}

#[test]
fn kubespray_sample_inventory_and_legacy_group_names_resolve_as_kubespray_sees_them() {
    let Some(kubespray) = oracle("kubespray_sample_inventory_and_legacy_group_names") else {
        return;
    };
    let case = Case::corpus("kubespray_sample", "inventory.ini");
    copy_dir(
        &kubespray.tree.join("inventory/sample/group_vars"),
        &case.dir.join("group_vars"),
    );
    let kok = case.kok();
    check_list(&kok, &case.ansible_list(&kubespray), "kubespray_sample");
    check_after_boilerplate(
        &kok,
        &case.ansible_after_boilerplate(&kubespray),
        "kubespray_sample",
    );
    let view = kok.with_kubespray_groups();
    assert_eq!(view.group_hosts("kube_control_plane").unwrap()[0], "node1");
    match view.group_var("k8s_cluster", "kube_version") {
        kok::layout::GroupVar::Same(Some(setting)) => {
            assert_eq!(setting.origin.path, "group_vars/k8s_cluster/k8s-cluster.yml");
            assert!(
                setting.value.as_str().is_some_and(|v| v.starts_with("v1.")),
                "{setting:?}"
            );
        }
        other => panic!("kube_version over k8s_cluster: {other:?}"),
    }

    let legacy = Case::corpus("legacy_names", "inventory.ini");
    let kok = legacy.kok();
    check_list(&kok, &legacy.ansible_list(&kubespray), "legacy_names");
    check_after_boilerplate(
        &kok,
        &legacy.ansible_after_boilerplate(&kubespray),
        "legacy_names",
    );
}

/// The layout crate's example, which prints a directory as `ansible-inventory --list` does: `cargo test
/// --workspace` builds it beside this binary; a narrower run builds it now.
fn inventory_example() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let built = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/ansible-inventory");
    if !built.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
        run(Command::new(cargo)
            .args([
                "build",
                "--locked",
                "-p",
                "kok-layout",
                "--example",
                "ansible-inventory",
            ])
            .current_dir(tools::workspace_root()));
    }
    built
}

#[test]
fn the_layout_crates_example_prints_what_ansible_inventory_list_prints() {
    let Some(kubespray) = oracle("the_layout_crates_example_prints") else {
        return;
    };
    let example = inventory_example();
    for (name, inventory) in [
        ("ini_layers", "inventory.ini"),
        ("yaml_hosts", "hosts.yml"),
        ("priority", "inventory.ini"),
        ("kubespray_sample", "inventory.ini"),
        ("legacy_names", "inventory.ini"),
    ] {
        let case = Case::corpus(name, inventory);
        let out = Command::new(&example).arg(&case.dir).output().unwrap();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ours: Value = serde_json::from_slice(&out.stdout).unwrap();
        pretty_assertions::assert_eq!(ours, case.ansible_list(&kubespray), "{name}");
    }
    // A vaulted value is left out and said, never guessed.
    let vaulted = Case::corpus("ini_layers", "inventory.ini");
    std::fs::write(
        vaulted.dir.join("host_vars/lonely.yml"),
        "secret: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162636465\n",
    )
    .unwrap();
    let out = Command::new(&example).arg(&vaulted.dir).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains("lonely: secret is left out: only ansible-vault's password opens it"),
        "{stderr}"
    );
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["_meta"]["hostvars"]["lonely"].get("secret"), None);
}
