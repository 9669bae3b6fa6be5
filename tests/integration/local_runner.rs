//! The local Job runner against testkit's API server: Jobs built by the controller's Job builder run on this
//! machine with /bin/sh, and their status, log, volumes and processes are checked.

use crate::local_runner_support;

use std::path::Path;

use k8s_openapi::api::batch::v1::Job;
use kok::api::{ActionType, ConfigMapRef, Hook};
use kok::local::runner::Workdir;
use kok::local::status;
use local_runner_support::*;

#[tokio::test]
async fn a_job_runs_on_the_host_and_completes_with_its_output_in_the_log() -> anyhow::Result<()> {
    let env = Env::start().await?;
    let work = tempfile::tempdir()?;
    let dirs_file = work.path().join("dirs");
    std::fs::write(
        work.path().join("check.sh"),
        format!(
            "echo \"hello from $KOK_CLUSTER/$KOK_OPERATION at $KOK_COMMIT\"\n\
             echo \"key mode $(stat -c %a \"$KOK_AUTH_DIR/ssh-privatekey\")\"\n\
             cat \"$KOK_CONF_DIR/hosts.yml\"\n\
             echo to stderr >&2\n\
             cat \"$KOK_AUTH_DIR/ssh-privatekey\"\n\
             echo \"$KOK_CONF_DIR\" > {}\n\
             touch marker\n",
            dirs_file.display()
        ),
    )?;
    let op = operation("install", "check.sh", ActionType::Shell);
    let runner = env.runner(Workdir::Fixed(work.path().to_path_buf()));
    let job = env.create_job(&op).await?;

    let done = env.wait_finished(&job).await?;
    runner.stop().await?;

    let st = done.status.clone().unwrap_or_default();
    assert_eq!(st.succeeded, Some(1), "{st:?}");
    assert_eq!(st.active, Some(0));
    assert!(st.completion_time.is_some());
    assert_completed(&done, "");
    assert!(
        work.path().join("marker").exists(),
        "the command ran in the workdir"
    );

    let log = env.log(&op)?;
    assert!(
        log.contains("hello from a/install at 0123456789abcdef0123456789abcdef01234567"),
        "{log}"
    );
    assert!(
        log.contains("key mode 400"),
        "the key file was mode 0400 while running: {log}"
    );
    assert!(log.contains(HOSTS_YML.trim_end()), "{log}");
    assert!(log.contains("to stderr"), "{log}");
    assert!(!log.contains(KEY_BODY), "the key never reaches the log: {log}");
    assert!(log.contains("<redacted>"), "{log}");
    assert!(
        log.lines()
            .next()
            .is_some_and(|l| l.starts_with("# kok-local-runner start=")),
        "{log}"
    );

    let conf_dir = std::fs::read_to_string(&dirs_file)?;
    let private = Path::new(conf_dir.trim())
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf);
    let private = private.ok_or_else(|| anyhow::anyhow!("unexpected conf dir {conf_dir}"))?;
    assert!(
        private
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("kok-")),
        "{private:?}"
    );
    assert!(
        !private.exists(),
        "the private directory {private:?} is removed afterwards"
    );
    Ok(())
}

#[tokio::test]
async fn arguments_pointing_into_mounts_are_rewritten_to_the_host_copies() -> anyhow::Result<()> {
    let env = Env::start().await?;
    let work = tempfile::tempdir()?;
    let op = operation("paths", "unused", ActionType::Playbook);
    let mut job = kok::controller::job::build_job(&op, &Default::default());
    set_command(
        &mut job,
        &[
            "/bin/sh",
            "-c",
            "cat \"$1\"; case \"$2\" in @/*) cat \"${2#@}\";; esac; cat \"${3#--key=}\" > /dev/null && echo key readable",
            "sh",
            "/conf/hosts.yml",
            "@/conf/group_vars/all.yml",
            "--key=/auth/ssh-privatekey",
        ],
    );
    let runner = env.runner(Workdir::Fixed(work.path().to_path_buf()));
    let job = env.create(job).await?;
    let done = env.wait_finished(&job).await?;
    runner.stop().await?;

    let log = env.log(&op)?;
    assert_completed(&done, &log);
    assert!(
        log.contains(HOSTS_YML.trim_end()) && log.contains(VARS_YML.trim_end()),
        "{log}"
    );
    assert!(log.contains("key readable"), "{log}");
    Ok(())
}

#[tokio::test]
async fn a_failing_command_fails_the_job_with_backoff_limit_exceeded() -> anyhow::Result<()> {
    let env = Env::start().await?;
    let work = tempfile::tempdir()?;
    std::fs::write(work.path().join("fail.sh"), "echo about to fail\nexit 3\n")?;
    let op = operation("broken", "fail.sh", ActionType::Shell);
    let runner = env.runner(Workdir::Fixed(work.path().to_path_buf()));
    let job = env.create_job(&op).await?;
    let done = env.wait_finished(&job).await?;
    runner.stop().await?;

    let st = done.status.clone().unwrap_or_default();
    assert_eq!(st.failed, Some(1));
    assert_eq!(st.succeeded, None);
    assert_eq!(st.completion_time, None);
    assert_eq!(
        condition(&done, "FailureTarget").as_deref(),
        Some("BackoffLimitExceeded")
    );
    assert_eq!(
        condition(&done, "Failed").as_deref(),
        Some("BackoffLimitExceeded")
    );
    // The status also says which directory ran the image, which --image-workdir does not map.
    let said = message(&done, "Failed").unwrap_or_default();
    let workdir = work.path().display();
    assert_eq!(
        said,
        format!(
            "Job has reached the specified backoff limit (image {} is not mapped by --image-workdir; \
             ran in {workdir} (--workdir))",
            kok::api::DEFAULT_IMAGE
        )
    );
    let log = env.log(&op)?;
    assert!(log.contains("about to fail"), "{log}");
    assert!(
        log.contains("result=Failed reason=BackoffLimitExceeded exit=3"),
        "{log}"
    );
    Ok(())
}

#[tokio::test]
async fn a_job_past_its_deadline_is_killed_and_fails_with_deadline_exceeded() -> anyhow::Result<()> {
    let env = Env::start().await?;
    let work = tempfile::tempdir()?;
    std::fs::write(
        work.path().join("slow.sh"),
        "sleep 30 &\necho $! > sleep.pid\necho $$ > sh.pid\nwait\ntouch finished\n",
    )?;
    let mut op = operation("slow", "slow.sh", ActionType::Shell);
    op.spec.active_deadline_seconds = Some(1);
    let runner = env.runner(Workdir::Fixed(work.path().to_path_buf()));
    let job = env.create_job(&op).await?;
    let done = env.wait_finished(&job).await?;
    runner.stop().await?;

    assert_eq!(condition(&done, "Failed").as_deref(), Some("DeadlineExceeded"));
    assert!(message(&done, "Failed")
        .is_some_and(|m| m.starts_with("Job was active longer than specified deadline (image ")));
    assert_eq!(done.status.as_ref().and_then(|s| s.failed), Some(1));
    for pid_file in ["sh.pid", "sleep.pid"] {
        let pid = std::fs::read_to_string(work.path().join(pid_file))?;
        assert!(!alive(pid.trim()), "{pid_file} ({}) was killed", pid.trim());
    }
    assert!(
        !work.path().join("finished").exists(),
        "the script never got past its sleep"
    );
    let log = env.log(&op)?;
    assert!(log.contains("reason=DeadlineExceeded"), "{log}");
    Ok(())
}

#[tokio::test]
async fn a_job_started_before_kok_stopped_is_failed_on_restart_and_never_run_twice() -> anyhow::Result<()> {
    let env = Env::start().await?;
    let work = tempfile::tempdir()?;
    std::fs::write(
        work.path().join("long.sh"),
        "echo run >> runs\necho $$ > sh.pid\nexec sleep 30\n",
    )?;
    std::fs::write(work.path().join("quick.sh"), "echo quick >> quick-runs\n")?;
    let long = operation("long", "long.sh", ActionType::Shell);

    let first = env.runner(Workdir::Fixed(work.path().to_path_buf()));
    let long_job = env.create_job(&long).await?;
    let pid_file = work.path().join("sh.pid");
    wait_until("the long Job to start its process", || pid_file.exists()).await?;
    first.stop().await?;

    let pid = std::fs::read_to_string(&pid_file)?;
    assert!(!alive(pid.trim()), "stopping the runner killed the Job's process");
    let stopped: Job = env.jobs.get(&long_job).await?;
    assert!(status::start_time(&stopped).is_some() && !status::is_finished(&stopped));

    // Created while no runner runs: not started yet, so the next runner starts it normally.
    let quick = operation("quick", "quick.sh", ActionType::Shell);
    let quick_job = env.create_job(&quick).await?;

    let second = env.runner(Workdir::Fixed(work.path().to_path_buf()));
    let lost = env.wait_finished(&long_job).await?;
    let ran = env.wait_finished(&quick_job).await?;
    second.stop().await?;

    assert_eq!(
        condition(&lost, "Failed").as_deref(),
        Some(status::REASON_RUNNER_RESTARTED)
    );
    assert!(message(&lost, "Failed").is_some_and(|m| m.contains("rerun")));
    assert_eq!(
        std::fs::read_to_string(work.path().join("runs"))?,
        "run\n",
        "the long Job ran once"
    );
    assert_completed(&ran, "");
    assert_eq!(
        std::fs::read_to_string(work.path().join("quick-runs"))?,
        "quick\n"
    );
    let log = env.log(&long)?;
    assert!(log.contains("reason=RunnerRestarted"), "{log}");
    Ok(())
}

#[tokio::test]
async fn hooks_run_in_order_through_the_entry_script() -> anyhow::Result<()> {
    let env = Env::start().await?;
    let work = tempfile::tempdir()?;
    std::fs::write(work.path().join("step.sh"), "echo \"step $1\" >> steps\n")?;
    let mut op = operation("hooked", "step.sh", ActionType::Shell);
    op.spec.extra_args = vec!["main".into()];
    let hook = |arg: &str| Hook {
        action: "step.sh".into(),
        action_type: ActionType::Shell,
        extra_args: vec![arg.into()],
    };
    op.spec.pre_hooks = vec![hook("pre")];
    op.spec.post_hooks = vec![hook("post")];
    let runner = env.runner(Workdir::Fixed(work.path().to_path_buf()));
    let job = env.create_job(&op).await?;
    let done = env.wait_finished(&job).await?;
    runner.stop().await?;

    assert_completed(&done, "");
    assert_eq!(
        std::fs::read_to_string(work.path().join("steps"))?,
        "step pre\nstep main\nstep post\n"
    );
    Ok(())
}

#[tokio::test]
async fn actions_run_from_the_operations_commit_in_checkout_mode() -> anyhow::Result<()> {
    let env = Env::start().await?;
    let repo_dir = tempfile::tempdir()?;
    let repo = git2::Repository::init_bare(repo_dir.path())?;
    let pinned = commit(&repo, &[("ops/say.sh", "echo pinned version; pwd > \"$OUT\"\n")])?;
    commit(&repo, &[("ops/say.sh", "echo later version\n")])?;

    let out = tempfile::tempdir()?;
    let mut op = operation("say", "ops/say.sh", ActionType::Shell);
    op.spec.source.commit = pinned.to_string();
    let mut job = kok::controller::job::build_job(&op, &Default::default());
    add_env(&mut job, "OUT", &out.path().join("cwd").display().to_string());
    let runner = env.runner(Workdir::Checkout {
        repo_path: repo_dir.path().to_path_buf(),
    });
    let job = env.create(job).await?;
    let done = env.wait_finished(&job).await?;
    runner.stop().await?;

    let log = env.log(&op)?;
    assert_completed(&done, &log);
    assert!(
        log.contains("pinned version") && !log.contains("later version"),
        "{log}"
    );
    let cwd = std::fs::read_to_string(out.path().join("cwd"))?;
    assert!(
        !Path::new(cwd.trim()).exists(),
        "the checkout {cwd} is removed afterwards"
    );
    Ok(())
}

#[tokio::test]
async fn a_missing_config_map_fails_the_job_without_running_it() -> anyhow::Result<()> {
    let env = Env::start().await?;
    let work = tempfile::tempdir()?;
    std::fs::write(work.path().join("never.sh"), "touch ran\n")?;
    let mut op = operation("orphan", "never.sh", ActionType::Shell);
    op.spec.vars_conf_ref = Some(ConfigMapRef {
        name: "a-vars-missing".into(),
    });
    let runner = env.runner(Workdir::Fixed(work.path().to_path_buf()));
    let job = env.create_job(&op).await?;
    let done = env.wait_finished(&job).await?;
    runner.stop().await?;

    assert_eq!(
        condition(&done, "Failed").as_deref(),
        Some(status::REASON_RUNNER_SETUP_FAILED)
    );
    let msg = message(&done, "Failed").unwrap_or_default();
    assert!(msg.contains("a-vars-missing"), "{msg}");
    assert!(!work.path().join("ran").exists());
    assert!(env.log(&op)?.contains("a-vars-missing"));
    Ok(())
}

#[tokio::test]
async fn kok_logs_prints_a_run_by_operation_job_or_cluster_and_id() -> anyhow::Result<()> {
    let env = Env::start().await?;
    let work = tempfile::tempdir()?;
    std::fs::write(work.path().join("say.sh"), "echo the output of ping\n")?;
    let op = operation("ping", "say.sh", ActionType::Shell);
    let runner = env.runner(Workdir::Fixed(work.path().to_path_buf()));
    let job = env.create_job(&op).await?;
    env.wait_finished(&job).await?;
    runner.stop().await?;

    let kok = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_kok"))
            .args(args)
            .arg("--state-dir")
            .arg(env.state.path())
            .env_remove("KOK_STATE_DIR")
            .output()
    };
    for query in ["a-ping-0123abcd", job.as_str(), "a/ping"] {
        let out = kok(&["logs", query])?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "kok logs {query}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("the output of ping"),
            "kok logs {query}: {stdout}"
        );
    }
    let followed = kok(&["logs", "--follow", "a/ping"])?;
    assert!(
        followed.status.success(),
        "a finished run is followed to its end and kok logs returns"
    );

    let missing = kok(&["logs", "a/nothing"])?;
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success());
    assert!(
        stderr.contains("no log for \"a/nothing\"") && stderr.contains("a-ping-0123abcd (a/ping)"),
        "{stderr}"
    );
    Ok(())
}

#[tokio::test]
async fn a_job_deleted_while_running_has_its_process_killed() -> anyhow::Result<()> {
    let env = Env::start().await?;
    let work = tempfile::tempdir()?;
    std::fs::write(
        work.path().join("long.sh"),
        "echo $$ > sh.pid\nsleep 30\ntouch finished\n",
    )?;
    let op = operation("doomed", "long.sh", ActionType::Shell);
    let runner = env.runner(Workdir::Fixed(work.path().to_path_buf()));
    let job = env.create_job(&op).await?;
    let pid_file = work.path().join("sh.pid");
    wait_until("the Job to start its process", || pid_file.exists()).await?;
    let pid = std::fs::read_to_string(&pid_file)?;

    env.delete_job(&job, &op).await?;
    runner.stop().await?;

    assert!(!alive(pid.trim()), "the process of the deleted Job was killed");
    assert!(!work.path().join("finished").exists());
    Ok(())
}

#[tokio::test]
async fn a_job_whose_process_ended_before_kok_stopped_gets_the_outcome_its_log_recorded() -> anyhow::Result<()>
{
    let env = Env::start().await?;
    let work = tempfile::tempdir()?;
    std::fs::write(work.path().join("never.sh"), "touch ran\n")?;
    let op = operation("recorded", "never.sh", ActionType::Shell);
    let job = env.create_job(&op).await?;
    // What an earlier runner leaves when kok stops right after the process ended: a started Job and a log
    // whose last run has its end line.
    let start = jiff::Timestamp::now();
    let patch = kok::local::status::started(start);
    env.jobs
        .patch_status(&job, &Default::default(), &kube::api::Patch::Merge(&patch))
        .await?;
    let header = kok::local::logs::Header {
        start: start.to_string(),
        job: job.clone(),
        ..Default::default()
    };
    let mut log = kok::local::logs::LogWriter::open(&env.log_path(&op), Vec::new())?;
    log.write_line(header.line(work.path(), &["/bin/sh".into()]).as_bytes())?;
    log.write_line(kok::local::logs::end_line("t", "Succeeded", "CompletionsReached", Some(0)).as_bytes())?;

    let runner = env.runner(Workdir::Fixed(work.path().to_path_buf()));
    let done = env.wait_finished(&job).await?;
    runner.stop().await?;

    assert_completed(&done, "");
    assert!(!work.path().join("ran").exists(), "the Job was not run again");
    Ok(())
}

/// A shell script that counts its run, says it started, waits for `go` in its directory, then exits `code`.
fn waiting_script(code: i32) -> String {
    format!("echo run >> runs\necho $$ > sh.pid\necho started\nwhile [ ! -e go ]; do sleep 0.1; done\necho went on\nexit {code}\n")
}

/// Starts operation `id` running [`waiting_script`] with exit status `code` (and `deadline` seconds) under a
/// first runner, once its process has started; returns its work directory, operation, runner and Job.
async fn waiting_run(
    env: &Env,
    id: &str,
    code: i32,
    deadline: Option<i64>,
) -> anyhow::Result<(tempfile::TempDir, kok::api::ClusterOperation, Runner, String)> {
    let work = tempfile::tempdir()?;
    std::fs::write(work.path().join("wait.sh"), waiting_script(code))?;
    let mut op = operation(id, "wait.sh", ActionType::Shell);
    op.spec.active_deadline_seconds = deadline;
    let first = env.runner(Workdir::Fixed(work.path().to_path_buf()));
    let job = env.create_job(&op).await?;
    let pid_file = work.path().join("sh.pid");
    wait_until("the Job to start its process", || pid_file.exists()).await?;
    Ok((work, op, first, job))
}

#[tokio::test]
async fn a_run_outlives_a_crashed_runner_and_the_next_one_reports_its_real_outcome() -> anyhow::Result<()> {
    let env = Env::start().await?;
    let (work, op, first, job) = waiting_run(&env, "survivor", 3, None).await?;
    let pid_file = work.path().join("sh.pid");
    first.crash().await;

    let pid = std::fs::read_to_string(&pid_file)?;
    assert!(alive(pid.trim()), "the run outlived the runner");
    // The process writes on while no runner runs, and the next runner picks it up while it still runs.
    let second = env.runner(Workdir::Fixed(work.path().to_path_buf()));
    let log_path = env.log_path(&op);
    wait_until("the second runner to pick the run up", || {
        std::fs::read_to_string(&log_path).is_ok_and(|l| l.contains("picked this run up again"))
    })
    .await?;
    std::fs::write(work.path().join("go"), "")?;
    let done = env.wait_finished(&job).await?;
    second.stop().await?;

    assert_eq!(
        condition(&done, "Failed").as_deref(),
        Some(status::REASON_BACKOFF_LIMIT_EXCEEDED),
        "the status is the script's own exit status, not RunnerRestarted"
    );
    assert_eq!(std::fs::read_to_string(work.path().join("runs"))?, "run\n");
    let log = env.log(&op)?;
    assert!(log.contains("its process") && log.contains("still runs"), "{log}");
    assert_eq!(log.matches("started\n").count(), 1, "no line copied twice: {log}");
    assert!(
        log.contains("went on\n"),
        "output after the crash reached the log: {log}"
    );
    assert!(
        log.contains("result=Failed reason=BackoffLimitExceeded exit=3"),
        "{log}"
    );
    assert!(
        !run_dir(&env, &job).await?.exists(),
        "the run's directory is gone once its status is written"
    );
    Ok(())
}

#[tokio::test]
async fn a_run_that_ended_while_no_runner_ran_gets_its_recorded_outcome() -> anyhow::Result<()> {
    let env = Env::start().await?;
    let (work, op, first, job) = waiting_run(&env, "finisher", 0, None).await?;
    let exit = run_dir(&env, &job).await?.join("exit");
    first.crash().await;
    std::fs::write(work.path().join("go"), "")?;
    wait_until("the run to record its exit status", || exit.exists()).await?;

    let second = env.runner(Workdir::Fixed(work.path().to_path_buf()));
    let done = env.wait_finished(&job).await?;
    second.stop().await?;
    assert_completed(&done, "");
    let log = env.log(&op)?;
    assert!(log.contains("it had ended with exit status 0"), "{log}");
    assert!(log.contains("went on\n"), "{log}");
    assert_eq!(std::fs::read_to_string(work.path().join("runs"))?, "run\n");
    Ok(())
}

#[tokio::test]
async fn the_deadline_of_a_picked_up_run_still_holds() -> anyhow::Result<()> {
    let env = Env::start().await?;
    let (work, _op, first, job) = waiting_run(&env, "late", 0, Some(2)).await?;
    let pid_file = work.path().join("sh.pid");
    first.crash().await;

    let second = env.runner(Workdir::Fixed(work.path().to_path_buf()));
    let done = env.wait_finished(&job).await?;
    second.stop().await?;
    assert_eq!(
        condition(&done, "Failed").as_deref(),
        Some(status::REASON_DEADLINE_EXCEEDED)
    );
    let pid = std::fs::read_to_string(&pid_file)?;
    assert!(!alive(pid.trim()), "the process past its deadline was killed");
    Ok(())
}

#[tokio::test]
async fn a_job_deleted_while_no_runner_ran_has_its_process_killed_by_the_next() -> anyhow::Result<()> {
    let env = Env::start().await?;
    let (work, op, first, job) = waiting_run(&env, "orphan", 0, None).await?;
    let pid_file = work.path().join("sh.pid");
    let dir = run_dir(&env, &job).await?;
    first.crash().await;
    env.jobs.delete(&job, &Default::default()).await?;

    let second = env.runner(Workdir::Fixed(work.path().to_path_buf()));
    let pid = std::fs::read_to_string(&pid_file)?;
    wait_until("the orphaned process to be killed", || !alive(pid.trim())).await?;
    wait_until("its run directory to be removed", || !dir.exists()).await?;
    second.stop().await?;
    let log = env.log(&op)?;
    assert!(log.contains("deleted while kok was stopped"), "{log}");
    assert!(log.contains("result=Deleted"), "{log}");
    Ok(())
}

#[tokio::test]
async fn a_run_keeps_its_temporary_files_and_fact_cache_in_its_own_directory() -> anyhow::Result<()> {
    let env = Env::start().await?;
    let work = tempfile::tempdir()?;
    let seen = work.path().join("seen");
    std::fs::write(
        work.path().join("env.sh"),
        format!(
            "for v in KOK_RUN_DIR TMPDIR ANSIBLE_LOCAL_TEMP ANSIBLE_CACHE_PLUGIN_CONNECTION ANSIBLE_SSH_CONTROL_PATH_DIR; do\n\
             eval \"echo $v=\\${{$v}}\" >> {seen}\ndone\n\
             [ -d \"$ANSIBLE_CACHE_PLUGIN_CONNECTION\" ] && [ -d \"$ANSIBLE_SSH_CONTROL_PATH_DIR\" ]\n",
            seen = seen.display()
        ),
    )?;
    let op = operation("envs", "env.sh", ActionType::Shell);
    let runner = env.runner(Workdir::Fixed(work.path().to_path_buf()));
    let job = env.create_job(&op).await?;
    let dir = run_dir(&env, &job).await?;
    let done = env.wait_finished(&job).await?;
    runner.stop().await?;

    assert_completed(&done, &env.log(&op)?);
    let seen = std::fs::read_to_string(&seen)?;
    let value = |name: &str| {
        seen.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| panic!("{name} is not set: {seen}"))
    };
    assert_eq!(value("KOK_RUN_DIR"), dir);
    assert_eq!(value("TMPDIR"), dir.join("tmp"));
    assert_eq!(value("ANSIBLE_LOCAL_TEMP"), dir.join("tmp"));
    assert_eq!(value("ANSIBLE_CACHE_PLUGIN_CONNECTION"), dir.join("facts"));
    assert_eq!(value("ANSIBLE_SSH_CONTROL_PATH_DIR"), dir.join("cp"));
    assert!(!dir.exists(), "the run's directory is removed after the run");
    Ok(())
}

#[tokio::test]
async fn images_mapped_by_image_workdir_run_in_their_own_directories() -> anyhow::Result<()> {
    let env = Env::start().await?;
    let (old, new, default) = (tempfile::tempdir()?, tempfile::tempdir()?, tempfile::tempdir()?);
    for (dir, name) in [(&old, "old"), (&new, "new"), (&default, "default")] {
        std::fs::write(dir.path().join("which.sh"), format!("echo {name} > ran\n"))?;
    }
    let images: std::collections::BTreeMap<String, std::path::PathBuf> = [
        ("kubespray:v2.26.0".to_string(), old.path().to_path_buf()),
        ("kubespray:v2.27.0".to_string(), new.path().to_path_buf()),
    ]
    .into();
    let runner = env.runner_with_images(Workdir::Fixed(default.path().to_path_buf()), images);
    let mut names = Vec::new();
    for (id, image) in [
        ("a", "kubespray:v2.26.0"),
        ("b", "kubespray:v2.27.0"),
        ("c", "kubespray:v2.28.0"),
    ] {
        let mut op = operation(id, "which.sh", ActionType::Shell);
        op.spec.image = image.into();
        names.push((op.clone(), env.create_job(&op).await?));
    }
    let mut done = Vec::new();
    for (op, job) in &names {
        done.push((op, env.wait_finished(job).await?));
    }
    runner.stop().await?;

    for (dir, name) in [(&old, "old"), (&new, "new"), (&default, "default")] {
        assert_eq!(
            std::fs::read_to_string(dir.path().join("ran"))?,
            format!("{name}\n")
        );
    }
    let (a, a_job) = &done[0];
    assert!(env.log(a)?.contains(&format!(
        "kok: image kubespray:v2.26.0 ran in {} (--image-workdir)",
        old.path().display()
    )));
    assert_eq!(
        message(a_job, "Complete").as_deref(),
        Some(status::MESSAGE_COMPLETIONS_REACHED)
    );
    let (c, c_job) = &done[2];
    let said = format!(
        "image kubespray:v2.28.0 is not mapped by --image-workdir; ran in {} (--workdir)",
        default.path().display()
    );
    assert!(env.log(c)?.contains(&format!("kok: {said}")), "{}", env.log(c)?);
    assert_eq!(
        message(c_job, "Complete"),
        Some(format!("{} ({said})", status::MESSAGE_COMPLETIONS_REACHED))
    );
    Ok(())
}

#[tokio::test]
async fn a_run_that_cannot_start_fails_with_the_reason_instead_of_hanging() -> anyhow::Result<()> {
    let env = Env::start().await?;
    let work = tempfile::tempdir()?;
    let runner = env.runner(Workdir::Fixed(work.path().to_path_buf()));
    // The runner's program is not there: the process cannot start at all.
    let no_program = operation("no-program", "cluster.yml", ActionType::Playbook);
    let mut job = kok::controller::job::build_job(&no_program, &Default::default());
    set_command(&mut job, &["/nonexistent/kok-runner"]);
    let no_program_job = env.create(job).await?;
    // ansible-playbook is not on the Job's PATH.
    let no_ansible = operation("no-ansible", "cluster.yml", ActionType::Playbook);
    let mut job = kok::controller::job::build_job(&no_ansible, &Default::default());
    add_env(&mut job, "PATH", "/usr/bin:/bin");
    let no_ansible_job = env.create(job).await?;
    // The action is not in the working directory.
    let no_action = operation("no-action", "missing.sh", ActionType::Shell);
    let no_action_job = env.create_job(&no_action).await?;

    let cases = [
        (
            &no_program,
            no_program_job,
            status::REASON_RUNNER_SETUP_FAILED,
            "/nonexistent/kok-runner",
        ),
        (
            &no_ansible,
            no_ansible_job,
            "BackoffLimitExceeded",
            "kok: action: cluster.yml failed with exit code 127",
        ),
        (
            &no_action,
            no_action_job,
            "BackoffLimitExceeded",
            "kok: action: missing.sh failed with exit code 127",
        ),
    ];
    for (op, job, reason, says) in cases {
        let done = env.wait_finished(&job).await?;
        assert_eq!(condition(&done, "Failed").as_deref(), Some(reason), "{job}");
        let log = env.log(op)?;
        assert!(log.contains(says), "{job}: the log does not say {says:?}:\n{log}");
    }
    runner.stop().await?;
    Ok(())
}
