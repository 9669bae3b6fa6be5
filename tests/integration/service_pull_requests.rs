//! The service plans open pull requests: `kok/plan` on each head, the plan comment kept in place
//! (GitHub, GitLab, Gitea), closed pull requests forgotten, and pull-request webhooks acted on at once.
//! kok runs in this process against testkit, a bare remote holding `refs/pull/*` and
//! `refs/merge-requests/*`, and a fake forge with a comments API.

use crate::e2e;
use crate::forge;
// Both harnesses include the one git CLI helper; this file needs each for its own part.
use crate::gitkit;

use std::path::Path;

use clap::Parser;
use e2e::{git, hosts, meta_cluster, wait_for, Objects, Remote, NS};
use forge::comments::{Comments, Kind};
use forge::{ForgeServer, Recorded};
use kok::cli::{Cli, Command};
use tokio::sync::watch;

const TOKEN: &str = "forge-token-0123456789";
const OPS_INSTALL: &str = "- id: install\n  action: cluster.yml\n";
const OPS_SCALE: &str = "- id: install\n  action: cluster.yml\n\
                         - id: add-node7\n  action: scale.yml\n  extraArgs: [--limit=node7]\n";
const MARKER: &str = "<!-- kok/plan -->";

/// `kok run` in this process, on a thread with its own runtime (as `main` runs it: its future is
/// driven by `block_on`, never spawned); stopped when dropped.
struct Service {
    stop: watch::Sender<bool>,
    thread: std::thread::JoinHandle<anyhow::Result<std::process::ExitCode>>,
    port: u16,
}

impl Service {
    /// Starts `kok run --repo repo` with the forge `kind` at `forge` as its only sink and `extra` flags.
    fn start(
        api: &testkit::ApiServer,
        repo: &str,
        scratch: &Path,
        forge: (Kind, &str),
        extra: &[&str],
    ) -> Service {
        let token = scratch.join("token");
        std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
        let port = e2e::free_port();
        let listen = format!("127.0.0.1:{port}");
        let cache = scratch.join("cache");
        let mut argv: Vec<String> = [
            "kok",
            "run",
            "--repo",
            repo,
            "--cache-dir",
            cache.to_str().unwrap(),
            "--namespace",
            NS,
            "--leader-elect",
            "false",
            "--listen",
            &listen,
            "--status",
            forge.0.sink(),
            "--status-repo",
            "acme/infra",
            "--status-base-url",
            forge.1,
            "--status-token-file",
            token.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        argv.extend(extra.iter().map(|s| s.to_string()));
        let Command::Run(args) = Cli::parse_from(argv).command else {
            panic!("kok run parses as the run command");
        };
        let (stop, mut stopped) = watch::channel(false);
        let shutdown = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        let client = api.client();
        let thread = std::thread::spawn(move || {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a runtime for kok")
                .block_on(kok::cli::run::run_with_client(*args, client, shutdown))
        });
        Service { stop, thread, port }
    }

    /// Stops the service and waits for it.
    async fn stop(self) {
        let _ = self.stop.send(true);
        let thread = self.thread;
        let result = tokio::task::spawn_blocking(move || thread.join())
            .await
            .expect("joining the service thread")
            .expect("the service thread");
        assert!(result.is_ok(), "kok run failed: {result:?}");
    }
}

/// One status the fake forge received, whatever its API: (sha, context, state, description).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Status {
    sha: String,
    context: String,
    state: String,
    description: String,
}

fn statuses(kind: Kind, requests: &[Recorded]) -> Vec<Status> {
    let prefix = format!("{}/statuses/", kind.prefix());
    requests
        .iter()
        .filter(|r| r.method == "POST")
        .filter_map(|r| {
            let sha = r.path.strip_prefix(&prefix)?.to_string();
            let body = r.json();
            let field = |name: &str| body[name].as_str().unwrap_or_default().to_string();
            Some(Status {
                sha,
                context: field(if kind == Kind::GitLab { "name" } else { "context" }),
                state: field("state"),
                description: field("description"),
            })
        })
        .collect()
}

/// The `kok/plan` statuses on `sha`.
fn plans(kind: Kind, forge: &ForgeServer, sha: &str) -> Vec<Status> {
    statuses(kind, &forge.requests())
        .into_iter()
        .filter(|s| s.sha == sha && s.context == "kok/plan")
        .collect()
}

/// The requests to the comments API (and the pull request reads), as (method, path).
fn comment_requests(kind: Kind, forge: &ForgeServer) -> Vec<(String, String)> {
    forge
        .requests()
        .into_iter()
        // Status posts and reads of a commit's statuses (the record of what ran) are not comments.
        .filter(|r| r.path.starts_with(kind.prefix()) && !r.path.contains("/statuses"))
        .map(|r| (r.method, r.path))
        .collect()
}

/// Commits the work clone and pushes HEAD to `reference` of the bare remote; returns the sha.
fn push_ref(remote: &Remote, reference: &str, message: &str) -> String {
    git(&remote.work(), &["add", "-A"]);
    git(&remote.work(), &["commit", "-q", "-m", message]);
    git(
        &remote.work(),
        &["push", "-q", "-f", "origin", &format!("HEAD:{reference}")],
    );
    git(&remote.work(), &["rev-parse", "HEAD"])
}

/// A meta-cluster, a fake forge of one kind with its comments API, and a remote whose `main` (its
/// first commit) has the cluster `prod-bj` running `install`.
struct World {
    api: testkit::ApiServer,
    forge: ForgeServer,
    comments: Comments,
    kind: Kind,
    remote: Remote,
    first: String,
}

impl World {
    async fn new(kind: Kind) -> World {
        let api = meta_cluster().await;
        let forge = ForgeServer::start().await;
        let comments = Comments::serve(&forge, kind, TOKEN);
        let remote = Remote::new();
        remote.cluster("prod-bj");
        remote.write("clusters/prod-bj/operations.yml", OPS_INSTALL);
        let first = remote.push("prod-bj: install");
        World {
            api,
            forge,
            comments,
            kind,
            remote,
            first,
        }
    }

    /// Starts kok on `repo` (the bare remote's path when `None`) with `extra` flags.
    fn start(&self, repo: Option<&str>, extra: &[&str]) -> Service {
        let path = self.remote.bare().display().to_string();
        Service::start(
            &self.api,
            repo.unwrap_or(&path),
            &self.remote.scratch("kok"),
            (self.kind, &self.forge.url()),
            extra,
        )
    }

    /// Waits until the forge has the `kok/sync` status of `sha` (the service reconciled it).
    async fn synced(&self, sha: &str) {
        wait_for(&format!("kok/sync on {sha}"), None, || async {
            statuses(self.kind, &self.forge.requests())
                .iter()
                .any(|s| s.sha == sha && s.context == "kok/sync")
                .then_some(())
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_request_gets_its_plan_status_and_one_comment_edited_on_each_push() {
    let w = World::new(Kind::GitHub).await;
    let (api, forge, comments, kind, remote, first) =
        (&w.api, &w.forge, &w.comments, w.kind, &w.remote, &w.first);
    let service = w.start(None, &["--interval", "1h", "--pr-comments"]);
    w.synced(first).await;

    // Pull request #1 adds node7 and an operation scaling it in.
    git(&remote.work(), &["checkout", "-q", "-b", "pr1"]);
    remote.write("clusters/prod-bj/hosts.yml", &hosts(true));
    remote.write("clusters/prod-bj/operations.yml", OPS_SCALE);
    let head1 = push_ref(remote, "refs/pull/1/head", "prod-bj: add node7");
    let plan = wait_for("kok/plan on the pull request head", None, || async {
        plans(kind, forge, &head1).pop()
    })
    .await;
    assert_eq!(plan.state, "success", "{plan:?}");
    assert_eq!(plan.description, "prod-bj: add-node7 (scale.yml) would run");
    let created = wait_for("the plan comment", None, || async {
        let on = comments.on(1);
        (!on.is_empty()).then_some(on)
    })
    .await;
    assert_eq!(created.len(), 1, "one comment: {created:#?}");
    let (id, body) = &created[0];
    assert!(body.starts_with(&format!("{MARKER}\n### kok plan `")), "{body}");
    assert!(
        body.contains(&format!(
            "`add-node7` (`scale.yml` after `playbooks/facts.yml` without --limit) from `{}` prod-bj: add node7",
            &head1[..8]
        )),
        "the comment lists the operation with the commit that adds it:\n{body}"
    );
    let (header, auth) = kind.auth(TOKEN);
    let posts: Vec<Recorded> = forge
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == kind.comments_path(1))
        .collect();
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].header(header), auth);
    assert_eq!(posts[0].json(), serde_json::json!({ "body": body }));
    assert_eq!(
        comment_requests(kind, forge),
        [
            (
                "GET".to_string(),
                format!("{}?per_page=50&page=1", kind.comments_path(1))
            ),
            ("GET".to_string(), kind.pull_path(1)),
            ("POST".to_string(), kind.comments_path(1)),
        ],
        "the comment is looked for, the pull request checked open, then the comment created"
    );
    let objects = Objects::new(api);
    assert!(
        objects.operation("prod-bj", "add-node7").await.is_none(),
        "nothing of a pull request is written to the meta-cluster"
    );

    // A second push to the pull request edits the same comment.
    remote.write(
        "clusters/prod-bj/operations.yml",
        &format!("{OPS_SCALE}- id: ping\n  action: playbooks/facts.yml\n"),
    );
    let head2 = push_ref(remote, "refs/pull/1/head", "prod-bj: ping too");
    let plan = wait_for("kok/plan on the second head", None, || async {
        plans(kind, forge, &head2).pop()
    })
    .await;
    assert_eq!(
        plan.description,
        "prod-bj: add-node7 (scale.yml), ping (playbooks/facts.yml) would run"
    );
    let edited = wait_for("the comment edited", None, || async {
        let on = comments.on(1);
        on[0].1.contains("`ping`").then_some(on)
    })
    .await;
    assert_eq!(edited.len(), 1, "still one comment: {edited:#?}");
    assert_eq!(edited[0].0, *id, "the same comment is edited");
    let (method, path) = kind.edit(1, *id);
    let patches: Vec<Recorded> = forge
        .requests()
        .into_iter()
        .filter(|r| r.method == method && r.path == path)
        .collect();
    assert_eq!(patches.len(), 1);
    assert_eq!(patches[0].header(header), auth);
    assert_eq!(patches[0].json(), serde_json::json!({ "body": edited[0].1 }));

    // Pull request #2 is opened; then #1 closes (its ref goes) and main moves: #2 is planned again
    // against the new main (through a merge commit kok builds), #1 is not.
    git(&remote.work(), &["checkout", "-q", "-b", "pr2", first]);
    remote.write(
        "clusters/prod-bj/operations.yml",
        "- id: install\n  action: cluster.yml\n- id: upgrade\n  action: upgrade-cluster.yml\n",
    );
    let pr2 = push_ref(remote, "refs/pull/2/head", "prod-bj: upgrade");
    wait_for("the comment on #2", None, || async {
        (!comments.on(2).is_empty()).then_some(())
    })
    .await;
    git(&remote.bare(), &["update-ref", "-d", "refs/pull/1/head"]);
    let patches_of_1 = |forge: &ForgeServer| {
        forge
            .requests()
            .iter()
            .filter(|r| r.method == method && r.path == path)
            .count()
    };
    git(&remote.work(), &["checkout", "-q", "main"]);
    remote.cluster("prod-sh");
    let main2 = remote.push("prod-sh: new cluster");
    w.synced(&main2).await;
    let comment2 = comments.on(2)[0].0;
    let replanned = wait_for("the comment on #2 edited for the new main", None, || async {
        let on = comments.on(2);
        on[0].1.contains(&main2[..8]).then_some(on[0].1.clone())
    })
    .await;
    assert_eq!(comments.on(2)[0].0, comment2);
    assert!(
        replanned.contains(&format!(
            "`upgrade` (`upgrade-cluster.yml`) from `{}` prod-bj: upgrade",
            &pr2[..8]
        )),
        "the merge commit kok built is shown as the pull request's head:\n{replanned}"
    );
    assert!(
        !replanned.contains("prod-sh"),
        "main's own change is not the pull request's:\n{replanned}"
    );
    assert_eq!(patches_of_1(forge), 1, "the closed pull request is forgotten");

    // Forgotten means no memory of it: when its ref comes back, it is planned afresh.
    git(&remote.bare(), &["update-ref", "refs/pull/1/head", &head2]);
    wait_for("kok/plan on #1 again", None, || async {
        (plans(kind, forge, &head2).len() == 2).then_some(())
    })
    .await;
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_merge_request_gets_an_error_naming_file_and_line_and_a_restart_keeps_its_note() {
    let w = World::new(Kind::GitLab).await;
    let (forge, comments, kind, remote, first) = (&w.forge, &w.comments, w.kind, &w.remote, &w.first);
    let flags = ["--interval", "1h", "--pr-comments"];
    let service = w.start(None, &flags);
    w.synced(first).await;
    comments.add(3, "Looks good to me");

    git(&remote.work(), &["checkout", "-q", "-b", "mr3"]);
    remote.write(
        "clusters/prod-bj/operations.yml",
        "- id: install\n  action: cluster.yml\n- id: add-node7\n  action: scale.yml\n  action: remove-node.yml\n",
    );
    let head = push_ref(remote, "refs/merge-requests/3/head", "prod-bj: broken");
    let plan = wait_for("kok/plan on the merge request head", None, || async {
        plans(kind, forge, &head).pop()
    })
    .await;
    assert_eq!(plan.state, "failed", "GitLab's word for error: {plan:?}");
    assert!(
        plan.description
            .starts_with("clusters/prod-bj/operations.yml:5:3: duplicate key \"action\""),
        "{plan:?}"
    );
    let note = wait_for("kok's note", None, || async { comments.on(3).get(1).cloned() }).await;
    assert!(note.1.starts_with(MARKER), "{note:?}");
    assert!(note.1.contains("operations.yml:5:3"), "{}", note.1);
    let post = forge
        .requests()
        .into_iter()
        .find(|r| r.method == "POST" && r.path == kind.comments_path(3))
        .expect("the note was created");
    assert_eq!(post.header("private-token"), TOKEN);
    assert_eq!(post.json(), serde_json::json!({ "body": note.1 }));
    service.stop().await;

    // After a restart the fix finds kok's note by its marker and edits it: still one note by kok.
    let service = w.start(None, &flags);
    remote.write("clusters/prod-bj/hosts.yml", &hosts(true));
    remote.write("clusters/prod-bj/operations.yml", OPS_SCALE);
    let fixed = push_ref(remote, "refs/merge-requests/3/head", "prod-bj: fixed");
    let plan = wait_for("kok/plan on the fixed head", None, || async {
        plans(kind, forge, &fixed).pop()
    })
    .await;
    assert_eq!(
        (plan.state.as_str(), plan.description.as_str()),
        ("success", "prod-bj: add-node7 (scale.yml) would run")
    );
    let notes = wait_for("the note edited", None, || async {
        let on = comments.on(3);
        on[1]
            .1
            .contains("add-node7` (`scale.yml` after `playbooks/facts.yml` without --limit)")
            .then_some(on)
    })
    .await;
    assert_eq!(notes.len(), 2, "the other note and kok's: {notes:#?}");
    assert_eq!(notes[1].0, note.0, "kok's note is edited, not posted again");
    let (method, path) = kind.edit(3, note.0);
    let put = forge
        .requests()
        .into_iter()
        .find(|r| r.method == method && r.path == path)
        .expect("the note was edited with PUT");
    assert_eq!(put.header("private-token"), TOKEN);
    assert_eq!(put.json(), serde_json::json!({ "body": notes[1].1 }));
    let creates = forge
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path == kind.comments_path(3))
        .count();
    assert_eq!(creates, 1);
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_request_webhook_plans_at_once_without_waiting_for_the_poll() {
    if gitkit::skip_servers("git daemon") {
        return;
    }
    let w = World::new(Kind::Gitea).await;
    let (forge, kind, remote, first) = (&w.forge, w.kind, &w.remote, &w.first);
    // Served by git daemon: no local watch, and an hour between polls; only the webhook can wake kok.
    let daemon = gitkit::GitDaemon::start(remote.bare().parent().unwrap());
    let secret = remote.scratch("kok").join("webhook-secret");
    std::fs::write(&secret, "hook-secret\n").unwrap();
    let service = w.start(
        Some(&daemon.url("remote.git")),
        &[
            "--interval",
            "1h",
            "--webhook-secret-file",
            secret.to_str().unwrap(),
        ],
    );
    w.synced(first).await;

    git(&remote.work(), &["checkout", "-q", "-b", "pr5"]);
    remote.write("clusters/prod-bj/hosts.yml", &hosts(true));
    remote.write("clusters/prod-bj/operations.yml", OPS_SCALE);
    let head = push_ref(remote, "refs/pull/5/head", "prod-bj: add node7");
    let hook = |event: &'static str, body: serde_json::Value| {
        let body = body.to_string();
        let signature = hex::encode(kok::source::trigger::sign(body.as_bytes(), b"hook-secret"));
        let url = format!("http://127.0.0.1:{}/hooks/gitea", service.port);
        async move {
            let answer = reqwest::Client::new()
                .post(url)
                .header("x-gitea-event", event)
                .header("x-gitea-signature", signature)
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status().as_u16(), 202);
        }
    };
    let pull_event = |action: &str, number: u64, sha: &str| {
        serde_json::json!({
            "action": action,
            "number": number,
            "pull_request": {"number": number, "head": {"sha": sha}},
        })
    };
    hook("pull_request", pull_event("opened", 5, &head)).await;
    let plan = wait_for("kok/plan after the webhook", None, || async {
        plans(kind, forge, &head).pop()
    })
    .await;
    assert_eq!(
        (plan.state.as_str(), plan.description.as_str()),
        ("success", "prod-bj: add-node7 (scale.yml) would run")
    );
    let status = forge
        .requests()
        .into_iter()
        .find(|r| r.path == format!("{}/statuses/{head}", kind.prefix()))
        .unwrap();
    assert_eq!(status.header("authorization"), format!("token {TOKEN}"));
    assert_eq!(
        status.json(),
        serde_json::json!({
            "state": "success",
            "context": "kok/plan",
            "description": "prod-bj: add-node7 (scale.yml) would run",
        })
    );

    // #6 opens; #5 is closed (its ref stays, as on Gitea and GitHub); main then changes the lines
    // both edit. #6 is planned again and conflicts; #5 is forgotten and gets nothing more.
    git(&remote.work(), &["checkout", "-q", "-b", "pr6", first]);
    remote.write(
        "clusters/prod-bj/operations.yml",
        "- id: install\n  action: cluster.yml\n- id: upgrade\n  action: upgrade-cluster.yml\n",
    );
    let head6 = push_ref(remote, "refs/pull/6/head", "prod-bj: upgrade");
    hook("pull_request", pull_event("opened", 6, &head6)).await;
    let plan6 = wait_for("kok/plan on #6", None, || async {
        plans(kind, forge, &head6).pop()
    })
    .await;
    assert_eq!(
        plan6.description,
        "prod-bj: upgrade (upgrade-cluster.yml) would run"
    );
    hook("pull_request", pull_event("closed", 5, &head)).await;
    git(&remote.work(), &["checkout", "-q", "main"]);
    remote.write(
        "clusters/prod-bj/operations.yml",
        "- id: install\n  action: cluster.yml\n- id: ping\n  action: playbooks/facts.yml\n",
    );
    let main2 = remote.push("prod-bj: ping");
    hook(
        "push",
        serde_json::json!({"ref": "refs/heads/main", "after": main2}),
    )
    .await;
    let conflict = wait_for("#6 planned against the new main", None, || async {
        plans(kind, forge, &head6)
            .into_iter()
            .find(|s| s.state == "error")
    })
    .await;
    assert_eq!(
        conflict.description,
        "does not merge cleanly into main (conflicts in clusters/prod-bj/operations.yml); merge main \
         into the branch to get a plan"
    );
    assert_eq!(
        plans(kind, forge, &head).len(),
        1,
        "the closed pull request is forgotten"
    );
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_open_pull_requests_are_planned_in_rounds_without_waiting_for_the_interval() {
    let w = World::new(Kind::GitHub).await;
    let (forge, kind, remote) = (&w.forge, w.kind, &w.remote);
    git(&remote.work(), &["checkout", "-q", "-b", "scale"]);
    remote.write("clusters/prod-bj/hosts.yml", &hosts(true));
    remote.write("clusters/prod-bj/operations.yml", OPS_SCALE);
    let head = push_ref(remote, "refs/heads/scale", "prod-bj: add node7");
    let count = kok::pulls::MAX_PLANS_PER_ROUND as u64 * 2 + 1;
    for number in 1..=count {
        git(
            &remote.bare(),
            &["update-ref", &format!("refs/pull/{number}/head"), &head],
        );
    }
    // The refs exist before kok starts and an hour passes between polls: only the rounds that
    // follow one another at once can plan them all.
    let service = w.start(None, &["--interval", "1h"]);
    wait_for("kok/plan for every pull request", None, || async {
        (plans(kind, forge, &head).len() as u64 == count).then_some(())
    })
    .await;
    assert!(plans(kind, forge, &head)
        .iter()
        .all(|p| p.description == "prod-bj: add-node7 (scale.yml) would run"));
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_requests_breaking_kubesprays_rules_get_a_failing_plan_naming_the_rule_and_the_next_step_and_day_two_changes_too(
) {
    let w = World::new(Kind::GitHub).await;
    let (forge, kind, remote) = (&w.forge, w.kind, &w.remote);
    // main: prod-bj asks for v1.29.10 of kok's default image, kubespray v2.27.0, and runs (installed by hand).
    remote.write(
        "clusters/prod-bj/vars.yml",
        "cluster_name: prod-bj\nkube_version: v1.29.10\n",
    );
    remote.write("clusters/prod-bj/cluster.yml", "installed: true\n");
    // Its install entry is gone (kok cancels it, never started): no pending cluster.yml reaches a new host.
    std::fs::remove_file(remote.work().join("clusters/prod-bj/operations.yml")).unwrap();
    let main = remote.push("prod-bj: kube_version v1.29.10");
    let service = w.start(None, &["--interval", "1h", "--pr-comments"]);
    w.synced(&main).await;

    // #1 jumps to v1.31.4.
    git(&remote.work(), &["checkout", "-q", "-b", "jump"]);
    remote.write(
        "clusters/prod-bj/vars.yml",
        "cluster_name: prod-bj\nkube_version: v1.31.4\n",
    );
    remote.write(
        "clusters/prod-bj/operations.yml",
        &format!("{OPS_INSTALL}- id: upgrade\n  action: upgrade-cluster.yml\n"),
    );
    let jump = push_ref(remote, "refs/pull/1/head", "prod-bj: upgrade to v1.31.4");
    let plan = wait_for("kok/plan on #1", None, || async {
        plans(kind, forge, &jump).pop()
    })
    .await;
    assert_eq!(plan.state, "failure", "{plan:?}");
    assert!(
        plan.description.starts_with(
            "prod-bj: kube-version-step: kube_version v1.29.10 (at the pull request's base) → v1.31.4 skips \
             v1.30: set kube_version to v1.30.x first"
        ),
        "the status names the next step within GitHub's 140 characters: {plan:?}"
    );
    let comment = wait_for("the plan comment of #1", None, || async {
        w.comments.on(1).pop().map(|(_, body)| body)
    })
    .await;
    assert!(
        comment.contains("- :x: `kube-version-step` at `clusters/prod-bj/vars.yml:2`"),
        "{comment}"
    );

    // #2, from main, makes node2..node4 etcd members beside node1: four.
    git(&remote.work(), &["checkout", "-q", "main"]);
    git(&remote.work(), &["checkout", "-q", "-b", "etcd"]);
    let four = hosts(true)
        .replacen("    etcd:\n      hosts:\n        node1:\n", "", 1)
        .replace(
            "  children:\n",
            "  children:\n    etcd:\n      hosts:\n        node1:\n        node2:\n        node3:\n        \
             node7:\n",
        );
    assert_eq!(four.matches("etcd:").count(), 1, "{four}");
    remote.write("clusters/prod-bj/hosts.yml", &four);
    remote.write(
        "clusters/prod-bj/operations.yml",
        &format!("{OPS_INSTALL}- id: add-etcd\n  action: cluster.yml\n"),
    );
    let etcd = push_ref(remote, "refs/pull/2/head", "prod-bj: etcd on four nodes");
    let plan = wait_for("kok/plan on #2", None, || async {
        plans(kind, forge, &etcd).pop()
    })
    .await;
    assert_eq!(plan.state, "failure", "{plan:?}");
    assert!(
        plan.description.starts_with(
            "prod-bj: etcd-odd: etcd has 4 hosts: kubespray v2.27.0 stops on an even number (\"Stop if even \
             number of etcd hosts\")"
        ),
        "{plan:?}"
    );
    assert!(
        Objects::new(&w.api)
            .operation("prod-bj", "add-etcd")
            .await
            .is_none(),
        "nothing of a pull request is written"
    );

    // #3, from main, drops node3 from the inventory before any remove-node.yml removed it.
    let from_main = |branch: &str| {
        git(&remote.work(), &["checkout", "-q", "main"]);
        git(&remote.work(), &["checkout", "-q", "-b", branch]);
    };
    from_main("drop");
    let without_node3 = hosts(false)
        .replace("    node3:\n      ansible_host: 10.0.0.3\n", "")
        .replace("        node3:\n", "");
    remote.write("clusters/prod-bj/hosts.yml", &without_node3);
    let dropped = push_ref(remote, "refs/pull/3/head", "prod-bj: node3 out");
    let plan = wait_for("kok/plan on #3", None, || async {
        plans(kind, forge, &dropped).pop()
    })
    .await;
    assert_eq!(plan.state, "failure", "{plan:?}");
    assert!(
        plan.description.starts_with(
            "prod-bj: host-dropped: node3 is dropped from clusters/prod-bj/hosts.yml (kube_node), and no \
             remove-node.yml"
        ),
        "{plan:?}"
    );

    // #4, from main, adds node8 as a worker and no operation for it: a warning naming the entry.
    from_main("add");
    let with_node8 = hosts(false).replace(
        "  children:\n",
        "    node8:\n      ansible_host: 10.0.0.8\n  children:\n",
    ) + "        node8:\n";
    remote.write("clusters/prod-bj/hosts.yml", &with_node8);
    let added = push_ref(remote, "refs/pull/4/head", "prod-bj: node8 in");
    let plan = wait_for("kok/plan on #4", None, || async {
        plans(kind, forge, &added).pop()
    })
    .await;
    assert_eq!(plan.state, "success", "{plan:?}");
    assert!(
        plan.description.starts_with(
            "warning: prod-bj: host-not-reached: node8 is new in kube_node and no pending operation reaches it: \
             add - {id: add-node8, action: scale.yml"
        ),
        "{plan:?}"
    );

    // #5, from main, removes node3 without skip_confirmation.
    from_main("remove");
    remote.write(
        "clusters/prod-bj/operations.yml",
        &format!(
            "{OPS_INSTALL}- id: remove-node3\n  action: remove-node.yml\n  extraArgs: [-e, node=node3]\n"
        ),
    );
    let removal = push_ref(remote, "refs/pull/5/head", "prod-bj: remove node3");
    let plan = wait_for("kok/plan on #5", None, || async {
        plans(kind, forge, &removal).pop()
    })
    .await;
    assert_eq!(plan.state, "failure", "{plan:?}");
    assert!(
        plan.description.starts_with(
            "prod-bj: confirmation-prompt: remove-node.yml asks \"Are you sure you want to delete nodes state?\""
        ),
        "{plan:?}"
    );
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pr_comments_without_one_forge_sink_is_refused_at_start() {
    let api = meta_cluster().await;
    let remote = Remote::new();
    let repo = remote.bare().display().to_string();
    for status in ["notes", "github,gitea"] {
        let argv = [
            "kok",
            "run",
            "--repo",
            &repo,
            "--status",
            status,
            "--status-repo",
            "acme/infra",
            "--status-base-url",
            "http://127.0.0.1:9",
            "--pr-comments",
            "--listen",
            "127.0.0.1:0",
        ];
        let Command::Run(args) = Cli::parse_from(argv).command else {
            panic!("kok run parses as the run command");
        };
        let err = kok::cli::run::run_with_client(*args, api.client(), std::future::pending())
            .await
            .expect_err("kok refuses to start");
        assert!(
            err.to_string()
                .contains("--pr-comments needs exactly one forge in --status"),
            "{status}: {err}"
        );
    }
}
