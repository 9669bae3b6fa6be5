//! The web view in a real browser: headless Chromium against `kok run --local` running real ansible.
//! The fleet lists the clusters and filters them by a label from cluster.yml, links lead to a cluster and
//! its running operation, the playbook's log lines arrive on that page without a reload, a failed run's
//! page names the failing task and host, the cluster's changelog names each commit's author and
//! subject, an open fleet page shows a new operation without a reload (and does not keep kok from
//! stopping), and a rollout's page shows its waves while it bakes. Screenshots of each page go to `target/tmp/web-screenshots/` (docs/web-view.md's come from
//! there).

use crate::common::browser;
use crate::local_e2e_support;

use std::path::PathBuf;

use browser::Browser;
use kube::ResourceExt;
use local_e2e_support::{ansible_or_skip, finished, operation, wait_for, LocalKok, LocalRepo};

/// A playbook that prints a line, waits for `<marks>/<mark>.gate1`, prints another, then waits for
/// `<marks>/<mark>.gate2`: the test decides when its log grows and when it ends.
const GATED_PLAYBOOK: &str = r#"- name: Gated
  hosts: all
  become: false
  gather_facts: false
  tasks:
    - name: Before the gate
      ansible.builtin.debug:
        msg: "before the gate"
    - name: Wait for the first gate
      ansible.builtin.wait_for:
        path: "{{ marks }}/{{ mark }}.gate1"
        timeout: 300
    - name: Past the first gate
      ansible.builtin.debug:
        msg: "past the first gate"
    - name: Wait for the second gate
      ansible.builtin.wait_for:
        path: "{{ marks }}/{{ mark }}.gate2"
        timeout: 300
"#;

/// A rollout of the mark playbook: the second cluster first, then an hour's bake before the local one.
const ROLLOUT: &str = r#"operation:
  id: mark-all
  action: playbooks/mark.yml
  extraArgs: ["-e", "mark=rollout"]
clusters:
  names: [second, local]
waves:
  - name: canary
    clusters: [second]
  - name: rest
bake: 1h
"#;

fn screenshots() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-screenshots")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_person_follows_the_fleet_to_a_running_operation_and_watches_its_log_grow_live() {
    const TEST: &str = "a_person_follows_the_fleet_to_a_running_operation";
    if !ansible_or_skip(TEST) {
        return;
    }
    let Some(browser) = Browser::start_or_skip(TEST, 1200, 900).await else {
        return;
    };
    let repo = LocalRepo::new();
    let second = repo.path().join("clusters/second");
    std::fs::create_dir_all(&second).unwrap();
    for file in ["hosts.yml", "vars.yml"] {
        std::fs::copy(repo.path().join("clusters/local").join(file), second.join(file)).unwrap();
    }
    std::fs::write(second.join("cluster.yml"), "labels:\n  team: blue\n").unwrap();
    std::fs::write(repo.path().join("playbooks/gated.yml"), GATED_PLAYBOOK).unwrap();
    repo.commit("a second cluster and a gated playbook");
    let mut kok = LocalKok::start(&repo);
    let client = kok.client(&repo).await;
    let sha = repo.commit_operations(&[("gated", "gated.yml", "g"), ("broken", "fail.yml", "f")]);
    wait_for("operation gated to run", &mut kok, || async {
        operation(&client, "gated").await.filter(|op| {
            op.status
                .as_ref()
                .is_some_and(|s| s.phase == kok::api::Phase::Running)
        })
    })
    .await;
    let base = wait_for("kok to print its web view address", &mut kok, || {
        let url = kok_url(&repo);
        async move { url }
    })
    .await;
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
    let shots = screenshots();

    // The fleet lists both clusters, and links to each.
    browser.goto(&format!("{base}/")).await;
    browser.wait_for(r#"a[href="/clusters/local"]"#).await;
    browser.wait_for(r#"a[href="/clusters/second"]"#).await;
    let fleet = browser.page_text().await;
    assert!(fleet.contains("running gated for"), "{fleet}");
    assert!(
        fleet.contains("team=blue"),
        "the Cluster's label is shown: {fleet}"
    );
    // The running operation's time counts on without a reload.
    let elapsed = r#"document.querySelector("td span[data-t]").textContent"#;
    let first = browser.eval(elapsed).await;
    let mut counted = false;
    for _ in 0..100 {
        if browser.eval(elapsed).await != first {
            counted = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(counted, "the elapsed time stays at {first}");
    browser.screenshot(&shots.join("fleet.png")).await;

    // The label filter keeps the cluster labelled so, and only it.
    browser.goto(&format!("{base}/?label=team%3Dblue")).await;
    browser.wait_for(r#"a[href="/clusters/second"]"#).await;
    assert!(
        browser.find(r#"a[href="/clusters/local"]"#).await.is_none(),
        "{}",
        browser.page_text().await
    );
    browser.goto(&format!("{base}/")).await;
    browser.wait_for(r#"a[href="/clusters/local"]"#).await;

    // The cluster's queue: the running operation, and the next one with why it waits.
    browser.click_on(r#"a[href="/clusters/local"]"#).await;
    browser.wait_for(r#"a[href^="/operations/local-gated-"]"#).await;
    let cluster = browser.page_text().await;
    assert!(
        cluster.contains("broken") && cluster.contains("waiting for"),
        "{cluster}"
    );
    browser.screenshot(&shots.join("cluster.png")).await;

    // The running operation's log grows without a reload: the same element shows the new lines.
    browser.click_on(r#"a[href^="/operations/local-gated-"]"#).await;
    let log = browser.wait_for("pre#live-log").await;
    browser.wait_for_text(&log, "before the gate").await;
    browser.screenshot(&shots.join("operation-running.png")).await;
    std::fs::write(repo.marks().join("g.gate1"), "").unwrap();
    // ansible writes the next task's header after the message, maybe in a later chunk: wait for it.
    let text = browser
        .wait_for_text(&log, "TASK [Wait for the second gate]")
        .await;
    assert!(text.contains("past the first gate"), "{text}");

    // When the run ends the page shows its per-host table.
    std::fs::write(repo.marks().join("g.gate2"), "").unwrap();
    browser.wait_for("table.hosts").await;
    let done = browser.page_text().await;
    assert!(done.contains("localhost") && done.contains("Succeeded"), "{done}");
    browser.screenshot(&shots.join("operation-succeeded.png")).await;

    // The failed run's page names the failing task and host.
    let broken = finished(&mut kok, &client, "broken").await;
    let page = format!("{base}/operations/{}", broken.name_any());
    let failed = ["Fail on purpose", "localhost"];
    visit(
        &browser,
        &page,
        "section.failure",
        &failed,
        &shots.join("operation-failed.png"),
    )
    .await;
    // The cluster's changelog: both runs, each commit with its author and subject, their durations drawn.
    visit(
        &browser,
        &format!("{base}/clusters/local"),
        "figure.durations svg rect",
        &[
            "History",
            "Test Author",
            "operations: broken",
            "Fail on purpose",
            "The inventory at",
        ],
        &shots.join("cluster-history.png"),
    )
    .await;
    let statuses = ["kok/local/gated", "kok/local/broken", "kok/sync"];
    visit(
        &browser,
        &format!("{base}/commits/{sha}"),
        "table",
        &statuses,
        &shots.join("commit.png"),
    )
    .await;

    // An open fleet page follows the fleet in place: the same <main> shows a newly committed operation.
    browser.goto(&format!("{base}/")).await;
    let main = browser.wait_for("main").await;
    repo.commit_operations(&[("later", "mark.yml", "l")]);
    browser.wait_for_text(&main, "later").await;

    // A rollout: its canary wave (the second cluster) runs, then bakes an hour before the rest may open;
    // its page shows why it waits and each wave as a bar, the fleet lists it, the cluster names it.
    std::fs::create_dir_all(repo.path().join("rollouts")).unwrap();
    std::fs::write(repo.path().join("rollouts/mark-all.yml"), ROLLOUT).unwrap();
    repo.commit("a rollout of the mark playbook");
    let rollout = format!("{base}/rollouts/mark-all");
    let mut baking = String::new();
    for _ in 0..600 {
        browser.goto(&rollout).await;
        baking = browser.page_text().await;
        if baking.contains("baking") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    for needle in [
        "baking",
        "Next wave",
        "1 succeeded",
        "1 pending",
        "canary",
        "second",
    ] {
        assert!(
            baking.contains(needle),
            "the rollout page does not show {needle:?}:\n{baking}"
        );
    }
    browser.wait_for(r#"ol.waves svg rect.s-succeeded"#).await;
    browser.screenshot(&shots.join("rollout.png")).await;
    visit(
        &browser,
        &format!("{base}/"),
        r#"a[href="/rollouts/mark-all"]"#,
        &["Rollouts", "mark-all", "1/2"],
        &shots.join("fleet-rollouts.png"),
    )
    .await;
    visit(
        &browser,
        &format!("{base}/clusters/second"),
        r#"a[href="/rollouts/mark-all"]"#,
        &["Rollouts", "canary"],
        &shots.join("cluster-rollouts.png"),
    )
    .await;

    // In a narrow window nothing is cut off: the page does not scroll sideways (wide tables scroll inside).
    browser.resize(420, 900).await;
    for (path, ready, shot) in [
        ("/", "table", "fleet-narrow.png"),
        ("/clusters/local", "table", "cluster-narrow.png"),
        ("/rollouts/mark-all", "ol.waves", "rollout-narrow.png"),
    ] {
        browser.goto(&format!("{base}{path}")).await;
        browser.wait_for(ready).await;
        let overflow = browser
            .eval("document.documentElement.scrollWidth - window.innerWidth")
            .await;
        assert!(
            overflow.as_i64().is_some_and(|px| px <= 0),
            "{path} is {overflow}px too wide"
        );
        browser.screenshot(&shots.join(shot)).await;
    }

    // Open pages hold live streams; they do not keep kok from stopping.
    assert!(
        kok.stop(),
        "kok exits by itself on SIGTERM with a page open; its log:\n{}",
        kok.log()
    );
}

/// Opens `url`, waits for `ready`, checks that the page shows each of `needles` and takes its screenshot.
async fn visit(browser: &Browser, url: &str, ready: &str, needles: &[&str], shot: &std::path::Path) {
    browser.goto(url).await;
    browser.wait_for(ready).await;
    let text = browser.page_text().await;
    for needle in needles {
        assert!(text.contains(needle), "{url} does not show {needle:?}:\n{text}");
    }
    browser.screenshot(shot).await;
}

/// The address in kok's `web view: <url>` line, once printed.
fn kok_url(repo: &LocalRepo) -> Option<String> {
    let log = std::fs::read_to_string(repo.scratch("kok.log")).ok()?;
    log.lines()
        .find_map(|l| l.strip_prefix("web view: "))
        .map(|u| u.trim().trim_end_matches('/').to_string())
}
