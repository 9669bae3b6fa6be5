//! The local runner running real `ansible-playbook` on a playbook kept in the repository, against localhost
//! with `ansible_connection: local`. Needs `ansible-core` (`scripts/setup.sh` installs it into `.venv`);
//! `KOK_SKIP_ANSIBLE=1` skips these tests with a printed reason.

use crate::local_runner_support;

use kok::api::ActionType;
use kok::local::runner::Workdir;
use kok::local::status;
use local_runner_support::*;

const PLAYBOOK: &str = "\
- hosts: all
  gather_facts: false
  become: false
  tasks:
    - name: write the marker
      ansible.builtin.copy:
        dest: \"{{ marker_path }}\"
        content: \"{{ greeting }} on {{ inventory_hostname }}\\n\"
";

const FAILING_PLAYBOOK: &str = "\
- hosts: all
  gather_facts: false
  become: false
  tasks:
    - name: give up
      ansible.builtin.fail:
        msg: this playbook always fails
";

#[tokio::test]
async fn a_playbook_from_the_pinned_commit_runs_with_real_ansible_on_localhost() -> anyhow::Result<()> {
    if !tools::ansible_or_skip("a_playbook_from_the_pinned_commit_runs_with_real_ansible_on_localhost") {
        return Ok(());
    }
    let env = Env::start().await?;
    let repo_dir = tempfile::tempdir()?;
    let repo = git2::Repository::init_bare(repo_dir.path())?;
    let pinned = commit(&repo, &[("site.yml", PLAYBOOK)])?;
    commit(&repo, &[("site.yml", FAILING_PLAYBOOK)])?;

    let out = tempfile::tempdir()?;
    let marker = out.path().join("marker");
    let mut op = operation("install", "site.yml", ActionType::Playbook);
    op.spec.source.commit = pinned.to_string();
    op.spec.extra_args = vec![
        "-e".into(),
        format!("marker_path={}", marker.display()),
        "-e".into(),
        "ansible_python_interpreter={{ ansible_playbook_python }}".into(),
    ];
    let runner = env.runner(Workdir::Checkout {
        repo_path: repo_dir.path().to_path_buf(),
    });
    let job = env.create_job(&op).await?;
    let done = env.wait_finished(&job).await?;
    runner.stop().await?;

    let log = env.log(&op)?;
    assert_eq!(
        condition(&done, "Complete").as_deref(),
        Some(status::REASON_COMPLETIONS_REACHED),
        "{log}"
    );
    assert_eq!(
        std::fs::read_to_string(&marker)?,
        "hello from vars on localhost\n"
    );
    assert!(log.contains("PLAY RECAP"), "{log}");
    let header = log.lines().next().unwrap_or_default();
    assert!(
        header.contains("command=[\"/bin/sh\",\"-c\",\"<script: "),
        "the header names the command: {log}"
    );
    assert!(
        log.contains("\nkok: action: site.yml\n"),
        "the step announces itself: {log}"
    );
    assert!(!log.contains(KEY_BODY), "{log}");
    Ok(())
}

#[tokio::test]
async fn a_failing_playbook_fails_the_job_with_its_message_in_the_log() -> anyhow::Result<()> {
    if !tools::ansible_or_skip("a_failing_playbook_fails_the_job_with_its_message_in_the_log") {
        return Ok(());
    }
    let env = Env::start().await?;
    let work = tempfile::tempdir()?;
    std::fs::write(work.path().join("fail.yml"), FAILING_PLAYBOOK)?;
    let mut op = operation("broken", "fail.yml", ActionType::Playbook);
    op.spec.extra_args = vec![
        "-e".into(),
        "ansible_python_interpreter={{ ansible_playbook_python }}".into(),
    ];
    let runner = env.runner(Workdir::Fixed(work.path().to_path_buf()));
    let job = env.create_job(&op).await?;
    let done = env.wait_finished(&job).await?;
    runner.stop().await?;

    let log = env.log(&op)?;
    assert_eq!(
        condition(&done, "Failed").as_deref(),
        Some(status::REASON_BACKOFF_LIMIT_EXCEEDED),
        "{log}"
    );
    assert!(log.contains("this playbook always fails"), "{log}");
    Ok(())
}
