//! The values of the repository contract that kok's objects carry as they are written in git: how an
//! operation runs (action type, hooks, verification, what a failure does), maintenance windows, the facts
//! playbook, and the names kok's objects and inventories share. kok's API types re-export them.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Standard label naming the tool that manages an object.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// Value of [`LABEL_MANAGED_BY`] on everything kok writes.
pub const MANAGED_BY: &str = "kok";

/// Where vars.yml lies in an inventory directory beside hosts.yml: the group variables of `all`. The Job
/// mounts it there under `/conf` and copies it there in the writable inventory, so ansible reads it as
/// kubespray's `group_vars/all` and every host variable of hosts.yml outranks it (never `-e @vars.yml`).
pub const VARS_INVENTORY_PATH: &str = "group_vars/all.yml";

/// The facts playbook a run that limits its hosts gets when kok.yml and cluster.yml name none: kubespray's.
pub const DEFAULT_FACTS_PLAYBOOK: &str = "playbooks/facts.yml";

/// The `factsPlaybook` value that turns the facts step off (`false` in YAML means the same).
pub const FACTS_PLAYBOOK_NONE: &str = "none";

/// The playbook a run executes first, without `--limit`, because one of its playbook steps limits its hosts.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FactsPlaybook {
    /// Playbook path in the runner's working directory, e.g. `playbooks/facts.yml`.
    #[schemars(length(min = 1))]
    pub path: String,
    /// True for kok's default (no `factsPlaybook` in kok.yml or cluster.yml): a runner without the file
    /// skips the step with a line in the log. False when configured: a missing file fails the step.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

/// When a cluster's operations may start: inside one of its windows (any time when it lists none), never
/// inside a freeze. A running Job is never stopped when a window closes or a freeze begins.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Maintenance {
    /// Recurring windows; an operation starts only inside one of them. None listed: any time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<MaintenanceWindow>,
    /// Periods in which no operation starts, whatever the windows say.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub freezes: Vec<MaintenanceFreeze>,
}

/// A weekly maintenance window, in local time of its time zone (daylight-saving changes included).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceWindow {
    /// Days of the week the window opens on (`Mon` ... `Sun`), in its time zone; empty: every day.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub days: Vec<String>,
    /// Local time the window opens, `HH:MM` (24-hour clock). A time a daylight-saving change skips opens
    /// it at the same offset after the change (02:30 becomes 03:30).
    #[schemars(pattern(r"^([01][0-9]|2[0-3]):[0-5][0-9]$"))]
    pub start: String,
    /// How long the window stays open, e.g. `4h`, `90m`, `1h30m`, at most `7d` (elapsed time).
    pub duration: String,
    /// IANA time zone of `days` and `start`, e.g. `Europe/Berlin`.
    pub time_zone: String,
}

/// A period in which none of the cluster's operations starts, from 00:00 of `from` to 00:00 of `to`.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceFreeze {
    /// First frozen day, `YYYY-MM-DD`, from 00:00 in `timeZone`.
    pub from: String,
    /// The day operations may start again, `YYYY-MM-DD`, from 00:00 in `timeZone`.
    pub to: String,
    /// IANA time zone of `from` and `to`, e.g. `Europe/Berlin`.
    pub time_zone: String,
    /// Why, shown while an operation waits: `frozen until 2027-01-04 (year-end)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// How an operation's action is run.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ActionType {
    /// `ansible-playbook` runs the action as a playbook.
    #[default]
    Playbook,
    /// A script file of the working directory, run with `/bin/sh`; or else a program on `PATH` (`ansible`).
    Shell,
}

impl ActionType {
    /// The spelling used in operations.yml.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionType::Playbook => "playbook",
            ActionType::Shell => "shell",
        }
    }
}

/// A step run before or after an operation's action, in the same pod.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Hook {
    /// Playbook path: a file of the repository (from the directory holding kok.yml, see `repositoryFiles`), else
    /// a path inside the runner image; or a script for `type: shell`, found the same way.
    pub action: String,
    /// `playbook` (default) or `shell`.
    #[serde(rename = "type", default)]
    pub action_type: ActionType,
    /// Arguments appended to the command line, never interpreted by a shell.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<String>,
}

/// How much of the workload cluster kok verifies after an operation's Job succeeded.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Verify {
    /// Every check: API server, Nodes Ready, Nodes = inventory, kubelet versions, kube-system workloads.
    #[default]
    Full,
    /// Only that the API server answers.
    Reachable,
    /// No verification (e.g. for `reset.yml`).
    None,
}

impl Verify {
    /// True for the default, [`Verify::Full`].
    pub fn is_full(&self) -> bool {
        *self == Verify::Full
    }

    /// The spelling used in operations.yml.
    pub fn as_str(self) -> &'static str {
        match self {
            Verify::Full => "full",
            Verify::Reachable => "reachable",
            Verify::None => "none",
        }
    }
}

/// What a failed operation does to the later operations of its cluster.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    /// Later operations stay Queued until a run of the same entry succeeds or the entry is removed.
    #[default]
    Hold,
    /// Later operations go on (for read-only or reporting operations).
    Continue,
}

impl OnFailure {
    /// True for the default, [`OnFailure::Hold`].
    pub fn is_hold(&self) -> bool {
        *self == OnFailure::Hold
    }

    /// The spelling used in operations.yml.
    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::Hold => "hold",
            OnFailure::Continue => "continue",
        }
    }
}

/// Compute resources of the runner container as kok.yml or cluster.yml write them: quantities by resource
/// name (`cpu: 500m`, `memory: 1Gi`), each checked with [`crate::is_quantity`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    /// What the container is guaranteed.
    pub requests: Option<BTreeMap<String, String>>,
    /// The most it may use.
    pub limits: Option<BTreeMap<String, String>>,
}

/// Defaults applied to every operation of a cluster, from cluster.yml over kok.yml, as written there.
/// kok's Cluster carries them (with the resources as Kubernetes resource requirements).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunDefaults {
    /// Runner image used by operations that do not name one.
    pub image: Option<String>,
    /// ServiceAccount the Job's pod runs as.
    pub service_account: Option<String>,
    /// Compute resources of the runner container.
    pub resources: Option<Resources>,
    /// Deadline in seconds for operations that do not set their own.
    pub active_deadline_seconds: Option<i64>,
    /// Start timeout in seconds for operations that do not set their own.
    pub start_timeout: Option<i64>,
    /// Finished operations kept per cluster (default 20).
    pub history_limit: Option<u32>,
    /// Playbook run without `--limit` before an operation that limits its hosts; `none` turns it off.
    pub facts_playbook: Option<String>,
}

impl RunDefaults {
    /// The facts step these defaults give an operation that limits its hosts (see [`facts_playbook`]).
    pub fn facts(&self) -> Option<FactsPlaybook> {
        facts_playbook(self.facts_playbook.as_deref())
    }
}

/// The facts step of a `factsPlaybook` setting: the configured playbook (required), none when turned off,
/// else [`DEFAULT_FACTS_PLAYBOOK`] (optional).
pub fn facts_playbook(setting: Option<&str>) -> Option<FactsPlaybook> {
    match setting {
        None => Some(FactsPlaybook {
            path: DEFAULT_FACTS_PLAYBOOK.to_string(),
            optional: true,
        }),
        Some(FACTS_PLAYBOOK_NONE) => None,
        Some(path) => Some(FactsPlaybook {
            path: path.to_string(),
            optional: false,
        }),
    }
}
