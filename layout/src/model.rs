//! Typed model of the repository contract: what a parsed and validated cluster directory holds.

use crate::spec::{ActionType, Hook, RunDefaults};

/// Severity of a [`Diagnostic`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Refuses the cluster: nothing of it is materialized.
    Error,
    /// Reported, but the cluster is still valid.
    Warning,
}

/// One problem found in the repository, located in a file.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Diagnostic {
    /// Path relative to the repository root, e.g. `clusters/prod-bj/hosts.yml`.
    pub path: String,
    /// 1-based line; 0 when the problem is about the file or directory as a whole.
    pub line: usize,
    /// 1-based column; 0 when unknown.
    pub column: usize,
    /// Error or warning.
    pub severity: Severity,
    /// What is wrong and what to do about it.
    pub message: String,
    /// Cluster directory name the problem belongs to; `None` for repo-wide files (kok.yml).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
}

impl Diagnostic {
    /// Where the problem is in its file and what it is, without the path: `line:col: message`.
    pub fn at(&self) -> String {
        format!("{}:{}: {}", self.line, self.column, self.message)
    }
}

impl std::fmt::Display for Diagnostic {
    /// `path:line:col: message`, with `warning: ` before warnings.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}: ", self.path, self.line, self.column)?;
        if self.severity == Severity::Warning {
            f.write_str("warning: ")?;
        }
        f.write_str(&self.message)
    }
}

/// Settings from cluster.yml merged over kok.yml (cluster.yml wins per key).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Settings {
    /// Name of an existing `kubernetes.io/ssh-auth` Secret in kok's namespace.
    pub ssh_auth_secret: Option<String>,
    /// Name of a Secret in kok's namespace holding the cluster's kubeconfig (key `value`) for verification.
    pub kubeconfig_secret: Option<String>,
    /// Name of a Secret in kok's namespace whose key `password` is the ansible-vault password.
    pub vault_password_secret: Option<String>,
    /// `kubesprayVersion`: the kubespray release of an image whose tag does not say it (`v2.27.0`).
    pub kubespray_version: Option<String>,
    /// Defaults for the cluster's operations.
    pub defaults: RunDefaults,
    /// Kubernetes labels copied onto the Cluster object (kok.yml's and cluster.yml's, merged per label key).
    pub labels: std::collections::BTreeMap<String, String>,
    /// When the cluster's operations may start: windows and freezes (cluster.yml's replaces kok.yml's).
    pub maintenance: Option<crate::spec::Maintenance>,
    /// kok.yml's `notifications:` receivers (never a cluster's: see [`super::notifications`]).
    pub notifications: Vec<super::notifications::Receiver>,
    /// Where the `image` in effect is written (cluster.yml or kok.yml); `None` when neither sets it.
    pub image_at: Option<WrittenAt>,
    /// Where the `kubesprayVersion` in effect is written; `None` when neither file sets it.
    pub kubespray_version_at: Option<WrittenAt>,
    /// `installed:` of cluster.yml (never kok.yml's): the cluster was installed outside kok and runs
    /// already; `None` when not said (kok decides from what it saw).
    pub installed: Option<Installed>,
    /// `certificateWindowDays`: days before a certificate of the cluster expires that `CertificatesValid`
    /// turns False (`None`: kok's default).
    pub certificate_window_days: Option<u32>,
}

/// A cluster installed outside kok (by hand with kubespray), which kok adopts: pre-flight counts it as
/// installed from its first commit, and compares the versions given here with the ones the commit asks
/// for until kok has its own record of the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Installed {
    /// Where `installed` is written.
    pub at: WrittenAt,
    /// `kubeVersion`: the Kubernetes version the cluster runs (`v1.30.4`), and where it is written; `None`:
    /// the inventory's `kube_version`.
    pub kube_version: Option<(String, WrittenAt)>,
    /// `kubesprayVersion`: the kubespray release that installed it (`v2.26.0`), and where it is written;
    /// `None`: not known (the release step is not checked).
    pub kubespray_version: Option<(String, WrittenAt)>,
}

/// Where a setting is written: a file of the repository and a line in it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WrittenAt {
    /// Path relative to the repository root, e.g. `clusters/prod-bj/cluster.yml` or `kok.yml`.
    pub path: String,
    /// 1-based line of the setting's value.
    pub line: usize,
}

/// One entry of operations.yml, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct Operation {
    /// Unique id in the file (DNS-1123 label, at most 30 characters).
    pub id: String,
    /// Playbook path or script.
    pub action: String,
    /// Playbook or shell.
    pub action_type: ActionType,
    /// Argument vector appended to the command.
    pub extra_args: Vec<String>,
    /// Image override.
    pub image: Option<String>,
    /// Steps before the action.
    pub pre_hooks: Vec<Hook>,
    /// Steps after the action.
    pub post_hooks: Vec<Hook>,
    /// Deadline override in seconds (> 0).
    pub active_deadline_seconds: Option<i64>,
    /// Start timeout override in seconds (> 0): how long the run's pod may fail to start.
    pub start_timeout: Option<i64>,
    /// Cron expression (6 fields, seconds first).
    pub schedule: Option<String>,
    /// Counter; bumping it changes the digest and so makes a new run.
    pub rerun: Option<u64>,
    /// Whether a failure holds the cluster's later operations (`hold`, the default) or not (`continue`).
    pub on_failure: crate::spec::OnFailure,
    /// How much of the cluster is verified after the Job succeeded (`full` by default).
    pub verify: crate::spec::Verify,
    /// How long verification retries, as written (e.g. `10m`); validated by [`super::duration_seconds`].
    pub verify_timeout: Option<String>,
    /// `ignoreMaintenance: true`: starts outside the cluster's maintenance windows and in its freezes.
    pub ignore_maintenance: bool,
    /// `preflight: false`: kubespray's pre-flight rules are not checked for this operation.
    pub preflight: bool,
    /// `allowReleaseSkip: true`: the operation may move the cluster over a kubespray minor release.
    pub allow_release_skip: bool,
    /// The entry exactly as written, as JSON; its canonical form is hashed into the digest.
    pub entry: serde_json::Value,
    /// 1-based line of the entry in operations.yml.
    pub line: usize,
    /// 0-based position of the entry in operations.yml (file order).
    pub index: usize,
}

impl Operation {
    /// The entry `{id, action}` (a playbook, nothing else set) as operations.yml would give it at
    /// position `index`.
    pub fn playbook(id: &str, action: &str, index: usize) -> Operation {
        Operation {
            id: id.into(),
            action: action.into(),
            action_type: ActionType::Playbook,
            extra_args: vec![],
            image: None,
            pre_hooks: vec![],
            post_hooks: vec![],
            active_deadline_seconds: None,
            start_timeout: None,
            schedule: None,
            rerun: None,
            on_failure: Default::default(),
            verify: Default::default(),
            verify_timeout: None,
            ignore_maintenance: false,
            preflight: true,
            allow_release_skip: false,
            entry: serde_json::json!({"id": id, "action": action}),
            line: 1 + index * 2,
            index,
        }
    }
}

/// An ansible inventory as far as kok needs to understand it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inventory {
    /// Every host name defined anywhere in the inventory, sorted.
    pub hosts: std::collections::BTreeSet<String>,
    /// Every group name (including `all`), sorted.
    pub groups: std::collections::BTreeSet<String>,
    /// The hosts listed directly under each group's `hosts`.
    pub members: std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
    /// The child groups of each group.
    pub children: std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
    /// The addresses a host's variables give it, wherever it is listed (`ip`, `access_ip` and
    /// `ansible_host`), in the order found, without repeats.
    pub addresses: std::collections::BTreeMap<String, Vec<String>>,
}

impl Inventory {
    /// The hosts of `group`, its child groups resolved (a cycle, refused by validation, ends the walk).
    pub fn hosts_of(&self, group: &str) -> std::collections::BTreeSet<String> {
        if group == "all" {
            return self.hosts.clone();
        }
        let mut hosts = std::collections::BTreeSet::new();
        let mut seen = std::collections::BTreeSet::new();
        let mut todo = vec![group];
        while let Some(g) = todo.pop() {
            if !seen.insert(g) {
                continue;
            }
            hosts.extend(self.members.get(g).into_iter().flatten().cloned());
            todo.extend(self.children.get(g).into_iter().flatten().map(String::as_str));
        }
        hosts
    }
}

/// The files of a cluster directory that ansible reads as its inventory directory, as a revision pinned them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InventoryDir {
    /// The inventory file's name: `hosts.yml`, `hosts.yaml` or `inventory.ini`.
    pub inventory_file: String,
    /// The inventory file byte for byte.
    pub hosts_yml: String,
    /// vars.yml (the group variables of `all`), when there is one.
    pub vars_yml: Option<String>,
    /// The files of group_vars/ and host_vars/ by path inside the directory, sorted by path.
    pub vars_files: Vec<(String, String)>,
}

impl InventoryDir {
    /// kok's short layout: `hosts.yml` and `vars.yml`, nothing else.
    pub fn short(hosts_yml: &str, vars_yml: &str) -> InventoryDir {
        InventoryDir {
            inventory_file: super::HOSTS_YML.to_string(),
            hosts_yml: hosts_yml.to_string(),
            vars_yml: Some(vars_yml.to_string()),
            vars_files: Vec::new(),
        }
    }
}

/// A cluster directory that passed validation.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterDir {
    /// Directory name = cluster name (DNS-1123 label, at most 40 characters).
    pub name: String,
    /// Directory path relative to the repository root, e.g. `clusters/prod-bj`.
    pub path: String,
    /// The files ansible reads as the directory's inventory: the inventory file, vars.yml (kok's shorthand
    /// for `group_vars/all.yml`) and the files of group_vars/ and host_vars/, byte for byte.
    pub inventory_dir: InventoryDir,
    /// What the inventory defines.
    pub inventory: Inventory,
    /// operations.yml entries in file order (empty when the file is absent).
    pub operations: Vec<Operation>,
    /// cluster.yml merged over kok.yml.
    pub settings: Settings,
    /// What kubespray's roles see of the inventory, resolved when the directory was validated; `None` for a
    /// directory built otherwise (see [`ClusterDir::kubespray_view`]).
    pub kubespray: Option<super::KubesprayView>,
    /// The files of the repository that its operations' steps kept in the repository need, byte for byte, by
    /// path from the directory holding kok.yml ([`super::playbooks`]); empty when every step is a path in the
    /// runner image.
    pub repository_files: std::collections::BTreeMap<String, Vec<u8>>,
}

impl ClusterDir {
    /// What kubespray's roles see of the inventory: the one validation resolved, else resolved now (empty
    /// when ansible would refuse the directory).
    pub fn kubespray_view(&self) -> std::borrow::Cow<'_, super::KubesprayView> {
        match &self.kubespray {
            Some(view) => std::borrow::Cow::Borrowed(view),
            None => std::borrow::Cow::Owned(self.inventory_dir.kubespray_view().unwrap_or_default()),
        }
    }

    /// The path of `action` from the directory holding kok.yml when it is a file of the commit's tree (a step
    /// kept in the repository, run from the pinned files); `None` when it is a path inside the runner image.
    pub fn repository_step<'a>(&self, action: &'a str) -> Option<&'a str> {
        super::playbooks::repository_path(action).filter(|path| self.repository_files.contains_key(*path))
    }
}

/// The result of parsing a repository: valid clusters, and every problem found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parsed {
    /// Clusters without errors, sorted by name.
    pub clusters: Vec<ClusterDir>,
    /// Names of cluster directories that had errors (and so materialize nothing), sorted.
    pub invalid: Vec<String>,
    /// Errors and warnings, sorted by path, line and column.
    pub diagnostics: Vec<Diagnostic>,
    /// Valid `rollouts/<name>.yml` files (read by [`super::parse_repo`] only), sorted by name.
    pub rollouts: Vec<super::rollouts::Rollout>,
}

impl Parsed {
    /// True when at least one diagnostic is an error.
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(|d| d.severity == Severity::Error)
    }
}
