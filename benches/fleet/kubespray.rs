//! kok's ConfigMaps in the meta-cluster for a fleet in kubespray's layout (mode `kubespray`): every
//! cluster holds kubespray's `inventory/sample/group_vars/` verbatim (the release `scripts/setup.sh`
//! extracts into `.kubespray/`), an inventory of its own (five hosts, see [`inventory_file`]), one
//! operation and a `cluster.yml` naming the ssh Secret that does not exist, so no ansible runs. The real
//! `kok` reconciles the fleet in service mode; then one commit changes `kube_version` in every cluster's
//! `group_vars/k8s_cluster/k8s-cluster.yml` (the same edit everywhere), and kok reconciles that.
//!
//! Once kok has settled after each commit, the bench LISTs the ConfigMaps labelled
//! `app.kubernetes.io/managed-by=kok` in pages of [`PAGE`] and counts every item as the API server
//! returned it, written again as compact JSON: `kind` and `apiVersion` (testkit keeps them in a list's
//! items, a real API server leaves them out: 35 bytes each), its metadata (managedFields included),
//! `immutable`, `data` and `binaryData` (base64 of the gzip-compressed files). The LIST's envelope is
//! not counted, nor what a real API server keeps besides (etcd stores ConfigMaps as protobuf, a little
//! smaller than JSON). MB and KB are 10⁶ and 10³ bytes. Targets (DESIGN §7): ≤ 100 MB at 1,000 clusters (100 KB per
//! cluster at other sizes) after the first pass; the edit adds ≤ 10 KB per cluster (the growth of the
//! total).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use kube::api::ListParams;
use serde::Serialize;
use serde_json::Value;

use super::e2e::{Kok, KokOptions, Remote, NS};
use super::{cluster_name, fmt_opt, mark, play_kubelet, secs, settle, Config, Meta, POLL, SSH_SECRET};
use kok::api::{managed_selector, LABEL_CONTENT, LABEL_SHARED};

/// ConfigMaps per page of the measuring LIST.
const PAGE: u32 = 500;
/// The file every cluster's edit changes, under `group_vars/`.
const EDITED: &str = "k8s_cluster/k8s-cluster.yml";
/// The edit: this line of [`EDITED`] replaced by the next.
const KUBE_VERSION: (&str, &str) = ("kube_version: v1.31.4\n", "kube_version: v1.31.3\n");
/// Target of the first pass, per cluster: 100 MB at 1,000 clusters.
const FIRST_PASS_PER_CLUSTER: f64 = 100e3;
/// Target of the edit, per cluster.
const EDIT_PER_CLUSTER: f64 = 10e3;

/// What the kubespray round measured.
#[derive(Debug, Default, Serialize)]
pub struct KubesprayRun {
    pub clusters: usize,
    /// Operations per cluster; the history phase runs them all.
    pub operations: usize,
    /// From the ssh Secret's creation until every operation Succeeded (the bench completing each Job as
    /// it appears), and how many did.
    pub history_secs: Option<f64>,
    pub history_succeeded: usize,
    /// Every object kind kok keeps in the namespace once the history is complete, by kind.
    pub etcd: Option<BTreeMap<String, KindBytes>>,
    /// Files of the sample's `group_vars/` in every cluster, and their bytes.
    pub sample_files: usize,
    pub sample_bytes: usize,
    /// From kok's start until the fleet's commit was reconciled.
    pub reconciled_secs: Option<f64>,
    /// From the edit's push until its commit was reconciled.
    pub edit_reconciled_secs: Option<f64>,
    /// kok's ConfigMaps once the first pass settled.
    pub first: Option<Footprint>,
    /// kok's ConfigMaps once the edit settled.
    pub edited: Option<Footprint>,
    /// ConfigMaps after the edit that were not there before, and their bytes.
    pub edit_new_config_maps: usize,
    pub edit_new_bytes: usize,
    /// ConfigMaps gone after the edit, and their bytes.
    pub edit_removed_config_maps: usize,
    pub edit_removed_bytes: usize,
    pub problems: Vec<String>,
}

impl KubesprayRun {
    /// The total's growth from the first pass to the edit, in bytes.
    fn edit_added(&self) -> Option<i64> {
        let (first, edited) = (self.first.as_ref()?, self.edited.as_ref()?);
        Some(edited.bytes as i64 - first.bytes as i64)
    }
}

/// The objects of one kind, as the API server returned them: count, bytes (compact JSON of each item) and
/// bytes without `metadata.managedFields`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct KindBytes {
    pub objects: usize,
    pub bytes: usize,
    pub without_managed_fields: usize,
}

/// The kinds kok writes or leaves in its namespace: (plural path, kind).
const KINDS: [(&str, &str); 8] = [
    ("/api/v1/namespaces/{ns}/configmaps", "ConfigMap"),
    ("/api/v1/namespaces/{ns}/secrets", "Secret"),
    ("/apis/kok.dev/v1alpha1/namespaces/{ns}/clusters", "Cluster"),
    (
        "/apis/kok.dev/v1alpha1/namespaces/{ns}/clusteroperations",
        "ClusterOperation",
    ),
    (
        "/apis/kok.dev/v1alpha1/namespaces/{ns}/fleetrollouts",
        "FleetRollout",
    ),
    ("/apis/batch/v1/namespaces/{ns}/jobs", "Job"),
    ("/api/v1/namespaces/{ns}/events", "Event"),
    ("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases", "Lease"),
];

/// kok's `--keep-succeeded-jobs` in this mode: `KOK_FLEET_KEEP_JOBS`, else 0 s, so that the table shows
/// what stays once a succeeded run's Job is past the time kept (1 hour by default; the capacity model adds
/// the last hour's Jobs).
fn keep_succeeded_jobs() -> String {
    std::env::var("KOK_FLEET_KEEP_JOBS").unwrap_or_else(|_| "0s".into())
}

/// Kinds the API server drops by itself: Events, after its `--event-ttl` (1 hour by default).
const EXPIRING: [&str; 1] = ["Event"];
/// Clusters of the etcd target.
const TARGET_CLUSTERS: f64 = 10_000.0;

/// etcd's default quota (`--quota-backend-bytes`): 2 GiB.
const ETCD_QUOTA: f64 = 2.0 * 1024.0 * 1024.0 * 1024.0;
/// Target: 10,000 clusters × 20 finished runs within a quarter of it (512 MiB).
const ETCD_TARGET: f64 = ETCD_QUOTA / 4.0;

/// The row of the ConfigMaps the whole fleet shares (`kok.dev/shared`).
const SHARED_ROW: &str = "ConfigMap (shared)";

/// Every object of every kind in [`KINDS`] in kok's namespace, listed page by page; shared ConfigMaps in
/// [`SHARED_ROW`].
async fn etcd_footprint(client: &kube::Client) -> anyhow::Result<BTreeMap<String, KindBytes>> {
    let mut out = BTreeMap::new();
    for (path, kind) in KINDS {
        let request = kube::core::Request::new(path.replace("{ns}", NS));
        let mut params = ListParams::default().limit(PAGE);
        loop {
            let body = match client.request_text(request.list(&params)?).await {
                Ok(body) => body,
                Err(e) => {
                    eprintln!("[etcd bytes] listing {kind} failed: {e}");
                    break;
                }
            };
            let mut page: Value = serde_json::from_str(&body)?;
            for item in page["items"].as_array_mut().into_iter().flatten() {
                // The fleet's shared ConfigMaps are one set for all clusters: a row of their own.
                let row = if item["metadata"]["labels"][LABEL_SHARED] == "true" {
                    SHARED_ROW
                } else {
                    kind
                };
                let entry: &mut KindBytes = out.entry(row.to_string()).or_default();
                if entry.objects == 0 {
                    keep_sample(row, item);
                }
                entry.objects += 1;
                entry.bytes += item.to_string().len();
                if let Some(meta) = item["metadata"].as_object_mut() {
                    meta.remove("managedFields");
                }
                entry.without_managed_fields += item.to_string().len();
            }
            match page["metadata"]["continue"].as_str().filter(|t| !t.is_empty()) {
                Some(token) => params = params.continue_token(token),
                None => break,
            }
        }
    }
    Ok(out)
}

/// With `KOK_FLEET_SAMPLE_DIR` set, the first object of `kind` as the API server returned it, written
/// there as `<kind>.json` (to read where an object's bytes go).
fn keep_sample(kind: &str, item: &Value) {
    let Some(dir) = std::env::var_os("KOK_FLEET_SAMPLE_DIR") else {
        return;
    };
    let path = Path::new(&dir).join(format!("{kind}.json"));
    let text = serde_json::to_string_pretty(item).unwrap_or_default();
    if let Err(e) = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, text)) {
        eprintln!("[etcd bytes] writing {}: {e}", path.display());
    }
}

/// kok's ConfigMaps at one moment, as the API server returned them.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Footprint {
    pub config_maps: usize,
    /// The sum of every item's compact JSON.
    pub bytes: usize,
    /// Of which the values of `data` and `binaryData`, JSON-encoded (quotes and escapes included).
    pub content_bytes: usize,
    /// Of which `"managedFields":[…]` in the metadata.
    pub managed_fields_bytes: usize,
    /// The LIST responses' bodies, their envelopes included.
    pub list_body_bytes: usize,
    /// By the `kok.dev/content` label (`hosts`, `file`; `-` without one): ConfigMaps and bytes.
    pub by_content: BTreeMap<String, (usize, usize)>,
    /// Each ConfigMap's bytes by name.
    #[serde(skip)]
    names: BTreeMap<String, usize>,
}

impl Footprint {
    fn add(&mut self, item: &Value) {
        let bytes = item.to_string().len();
        let content: usize = ["data", "binaryData"]
            .iter()
            .filter_map(|key| item[key].as_object())
            .flat_map(|map| map.values())
            .map(|value| value.to_string().len())
            .sum();
        let managed = item["metadata"]
            .get("managedFields")
            .map_or(0, |m| r#""managedFields":,"#.len() + m.to_string().len());
        let kind = item["metadata"]["labels"][LABEL_CONTENT].as_str().unwrap_or("-");
        let entry = self.by_content.entry(kind.to_string()).or_default();
        entry.0 += 1;
        entry.1 += bytes;
        self.config_maps += 1;
        self.bytes += bytes;
        self.content_bytes += content;
        self.managed_fields_bytes += managed;
        let name = item["metadata"]["name"].as_str().unwrap_or_default();
        self.names.insert(name.to_string(), bytes);
    }
}

/// Lists kok's ConfigMaps page by page and counts them.
async fn footprint(client: &kube::Client) -> anyhow::Result<Footprint> {
    let mut out = Footprint::default();
    let request = kube::core::Request::new(format!("/api/v1/namespaces/{NS}/configmaps"));
    let mut params = ListParams::default().labels(&managed_selector()).limit(PAGE);
    loop {
        let body = client.request_text(request.list(&params)?).await?;
        out.list_body_bytes += body.len();
        let page: Value = serde_json::from_str(&body)?;
        for item in page["items"].as_array().into_iter().flatten() {
            out.add(item);
        }
        match page["metadata"]["continue"].as_str().filter(|t| !t.is_empty()) {
            Some(token) => params = params.continue_token(token),
            None => return Ok(out),
        }
    }
}

/// The sample's `group_vars/` files (path under it, text), sorted by path.
fn sample() -> anyhow::Result<Vec<(String, String)>> {
    let version = super::kubespray_setup::VERSION;
    let dir = super::tools::workspace_root()
        .join(".kubespray")
        .join(format!("kubespray-{version}"))
        .join("inventory/sample/group_vars");
    if !dir.is_dir() {
        anyhow::bail!(
            "{} is missing: run `bash scripts/setup.sh`, which extracts kubespray-{version}.tar.gz from \
             ../shared/kubespray (or $KOK_KUBESPRAY_SOURCE) into .kubespray/",
            dir.display()
        );
    }
    let mut files = Vec::new();
    read_tree(&dir, &dir, &mut files)?;
    files.sort();
    Ok(files)
}

/// Every file under `dir`, its path relative to `top`.
fn read_tree(top: &Path, dir: &Path, files: &mut Vec<(String, String)>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            read_tree(top, &path, files)?;
        } else {
            let rel = path.strip_prefix(top)?.to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path)
                .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
            files.push((rel, text));
        }
    }
    Ok(())
}

/// Cluster `i`'s inventory file, its name and text: kubespray's sample shape (etcd on the control
/// plane) with five hosts of its own, three control-plane nodes and two workers.
fn inventory_file(i: usize) -> (&'static str, String) {
    let hosts: Vec<(String, String)> = (1..=5)
        .map(|h| (format!("node{h}"), format!("10.{}.{}.{h}", i / 256, i % 256)))
        .collect();
    ("inventory.ini", inventory_ini(&hosts))
}

/// The first three of `hosts` (name, address) control the cluster (and run etcd), the others work, in INI.
fn inventory_ini(hosts: &[(String, String)]) -> String {
    let mut text = String::from("[kube_control_plane]\n");
    let line = |(name, ip): &(String, String)| format!("{name} ansible_host={ip} ip={ip}\n");
    text.extend(hosts[..3].iter().map(line));
    text.push_str("\n[etcd:children]\nkube_control_plane\n\n[kube_node]\n");
    text.extend(hosts[3..].iter().map(line));
    text.push_str("\n[k8s_cluster:children]\nkube_control_plane\nkube_node\n");
    text
}

/// Writes the fleet into the work clone and pushes it; returns the commit.
fn generate(remote: &Remote, clusters: usize, ops: usize, sample: &[(String, String)]) -> String {
    let mut operations = String::from("- id: deploy\n  action: cluster.yml\n");
    for j in 1..ops {
        operations.push_str(&format!("- id: op{j:02}\n  action: cluster.yml\n"));
    }
    for i in 0..clusters {
        let dir = format!("clusters/{}", cluster_name(i));
        let (inventory, text) = inventory_file(i);
        remote
            .write(&format!("{dir}/{inventory}"), &text)
            .write(
                &format!("{dir}/cluster.yml"),
                &format!("sshAuthSecret: {SSH_SECRET}\n"),
            )
            .write(&format!("{dir}/operations.yml"), &operations);
        for (path, text) in sample {
            remote.write(&format!("{dir}/group_vars/{path}"), text);
        }
    }
    remote.push(&format!("{clusters} clusters in kubespray's layout"))
}

/// [`EDITED`] of the sample with the edit made.
fn edited(sample: &[(String, String)]) -> anyhow::Result<String> {
    let (_, text) = sample
        .iter()
        .find(|(path, _)| path == EDITED)
        .ok_or_else(|| anyhow::anyhow!("the sample has no group_vars/{EDITED}"))?;
    let (from, to) = KUBE_VERSION;
    anyhow::ensure!(
        text.contains(from),
        "the sample's group_vars/{EDITED} has no line {from:?} to edit: update KUBE_VERSION"
    );
    Ok(text.replacen(from, to, 1))
}

/// Waits until kok has reconciled `sha`; the seconds since `since`, or `None` after `cfg.timeout` or
/// when kok exited.
async fn reconciled(meta: &mut Meta, kok: &mut Kok, sha: &str, since: Instant, cfg: &Config) -> Option<f64> {
    loop {
        if meta.reconciled_commit().await.as_deref() == Some(sha) {
            return Some(secs(since.elapsed()));
        }
        if since.elapsed() > cfg.timeout || kok.try_wait().is_some() {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}

pub async fn run(cfg: &Config, clusters: usize, ops: usize) -> anyhow::Result<KubesprayRun> {
    let sample = sample()?;
    let edit = edited(&sample)?;
    let mut run = KubesprayRun {
        clusters,
        operations: ops,
        sample_files: sample.len(),
        sample_bytes: sample.iter().map(|(_, text)| text.len()).sum(),
        ..KubesprayRun::default()
    };
    let remote = Remote::new();
    let generated = Instant::now();
    let fleet = generate(&remote, clusters, ops, &sample);
    eprintln!(
        "[kubespray {clusters}] fleet generated and pushed in {:.1} s ({} files, {} bytes of group_vars/ each)",
        generated.elapsed().as_secs_f64(),
        run.sample_files,
        run.sample_bytes
    );
    let api = testkit::ApiServer::start_with(testkit::Options {
        event_window: 200_000,
        ..testkit::Options::default()
    })
    .await?;
    api.install_crds(&kok::api::crds()).await?;
    let client = api.client();
    let mut kok = Kok::start(&KokOptions {
        kubeconfig: api.kubeconfig_path().to_path_buf(),
        repo: remote.bare(),
        cache: remote.scratch("cache"),
        log: remote.scratch("logs").join("kok.log"),
        args: vec![
            "--max-concurrent-jobs".into(),
            "64".into(),
            "--keep-succeeded-jobs".into(),
            keep_succeeded_jobs(),
        ],
        env: vec![("KOK_LOG".into(), "info".into())],
    });
    let mut meta = Meta::Service(api);

    let started = Instant::now();
    run.reconciled_secs = reconciled(&mut meta, &mut kok, &fleet, started, cfg).await;
    if run.reconciled_secs.is_none() {
        run.problems.push(format!(
            "the fleet's commit was not reconciled within {} s",
            cfg.timeout.as_secs()
        ));
        kok.kill();
        return Ok(run);
    }
    settle(&meta, kok.pid(), cfg.timeout).await;
    let first = footprint(&client).await?;
    eprintln!(
        "[kubespray {clusters}] reconciled in {:?} s: {} ConfigMaps, {} bytes",
        run.reconciled_secs, first.config_maps, first.bytes
    );
    run.first = Some(first);

    // The history: the ssh Secret appears, kok runs every operation (the bench completes each Job as it
    // appears), and the fleet's objects are counted once every run Succeeded and kok settled.
    if let Meta::Service(api) = &meta {
        let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
            kube::Api::namespaced(client.clone(), NS);
        let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": SSH_SECRET},
            "type": "kubernetes.io/ssh-auth",
            "stringData": {"ssh-privatekey": "not a key"},
        }))?;
        secrets.create(&Default::default(), &secret).await?;
        let began = Instant::now();
        let expected = clusters * ops;
        run.history_succeeded = play_kubelet(api, expected, cfg.timeout, |_, _| {}, |_| {}).await?;
        if run.history_succeeded == expected {
            run.history_secs = Some(secs(began.elapsed()));
        } else {
            run.problems.push(format!(
                "{} of {expected} operations Succeeded within {} s",
                run.history_succeeded,
                cfg.timeout.as_secs()
            ));
        }
        settle(&meta, kok.pid(), cfg.timeout).await;
        run.etcd = Some(etcd_footprint(&client).await?);
        eprintln!(
            "[kubespray {clusters}x{ops}] history of {} runs in {:?} s",
            run.history_succeeded, run.history_secs
        );
    }

    for i in 0..clusters {
        remote.write(
            &format!("clusters/{}/group_vars/{EDITED}", cluster_name(i)),
            &edit,
        );
    }
    let pushed = Instant::now();
    let sha = remote.push(&format!("{clusters} clusters: {}", KUBE_VERSION.1.trim()));
    run.edit_reconciled_secs = reconciled(&mut meta, &mut kok, &sha, pushed, cfg).await;
    if run.edit_reconciled_secs.is_none() {
        run.problems.push(format!(
            "the edit's commit was not reconciled within {} s",
            cfg.timeout.as_secs()
        ));
        kok.kill();
        return Ok(run);
    }
    settle(&meta, kok.pid(), cfg.timeout).await;
    let after = footprint(&client).await?;
    kok.kill();
    if let Some(before) = &run.first {
        for (name, bytes) in &after.names {
            if !before.names.contains_key(name) {
                run.edit_new_config_maps += 1;
                run.edit_new_bytes += bytes;
            }
        }
        for (name, bytes) in &before.names {
            if !after.names.contains_key(name) {
                run.edit_removed_config_maps += 1;
                run.edit_removed_bytes += bytes;
            }
        }
    }
    run.edited = Some(after);
    eprintln!(
        "[kubespray {clusters}] edit reconciled in {:?} s: {:?} bytes added ({} ConfigMaps new, {} gone)",
        run.edit_reconciled_secs,
        run.edit_added(),
        run.edit_new_config_maps,
        run.edit_removed_config_maps
    );
    Ok(run)
}

/// `bytes` in MB (10⁶).
fn mb(bytes: f64) -> String {
    format!("{:.2} MB", bytes / 1e6)
}

/// `bytes` in KB (10³).
fn kb(bytes: f64) -> String {
    format!("{:.1} KB", bytes / 1e3)
}

/// The table and the targets beside the figures.
pub fn report(runs: &[KubesprayRun]) -> String {
    let mut out = String::from(
        "| clusters | reconciled (first, edit) | ConfigMaps | first pass | per cluster | files / managedFields / rest | beside the file, per ConfigMap | by content (ConfigMaps, bytes) | edit adds per cluster | edit: new / gone ConfigMaps |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in runs {
        let Some(first) = &r.first else {
            out.push_str(&format!(
                "| {} | — | — | — | — | — | — | — | — | — |\n",
                r.clusters
            ));
            continue;
        };
        let n = r.clusters.max(1) as f64;
        let beside = first.bytes.saturating_sub(first.content_bytes);
        let rest = beside.saturating_sub(first.managed_fields_bytes);
        let by_content: Vec<String> = first
            .by_content
            .iter()
            .map(|(kind, (count, bytes))| format!("{kind}: {count}, {}", mb(*bytes as f64)))
            .collect();
        out.push_str(&format!(
            "| {} | {}, {} | {} | {} | {} | {} / {} / {} | {} bytes | {} | {} | {} ({}) / {} |\n",
            r.clusters,
            fmt_opt(r.reconciled_secs, " s"),
            fmt_opt(r.edit_reconciled_secs, " s"),
            first.config_maps,
            mb(first.bytes as f64),
            kb(first.bytes as f64 / n),
            mb(first.content_bytes as f64),
            mb(first.managed_fields_bytes as f64),
            mb(rest as f64),
            beside / first.config_maps.max(1),
            by_content.join("; "),
            r.edit_added()
                .map(|b| kb(b as f64 / n))
                .unwrap_or_else(|| "—".into()),
            r.edit_new_config_maps,
            kb(r.edit_new_bytes as f64 / n),
            r.edit_removed_config_maps,
        ));
    }
    out.push_str(
        "\nCounted: every ConfigMap labelled app.kubernetes.io/managed-by=kok, each as compact JSON of the item the \
         LIST returned (kind, apiVersion, metadata with managedFields, immutable, data, binaryData in base64), \
         the LIST's envelope not; \"files\" are the values of data and binaryData, \"beside the file\" all the \
         rest; the edit's figure is the total's growth. MB and KB are 10⁶ and 10³ bytes.\n",
    );
    for r in runs {
        let Some(etcd) = &r.etcd else { continue };
        let n = r.clusters.max(1) as f64;
        out.push_str(&format!(
            "\nEvery object in kok's namespace, {} clusters × {} finished runs (history {}):\n\n\
             | kind | objects | bytes | without managedFields | per cluster | per cluster without managedFields |\n\
             |---|---|---|---|---|---|\n",
            r.clusters,
            r.operations,
            fmt_opt(r.history_secs, " s"),
        ));
        let mut total = KindBytes::default();
        for (kind, k) in etcd {
            if k.objects == 0 {
                continue;
            }
            total.objects += k.objects;
            total.bytes += k.bytes;
            total.without_managed_fields += k.without_managed_fields;
            out.push_str(&format!(
                "| {kind} | {} | {} | {} | {} | {} |\n",
                k.objects,
                mb(k.bytes as f64),
                mb(k.without_managed_fields as f64),
                kb(k.bytes as f64 / n),
                kb(k.without_managed_fields as f64 / n),
            ));
        }
        out.push_str(&format!(
            "| total | {} | {} | {} | {} | {} |\n",
            total.objects,
            mb(total.bytes as f64),
            mb(total.without_managed_fields as f64),
            kb(total.bytes as f64 / n),
            kb(total.without_managed_fields as f64 / n),
        ));
        let share = total.bytes as f64 / ETCD_QUOTA * 100.0;
        let expiring: usize = etcd
            .iter()
            .filter(|(kind, _)| EXPIRING.contains(&kind.as_str()))
            .map(|(_, k)| k.bytes)
            .sum();
        let kept = total.bytes - expiring;
        // Per cluster, but the shared ConfigMaps once for the fleet.
        let shared = etcd.get(SHARED_ROW).map_or(0, |k| k.bytes);
        let projected = (kept - shared) as f64 / n * TARGET_CLUSTERS + shared as f64;
        out.push_str(&format!(
            "\n{} clusters × {} runs (kok run with --keep-succeeded-jobs {}): {} of etcd's 2 GiB default quota \
             ({share:.2} %); {} without Events, which the API server drops after its --event-ttl (1 h by default) \
             ({:.2} %).\n",
            r.clusters,
            r.operations,
            keep_succeeded_jobs(),
            mb(total.bytes as f64),
            mb(kept as f64),
            kept as f64 / ETCD_QUOTA * 100.0,
        ));
        let (figure, what) = if r.clusters == TARGET_CLUSTERS as usize {
            (kept as f64, "measured")
        } else {
            (
                projected,
                "projected from the bytes per cluster, the shared ConfigMaps once",
            )
        };
        out.push_str(&format!(
            "10,000 clusters × {} runs without Events ({what}): {} ({:.1} % of the quota); target ≤ 512 MiB (25 %) \
             at 20 runs: {}\n",
            r.operations,
            mb(figure),
            figure / ETCD_QUOTA * 100.0,
            mark((r.operations >= 20).then_some(figure <= ETCD_TARGET)),
        ));
    }
    out.push_str("\nkubespray-layout targets:\n");
    for r in runs {
        let n = r.clusters as f64;
        let limit = FIRST_PASS_PER_CLUSTER * n;
        let first = r.first.as_ref().map(|f| f.bytes as f64);
        out.push_str(&format!(
            "{:>6} kok's ConfigMaps after the first pass ≤ {} (100 MB at 1,000 clusters): {} {}\n",
            r.clusters,
            mb(limit),
            first.map(mb).unwrap_or_else(|| "—".into()),
            mark(first.map(|b| b <= limit))
        ));
        let added = r.edit_added().map(|b| b as f64 / n.max(1.0));
        out.push_str(&format!(
            "{:>6} a one-file edit in every cluster adds ≤ {} per cluster: {} {}\n",
            r.clusters,
            kb(EDIT_PER_CLUSTER),
            added.map(kb).unwrap_or_else(|| "—".into()),
            mark(added.map(|b| b <= EDIT_PER_CLUSTER))
        ));
        for p in &r.problems {
            out.push_str(&format!("{:>6} {p}\n", r.clusters));
        }
    }
    out
}
