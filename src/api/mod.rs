//! The `kok.dev/v1alpha1` custom resources and every name kok writes into the meta-cluster, defined once.

mod context;
mod rollout;
pub mod watched;

pub use context::*;
// The values of the repository contract that kok's objects carry, defined beside the parser.
pub use kok_layout::spec::{
    ActionType, FactsPlaybook, Hook, Maintenance, MaintenanceFreeze, MaintenanceWindow, OnFailure, Verify,
    DEFAULT_FACTS_PLAYBOOK, FACTS_PLAYBOOK_NONE, LABEL_MANAGED_BY, MANAGED_BY, VARS_INVENTORY_PATH,
};
pub use rollout::*;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of kok's custom resources.
pub const GROUP: &str = "kok.dev";
/// API version of kok's custom resources.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of kok's custom resources.
pub const API_VERSION: &str = "kok.dev/v1alpha1";
/// Field manager used for every server-side apply.
pub const FIELD_MANAGER: &str = "kok";
/// Parameters of kok's merge patches (labels, owners, a cancel, every status write of the controller and
/// the reporter): kok's field manager, so `managedFields` names kok for every field it writes, and the
/// status writes of one object share one entry.
pub fn kok_params() -> kube::api::PatchParams {
    kube::api::PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..kube::api::PatchParams::default()
    }
}
/// Namespace used when `--namespace` is not given.
pub const DEFAULT_NAMESPACE: &str = "kok-system";

/// Label carrying the cluster directory name an object belongs to.
pub const LABEL_CLUSTER: &str = "kok.dev/cluster";
/// Label carrying an operation id (on ClusterOperations and their Jobs).
pub const LABEL_OPERATION: &str = "kok.dev/operation";
/// Label carrying the ClusterOperation name on Jobs.
pub const LABEL_CLUSTER_OPERATION: &str = "kok.dev/cluster-operation";
/// Label telling which input file a content-addressed ConfigMap holds (`hosts` or `vars`).
pub const LABEL_CONTENT: &str = "kok.dev/content";
/// Label set to `"true"` on a ConfigMap while it is its Cluster's current input, and on a ClusterOperation
/// while it is an entry of its cluster's operations.yml.
pub const LABEL_CURRENT: &str = "kok.dev/current";
/// Label set to `"true"` on a ConfigMap shared by the whole fleet: one file's content (of group_vars/,
/// host_vars/ or the repository), named by its hash alone, kept while any Cluster or ClusterOperation names
/// it. It carries no `kok.dev/cluster` label and no owner references (see `materialize::shared`).
pub const LABEL_SHARED: &str = "kok.dev/shared";
/// Annotation with the source revision in Flux's format: `<branch>@sha1:<sha>`.
pub const ANNOTATION_REVISION: &str = "kok.dev/revision";
/// Annotation with the cluster directory path inside the repository.
pub const ANNOTATION_SOURCE_PATH: &str = "kok.dev/source-path";
/// Annotation with the sha256 of the rendered object (its first 128 bits, 32 hex characters); equal hash,
/// no write.
pub const ANNOTATION_CONTENT_HASH: &str = "kok.dev/content-hash";
/// Annotation on a scheduled ClusterOperation: the last cron firing (RFC 3339) a run was created for.
pub const ANNOTATION_LAST_FIRED: &str = "kok.dev/last-fired";
/// Annotation on a ClusterOperation created for an entry whose outcome the record in git already holds
/// (a lost or rebuilt meta-cluster, a deleted object): the [`Recorded`] status, as JSON. The controller
/// restores the operation from it instead of running it.
pub const ANNOTATION_RECORDED: &str = "kok.dev/recorded";
/// Start of the message of an operation held by an earlier failure of its cluster; its commit status says the
/// message as it is.
pub const HELD_PREFIX: &str = "held: ";
/// Cluster condition: the cluster's inputs (the Secrets it names) are usable.
pub const CONDITION_READY: &str = "Ready";
/// Cluster condition: an operation of the cluster runs or waits.
pub const CONDITION_RECONCILING: &str = "Reconciling";
/// Cluster condition: the cluster's last operation failed or was canceled, and nothing runs or waits.
pub const CONDITION_STALLED: &str = "Stalled";
/// The conditions the cluster controller owns on a Cluster (the health checks own the others:
/// `crate::health::conditions::HEALTH_CONDITIONS`).
pub const CLUSTER_CONDITIONS: [&str; 3] = [CONDITION_READY, CONDITION_RECONCILING, CONDITION_STALLED];
/// Name of the ConfigMap holding the last reconciled commit.
pub const STATE_CONFIG_MAP: &str = "kok-state";
/// Name of the ConfigMap data key holding `hosts.yml`.
pub const HOSTS_KEY: &str = "hosts.yml";
/// Name of the ConfigMap data key holding `vars.yml`.
pub const VARS_KEY: &str = "vars.yml";
/// Key of the private key inside an ssh-auth Secret.
pub const SSH_PRIVATE_KEY: &str = "ssh-privatekey";
/// Key of the ansible-vault password inside the Secret `vaultPasswordSecret` names.
pub const VAULT_PASSWORD_KEY: &str = "password";
/// Secret type kok accepts for `sshAuthSecret` (Opaque with [`SSH_PRIVATE_KEY`] is accepted too).
pub const SSH_AUTH_SECRET_TYPE: &str = "kubernetes.io/ssh-auth";

/// Key of the kubeconfig in a cluster's kubeconfig Secret (Cluster API's convention).
pub const KUBECONFIG_KEY: &str = "value";

/// Name of the Secret holding a cluster's admin kubeconfig, saved from a run's `artifacts/admin.conf`.
pub fn kubeconfig_secret(cluster: &str) -> String {
    format!("{cluster}-kubeconfig")
}

/// Runner image used when neither the operation, cluster.yml nor kok.yml names one.
pub const DEFAULT_IMAGE: &str = "quay.io/kubespray/kubespray:v2.27.0";
/// Finished operations kept per cluster when `historyLimit` is not set.
pub const DEFAULT_HISTORY_LIMIT: u32 = 20;
/// Deadline of a Job when neither its entry nor cluster.yml nor kok.yml sets `activeDeadlineSeconds`: 12 hours.
/// kubespray's cluster.yml on a large cluster (hundreds of nodes, each pulling images and upgrading one at a
/// time with `serial`) takes several hours; twice the longest run seen is still a bound that ends a hung run
/// the same day, instead of never.
pub const DEFAULT_ACTIVE_DEADLINE_SECONDS: i64 = 12 * 3600;
/// How long a run's pod may fail to start when neither its entry nor the settings set `startTimeout`:
/// 10 minutes, ample for pulling kubespray's image (about 1 GB) on a slow link, short enough that a wrong
/// image name does not hold its cluster's queue for long.
pub const DEFAULT_START_TIMEOUT_SECONDS: i64 = 600;

/// The labels every object kok writes for `cluster` carries.
pub fn common_labels(cluster: &str) -> std::collections::BTreeMap<String, String> {
    [(LABEL_MANAGED_BY, MANAGED_BY), (LABEL_CLUSTER, cluster)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Label selector matching everything kok manages.
pub fn managed_selector() -> String {
    format!("{LABEL_MANAGED_BY}={MANAGED_BY}")
}

/// Reference to a ConfigMap in the same namespace.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapRef {
    /// Name of the ConfigMap, in the namespace of the referring object.
    #[schemars(
        length(min = 1, max = 253),
        pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
}

/// Reference to a Secret in the same namespace.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretRef {
    /// Name of the Secret, in the namespace of the referring object; the referring field says which keys it holds.
    #[schemars(
        length(min = 1, max = 253),
        pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub name: String,
}

/// One file pinned in a content-addressed ConfigMap of its own (so a commit that edits one file adds one
/// ConfigMap): a file of a cluster directory's group_vars/ or host_vars/, or a file of the repository that a
/// playbook kept in it needs (`repositoryFiles`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PinnedFile {
    /// Path inside the inventory directory, e.g. `group_vars/k8s_cluster/k8s-cluster.yml`; for a repository
    /// file, inside the directory holding kok.yml, e.g. `playbooks/hello.yml`.
    pub path: String,
    /// Name of the ConfigMap holding the file: under key `file`, or gzip-compressed under `file.gz` in
    /// binaryData when `gzip` is set.
    pub config_map: String,
    /// The file is stored gzip-compressed (files over 1 KiB are, and repository files that are not UTF-8 text).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gzip: bool,
}

/// The ConfigMap data key holding a pinned group_vars/host_vars file as it is.
pub const FILE_KEY: &str = "file";
/// The data key of a file list ConfigMap (`varsFilesRef`): the pinned files as a JSON array of
/// [`PinnedFile`].
pub const FILES_KEY: &str = "files.json";

/// The pinned files a file list ConfigMap holds (under [`FILES_KEY`]); `None` when it holds no such list.
pub fn file_list(cm: &k8s_openapi::api::core::v1::ConfigMap) -> Option<Vec<PinnedFile>> {
    let text = cm.data.as_ref()?.get(FILES_KEY)?;
    serde_json::from_str(text).ok()
}
/// The ConfigMap binaryData key holding a pinned file gzip-compressed.
pub const FILE_GZIP_KEY: &str = "file.gz";
/// The inventory file of a cluster directory when the spec names none.
pub const DEFAULT_INVENTORY_FILE: &str = HOSTS_KEY;

/// The pinned inventory directory a Cluster or a ClusterOperation names: the inventory file, vars.yml and
/// the files of group_vars/ and host_vars/.
pub trait PinnedInventory: Sync {
    /// The inventory file's name (`hosts.yml` unless the spec says otherwise).
    fn inventory_file(&self) -> &str;
    /// The ConfigMap holding the inventory file.
    fn hosts_ref(&self) -> &ConfigMapRef;
    /// The ConfigMap holding vars.yml, when the directory has one.
    fn vars_ref(&self) -> Option<&ConfigMapRef>;
    /// The pinned group_vars/ and host_vars/ files the spec lists itself (empty when it names them through
    /// [`PinnedInventory::vars_files_ref`]).
    fn vars_files(&self) -> &[PinnedFile];
    /// The shared ConfigMap listing the pinned group_vars/ and host_vars/ files ([`FILES_KEY`]).
    fn vars_files_ref(&self) -> Option<&ConfigMapRef>;

    /// The pinned files of the repository its playbooks kept in the repository need (none for a Cluster).
    fn repository_files(&self) -> &[PinnedFile] {
        &[]
    }

    /// The ConfigMaps of the inventory directory the spec pins, each name once.
    fn inventory_config_maps(&self) -> std::collections::BTreeSet<&str> {
        let mut names: std::collections::BTreeSet<&str> = [self.hosts_ref().name.as_str()].into();
        names.extend(self.vars_ref().map(|r| r.name.as_str()));
        names.extend(self.vars_files_ref().map(|r| r.name.as_str()));
        names.extend(self.vars_files().iter().map(|f| f.config_map.as_str()));
        names
    }

    /// Every ConfigMap the spec pins (the inventory's and the repository files'), each name once.
    fn pinned_config_maps(&self) -> std::collections::BTreeSet<&str> {
        let mut names = self.inventory_config_maps();
        names.extend(self.repository_files().iter().map(|f| f.config_map.as_str()));
        names
    }

    /// True when the spec pins the ConfigMap `name`.
    fn pins(&self, name: &str) -> bool {
        self.hosts_ref().name == name
            || self.vars_ref().is_some_and(|r| r.name == name)
            || self.vars_files_ref().is_some_and(|r| r.name == name)
            || self.vars_files().iter().any(|f| f.config_map == name)
            || self.repository_files().iter().any(|f| f.config_map == name)
    }
}

macro_rules! pinned_inventory {
    ($spec:ty $(, $repository:ident)?) => {
        impl PinnedInventory for $spec {
            fn inventory_file(&self) -> &str {
                self.inventory_file
                    .as_deref()
                    .unwrap_or(DEFAULT_INVENTORY_FILE)
            }
            fn hosts_ref(&self) -> &ConfigMapRef {
                &self.hosts_conf_ref
            }
            fn vars_ref(&self) -> Option<&ConfigMapRef> {
                self.vars_conf_ref.as_ref()
            }
            fn vars_files(&self) -> &[PinnedFile] {
                &self.vars_files
            }
            fn vars_files_ref(&self) -> Option<&ConfigMapRef> {
                self.vars_files_ref.as_ref()
            }
            $(fn repository_files(&self) -> &[PinnedFile] {
                &self.$repository
            })?
        }
    };
}
pinned_inventory!(ClusterSpec);
pinned_inventory!(ClusterOperationSpec, repository_files);

impl ClusterOperationSpec {
    /// The Job's deadline in seconds: the spec's, else [`DEFAULT_ACTIVE_DEADLINE_SECONDS`].
    pub fn deadline_seconds(&self) -> i64 {
        self.active_deadline_seconds
            .unwrap_or(DEFAULT_ACTIVE_DEADLINE_SECONDS)
    }

    /// How long the run's pod may fail to start: the spec's `startTimeout`, else
    /// [`DEFAULT_START_TIMEOUT_SECONDS`].
    pub fn start_timeout_seconds(&self) -> i64 {
        self.start_timeout.unwrap_or(DEFAULT_START_TIMEOUT_SECONDS)
    }
}

/// Defaults applied to every operation of a cluster, from cluster.yml over kok.yml.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunDefaults {
    /// Runner image used by operations that do not name one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// ServiceAccount the Job's pod runs as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<String>,
    /// Compute resources of the runner container (`requests` and `limits`, e.g. `cpu: 500m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "resources_schema")]
    pub resources: Option<ResourceRequirements>,
    /// Deadline in seconds for operations that do not set their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub active_deadline_seconds: Option<i64>,
    /// Start timeout in seconds for operations that do not set their own: how long a run's pod may fail
    /// to start (image pull, scheduling, pod creation) before the run fails. Unset: 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub start_timeout: Option<i64>,
    /// Finished operations kept per cluster (default 20); older ones are deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_limit: Option<u32>,
    /// Playbook run without `--limit` before an operation that limits its hosts, so that kubespray's fact
    /// cache holds every host; `none` turns it off. Unset: `playbooks/facts.yml`, skipped when the runner
    /// has no such file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facts_playbook: Option<String>,
}

impl RunDefaults {
    /// The facts step these defaults give an operation that limits its hosts (see
    /// [`kok_layout::spec::facts_playbook`]).
    pub fn facts(&self) -> Option<FactsPlaybook> {
        kok_layout::spec::facts_playbook(self.facts_playbook.as_deref())
    }
}

impl From<kok_layout::spec::RunDefaults> for RunDefaults {
    fn from(d: kok_layout::spec::RunDefaults) -> Self {
        RunDefaults {
            image: d.image,
            service_account: d.service_account,
            resources: d.resources.map(resource_requirements),
            active_deadline_seconds: d.active_deadline_seconds,
            start_timeout: d.start_timeout,
            history_limit: d.history_limit,
            facts_playbook: d.facts_playbook,
        }
    }
}

/// The resource requirements of resources as kok.yml or cluster.yml write them.
pub fn resource_requirements(r: kok_layout::spec::Resources) -> ResourceRequirements {
    let quantities = |m: std::collections::BTreeMap<String, String>| {
        m.into_iter()
            .map(|(k, v)| (k, k8s_openapi::apimachinery::pkg::api::resource::Quantity(v)))
            .collect()
    };
    ResourceRequirements {
        claims: None,
        limits: r.limits.map(quantities),
        requests: r.requests.map(quantities),
    }
}

/// One window, Saturdays 02:00 for 4h in Europe/Berlin, and no freeze (unit-test fixtures).
#[cfg(test)]
pub(crate) fn saturday_night_in_berlin() -> Maintenance {
    Maintenance {
        windows: vec![MaintenanceWindow {
            days: vec!["Sat".into()],
            start: "02:00".into(),
            duration: "4h".into(),
            time_zone: "Europe/Berlin".into(),
        }],
        freezes: vec![],
    }
}

/// Where a Cluster's desired state came from.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSource {
    /// Path of the cluster directory inside the repository, e.g. `clusters/prod-bj`.
    pub path: String,
    /// Revision last materialized, in the form `<branch>@sha1:<sha>`.
    pub revision: String,
}

/// Desired state of a Cluster: its current inputs and defaults, rendered from its directory in git.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "kok.dev",
    version = "v1alpha1",
    kind = "Cluster",
    plural = "clusters",
    doc = "A cluster managed by kok from one directory of the git repository: its current inventory, vars and defaults.",
    namespaced,
    status = "ClusterStatus",
    derive = "PartialEq",
    shortname = "kokcluster",
    category = "kok",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Revision","type":"string","jsonPath":".status.observedRevision"}"#,
    printcolumn = r#"{"name":"Last operation","type":"string","jsonPath":".status.lastOperation.summary"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".status.kubernetesVersion"}"#,
    printcolumn = r#"{"name":"Nodes","type":"string","jsonPath":".status.nodes.summary"}"#,
    printcolumn = r#"{"name":"Healthy","type":"string","jsonPath":".status.conditions[?(@.type==\"Healthy\")].status"}"#,
    printcolumn = r#"{"name":"Certificates","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"CertificatesValid\")].status"}"#,
    printcolumn = r#"{"name":"Expires","type":"string","priority":1,"jsonPath":".status.certificates[0].notAfter"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// Name of the cluster directory's inventory file, and its key in the hosts ConfigMap: `inventory.ini`
    /// or `hosts.yaml`; absent for `hosts.yml`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory_file: Option<String>,
    /// Content-addressed ConfigMap holding the current inventory file (hosts.yml, inventory.ini).
    pub hosts_conf_ref: ConfigMapRef,
    /// Content-addressed ConfigMap holding the current vars.yml; absent when the directory has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vars_conf_ref: Option<ConfigMapRef>,
    /// The current files of the directory's group_vars/ and host_vars/, each in a content-addressed
    /// ConfigMap of its own, in the order ansible reads them. kok names them through `varsFilesRef` and
    /// leaves this empty; a Cluster written by an earlier kok may list them here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vars_files: Vec<PinnedFile>,
    /// The shared, content-addressed ConfigMap `kok-files-<sha20>` listing the current files of
    /// group_vars/ and host_vars/ (key `files.json`: the `varsFiles` list as JSON); absent when the
    /// directory has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vars_files_ref: Option<ConfigMapRef>,
    /// Secret whose key `password` ansible-vault decrypts the cluster's vaulted variables with
    /// (`vaultPasswordSecret`); kok only checks that it exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vault_password_ref: Option<SecretRef>,
    /// Secret with the ssh private key ansible uses; kok only checks that it exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_auth_ref: Option<SecretRef>,
    /// Secret with the kubeconfig kok verifies the cluster with (key `value`), from `kubeconfigSecret`;
    /// without it, Secret `<cluster>-kubeconfig` once a run saved the cluster's admin.conf there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_secret_ref: Option<SecretRef>,
    /// Defaults for this cluster's operations, from cluster.yml over kok.yml.
    #[serde(default)]
    pub defaults: RunDefaults,
    /// Repository path and revision this spec was rendered from.
    pub source: ClusterSource,
    /// When this cluster's operations may start (`maintenance` in cluster.yml, else kok.yml); operations
    /// carry the value of the commit that created them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<Maintenance>,
    /// The Kubernetes version and kubespray release kok last gave a run of this cluster (this revision's,
    /// unless the commit created no operation that pre-flight let through; before the first run of a
    /// cluster installed outside kok, the versions `installed:` in its cluster.yml gives): what pre-flight
    /// compares the next commit's with. Absent for a cluster whose inventory is not kubespray's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<ClusterKubernetes>,
    /// Days before a certificate of the cluster expires that its `CertificatesValid` condition turns False
    /// (`certificateWindowDays` in cluster.yml, else kok.yml); absent: 30.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub certificate_window_days: Option<u32>,
}

/// What a cluster's revision asks of kubespray, as pre-flight reads it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterKubernetes {
    /// `kube_version` of the `k8s_cluster` hosts, or the release's default when no file sets it, e.g.
    /// `v1.31.4`; absent when kok cannot tell (a template, a vaulted value, hosts that disagree, a
    /// release kok has no data for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_version: Option<String>,
    /// The kubespray release the cluster's runs use: the image's tag, or `kubesprayVersion`, e.g.
    /// `v2.27.0`; absent when neither says one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubespray_release: Option<String>,
}

/// What pre-flight found about an operation when the commit that created it was reconciled.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationPreflight {
    /// `preflight: false` in operations.yml: no rule was checked, and the run's log says so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skipped: bool,
    /// The rules the run's inputs break, each refusing it: the operation fails without a Job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<PreflightFinding>,
}

/// One rule an operation's inputs break.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreflightFinding {
    /// The rule's stable id, e.g. `etcd-odd` (docs/preflight.md lists them).
    pub rule: String,
    /// The file of the repository the finding is about, relative to its root.
    pub path: String,
    /// 1-based line in that file; 0 for the file as a whole.
    #[serde(default)]
    pub line: u32,
    /// What is wrong and what to do.
    pub message: String,
}

#[cfg(test)]
impl ClusterSpec {
    /// A spec reading ConfigMaps `hosts` and `vars`, with nothing else set (unit-test fixtures).
    pub(crate) fn for_test() -> Self {
        ClusterSpec {
            inventory_file: None,
            hosts_conf_ref: ConfigMapRef { name: "hosts".into() },
            vars_conf_ref: Some(ConfigMapRef { name: "vars".into() }),
            vars_files: Vec::new(),
            vars_files_ref: None,
            vault_password_ref: None,
            ssh_auth_ref: None,
            defaults: Default::default(),
            source: Default::default(),
            kubeconfig_secret_ref: None,
            maintenance: None,
            kubernetes: None,
            certificate_window_days: None,
        }
    }
}

/// Summary of one operation, as shown on its Cluster.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationSummary {
    /// Name of the ClusterOperation.
    pub name: String,
    /// Operation id from operations.yml.
    pub id: String,
    /// Phase of the operation when the Cluster was last reconciled.
    pub phase: Phase,
    /// `<id>: <phase>`, for printer columns.
    pub summary: String,
}

/// One operation of a Cluster as `kok status` shows it: the running or next one, or the last finished.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationLine {
    /// Name of the ClusterOperation.
    pub name: String,
    /// Operation id from operations.yml.
    pub id: String,
    /// Its phase.
    pub phase: Phase,
    /// Commit it came from.
    pub commit: String,
    /// Why it waits, or what its run did (at most 255 characters).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub outcome: String,
    /// When its Job started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
}

/// Observed state of a Cluster.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// Conditions, with reasons: Ready, Reconciling and Stalled, from the cluster's Secrets and operations;
    /// Reachable, NodesReady, InventoryMatches, VersionMatches and Healthy, from the health checks of a
    /// cluster with a kubeconfig; CertificatesValid, from the certificates those checks read (absent when
    /// there is none: an API server on plain HTTP and a kubeconfig without a client certificate).
    #[serde(default)]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Revision whose content the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_revision: Option<String>,
    /// Generation of the spec the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The most recently started (or queued) operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<OperationSummary>,
    /// Number of operations per phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operations: Option<OperationCounts>,
    /// The running operation, else the next one to run with why it waits: what `kok status` shows of the
    /// queue without reading every run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_operation: Option<OperationLine>,
    /// The operation that finished last, with what its run did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_finished: Option<OperationLine>,
    /// Secret with the cluster's admin kubeconfig (key `value`), once a run left `artifacts/admin.conf`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_ref: Option<SecretRef>,
    /// The API server's version (`/version`), from the last health check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    /// The kubelet versions the Nodes report, sorted, from the last health check.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kubelet_versions: Vec<String>,
    /// Nodes Ready and in all, from the last health check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<NodeCounts>,
    /// The certificates the last health check read, the one that expires first first: the earliest of the
    /// chain the API server presents, and the client certificate of the kubeconfig where it has one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub certificates: Vec<CertificateExpiry>,
}

/// A certificate of a cluster and when it expires.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertificateExpiry {
    /// Where it was read: `apiServer` (the chain the API server presents; of its certificates, the one that
    /// expires first) or `client` (the client certificate of the cluster's kubeconfig).
    pub source: CertificateSource,
    /// Its subject's common name (CN), e.g. `kube-apiserver`; empty when it has none.
    #[serde(default)]
    pub subject: String,
    /// The end of its validity (`notAfter`), RFC 3339.
    pub not_after: Time,
}

/// Where a certificate of a cluster was read.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum CertificateSource {
    /// The certificate chain the API server presents in the TLS handshake.
    ApiServer,
    /// The client certificate (`client-certificate-data`) of the cluster's kubeconfig.
    Client,
}

/// How many of a cluster's Nodes are Ready.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeCounts {
    /// Nodes whose Ready condition is True.
    pub ready: u32,
    /// Nodes in all.
    pub total: u32,
    /// `<ready>/<total>`, for the printer column.
    pub summary: String,
}

/// Count of a cluster's operations by phase.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationCounts {
    /// Operations waiting for their turn.
    pub pending: u32,
    /// Operations whose Job is running.
    pub running: u32,
    /// Operations that finished successfully (within the history limit).
    pub succeeded: u32,
    /// Operations that failed or were canceled (within the history limit).
    pub failed: u32,
}

/// Where an operation came from in git.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationSource {
    /// Full sha of the commit that introduced this operation; its commit status goes there.
    pub commit: String,
    /// Revision in the form `<branch>@sha1:<sha>`.
    pub revision: String,
    /// Path of the cluster directory inside the repository.
    pub path: String,
}

/// What a ClusterOperation runs, where, and with which pinned inputs (from one operations.yml entry).
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[kube(
    group = "kok.dev",
    version = "v1alpha1",
    kind = "ClusterOperation",
    plural = "clusteroperations",
    doc = "One run of an operation from a cluster's operations.yml, with its inputs pinned to the commit that created it.",
    namespaced,
    status = "ClusterOperationStatus",
    derive = "PartialEq",
    shortname = "clusterops",
    shortname = "clusterop",
    category = "kok",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.cluster"}"#,
    printcolumn = r#"{"name":"Action","type":"string","jsonPath":".spec.action"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Started","type":"date","jsonPath":".status.startTime"}"#,
    printcolumn = r#"{"name":"Duration","type":"string","jsonPath":".status.duration"}"#,
    printcolumn = r#"{"name":"Commit","type":"string","jsonPath":".spec.source.commit"}"#,
    printcolumn = r#"{"name":"Result","type":"string","priority":1,"jsonPath":".status.result"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self == oldSelf").message("spec is immutable: an edited operation is a new run"))]
pub struct ClusterOperationSpec {
    /// Name of the Cluster (and cluster directory) this operation runs on.
    #[schemars(length(min = 1, max = 40), pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub cluster: String,
    /// Operation id from operations.yml.
    #[schemars(length(min = 1, max = 30), pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub id: String,
    /// sha256 (hex) of the canonical JSON of the operations.yml entry; part of the run's identity.
    pub digest: String,
    /// Playbook path: a file of the repository (from the directory holding kok.yml, see `repositoryFiles`), else
    /// a path inside the runner image; or a script for `type: shell`, found the same way.
    pub action: String,
    /// `playbook` (default) or `shell`.
    #[serde(rename = "type", default)]
    pub action_type: ActionType,
    /// Arguments appended to the command line, never interpreted by a shell.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<String>,
    /// Runner image, resolved from the operation, cluster.yml, kok.yml or the default.
    pub image: String,
    /// Steps run before the action in the same pod; the first failure stops the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_hooks: Vec<Hook>,
    /// Steps run after a successful action in the same pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_hooks: Vec<Hook>,
    /// Playbook run first, without `--limit`, in the same pod: set when a playbook step limits its hosts
    /// (`--limit`, `-l`), from `factsPlaybook` in cluster.yml or kok.yml, so kubespray's fact cache holds
    /// the hosts the limit leaves out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facts_playbook: Option<FactsPlaybook>,
    /// Deadline of the Job in seconds; the Job fails with DeadlineExceeded past it. Unset: 43200 (12 hours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub active_deadline_seconds: Option<i64>,
    /// Seconds the Job's pod may fail to start (image pull, scheduling, pod creation) before the run fails
    /// with the reason and its Job is deleted. Unset: 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub start_timeout: Option<i64>,
    /// ServiceAccount the Job's pod runs as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<String>,
    /// Compute resources of the runner container (`requests` and `limits`, e.g. `cpu: 500m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "resources_schema")]
    pub resources: Option<Box<ResourceRequirements>>,
    /// Name of the inventory file pinned by the commit that created this run, and its key in the hosts
    /// ConfigMap: `inventory.ini` or `hosts.yaml`; absent for `hosts.yml`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory_file: Option<String>,
    /// ConfigMap with the inventory file (hosts.yml, inventory.ini) pinned by the commit that created this run.
    pub hosts_conf_ref: ConfigMapRef,
    /// ConfigMap with the vars.yml pinned by the commit that created this run; absent when it had none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vars_conf_ref: Option<ConfigMapRef>,
    /// The files of group_vars/ and host_vars/ pinned by the commit that created this run, each in a
    /// content-addressed ConfigMap of its own, laid out at their paths beside the inventory file. kok names
    /// them through `varsFilesRef` and leaves this empty; a run created by an earlier kok may list them here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vars_files: Vec<PinnedFile>,
    /// The shared, content-addressed ConfigMap `kok-files-<sha20>` listing the files of group_vars/ and
    /// host_vars/ pinned by the commit that created this run (key `files.json`: the `varsFiles` list as
    /// JSON), so that the runs of a fleet name one object instead of every file; absent when it had none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vars_files_ref: Option<ConfigMapRef>,
    /// The files of the repository that its playbooks kept in the repository need (an action or hook that is a
    /// file of the commit's tree, from the directory holding kok.yml), pinned by the commit that created this
    /// run, each in a content-addressed ConfigMap of its own: the file and the directory it is in (at the top,
    /// the file, ansible.cfg and the directories ansible reads beside a playbook). The Job lays them out at
    /// their paths and runs those steps from there; any other action is a path inside the runner image.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repository_files: Vec<PinnedFile>,
    /// Secret whose key `password` is given to ansible as `--vault-password-file` (`vaultPasswordSecret`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vault_password_ref: Option<SecretRef>,
    /// Secret with the ssh private key, mounted at /auth/ssh-privatekey.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_auth_ref: Option<SecretRef>,
    /// Commit, revision and path this run came from.
    pub source: OperationSource,
    /// Sort key of this run in its cluster's queue: commit order, then file order. kok sets it when it
    /// creates the run; `kok render` leaves it out, and a run without one queues first, by name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub queue_position: String,
    /// Cron expression from operations.yml; the operation runs again at each firing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// For a scheduled run: the firing time (RFC 3339) it was created for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_time: Option<String>,
    /// What a failure of this run does to the cluster's later operations: `hold` (default) keeps them
    /// Queued until a rerun succeeds or the entry is removed; `continue` lets them go on.
    #[serde(default, skip_serializing_if = "OnFailure::is_hold")]
    pub on_failure: OnFailure,
    /// How much of the workload cluster kok verifies once the Job succeeded, before it reports success:
    /// `full` (default: API server, Nodes Ready, Nodes = inventory, kubelet versions, kube-system
    /// workloads), `reachable` (the API server answers) or `none`.
    #[serde(default, skip_serializing_if = "Verify::is_full")]
    pub verify: Verify,
    /// How long the verification retries before the operation fails, e.g. `10m` (the default), `90s`, `1h`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_timeout: Option<String>,
    /// The cluster's maintenance windows and freezes as of the commit that created this run: it starts
    /// only inside a window and outside every freeze (unless `ignoreMaintenance`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<Maintenance>,
    /// `ignoreMaintenance: true` in operations.yml: an emergency that starts outside the windows and in a
    /// freeze; its status says so when it did.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_maintenance: bool,
    /// Set when the operation is one cluster's run of a rollout (`rollouts/<name>.yml`), not an entry of
    /// its operations.yml: it starts only when its wave of the rollout opens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<OperationRollout>,
    /// What kubespray's pre-flight rules found about the inputs this run pins; a finding refuses the run
    /// (Failed without a Job). Absent when every rule holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight: Option<OperationPreflight>,
}

/// `verifyTimeout` when an operation does not set one.
pub const DEFAULT_VERIFY_TIMEOUT: &str = "10m";

/// Where a verification of the workload cluster stands.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum VerificationState {
    /// The Job succeeded; kok checks the cluster until every check holds or `verifyTimeout` passes.
    #[default]
    Verifying,
    /// Every check held.
    Passed,
    /// A check still failed when `verifyTimeout` passed, or the cluster cannot be reached as configured.
    Failed,
    /// Not verified: the cluster has no kubeconfig yet.
    Skipped,
}

/// One check of a verification and what it found.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckResult {
    /// `Reachable`, `NodesReady`, `InventoryMatches`, `VersionMatches` or `WorkloadsAvailable`.
    pub name: String,
    /// Whether the check held.
    pub passed: bool,
    /// What it found, e.g. `5/5 nodes Ready` or `node7 is in hosts.yml but not a node of the cluster`.
    pub message: String,
}

/// The verification of the workload cluster after a successful Job.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Verification {
    /// Verifying, Passed, Failed or Skipped.
    pub state: VerificationState,
    /// When the verification began; with `verifyTimeout` it bounds the retries, across restarts of kok.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// The outcome in one line: `verified: 5/5 nodes Ready, v1.31.4`, or what still fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Each check's latest result.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<CheckResult>,
}

/// Task results of one host in a run, as ansible counts them.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostCounts {
    /// Tasks that ran without change.
    #[serde(default)]
    pub ok: u32,
    /// Tasks that changed something.
    #[serde(default)]
    pub changed: u32,
    /// Tasks that failed.
    #[serde(default)]
    pub failed: u32,
    /// Times the host could not be reached.
    #[serde(default)]
    pub unreachable: u32,
    /// Tasks skipped.
    #[serde(default)]
    pub skipped: u32,
}

impl HostCounts {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &HostCounts) {
        self.ok += other.ok;
        self.changed += other.changed;
        self.failed += other.failed;
        self.unreachable += other.unreachable;
        self.skipped += other.skipped;
    }
}

/// What ansible reported about a run: counts per host, summed over the hooks and the action.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    /// Counts per host (may leave hosts out when the run had too many to fit a termination message).
    #[serde(default)]
    pub hosts: std::collections::BTreeMap<String, HostCounts>,
    /// Counts over every host.
    #[serde(default)]
    pub total: HostCounts,
    /// Number of hosts the run touched.
    #[serde(default)]
    pub host_count: u32,
}

/// The first thing that went wrong in a run.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunFailure {
    /// The step of the pod that failed: `action: cluster.yml`, `pre-hook 1/2: ping.yml`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// The play the failed task belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub play: Option<String>,
    /// The task that failed, as ansible names it (`role : task`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// The host it failed on, or that could not be reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// True when the host could not be reached.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unreachable: bool,
    /// ansible's message, or for a failure before ansible ran a task, the error line of its output.
    pub message: String,
}

/// Life-cycle phase of a ClusterOperation.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum Phase {
    /// Created, not yet considered by the controller.
    #[default]
    Pending,
    /// Waiting for an earlier operation of the same cluster, a Job slot or its Secret.
    Queued,
    /// Its Job exists and has not finished.
    Running,
    /// The Job completed.
    Succeeded,
    /// The Job failed, hit its deadline, or was deleted while running.
    Failed,
    /// Removed from operations.yml before it started.
    Canceled,
}

impl Phase {
    /// Succeeded, Failed and Canceled never change again.
    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed | Phase::Canceled)
    }

    /// The spelling used in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Queued => "Queued",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
            Phase::Canceled => "Canceled",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// State of a commit status, in kok's own terms; each sink maps it to its forge's words.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StatusState {
    /// Queued, not started.
    Pending,
    /// Running (GitHub and Gitea show pending; GitLab shows running).
    Running,
    /// Finished successfully.
    Success,
    /// Failed or canceled.
    Failure,
    /// The input was invalid.
    Error,
}

/// A commit status, as desired or as last delivered.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommitStatus {
    /// Status context, e.g. `kok/prod-bj/add-node7`.
    pub context: String,
    /// State of the status.
    pub state: StatusState,
    /// Human-readable description.
    pub description: String,
    /// Link shown with the status: `--status-url` filled in, or with `--web-url` the status's page in the
    /// web view.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_url: Option<String>,
    /// What ansible reported about the run, whole: kept in the git notes (and `kok history --output json`);
    /// forges get the description only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunRecord>,
}

/// A run's identity, and once it finished its summary and first failure, as recorded with its commit
/// status.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    /// Which run this is and, once it finished, how and when: enough to restore it without running it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<OperationRecord>,
    /// Task results per host and in total.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<RunSummary>,
    /// The first failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<RunFailure>,
}

/// The identity of a run and its outcome, in the record kept in git (never a secret).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationRecord {
    /// Name of the ClusterOperation.
    pub name: String,
    /// sha256 (hex) of the operations.yml entry: the run's identity with its cluster and id.
    pub digest: String,
    /// The terminal phase, once the run finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// When the run started (RFC 3339), once it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// When the run finished (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<String>,
    /// Why the run is in its phase, once it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl OperationRecord {
    /// The record of `op` in `phase`: its identity, and once `phase` is terminal the times its status
    /// holds and `message`.
    pub fn of(op: &ClusterOperation, phase: Phase, message: Option<&str>) -> OperationRecord {
        let finished = op.status.as_ref().filter(|_| phase.is_terminal());
        let time = |t: Option<&Time>| t.map(|t| t.0.to_string());
        OperationRecord {
            name: op.metadata.name.clone().unwrap_or_default(),
            digest: op.spec.digest.clone(),
            phase: phase.is_terminal().then_some(phase),
            start_time: time(finished.and_then(|s| s.start_time.as_ref())),
            end_time: time(finished.and_then(|s| s.end_time.as_ref())),
            message: message.filter(|_| phase.is_terminal()).map(str::to_string),
        }
    }
}

/// A status read back from the record in git (the notes, or a forge), for a run the meta-cluster has no
/// object of: what [`ANNOTATION_RECORDED`] holds.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Recorded {
    /// Where it was read: `git-notes`, `github`, `gitlab` or `gitea`.
    pub from: String,
    /// When the status was written (RFC 3339), as the record says; empty when it does not.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub time: String,
    /// The status as recorded.
    pub status: CommitStatus,
}

impl CommitStatus {
    /// The digest `status.reportedDigest` records a delivered status by: the first 16 hex characters of
    /// the sha256 of its JSON.
    pub fn digest(&self) -> String {
        use sha2::Digest as _;
        let json = serde_json::to_vec(self).unwrap_or_default();
        hex::encode(&sha2::Sha256::digest(&json)[..8])
    }
}

impl ClusterOperationStatus {
    /// True when `status` is the one last delivered: its digest is `reportedDigest`, or an earlier kok
    /// recorded it in full as `reported`.
    pub fn has_reported(&self, status: &CommitStatus) -> bool {
        self.reported_digest.as_deref() == Some(status.digest().as_str())
            || self.reported.as_deref() == Some(status)
    }
}

/// Observed state of a ClusterOperation.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterOperationStatus {
    /// Pending, Queued, Running, Succeeded, Failed or Canceled.
    #[serde(default)]
    pub phase: Phase,
    /// Name of the Job running this operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_ref: Option<String>,
    /// When the Job started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the operation reached a terminal phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    /// Wall time from start to end, e.g. `3m12s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// Why the operation is in its phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The commit status that should be on the source commit now, when it is not the one this status
    /// implies: a run restored from the record in git, or canceled. Otherwise kok stores none and the
    /// reporter computes it from the phase, message, times, summary and verification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_status: Option<Box<CommitStatus>>,
    /// The commit status last delivered to the sink, as an earlier kok recorded it (in full); kok now
    /// records `reportedDigest` and removes this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported: Option<Box<CommitStatus>>,
    /// The digest of the commit status last delivered to the sinks; a status whose digest this is is
    /// never sent twice. Not written for a status only the git notes take (a queued or running run
    /// without a forge, or of a commit above `--status-max-contexts`): the note on the commit is its
    /// record, read back after a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_digest: Option<String>,
    /// Delivery attempts of the desired status that failed so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_attempts: Option<u32>,
    /// What ansible reported: task results per host, from the Job's termination message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Box<RunSummary>>,
    /// The first failure of the run: step, task, host and message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Box<RunFailure>>,
    /// The outcome in one line, as the commit status says it: `failed at TASK [...] on node2: ...`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// The Secret this run saved a new admin kubeconfig to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<String>,
    /// Set once the hold of this failed operation on its cluster's queue was lifted by removing its entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_released: Option<String>,
    /// The verification of the workload cluster after the Job succeeded: state and each check's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<Box<Verification>>,
}

/// The CustomResourceDefinitions of kok, in a stable order (Cluster, ClusterOperation, FleetRollout).
///
/// The schemas are the derived ones with OpenAPI formats Kubernetes does not know (`uint32`, ...)
/// removed, so installing them raises no "unrecognized format" warnings; `minimum: 0` stays.
pub fn crds() -> Vec<CustomResourceDefinition> {
    use kube::CustomResourceExt;
    let mut crds = vec![Cluster::crd(), ClusterOperation::crd(), FleetRollout::crd()];
    for crd in &mut crds {
        for version in &mut crd.spec.versions {
            if let Some(schema) = version
                .schema
                .as_mut()
                .and_then(|v| v.open_api_v3_schema.as_mut())
            {
                strip_unknown_formats(schema);
            }
        }
    }
    crds
}

/// Integer and number formats the Kubernetes API server recognizes; others are dropped from CRDs.
const KNOWN_NUMERIC_FORMATS: [&str; 4] = ["int32", "int64", "float", "double"];

fn strip_unknown_formats(schema: &mut JSONSchemaProps) {
    let numeric = matches!(schema.type_.as_deref(), Some("integer" | "number"));
    if numeric
        && schema
            .format
            .as_deref()
            .is_some_and(|f| !KNOWN_NUMERIC_FORMATS.contains(&f))
    {
        schema.format = None;
    }
    for child in schema.properties.iter_mut().flat_map(|p| p.values_mut()) {
        strip_unknown_formats(child);
    }
    match schema.items.as_mut() {
        Some(JSONSchemaPropsOrArray::Schema(child)) => strip_unknown_formats(child),
        Some(JSONSchemaPropsOrArray::Schemas(children)) => {
            children.iter_mut().for_each(strip_unknown_formats)
        }
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(child)) = schema.additional_properties.as_mut() {
        strip_unknown_formats(child);
    }
}

/// Schema of `resources`: `requests` and `limits` maps of quantities, without the long upstream docs.
fn resources_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let quantities = |what: &str| {
        serde_json::json!({
            "type": "object",
            "description": what,
            "additionalProperties": {
                "description": "A quantity such as `500m`, `2`, or `4Gi`.",
                "x-kubernetes-int-or-string": true
            }
        })
    };
    schemars::json_schema!({
        "type": "object",
        "nullable": true,
        "properties": {
            "limits": quantities("Most of each resource the container may use, e.g. `cpu: \"2\"`, `memory: 4Gi`."),
            "requests": quantities("Resources reserved for the container, e.g. `cpu: 500m`, `memory: 1Gi`.")
        }
    })
}

/// Schema of `conditions`: the standard Condition list, a map keyed by `type` for server-side apply.
fn conditions_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<Vec<Condition>>();
    schema.insert("x-kubernetes-list-type".into(), "map".into());
    schema.insert("x-kubernetes-list-map-keys".into(), serde_json::json!(["type"]));
    schema
}
