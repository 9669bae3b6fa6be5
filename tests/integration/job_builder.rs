//! Golden tests of the Job builder and the entry script's quoting, run through the real /bin/sh.

use std::path::PathBuf;

use crate::common::conf;

use kok::api::{
    ActionType, ClusterOperation, ClusterOperationSpec, ConfigMapRef, FactsPlaybook, Hook, OperationSource,
    PinnedFile, SecretRef,
};
use kok::controller::job::{build_job, container_command, entry_script, job_name, JobConfig};

fn operation(name: &str) -> ClusterOperation {
    let mut op = ClusterOperation::new(
        name,
        ClusterOperationSpec {
            cluster: "prod-bj".into(),
            id: "add-node7".into(),
            digest: "0123abcd".repeat(8),
            action: "scale.yml".into(),
            action_type: ActionType::Playbook,
            extra_args: vec!["--limit=node7".into()],
            image: "quay.io/kubespray/kubespray:v2.27.0".into(),
            hosts_conf_ref: ConfigMapRef {
                name: "prod-bj-hosts-1a2b3c4d".into(),
            },
            vars_conf_ref: Some(ConfigMapRef {
                name: "prod-bj-vars-5e6f7a8b".into(),
            }),
            ssh_auth_ref: Some(SecretRef {
                name: "prod-bj-ssh".into(),
            }),
            source: OperationSource {
                commit: "a".repeat(40),
                revision: format!("main@sha1:{}", "a".repeat(40)),
                path: "clusters/prod-bj".into(),
            },
            queue_position: "00000001-0000".into(),
            ..Default::default()
        },
    );
    op.metadata.namespace = Some("kok-system".into());
    op.metadata.uid = Some("6f1c2f0e-0000-4000-8000-000000000001".into());
    op
}

fn hook(action: &str) -> Hook {
    Hook {
        action: action.into(),
        action_type: ActionType::Playbook,
        extra_args: vec![],
    }
}

fn golden(name: &str, op: &ClusterOperation) {
    let job = build_job(op, &JobConfig::default());
    let actual = serde_yaml::to_string(&job).expect("a Job serializes");
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &actual).expect("golden file is writable");
        println!("updated {}", path.display());
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "read {}: {e}; run with UPDATE_GOLDEN=1 to create it",
            path.display()
        )
    });
    pretty_assertions::assert_eq!(
        expected,
        actual,
        "{} differs; UPDATE_GOLDEN=1 rewrites it",
        path.display()
    );
}

#[test]
fn a_plain_playbook_job_matches_its_golden_file() {
    // add-node7 limits its hosts, so it renders with kok's default facts playbook.
    let mut op = operation("prod-bj-add-node7-0123abcd");
    op.spec.facts_playbook = Some(FactsPlaybook {
        path: kok::api::DEFAULT_FACTS_PLAYBOOK.into(),
        optional: true,
    });
    golden("job-playbook.yaml", &op);
}

#[test]
fn a_job_with_hooks_deadline_and_resources_matches_its_golden_file() {
    let mut op = operation("prod-bj-add-node7-0123abcd");
    op.spec.pre_hooks = vec![hook("ping.yml")];
    op.spec.post_hooks = vec![Hook {
        action: "scripts/notify.sh".into(),
        action_type: ActionType::Shell,
        extra_args: vec!["done it's".into()],
    }];
    op.spec.active_deadline_seconds = Some(7200);
    op.spec.service_account = Some("kok-runner".into());
    op.spec.resources =
        Some(serde_json::from_value(serde_json::json!({"limits": {"memory": "4Gi"}})).unwrap());
    golden("job-hooks.yaml", &op);
}

#[test]
fn a_shell_job_without_a_key_matches_its_golden_file() {
    let mut op = operation("prod-bj-reboot-0123abcd");
    op.spec.action_type = ActionType::Shell;
    op.spec.action = "scripts/reboot.sh".into();
    op.spec.ssh_auth_ref = None;
    golden("job-shell.yaml", &op);
}

#[test]
fn a_repository_playbook_job_mounts_its_pinned_files_and_matches_its_golden_file() {
    // hello is kept in the repository (playbooks/ beside clusters/): the Job mounts the files the render pinned
    // and runs the playbook from their copy; the post-hook is a playbook of the image.
    let mut op = operation("local-hello-0123abcd");
    op.spec.cluster = "local".into();
    op.spec.id = "hello".into();
    op.spec.action = "playbooks/hello.yml".into();
    op.spec.extra_args = vec![];
    op.spec.ssh_auth_ref = None;
    op.spec.source.path = "clusters/local".into();
    op.spec.post_hooks = vec![hook("cluster-info.yml")];
    op.spec.repository_files = vec![
        PinnedFile {
            path: "playbooks/hello.yml".into(),
            config_map: "local-file-1f2e3d4c".into(),
            gzip: false,
        },
        PinnedFile {
            path: "playbooks/roles/greet/templates/motd.j2".into(),
            config_map: "local-file-5a6b7c8d".into(),
            gzip: true,
        },
    ];
    golden("job-repository.yaml", &op);
}

#[test]
fn a_scheduled_run_with_a_long_name_gets_a_63_character_job_name() {
    let name = format!("{}-{}-0123abcd-202601020300", "c".repeat(40), "i".repeat(30));
    let op = operation(&name);
    let job = build_job(&op, &JobConfig::default());
    let job_name_ = job.metadata.name.clone().unwrap();
    assert_eq!(job_name_.len(), 63);
    assert_eq!(job_name_, job_name(&name));
    for value in job.metadata.labels.unwrap().values() {
        assert!(
            value.len() <= 63,
            "label value {value} is longer than 63 characters"
        );
    }
}

#[test]
fn a_plain_playbook_runs_through_the_entry_script_with_every_argument_quoted() {
    let op = operation("prod-bj-add-node7-0123abcd");
    let cmd = container_command(&op);
    assert_eq!(cmd.len(), 4);
    assert_eq!(
        [&cmd[0], &cmd[1], &cmd[3]],
        ["/bin/sh", "-c", "kok-entry"],
        "the script runs under /bin/sh, $0 = kok-entry"
    );
    assert_eq!(cmd[2], entry_script(&op));
    let (out, code) = run_with_recorder(&op, None);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "[-i]\n[<inventory>/hosts.yml]\n[--private-key]\n[/tmp/auth/ssh-privatekey]\n[-b]\n[scale.yml]\n\
         [--limit=node7]\nEND\n"
    );
}

/// Runs the entry script with /bin/sh, `ansible-playbook` replaced by a recorder that prints its argv one
/// argument per line followed by an end marker, and returns what it printed and the exit status.
fn run_with_recorder(op: &ClusterOperation, fail_on: Option<&str>) -> (String, i32) {
    let (out, _, code) = run_with_recorder_and_log(op, fail_on);
    (out, code)
}

/// [`run_with_recorder`], with the script's stderr (its `kok: ...` lines) as well.
fn run_with_recorder_and_log(op: &ClusterOperation, fail_on: Option<&str>) -> (String, String, i32) {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let recorder = bin.join("ansible-playbook");
    let fail = fail_on.map(|a| format!("for a in \"$@\"; do [ \"$a\" = '{a}' ] && exit 7; done\n"));
    std::fs::write(
        &recorder,
        format!(
            "#!/bin/sh\nprintf 'INVENTORY %s\\n' \"$KOK_INVENTORY\"\n{}for a in \"$@\"; do printf '[%s]\\n' \"$a\"; done\necho END\n",
            fail.unwrap_or_default()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&recorder, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let conf = dir.path().join("conf dir");
    conf::write_conf(&conf, "all: {}\n", "{}\n");
    let out = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(entry_script(op))
        .arg("kok-entry")
        .env("PATH", path)
        .env("TMPDIR", dir.path())
        .env("KOK_CONF_DIR", &conf)
        .env("KOK_AUTH_DIR", "/tmp/auth")
        .output()
        .expect("/bin/sh runs");
    // The writable inventory is a fresh directory per run: name it `<inventory>`.
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    let inventories: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("INVENTORY "))
        .map(str::to_string)
        .collect();
    for inventory in &inventories {
        assert!(
            inventory.starts_with(&dir.path().display().to_string()),
            "{inventory}"
        );
        text = text
            .replace(&format!("INVENTORY {inventory}\n"), "")
            .replace(inventory, "<inventory>");
    }
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    (text, log, out.status.code().unwrap_or(-1))
}

#[test]
fn hostile_arguments_reach_the_command_unchanged_through_the_entry_script() {
    let hostile: Vec<String> = vec![
        "two words".into(),
        "it's".into(),
        "\"double\"".into(),
        "$(touch /tmp/kok-pwned)".into(),
        "a; exit 3".into(),
        "`id`".into(),
        "$HOME".into(),
        "back\\slash".into(),
        "".into(),
        "new\nline".into(),
    ];
    let mut op = operation("prod-bj-add-node7-0123abcd");
    op.spec.pre_hooks = vec![hook("ping.yml")];
    op.spec.extra_args = hostile.clone();
    let (out, code) = run_with_recorder(&op, None);
    assert_eq!(code, 0, "output: {out}");
    let runs: Vec<&str> = out.split("END\n").filter(|s| !s.is_empty()).collect();
    assert_eq!(runs.len(), 2, "two commands ran: {out}");
    let mut expected = vec![
        "-i".to_string(),
        "<inventory>/hosts.yml".into(),
        "--private-key".into(),
        "/tmp/auth/ssh-privatekey".into(),
        "-b".into(),
        "scale.yml".into(),
    ];
    expected.extend(hostile);
    let rendered: String = expected.iter().map(|a| format!("[{a}]\n")).collect();
    assert_eq!(runs[1], rendered);
    assert!(runs[0].contains("[ping.yml]"));
    assert!(!std::path::Path::new("/tmp/kok-pwned").exists());
}

#[test]
fn the_facts_playbook_runs_first_without_the_limit_and_is_announced_first() {
    let dir = tempfile::tempdir().unwrap();
    let facts = dir.path().join("facts.yml");
    std::fs::write(&facts, "- hosts: all\n").unwrap();
    let mut op = operation("prod-bj-add-node7-0123abcd");
    op.spec.pre_hooks = vec![hook("ping.yml")];
    op.spec.facts_playbook = Some(FactsPlaybook {
        path: facts.display().to_string(),
        optional: true,
    });
    let (out, log, code) = run_with_recorder_and_log(&op, None);
    assert_eq!(code, 0, "{log}");
    let runs: Vec<&str> = out.split("END\n").filter(|s| !s.is_empty()).collect();
    assert_eq!(runs.len(), 3, "facts, pre-hook, action: {out}");
    assert_eq!(
        runs[0],
        format!(
            "[-i]\n[<inventory>/hosts.yml]\n[--private-key]\n[/tmp/auth/ssh-privatekey]\n[-b]\n[{}]\n",
            facts.display()
        ),
        "same inventory, key and -b; no limit"
    );
    assert!(runs[1].contains("[ping.yml]") && runs[2].ends_with("[scale.yml]\n[--limit=node7]\n"));
    assert_eq!(
        log.lines().next(),
        Some(
            format!(
                "kok: facts: {} (without --limit, for kubespray's fact cache)",
                facts.display()
            )
            .as_str()
        ),
        "{log}"
    );
}

#[test]
fn kok_s_default_facts_playbook_is_skipped_with_a_line_where_the_runner_lacks_it() {
    let mut op = operation("prod-bj-add-node7-0123abcd");
    op.spec.facts_playbook = Some(FactsPlaybook {
        path: "does/not/exist/facts.yml".into(),
        optional: true,
    });
    let (out, log, code) = run_with_recorder_and_log(&op, None);
    assert_eq!(code, 0, "{log}");
    assert_eq!(out.matches("END\n").count(), 1, "only the action ran: {out}");
    assert!(
        log.contains("kok: facts: does/not/exist/facts.yml is not in ")
            && log.contains("; going on without it"),
        "{log}"
    );

    // Configured (not optional): the playbook runs whether or not the file is there, and ansible says so.
    op.spec.facts_playbook.as_mut().unwrap().optional = false;
    let (out, _, code) = run_with_recorder_and_log(&op, Some("does/not/exist/facts.yml"));
    assert_eq!(code, 7);
    assert!(
        !out.contains("[scale.yml]"),
        "the action ran after the facts step failed: {out}"
    );
}

#[test]
fn the_entry_script_stops_at_the_first_failing_step_with_its_status() {
    let mut op = operation("prod-bj-add-node7-0123abcd");
    op.spec.pre_hooks = vec![hook("pre.yml")];
    op.spec.post_hooks = vec![hook("post.yml")];
    let (out, code) = run_with_recorder(&op, Some("scale.yml"));
    assert_eq!(code, 7);
    assert!(out.contains("[pre.yml]"));
    assert!(
        !out.contains("[post.yml]"),
        "post-hook ran after a failure: {out}"
    );
}

#[test]
fn a_shell_step_runs_the_script_with_its_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("step.sh");
    std::fs::write(
        &script,
        "for a in \"$@\"; do printf '<%s>' \"$a\"; done; echo \" conf=$KOK_CONF_DIR\"\n",
    )
    .unwrap();
    let mut op = operation("prod-bj-reboot-0123abcd");
    op.spec.action_type = ActionType::Shell;
    op.spec.action = script.display().to_string();
    op.spec.extra_args = vec!["a b".into(), "it's $(x)".into()];
    let conf = dir.path().join("conf");
    conf::write_conf(&conf, "all: {}\n", "{}\n");
    let script = entry_script(&op);
    assert!(
        script.contains("KOK_CONF_DIR=\"${KOK_CONF_DIR:-/conf}\""),
        "in a pod the inputs are at /conf"
    );
    let out = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .arg("kok-entry")
        .env("KOK_CONF_DIR", &conf)
        .env("TMPDIR", dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("<a b><it's $(x)> conf={}\n", conf.display())
    );
}

#[test]
fn a_shell_step_that_names_no_file_runs_the_program_of_that_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut op = operation("prod-bj-info-0123abcd");
    op.spec.action_type = ActionType::Shell;
    op.spec.action = "printf".into();
    op.spec.extra_args = vec!["<%s>".into(), "kube_control_plane[0] $(x)".into()];
    let conf = dir.path().join("conf");
    conf::write_conf(&conf, "all: {}\n", "{}\n");
    let out = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(entry_script(&op))
        .arg("kok-entry")
        .env("KOK_CONF_DIR", &conf)
        .env("TMPDIR", dir.path())
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "<kube_control_plane[0] $(x)>"
    );
}

/// A kubespray-layout operation: inventory.ini, two files of group_vars/ (one pinned compressed) and a
/// vault password Secret.
fn kubespray_layout_operation() -> (ClusterOperation, std::collections::BTreeMap<String, Vec<u8>>) {
    let mut op = operation("prod-bj-install-0123abcd");
    op.spec.inventory_file = Some("inventory.ini".into());
    op.spec.vars_conf_ref = None;
    op.spec.vault_password_ref = Some(SecretRef {
        name: "prod-vault".into(),
    });
    let big = format!("kube_version: v1.31.4\n{}", "# a long comment line\n".repeat(400));
    op.spec.vars_files = vec![
        PinnedFile {
            path: "group_vars/all/all.yml".into(),
            config_map: "prod-bj-file-11111111".into(),
            gzip: false,
        },
        PinnedFile {
            path: "group_vars/k8s_cluster/k8s-cluster.yml".into(),
            config_map: "prod-bj-file-22222222".into(),
            gzip: true,
        },
        PinnedFile {
            path: "host_vars/node 1.yml".into(),
            config_map: "prod-bj-file-11111111".into(),
            gzip: false,
        },
    ];
    // What each ConfigMap key holds, by (ConfigMap, key).
    let mut data = std::collections::BTreeMap::new();
    data.insert(
        "prod-bj-hosts-1a2b3c4d/inventory.ini".to_string(),
        b"[kube_control_plane]\nnode1\n".to_vec(),
    );
    data.insert(
        "prod-bj-file-11111111/file".to_string(),
        b"etcd_kubeadm_enabled: false\n".to_vec(),
    );
    data.insert(
        "prod-bj-file-22222222/file.gz".to_string(),
        kok::materialize::pinned::gzip(big.as_bytes()),
    );
    (op, data)
}

#[test]
fn a_kubespray_inventory_is_mounted_file_by_file_and_laid_out_at_its_paths_for_ansible() {
    let (op, data) = kubespray_layout_operation();
    let job = build_job(&op, &JobConfig::default());
    let pod = job.spec.unwrap().template.spec.unwrap();
    let volumes = pod.volumes.unwrap();
    let conf = volumes.iter().find(|v| v.name == "conf").unwrap();
    let sources = conf.projected.as_ref().unwrap().sources.as_ref().unwrap();
    // One source per ConfigMap: the inventory's and the two files' (one of them pinned at two paths).
    let items: Vec<(String, String, String)> = sources
        .iter()
        .flat_map(|s| {
            let cm = s.config_map.as_ref().unwrap();
            cm.items
                .iter()
                .flatten()
                .map(|i| (cm.name.clone(), i.key.clone(), i.path.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        items,
        [
            (
                "prod-bj-hosts-1a2b3c4d".into(),
                "inventory.ini".into(),
                "inventory.ini".into()
            ),
            (
                "prod-bj-file-11111111".into(),
                "file".into(),
                "group_vars/all/all.yml".into()
            ),
            (
                "prod-bj-file-11111111".into(),
                "file".into(),
                "host_vars/node 1.yml".into()
            ),
            (
                "prod-bj-file-22222222".into(),
                "file.gz".into(),
                "group_vars/k8s_cluster/k8s-cluster.yml.gz".into()
            ),
        ]
    );
    let vault = volumes.iter().find(|v| v.name == "vault").unwrap();
    let secret = vault.secret.as_ref().unwrap();
    assert_eq!(secret.secret_name.as_deref(), Some("prod-vault"));
    assert_eq!(secret.default_mode, Some(0o400));
    let container = &pod.containers[0];
    let env: Vec<(String, Option<String>)> = container
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone()))
        .collect();
    assert!(env.contains(&(
        "KOK_VAULT_PASSWORD_FILE".into(),
        Some("/kok/vault/password".into())
    )));

    // The kubelet's part: each item at its path under the mounted directory.
    let dir = tempfile::tempdir().unwrap();
    let mounted = dir.path().join("conf");
    for (cm, key, path) in &items {
        let file = mounted.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, &data[&format!("{cm}/{key}")]).unwrap();
    }
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let recorder = bin.join("ansible-playbook");
    std::fs::write(
        &recorder,
        "#!/bin/sh\nfor a in \"$@\"; do printf '[%s]\\n' \"$a\"; done\n\
         cd \"$KOK_INVENTORY\" && find . -type f | LC_ALL=C sort | while read -r f; do printf '%s %s\\n' \"$f\" \"$(head -n 1 \"$f\")\"; done\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&recorder, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(entry_script(&op))
        .arg("kok-entry")
        .env(
            "PATH",
            format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()),
        )
        .env("TMPDIR", dir.path())
        .env("KOK_CONF_DIR", &mounted)
        .env("KOK_AUTH_DIR", "/tmp/auth")
        .env("KOK_VAULT_PASSWORD_FILE", "/tmp/vault/password")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let args: Vec<&str> = text.lines().filter(|l| l.starts_with('[')).collect();
    assert!(args[1].ends_with("/inventory/inventory.ini]"), "{args:?}");
    assert_eq!(args[0], "[-i]");
    assert!(
        args.windows(2)
            .any(|w| w == ["[--vault-password-file]", "[/tmp/vault/password]"]),
        "{args:?}"
    );
    let files: Vec<&str> = text.lines().filter(|l| l.starts_with("./")).collect();
    assert_eq!(
        files,
        [
            "./group_vars/all/all.yml etcd_kubeadm_enabled: false",
            "./group_vars/k8s_cluster/k8s-cluster.yml kube_version: v1.31.4",
            "./host_vars/node 1.yml etcd_kubeadm_enabled: false",
            "./inventory.ini [kube_control_plane]",
        ],
        "the writable inventory holds every file at its path, the compressed one inflated"
    );
}

#[test]
fn a_run_with_preflight_false_says_first_that_the_rules_were_skipped() {
    let mut op = operation("prod-bj-add-node7-0123abcd");
    let (_, log, code) = run_with_recorder_and_log(&op, None);
    assert_eq!(code, 0);
    assert!(!log.contains("pre-flight"), "{log}");
    op.spec.preflight = Some(kok::api::OperationPreflight {
        skipped: true,
        findings: Vec::new(),
    });
    let (out, log, code) = run_with_recorder_and_log(&op, None);
    assert_eq!(code, 0, "{log}");
    assert!(out.contains("[scale.yml]"), "the run goes on: {out}");
    assert_eq!(
        log.lines().next(),
        Some("kok: pre-flight skipped (preflight: false in operations.yml)"),
        "{log}"
    );
}
