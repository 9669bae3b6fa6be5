//! API semantics against the real `kube::Api`: metadata, errors, selectors, pagination, patches,
//! server-side apply, status subresource, deletion, garbage collection and the test controls.

use crate::common;

use std::time::{Duration, Instant};

use common::{cm, status_of, Widget, WidgetSpec, WidgetStatus};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, WatchParams};
use kube::{CustomResourceExt, Resource, ResourceExt};
use serde_json::json;
use testkit::{ApiServer, Delay, Fault};

async fn widgets(server: &ApiServer) -> Api<Widget> {
    server.install_crds(&[Widget::crd()]).await.unwrap();
    Api::default_namespaced(server.client())
}

fn job(name: &str) -> Job {
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}
    }))
    .unwrap()
}

#[tokio::test]
async fn created_objects_get_uid_timestamp_and_increasing_resource_versions() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let a = api
        .create(&PostParams::default(), &cm("a", "k", "v"))
        .await
        .unwrap();
    let b = api
        .create(&PostParams::default(), &cm("b", "k", "v"))
        .await
        .unwrap();
    assert_eq!(a.metadata.uid.as_ref().map(String::len), Some(36));
    assert!(a.metadata.creation_timestamp.is_some());
    let rv = |c: &ConfigMap| c.resource_version().unwrap().parse::<u64>().unwrap();
    assert!(rv(&b) > rv(&a));
    assert_eq!(a.namespace().as_deref(), Some("default"));
    assert_eq!(
        server.object("v1/configmaps", "default", "a").unwrap()["data"]["k"],
        "v"
    );
}

#[tokio::test]
async fn stale_resource_version_and_duplicate_create_are_409_statuses() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let first = api
        .create(&PostParams::default(), &cm("a", "k", "1"))
        .await
        .unwrap();
    let mut newer = first.clone();
    newer.data = Some([("k".to_string(), "2".to_string())].into());
    api.replace("a", &PostParams::default(), &newer).await.unwrap();
    let mut stale = first.clone();
    stale.data = Some([("k".to_string(), "3".to_string())].into());
    let s = status_of(api.replace("a", &PostParams::default(), &stale).await);
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    assert!(
        s.message.contains("the object has been modified"),
        "{}",
        s.message
    );
    let s = status_of(api.create(&PostParams::default(), &cm("a", "k", "1")).await);
    assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(s.message, "configmaps \"a\" already exists");
    let d = s.details.unwrap();
    assert_eq!(
        (d.name.as_str(), d.kind.as_str(), d.group.as_str()),
        ("a", "configmaps", "")
    );
}

#[tokio::test]
async fn missing_objects_are_404_not_found() {
    let server = ApiServer::start().await.unwrap();
    let jobs: Api<Job> = Api::default_namespaced(server.client());
    let s = status_of(jobs.get("nope").await);
    assert_eq!((s.code, s.reason.as_str()), (404, "NotFound"));
    assert_eq!(s.message, "jobs.batch \"nope\" not found");
    assert_eq!(s.details.unwrap().group, "batch");
    let other: Api<ConfigMap> = Api::namespaced(server.client(), "missing-ns");
    let s = status_of(other.create(&PostParams::default(), &cm("a", "k", "v")).await);
    assert_eq!(s.message, "namespaces \"missing-ns\" not found");
}

#[tokio::test]
async fn bad_names_labels_and_missing_names_are_422_invalid() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let s = status_of(
        api.create(&PostParams::default(), &cm("Bad_Name", "k", "v"))
            .await,
    );
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert!(
        s.message
            .starts_with("ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value"),
        "{}",
        s.message
    );
    assert_eq!(s.details.unwrap().causes[0].field, "metadata.name");
    let mut long = cm("ok", "k", "v");
    long.metadata.labels = Some([("app".to_string(), "x".repeat(64))].into());
    let s = status_of(api.create(&PostParams::default(), &long).await);
    assert_eq!(s.code, 422);
    assert!(
        s.message.contains("must be no more than 63 characters"),
        "{}",
        s.message
    );
    let mut nameless = cm("", "k", "v");
    nameless.metadata.name = None;
    let s = status_of(api.create(&PostParams::default(), &nameless).await);
    assert!(
        s.message.contains("name or generateName is required"),
        "{}",
        s.message
    );
    let jobs: Api<Job> = Api::default_namespaced(server.client());
    let mut j = job("j");
    j.spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .restart_policy = None;
    assert_eq!(status_of(jobs.create(&PostParams::default(), &j).await).code, 422);
}

#[tokio::test]
async fn malformed_bodies_are_400_and_wrong_methods_are_405() {
    let server = ApiServer::start().await.unwrap();
    let client = server.client();
    let req = http::Request::post("/api/v1/namespaces/default/configmaps")
        .body(b"{not json".to_vec())
        .unwrap();
    let err = client.request_text(req).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 400 && s.reason == "BadRequest"),
        "{err:?}"
    );
    let req = http::Request::post("/api/v1/namespaces/default/configmaps/a")
        .body(b"{}".to_vec())
        .unwrap();
    let err = client.request_text(req).await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 405), "{err:?}");
    // Protobuf without the k8s\0 envelope is malformed.
    let req = http::Request::post("/api/v1/namespaces/default/configmaps")
        .header("content-type", "application/vnd.kubernetes.protobuf")
        .body(b"{}".to_vec())
        .unwrap();
    let err = client.request_text(req).await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 400), "{err:?}");
}

#[tokio::test]
async fn generate_name_appends_a_random_suffix() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let mut c = cm("", "k", "v");
    c.metadata.name = None;
    c.metadata.generate_name = Some("gen-".into());
    let a = api.create(&PostParams::default(), &c).await.unwrap();
    let b = api.create(&PostParams::default(), &c).await.unwrap();
    assert!(
        a.name_any().starts_with("gen-") && a.name_any().len() == 9,
        "{}",
        a.name_any()
    );
    assert_ne!(a.name_any(), b.name_any());
}

#[tokio::test]
async fn immutable_configmaps_and_secrets_refuse_data_changes() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let mut c = cm("frozen", "k", "1");
    c.immutable = Some(true);
    api.create(&PostParams::default(), &c).await.unwrap();
    let patch = json!({"data": {"k": "2"}});
    let s = status_of(
        api.patch("frozen", &PatchParams::default(), &Patch::Merge(&patch))
            .await,
    );
    assert_eq!(s.code, 422);
    assert_eq!(
        s.message,
        "ConfigMap \"frozen\" is invalid: data: Forbidden: field is immutable when `immutable` is set"
    );
    let secrets: Api<Secret> = Api::default_namespaced(server.client());
    let sec: Secret = serde_json::from_value(json!({"metadata": {"name": "s"}, "immutable": true,
        "stringData": {"a": "hello"}}))
    .unwrap();
    let created = secrets.create(&PostParams::default(), &sec).await.unwrap();
    assert_eq!(created.data.unwrap()["a"].0, b"hello");
    let s = status_of(
        secrets
            .patch(
                "s",
                &PatchParams::default(),
                &Patch::Merge(&json!({"data": {"a": "eA=="}})),
            )
            .await,
    );
    assert_eq!(s.code, 422);
}

#[tokio::test]
async fn label_and_field_selectors_filter_lists() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    for (name, app, tier) in [
        ("a", "web", Some("front")),
        ("b", "db", Some("back")),
        ("c", "web", None),
    ] {
        let mut c = cm(name, "k", "v");
        let mut labels = std::collections::BTreeMap::from([("app".to_string(), app.to_string())]);
        if let Some(t) = tier {
            labels.insert("tier".into(), t.into());
        }
        c.metadata.labels = Some(labels);
        api.create(&PostParams::default(), &c).await.unwrap();
    }
    let names =
        |l: kube::core::ObjectList<ConfigMap>| l.items.iter().map(|c| c.name_any()).collect::<Vec<_>>();
    for (sel, want) in [
        ("app=web", vec!["a", "c"]),
        ("app==db", vec!["b"]),
        ("app!=web", vec!["b"]),
        ("tier in (front,back)", vec!["a", "b"]),
        ("tier notin (front)", vec!["b", "c"]),
        ("tier", vec!["a", "b"]),
        ("!tier", vec!["c"]),
    ] {
        assert_eq!(
            names(api.list(&ListParams::default().labels(sel)).await.unwrap()),
            want,
            "{sel}"
        );
    }
    let by_name = api
        .list(&ListParams::default().fields("metadata.name=b"))
        .await
        .unwrap();
    assert_eq!(names(by_name), vec!["b"]);
    let all: Api<ConfigMap> = Api::all(server.client());
    let in_ns = all
        .list(&ListParams::default().fields("metadata.namespace=default,metadata.name!=a"))
        .await
        .unwrap();
    assert_eq!(names(in_ns), vec!["b", "c"]);
    let s = status_of(api.list(&ListParams::default().fields("data.k=v")).await);
    assert_eq!(s.code, 400);
}

#[tokio::test]
async fn lists_page_with_limit_and_continue() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    for i in 0..7 {
        api.create(&PostParams::default(), &cm(&format!("cm-{i}"), "k", "v"))
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut lp = ListParams::default().limit(3);
    let mut pages = 0;
    loop {
        let page = api.list(&lp).await.unwrap();
        pages += 1;
        seen.extend(page.items.iter().map(|c| c.name_any()));
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, (0..7).map(|i| format!("cm-{i}")).collect::<Vec<_>>());
}

#[tokio::test]
async fn generation_moves_on_spec_changes_only_and_status_is_a_separate_subresource() {
    let server = ApiServer::start().await.unwrap();
    let api = widgets(&server).await;
    let w = Widget::new("w", WidgetSpec { size: 1 });
    let created = api.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    let labelled = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        labelled.metadata.generation,
        Some(1),
        "metadata changes keep the generation"
    );
    let resized = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"size": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(resized.metadata.generation, Some(2));
    let ignored = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"phase": "Main"}})),
        )
        .await
        .unwrap();
    assert_eq!(ignored.status, None, "the main resource ignores status");
    let st = api
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"phase": "Ready"}, "spec": {"size": 9}})),
        )
        .await
        .unwrap();
    assert_eq!(
        st.status,
        Some(WidgetStatus {
            phase: "Ready".into()
        })
    );
    assert_eq!(st.spec.size, 2, "/status ignores spec");
    assert_eq!(
        st.metadata.generation,
        Some(2),
        "status changes keep the generation"
    );
    let mut stale = created.clone();
    stale.spec.size = 5;
    assert_eq!(
        status_of(api.replace("w", &PostParams::default(), &stale).await).code,
        409
    );
    let mut unconditional = st.clone();
    unconditional.metadata.resource_version = None;
    assert_eq!(
        status_of(api.replace("w", &PostParams::default(), &unconditional).await).code,
        422
    );
}

#[tokio::test]
async fn merge_json_and_strategic_patches_apply() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    api.create(&PostParams::default(), &cm("p", "a", "1"))
        .await
        .unwrap();
    let pp = PatchParams::default();
    api.patch("p", &pp, &Patch::Merge(&json!({"data": {"b": "2", "a": null}})))
        .await
        .unwrap();
    let ops: json_patch::Patch =
        serde_json::from_value(json!([{"op": "add", "path": "/data/c", "value": "3"}])).unwrap();
    api.patch("p", &pp, &Patch::<()>::Json(ops)).await.unwrap();
    let c = api
        .patch("p", &pp, &Patch::Strategic(&json!({"data": {"d": "4"}})))
        .await
        .unwrap();
    assert_eq!(
        c.data.unwrap(),
        [("b", "2"), ("c", "3"), ("d", "4")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    );
    let bad: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/data/b", "value": "x"}])).unwrap();
    assert_eq!(
        status_of(api.patch("p", &pp, &Patch::<()>::Json(bad)).await).code,
        422
    );
    assert_eq!(
        status_of(api.patch("nope", &pp, &Patch::Merge(&json!({}))).await).code,
        404
    );
}

#[tokio::test]
async fn server_side_apply_creates_prunes_dropped_fields_and_detects_conflicts() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let apply = |data: serde_json::Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": data});
    let mine = PatchParams::apply("mine");
    let created = api
        .patch("ssa", &mine, &Patch::Apply(apply(json!({"a": "1", "b": "2"}))))
        .await
        .unwrap();
    assert_eq!(created.data.as_ref().unwrap().len(), 2);
    assert_eq!(
        created.metadata.managed_fields.as_ref().unwrap()[0]
            .manager
            .as_deref(),
        Some("mine")
    );
    let pruned = api
        .patch("ssa", &mine, &Patch::Apply(apply(json!({"a": "1"}))))
        .await
        .unwrap();
    assert_eq!(pruned.data.unwrap().keys().collect::<Vec<_>>(), vec!["a"]);
    let theirs = PatchParams::apply("theirs");
    let s = status_of(
        api.patch("ssa", &theirs, &Patch::Apply(apply(json!({"a": "2"}))))
            .await,
    );
    assert_eq!(s.code, 409);
    assert!(s.message.contains("conflict with \"mine\""), "{}", s.message);
    let forced = api
        .patch(
            "ssa",
            &theirs.clone().force(),
            &Patch::Apply(apply(json!({"a": "2"}))),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap()["a"], "2");
    let rv = api.get("ssa").await.unwrap().resource_version();
    let again = api
        .patch("ssa", &theirs.force(), &Patch::Apply(apply(json!({"a": "2"}))))
        .await
        .unwrap();
    assert_eq!(again.resource_version(), rv, "an unchanged apply is not a write");
}

#[tokio::test]
async fn finalizers_keep_a_deleted_object_until_they_are_removed() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let mut c = cm("fin", "k", "v");
    c.metadata.finalizers = Some(vec!["example.test/hold".into()]);
    api.create(&PostParams::default(), &c).await.unwrap();
    api.delete("fin", &DeleteParams::default()).await.unwrap();
    let held = api.get("fin").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    let more = json!({"metadata": {"finalizers": ["example.test/hold", "example.test/more"]}});
    let s = status_of(
        api.patch("fin", &PatchParams::default(), &Patch::Merge(&more))
            .await,
    );
    assert!(
        s.message.contains("no new finalizers can be added"),
        "{}",
        s.message
    );
    let mut other_uid = held.clone();
    other_uid.metadata.uid = Some("00000000-0000-4000-8000-000000000001".into());
    assert_eq!(
        status_of(api.replace("fin", &PostParams::default(), &other_uid).await).code,
        409
    );
    api.patch(
        "fin",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(status_of(api.get("fin").await).code, 404);
}

async fn owned_by(api: &Api<ConfigMap>, name: &str, owner: &ConfigMap) {
    let mut c = cm(name, "k", "v");
    c.metadata.owner_references = Some(vec![owner.controller_owner_ref(&()).unwrap()]);
    api.create(&PostParams::default(), &c).await.unwrap();
}

#[tokio::test]
async fn deletion_propagates_to_dependents_by_policy() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let exists = |n: &'static str| {
        let api = api.clone();
        async move { api.get_opt(n).await.unwrap().is_some() }
    };
    // Background: owner and dependents (recursively) go.
    let owner = api
        .create(&PostParams::default(), &cm("bg", "k", "v"))
        .await
        .unwrap();
    owned_by(&api, "bg-child", &owner).await;
    let child = api.get("bg-child").await.unwrap();
    owned_by(&api, "bg-grandchild", &child).await;
    api.delete("bg", &DeleteParams::background()).await.unwrap();
    assert!(!exists("bg").await && !exists("bg-child").await && !exists("bg-grandchild").await);
    // Foreground: the owner waits for a dependent held by a finalizer.
    let owner = api
        .create(&PostParams::default(), &cm("fg", "k", "v"))
        .await
        .unwrap();
    let mut held = cm("fg-child", "k", "v");
    held.metadata.owner_references = Some(vec![owner.controller_owner_ref(&()).unwrap()]);
    held.metadata.finalizers = Some(vec!["example.test/hold".into()]);
    api.create(&PostParams::default(), &held).await.unwrap();
    api.delete("fg", &DeleteParams::foreground()).await.unwrap();
    let waiting = api.get("fg").await.unwrap();
    assert!(waiting.finalizers().contains(&"foregroundDeletion".to_string()));
    assert!(waiting.metadata.deletion_timestamp.is_some());
    api.patch(
        "fg-child",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(!exists("fg-child").await && !exists("fg").await);
    // Orphan: dependents stay without the owner reference.
    let owner = api
        .create(&PostParams::default(), &cm("or", "k", "v"))
        .await
        .unwrap();
    owned_by(&api, "or-child", &owner).await;
    api.delete("or", &DeleteParams::orphan()).await.unwrap();
    let orphan = api.get("or-child").await.unwrap();
    assert!(orphan.metadata.owner_references.unwrap_or_default().is_empty());
}

#[tokio::test]
async fn dependents_of_a_missing_owner_are_collected() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let ghost = ConfigMap {
        metadata: ObjectMeta {
            name: Some("ghost".into()),
            uid: Some("00000000-0000-4000-8000-000000000000".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    owned_by(&api, "stray", &ghost).await;
    let mut gone = false;
    for _ in 0..100 {
        if api.get_opt("stray").await.unwrap().is_none() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        gone,
        "the garbage collector sweep removes objects whose owner does not exist"
    );
}

#[tokio::test]
async fn delete_collection_removes_only_matching_objects() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    for name in ["x1", "x2", "y1"] {
        let mut c = cm(name, "k", "v");
        c.metadata.labels = Some([("set".to_string(), name[..1].to_string())].into());
        api.create(&PostParams::default(), &c).await.unwrap();
    }
    api.delete_collection(&DeleteParams::default(), &ListParams::default().labels("set=x"))
        .await
        .unwrap();
    let left: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|c| c.name_any())
        .collect();
    assert_eq!(left, vec!["y1"]);
    assert_eq!(server.requests().count("deletecollection", "configmaps"), 1);
}

#[tokio::test]
async fn job_controls_set_status_like_the_job_controller() {
    let server = ApiServer::start().await.unwrap();
    let jobs: Api<Job> = Api::default_namespaced(server.client());
    jobs.create(&PostParams::default(), &job("ok")).await.unwrap();
    jobs.create(&PostParams::default(), &job("bad")).await.unwrap();
    server.start_job("default", "ok").await.unwrap();
    let running = jobs.get("ok").await.unwrap().status.unwrap();
    assert_eq!((running.active, running.start_time.is_some()), (Some(1), true));
    server.complete_job("default", "ok").await.unwrap();
    let done = jobs.get("ok").await.unwrap().status.unwrap();
    let types: Vec<(String, String)> = done
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    assert_eq!(
        types,
        vec![
            ("SuccessCriteriaMet".into(), "True".into()),
            ("Complete".into(), "True".into())
        ]
    );
    assert_eq!(
        (done.succeeded, done.active, done.completion_time.is_some()),
        (Some(1), Some(0), true)
    );
    server
        .fail_job(
            "default",
            "bad",
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        )
        .await
        .unwrap();
    let failed = jobs.get("bad").await.unwrap().status.unwrap();
    let last = failed.conditions.unwrap().pop().unwrap();
    assert_eq!(
        (last.type_.as_str(), last.reason.as_deref()),
        ("Failed", Some("BackoffLimitExceeded"))
    );
    assert_eq!(failed.failed, Some(1));
    assert!(server.complete_job("default", "missing").await.is_err());
}

#[tokio::test]
async fn faults_fail_the_next_matching_requests_with_a_status() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    api.create(&PostParams::default(), &cm("a", "k", "v"))
        .await
        .unwrap();
    server.inject_fault(Fault::on("get", "configmaps", 500, 2));
    for _ in 0..2 {
        let s = status_of(api.get("a").await);
        assert_eq!((s.code, s.reason.as_str()), (500, "InternalError"));
    }
    assert!(api.get("a").await.is_ok());
    server.inject_fault(
        Fault {
            code: 500,
            count: 1,
            ..Fault::default()
        }
        .named("b"),
    );
    assert!(api.get("a").await.is_ok(), "the fault is limited to name b");
    assert_eq!(status_of(api.get("b").await).code, 500);
    server.set_latency(Duration::from_millis(5));
    assert!(api.get("a").await.is_ok());
}

#[tokio::test]
async fn delays_hold_back_the_next_matching_requests_and_no_others() {
    const HELD: Duration = Duration::from_secs(1);
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    api.create(&PostParams::default(), &cm("a", "k", "v"))
        .await
        .unwrap();
    server.inject_delay(Delay::on("list", "configmaps", HELD, 1));
    // A watch is verb `watch` and a get verb `get`, as on the real server: neither takes the list's delay.
    let _watch = api.watch(&WatchParams::default(), "0").await.unwrap();
    api.get("a").await.unwrap();
    let listing = Instant::now();
    let listed = api.list(&ListParams::default()).await.unwrap();
    assert!(
        listing.elapsed() >= HELD,
        "the list was held back: answered after {:?}",
        listing.elapsed()
    );
    assert_eq!(listed.items.len(), 1, "and then served");

    // One request per count, and only the named object: while a get of `a` is held back, the next list
    // and a get of `b` are answered.
    server.inject_delay(Delay::on("get", "configmaps", HELD, 1).named("a"));
    let getting = Instant::now();
    let held = tokio::spawn({
        let api = api.clone();
        async move { api.get("a").await }
    });
    while server.requests().count("get", "configmaps") < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    api.list(&ListParams::default()).await.unwrap();
    assert_eq!(status_of(api.get("b").await).code, 404);
    assert!(!held.is_finished(), "the get of a is still held back");
    assert_eq!(held.await.unwrap().unwrap().name_any(), "a");
    assert!(getting.elapsed() >= HELD);
    assert!(api.get("a").await.is_ok());
}

#[tokio::test]
async fn requests_are_counted_by_verb_and_resource() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let log = server.requests();
    api.create(&PostParams::default(), &cm("a", "k", "v"))
        .await
        .unwrap();
    api.get("a").await.unwrap();
    api.list(&ListParams::default()).await.unwrap();
    api.patch(
        "a",
        &PatchParams::apply("t").force(),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "w"}})),
    )
    .await
    .unwrap();
    assert_eq!(log.count("create", "configmaps"), 1);
    assert_eq!(log.count("get", "configmaps"), 1);
    assert_eq!(log.count("list", "configmaps"), 1);
    assert_eq!(
        (log.writes(), log.writes_to("configmaps"), log.writes_to("jobs")),
        (2, 2, 0)
    );
    assert_eq!(log.total(), 4);
    log.reset();
    api.get("a").await.unwrap();
    assert_eq!((log.writes(), log.total()), (0, 1));
}

#[tokio::test]
async fn deleting_a_crd_stops_serving_its_resources() {
    let server = ApiServer::start().await.unwrap();
    let api = widgets(&server).await;
    api.create(&PostParams::default(), &Widget::new("w", WidgetSpec { size: 1 }))
        .await
        .unwrap();
    let crds: Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = Api::all(server.client());
    let crd = crds.get("widgets.example.test").await.unwrap();
    let conditions = crd.status.unwrap().conditions.unwrap();
    assert!(conditions
        .iter()
        .any(|c| c.type_ == "Established" && c.status == "True"));
    assert!(conditions
        .iter()
        .any(|c| c.type_ == "NamesAccepted" && c.status == "True"));
    crds.delete("widgets.example.test", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(status_of(api.list(&ListParams::default()).await).code, 404);
    assert!(server
        .object(("example.test", "v1", "widgets"), "default", "w")
        .is_none());
}

#[tokio::test]
async fn dry_run_writes_validate_but_store_nothing() {
    let server = ApiServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let pp = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let would = api.create(&pp, &cm("dry", "k", "v")).await.unwrap();
    assert_eq!(would.name_any(), "dry");
    assert!(api.get_opt("dry").await.unwrap().is_none());
    assert_eq!(status_of(api.create(&pp, &cm("Bad", "k", "v")).await).code, 422);
}
