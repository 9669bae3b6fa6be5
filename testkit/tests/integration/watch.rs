//! Watches against the real `kube::Api` and kube-runtime: replay, bookmarks, 410 Gone per resource,
//! reads through another served version, timeouts, cut streams, watcher/reflector, streaming lists
//! and a Controller owning Jobs.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{cm, Widget, WidgetSpec};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::controller::Action;
use kube::runtime::{reflector, watcher, Controller, WatchStreamExt};
use kube::{CustomResourceExt, Resource, ResourceExt};
use serde_json::json;
use testkit::{ApiServer, Options};

/// Waits for the first event satisfying `pred`, failing the test if the stream ends first.
async fn next_matching<S, K>(stream: &mut S, pred: impl Fn(&WatchEvent<K>) -> bool) -> WatchEvent<K>
where
    S: futures::Stream<Item = kube::Result<WatchEvent<K>>> + Unpin,
{
    while let Some(ev) = stream.next().await {
        let ev = ev.unwrap();
        if pred(&ev) {
            return ev;
        }
    }
    panic!("the watch ended before the expected event");
}

#[tokio::test]
async fn watch_from_a_resource_version_replays_added_modified_and_deleted() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let a = api
        .create(&PostParams::default(), &cm("a", "k", "1"))
        .await
        .unwrap();
    let rv = a.resource_version().unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(&json!({"data": {"k": "2"}})),
    )
    .await
    .unwrap();
    api.create(&PostParams::default(), &cm("b", "k", "1"))
        .await
        .unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let wp = WatchParams::default().timeout(5).disable_bookmarks();
    let mut events = api.watch(&wp, &rv).await.unwrap().boxed();
    let mut seen = Vec::new();
    for _ in 0..3 {
        match events.next().await.unwrap().unwrap() {
            WatchEvent::Added(o) => seen.push(format!("ADDED {}", o.name_any())),
            WatchEvent::Modified(o) => seen.push(format!("MODIFIED {}", o.name_any())),
            WatchEvent::Deleted(o) => seen.push(format!("DELETED {}", o.name_any())),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen, vec!["MODIFIED a", "ADDED b", "DELETED a"]);
}

#[tokio::test]
async fn label_selected_watches_see_objects_leave_the_selection_as_deleted() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let mut c = cm("a", "k", "1");
    c.metadata.labels = Some([("app".to_string(), "x".to_string())].into());
    let created = api.create(&PostParams::default(), &c).await.unwrap();
    let wp = WatchParams::default()
        .labels("app=x")
        .timeout(5)
        .disable_bookmarks();
    let mut events = api
        .watch(&wp, &created.resource_version().unwrap())
        .await
        .unwrap()
        .boxed();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"labels": {"app": "y"}}})),
    )
    .await
    .unwrap();
    let ev = events.next().await.unwrap().unwrap();
    assert!(
        matches!(ev, WatchEvent::Deleted(ref o) if o.name_any() == "a"),
        "{ev:?}"
    );
}

#[tokio::test]
async fn bookmarks_arrive_when_allowed() {
    let opts = Options {
        bookmark_interval: Duration::from_millis(100),
        ..Options::default()
    };
    let server = ApiServer::start_with(opts).await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let current = server.resource_version().to_string();
    let mut events = api
        .watch(&WatchParams::default().timeout(10), &current)
        .await
        .unwrap()
        .boxed();
    let ev = next_matching(&mut events, |e| matches!(e, WatchEvent::Bookmark(_))).await;
    let WatchEvent::Bookmark(b) = ev else {
        unreachable!()
    };
    assert_eq!(b.metadata.resource_version, current);
}

/// The resourceVersion of a bookmark, or None for other events.
fn bookmark_rv<K>(ev: &WatchEvent<K>) -> Option<u64> {
    match ev {
        WatchEvent::Bookmark(b) => b.metadata.resource_version.parse().ok(),
        _ => None,
    }
}

#[tokio::test]
async fn quiet_watches_get_bookmarks_and_no_410_while_other_resources_churn() {
    let server = ApiServer::start_with(Options {
        event_window: 3,
        bookmark_interval: Duration::from_millis(50),
        ..Options::default()
    })
    .await
    .unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    let secrets: Api<Secret> = Api::default_namespaced(server.client());
    let start = server.resource_version().to_string();
    let wp = WatchParams::default().timeout(30);
    let mut quiet_secrets = secrets.watch(&wp, &start).await.unwrap().boxed();
    let quiet_wp = WatchParams::default().labels("app=quiet").timeout(30);
    let mut quiet_cms = cms.watch(&quiet_wp, &start).await.unwrap().boxed();
    for i in 0..10 {
        let mut c = cm(&format!("busy{i}"), "k", "v");
        c.metadata.labels = Some([("app".to_string(), "busy".to_string())].into());
        cms.create(&PostParams::default(), &c).await.unwrap();
    }
    let last = server.resource_version();

    // Both quiet watches learn the latest resourceVersion from bookmarks alone.
    let ev = next_matching(&mut quiet_secrets, |e| {
        bookmark_rv(e).is_some_and(|rv| rv >= last)
    })
    .await;
    assert_eq!(bookmark_rv(&ev), Some(last));
    let ev = next_matching(&mut quiet_cms, |e| bookmark_rv(e).is_some_and(|rv| rv >= last)).await;
    assert_eq!(bookmark_rv(&ev), Some(last));
    // Secrets had no events, so their window still reaches back to the start.
    let mut again = secrets.watch(&wp, &start).await.unwrap().boxed();
    let mut s = Secret::default();
    s.metadata.name = Some("s".into());
    secrets.create(&PostParams::default(), &s).await.unwrap();
    let ev = next_matching(&mut again, |e| !matches!(e, WatchEvent::Bookmark(_))).await;
    assert!(
        matches!(ev, WatchEvent::Added(ref o) if o.name_any() == "s"),
        "{ev:?}"
    );
    // The label-selected watch resumes from its bookmark although ConfigMaps churned past the window.
    let mut resumed = cms.watch(&quiet_wp, &last.to_string()).await.unwrap().boxed();
    let mut q = cm("q", "k", "v");
    q.metadata.labels = Some([("app".to_string(), "quiet".to_string())].into());
    cms.create(&PostParams::default(), &q).await.unwrap();
    let ev = next_matching(&mut resumed, |e| !matches!(e, WatchEvent::Bookmark(_))).await;
    assert!(
        matches!(ev, WatchEvent::Added(ref o) if o.name_any() == "q"),
        "{ev:?}"
    );
}

#[tokio::test]
async fn a_watch_from_before_its_resources_window_gets_the_expired_status() {
    let server = ApiServer::start_with(Options {
        event_window: 3,
        ..Options::default()
    })
    .await
    .unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    let start = server.resource_version();
    for i in 0..6 {
        cms.create(&PostParams::default(), &cm(&format!("c{i}"), "k", "v"))
            .await
            .unwrap();
    }
    // Six events, three kept: the newest dropped one is the third. Secrets churning after does not
    // push ConfigMaps out.
    let dropped = start + 3;
    let secrets: Api<Secret> = Api::default_namespaced(server.client());
    for i in 0..6 {
        let mut s = Secret::default();
        s.metadata.name = Some(format!("s{i}"));
        secrets.create(&PostParams::default(), &s).await.unwrap();
    }
    let url = format!(
        "{}/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={start}",
        server.url()
    );
    let body = reqwest::get(&url).await.unwrap().text().await.unwrap();
    let line: serde_json::Value = serde_json::from_str(body.trim()).unwrap();
    assert_eq!(
        line,
        json!({"type": "ERROR", "object": {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("too old resource version: {start} ({dropped})"),
            "reason": "Expired", "code": 410,
        }})
    );
    let wp = WatchParams::default().timeout(5).disable_bookmarks();
    let mut expired = cms.watch(&wp, &start.to_string()).await.unwrap().boxed();
    match expired.next().await.unwrap().unwrap() {
        WatchEvent::Error(s) => assert_eq!((s.code, s.reason.as_str()), (410, "Expired")),
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    assert!(expired.next().await.is_none(), "the stream ends after the error");
    // From the newest dropped version on, every later event is kept.
    let mut events = cms.watch(&wp, &dropped.to_string()).await.unwrap().boxed();
    let ev = events.next().await.unwrap().unwrap();
    assert!(
        matches!(ev, WatchEvent::Added(ref o) if o.name_any() == "c3"),
        "{ev:?}"
    );
}

#[tokio::test]
async fn timeout_seconds_and_cut_watches_end_streams() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let rv = server.resource_version().to_string();
    let wp = WatchParams::default().timeout(1).disable_bookmarks();
    let mut timed = api.watch(&wp, &rv).await.unwrap().boxed();
    assert!(
        timed.next().await.is_none(),
        "the stream ends after timeoutSeconds"
    );
    let wp = WatchParams::default().timeout(290).disable_bookmarks();
    let mut cut = api.watch(&wp, &rv).await.unwrap().boxed();
    server.cut_watches();
    assert!(cut.next().await.is_none(), "cut_watches ends the stream");
}

#[tokio::test]
async fn runtime_watcher_and_reflector_follow_changes_across_cut_watches() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    api.create(&PostParams::default(), &cm("before", "k", "v"))
        .await
        .unwrap();
    let (reader, writer) = reflector::store::<ConfigMap>();
    let stream = reflector(writer, watcher(api.clone(), watcher::Config::default())).applied_objects();
    let mut stream = stream.boxed();
    let first = stream.try_next().await.unwrap().unwrap();
    assert_eq!(first.name_any(), "before");
    server.cut_watches();
    api.create(&PostParams::default(), &cm("after", "k", "v"))
        .await
        .unwrap();
    loop {
        let o = stream.try_next().await.unwrap().unwrap();
        if o.name_any() == "after" {
            break;
        }
    }
    let mut names: Vec<String> = reader.state().iter().map(|o| o.name_any()).collect();
    names.sort();
    assert_eq!(names, vec!["after", "before"]);
}

#[tokio::test]
async fn streaming_lists_send_initial_events_then_the_end_bookmark() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    api.create(&PostParams::default(), &cm("one", "k", "v"))
        .await
        .unwrap();
    let config = watcher::Config::default().streaming_lists();
    let mut stream = watcher(api.clone(), config).applied_objects().boxed();
    assert_eq!(stream.try_next().await.unwrap().unwrap().name_any(), "one");
    api.create(&PostParams::default(), &cm("two", "k", "v"))
        .await
        .unwrap();
    assert_eq!(stream.try_next().await.unwrap().unwrap().name_any(), "two");
}

struct Ctx {
    jobs: Api<Job>,
    reconciles: AtomicUsize,
    tx: tokio::sync::mpsc::UnboundedSender<String>,
}

#[derive(Debug, thiserror::Error)]
#[error("reconcile failed: {0}")]
struct ReconcileError(#[from] kube::Error);

async fn reconcile(w: Arc<Widget>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    ctx.reconciles.fetch_add(1, Ordering::SeqCst);
    let name = format!("{}-job", w.name_any());
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "ownerReferences": [w.controller_owner_ref(&()).unwrap()]},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}
    }))
    .unwrap();
    let applied = ctx
        .jobs
        .patch(
            &name,
            &PatchParams::apply("widget-controller"),
            &Patch::Apply(&job),
        )
        .await?;
    let complete = applied
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Complete" && c.status == "True");
    let _ = ctx.tx.send(if complete {
        "complete".into()
    } else {
        "created".into()
    });
    Ok(Action::await_change())
}

fn error_policy(_: Arc<Widget>, _: &ReconcileError, _: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_millis(100))
}

#[tokio::test]
async fn controller_reconciles_on_create_and_on_owned_job_status_changes() {
    let server = ApiServer::start().await.unwrap();
    server.install_crds(&[Widget::crd()]).await.unwrap();
    let widgets: Api<Widget> = Api::default_namespaced(server.client());
    let jobs: Api<Job> = Api::default_namespaced(server.client());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let ctx = Arc::new(Ctx {
        jobs: jobs.clone(),
        reconciles: AtomicUsize::new(0),
        tx,
    });
    let controller = Controller::new(widgets.clone(), watcher::Config::default())
        .owns(jobs.clone(), watcher::Config::default())
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|_| async {});
    let handle = tokio::spawn(controller);
    widgets
        .create(&PostParams::default(), &Widget::new("w", WidgetSpec { size: 1 }))
        .await
        .unwrap();
    assert_eq!(rx.recv().await.as_deref(), Some("created"));
    assert!(jobs.get("w-job").await.unwrap().owner_references()[0].name == "w");
    server.complete_job("default", "w-job").await.unwrap();
    loop {
        if rx.recv().await.as_deref() == Some("complete") {
            break;
        }
    }
    assert!(ctx.reconciles.load(Ordering::SeqCst) >= 2);
    handle.abort();
}

#[tokio::test]
async fn lists_and_watches_through_another_served_version_rename_the_stored_objects() {
    let server = ApiServer::start().await.unwrap();
    let mut crd = Widget::crd();
    let mut v2 = crd.spec.versions[0].clone();
    v2.name = "v2".into();
    v2.storage = false;
    crd.spec.versions.push(v2);
    server.install_crds(&[crd]).await.unwrap();
    let v1: Api<Widget> = Api::default_namespaced(server.client());
    let start = server.resource_version();
    let w = Widget::new("w", WidgetSpec { size: 1 });
    v1.create(&PostParams::default(), &w).await.unwrap();
    let api_versions = |body: &str| -> Vec<String> {
        body.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .flat_map(|v| {
                let items = v["items"].as_array().cloned();
                items.unwrap_or_else(|| vec![v["object"].clone()])
            })
            .map(|o| o["apiVersion"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    for version in ["v1", "v2"] {
        let base = format!(
            "{}/apis/example.test/{version}/namespaces/default/widgets",
            server.url()
        );
        let list = reqwest::get(&base).await.unwrap().text().await.unwrap();
        let watch = format!("{base}?watch=true&timeoutSeconds=1&resourceVersion={start}");
        let events = reqwest::get(&watch).await.unwrap().text().await.unwrap();
        let want = vec![format!("example.test/{version}")];
        assert_eq!(api_versions(&list), want, "list at {version}");
        assert_eq!(api_versions(&events), want, "watch at {version}");
    }
}
