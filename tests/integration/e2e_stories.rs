//! The product's stories end to end: `kok run` as a separate process against testkit, a bare git
//! remote on disk and a recording GitHub server, with commit statuses checked on both sinks.

use crate::common::kok as kok_process;
use crate::e2e;
use crate::forge;

use e2e::{
    assert_pending_then, github_args, hosts, job_name, meta_cluster, posted, posted_for, wait_for, Kok,
    Objects, Remote, NS, TOKEN,
};
use forge::{ForgeServer, Reply};
use kok::api::Phase;

const OPS_INSTALL: &str = "- id: install\n  action: cluster.yml\n";
const OPS_SCALE: &str = "- id: install\n  action: cluster.yml\n\
                         - id: add-node7\n  action: scale.yml\n  extraArgs: [--limit=node7]\n";

/// Waits for the `failure` line of `context` in the note of `sha`, and returns it.
async fn failure_note(kok: &Kok, remote: &Remote, sha: &str, context: &str) -> String {
    wait_for("the failure note", Some(kok), || async {
        let note = remote.note(sha);
        note.lines()
            .find(|l| l.starts_with(&format!("{context}: failure ")))
            .map(str::to_string)
    })
    .await
}

/// A remote with one valid cluster `prod-bj` running `install`; returns the remote and the first sha.
fn one_cluster_remote() -> (Remote, String) {
    let remote = Remote::new();
    remote.cluster("prod-bj");
    remote.write("clusters/prod-bj/operations.yml", OPS_INSTALL);
    let sha = remote.push("prod-bj: install");
    (remote, sha)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_adding_a_host_and_a_scale_operation_runs_it_on_the_new_inventory_and_reports_success() {
    let api = meta_cluster().await;
    let forge = ForgeServer::start().await;
    let (remote, first) = one_cluster_remote();
    let kok = Kok::run(&api, &remote, &github_args(&forge.url()));
    let objects = &Objects::new(&api);

    let install_job = wait_for("the install Job", Some(&kok), || {
        objects.job_of("prod-bj", "install")
    })
    .await;
    let install_job = job_name(&install_job);
    api.start_job(NS, &install_job).await.unwrap();

    // The pull request is merged while install is still running.
    remote.write("clusters/prod-bj/hosts.yml", &hosts(true));
    remote.write("clusters/prod-bj/operations.yml", OPS_SCALE);
    let merge = remote.push("prod-bj: add node7");

    let scale = wait_for("add-node7 queued behind install", Some(&kok), || async {
        let op = objects.operation("prod-bj", "add-node7").await?;
        (op.status.as_ref()?.phase == Phase::Queued).then_some(op)
    })
    .await;
    assert_eq!(
        scale.status.as_ref().unwrap().job_ref,
        None,
        "one operation at a time per cluster"
    );
    assert_eq!(
        objects.jobs().await.len(),
        1,
        "only install has a Job while it runs"
    );
    assert_eq!(
        scale.spec.source.commit, merge,
        "the operation belongs to the merge commit"
    );
    assert_eq!(scale.spec.extra_args, vec!["--limit=node7".to_string()]);

    // Inputs are pinned: the new operation has the new inventory, install keeps the old one.
    let install = objects.operation("prod-bj", "install").await.unwrap();
    assert_eq!(install.spec.source.commit, first);
    let new_hosts = scale.spec.hosts_conf_ref.name.clone();
    let old_hosts = install.spec.hosts_conf_ref.name.clone();
    assert_ne!(new_hosts, old_hosts);
    assert!(objects.hosts_of(&new_hosts).await.unwrap().contains("node7"));
    assert!(!objects.hosts_of(&old_hosts).await.unwrap().contains("node7"));

    api.complete_job(NS, &install_job).await.unwrap();
    let scale_job = wait_for("the add-node7 Job", Some(&kok), || {
        objects.job_of("prod-bj", "add-node7")
    })
    .await;
    let scale_job_json = serde_json::to_string(&scale_job).unwrap();
    assert!(
        scale_job_json.contains(&new_hosts),
        "the Job mounts the pinned inventory {new_hosts}"
    );
    assert!(!scale_job_json.contains(&old_hosts));
    api.complete_job(NS, &job_name(&scale_job)).await.unwrap();

    let context = "kok/prod-bj/add-node7";
    let note = wait_for("the success note on the merge commit", Some(&kok), || async {
        let note = remote.note(&merge);
        note.lines()
            .any(|l| l.starts_with(&format!("{context}: success ")))
            .then_some(note)
    })
    .await;
    assert!(
        note.lines().any(|l| l.starts_with("kok/sync: success ")),
        "the merge commit also records kok/sync: {note}"
    );
    let statuses = wait_for("success on GitHub", Some(&kok), || async {
        let statuses = posted_for(&forge.requests(), &merge, context);
        statuses.iter().any(|p| p.state == "success").then_some(statuses)
    })
    .await;
    assert_pending_then(&statuses, "success");
    let install_statuses = posted_for(&forge.requests(), &first, "kok/prod-bj/install");
    assert_pending_then(&install_statuses, "success");
    assert!(
        posted_for(&forge.requests(), &first, context).is_empty(),
        "add-node7 is reported on the commit that introduced it only"
    );
    for p in statuses.iter().chain(&install_statuses) {
        assert_eq!(p.authorization, format!("Bearer {TOKEN}"));
    }
    assert!(!kok.log().contains(TOKEN), "the forge token appears in kok's log");

    // The changelog: `kok history` shows each commit with how its operations ended.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kok"))
        .args(["history", "prod-bj", "--output", "json", "--repo"])
        .arg(remote.bare())
        .arg("--cache-dir")
        .arg(remote.scratch("history-cache"))
        .env("KOK_LOG", "error")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let history: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let outcome = |i: usize| {
        let op = &history[i]["operations"][0];
        (
            history[i]["commit"].clone(),
            op["operation"].clone(),
            op["state"].clone(),
        )
    };
    assert_eq!(
        outcome(0),
        (merge.as_str().into(), "add-node7".into(), "success".into()),
        "{history}"
    );
    assert_eq!(
        outcome(1),
        (first.as_str().into(), "install".into(), "success".into()),
        "{history}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_job_marks_the_operation_failed_on_its_commit() {
    let api = meta_cluster().await;
    let forge = ForgeServer::start().await;
    let (remote, first) = one_cluster_remote();
    let kok = Kok::run(&api, &remote, &github_args(&forge.url()));
    let objects = &Objects::new(&api);

    let job = wait_for("the install Job", Some(&kok), || {
        objects.job_of("prod-bj", "install")
    })
    .await;
    api.fail_job(
        NS,
        &job_name(&job),
        "BackoffLimitExceeded",
        "Job has reached the specified backoff limit",
    )
    .await
    .unwrap();

    let context = "kok/prod-bj/install";
    let line = failure_note(&kok, &remote, &first, context).await;
    assert!(
        line.contains("BackoffLimitExceeded"),
        "the note gives the reason: {line}"
    );
    let statuses = wait_for("failure on GitHub", Some(&kok), || async {
        let statuses = posted_for(&forge.requests(), &first, context);
        statuses.iter().any(|p| p.state == "failure").then_some(statuses)
    })
    .await;
    assert_pending_then(&statuses, "failure");
    assert!(
        statuses
            .last()
            .unwrap()
            .description
            .contains("BackoffLimitExceeded"),
        "{statuses:#?}"
    );
    assert_eq!(objects.phase("prod-bj", "install").await, Some(Phase::Failed));
    assert_eq!(
        objects.jobs().await.len(),
        1,
        "one attempt: a failed Job is not retried"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_cluster_reports_a_sync_error_with_file_and_line_while_another_cluster_keeps_working() {
    let api = meta_cluster().await;
    let forge = ForgeServer::start().await;
    let remote = Remote::new();
    remote.cluster("alpha").cluster("beta");
    let first = remote.push("two clusters");
    let kok = Kok::run(&api, &remote, &github_args(&forge.url()));
    let objects = &Objects::new(&api);
    let alpha = wait_for("both Clusters", Some(&kok), || async {
        objects.cluster("beta").await?;
        objects.cluster("alpha").await
    })
    .await;

    // One commit breaks alpha's inventory (and adds an operation to it) and adds an operation to beta.
    remote.write(
        "clusters/alpha/hosts.yml",
        "all:\n  hosts:\n    node1:\n      ansible_host: [10.0.0.1\n",
    );
    remote.write("clusters/alpha/operations.yml", OPS_INSTALL);
    remote.write("clusters/beta/operations.yml", OPS_INSTALL);
    let bad = remote.push("break alpha, install beta");

    let job = wait_for("beta's install Job", Some(&kok), || {
        objects.job_of("beta", "install")
    })
    .await;
    api.complete_job(NS, &job_name(&job)).await.unwrap();
    let sync = wait_for("kok/sync error in the note", Some(&kok), || async {
        let note = remote.note(&bad);
        note.lines()
            .find(|l| l.starts_with("kok/sync: error "))
            .map(str::to_string)
    })
    .await;
    assert!(has_file_and_line(&sync, "clusters/alpha/hosts.yml"), "{sync}");
    assert!(!sync.contains("clusters/beta"), "only alpha is invalid: {sync}");
    let posted = wait_for("kok/sync error on GitHub", Some(&kok), || async {
        let statuses = posted_for(&forge.requests(), &bad, "kok/sync");
        statuses.into_iter().find(|p| p.state == "error")
    })
    .await;
    assert!(
        has_file_and_line(&posted.description, "clusters/alpha/hosts.yml"),
        "{posted:?}"
    );
    wait_for("beta's install success on GitHub", Some(&kok), || async {
        let statuses = posted_for(&forge.requests(), &bad, "kok/beta/install");
        statuses.iter().any(|p| p.state == "success").then_some(())
    })
    .await;

    // alpha keeps its last good state and starts nothing.
    let alpha_now = objects.cluster("alpha").await.unwrap();
    assert_eq!(alpha_now.spec.hosts_conf_ref, alpha.spec.hosts_conf_ref);
    assert_eq!(alpha_now.spec.vars_conf_ref, alpha.spec.vars_conf_ref);
    assert!(
        alpha_now.spec.source.revision.ends_with(&first),
        "{:?}",
        alpha_now.spec.source
    );
    assert!(
        objects.operation("alpha", "install").await.is_none(),
        "the invalid cluster materializes nothing"
    );
    let beta = objects.cluster("beta").await.unwrap();
    assert!(
        beta.spec.source.revision.ends_with(&bad),
        "{:?}",
        beta.spec.source
    );

    // Fixing the file lets alpha move on: its operation runs and the fix commit syncs cleanly.
    remote.write("clusters/alpha/hosts.yml", &hosts(false));
    let fix = remote.push("fix alpha's inventory");
    wait_for("alpha's install Job after the fix", Some(&kok), || {
        objects.job_of("alpha", "install")
    })
    .await;
    wait_for("kok/sync success on the fix", Some(&kok), || async {
        remote
            .note(&fix)
            .lines()
            .any(|l| l.starts_with("kok/sync: success "))
            .then_some(())
    })
    .await;
    let alpha_fixed = objects.cluster("alpha").await.unwrap();
    assert!(
        alpha_fixed.spec.source.revision.ends_with(&fix),
        "{:?}",
        alpha_fixed.spec.source
    );
}

/// True when `text` names `file` followed by `:<line>`.
fn has_file_and_line(text: &str, file: &str) -> bool {
    text.match_indices(file).any(|(i, _)| {
        let rest = &text[i + file.len()..];
        rest.starts_with(':') && rest[1..].starts_with(|c: char| c.is_ascii_digit())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kok_killed_while_a_job_runs_picks_it_up_on_restart_without_a_second_job_or_status() {
    let api = meta_cluster().await;
    let forge = ForgeServer::start().await;
    let (remote, first) = one_cluster_remote();
    let mut kok = Kok::run(&api, &remote, &github_args(&forge.url()));
    let objects = &Objects::new(&api);
    let context = "kok/prod-bj/install";

    let job = wait_for("the install Job", Some(&kok), || {
        objects.job_of("prod-bj", "install")
    })
    .await;
    let job = job_name(&job);
    api.start_job(NS, &job).await.unwrap();
    // Wait until the running status is delivered and recorded, then kill kok without warning.
    wait_for("the running status delivered", Some(&kok), || async {
        let op = objects.operation("prod-bj", "install").await?;
        let running = op.status.as_ref()?.phase == Phase::Running;
        (running && kok::report::status::desired_is_reported(&op, None, NS)).then_some(())
    })
    .await;
    kok.kill();
    let before = posted_for(&forge.requests(), &first, context);
    assert_eq!(api.requests().count("create", "jobs"), 1);

    let kok = Kok::run(&api, &remote, &github_args(&forge.url()));
    let http = reqwest::Client::new();
    wait_for("the restarted kok to be ready", Some(&kok), || async {
        let r = http.get(kok.url("/readyz")).send().await.ok()?;
        r.status().is_success().then_some(())
    })
    .await;
    api.complete_job(NS, &job).await.unwrap();
    let statuses = wait_for("success on GitHub", Some(&kok), || async {
        let statuses = posted_for(&forge.requests(), &first, context);
        statuses.iter().any(|p| p.state == "success").then_some(statuses)
    })
    .await;
    assert_eq!(&statuses[..before.len()], &before[..]);
    assert_eq!(
        statuses.len(),
        before.len() + 1,
        "after the restart only success is sent: {statuses:#?}"
    );
    assert_pending_then(&statuses, "success");
    assert_eq!(
        api.requests().count("create", "jobs"),
        1,
        "no second Job was created"
    );
    assert_eq!(objects.jobs().await.len(), 1);
    wait_for("the success note", Some(&kok), || async {
        remote
            .note(&first)
            .contains(&format!("{context}: success "))
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_the_forge_refuses_with_500_is_retried_and_delivered_once() {
    let api = meta_cluster().await;
    let forge = ForgeServer::start().await;
    let (remote, first) = one_cluster_remote();
    let kok = Kok::run(&api, &remote, &github_args(&forge.url()));
    let objects = &Objects::new(&api);
    let context = "kok/prod-bj/install";

    // Let everything up to the running Job be delivered, so that the next status sent is success.
    let job = wait_for("the install Job", Some(&kok), || {
        objects.job_of("prod-bj", "install")
    })
    .await;
    wait_for(
        "the running and kok/sync statuses delivered",
        Some(&kok),
        || async {
            let op = objects.operation("prod-bj", "install").await?;
            let sync = posted_for(&forge.requests(), &first, "kok/sync");
            (op.status.as_ref()?.phase == Phase::Running
                && kok::report::status::desired_is_reported(&op, None, NS)
                && sync.iter().any(|p| p.state == "success"))
            .then_some(())
        },
    )
    .await;
    let delivered_before = posted(&forge.requests());
    forge.script([Reply::new(500, r#"{"message":"Server Error"}"#)]);
    api.complete_job(NS, &job_name(&job)).await.unwrap();

    let successes = wait_for("success sent again after the 500", Some(&kok), || async {
        let statuses = posted_for(&forge.requests(), &first, context);
        let successes: Vec<_> = statuses.into_iter().filter(|p| p.state == "success").collect();
        (successes.len() >= 2).then_some(successes)
    })
    .await;
    assert_eq!(
        successes.len(),
        2,
        "one refused attempt and one delivery: {successes:#?}"
    );
    assert_eq!(successes[0], successes[1], "the retry sends the same status");
    let all = posted(&forge.requests());
    assert_eq!(&all[..delivered_before.len()], &delivered_before[..]);
    assert_eq!(
        &all[delivered_before.len()..],
        &successes[..],
        "nothing else was sent again"
    );
    let reported = wait_for("success recorded as reported", Some(&kok), || async {
        let op = objects.operation("prod-bj", "install").await?;
        let desired = kok::report::status::desired_status(&op, None, NS)?;
        (desired.state == kok::api::StatusState::Success && op.status?.has_reported(&desired))
            .then_some(desired)
    })
    .await;
    assert_eq!(reported.description, successes[1].description);
}

/// `GLIBC_TUNABLES` and `MIMALLOC_PURGE_DELAY` of a `kok run` started with `env` added, read once it
/// works: as `/proc/<pid>/environ` shows them (its pid is the one started: kok starts itself again in
/// place, and that start is the one that works), and the line where kok logs its settings. glibc keeps
/// only some tunables in the former.
async fn tunables_of_a_working_kok(env: &[(&str, &str)]) -> (Option<String>, Option<String>, String) {
    let api = meta_cluster().await;
    let objects = &Objects::new(&api);
    let (remote, _) = one_cluster_remote();
    let kok = Kok::start(&e2e::KokOptions {
        kubeconfig: api.kubeconfig_path().to_path_buf(),
        repo: remote.bare(),
        cache: remote.scratch("cache"),
        log: remote.scratch("logs").join("kok.log"),
        args: Vec::new(),
        env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    });
    wait_for("the install operation", Some(&kok), || {
        objects.operation("prod-bj", "install")
    })
    .await;
    let logged = kok
        .log()
        .lines()
        .find(|line| line.contains("malloc settings"))
        .unwrap_or_else(|| panic!("kok logs its malloc settings; its log:\n{}", kok.log()))
        .to_string();
    let environ = |name| kok_process::environ_var(kok.pid(), name);
    (environ("GLIBC_TUNABLES"), environ("MIMALLOC_PURGE_DELAY"), logged)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kok_run_sets_its_malloc_tunables_in_its_own_process_unless_the_environment_chose() {
    let (environ, purge_delay, logged) = tunables_of_a_working_kok(&[]).await;
    assert_eq!(environ.as_deref(), Some("glibc.malloc.arena_max=1"));
    assert_eq!(purge_delay.as_deref(), Some("0"));
    assert!(
        logged.contains(
            "glibc.malloc.arena_max=1:glibc.malloc.mmap_threshold=131072:glibc.malloc.tcache_count=0"
        ) && logged.contains("MIMALLOC_ALLOW_THP=0"),
        "{logged}"
    );
    let (environ, purge_delay, logged) = tunables_of_a_working_kok(&[
        ("GLIBC_TUNABLES", "glibc.malloc.arena_max=3"),
        ("MIMALLOC_PURGE_DELAY", "1000"),
    ])
    .await;
    assert_eq!(
        purge_delay.as_deref(),
        Some("1000"),
        "an operator's own purge delay stays"
    );
    assert_eq!(
        environ.as_deref(),
        Some("glibc.malloc.arena_max=3"),
        "an operator's own arena limit stays"
    );
    assert!(
        logged.contains(
            "glibc.malloc.arena_max=3:glibc.malloc.mmap_threshold=131072:glibc.malloc.tcache_count=0"
        ),
        "kok adds only what the environment does not set: {logged}"
    );
}

/// The ClusterOperations of namespace `ns` as (cluster/id, phase, message).
async fn runs_in(api: &testkit::ApiServer, ns: &str) -> Vec<(String, Phase, String)> {
    let ops: kube::Api<kok::api::ClusterOperation> = kube::Api::namespaced(api.client(), ns);
    let list = ops
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    list.into_iter()
        .map(|o| {
            let status = o.status.unwrap_or_default();
            (
                format!("{}/{}", o.spec.cluster, o.spec.id),
                status.phase,
                status.message.unwrap_or_default(),
            )
        })
        .collect()
}

async fn jobs_in(api: &testkit::ApiServer, ns: &str) -> usize {
    let jobs: kube::Api<k8s_openapi::api::batch::v1::Job> = kube::Api::namespaced(api.client(), ns);
    jobs.list(&Default::default())
        .await
        .map(|l| l.items.len())
        .unwrap_or(0)
}

/// Promise 8 in service mode: kok started in a new namespace (a rebuilt meta-cluster as far as it can
/// tell) against a remote whose notes hold every outcome runs nothing: the success and the failure come
/// back as they ended, and the failure holds what it held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kok_in_a_new_namespace_rebuilds_finished_runs_from_the_notes_and_runs_nothing() {
    let api = meta_cluster().await;
    let remote = Remote::new();
    remote.cluster("alpha").cluster("beta");
    remote.write("clusters/alpha/operations.yml", OPS_INSTALL);
    remote.write(
        "clusters/beta/operations.yml",
        "- id: install\n  action: cluster.yml\n- id: later\n  action: scale.yml\n",
    );
    let sha = remote.push("alpha and beta");
    let mut kok = Kok::run(&api, &remote, &[]);
    let objects = &Objects::new(&api);
    let alpha = wait_for("alpha's Job", Some(&kok), || objects.job_of("alpha", "install")).await;
    api.complete_job(NS, &job_name(&alpha)).await.unwrap();
    let beta = wait_for("beta's Job", Some(&kok), || objects.job_of("beta", "install")).await;
    api.fail_job(
        NS,
        &job_name(&beta),
        "BackoffLimitExceeded",
        "Job has reached the specified backoff limit",
    )
    .await
    .unwrap();
    wait_for("every outcome in the notes", Some(&kok), || async {
        let note = remote.note(&sha);
        let has = |prefix: &str, word: &str| note.lines().any(|l| l.starts_with(prefix) && l.contains(word));
        (has("kok/alpha/install: success", "")
            && has("kok/beta/install: failure", "")
            && has("kok/beta/later: pending", " held: "))
        .then_some(())
    })
    .await;
    kok.kill();

    let two = "kok-two";
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(api.client());
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": two}})).unwrap();
    namespaces.create(&Default::default(), &ns).await.unwrap();
    let kok = Kok::start(&e2e::KokOptions {
        kubeconfig: api.kubeconfig_path().to_path_buf(),
        repo: remote.bare(),
        cache: remote.scratch("cache-two"),
        log: remote.scratch("logs").join("kok-two.log"),
        args: vec!["--namespace".into(), two.into()],
        env: Vec::new(),
    });
    let runs = wait_for("the three runs rebuilt in kok-two", Some(&kok), || async {
        let runs = runs_in(&api, two).await;
        let settled = runs.len() == 3
            && runs
                .iter()
                .all(|(_, phase, message)| phase.is_terminal() || message.starts_with("held: "));
        settled.then_some(runs)
    })
    .await;
    let find = |name: &str| runs.iter().find(|(n, _, _)| n == name).cloned().unwrap();
    let (_, phase, message) = find("alpha/install");
    assert_eq!(phase, Phase::Succeeded, "{message}");
    assert!(
        message.starts_with("restored from the record in git-notes"),
        "{message}"
    );
    let (_, phase, message) = find("beta/install");
    assert_eq!(phase, Phase::Failed, "{message}");
    assert!(
        message.contains("BackoffLimitExceeded"),
        "the recorded reason: {message}"
    );
    let (_, phase, message) = find("beta/later");
    assert_eq!(
        phase,
        Phase::Queued,
        "still held by the restored failure: {message}"
    );
    assert!(message.contains("beta/install failed"), "{message}");
    assert_eq!(
        jobs_in(&api, two).await,
        0,
        "nothing ran again; kok's log:\n{}",
        kok.log()
    );
    let note = remote.note(&sha);
    assert_eq!(
        note.lines()
            .filter(|l| l.starts_with("kok/alpha/install: "))
            .count(),
        1,
        "the record is left as it was: {note}"
    );
    assert!(note.contains("kok/alpha/install: success"), "{note}");
}

/// Promise 8 where the forge is the only record (`--status github`, no notes): a finished ClusterOperation
/// deleted by hand comes back finished at the next resync, its Job not made again; while the forge cannot
/// be read, kok creates nothing rather than risk a second run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_finished_operation_comes_back_finished_from_the_forge_and_waits_while_the_forge_is_down() {
    let api = meta_cluster().await;
    let forge = ForgeServer::start().await;
    let (remote, first) = one_cluster_remote();
    let mut args = github_args(&forge.url());
    args[1] = "github".into();
    args.extend(["--resync-interval".into(), "1s".into()]);
    let kok = Kok::run(&api, &remote, &args);
    let objects = &Objects::new(&api);
    let job = wait_for("the install Job", Some(&kok), || {
        objects.job_of("prod-bj", "install")
    })
    .await;
    api.complete_job(NS, &job_name(&job)).await.unwrap();
    let context = "kok/prod-bj/install";
    wait_for("success on GitHub", Some(&kok), || async {
        posted_for(&forge.requests(), &first, context)
            .iter()
            .any(|p| p.state == "success")
            .then_some(())
    })
    .await;
    assert!(
        remote.note(&first).is_empty(),
        "no notes: the forge is the only record"
    );
    let before = objects.operation("prod-bj", "install").await.unwrap();

    let ops: kube::Api<kok::api::ClusterOperation> = kube::Api::namespaced(api.client(), NS);
    let delete = |name: String| {
        let ops = ops.clone();
        async move {
            ops.delete(&name, &Default::default()).await.unwrap();
        }
    };
    // First with the forge down: the resyncs create nothing while it cannot say what ran.
    forge.fail_reads(true);
    delete(kube::ResourceExt::name_any(&before)).await;
    wait_for("a resync that could not read the forge", Some(&kok), || async {
        kok.log()
            .contains("kok creates no operation it cannot rule out having run before")
            .then_some(())
    })
    .await;
    assert!(objects.operation("prod-bj", "install").await.is_none());
    forge.fail_reads(false);
    let after = wait_for("the operation rebuilt from the forge", Some(&kok), || async {
        objects
            .operation("prod-bj", "install")
            .await
            .filter(|o| o.status.as_ref().is_some_and(|s| s.phase.is_terminal()))
    })
    .await;
    assert_ne!(kube::ResourceExt::uid(&after), kube::ResourceExt::uid(&before));
    let status = after.status.clone().unwrap();
    assert_eq!(status.phase, Phase::Succeeded, "{:?}", status.message);
    assert!(
        status
            .message
            .as_deref()
            .unwrap_or_default()
            .starts_with("restored from the record in github"),
        "{status:?}"
    );
    let read = forge.requests().iter().any(|r| {
        r.method == "GET"
            && r.path
                .starts_with(&format!("/repos/acme/infra/commits/{first}/statuses"))
    });
    assert!(read, "kok read the commit's statuses back from GitHub");
    assert!(
        objects.jobs().await.is_empty(),
        "no Job made again; kok's log:\n{}",
        kok.log()
    );
    let successes = posted_for(&forge.requests(), &first, context)
        .iter()
        .filter(|p| p.state == "success")
        .count();
    assert_eq!(successes, 1, "the restored success is not posted again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_image_cannot_be_pulled_fails_on_its_commit_after_its_start_timeout() {
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, Patch, PatchParams, PostParams};
    let api = meta_cluster().await;
    let forge = ForgeServer::start().await;
    let remote = Remote::new();
    remote.cluster("prod-bj");
    remote.write("clusters/prod-bj/operations.yml", OPS_INSTALL);
    remote.write("clusters/prod-bj/cluster.yml", "startTimeout: 1\n");
    let first = remote.push("prod-bj: install, its pod may not start for 1 s");
    let kok = Kok::run(&api, &remote, &github_args(&forge.url()));
    let objects = &Objects::new(&api);
    let job = wait_for("the install Job", Some(&kok), || {
        objects.job_of("prod-bj", "install")
    })
    .await;

    // The kubelet cannot pull the image of the Job's pod.
    let name = job_name(&job);
    let template = job.spec.clone().unwrap().template;
    let mut labels = template.metadata.and_then(|m| m.labels).unwrap_or_default();
    labels.insert("job-name".into(), name.clone());
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{name}-x1y2z"), "namespace": NS, "labels": labels,
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                "uid": job.metadata.uid, "controller": true}]},
        "spec": template.spec,
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(api.client(), NS);
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let status = serde_json::json!({"status": {"phase": "Pending", "containerStatuses": [{
        "name": "ansible", "image": "quay.io/kubespray/kubespray:v2.27.0", "imageID": "", "ready": false,
        "restartCount": 0, "state": {"waiting": {"reason": "ImagePullBackOff",
            "message": "Back-off pulling image \"quay.io/kubespray/kubespray:v2.27.0\""}}}]}});
    pods.patch_status(
        &format!("{name}-x1y2z"),
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .unwrap();

    let context = "kok/prod-bj/install";
    let line = failure_note(&kok, &remote, &first, context).await;
    assert!(
        line.contains(
            "StartFailed: ImagePullBackOff: container ansible (image quay.io/kubespray/kubespray:v2.27.0)"
        ),
        "the note gives the reason: {line}"
    );
    let statuses = wait_for("failure on GitHub", Some(&kok), || async {
        let statuses = posted_for(&forge.requests(), &first, context);
        statuses.iter().any(|p| p.state == "failure").then_some(statuses)
    })
    .await;
    let description = &statuses.last().unwrap().description;
    assert!(
        description.starts_with("failed: StartFailed: ImagePullBackOff"),
        "{description}"
    );
    assert_eq!(objects.phase("prod-bj", "install").await, Some(Phase::Failed));
    let jobs: Api<Job> = Api::namespaced(api.client(), NS);
    wait_for("the Job to be deleted", Some(&kok), || async {
        jobs.get_opt(&name).await.ok()?.is_none().then_some(())
    })
    .await;
}

/// The command lines of the `sh` blocks of section `## {heading}` of docs/disaster-recovery.md.
fn documented_commands(heading: &str) -> Vec<String> {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/disaster-recovery.md"))
        .expect("docs/disaster-recovery.md");
    let section = page
        .split("\n## ")
        .find(|s| s.starts_with(heading))
        .unwrap_or_else(|| panic!("docs/disaster-recovery.md has no section {heading:?}"));
    let mut lines = Vec::new();
    let mut in_sh = false;
    for line in section.lines() {
        match line.trim() {
            "```sh" => in_sh = true,
            "```" => in_sh = false,
            l if in_sh && !l.is_empty() => lines.push(l.to_string()),
            _ => {}
        }
    }
    assert!(!lines.is_empty(), "section {heading:?} shows no command");
    lines
}

/// Runs a documented kubectl line with `sh`, against `api`, with the example run's name replaced.
fn run_documented(api: &testkit::ApiServer, line: &str, run: &str) {
    let line = line.replace("prod-bj-install-0123abcd", run);
    let out = std::process::Command::new("sh")
        .args(["-c", &line])
        .env("KUBECONFIG", api.kubeconfig_path())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("sh runs");
    assert!(
        out.status.success(),
        "{line} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The disaster-recovery page's ways to stop runs, run as written with the real kubectl: one run stopped by
/// deleting its Job ends Failed and holds its cluster; every running Job deleted while kok is down (scaled to
/// 0) ends Failed when kok is back, and nothing runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_ways_to_stop_runs_end_them_failed_and_hold_their_clusters() {
    let api = meta_cluster().await;
    let remote = Remote::new();
    remote.cluster("prod-bj").cluster("beta");
    remote.write(
        "clusters/prod-bj/operations.yml",
        "- id: install\n  action: cluster.yml\n- id: later\n  action: scale.yml\n",
    );
    remote.write("clusters/beta/operations.yml", OPS_INSTALL);
    remote.push("two clusters with runs to stop");
    let mut kok = Kok::run(&api, &remote, &[]);
    let objects = &Objects::new(&api);
    let running = |cluster: &'static str| async move {
        objects
            .operation(cluster, "install")
            .await
            .filter(|o| o.status.as_ref().is_some_and(|s| s.phase == Phase::Running))
    };
    let install = wait_for("prod-bj's install running", Some(&kok), || running("prod-bj")).await;
    wait_for("beta's install running", Some(&kok), || running("beta")).await;

    for line in documented_commands("Stop one run now") {
        run_documented(&api, &line, &kube::ResourceExt::name_any(&install));
    }
    let stopped = wait_for("prod-bj's install stopped", Some(&kok), || async {
        objects
            .operation("prod-bj", "install")
            .await
            .and_then(|o| o.status)
            .filter(|s| s.phase.is_terminal())
    })
    .await;
    assert_eq!(stopped.phase, Phase::Failed, "{stopped:?}");
    assert!(
        stopped.message.as_deref().unwrap_or_default().contains("deleted"),
        "{stopped:?}"
    );
    wait_for("later held behind it", Some(&kok), || async {
        let later = objects.operation("prod-bj", "later").await?.status?;
        later.message.filter(|m| m.starts_with("held: "))
    })
    .await;

    // Everything at once: kok down (as scaled to 0), every running Job deleted, kok back.
    kok.kill();
    let lines = documented_commands("Stop everything now");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("scale deployment kok --replicas=0")),
        "{lines:?}"
    );
    for line in lines.iter().filter(|l| l.contains("delete jobs")) {
        run_documented(&api, line, "");
    }
    assert!(
        objects.jobs().await.is_empty(),
        "the documented delete leaves no Job"
    );
    let kok = Kok::run(&api, &remote, &[]);
    let beta = wait_for("beta's install ended", Some(&kok), || async {
        objects
            .operation("beta", "install")
            .await
            .and_then(|o| o.status)
            .filter(|s| s.phase.is_terminal())
    })
    .await;
    assert_eq!(beta.phase, Phase::Failed, "{beta:?}");
    assert!(
        beta.message.as_deref().unwrap_or_default().contains("deleted"),
        "{beta:?}"
    );
    assert!(
        objects.jobs().await.is_empty(),
        "nothing ran again; kok's log:\n{}",
        kok.log()
    );
}
