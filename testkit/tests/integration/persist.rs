//! Persistence: a server with a data directory keeps its objects, versions and CRDs across a
//! restart, and refuses to start on damaged or locked state.

use crate::common;

use std::path::Path;

use common::{cm, Widget, WidgetSpec, WidgetStatus};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{CustomResourceExt, Resource, ResourceExt};
use serde_json::json;
use testkit::{ApiServer, Options};

async fn start(dir: &Path) -> anyhow::Result<ApiServer> {
    ApiServer::start_with(Options {
        data_dir: Some(dir.to_path_buf()),
        ..Options::default()
    })
    .await
}

fn job(name: &str) -> Job {
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}
    }))
    .unwrap()
}

fn widget(name: &str, size: i64) -> Widget {
    Widget {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: WidgetSpec { size },
        status: None,
    }
}

/// Starts a server on `dir`, creates three ConfigMaps and stops it.
async fn fill(dir: &Path) {
    let server = start(dir).await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    for i in 0..3 {
        api.create(&PostParams::default(), &cm(&format!("c{i}"), "k", "v"))
            .await
            .unwrap();
    }
    server.shutdown().await;
}

fn start_error(r: anyhow::Result<ApiServer>) -> String {
    match r {
        Ok(_) => panic!("the server started on damaged or locked state"),
        Err(e) => format!("{e:#}"),
    }
}

#[tokio::test]
async fn objects_survive_a_restart_with_their_uid_and_resource_version() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("api");
    let (config, widget_before, job_before, rv_before) = {
        let server = start(&data).await.unwrap();
        server.install_crds(&[Widget::crd()]).await.unwrap();
        let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
        let widgets: Api<Widget> = Api::default_namespaced(server.client());
        let jobs: Api<Job> = Api::default_namespaced(server.client());
        let config = cms
            .create(&PostParams::default(), &cm("config", "k", "v"))
            .await
            .unwrap();
        widgets
            .create(&PostParams::default(), &widget("w", 3))
            .await
            .unwrap();
        let status = json!({"status": WidgetStatus { phase: "Ready".into() }});
        let widget = widgets
            .patch_status("w", &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
        jobs.create(&PostParams::default(), &job("j")).await.unwrap();
        server.complete_job("default", "j").await.unwrap();
        let job = jobs.get("j").await.unwrap();
        (config, widget, job, server.resource_version())
    };

    let server = start(&data).await.unwrap();
    assert_eq!(server.resource_version(), rv_before);
    let cms: Api<ConfigMap> = Api::default_namespaced(server.client());
    let widgets: Api<Widget> = Api::default_namespaced(server.client());
    let jobs: Api<Job> = Api::default_namespaced(server.client());
    let config_after = cms.get("config").await.unwrap();
    assert_eq!(config_after.uid(), config.uid());
    assert_eq!(config_after.resource_version(), config.resource_version());
    assert_eq!(config_after.data, config.data);
    let widget_after = widgets
        .get("w")
        .await
        .expect("the CRD is served again after the restart");
    assert_eq!(widget_after.uid(), widget_before.uid());
    assert_eq!(widget_after.resource_version(), widget_before.resource_version());
    assert_eq!(widget_after.status, widget_before.status);
    assert_eq!(widget_after.spec, widget_before.spec);
    let job_after = jobs.get("j").await.unwrap();
    assert_eq!(job_after.uid(), job_before.uid());
    assert_eq!(job_after.resource_version(), job_before.resource_version());
    assert_eq!(job_after.status.as_ref().and_then(|s| s.succeeded), Some(1));
    assert_eq!(job_after.status, job_before.status);
}

#[tokio::test]
async fn installing_the_same_crds_on_a_restored_store_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    {
        let server = start(dir.path()).await.unwrap();
        server.install_crds(&[Widget::crd()]).await.unwrap();
        let widgets: Api<Widget> = Api::default_namespaced(server.client());
        widgets
            .create(&PostParams::default(), &widget("w", 1))
            .await
            .unwrap();
    }
    let server = start(dir.path()).await.unwrap();
    let rv = server.resource_version();
    server
        .install_crds(&[Widget::crd()])
        .await
        .expect("installing CRDs again is an update, not AlreadyExists");
    assert_eq!(
        server.resource_version(),
        rv,
        "an unchanged CRD is not written again"
    );
    let widgets: Api<Widget> = Api::default_namespaced(server.client());
    assert_eq!(widgets.get("w").await.unwrap().spec.size, 1);
}

#[tokio::test]
async fn resource_versions_keep_increasing_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let first = {
        let server = start(dir.path()).await.unwrap();
        let api: Api<ConfigMap> = Api::default_namespaced(server.client());
        let a = api
            .create(&PostParams::default(), &cm("a", "k", "v"))
            .await
            .unwrap();
        let rv = a.resource_version().unwrap().parse::<u64>().unwrap();
        server.shutdown().await;
        rv
    };
    for round in 0..2 {
        let server = start(dir.path()).await.unwrap();
        let api: Api<ConfigMap> = Api::default_namespaced(server.client());
        let b = api
            .create(&PostParams::default(), &cm(&format!("b{round}"), "k", "v"))
            .await
            .unwrap();
        let rv: u64 = b.resource_version().unwrap().parse().unwrap();
        assert!(
            rv > first,
            "round {round}: resourceVersion {rv} is not above {first}"
        );
        assert_eq!(rv, server.resource_version());
        server.shutdown().await;
    }
}

#[tokio::test]
async fn deletions_and_garbage_collection_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let server = start(dir.path()).await.unwrap();
        let api: Api<ConfigMap> = Api::default_namespaced(server.client());
        api.create(&PostParams::default(), &cm("gone", "k", "v"))
            .await
            .unwrap();
        let owner = api
            .create(&PostParams::default(), &cm("owner", "k", "v"))
            .await
            .unwrap();
        let mut owned = cm("owned", "k", "v");
        owned.metadata.owner_references = Some(vec![owner.controller_owner_ref(&()).unwrap()]);
        api.create(&PostParams::default(), &owned).await.unwrap();
        api.delete("gone", &DeleteParams::default()).await.unwrap();
    }
    let server = start(dir.path()).await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    assert!(
        api.get_opt("gone").await.unwrap().is_none(),
        "a deleted object came back"
    );
    assert!(api.get_opt("owned").await.unwrap().is_some());
    api.delete("owner", &DeleteParams::default()).await.unwrap();
    assert!(
        api.get_opt("owned").await.unwrap().is_none(),
        "the owner index was restored, so the dependent is collected with its owner"
    );
}

#[tokio::test]
async fn a_damaged_database_stops_the_start_naming_the_file_and_changing_nothing() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path()).await;
    let db = dir.path().join("store.db");
    let mut bytes = std::fs::read(&db).unwrap();
    // Overwrite the page after the header page: a table's b-tree.
    for b in bytes.iter_mut().skip(4096).take(64) {
        *b = 0xA5;
    }
    std::fs::write(&db, &bytes).unwrap();

    let msg = start_error(start(dir.path()).await);
    assert!(msg.contains(&db.display().to_string()), "{msg}");
    assert!(msg.contains("damaged"), "{msg}");
    assert!(msg.contains("move it aside"), "{msg}");
    assert_eq!(std::fs::read(&db).unwrap(), bytes, "the database was rewritten");
}

#[tokio::test]
async fn a_file_that_is_not_a_database_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    std::fs::write(
        &db,
        b"this is not an SQLite database, just some text that is long enough".repeat(100),
    )
    .unwrap();
    let msg = start_error(start(dir.path()).await);
    assert!(msg.contains(&db.display().to_string()), "{msg}");
    assert!(msg.contains("damaged"), "{msg}");
}

/// Writes ConfigMaps into a server on `dir` until a write is refused, checks the refusal, then
/// `make_room` and checks a restart keeps every acknowledged write.
async fn fill_until_refused(dir: &Path, db_page_limit: Option<u64>, make_room: impl FnOnce()) {
    let server = ApiServer::start_with(Options {
        data_dir: Some(dir.to_path_buf()),
        db_page_limit,
        ..Options::default()
    })
    .await
    .unwrap();
    // Raw requests: kube's client would retry the 503s.
    let big = "x".repeat(3000);
    let mut acknowledged = Vec::new();
    let refusal = loop {
        let name = format!("c{}", acknowledged.len());
        let body = serde_json::to_value(cm(&name, "k", &big)).unwrap();
        let got = common::send(
            &server,
            "POST",
            "/api/v1/namespaces/default/configmaps",
            Some(&body),
        )
        .await;
        match got.status {
            201 => acknowledged.push(name),
            _ => break got,
        }
        assert!(acknowledged.len() < 200, "the disk never filled up");
    };
    assert_eq!(refusal.status, 503, "{}", refusal.body);
    let message = refusal.body["message"].as_str().unwrap_or("");
    assert!(message.contains("full"), "{message}");
    assert!(message.contains("store.db"), "{message}");
    assert_eq!(server.persist_failure().as_deref(), Some(message));
    assert_eq!(server.persist_failed().await, message);
    let later = common::send(&server, "GET", "/api/v1/namespaces/default/configmaps/c0", None).await;
    assert_eq!(later.status, 503, "every later request is refused");
    drop(server);

    make_room();
    let server = start(dir).await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    for name in &acknowledged {
        assert!(
            api.get_opt(name).await.unwrap().is_some(),
            "{name} was acknowledged"
        );
    }
    assert_eq!(
        api.list(&Default::default()).await.unwrap().items.len(),
        acknowledged.len()
    );
}

#[tokio::test]
async fn a_full_disk_refuses_writes_with_a_clear_error_and_keeps_what_was_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    fill_until_refused(dir.path(), Some(24), || {}).await;
}

/// A tmpfs mounted for one test, unmounted when dropped.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` on `dir`; None (with the reason printed) where mounting is not
    /// allowed, as for a user without CAP_SYS_ADMIN.
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Tmpfs(dir.to_path_buf())),
            Ok(o) => {
                eprintln!(
                    "skipped: cannot mount a tmpfs here: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("skipped: cannot run mount: {e}");
                None
            }
        }
    }

    fn resize(&self, size: &str) {
        let status = std::process::Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .status()
            .expect("mount runs");
        assert!(status.success(), "resizing the tmpfs");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[tokio::test]
async fn a_really_full_filesystem_refuses_writes_and_a_restart_with_room_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let Some(tmpfs) = Tmpfs::mount(dir.path(), "160k") else {
        return;
    };
    let data = dir.path().join("api");
    fill_until_refused(&data, None, || tmpfs.resize("8m")).await;
}

#[tokio::test]
async fn a_directory_in_use_is_refused_until_its_server_stops() {
    let dir = tempfile::tempdir().unwrap();
    let first = start(dir.path()).await.unwrap();
    let msg = start_error(start(dir.path()).await);
    assert!(
        msg.contains("in use by another API server of this process"),
        "{msg}"
    );
    assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
    drop(first);
    let second = start(dir.path())
        .await
        .expect("the lock is released when the server is dropped");
    second.shutdown().await;
    start(dir.path())
        .await
        .expect("the lock is released when shutdown returns");
}

#[tokio::test]
async fn a_directory_locked_by_another_process_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path()).unwrap();
    // flock(1) holds the lock in a process of its own until its stdin closes.
    let mut holder = std::process::Command::new("flock")
        .arg(dir.path().join(testkit::persist::LOCK_FILE))
        .args(["cat"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("flock (util-linux) runs");
    let lock = dir.path().join(testkit::persist::LOCK_FILE);
    // flock opens the lock file before it locks it: wait until a probe finds it held.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let probe = std::fs::OpenOptions::new().write(true).open(&lock);
        if let Ok(f) = probe {
            if f.try_lock().is_err() {
                break;
            }
            drop(f);
        }
        assert!(std::time::Instant::now() < deadline, "flock never took the lock");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let started = std::time::Instant::now();
    let msg = start_error(start(dir.path()).await);
    assert!(msg.contains("in use by another process"), "{msg}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "a lock held by another process is refused at once, not waited for"
    );
    drop(holder.stdin.take());
    holder.wait().unwrap();
    start(dir.path())
        .await
        .expect("the lock is free once the other process ends");
}

/// Spawns short-lived processes on a thread of its own until dropped: each fork shares every open
/// descriptor of the test process, the data directory's lock among them, until it execs.
struct Forking(
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    Option<std::thread::JoinHandle<u32>>,
);

impl Forking {
    fn start() -> Forking {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let running = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut spawned = 0;
            while !running.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::process::Command::new("true").status();
                spawned += 1;
            }
            spawned
        });
        Forking(stop, Some(thread))
    }

    fn stop(mut self) -> u32 {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        self.1.take().map(|t| t.join().unwrap()).unwrap_or(0)
    }
}

/// The race of issue "testkit's in-process restart races its own data-directory lock", made to happen:
/// many restarts on one directory, each right after the last stop, while another thread forks
/// processes that share the lock's descriptor for a moment. Every start must succeed and find every
/// earlier write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_restarts_on_one_directory_each_find_it_free_and_whole() {
    let dir = tempfile::tempdir().unwrap();
    let forking = Forking::start();
    let mut last_rv = 0;
    for round in 0..200 {
        let server = start(dir.path())
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e:#}"));
        if round > 0 {
            assert_eq!(
                server.resource_version(),
                last_rv,
                "round {round}: the store moved back or on"
            );
        }
        let api: Api<ConfigMap> = Api::default_namespaced(server.client());
        if round > 0 {
            let previous = api.get(&format!("r{}", round - 1)).await.unwrap();
            assert_eq!(
                previous.resource_version().unwrap().parse::<u64>().unwrap(),
                last_rv
            );
        }
        let made = api
            .create(&PostParams::default(), &cm(&format!("r{round}"), "k", "v"))
            .await
            .unwrap();
        last_rv = made.resource_version().unwrap().parse().unwrap();
        // Half the rounds stop with an awaited shutdown, half by dropping the handle.
        if round % 2 == 0 {
            server.shutdown().await;
        } else {
            drop(server);
        }
    }
    let spawned = forking.stop();
    assert!(spawned > 0, "no process was forked beside the restarts");
}

#[tokio::test]
async fn watches_from_before_a_restart_are_told_to_list_again() {
    let dir = tempfile::tempdir().unwrap();
    let old_rv = {
        let server = start(dir.path()).await.unwrap();
        let api: Api<ConfigMap> = Api::default_namespaced(server.client());
        api.create(&PostParams::default(), &cm("a", "k", "v"))
            .await
            .unwrap();
        let rv = server.resource_version();
        api.create(&PostParams::default(), &cm("b", "k", "v"))
            .await
            .unwrap();
        rv
    };
    let server = start(dir.path()).await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let mut events = api
        .watch(&kube::api::WatchParams::default().timeout(5), &old_rv.to_string())
        .await
        .unwrap()
        .boxed();
    let first = events.next().await.expect("an event").unwrap();
    match first {
        kube::api::WatchEvent::Error(e) => assert_eq!(e.code, 410),
        other => panic!("expected 410 Gone, got {other:?}"),
    }
}

/// The data every ConfigMap of the kill test holds: derived from its name, so a half-written one shows.
fn payload(name: &str) -> String {
    format!("{name}:").repeat(50)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_a_thousand_concurrent_writes_loses_no_acknowledged_write() {
    use futures::stream::{self, StreamExt as _};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("store");
    let kubeconfig = dir.path().join("kubeconfig");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kok-testkit"))
        .arg("serve")
        .arg("--data-dir")
        .arg(&data)
        .arg("--kubeconfig-out")
        .arg(&kubeconfig)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("kok-testkit serve starts");
    let mut port = None;
    for _ in 0..200 {
        port = std::fs::read_to_string(&kubeconfig).ok().and_then(|k| {
            k.split("http://127.0.0.1:")
                .nth(1)?
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<u16>()
                .ok()
        });
        if port.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let port = port.expect("the server wrote its kubeconfig");

    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let killed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let child_id = child.id();
    let writes = stream::iter(0..1000).map(|i| {
        let (acked, killed) = (acked.clone(), killed.clone());
        async move {
            let name = format!("w{i:04}");
            let body = serde_json::to_string(&cm(&name, "data", &payload(&name))).unwrap();
            let path = "/api/v1/namespaces/default/configmaps";
            let Ok(answer) = common::request(port, "POST", path, "application/json", &body).await else {
                return;
            };
            if answer.status != 201 {
                return;
            }
            let rv = answer.body["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let mut acked = acked.lock().unwrap();
            acked.push((name, rv));
            // Mid-way, with dozens of writes in flight, the process is killed outright.
            if acked.len() == 400 && !killed.swap(true, std::sync::atomic::Ordering::SeqCst) {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &child_id.to_string()])
                    .status();
            }
        }
    });
    writes.buffer_unordered(64).collect::<Vec<()>>().await;
    let _ = child.kill();
    let status = child.wait().unwrap();
    assert!(
        killed.load(std::sync::atomic::Ordering::SeqCst),
        "the kill happened during the writes"
    );
    assert!(!status.success(), "the server was killed, not stopped: {status}");
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() >= 400 && acked.len() < 1000,
        "{} writes acknowledged",
        acked.len()
    );

    let server = start(&data).await.expect("the store opens after SIGKILL");
    let api: Api<ConfigMap> = Api::default_namespaced(server.client());
    let stored = api.list(&Default::default()).await.unwrap().items;
    for (name, rv) in &acked {
        let found = stored
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("acknowledged write {name} was lost"));
        assert_eq!(
            found.metadata.resource_version.as_deref(),
            Some(rv.as_str()),
            "{name}"
        );
    }
    for c in &stored {
        let name = c.metadata.name.clone().unwrap_or_default();
        let data = c
            .data
            .as_ref()
            .and_then(|d| d.get("data"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(data, payload(&name), "{name} is whole");
    }
    assert!(server.resource_version() >= acked.len() as u64);
}
