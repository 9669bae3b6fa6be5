//! Runs the generated entry script with the real `ansible-playbook` on localhost, hooks included.

use std::path::Path;
use std::process::Command;

#[path = "common/tools.rs"]
mod tools;

use kok::api::{ActionType, ClusterOperation, ClusterOperationSpec, ConfigMapRef, Hook};
use kok::controller::job::entry_script;

/// A playbook that appends the line `<label> <marker_args> <greeting>` to `<dir>/order.log` (written
/// literally by lineinfile, so what arrives is what ansible received), and fails afterwards when asked.
fn marker_playbook(dir: &Path, label: &str, fail: bool) -> String {
    let log = dir.join("order.log");
    let mut tasks = format!(
        "- hosts: all\n  gather_facts: false\n  become: false\n  tasks:\n    - name: record\n      \
         ansible.builtin.lineinfile:\n        path: {}\n        create: true\n        \
         line: \"{label} {{{{ marker_args | default('') }}}} {{{{ greeting }}}}\"\n",
        log.display()
    );
    if fail {
        tasks
            .push_str("    - name: fail\n      ansible.builtin.fail:\n        msg: hook failed on purpose\n");
    }
    let path = dir.join(format!("{label}.yml"));
    std::fs::write(&path, tasks).unwrap();
    path.display().to_string()
}

/// The extra var handed to the action: a single quote, double quotes, `$()` and `;` must arrive as written.
const HOSTILE: &str = r#"it's "quoted" $(touch /tmp/kok-ansible-pwned); too"#;

fn operation(dir: &Path, fail_pre: bool) -> ClusterOperation {
    let hook = |label: &str, fail: bool| Hook {
        action: marker_playbook(dir, label, fail),
        action_type: ActionType::Playbook,
        extra_args: vec![],
    };
    ClusterOperation::new(
        "local-install-0123abcd",
        ClusterOperationSpec {
            cluster: "local".into(),
            id: "install".into(),
            digest: "0123abcd".into(),
            action: marker_playbook(dir, "main", false),
            action_type: ActionType::Playbook,
            extra_args: vec![
                "-e".into(),
                serde_json::json!({ "marker_args": HOSTILE }).to_string(),
            ],
            image: "unused".into(),
            pre_hooks: vec![hook("pre", fail_pre)],
            post_hooks: vec![hook("post", false)],
            hosts_conf_ref: ConfigMapRef { name: "h".into() },
            vars_conf_ref: ConfigMapRef { name: "v".into() },
            queue_position: "0".into(),
            ..Default::default()
        },
    )
}

fn run(op: &ClusterOperation, dir: &Path) -> std::process::Output {
    let conf = dir.join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    let python = tools::command("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    std::fs::write(
        conf.join("hosts.yml"),
        format!(
            "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n      ansible_python_interpreter: {python}\n"
        ),
    )
    .unwrap();
    std::fs::write(conf.join("vars.yml"), "greeting: hello from vars\n").unwrap();
    Command::new("/bin/sh")
        .arg("-c")
        .arg(entry_script(op))
        .arg("kok-entry")
        .env("KOK_CONF_DIR", &conf)
        .env("KOK_AUTH_DIR", dir.join("auth"))
        .env("ANSIBLE_LOCAL_TEMP", dir.join("tmp"))
        .env("ANSIBLE_NOCOLOR", "1")
        .env("PATH", tools::search_path())
        .output()
        .expect("/bin/sh runs")
}

#[test]
fn the_entry_script_runs_hooks_action_and_post_hooks_in_order_with_ansible() {
    if !tools::ansible_or_skip("the_entry_script_runs_hooks_action_and_post_hooks_in_order_with_ansible") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let op = operation(dir.path(), false);
    let out = run(&op, dir.path());
    let log = std::fs::read_to_string(dir.path().join("order.log")).unwrap_or_default();
    assert!(
        out.status.success(),
        "ansible run failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        log,
        format!("pre  hello from vars\nmain {HOSTILE} hello from vars\npost  hello from vars\n")
    );
    assert!(
        !Path::new("/tmp/kok-ansible-pwned").exists(),
        "an argument was run by a shell"
    );
}

#[test]
fn a_failing_pre_hook_stops_the_run_with_a_non_zero_exit() {
    if !tools::ansible_or_skip("a_failing_pre_hook_stops_the_run_with_a_non_zero_exit") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let op = operation(dir.path(), true);
    let out = run(&op, dir.path());
    let log = std::fs::read_to_string(dir.path().join("order.log")).unwrap_or_default();
    assert!(
        !out.status.success(),
        "the run succeeded although its pre-hook failed"
    );
    assert_eq!(log, "pre  hello from vars\n", "only the pre-hook ran");
}
