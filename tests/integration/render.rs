//! `kok render` of the example repository is the reviewed golden output; render refuses invalid input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use k8s_openapi::api::core::v1::ConfigMap;
use kok::api::{Cluster, ClusterOperation};

const GOLDEN: &str = "tests/golden/render-repo-layout.yaml";
const EXAMPLE: &str = "examples/repo-layout";
const COMMIT: &str = "5e1f0c2a9b8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs the kok binary with `args` in the crate root, without any `KOK_*` variable from the
/// environment of the test run.
fn kok(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kok"));
    cmd.current_dir(root()).args(args);
    for (key, _) in std::env::vars() {
        if key.starts_with("KOK_") {
            cmd.env_remove(key);
        }
    }
    cmd.envs(env.iter().copied());
    cmd.output().unwrap()
}

fn render_example() -> String {
    let out = kok(&["render", EXAMPLE, "--commit", COMMIT, "--ref", "main"], &[]);
    assert!(
        out.status.success(),
        "kok render failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn documents(yaml: &str) -> Vec<serde_yaml::Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .collect()
}

#[test]
fn rendering_the_example_matches_the_golden_file() {
    let rendered = render_example();
    let path = root().join(GOLDEN);
    if std::env::var_os("KOK_UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &rendered).unwrap();
        eprintln!("rewrote {GOLDEN}");
        return;
    }
    let golden = std::fs::read_to_string(&path).unwrap_or_default();
    pretty_assertions::assert_eq!(
        golden,
        rendered,
        "{GOLDEN} differs from `kok render {EXAMPLE} --commit {COMMIT} --ref main`; review the change, \
         then rewrite it with KOK_UPDATE_GOLDEN=1 cargo test --test integration render::"
    );
}

#[test]
fn the_example_validates_without_errors_or_warnings() {
    let out = kok(&["validate", EXAMPLE], &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout, "", "no diagnostics at all");
}

#[test]
fn rendering_twice_gives_the_same_bytes() {
    assert_eq!(render_example(), render_example());
}

#[test]
fn rendered_objects_parse_back_into_their_types_with_files_byte_for_byte() {
    let rendered = render_example();
    let (mut config_maps, mut clusters, mut operations) = (vec![], vec![], vec![]);
    for doc in documents(&rendered) {
        match doc["kind"].as_str().unwrap() {
            "ConfigMap" => config_maps.push(serde_yaml::from_value::<ConfigMap>(doc).unwrap()),
            "Cluster" => clusters.push(serde_yaml::from_value::<Cluster>(doc).unwrap()),
            "ClusterOperation" => operations.push(serde_yaml::from_value::<ClusterOperation>(doc).unwrap()),
            other => panic!("unexpected kind {other}"),
        }
    }
    assert_eq!(clusters.len(), 4);
    // prod-sh, in kubespray's layout, pins its inventory.ini and each of its 8 group_vars/host_vars files,
    // named through one file list; local's hello pins playbooks/hello.yml, kept in the repository.
    assert_eq!(config_maps.len(), 6 + 1 + 8 + 1 + 1);
    assert_eq!(operations.len(), 7);
    let by_name: std::collections::BTreeMap<String, ConfigMap> = config_maps
        .iter()
        .map(|cm| (cm.metadata.name.clone().unwrap(), cm.clone()))
        .collect();
    for cluster in &clusters {
        let dir =
            kok::materialize::pinned::inventory_dir(&cluster.spec, &by_name).expect("every pin rendered");
        let on_disk = root().join(EXAMPLE).join(&cluster.spec.source.path);
        let read = |path: &str| std::fs::read_to_string(on_disk.join(path)).unwrap();
        assert_eq!(dir.hosts_yml, read(&dir.inventory_file), "{}", dir.inventory_file);
        if let Some(vars) = &dir.vars_yml {
            assert_eq!(vars, &read("vars.yml"));
        }
        for (path, text) in &dir.vars_files {
            assert_eq!(text, &read(path), "{path}");
        }
    }
    let pinned: usize = clusters
        .iter()
        .map(|c| {
            kok::materialize::pinned::vars_files(&c.spec, &by_name)
                .unwrap()
                .len()
        })
        .sum();
    assert_eq!(
        pinned, 8,
        "prod-sh's group_vars/ and host_vars/ are pinned file by file"
    );
    for op in &operations {
        let cluster = clusters
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(op.spec.cluster.as_str()))
            .unwrap();
        assert_eq!(
            op.spec.hosts_conf_ref, cluster.spec.hosts_conf_ref,
            "{}",
            op.spec.id
        );
        assert_eq!(
            op.spec.vars_conf_ref, cluster.spec.vars_conf_ref,
            "{}",
            op.spec.id
        );
        assert_eq!(
            op.spec.vars_files_ref, cluster.spec.vars_files_ref,
            "{}",
            op.spec.id
        );
        assert_eq!(op.spec.source.commit, COMMIT);
    }
}

#[test]
fn every_rendered_name_is_a_dns_label() {
    for doc in documents(&render_example()) {
        let name = doc["metadata"]["name"].as_str().unwrap();
        assert!(name.len() <= 63, "{name}");
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "{name}"
        );
    }
}

#[test]
fn namespace_and_ref_come_from_flags_or_their_env_twins() {
    let out = kok(
        &["render", EXAMPLE, "--commit", COMMIT],
        &[("KOK_NAMESPACE", "ops"), ("KOK_REF", "release-1")],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for doc in documents(&String::from_utf8(out.stdout).unwrap()) {
        assert_eq!(doc["metadata"]["namespace"].as_str(), Some("ops"));
        if doc["metadata"]["labels"]["kok.dev/shared"].as_str() == Some("true") {
            // One file's content for the whole fleet: no revision of its own.
            continue;
        }
        let revision = doc["metadata"]["annotations"]["kok.dev/revision"]
            .as_str()
            .unwrap();
        assert_eq!(revision, format!("release-1@sha1:{COMMIT}"));
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target: PathBuf = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn outside_a_git_repository_the_commit_is_forty_zeros() {
    let dir = tempfile::tempdir().unwrap();
    if git2::Repository::discover(dir.path()).is_ok() {
        eprintln!(
            "skipped: the temporary directory {} is inside a git repository",
            dir.path().display()
        );
        return;
    }
    copy_dir(&root().join(EXAMPLE), dir.path());
    let out = kok(&["render", dir.path().to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(&format!("main@sha1:{}", "0".repeat(40))), "{text}");
}

#[test]
fn in_a_git_work_tree_the_commit_defaults_to_head() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&root().join(EXAMPLE), dir.path());
    let repo = git2::Repository::init(dir.path()).unwrap();
    let mut index = repo.index().unwrap();
    index.add_all(["*"], git2::IndexAddOption::DEFAULT, None).unwrap();
    let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
    let sig = git2::Signature::new("t", "t@example.com", &git2::Time::new(0, 0)).unwrap();
    let head = repo
        .commit(Some("HEAD"), &sig, &sig, "example", &tree, &[])
        .unwrap();
    let out = kok(&["render", dir.path().to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(&format!("commit: {head}")), "{text}");
}

#[test]
fn an_invalid_repository_renders_nothing_and_exits_1_with_located_errors() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&root().join(EXAMPLE), dir.path());
    std::fs::write(
        dir.path().join("clusters/staging-sh/vars.yml"),
        "- not a mapping\n",
    )
    .unwrap();
    let out = kok(&["render", dir.path().to_str().unwrap(), "--commit", COMMIT], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "", "nothing rendered");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("clusters/staging-sh/vars.yml:1:"), "{stderr}");
}

#[test]
fn a_short_commit_is_refused_with_a_hint() {
    let out = kok(&["render", EXAMPLE, "--commit", "5e1f0c2"], &[]);
    assert_eq!(out.status.code(), Some(2), "usage error");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("git rev-parse"), "{stderr}");
}

fn operation_names(dir: &Path) -> Vec<String> {
    let parsed = kok::layout::parse_repo(&kok::layout::DiskTree::new(dir), "clusters");
    assert!(!parsed.has_errors(), "{:?}", parsed.diagnostics);
    let ctx = kok::materialize::RenderContext::new("kok-system", "main", COMMIT);
    kok::materialize::render_all(&parsed.clusters, &ctx)
        .iter()
        .flat_map(|c| c.operations.iter().map(|op| op.metadata.name.clone().unwrap()))
        .collect()
}

#[test]
fn reformatting_operations_yml_keeps_every_operation_name() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&root().join(EXAMPLE), dir.path());
    let before = operation_names(dir.path());
    // Same entries: keys reordered, flow style, different quoting, comments dropped.
    std::fs::write(
        dir.path().join("clusters/staging-sh/operations.yml"),
        r#"- {action: "cluster.yml", id: install}
- extraArgs: ['-e', 'node=node4', '-e', "skip_confirmation=true"]
  action: remove-node.yml
  id: "remove-node4"
- activeDeadlineSeconds: 600
  schedule: '0 0 3 * * *'
  extraArgs: ["kube_control_plane[0]", --inventory=/conf/hosts.yml, --private-key=/auth/ssh-privatekey,
    --become, --module-name=command, "--args=kubectl get nodes -o wide"]
  action: ansible
  type: shell
  id: nightly-cluster-info
"#,
    )
    .unwrap();
    assert_eq!(operation_names(dir.path()), before);
}

#[test]
fn bumping_rerun_renames_only_that_operation() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&root().join(EXAMPLE), dir.path());
    let before = operation_names(dir.path());
    let path = dir.path().join("clusters/staging-sh/operations.yml");
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replacen(
        "- id: install\n  action: cluster.yml\n",
        "- id: install\n  action: cluster.yml\n  rerun: 1\n",
        1,
    );
    std::fs::write(&path, text).unwrap();
    let after = operation_names(dir.path());
    let changed: Vec<_> = before
        .iter()
        .zip(&after)
        .filter(|(a, b)| a != b)
        .map(|(a, _)| a.as_str())
        .collect();
    assert_eq!(changed.len(), 1, "{before:?} vs {after:?}");
    assert!(changed[0].starts_with("staging-sh-install-"), "{changed:?}");
}

#[test]
fn a_rollout_file_renders_as_a_fleet_rollout_with_its_waves_after_the_clusters() {
    let dir = tempfile::tempdir().unwrap();
    for (name, labels) in [
        ("prod-sh-1", "{env: prod}"),
        ("prod-bj-1", "{env: prod, region: bj}"),
    ] {
        let cluster = dir.path().join("clusters").join(name);
        std::fs::create_dir_all(&cluster).unwrap();
        std::fs::write(cluster.join("hosts.yml"), "all:\n  hosts:\n    node1:\n").unwrap();
        std::fs::write(cluster.join("vars.yml"), "kube_version: v1.31.0\n").unwrap();
        std::fs::write(cluster.join("cluster.yml"), format!("labels: {labels}\n")).unwrap();
    }
    std::fs::create_dir_all(dir.path().join("rollouts")).unwrap();
    std::fs::write(
        dir.path().join("rollouts/upgrade-1-31.yml"),
        "operation: {id: upgrade-1-31, action: upgrade-cluster.yml}\nclusters: {selector: {env: prod}}\n\
         waves:\n  - {name: canary, clusters: [prod-sh-1]}\n  - {name: rest, maxParallel: 25%}\nbake: 30m\n",
    )
    .unwrap();
    let here = dir.path().display().to_string();
    let out = kok(&["render", &here, "--commit", COMMIT], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let docs = documents(&String::from_utf8(out.stdout).unwrap());
    let last = docs.last().unwrap().clone();
    let rollout: kok::api::FleetRollout = serde_yaml::from_value(last).unwrap();
    let waves: Vec<(&str, &[String])> = rollout
        .spec
        .waves
        .iter()
        .map(|w| (w.name.as_str(), w.clusters.as_slice()))
        .collect();
    assert_eq!(
        waves,
        [
            ("canary", &["prod-sh-1".to_string()][..]),
            ("rest", &["prod-bj-1".to_string()][..])
        ]
    );
    assert_eq!(rollout.spec.bake_seconds, 1800);
    let cluster = docs
        .iter()
        .find(|d| d["kind"] == "Cluster" && d["metadata"]["name"] == "prod-bj-1")
        .unwrap();
    assert_eq!(cluster["metadata"]["labels"]["region"], "bj");
}

/// kok's apply writes the example as the service would (operations queued at a pass's time), then
/// `kok render`'s output goes onto the same namespace with `kubectl apply --server-side`: every object is
/// accepted (no ClusterOperation refused by its immutable spec, no conflict with kok's fields) and every
/// run keeps the queue position kok gave it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn render_output_applies_server_side_onto_a_namespace_kok_manages() {
    if !crate::common::tools::kubectl_or_skip(
        "render_output_applies_server_side_onto_a_namespace_kok_manages",
    ) {
        return;
    }
    let server = crate::controller_support::server().await;
    let client = server.client();
    let ns = crate::controller_support::NS;
    let parsed = kok::layout::parse_repo(&kok::layout::DiskTree::new(root().join(EXAMPLE)), "clusters");
    let mut ctx = kok::materialize::RenderContext::new(ns, "main", COMMIT);
    ctx.queue_base = kok::reconcile::queue_base(jiff::Timestamp::now());
    for desired in kok::materialize::render_all(&parsed.clusters, &ctx) {
        kok::materialize::apply::apply_cluster(&client, ns, &desired)
            .await
            .unwrap();
    }
    let ops: kube::Api<ClusterOperation> = kube::Api::namespaced(client.clone(), ns);
    let positions = |list: Vec<ClusterOperation>| -> Vec<(String, String)> {
        list.into_iter()
            .map(|o| (o.metadata.name.unwrap(), o.spec.queue_position))
            .collect()
    };
    let before = positions(ops.list(&Default::default()).await.unwrap().items);
    assert!(
        before.iter().all(|(_, p)| p.starts_with(&ctx.queue_base)),
        "{before:?}"
    );

    let out = kok(&["render", EXAMPLE, "--commit", COMMIT, "--namespace", ns], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rendered = String::from_utf8(out.stdout).unwrap();
    assert!(
        !rendered.contains("queuePosition"),
        "the position is the service's to give"
    );
    let applied = crate::common::tools::kubectl(
        server.kubeconfig_path(),
        &["apply", "--server-side", "--field-manager=gitops", "-f", "-"],
        Some(&rendered),
    )
    .await;
    assert!(
        applied.status.success(),
        "kubectl apply --server-side refused render's output:\n{}{}",
        String::from_utf8_lossy(&applied.stdout),
        String::from_utf8_lossy(&applied.stderr)
    );
    let after = positions(ops.list(&Default::default()).await.unwrap().items);
    assert_eq!(after, before, "every run keeps its place in the queue");
}
