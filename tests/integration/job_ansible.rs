//! Runs the generated entry script with the real `ansible-playbook` on localhost, hooks included.

use std::path::Path;
use std::process::Command;

use crate::common::conf;
use crate::common::tools;

use kok::api::{ActionType, ClusterOperation, ClusterOperationSpec, ConfigMapRef, FactsPlaybook, Hook};
use kok::controller::job::{build_job, entry_script, JobConfig, ENV_REPOSITORY_DIR, REPOSITORY_DIR};
use kok::controller::summary::{log_tail, read_termination_message, RunReport, MAX_TERMINATION_MESSAGE};
use kok::report::status::{failure_words, summary_words};

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
            vars_conf_ref: Some(ConfigMapRef { name: "v".into() }),
            queue_position: "0".into(),
            ..Default::default()
        },
    )
}

fn run(op: &ClusterOperation, dir: &Path) -> std::process::Output {
    conf::write_conf(&dir.join("conf"), &local_hosts(), "greeting: hello from vars\n");
    entry_command(op, dir).output().expect("/bin/sh runs")
}

/// `op`'s entry script as a pod runs it, its inputs in `<dir>/conf` ([`conf::write_conf`]).
fn entry_command(op: &ClusterOperation, dir: &Path) -> Command {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(entry_script(op))
        .arg("kok-entry")
        .env("KOK_CONF_DIR", dir.join("conf"))
        .env("KOK_AUTH_DIR", dir.join("auth"))
        .env("ANSIBLE_LOCAL_TEMP", dir.join("tmp"))
        .env("ANSIBLE_NOCOLOR", "1")
        .env("PATH", tools::search_path());
    cmd
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

/// Runs `op`'s entry script like `run`, with the termination message going to a file; returns the exit
/// status, the merged output and what the commit status would say, read the way kok reads a pod.
fn run_for_summary(op: &ClusterOperation, dir: &Path, hosts: &str) -> (bool, String, RunReport, String) {
    conf::write_conf(&dir.join("conf"), hosts, "greeting: hello from vars\n");
    let termination = dir.join("termination-log");
    let out = entry_command(op, dir)
        .env("KOK_TERMINATION_LOG", &termination)
        .env("ANSIBLE_HOST_KEY_CHECKING", "False")
        .output()
        .expect("/bin/sh runs");
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let written = std::fs::read_to_string(&termination).unwrap_or_default();
    assert!(written.len() <= MAX_TERMINATION_MESSAGE, "{written}");
    // FallbackToLogsOnError: no message written and a failure means the kubelet keeps the log's tail.
    let message = if written.trim().is_empty() && !out.status.success() {
        let lines: Vec<String> = output.lines().map(str::to_string).collect();
        log_tail(&lines)
    } else {
        written
    };
    let report = read_termination_message(&message);
    let words = match (&report.failure, &report.summary) {
        (Some(f), _) if !out.status.success() => failure_words(f),
        (_, Some(s)) => summary_words(s),
        _ => String::new(),
    };
    (out.status.success(), output, report, words)
}

fn python() -> String {
    tools::command("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn local_hosts() -> String {
    format!(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n      ansible_python_interpreter: {}\n",
        python()
    )
}

fn playbook(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn simple_operation(action: String, pre_hooks: Vec<Hook>) -> ClusterOperation {
    ClusterOperation::new(
        "local-x-0123abcd",
        ClusterOperationSpec {
            cluster: "local".into(),
            id: "x".into(),
            digest: "0123abcd".into(),
            action,
            image: "unused".into(),
            pre_hooks,
            hosts_conf_ref: ConfigMapRef { name: "h".into() },
            vars_conf_ref: Some(ConfigMapRef { name: "v".into() }),
            queue_position: "0".into(),
            ..Default::default()
        },
    )
}

const CHANGES: &str = "- hosts: all\n  gather_facts: false\n  become: false\n  tasks:\n    - name: one\n      \
                       ansible.builtin.command: 'true'\n    - name: two\n      ansible.builtin.command: 'true'\n";

#[test]
fn a_successful_run_reports_hosts_and_changes() {
    if !tools::ansible_or_skip("a_successful_run_reports_hosts_and_changes") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let op = simple_operation(playbook(dir.path(), "ok.yml", CHANGES), vec![]);
    let (ok, output, report, words) = run_for_summary(&op, dir.path(), &local_hosts());
    assert!(ok, "{output}");
    let summary = report.summary.expect("a summary");
    assert_eq!(summary.host_count, 1);
    assert_eq!(summary.hosts["localhost"].changed, 2, "{output}");
    assert!(report.failure.is_none());
    assert_eq!(words, "1 host, 2 changed");
}

#[test]
fn a_failing_task_is_named_with_its_host_and_message() {
    if !tools::ansible_or_skip("a_failing_task_is_named_with_its_host_and_message") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let text = "- hosts: all\n  gather_facts: false\n  become: false\n  tasks:\n    - name: Stop if unsupported OS\n      \
                ansible.builtin.fail:\n        msg: Debian 9 is not supported\n";
    let op = simple_operation(playbook(dir.path(), "fail.yml", text), vec![]);
    let (ok, output, report, words) = run_for_summary(&op, dir.path(), &local_hosts());
    assert!(!ok, "{output}");
    let failure = report.failure.expect("a failure");
    assert_eq!(failure.host.as_deref(), Some("localhost"));
    assert_eq!(
        words,
        "failed at TASK [Stop if unsupported OS] on localhost: Debian 9 is not supported"
    );
    assert_eq!(report.summary.expect("summary").total.failed, 1);
}

#[test]
fn an_unreachable_host_is_named_with_the_ssh_error() {
    if !tools::ansible_or_skip("an_unreachable_host_is_named_with_the_ssh_error") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Port 1 on loopback: nothing listens there, so ssh is refused at once.
    let hosts = "all:\n  hosts:\n    node3:\n      ansible_host: 127.0.0.1\n      ansible_port: 1\n      \
                 ansible_user: nobody\n      ansible_ssh_common_args: -o ConnectTimeout=5\n";
    let text =
        "- hosts: all\n  gather_facts: false\n  tasks:\n    - name: ping\n      ansible.builtin.ping:\n";
    let op = simple_operation(playbook(dir.path(), "ping.yml", text), vec![]);
    let (ok, output, report, words) = run_for_summary(&op, dir.path(), hosts);
    assert!(!ok, "{output}");
    let failure = report.failure.expect("a failure");
    assert!(failure.unreachable, "{failure:?}");
    assert!(
        words.starts_with("node3 unreachable: ") && words.contains("port 1"),
        "{words}"
    );
}

#[test]
fn a_missing_playbook_is_reported_from_ansibles_error_line() {
    if !tools::ansible_or_skip("a_missing_playbook_is_reported_from_ansibles_error_line") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("does-not-exist.yml").display().to_string();
    let op = simple_operation(missing.clone(), vec![]);
    let (ok, output, report, words) = run_for_summary(&op, dir.path(), &local_hosts());
    assert!(!ok, "{output}");
    assert!(report.summary.is_none());
    assert!(
        words.starts_with("failed: ") && words.contains("could not be found") && words.contains(&missing),
        "{words}"
    );
}

#[test]
fn a_syntax_error_is_reported_from_ansibles_error_line() {
    if !tools::ansible_or_skip("a_syntax_error_is_reported_from_ansibles_error_line") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let op = simple_operation(
        playbook(
            dir.path(),
            "broken.yml",
            "- hosts: all\n  tasks:\n    - name: x\n      bogus_module_x: {}\n",
        ),
        vec![],
    );
    let (ok, output, report, words) = run_for_summary(&op, dir.path(), &local_hosts());
    assert!(!ok, "{output}");
    assert!(report.summary.is_none(), "{output}");
    assert!(
        words.starts_with("failed: ") && words.contains("bogus_module_x"),
        "{words}"
    );
}

#[test]
fn a_failing_pre_hook_is_named_in_the_summary() {
    if !tools::ansible_or_skip("a_failing_pre_hook_is_named_in_the_summary") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let op = operation(dir.path(), true);
    let (ok, output, report, words) = run_for_summary(&op, dir.path(), &local_hosts());
    assert!(!ok, "{output}");
    let failure = report.failure.expect("a failure");
    assert!(failure
        .step
        .as_deref()
        .is_some_and(|s| s.starts_with("pre-hook 1/1: ")));
    assert!(
        words.starts_with("pre-hook 1/1: ")
            && words.contains(" failed at TASK [fail] on localhost: hook failed on purpose"),
        "{words}"
    );
}

/// Runs `op`'s entry script ([`entry_command`]), asserts it succeeded and returns its log (stderr).
fn run_ok(op: &ClusterOperation, dir: &Path) -> String {
    let out = entry_command(op, dir).output().expect("/bin/sh runs");
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{log}");
    log
}

/// Three hosts on this machine (local connection): node1 sets `port` itself, node2 and node3 are in group
/// `workers`, whose `vars:` set `role` and `port`; `all: vars:` sets `zone`.
fn precedence_hosts() -> String {
    format!(
        "all:\n  vars:\n    ansible_connection: local\n    ansible_python_interpreter: {}\n    zone: from-hosts-all\n  \
         hosts:\n    node1:\n      port: 2201\n    node2:\n    node3:\n  children:\n    workers:\n      \
         vars:\n        role: worker\n        port: 2202\n      hosts:\n        node2:\n        node3:\n",
        python()
    )
}

/// A playbook writing `<dir>/vars-<host>` with the variables the precedence tests look at.
fn dump_playbook(dir: &Path) -> String {
    playbook(
        dir,
        "dump.yml",
        &format!(
            "- hosts: all\n  gather_facts: false\n  become: false\n  tasks:\n    - ansible.builtin.copy:\n        \
             dest: \"{}/vars-{{{{ inventory_hostname }}}}\"\n        content: \"port={{{{ port }}}} \
             role={{{{ role | default('-') }}}} zone={{{{ zone }}}} version={{{{ kube_version }}}}\"\n",
            dir.display()
        ),
    )
}

fn dumped(dir: &Path) -> Vec<String> {
    ["node1", "node2", "node3"]
        .iter()
        .map(|h| std::fs::read_to_string(dir.join(format!("vars-{h}"))).unwrap_or_default())
        .collect()
}

#[test]
fn vars_yml_is_the_group_variables_of_all_so_host_variables_in_hosts_yml_override_it() {
    if !tools::ansible_or_skip(
        "vars_yml_is_the_group_variables_of_all_so_host_variables_in_hosts_yml_override_it",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // vars.yml sets all four; hosts.yml sets port on node1 (host), role and port on workers (group), zone on all.
    let vars = "port: 22\nrole: control\nzone: from-vars\nkube_version: v1.31.4\n";
    conf::write_conf(&dir.path().join("conf"), &precedence_hosts(), vars);
    // A shell post-hook that asks ansible about /conf itself, as the example's hooks do.
    let hook = dir.path().join("hook.sh");
    std::fs::write(
        &hook,
        "ansible-inventory -i \"$KOK_CONF_DIR/hosts.yml\" --host node1 > \"$1/hook-node1.json\"\n\
         ansible-inventory -i \"$KOK_CONF_DIR\" --host node3 > \"$1/hook-node3.json\"\n",
    )
    .unwrap();
    let mut op = simple_operation(dump_playbook(dir.path()), vec![]);
    op.spec.post_hooks = vec![Hook {
        action: hook.display().to_string(),
        action_type: ActionType::Shell,
        extra_args: vec![dir.path().display().to_string()],
    }];
    run_ok(&op, dir.path());
    // ansible's precedence, as for kubespray's inventory/<cluster>/group_vars/all: a host variable of
    // hosts.yml outranks vars.yml; vars.yml (inventory group_vars/all) outranks the group `vars:` written in
    // hosts.yml, which apply where vars.yml sets nothing (node2/node3 have no port of their own: 22 wins over
    // the group's 2202, as it would under kubespray); vars.yml applies where nothing overrides it.
    assert_eq!(
        dumped(dir.path()),
        [
            "port=2201 role=control zone=from-vars version=v1.31.4",
            "port=22 role=control zone=from-vars version=v1.31.4",
            "port=22 role=control zone=from-vars version=v1.31.4",
        ]
    );
    let seen = |host: &str| {
        let text = std::fs::read_to_string(dir.path().join(format!("hook-{host}.json"))).unwrap();
        let vars: serde_json::Value = serde_json::from_str(&text).expect(&text);
        (
            vars["port"].as_i64(),
            vars["kube_version"].as_str().map(str::to_string),
        )
    };
    assert_eq!(seen("node1"), (Some(2201), Some("v1.31.4".to_string())));
    assert_eq!(seen("node3"), (Some(22), Some("v1.31.4".to_string())));
}

#[test]
fn group_vars_in_hosts_yml_apply_where_vars_yml_is_silent() {
    if !tools::ansible_or_skip("group_vars_in_hosts_yml_apply_where_vars_yml_is_silent") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    conf::write_conf(
        &dir.path().join("conf"),
        &precedence_hosts(),
        "kube_version: v1.31.4\n",
    );
    let op = simple_operation(dump_playbook(dir.path()), vec![]);
    run_ok(&op, dir.path());
    assert_eq!(
        dumped(dir.path()),
        [
            "port=2201 role=- zone=from-hosts-all version=v1.31.4",
            "port=2202 role=worker zone=from-hosts-all version=v1.31.4",
            "port=2202 role=worker zone=from-hosts-all version=v1.31.4",
        ]
    );
}

#[test]
fn a_repository_whose_vars_never_collide_with_host_vars_runs_as_it_did_with_extra_vars() {
    if !tools::ansible_or_skip(
        "a_repository_whose_vars_never_collide_with_host_vars_runs_as_it_did_with_extra_vars",
    ) {
        return;
    }
    // Host variables set port (node1) and group vars role/port (workers); vars.yml sets neither.
    let vars = "zone: from-vars\nkube_version: v1.31.4\n";
    let before = tempfile::tempdir().unwrap();
    let now = tempfile::tempdir().unwrap();
    // What kok ran before: ansible-playbook -i hosts.yml -e @vars.yml.
    std::fs::write(before.path().join("hosts.yml"), precedence_hosts()).unwrap();
    std::fs::write(before.path().join("vars.yml"), vars).unwrap();
    let out = tools::command("ansible-playbook")
        .arg("-i")
        .arg(before.path().join("hosts.yml"))
        .arg("-e")
        .arg(format!("@{}", before.path().join("vars.yml").display()))
        .arg(dump_playbook(before.path()))
        .env("ANSIBLE_LOCAL_TEMP", before.path().join("tmp"))
        .output()
        .expect("ansible-playbook runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    conf::write_conf(&now.path().join("conf"), &precedence_hosts(), vars);
    let op = simple_operation(dump_playbook(now.path()), vec![]);
    run_ok(&op, now.path());
    assert_eq!(dumped(now.path()), dumped(before.path()));
    assert_eq!(
        dumped(now.path())[1],
        "port=2202 role=worker zone=from-vars version=v1.31.4"
    );
}

/// A playbook that writes `<dir>/<label>-<host>` for every host it runs on.
fn touch_playbook(dir: &Path, label: &str) -> String {
    playbook(
        dir,
        &format!("{label}.yml"),
        &format!(
            "- hosts: all\n  gather_facts: false\n  become: false\n  tasks:\n    - ansible.builtin.copy:\n        \
             dest: \"{}/{label}-{{{{ inventory_hostname }}}}\"\n        content: ran\n",
            dir.display()
        ),
    )
}

fn ran_on(dir: &Path, label: &str) -> Vec<&'static str> {
    ["node1", "node2", "node3"]
        .into_iter()
        .filter(|h| dir.join(format!("{label}-{h}")).exists())
        .collect()
}

#[test]
fn a_limited_action_gets_the_facts_playbook_run_first_on_every_host() {
    if !tools::ansible_or_skip("a_limited_action_gets_the_facts_playbook_run_first_on_every_host") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    conf::write_conf(&dir.path().join("conf"), &precedence_hosts(), "{}\n");
    let mut op = simple_operation(touch_playbook(dir.path(), "scale"), vec![]);
    op.spec.extra_args = vec!["--limit=node3".into()];
    op.spec.facts_playbook = Some(FactsPlaybook {
        path: touch_playbook(dir.path(), "facts"),
        optional: true,
    });
    let log = run_ok(&op, dir.path());
    assert_eq!(
        ran_on(dir.path(), "facts"),
        ["node1", "node2", "node3"],
        "without the limit"
    );
    assert_eq!(ran_on(dir.path(), "scale"), ["node3"]);
    assert!(log.starts_with("kok: facts: "), "{log}");
}

#[test]
fn a_configured_facts_playbook_that_is_missing_fails_the_run_naming_the_facts_step() {
    if !tools::ansible_or_skip(
        "a_configured_facts_playbook_that_is_missing_fails_the_run_naming_the_facts_step",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut op = simple_operation(touch_playbook(dir.path(), "scale"), vec![]);
    op.spec.extra_args = vec!["--limit=localhost".into()];
    let missing = dir.path().join("site/facts.yml").display().to_string();
    op.spec.facts_playbook = Some(FactsPlaybook {
        path: missing.clone(),
        optional: false,
    });
    let (ok, output, report, words) = run_for_summary(&op, dir.path(), &local_hosts());
    assert!(!ok, "{output}");
    assert!(
        !dir.path().join("scale-localhost").exists(),
        "the action ran: {output}"
    );
    assert_eq!(
        report.failure.and_then(|f| f.step),
        Some(format!("facts: {missing}"))
    );
    assert!(words.contains("could not be found"), "{words}");
}

/// The example repository's `local` cluster, rendered as the pass renders it at one commit.
fn example_local_cluster() -> kok::materialize::DesiredCluster {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/repo-layout");
    let parsed = kok::layout::parse_repo(&kok::layout::DiskTree::new(&example), "clusters");
    let local = parsed
        .clusters
        .iter()
        .find(|c| c.name == "local")
        .expect("the example has a local cluster");
    let ctx = kok::materialize::RenderContext::new("kok-system", "main", "c".repeat(40));
    kok::materialize::render_cluster(local, &ctx)
}

#[test]
fn a_repository_playbook_runs_from_the_files_its_job_pins_whatever_the_working_directory_holds() {
    if !tools::ansible_or_skip("a_repository_playbook_runs_from_the_files_its_job_pins") {
        return;
    }
    let desired = example_local_cluster();
    let hello = desired
        .operations
        .iter()
        .find(|o| o.spec.id == "hello")
        .expect("the example's local cluster runs hello");
    let pinned: Vec<&str> = hello
        .spec
        .repository_files
        .iter()
        .map(|f| f.path.as_str())
        .collect();
    assert_eq!(
        pinned,
        ["playbooks/hello.yml"],
        "the render pins the repository's playbook"
    );

    // The kubelet's part: the Job's volumes laid out from the rendered ConfigMaps as they are written (a
    // file compressed when its ConfigMap is created), as the local runner does.
    let job = build_job(hello, &JobConfig::default());
    let pod = job.spec.unwrap().template.spec.unwrap();
    let container = &pod.containers[0];
    let sources = kok::local::volumes::Sources {
        config_maps: desired
            .config_maps
            .iter()
            .map(|cm| {
                let written = kok::materialize::render::written_config_map(cm).into_owned();
                (cm.metadata.name.clone().unwrap(), written)
            })
            .collect(),
        secrets: Default::default(),
    };
    let dir = tempfile::tempdir().unwrap();
    let plan = kok::local::volumes::plan(&pod, container, &sources).expect("every pinned ConfigMap is there");
    let mounted = kok::local::volumes::materialize(dir.path(), "hello", &plan).unwrap();
    let repository = mounted
        .host_dir(REPOSITORY_DIR)
        .expect("the repository files are mounted");
    assert!(
        repository.join("playbooks/hello.yml.gz").is_file(),
        "hello.yml (over 1 KiB) is mounted compressed: {:?}",
        plan.files.iter().map(|f| f.path.clone()).collect::<Vec<_>>()
    );

    // The runner image's working directory holds a different playbooks/hello.yml: the pinned one runs.
    let image = dir.path().join("image");
    std::fs::create_dir_all(image.join("playbooks")).unwrap();
    std::fs::write(
        image.join("playbooks/hello.yml"),
        "- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.fail:\n        msg: the image's\n",
    )
    .unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let mut cmd = Command::new("/bin/sh");
    cmd.args(container.command.as_ref().unwrap().iter().skip(1))
        .current_dir(&image)
        .env("KOK_CONF_DIR", mounted.host_dir("/conf").unwrap())
        .env("KOK_AUTH_DIR", dir.path().join("auth"))
        .env("KOK_TERMINATION_LOG", dir.path().join("termination-log"))
        .env("TMPDIR", &tmp)
        .env("ANSIBLE_LOCAL_TEMP", &tmp)
        .env("ANSIBLE_NOCOLOR", "1")
        .env("PATH", tools::search_path());
    // Saving credentials back to Secrets needs an API server (tests/integration/job_credentials.rs covers it).
    let needs_api = ["KOK_CREDENTIALS_SECRET", "KOK_KUBECONFIG_SECRET"];
    for var in container
        .env
        .iter()
        .flatten()
        .filter(|v| !needs_api.contains(&v.name.as_str()))
    {
        if let Some(value) = &var.value {
            cmd.env(&var.name, mounted.rewrite(value));
        }
    }
    assert_eq!(
        container
            .env
            .iter()
            .flatten()
            .find(|v| v.name == ENV_REPOSITORY_DIR)
            .and_then(|v| v.value.as_deref()),
        Some(REPOSITORY_DIR)
    );
    let out = cmd.output().expect("/bin/sh runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the run failed: {}\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    let mark = std::fs::read_to_string(tmp.join("kok-hello-local.txt")).expect("hello left its mark");
    assert_eq!(
        mark,
        format!("hello from kok (operation hello, commit {})\n", "c".repeat(40))
    );
    assert!(
        stderr.contains(&format!(
            "kok: playbooks/hello.yml is kept in the repository: it runs from the files commit {} pinned",
            "c".repeat(40)
        )),
        "{stderr}"
    );
}
