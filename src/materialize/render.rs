//! Pure rendering: a validated cluster directory and a revision → the desired objects of that cluster.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use super::hash::content_hash;
use super::names::{
    config_map_name, file_config_map_name, file_list_config_map_name, hosts_config_map_name,
    operation_digest, operation_name, revision_string, ContentKind,
};
use super::rollout::RolloutOperation;
use crate::api::{
    common_labels, ActionType, Cluster, ClusterOperation, ClusterOperationSpec, ClusterSource, ClusterSpec,
    ConfigMapRef, OperationPreflight, OperationSource, PinnedFile, SecretRef, ANNOTATION_CONTENT_HASH,
    ANNOTATION_REVISION, ANNOTATION_SOURCE_PATH, DEFAULT_IMAGE, DEFAULT_NAMESPACE, FILE_GZIP_KEY, FILE_KEY,
    HOSTS_KEY, LABEL_CONTENT, LABEL_MANAGED_BY, LABEL_OPERATION, LABEL_SHARED, MANAGED_BY,
};
use crate::layout::{playbooks, ClusterDir, Operation};

/// The commit that introduced an operation entry in its current form, and its place in the range
/// of commits being reconciled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attribution {
    /// Full sha of the commit; the operation's commit status goes there.
    pub commit: String,
    /// 0-based position of that commit in the reconciled range, oldest first. Operations queue by
    /// this index, then by their position in operations.yml.
    pub commit_index: usize,
}

/// Everything rendering needs besides the cluster directory itself. Rendering is a pure function
/// of a [`ClusterDir`] and this context: no clock, no I/O, no randomness.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderContext {
    /// Namespace of every object (kok's `--namespace`).
    pub namespace: String,
    /// Short name of the branch or tag being reconciled (`main`); the first half of revisions.
    pub ref_name: String,
    /// Full sha of the commit being rendered.
    pub commit: String,
    /// Commit that introduced each operation, keyed by `(cluster, operation id)`. Operations without
    /// an entry are attributed to [`RenderContext::commit`] with commit index 0.
    pub attribution: BTreeMap<(String, String), Attribution>,
    /// Leading part of every `queuePosition` rendered with this context. Positions compare as
    /// strings, so callers that render successive ranges must use fixed-width, increasing values
    /// (e.g. a zero-padded counter; the service uses the pass's time). Empty: no position is rendered
    /// (`kok render`, whose output applied onto a namespace kok manages must leave the position kok gave
    /// each run alone).
    pub queue_base: String,
}

impl RenderContext {
    /// A context for `commit` of `ref_name` in `namespace`, without attribution and with queue base `"0"`.
    pub fn new(namespace: impl Into<String>, ref_name: impl Into<String>, commit: impl Into<String>) -> Self {
        RenderContext {
            namespace: namespace.into(),
            ref_name: ref_name.into(),
            commit: commit.into(),
            attribution: BTreeMap::new(),
            queue_base: "0".to_string(),
        }
    }

    /// Records that operation `id` of `cluster` was introduced by `attribution`.
    pub fn attribute(&mut self, cluster: &str, id: &str, attribution: Attribution) {
        self.attribution
            .insert((cluster.to_string(), id.to_string()), attribution);
    }

    /// `<ref>@sha1:<commit>` of the rendered commit.
    pub fn revision(&self) -> String {
        revision_string(&self.ref_name, &self.commit)
    }

    /// The attribution of an operation, defaulting to the rendered commit at index 0.
    pub fn attribution_of(&self, cluster: &str, id: &str) -> Attribution {
        self.attribution
            .get(&(cluster.to_string(), id.to_string()))
            .cloned()
            .unwrap_or_else(|| Attribution {
                commit: self.commit.clone(),
                commit_index: 0,
            })
    }
}

impl Default for RenderContext {
    /// Namespace `kok-system`, ref `main`, the all-zero commit.
    fn default() -> Self {
        RenderContext::new(DEFAULT_NAMESPACE, "main", ZERO_SHA)
    }
}

/// The commit sha used when there is no commit (a directory that is not a git work tree).
pub const ZERO_SHA: &str = "0000000000000000000000000000000000000000";

/// The desired objects of one cluster directory.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredCluster {
    /// Cluster name (= directory name).
    pub name: String,
    /// Directory path inside the repository, e.g. `clusters/prod-bj`.
    pub path: String,
    /// The content-addressed ConfigMaps: hosts first, then vars.
    pub config_maps: Vec<ConfigMap>,
    /// The Cluster object.
    pub cluster: Cluster,
    /// One ClusterOperation per operations.yml entry, in file order.
    pub operations: Vec<ClusterOperation>,
    /// The cluster's runs of the rollouts it takes part in (see [`super::rollout::add_rollouts`]); the
    /// apply picks each one's `rerun` from the live runs ([`RolloutOperation::at`]).
    pub rollouts: Vec<RolloutOperation>,
    /// Rollouts whose file is broken at this commit: the cluster's runs of them are left as they are.
    pub kept_rollouts: BTreeSet<String>,
}

impl DesiredCluster {
    /// Every object as JSON, in the order written by `kok render`: ConfigMaps, Cluster, operations.
    pub fn objects(&self) -> Result<Vec<serde_json::Value>, RenderError> {
        let mut out = Vec::with_capacity(self.config_maps.len() + 1 + self.operations.len());
        for cm in &self.config_maps {
            out.push(to_json(&*written_config_map(cm), &self.name)?);
        }
        out.push(to_json(&self.cluster, &self.name)?);
        for op in &self.operations {
            out.push(to_json(op, &self.name)?);
        }
        Ok(out)
    }
}

/// Failures of turning rendered objects into text.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// An object of a cluster could not be serialized to JSON.
    #[error("serializing an object of cluster {cluster} to JSON failed: {source}")]
    ToJson {
        /// Cluster name.
        cluster: String,
        /// What serde_json reported.
        #[source]
        source: serde_json::Error,
    },
    /// An object of a cluster could not be serialized to YAML.
    #[error("serializing an object of cluster {cluster} to YAML failed: {source}")]
    ToYaml {
        /// Cluster name.
        cluster: String,
        /// What serde_yaml reported.
        #[source]
        source: serde_yaml::Error,
    },
}

fn to_json<T: Serialize>(obj: &T, cluster: &str) -> Result<serde_json::Value, RenderError> {
    serde_json::to_value(obj).map_err(|source| RenderError::ToJson {
        cluster: cluster.to_string(),
        source,
    })
}

/// Renders every cluster, in the order given (the parser sorts them by name).
pub fn render_all(clusters: &[ClusterDir], ctx: &RenderContext) -> Vec<DesiredCluster> {
    clusters.iter().map(|c| render_cluster(c, ctx)).collect()
}

/// Renders one validated cluster directory into its desired objects (DESIGN.md §2):
///
/// - ConfigMaps `<cluster>-hosts-<sha8>` and `<cluster>-vars-<sha8>` holding the files byte for
///   byte under `hosts.yml` / `vars.yml`, `immutable: true`, labelled with `kok.dev/content`;
/// - the Cluster `<cluster>` pointing at them, with the ssh Secret, defaults and source;
/// - one ClusterOperation `<cluster>-<id>-<digest8>` per entry, pinning the same ConfigMaps, with
///   its image resolved (operation > cluster.yml > kok.yml > [`DEFAULT_IMAGE`]), its deadline
///   (operation > defaults), its source commit from the context's attribution and a queue position;
///   when a playbook step limits its hosts, the facts playbook of its defaults
///   ([`crate::api::RunDefaults::facts`]).
///
/// Every object carries the common labels, `kok.dev/revision`, `kok.dev/source-path` and
/// `kok.dev/content-hash`. ClusterOperations carry the revision of their attributed commit, so an
/// unchanged operation renders the same bytes at every later commit.
pub fn render_cluster(cluster: &ClusterDir, ctx: &RenderContext) -> DesiredCluster {
    let revision = ctx.revision();
    let hosts_name = hosts_config_map_name(
        &cluster.name,
        &cluster.inventory_dir.inventory_file,
        &cluster.inventory_dir.hosts_yml,
    );
    let mut config_maps = vec![config_map(
        cluster,
        ctx,
        (ContentKind::Hosts, &hosts_name),
        FileData::Text(
            &cluster.inventory_dir.inventory_file,
            &cluster.inventory_dir.hosts_yml,
        ),
        &revision,
    )];
    let vars_conf_ref = cluster.inventory_dir.vars_yml.as_ref().map(|vars| {
        let name = config_map_name(&cluster.name, ContentKind::Vars, vars);
        config_maps.push(config_map(
            cluster,
            ctx,
            (ContentKind::Vars, &name),
            FileData::Text(ContentKind::Vars.data_key(), vars),
            &revision,
        ));
        ConfigMapRef { name }
    });
    let mut vars_files = Vec::with_capacity(cluster.inventory_dir.vars_files.len());
    let mut pinned_files = BTreeSet::new();
    for (path, text) in &cluster.inventory_dir.vars_files {
        let name = file_config_map_name(text.as_bytes());
        let gzip = text.len() > GZIP_ABOVE;
        if pinned_files.insert(name.clone()) {
            let data = if gzip {
                FileData::Gzip(text.as_bytes())
            } else {
                FileData::Text(ContentKind::File.data_key(), text)
            };
            config_maps.push(config_map(
                cluster,
                ctx,
                (ContentKind::File, &name),
                data,
                &revision,
            ));
        }
        vars_files.push(PinnedFile {
            path: path.clone(),
            config_map: name,
            gzip,
        });
    }
    // The runs of a fleet name their files through one shared list, not each file (at 27 files, 2.6 KB
    // less in every run and every Cluster).
    let vars_files_ref = (!vars_files.is_empty()).then(|| {
        // A JSON array, one file a line, so that `kubectl get -o yaml` shows it as lines.
        let lines: Vec<String> = vars_files
            .iter()
            .map(|f| serde_json::to_string(f).unwrap_or_default())
            .collect();
        let list = format!("[\n{}\n]\n", lines.join(",\n"));
        let name = file_list_config_map_name(&list);
        config_maps.push(config_map(
            cluster,
            ctx,
            (ContentKind::Files, &name),
            FileData::Text(ContentKind::Files.data_key(), &list),
            &revision,
        ));
        ConfigMapRef { name }
    });
    for (path, bytes) in &cluster.repository_files {
        let pinned = repository_file(path, bytes);
        if pinned_files.insert(pinned.config_map.clone()) {
            let data = match std::str::from_utf8(bytes) {
                Ok(text) if !pinned.gzip => FileData::Text(ContentKind::File.data_key(), text),
                _ => FileData::Gzip(bytes),
            };
            config_maps.push(config_map(
                cluster,
                ctx,
                (ContentKind::File, &pinned.config_map),
                data,
                &revision,
            ));
        }
    }
    let spec = ClusterSpec {
        inventory_file: (cluster.inventory_dir.inventory_file != HOSTS_KEY)
            .then(|| cluster.inventory_dir.inventory_file.clone()),
        hosts_conf_ref: ConfigMapRef { name: hosts_name },
        vars_conf_ref,
        vars_files: Vec::new(),
        vars_files_ref,
        vault_password_ref: secret_ref(&cluster.settings.vault_password_secret),
        ssh_auth_ref: secret_ref(&cluster.settings.ssh_auth_secret),
        kubeconfig_secret_ref: secret_ref(&cluster.settings.kubeconfig_secret),
        defaults: cluster.settings.defaults.clone().into(),
        source: ClusterSource {
            path: cluster.path.clone(),
            revision: revision.clone(),
        },
        maintenance: cluster.settings.maintenance.clone(),
        kubernetes: crate::preflight::recorded(cluster),
        certificate_window_days: cluster.settings.certificate_window_days,
    };
    let operations = cluster
        .operations
        .iter()
        .map(|op| cluster_operation(cluster, op, ctx, &spec))
        .collect();

    let mut cluster_obj = Cluster::new(&cluster.name, spec);
    // The user's labels first, so kok's own (which validation keeps them from naming) always win.
    let mut labels = cluster.settings.labels.clone();
    labels.extend(common_labels(&cluster.name));
    cluster_obj.metadata = metadata(&cluster.name, cluster, ctx, labels, &revision);
    stamp(&mut cluster_obj);

    DesiredCluster {
        name: cluster.name.clone(),
        path: cluster.path.clone(),
        config_maps,
        cluster: cluster_obj,
        operations,
        rollouts: Vec::new(),
        kept_rollouts: BTreeSet::new(),
    }
}

/// The pin of the repository file `path` holding `bytes`: in the content-addressed ConfigMap of its bytes,
/// gzip-compressed when over [`GZIP_ABOVE`] or not UTF-8 text (a ConfigMap's `data` holds text only).
fn repository_file(path: &str, bytes: &[u8]) -> PinnedFile {
    PinnedFile {
        path: path.to_string(),
        config_map: file_config_map_name(bytes),
        gzip: bytes.len() > GZIP_ABOVE || std::str::from_utf8(bytes).is_err(),
    }
}

/// The repository files the steps of `op` kept in the repository need ([`crate::layout::playbooks`]), sorted
/// by path; empty when every step is a path in the runner image.
pub fn repository_files(cluster: &ClusterDir, op: &Operation) -> Vec<PinnedFile> {
    let steps: Vec<&str> = playbooks::step_actions(op)
        .filter_map(|action| cluster.repository_step(action))
        .collect();
    cluster
        .repository_files
        .iter()
        .filter(|(path, _)| steps.iter().any(|step| playbooks::needs(step, path)))
        .map(|(path, bytes)| repository_file(path, bytes))
        .collect()
}

/// Files of group_vars/ and host_vars/ larger than this (1 KiB) are pinned gzip-compressed, so that a
/// fleet of kubespray inventories (86 KB of sample variables each) stays small in the meta-cluster.
pub const GZIP_ABOVE: usize = 1 << 10;

fn secret_ref(name: &Option<String>) -> Option<SecretRef> {
    name.as_ref().map(|name| SecretRef { name: name.clone() })
}

/// What a content-addressed ConfigMap holds: a file as text under a key, or bytes to pin gzip-compressed
/// under [`FILE_GZIP_KEY`] in binaryData.
enum FileData<'a> {
    Text(&'a str, &'a str),
    Gzip(&'a [u8]),
}

/// True for a ConfigMap the whole fleet shares ([`LABEL_SHARED`]).
pub fn is_shared(cm: &ConfigMap) -> bool {
    cm.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_SHARED))
        .is_some_and(|v| v == "true")
}

/// A desired ConfigMap as it is written: a file rendering leaves uncompressed (its bytes under [`FILE_KEY`]
/// in binaryData) gzip-compressed under [`FILE_GZIP_KEY`]. Rendering never compresses: a file is
/// compressed when its ConfigMap is created (or printed), not at every pass that renders its cluster.
pub fn written_config_map(cm: &ConfigMap) -> std::borrow::Cow<'_, ConfigMap> {
    let raw = cm.binary_data.as_ref().and_then(|d| d.get(FILE_KEY));
    let Some(raw) = raw else {
        return std::borrow::Cow::Borrowed(cm);
    };
    let mut out = ConfigMap {
        metadata: cm.metadata.clone(),
        immutable: cm.immutable,
        ..ConfigMap::default()
    };
    out.binary_data = Some(BTreeMap::from([(
        FILE_GZIP_KEY.to_string(),
        k8s_openapi::ByteString(super::pinned::gzip(&raw.0)),
    )]));
    std::borrow::Cow::Owned(out)
}

fn config_map(
    cluster: &ClusterDir,
    ctx: &RenderContext,
    (kind, name): (ContentKind, &str),
    data: FileData<'_>,
    revision: &str,
) -> ConfigMap {
    let shared = matches!(kind, ContentKind::File | ContentKind::Files);
    let mut cm = if shared {
        // One file's content for the whole fleet: no cluster, revision or path of its own, and its name is
        // its content's address (no content hash beside it).
        let labels = BTreeMap::from([
            (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
            (LABEL_CONTENT.to_string(), kind.as_str().to_string()),
            (LABEL_SHARED.to_string(), "true".to_string()),
        ]);
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(ctx.namespace.clone()),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            immutable: Some(true),
            ..ConfigMap::default()
        }
    } else {
        let mut labels = common_labels(&cluster.name);
        labels.insert(LABEL_CONTENT.to_string(), kind.as_str().to_string());
        ConfigMap {
            metadata: metadata(name, cluster, ctx, labels, revision),
            immutable: Some(true),
            ..ConfigMap::default()
        }
    };
    match data {
        FileData::Text(key, text) => cm.data = Some(BTreeMap::from([(key.to_string(), text.to_string())])),
        FileData::Gzip(bytes) => {
            cm.binary_data = Some(BTreeMap::from([(
                FILE_KEY.to_string(),
                k8s_openapi::ByteString(bytes.to_vec()),
            )]))
        }
    }
    // No content hash: its name is its content's address.
    cm
}

pub(super) fn cluster_operation(
    cluster: &ClusterDir,
    op: &Operation,
    ctx: &RenderContext,
    pins: &ClusterSpec,
) -> ClusterOperation {
    let digest = operation_digest(&op.entry);
    let name = operation_name(&cluster.name, &op.id, &digest);
    let attribution = ctx.attribution_of(&cluster.name, &op.id);
    let revision = revision_string(&ctx.ref_name, &attribution.commit);
    let defaults = &cluster.settings.defaults;
    let image = op
        .image
        .clone()
        .or_else(|| defaults.image.clone())
        .unwrap_or_else(|| DEFAULT_IMAGE.to_string());

    let mut obj = ClusterOperation::new(
        &name,
        ClusterOperationSpec {
            cluster: cluster.name.clone(),
            id: op.id.clone(),
            digest,
            action: op.action.clone(),
            action_type: op.action_type,
            extra_args: op.extra_args.clone(),
            image,
            pre_hooks: op.pre_hooks.clone(),
            post_hooks: op.post_hooks.clone(),
            facts_playbook: limits_hosts(op).then(|| defaults.facts()).flatten(),
            active_deadline_seconds: op.active_deadline_seconds.or(defaults.active_deadline_seconds),
            start_timeout: op.start_timeout.or(defaults.start_timeout),
            service_account: defaults.service_account.clone(),
            resources: defaults
                .resources
                .clone()
                .map(|r| Box::new(crate::api::resource_requirements(r))),
            inventory_file: pins.inventory_file.clone(),
            hosts_conf_ref: pins.hosts_conf_ref.clone(),
            vars_conf_ref: pins.vars_conf_ref.clone(),
            vars_files: pins.vars_files.clone(),
            vars_files_ref: pins.vars_files_ref.clone(),
            repository_files: repository_files(cluster, op),
            vault_password_ref: pins.vault_password_ref.clone(),
            ssh_auth_ref: pins.ssh_auth_ref.clone(),
            source: OperationSource {
                commit: attribution.commit.clone(),
                revision: revision.clone(),
                path: cluster.path.clone(),
            },
            queue_position: queue_position(&ctx.queue_base, attribution.commit_index, op.index),
            schedule: op.schedule.clone(),
            scheduled_time: None,
            on_failure: op.on_failure,
            verify: op.verify,
            verify_timeout: op.verify_timeout.clone(),
            maintenance: cluster.settings.maintenance.clone(),
            ignore_maintenance: op.ignore_maintenance,
            rollout: None,
            // The findings come from the pass, which knows the cluster's history (see super::preflight).
            preflight: (!op.preflight).then(|| OperationPreflight {
                skipped: true,
                findings: Vec::new(),
            }),
        },
    );
    let mut labels = common_labels(&cluster.name);
    labels.insert(LABEL_OPERATION.to_string(), op.id.clone());
    // No content hash: a run is created once and never updated, so nothing compares one (at 10,000
    // clusters × 20 runs kept, 17 MB of etcd nobody would read).
    obj.metadata = metadata(&name, cluster, ctx, labels, &revision);
    obj
}

/// True when one of the operation's playbook steps (its action or a hook) limits its hosts.
fn limits_hosts(op: &Operation) -> bool {
    let action = (op.action_type == ActionType::Playbook).then_some(&op.extra_args);
    let hooks = op.pre_hooks.iter().chain(&op.post_hooks);
    action
        .into_iter()
        .chain(
            hooks
                .filter(|h| h.action_type == ActionType::Playbook)
                .map(|h| &h.extra_args),
        )
        .any(|args| crate::layout::limits_hosts(args))
}

/// `<queue_base>.<commit_index:06>.<file_index:04>`: sorts by commit order, then file order; empty (no
/// position) when `queue_base` is.
pub fn queue_position(queue_base: &str, commit_index: usize, file_index: usize) -> String {
    if queue_base.is_empty() {
        return String::new();
    }
    format!("{queue_base}.{commit_index:06}.{file_index:04}")
}

pub(super) fn metadata(
    name: &str,
    cluster: &ClusterDir,
    ctx: &RenderContext,
    labels: BTreeMap<String, String>,
    revision: &str,
) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(ctx.namespace.clone()),
        labels: Some(labels),
        annotations: Some(BTreeMap::from([
            (ANNOTATION_REVISION.to_string(), revision.to_string()),
            (ANNOTATION_SOURCE_PATH.to_string(), cluster.path.clone()),
        ])),
        ..ObjectMeta::default()
    }
}

/// `desired` with its Cluster at `revision` instead (spec, annotation and hash): a periodic resync
/// keeps the revision of a cluster whose directory did not change, so an unchanged cluster is not
/// rewritten and keeps naming the commit of its last change.
pub fn with_revision(desired: &DesiredCluster, revision: &str) -> DesiredCluster {
    let mut kept = desired.clone();
    let cluster = &mut kept.cluster;
    cluster.spec.source.revision = revision.to_string();
    let annotations = cluster.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(ANNOTATION_REVISION.to_string(), revision.to_string());
    annotations.remove(ANNOTATION_CONTENT_HASH);
    stamp(cluster);
    kept
}

/// Sets the `kok.dev/content-hash` annotation of `obj` to [`content_hash`] of the object.
pub(super) fn stamp<K: kube::Resource + Serialize>(obj: &mut K) {
    // Serializing these objects to JSON cannot fail: every map is keyed by strings and no field is
    // a float. Should it ever fail, the annotation is left out and the apply layer writes the object.
    if let Ok(hash) = content_hash(&*obj) {
        obj.meta_mut()
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(ANNOTATION_CONTENT_HASH.to_string(), hash);
    }
}

/// The desired objects of `clusters` as one YAML stream, each document starting with `---`, in
/// the order of [`DesiredCluster::objects`] cluster after cluster. Each document starts with
/// `apiVersion`, `kind` and `metadata`, then the other fields in declaration order. Same input,
/// same bytes.
pub fn to_yaml_stream(clusters: &[DesiredCluster]) -> Result<String, RenderError> {
    let mut out = String::new();
    let mut shared = BTreeSet::new();
    for desired in clusters {
        for cm in &desired.config_maps {
            // A ConfigMap the fleet shares is printed once, with the first cluster that pins it.
            if is_shared(cm) && !shared.insert(cm.metadata.name.clone()) {
                continue;
            }
            push_document(&mut out, &*written_config_map(cm), &desired.name)?;
        }
        push_document(&mut out, &desired.cluster, &desired.name)?;
        for op in &desired.operations {
            push_document(&mut out, op, &desired.name)?;
        }
    }
    Ok(out)
}

/// Appends `---` and `obj` as YAML, with its `apiVersion`, `kind` and `metadata` first.
pub(super) fn push_document<T: Serialize>(
    out: &mut String,
    obj: &T,
    cluster: &str,
) -> Result<(), RenderError> {
    let to_yaml = |source| RenderError::ToYaml {
        cluster: cluster.to_string(),
        source,
    };
    let value = match serde_yaml::to_value(obj).map_err(to_yaml)? {
        serde_yaml::Value::Mapping(fields) => {
            let mut ordered = serde_yaml::Mapping::new();
            for key in ["apiVersion", "kind", "metadata"] {
                if let Some(v) = fields.get(key) {
                    ordered.insert(key.into(), v.clone());
                }
            }
            for (k, v) in fields {
                if !ordered.contains_key(&k) {
                    ordered.insert(k, v);
                }
            }
            serde_yaml::Value::Mapping(ordered)
        }
        other => other,
    };
    out.push_str("---\n");
    out.push_str(&serde_yaml::to_string(&value).map_err(to_yaml)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        ActionType, Hook, DEFAULT_FACTS_PLAYBOOK, HOSTS_KEY, LABEL_CLUSTER, LABEL_MANAGED_BY, VARS_KEY,
    };
    use crate::layout::{Inventory, Settings};
    use serde_json::json;

    const SHA: &str = "1111111111111111111111111111111111111111";

    fn op(id: &str, index: usize, entry: serde_json::Value) -> Operation {
        let base = Operation::playbook(id, entry["action"].as_str().unwrap_or("cluster.yml"), index);
        Operation {
            extra_args: entry["extraArgs"]
                .as_array()
                .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
                .unwrap_or_default(),
            image: entry["image"].as_str().map(str::to_string),
            active_deadline_seconds: entry["activeDeadlineSeconds"].as_i64(),
            start_timeout: entry["startTimeout"].as_i64(),
            rerun: entry["rerun"].as_u64(),
            entry,
            line: index + 1,
            ..base
        }
    }

    fn cluster() -> ClusterDir {
        ClusterDir {
            name: "prod-bj".to_string(),
            path: "clusters/prod-bj".to_string(),
            inventory_dir: crate::layout::InventoryDir {
                inventory_file: "hosts.yml".into(),
                hosts_yml: "all:\n  hosts:\n    node1: {}\n".to_string(),
                vars_yml: Some("# comment kept\nkube_version: v1.33.1\n".to_string()),
                vars_files: vec![],
            },
            inventory: Inventory::default(),
            operations: vec![
                op("install", 0, json!({"id": "install", "action": "cluster.yml"})),
                op(
                    "add-node7",
                    1,
                    json!({"id": "add-node7", "action": "scale.yml", "extraArgs": ["--limit=node7"],
                           "image": "example.com/kubespray:v1", "activeDeadlineSeconds": 60}),
                ),
            ],
            settings: Settings {
                ssh_auth_secret: Some("prod-bj-ssh".to_string()),
                kubeconfig_secret: None,
                defaults: crate::layout::spec::RunDefaults {
                    image: Some("registry.local/kubespray:v2".to_string()),
                    service_account: Some("ansible".to_string()),
                    active_deadline_seconds: Some(3600),
                    start_timeout: Some(300),
                    ..Default::default()
                },
                ..Settings::default()
            },
            kubespray: None,
            repository_files: Default::default(),
        }
    }

    fn ctx() -> RenderContext {
        RenderContext::new("kok-system", "main", SHA)
    }

    #[test]
    fn config_maps_hold_the_files_byte_for_byte_and_are_immutable() {
        let desired = render_cluster(&cluster(), &ctx());
        let [hosts, vars] = &desired.config_maps[..] else {
            panic!("two ConfigMaps expected")
        };
        assert_eq!(
            hosts.data.as_ref().unwrap()[HOSTS_KEY],
            cluster().inventory_dir.hosts_yml
        );
        assert_eq!(
            Some(&vars.data.as_ref().unwrap()[VARS_KEY]),
            cluster().inventory_dir.vars_yml.as_ref()
        );
        assert_eq!(hosts.immutable, Some(true));
        assert_eq!(vars.immutable, Some(true));
        assert_eq!(
            hosts.metadata.name.as_deref(),
            Some(config_map_name("prod-bj", ContentKind::Hosts, &cluster().inventory_dir.hosts_yml).as_str())
        );
        assert_eq!(hosts.metadata.labels.as_ref().unwrap()[LABEL_CONTENT], "hosts");
        assert_eq!(vars.metadata.labels.as_ref().unwrap()[LABEL_CONTENT], "vars");
    }

    #[test]
    fn a_kubespray_directory_is_pinned_file_by_file_the_large_files_compressed() {
        use kube::ResourceExt;
        let big = format!("kube_version: v1.31.4\n{}", "# comment\n".repeat(1000));
        let mut dir = cluster();
        dir.inventory_dir.inventory_file = "inventory.ini".into();
        dir.inventory_dir.hosts_yml = "[kube_control_plane]\nnode1\n".into();
        dir.inventory_dir.vars_yml = None;
        dir.inventory_dir.vars_files = vec![
            ("group_vars/all/all.yml".into(), "a: 1\n".into()),
            ("group_vars/k8s_cluster/k8s-cluster.yml".into(), big.clone()),
            ("host_vars/node1.yml".into(), "a: 1\n".into()),
        ];
        let desired = render_cluster(&dir, &ctx());
        let names: Vec<String> = desired.config_maps.iter().map(|c| c.name_any()).collect();
        assert_eq!(
            names.len(),
            4,
            "identical files share one ConfigMap, and one lists them: {names:?}"
        );
        let hosts = &desired.config_maps[0];
        assert_eq!(
            hosts.data.as_ref().unwrap()["inventory.ini"],
            dir.inventory_dir.hosts_yml
        );
        assert_ne!(
            hosts.name_any(),
            config_map_name("prod-bj", ContentKind::Hosts, &dir.inventory_dir.hosts_yml),
            "the inventory's file name is part of its ConfigMap's name"
        );
        let spec = &desired.cluster.spec;
        assert_eq!(spec.inventory_file.as_deref(), Some("inventory.ini"));
        assert_eq!(spec.vars_conf_ref, None);
        // The spec names the files through one shared list: the varsFiles list as JSON.
        assert!(spec.vars_files.is_empty());
        let list_name = &spec.vars_files_ref.as_ref().expect("a file list").name;
        assert!(list_name.starts_with("kok-files-"), "{list_name}");
        let list = desired
            .config_maps
            .iter()
            .find(|c| c.name_any() == *list_name)
            .expect("the list is among the ConfigMaps");
        assert_eq!(list.metadata.labels.as_ref().unwrap()[LABEL_SHARED], "true");
        let listed = crate::api::file_list(list).expect("a readable list");
        let files: Vec<(&str, &str, bool)> = listed
            .iter()
            .map(|f| (f.path.as_str(), f.config_map.as_str(), f.gzip))
            .collect();
        let small = file_config_map_name(b"a: 1\n");
        let large = file_config_map_name(big.as_bytes());
        assert!(
            small.starts_with("kok-file-"),
            "shared by the fleet: no cluster in the name: {small}"
        );
        assert_eq!(
            files,
            [
                ("group_vars/all/all.yml", small.as_str(), false),
                ("group_vars/k8s_cluster/k8s-cluster.yml", large.as_str(), true),
                ("host_vars/node1.yml", small.as_str(), false),
            ]
        );
        let by_name = |n: &str| {
            let cm = desired.config_maps.iter().find(|c| c.name_any() == n).unwrap();
            written_config_map(cm).into_owned()
        };
        assert_eq!(by_name(&small).data.as_ref().unwrap()["file"], "a: 1\n");
        for name in [&small, &large] {
            let labels = by_name(name).metadata.labels.unwrap();
            assert_eq!(labels[LABEL_SHARED], "true");
            assert!(!labels.contains_key(LABEL_CLUSTER), "{labels:?}");
        }
        // Rendering does not compress; the ConfigMap as written (created, or printed) is.
        let raw = &desired
            .config_maps
            .iter()
            .find(|c| c.name_any() == large)
            .unwrap();
        assert_eq!(raw.binary_data.as_ref().unwrap()["file"].0, big.as_bytes());
        let written = by_name(&large);
        let packed = &written.binary_data.as_ref().unwrap()["file.gz"].0;
        assert!(packed.len() < big.len() / 10, "{} bytes", packed.len());
        assert_eq!(
            super::super::pinned::gunzip_text(packed).as_deref(),
            Some(big.as_str())
        );
        assert_eq!(by_name(&large).immutable, Some(true));
        for op in &desired.operations {
            assert_eq!(op.spec.vars_files_ref, spec.vars_files_ref);
            assert_eq!(op.spec.inventory_file, spec.inventory_file);
        }
        // Read back from the ConfigMaps, the directory is what was rendered.
        let cms = desired
            .objects()
            .unwrap()
            .into_iter()
            .filter(|o| o["kind"] == "ConfigMap")
            .map(|o| serde_json::from_value::<ConfigMap>(o).unwrap())
            .collect::<Vec<_>>()
            .iter()
            .map(|c| (c.name_any(), c.clone()))
            .collect();
        let back = super::super::pinned::inventory_dir(spec, &cms).unwrap();
        assert_eq!(back, dir.inventory_dir);
    }

    #[test]
    fn every_object_carries_labels_revision_path_and_namespace_and_the_cluster_its_hash() {
        let desired = render_cluster(&cluster(), &ctx());
        for obj in desired.objects().unwrap() {
            let meta = &obj["metadata"];
            assert_eq!(meta["namespace"], "kok-system");
            assert_eq!(meta["labels"][LABEL_MANAGED_BY], "kok");
            assert_eq!(meta["labels"][LABEL_CLUSTER], "prod-bj");
            assert_eq!(
                meta["annotations"][ANNOTATION_REVISION],
                format!("main@sha1:{SHA}")
            );
            assert_eq!(meta["annotations"][ANNOTATION_SOURCE_PATH], "clusters/prod-bj");
            // Only what kok updates carries a content hash: runs are created once, and a ConfigMap's
            // name is its content's address.
            let hash = meta["annotations"][ANNOTATION_CONTENT_HASH].as_str();
            if obj["kind"] == "Cluster" {
                assert_eq!(hash.map(str::len), Some(super::super::hash::CONTENT_HASH_LEN));
            } else {
                assert_eq!(hash, None, "{}", obj["kind"]);
            }
        }
    }

    #[test]
    fn content_hash_annotation_matches_the_object_it_is_on() {
        let desired = render_cluster(&cluster(), &ctx());
        let annotated =
            desired.cluster.metadata.annotations.as_ref().unwrap()[ANNOTATION_CONTENT_HASH].clone();
        assert_eq!(content_hash(&desired.cluster).unwrap(), annotated);
    }

    #[test]
    fn a_cluster_kept_at_an_earlier_revision_hashes_as_if_rendered_there() {
        let earlier = render_cluster(&cluster(), &ctx());
        let later = render_cluster(
            &cluster(),
            &RenderContext::new("kok-system", "main", "b".repeat(40)),
        );
        let kept = with_revision(&later, &earlier.cluster.spec.source.revision);
        assert_eq!(kept.cluster, earlier.cluster);
        assert_eq!(kept.operations, later.operations);
    }

    #[test]
    fn cluster_points_at_the_current_config_maps_and_the_ssh_secret() {
        let desired = render_cluster(&cluster(), &ctx());
        let spec = &desired.cluster.spec;
        assert_eq!(desired.cluster.metadata.name.as_deref(), Some("prod-bj"));
        assert_eq!(
            Some(&spec.hosts_conf_ref.name),
            desired.config_maps[0].metadata.name.as_ref()
        );
        assert_eq!(
            spec.vars_conf_ref.as_ref().map(|r| &r.name),
            desired.config_maps[1].metadata.name.as_ref()
        );
        assert_eq!(spec.ssh_auth_ref.as_ref().unwrap().name, "prod-bj-ssh");
        assert_eq!(spec.source.revision, format!("main@sha1:{SHA}"));
        assert_eq!(spec.defaults.service_account.as_deref(), Some("ansible"));
    }

    #[test]
    fn labels_go_onto_the_cluster_and_maintenance_onto_it_and_its_operations() {
        let mut c = cluster();
        c.settings.labels = [("env".to_string(), "prod".to_string())].into();
        c.settings.maintenance = Some(crate::api::saturday_night_in_berlin());
        c.operations[1].ignore_maintenance = true;
        let plain = render_cluster(&cluster(), &ctx());
        let desired = render_cluster(&c, &ctx());
        let labels = desired.cluster.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["env"], "prod");
        assert_eq!(labels[LABEL_CLUSTER], "prod-bj");
        assert_eq!(desired.cluster.spec.maintenance, c.settings.maintenance);
        assert_ne!(
            desired.cluster.metadata.annotations.as_ref().unwrap()[ANNOTATION_CONTENT_HASH],
            plain.cluster.metadata.annotations.as_ref().unwrap()[ANNOTATION_CONTENT_HASH],
            "a label change rewrites the Cluster"
        );
        for op in &desired.operations {
            assert_eq!(op.spec.maintenance, c.settings.maintenance);
        }
        assert!(!desired.operations[0].spec.ignore_maintenance);
        assert!(desired.operations[1].spec.ignore_maintenance);
        assert_eq!(
            desired.operations[0].spec.digest, plain.operations[0].spec.digest,
            "settings never change an entry's digest"
        );
    }

    #[test]
    fn operations_pin_inputs_and_resolve_image_and_deadline() {
        let desired = render_cluster(&cluster(), &ctx());
        let [install, scale] = &desired.operations[..] else {
            panic!("two operations expected")
        };
        assert_eq!(
            install.spec.image, "registry.local/kubespray:v2",
            "cluster default image"
        );
        assert_eq!(
            scale.spec.image, "example.com/kubespray:v1",
            "operation image wins"
        );
        assert_eq!(install.spec.active_deadline_seconds, Some(3600));
        assert_eq!(scale.spec.active_deadline_seconds, Some(60));
        assert_eq!(
            install.spec.start_timeout,
            Some(300),
            "cluster default start timeout"
        );
        assert_eq!(scale.spec.extra_args, vec!["--limit=node7"]);
        for op in [install, scale] {
            assert_eq!(op.spec.hosts_conf_ref, desired.cluster.spec.hosts_conf_ref);
            assert_eq!(op.spec.vars_conf_ref, desired.cluster.spec.vars_conf_ref);
            assert_eq!(op.spec.ssh_auth_ref, desired.cluster.spec.ssh_auth_ref);
            assert_eq!(op.spec.service_account.as_deref(), Some("ansible"));
            assert_eq!(op.spec.source.commit, SHA);
            assert_eq!(op.metadata.labels.as_ref().unwrap()[LABEL_OPERATION], op.spec.id);
        }
        assert_eq!(
            install.metadata.name.as_deref(),
            Some(format!("prod-bj-install-{}", &install.spec.digest[..8]).as_str())
        );
    }

    #[test]
    fn image_falls_back_to_the_default_runner_image() {
        let mut c = cluster();
        c.settings.defaults.image = None;
        let desired = render_cluster(&c, &ctx());
        assert_eq!(desired.operations[0].spec.image, DEFAULT_IMAGE);
    }

    #[test]
    fn only_an_operation_that_limits_its_hosts_gets_the_facts_playbook() {
        let desired = render_cluster(&cluster(), &ctx());
        assert_eq!(
            desired.operations[0].spec.facts_playbook, None,
            "install has no limit"
        );
        let facts = desired.operations[1]
            .spec
            .facts_playbook
            .clone()
            .expect("add-node7 limits");
        assert_eq!(
            (facts.path.as_str(), facts.optional),
            (DEFAULT_FACTS_PLAYBOOK, true)
        );

        let mut c = cluster();
        c.operations[0].post_hooks = vec![Hook {
            action: "check.yml".into(),
            action_type: ActionType::Playbook,
            extra_args: vec!["-l".into(), "node1".into()],
        }];
        c.operations[1].action_type = ActionType::Shell;
        c.settings.defaults.facts_playbook = Some("site/facts.yml".into());
        let desired = render_cluster(&c, &ctx());
        let facts = desired.operations[0]
            .spec
            .facts_playbook
            .clone()
            .expect("a limited hook");
        assert_eq!((facts.path.as_str(), facts.optional), ("site/facts.yml", false));
        assert_eq!(
            desired.operations[1].spec.facts_playbook, None,
            "a shell step is not ansible-playbook"
        );

        c.settings.defaults.facts_playbook = Some(crate::api::FACTS_PLAYBOOK_NONE.into());
        assert_eq!(render_cluster(&c, &ctx()).operations[0].spec.facts_playbook, None);
    }

    #[test]
    fn steps_kept_in_the_repository_pin_their_files_and_image_paths_pin_none() {
        use crate::api::PinnedInventory;
        use kube::ResourceExt;
        let mut dir = cluster();
        dir.operations.push(op(
            "hello",
            2,
            json!({"id": "hello", "action": "playbooks/hello.yml"}),
        ));
        let big = "y".repeat(GZIP_ABOVE + 1);
        dir.repository_files = [
            ("playbooks/hello.yml".to_string(), b"- hosts: all\n".to_vec()),
            ("playbooks/files/big.txt".to_string(), big.clone().into_bytes()),
            ("playbooks/files/blob.bin".to_string(), vec![0xff, 0xfe, 0]),
        ]
        .into();
        let desired = render_cluster(&dir, &ctx());
        let hello = &desired.operations[2].spec;
        let pinned: Vec<(&str, bool)> = hello
            .repository_files
            .iter()
            .map(|f| (f.path.as_str(), f.gzip))
            .collect();
        assert_eq!(
            pinned,
            [
                ("playbooks/files/big.txt", true),
                ("playbooks/files/blob.bin", true),
                ("playbooks/hello.yml", false)
            ],
            "large and binary files compressed, sorted by path"
        );
        assert!(desired.operations[0].spec.repository_files.is_empty());
        for f in &hello.repository_files {
            let cm = desired
                .config_maps
                .iter()
                .find(|c| c.name_any() == f.config_map)
                .expect("every pinned file has its ConfigMap");
            assert_eq!(cm.immutable, Some(true));
        }
        let small = desired
            .config_maps
            .iter()
            .find(|c| c.name_any() == hello.repository_files[2].config_map)
            .unwrap();
        assert_eq!(small.data.as_ref().unwrap()["file"], "- hosts: all\n");
        assert!(hello.pins(&hello.repository_files[0].config_map));
    }

    #[test]
    fn hooks_and_schedule_are_carried_over() {
        let mut c = cluster();
        c.operations[0].pre_hooks = vec![Hook {
            action: "ping.yml".into(),
            action_type: ActionType::Playbook,
            extra_args: vec![],
        }];
        c.operations[0].schedule = Some("0 0 3 * * *".into());
        let desired = render_cluster(&c, &ctx());
        assert_eq!(desired.operations[0].spec.pre_hooks[0].action, "ping.yml");
        assert_eq!(
            desired.operations[0].spec.schedule.as_deref(),
            Some("0 0 3 * * *")
        );
    }

    #[test]
    fn queue_positions_sort_by_commit_then_file_order() {
        let mut ctx = ctx();
        ctx.attribute(
            "prod-bj",
            "install",
            Attribution {
                commit: "a".repeat(40),
                commit_index: 2,
            },
        );
        ctx.attribute(
            "prod-bj",
            "add-node7",
            Attribution {
                commit: "b".repeat(40),
                commit_index: 1,
            },
        );
        let desired = render_cluster(&cluster(), &ctx);
        let [install, scale] = &desired.operations[..] else {
            panic!("two operations expected")
        };
        assert!(scale.spec.queue_position < install.spec.queue_position);
        assert_eq!(install.spec.source.commit, "a".repeat(40));
        assert_eq!(
            install.spec.source.revision,
            format!("main@sha1:{}", "a".repeat(40))
        );
        assert_eq!(
            install.metadata.annotations.as_ref().unwrap()[ANNOTATION_REVISION],
            format!("main@sha1:{}", "a".repeat(40))
        );
        assert_eq!(queue_position("0", 1, 12), "0.000001.0012");
        assert_eq!(queue_position("", 1, 12), "", "no base, no position");
        assert!(queue_position("0", 0, 10) > queue_position("0", 0, 9));
    }

    #[test]
    fn an_unchanged_attributed_operation_renders_the_same_at_a_later_commit() {
        let mut first = ctx();
        first.attribute(
            "prod-bj",
            "install",
            Attribution {
                commit: SHA.into(),
                commit_index: 0,
            },
        );
        let mut later = first.clone();
        later.commit = "2".repeat(40);
        let a = render_cluster(&cluster(), &first);
        let b = render_cluster(&cluster(), &later);
        assert_eq!(a.operations[0], b.operations[0]);
        assert_ne!(a.cluster, b.cluster, "the Cluster follows the rendered revision");
    }

    #[test]
    fn reordering_keys_in_an_entry_keeps_the_operation_name() {
        let mut c = cluster();
        let a = render_cluster(&c, &ctx()).operations[1].metadata.name.clone();
        c.operations[1].entry = json!({"activeDeadlineSeconds": 60, "image": "example.com/kubespray:v1",
            "extraArgs": ["--limit=node7"], "action": "scale.yml", "id": "add-node7"});
        let b = render_cluster(&c, &ctx()).operations[1].metadata.name.clone();
        assert_eq!(a, b);
    }

    #[test]
    fn rendering_is_deterministic_to_the_byte() {
        let a = to_yaml_stream(&render_all(&[cluster()], &ctx())).unwrap();
        let b = to_yaml_stream(&render_all(&[cluster()], &ctx())).unwrap();
        assert_eq!(a, b);
        assert_eq!(
            a.matches("---\n").count(),
            5,
            "2 ConfigMaps, 1 Cluster, 2 ClusterOperations"
        );
    }

    #[test]
    fn yaml_stream_has_no_status_and_keeps_multiline_files_readable() {
        let yaml = to_yaml_stream(&render_all(&[cluster()], &ctx())).unwrap();
        assert!(!yaml.contains("status:"), "{yaml}");
        assert!(yaml.contains("# comment kept"), "{yaml}");
    }
}
