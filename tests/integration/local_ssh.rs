//! The local runner over real ssh: a playbook reaching 127.0.0.1 through the throwaway sshd with kubespray's
//! `ControlPersist`, its control sockets in the run's own directory, and no ssh master of the run left once the
//! run has ended, whether it finished or its Job was deleted. Needs ansible-core and sshd (`KOK_SKIP_SSH=1` or
//! `KOK_SKIP_ANSIBLE=1` skip these tests with a printed reason).

use crate::gitkit;
use crate::local_runner_support;

use kok::api::ActionType;
use kok::local::runner::Workdir;
use local_runner_support::*;

/// kubespray's ssh settings (its ansible.cfg), which leave a master running for 30 minutes after each run.
const ANSIBLE_CFG: &str = "[defaults]\nhost_key_checking = False\n\
    [ssh_connection]\nssh_args = -o ControlMaster=auto -o ControlPersist=30m -o UserKnownHostsFile=/dev/null\n";

/// Reaches the node over ssh twice (one master, reused), lists the control sockets from the controller side,
/// then sleeps on the node for `sleep` seconds.
fn playbook(marks: &std::path::Path, sleep: u32) -> String {
    format!(
        r#"- hosts: all
  gather_facts: false
  become: false
  tasks:
    - name: reach the node
      ansible.builtin.raw: echo reached
    - name: list the control sockets
      delegate_to: localhost
      ansible.builtin.shell: ls "$ANSIBLE_SSH_CONTROL_PATH_DIR" > {marks}/sockets
    - name: reach it again, then wait there
      ansible.builtin.raw: sleep {sleep}
"#,
        marks = marks.display()
    )
}

/// A work directory with ansible.cfg and the playbooks, the sshd's key in the `ssh` Secret, and an inventory
/// ConfigMap `ssh-hosts` with one node on the sshd's port.
async fn fixture(env: &Env, sshd: &gitkit::Sshd) -> anyhow::Result<tempfile::TempDir> {
    let work = tempfile::tempdir()?;
    std::fs::write(work.path().join("ansible.cfg"), ANSIBLE_CFG)?;
    std::fs::write(work.path().join("quick.yml"), playbook(work.path(), 0))?;
    std::fs::write(work.path().join("slow.yml"), playbook(work.path(), 60))?;
    env.set_ssh_key(&std::fs::read_to_string(sshd.file("user_key"))?)
        .await?;
    let user = String::from_utf8(std::process::Command::new("id").arg("-un").output()?.stdout)?;
    let hosts = format!(
        "all:\n  hosts:\n    node1:\n      ansible_host: 127.0.0.1\n      ansible_port: {}\n      \
         ansible_user: {}\n      ansible_python_interpreter: \"{{{{ ansible_playbook_python }}}}\"\n",
        sshd.port,
        user.trim()
    );
    env.config_map("ssh-hosts", "hosts.yml", &hosts).await?;
    Ok(work)
}

fn skip(test: &str) -> bool {
    gitkit::skip_servers("ssh") || !tools::ansible_or_skip(test)
}

fn ssh_operation(id: &str, playbook: &str) -> kok::api::ClusterOperation {
    let mut op = operation(id, playbook, ActionType::Playbook);
    op.spec.hosts_conf_ref.name = "ssh-hosts".into();
    op
}

/// Starts operation `id` running the slow playbook and waits until it has reached the node; returns its work
/// directory, runner, operation, Job and control directory, after checking that its ssh master runs.
async fn slow_run_on_the_node(
    env: &Env,
    sshd: &gitkit::Sshd,
    id: &str,
) -> anyhow::Result<(
    tempfile::TempDir,
    Runner,
    kok::api::ClusterOperation,
    String,
    String,
)> {
    let work = fixture(env, sshd).await?;
    let op = ssh_operation(id, "slow.yml");
    let runner = env.runner(Workdir::Fixed(work.path().to_path_buf()));
    let job = env.create_job(&op).await?;
    let control = run_dir(env, &job).await?.join("cp").display().to_string();
    let sockets = work.path().join("sockets");
    wait_until("the playbook to reach the node", || sockets.exists()).await?;
    assert!(
        !processes_mentioning(&control).is_empty(),
        "while the run runs, its ssh master does"
    );
    Ok((work, runner, op, job, control))
}

#[tokio::test]
async fn a_finished_run_leaves_no_ssh_master_behind() -> anyhow::Result<()> {
    if skip("a_finished_run_leaves_no_ssh_master_behind") {
        return Ok(());
    }
    let env = Env::start().await?;
    let sshd = gitkit::Sshd::start();
    let work = fixture(&env, &sshd).await?;
    let op = ssh_operation("quick", "quick.yml");
    let runner = env.runner(Workdir::Fixed(work.path().to_path_buf()));
    let job = env.create_job(&op).await?;
    let control = run_dir(&env, &job).await?.join("cp");
    let done = env.wait_finished(&job).await?;
    runner.stop().await?;

    assert_completed(&done, &env.log(&op)?);
    let sockets = std::fs::read_to_string(work.path().join("sockets"))?;
    assert!(
        !sockets.trim().is_empty(),
        "the run's ssh master had its socket in the run's directory"
    );
    let left = processes_mentioning(&control.display().to_string());
    assert!(left.is_empty(), "ssh processes of the run outlived it: {left:?}");
    assert!(!control.exists());
    Ok(())
}

#[tokio::test]
async fn a_deleted_jobs_ssh_masters_end_with_it() -> anyhow::Result<()> {
    if skip("a_deleted_jobs_ssh_masters_end_with_it") {
        return Ok(());
    }
    let env = Env::start().await?;
    let sshd = gitkit::Sshd::start();
    let (_work, runner, op, job, control) = slow_run_on_the_node(&env, &sshd, "slow").await?;

    env.delete_job(&job, &op).await?;
    runner.stop().await?;
    let left = processes_mentioning(&control);
    assert!(left.is_empty(), "ssh processes of the run outlived it: {left:?}");
    Ok(())
}

#[tokio::test]
async fn stopping_the_runner_ends_the_ssh_masters_of_its_runs() -> anyhow::Result<()> {
    if skip("stopping_the_runner_ends_the_ssh_masters_of_its_runs") {
        return Ok(());
    }
    let env = Env::start().await?;
    let sshd = gitkit::Sshd::start();
    let (_work, runner, op, _job, control) = slow_run_on_the_node(&env, &sshd, "stopped").await?;

    runner.stop().await?;
    let left = processes_mentioning(&control);
    assert!(
        left.is_empty(),
        "ssh processes of the run outlived kok's stop: {left:?}"
    );
    assert!(env.log(&op)?.contains("kok stopped while the Job ran"));
    Ok(())
}
