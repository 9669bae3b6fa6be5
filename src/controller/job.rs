//! The Job that runs one ClusterOperation, and its entry script: pure functions from the operation to objects.
//!
//! The container runs `/bin/sh -c <entry script>`. The script quotes every argument from the repository, runs
//! the facts playbook (when the operation has one), pre-hooks, the action and post-hooks in order and stops at
//! the first failure. A playbook step runs
//! `ansible-playbook -i $KOK_INVENTORY/hosts.yml [--private-key ...] -b <action> <extraArgs...>`;
//! a `shell` step runs `/bin/sh <action> <extraArgs...>` when the action is a script file of the working
//! directory, else `<action> <extraArgs...>`: a program on the image's `PATH`, such as `ansible`.
//!
//! Steps kept in the repository: a step whose action is among the operation's pinned repository files
//! (`repositoryFiles`, [`crate::layout::playbooks`]) runs from them, not from the image. Those files are mounted
//! read-only at [`REPOSITORY_DIR`]; the script copies them into a private work directory (`KOK_REPOSITORY`) and
//! runs the step there, `(cd "$KOK_REPOSITORY" && ansible-playbook ... 'playbooks/hello.yml')`, as a checkout
//! of the commit would. Any other action stays a path in the image's working directory.
//! Before the first step the script writes kok's ansible callback plugin into a private temporary directory, and
//! on exit it leaves the plugin's summary as the container's termination message ([`super::summary`]).
//! The script reads its directories from `KOK_CONF_DIR` (default `/conf`), `KOK_AUTH_DIR` (default `/auth`)
//! and `KOK_TERMINATION_LOG` (default `/dev/termination-log`), so the same script runs outside a pod.
//!
//! Variables: a cluster directory means to kok what the same files mean to kubespray as an inventory
//! directory. `/conf` is one: the pinned `hosts.yml` and, as `group_vars/all.yml`, the pinned `vars.yml`
//! ([`VARS_INVENTORY_PATH`]), so ansible reads vars.yml as the group variables of `all` and the host
//! variables of hosts.yml outrank it, as they do in kubespray (never `-e @vars.yml`, which would outrank
//! them). A hook that runs `ansible --inventory=/conf/hosts.yml` (or `-i /conf`) sees the same variables.
//!
//! Facts: an operation whose spec names a facts playbook (rendered when a playbook step limits its hosts)
//! runs it first, with the same inventory, key and `-b` and without the limit, so kubespray's fact cache
//! holds every host before the limited run asserts it does. An optional one (kok's default,
//! `playbooks/facts.yml`) missing from the working directory is skipped with a line in the log.
//!
//! Security: the pod runs the image's user (kubespray's image runs as root and needs it), with privilege
//! escalation off, every capability dropped and the runtime's default seccomp profile. It runs as the
//! operation's service account, or else as the cluster's own `kok-<cluster>`, whose only grant is reading and
//! patching that cluster's credentials and kubeconfig Secrets ([`super::credentials`]).
//!
//! kubespray writes beside its inventory: the script copies the pinned inventory (`hosts.yml` and
//! `group_vars/all.yml`) into a writable directory (`KOK_INVENTORY`, private to the pod) and runs ansible
//! against that copy, with `credentials/` restored from Secret `<cluster>-credentials` (mounted read-only at
//! `/kok/credentials`). On exit, whatever the outcome, it saves what the run created or changed there, and an
//! `artifacts/admin.conf`, back to the cluster's Secrets.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{
    Job, JobSpec, PodFailurePolicy, PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapProjection, Container, EnvVar, EnvVarSource, KeyToPath, ObjectFieldSelector,
    PodSpec, PodTemplateSpec, ProjectedVolumeSource, ResourceRequirements, SeccompProfile,
    SecretVolumeSource, SecurityContext, Volume, VolumeMount, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use super::credentials::{credentials_secret, kubeconfig_secret, runner_service_account, SAVE_SCRIPT};
use super::summary::{ENV_TERMINATION_LOG, PLUGIN_SOURCE, STEP_FAILED_MARK, TERMINATION_MESSAGE_PATH};
use crate::api::{
    common_labels, ActionType, ClusterOperation, FactsPlaybook, Hook, PinnedFile, PinnedInventory,
    ANNOTATION_REVISION, ANNOTATION_SOURCE_PATH, FILE_GZIP_KEY, FILE_KEY, LABEL_CLUSTER_OPERATION,
    LABEL_OPERATION, SSH_PRIVATE_KEY, VARS_INVENTORY_PATH, VARS_KEY, VAULT_PASSWORD_KEY,
};
use crate::materialize::{shorten_name, MAX_NAME_LEN};

/// Prefix of every Job name.
pub const JOB_PREFIX: &str = "kok-";
/// Directory where the pinned inventory is mounted: `hosts.yml` and vars.yml as `group_vars/all.yml`.
pub const CONF_DIR: &str = "/conf";
/// Directory where the ssh key is mounted.
pub const AUTH_DIR: &str = "/auth";
/// Directory where the pinned repository files (`repositoryFiles`) are mounted, read-only.
pub const REPOSITORY_DIR: &str = "/kok/repository";
/// Environment variable naming the mounted repository files (the local runner points it at its copy).
pub const ENV_REPOSITORY_DIR: &str = "KOK_REPOSITORY_DIR";
/// Environment variable with the writable copy of the repository files that repository steps run from (set by
/// the script).
pub const ENV_REPOSITORY: &str = "KOK_REPOSITORY";
/// Directory where the ansible-vault password Secret (`vaultPasswordSecret`) is mounted.
pub const VAULT_DIR: &str = "/kok/vault";
/// Environment variable naming the ansible-vault password file; set when the operation has a vault Secret.
pub const ENV_VAULT_PASSWORD_FILE: &str = "KOK_VAULT_PASSWORD_FILE";
/// Environment variable overriding [`CONF_DIR`] in the entry script.
pub const ENV_CONF_DIR: &str = "KOK_CONF_DIR";
/// Environment variable overriding [`AUTH_DIR`] in the entry script.
pub const ENV_AUTH_DIR: &str = "KOK_AUTH_DIR";
/// Directory where the cluster's credentials Secret is mounted, read-only; the entry script copies it into
/// the writable inventory.
pub const CREDENTIALS_DIR: &str = "/kok/credentials";
/// Environment variable naming the mounted credentials (the local runner points it at its copy).
pub const ENV_CREDENTIALS_DIR: &str = "KOK_CREDENTIALS_DIR";
/// Environment variable naming the Secret the run's credentials are saved to.
pub const ENV_CREDENTIALS_SECRET: &str = "KOK_CREDENTIALS_SECRET";
/// Environment variable naming the Secret an `artifacts/admin.conf` is saved to.
pub const ENV_KUBECONFIG_SECRET: &str = "KOK_KUBECONFIG_SECRET";
/// Environment variable with the pod's namespace.
pub const ENV_NAMESPACE: &str = "KOK_NAMESPACE";
/// Environment variable with the writable inventory directory ansible runs against (set by the script).
pub const ENV_INVENTORY: &str = "KOK_INVENTORY";
/// Environment variable with the cluster name.
pub const ENV_CLUSTER: &str = "KOK_CLUSTER";
/// Environment variable with the operation id.
pub const ENV_OPERATION: &str = "KOK_OPERATION";
/// Environment variable with the commit the operation came from.
pub const ENV_COMMIT: &str = "KOK_COMMIT";
/// Label the Job controller puts on a Job's pods, naming the Job.
pub const JOB_NAME_LABEL: &str = "job-name";
/// Name of the runner container.
pub const CONTAINER_NAME: &str = "ansible";
/// Mode of the mounted ssh key: readable by its owner only (0400).
pub const KEY_MODE: i32 = 0o400;
/// Pod condition the Job fails on at once (eviction, preemption, node drain).
pub const DISRUPTION_CONDITION: &str = "DisruptionTarget";
/// `ansible-playbook`, as looked up on `PATH`.
pub const ANSIBLE_PLAYBOOK: &str = "ansible-playbook";
/// Shell used for the entry script and for `type: shell` steps.
pub const SHELL: &str = "/bin/sh";

/// Settings of every Job that do not come from the operation.
#[derive(Clone, Debug, PartialEq)]
pub struct JobConfig {
    /// Resources used when the operation sets none: requests 500m CPU and 512Mi memory, limit 2Gi memory
    /// (a kubespray run holds the inventory and facts of every host in memory).
    pub default_resources: ResourceRequirements,
}

impl Default for JobConfig {
    fn default() -> Self {
        let quantities = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect::<BTreeMap<_, _>>()
        };
        JobConfig {
            default_resources: ResourceRequirements {
                requests: Some(quantities(&[("cpu", "500m"), ("memory", "512Mi")])),
                limits: Some(quantities(&[("memory", "2Gi")])),
                ..ResourceRequirements::default()
            },
        }
    }
}

/// The name of the Job running the ClusterOperation named `operation`: `kok-<operation>`, cut and given an
/// 8-hex hash suffix when longer than 63 characters (a Job's name becomes a label value on its pods).
pub fn job_name(operation: &str) -> String {
    shorten_name(&format!("{JOB_PREFIX}{operation}"), MAX_NAME_LEN)
}

/// Quotes `arg` for a POSIX shell: single quotes around it, each `'` written as `'\''`.
pub fn shell_quote(arg: &str) -> String {
    let mut out = String::with_capacity(arg.len() + 2);
    out.push('\'');
    for c in arg.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// One command the Job runs: a pre-hook, the action or a post-hook.
#[derive(Clone, Copy, Debug)]
struct Step<'a> {
    action: &'a str,
    action_type: ActionType,
    extra_args: &'a [String],
    /// The action's path among the pinned repository files, when it is kept in the repository.
    repository: Option<&'a str>,
}

impl<'a> Step<'a> {
    fn of_hook(op: &'a ClusterOperation, hook: &'a Hook) -> Self {
        Step {
            action: &hook.action,
            action_type: hook.action_type,
            extra_args: &hook.extra_args,
            repository: repository_step(op, &hook.action),
        }
    }
}

fn main_step(op: &ClusterOperation) -> Step<'_> {
    Step {
        action: &op.spec.action,
        action_type: op.spec.action_type,
        extra_args: &op.spec.extra_args,
        repository: repository_step(op, &op.spec.action),
    }
}

/// The path of `action` among the operation's pinned repository files, when the render found it in the
/// commit's tree ([`crate::layout::playbooks`]); `None` for a path inside the runner image.
pub fn repository_step<'a>(op: &ClusterOperation, action: &'a str) -> Option<&'a str> {
    crate::layout::playbooks::repository_path(action)
        .filter(|path| op.spec.repository_files.iter().any(|f| f.path == *path))
}

/// What every playbook step of a run passes to ansible besides its own arguments.
#[derive(Clone, Copy)]
struct Common<'a> {
    /// The inventory file inside the writable inventory directory.
    inventory_file: &'a str,
    /// Whether the ssh key is mounted.
    with_key: bool,
    /// Whether the vault password is mounted.
    with_vault: bool,
}

impl<'a> Common<'a> {
    fn of(op: &'a ClusterOperation) -> Self {
        Common {
            inventory_file: op.spec.inventory_file(),
            with_key: op.spec.ssh_auth_ref.is_some(),
            with_vault: op.spec.vault_password_ref.is_some(),
        }
    }
}

fn script_line(step: Step<'_>, common: Common<'_>) -> String {
    match step.repository {
        // From the top of the pinned copy, as a checkout of the commit would run it.
        Some(path) => format!(
            "(cd \"${ENV_REPOSITORY}\" && {})",
            command_line(Step { action: path, ..step }, common)
        ),
        None => command_line(step, common),
    }
}

fn command_line(step: Step<'_>, common: Common<'_>) -> String {
    let action = shell_quote(step.action);
    let args: String = step
        .extra_args
        .iter()
        .map(|a| format!(" {}", shell_quote(a)))
        .collect();
    match step.action_type {
        ActionType::Playbook => {
            let key = if common.with_key {
                format!(" --private-key \"${ENV_AUTH_DIR}/{SSH_PRIVATE_KEY}\"")
            } else {
                String::new()
            };
            let vault = if common.with_vault {
                format!(" --vault-password-file \"${ENV_VAULT_PASSWORD_FILE}\"")
            } else {
                String::new()
            };
            let inventory = in_dir(ENV_INVENTORY, common.inventory_file);
            format!("{ANSIBLE_PLAYBOOK} -i {inventory}{key}{vault} -b {action}{args}")
        }
        // A script file needs no exec bit; a program of the image (`ansible`) is not a shell script.
        ActionType::Shell => {
            format!("if [ -f {action} ]; then {SHELL} {action}{args}; else {action}{args}; fi")
        }
    }
}

/// `"$<var>/<path>"` for the shell: the path inside the double quotes when it is plain (letters, digits,
/// `._-/`), else single-quoted after them.
fn in_dir(var: &str, path: &str) -> String {
    let plain = path
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/'));
    if plain {
        format!("\"${var}/{path}\"")
    } else {
        format!("\"${var}\"/{}", shell_quote(path))
    }
}

/// The lines of the entry script that copy `files` from the mounted directory `$<from>` to the writable
/// `$<to>` at their paths, those pinned compressed inflated from their `.gz` beside them.
fn copy_lines(files: &[PinnedFile], from: &str, to: &str, out: &mut String) {
    let mut made = std::collections::BTreeSet::new();
    for pinned in files {
        if let Some((dir, _)) = pinned.path.rsplit_once('/') {
            if made.insert(dir) {
                out.push_str(&format!("mkdir -p {}\n", in_dir(to, dir)));
            }
        }
        let target = in_dir(to, &pinned.path);
        if pinned.gzip {
            let source = in_dir(from, &format!("{}{GZIP_SUFFIX}", pinned.path));
            out.push_str(&format!("gzip -dc {source} > {target}\n"));
        } else {
            out.push_str(&format!("cp {} {target}\n", in_dir(from, &pinned.path)));
        }
    }
}

/// The lines of the entry script that lay the pinned repository files out in their writable copy, when the
/// operation has any.
fn repository_lines(op: &ClusterOperation) -> String {
    let files = &op.spec.repository_files;
    if files.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "{ENV_REPOSITORY_DIR}=\"${{{ENV_REPOSITORY_DIR}:-{REPOSITORY_DIR}}}\"\n{ENV_REPOSITORY}=\"$kok_tmp/repository\"\n\
         export {ENV_REPOSITORY}\nmkdir \"${ENV_REPOSITORY}\"\n"
    );
    copy_lines(files, ENV_REPOSITORY_DIR, ENV_REPOSITORY, &mut out);
    out
}

/// The lines of the entry script that lay the pinned inventory out in the writable copy: the inventory file,
/// vars.yml as `group_vars/all.yml`, and every file of group_vars/ and host_vars/ at its path, those pinned
/// compressed inflated from their `.gz` beside it in the mounted directory.
fn layout_lines(op: &ClusterOperation) -> String {
    let spec = &op.spec;
    let file = spec.inventory_file();
    let mut out = format!(
        "cp {} {}\n",
        in_dir(ENV_CONF_DIR, file),
        in_dir(ENV_INVENTORY, file)
    );
    if spec.vars_conf_ref.is_some() {
        out.push_str(&format!(
            "cp {} {}\n",
            in_dir(ENV_CONF_DIR, VARS_INVENTORY_PATH),
            in_dir(ENV_INVENTORY, VARS_INVENTORY_PATH)
        ));
    }
    copy_lines(&spec.vars_files, ENV_CONF_DIR, ENV_INVENTORY, &mut out);
    out.push_str(&repository_lines(op));
    out
}

/// What a compressed file's name has added in the mounted directory.
pub const GZIP_SUFFIX: &str = ".gz";

/// Heredoc delimiter of the plugin inside the entry script.
const PLUGIN_DELIMITER: &str = "KOK_SUMMARY_PLUGIN";
/// Heredoc delimiter of the credentials script inside the entry script.
const SAVE_DELIMITER: &str = "KOK_CREDENTIALS_SCRIPT";

/// The part of the entry script before the first step: the directories, a private temporary directory holding
/// kok's callback plugin (found by ansible through `ANSIBLE_CALLBACK_PLUGINS`), and the exit trap that names
/// the failed step and leaves the plugin's summary as the termination message.
fn script_prologue(op: &ClusterOperation) -> String {
    let vars_dir = VARS_INVENTORY_PATH
        .rsplit_once('/')
        .map_or(VARS_INVENTORY_PATH, |(dir, _)| dir);
    let layout = layout_lines(op);
    format!(
        r#"set -eu
{ENV_CONF_DIR}="${{{ENV_CONF_DIR}:-{CONF_DIR}}}"
{ENV_AUTH_DIR}="${{{ENV_AUTH_DIR}:-{AUTH_DIR}}}"
{ENV_TERMINATION_LOG}="${{{ENV_TERMINATION_LOG}:-{TERMINATION_MESSAGE_PATH}}}"
umask 077
kok_tmp=$(mktemp -d "${{TMPDIR:-/tmp}}/kok.XXXXXX")
KOK_SUMMARY_FILE="$kok_tmp/summary.json"
{ENV_INVENTORY}="$kok_tmp/inventory"
KOK_STEP=setup
export {ENV_CONF_DIR} {ENV_AUTH_DIR} {ENV_INVENTORY} KOK_SUMMARY_FILE KOK_STEP
kok_finish() {{
  kok_rc=$1
  if [ -n "${{{ENV_CREDENTIALS_SECRET}:-}}" ] && [ -f "$kok_tmp/kok_credentials.py" ]; then
    if ! "${{KOK_PYTHON:-python3}}" "$kok_tmp/kok_credentials.py" && [ "$kok_rc" -eq 0 ]; then
      KOK_STEP="saving credentials"
      kok_rc=1
    fi
  fi
  if [ "$kok_rc" -ne 0 ]; then
    printf 'kok: %s{STEP_FAILED_MARK}%s
' "$KOK_STEP" "$kok_rc" >&2
  fi
  if [ -s "$KOK_SUMMARY_FILE" ] && {{ [ "$kok_rc" -eq 0 ] || [ -e "$KOK_SUMMARY_FILE.failed" ]; }}; then
    cat "$KOK_SUMMARY_FILE" > "${ENV_TERMINATION_LOG}" 2>/dev/null || true
  fi
  rm -rf "$kok_tmp"
  exit "$kok_rc"
}}
trap 'kok_finish $?' EXIT
mkdir "$kok_tmp/callback" "${ENV_INVENTORY}" "${ENV_INVENTORY}/credentials" "${ENV_INVENTORY}/artifacts" \
  "${ENV_INVENTORY}/{vars_dir}"
{layout}if [ -n "${{{ENV_CREDENTIALS_DIR}:-}}" ] && [ -d "${ENV_CREDENTIALS_DIR}" ]; then
  for kok_file in "${ENV_CREDENTIALS_DIR}"/*; do
    if [ -f "$kok_file" ]; then cp "$kok_file" "${ENV_INVENTORY}/credentials/"; fi
  done
fi
cat > "$kok_tmp/callback/kok_summary.py" <<'{PLUGIN_DELIMITER}'
{PLUGIN_SOURCE}{PLUGIN_DELIMITER}
cat > "$kok_tmp/kok_credentials.py" <<'{SAVE_DELIMITER}'
{SAVE_SCRIPT}{SAVE_DELIMITER}
ANSIBLE_CALLBACK_PLUGINS="$kok_tmp/callback:${{ANSIBLE_CALLBACK_PLUGINS:-${{HOME:-/nonexistent}}/.ansible/plugins/callback:/usr/share/ansible/plugins/callback}}"
export ANSIBLE_CALLBACK_PLUGINS
"#
    )
}

/// What the log of a run with `preflight: false` says first, after `kok: `.
pub const PREFLIGHT_SKIPPED: &str = "pre-flight skipped (preflight: false in operations.yml)";

/// The label of the facts step, and the start of the first line of a run that has one.
pub const FACTS_STEP: &str = "facts";
/// What the facts step's announcement adds after its label and playbook.
pub const FACTS_NOTE: &str = " (without --limit, for kubespray's fact cache)";

/// The facts step: announced as `kok: facts: <playbook> (without --limit, for kubespray's fact cache)`, then
/// the playbook run like any playbook step without extra arguments. An optional playbook missing from the
/// working directory is skipped with `kok: facts: <playbook> is not in <dir>; going on without it`.
fn facts_step(facts: &FactsPlaybook, common: Common<'_>) -> String {
    let name = shell_quote(&format!("{FACTS_STEP}: {}", facts.path));
    let run = script_line(
        Step {
            action: &facts.path,
            action_type: ActionType::Playbook,
            extra_args: &[],
            repository: None,
        },
        common,
    );
    let mut out = format!(
        "KOK_STEP={name}\nprintf 'kok: %s%s\\n' \"$KOK_STEP\" {} >&2\n",
        shell_quote(FACTS_NOTE)
    );
    if facts.optional {
        let path = shell_quote(&facts.path);
        out.push_str(&format!(
            "if [ -e {path} ]; then\n  {run}\nelse\n  printf 'kok: %s is not in %s; going on without it \
             (not a kubespray runner? set factsPlaybook in kok.yml or cluster.yml)\\n' \"$KOK_STEP\" \"$PWD\" >&2\nfi\n"
        ));
    } else {
        out.push_str(&run);
        out.push('\n');
    }
    out
}

/// The entry script: runs the facts playbook (when the spec has one), pre-hooks, the action and post-hooks in
/// order, stopping at the first failure with its exit status. Every argument from the repository is
/// single-quoted; only kok's own variables expand. Each step is announced as `kok: <step>` on stderr, and a
/// failure as `kok: <step> failed with exit code <n>`. A run with `preflight: false` first says
/// `kok: pre-flight skipped (preflight: false in operations.yml)`.
pub fn entry_script(op: &ClusterOperation) -> String {
    let common = Common::of(op);
    let mut steps: Vec<(String, Step<'_>)> = Vec::new();
    let pre = op.spec.pre_hooks.len();
    for (i, hook) in op.spec.pre_hooks.iter().enumerate() {
        steps.push((format!("pre-hook {}/{pre}", i + 1), Step::of_hook(op, hook)));
    }
    steps.push(("action".to_string(), main_step(op)));
    let post = op.spec.post_hooks.len();
    for (i, hook) in op.spec.post_hooks.iter().enumerate() {
        steps.push((format!("post-hook {}/{post}", i + 1), Step::of_hook(op, hook)));
    }

    let mut script = script_prologue(op);
    if op.spec.preflight.as_ref().is_some_and(|p| p.skipped) {
        script.push_str(&format!(
            "printf 'kok: %s\\n' {} >&2\n",
            shell_quote(PREFLIGHT_SKIPPED)
        ));
    }
    if let Some(facts) = &op.spec.facts_playbook {
        script.push_str(&facts_step(facts, common));
    }
    for (label, step) in steps {
        let name = shell_quote(&format!("{label}: {}", step.action));
        let commit = &op.spec.source.commit;
        script.push_str(&format!("KOK_STEP={name}\n"));
        script.push_str("printf 'kok: %s\\n' \"$KOK_STEP\" >&2\n");
        if let Some(path) = step.repository {
            let note =
                format!("{path} is kept in the repository: it runs from the files commit {commit} pinned");
            script.push_str(&format!("printf 'kok: %s\\n' {} >&2\n", shell_quote(&note),));
        }
        script.push_str(&script_line(step, common));
        script.push('\n');
    }
    script
}

/// The container command: `/bin/sh -c <entry script> kok-entry`.
pub fn container_command(op: &ClusterOperation) -> Vec<String> {
    vec![
        SHELL.to_string(),
        "-c".to_string(),
        entry_script(op),
        "kok-entry".to_string(),
    ]
}

/// The labels of a Job and its pods: kok's common labels plus the operation id and ClusterOperation name
/// (ClusterOperation names are at most 63 characters, so they fit a label value; longer ones are shortened).
pub fn job_labels(op: &ClusterOperation) -> BTreeMap<String, String> {
    let mut labels = common_labels(&op.spec.cluster);
    labels.insert(LABEL_OPERATION.to_string(), op.spec.id.clone());
    labels.insert(
        LABEL_CLUSTER_OPERATION.to_string(),
        shorten_name(&op.name_any(), MAX_NAME_LEN),
    );
    labels
}

/// The runner container's environment: the run's identity, where credentials go, the pod's namespace, and
/// the vault password file when the operation has one.
fn container_env(op: &ClusterOperation) -> Vec<EnvVar> {
    let cluster = &op.spec.cluster;
    let mut vars = vec![
        env(ENV_CLUSTER, cluster),
        env(ENV_OPERATION, &op.spec.id),
        env(ENV_COMMIT, &op.spec.source.commit),
        env(ENV_CREDENTIALS_DIR, CREDENTIALS_DIR),
        env(ENV_CREDENTIALS_SECRET, &credentials_secret(cluster)),
        env(ENV_KUBECONFIG_SECRET, &kubeconfig_secret(cluster)),
        EnvVar {
            name: ENV_NAMESPACE.to_string(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.namespace".to_string(),
                    ..ObjectFieldSelector::default()
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        },
    ];
    if !op.spec.repository_files.is_empty() {
        vars.push(env(ENV_REPOSITORY_DIR, REPOSITORY_DIR));
    }
    if op.spec.vault_password_ref.is_some() {
        vars.push(env(
            ENV_VAULT_PASSWORD_FILE,
            &format!("{VAULT_DIR}/{VAULT_PASSWORD_KEY}"),
        ));
    }
    vars
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: Some(value.to_string()),
        ..EnvVar::default()
    }
}

/// The sources of the `/conf` volume: the inventory file, vars.yml as `group_vars/all.yml`, and each pinned
/// file of group_vars/ and host_vars/ at its path (a compressed one at its path + `.gz`), one source per
/// ConfigMap.
fn conf_sources(op: &ClusterOperation) -> Vec<VolumeProjection> {
    let spec = &op.spec;
    let file = spec.inventory_file();
    let mut sources = vec![config_map_source(
        &spec.hosts_conf_ref.name,
        vec![(file, file.to_string())],
    )];
    if let Some(vars) = &spec.vars_conf_ref {
        sources.push(config_map_source(
            &vars.name,
            vec![(VARS_KEY, VARS_INVENTORY_PATH.to_string())],
        ));
    }
    sources.extend(pinned_sources(&spec.vars_files));
    sources
}

/// The sources of a volume holding `files` at their paths (a compressed one at its path + `.gz`), one source
/// per ConfigMap.
fn pinned_sources(files: &[PinnedFile]) -> Vec<VolumeProjection> {
    let mut by_config_map: BTreeMap<&str, Vec<(&str, String)>> = BTreeMap::new();
    for pinned in files {
        let item = if pinned.gzip {
            (FILE_GZIP_KEY, format!("{}{GZIP_SUFFIX}", pinned.path))
        } else {
            (FILE_KEY, pinned.path.clone())
        };
        by_config_map.entry(&pinned.config_map).or_default().push(item);
    }
    by_config_map
        .into_iter()
        .map(|(name, items)| config_map_source(name, items))
        .collect()
}

fn config_map_source(name: &str, items: Vec<(&str, String)>) -> VolumeProjection {
    VolumeProjection {
        config_map: Some(ConfigMapProjection {
            name: name.to_string(),
            items: Some(
                items
                    .into_iter()
                    .map(|(key, path)| KeyToPath {
                        key: key.to_string(),
                        path,
                        mode: None,
                    })
                    .collect(),
            ),
            optional: Some(false),
        }),
        ..VolumeProjection::default()
    }
}

/// The Job running `op`, per DESIGN.md §2: one attempt, pinned inputs mounted read-only, the key at mode 0400,
/// a deadline ([`crate::api::DEFAULT_ACTIVE_DEADLINE_SECONDS`] when the operation sets none), owned by the
/// ClusterOperation (when it has a uid, i.e. was read from the API).
pub fn build_job(op: &ClusterOperation, cfg: &JobConfig) -> Job {
    let name = job_name(&op.name_any());
    let labels = job_labels(op);
    let annotations: BTreeMap<String, String> = [
        (ANNOTATION_REVISION.to_string(), op.spec.source.revision.clone()),
        (ANNOTATION_SOURCE_PATH.to_string(), op.spec.source.path.clone()),
    ]
    .into_iter()
    .collect();
    let (volumes, mounts) = job_volumes(op);
    let container = run_container(op, cfg, mounts);

    Job {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: op.namespace(),
            labels: Some(labels.clone()),
            annotations: Some(annotations),
            owner_references: op.controller_owner_ref(&()).map(|mut r| {
                r.block_owner_deletion = Some(true);
                vec![r]
            }),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            // Every Job has a deadline (DESIGN.md §1.9): the operation's, else the default.
            active_deadline_seconds: Some(op.spec.deadline_seconds()),
            pod_replacement_policy: Some("Failed".to_string()),
            pod_failure_policy: Some(fail_on_disruption()),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    restart_policy: Some("Never".to_string()),
                    service_account_name: Some(
                        op.spec
                            .service_account
                            .clone()
                            .unwrap_or_else(|| runner_service_account(&op.spec.cluster)),
                    ),
                    // The token lets the pod save its cluster's credentials (see super::credentials).
                    automount_service_account_token: Some(true),
                    containers: vec![container],
                    volumes: Some(volumes),
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}

/// The volumes of `op`'s pod and where the container mounts them, read-only: the pinned inputs, the
/// repository's files (when it has any), the ssh key and the vault password (when it names them) and
/// the cluster's credentials (when they exist).
fn job_volumes(op: &ClusterOperation) -> (Vec<Volume>, Vec<VolumeMount>) {
    let mut volumes = vec![projected_volume("conf", conf_sources(op))];
    let mut mounts = vec![read_only_mount("conf", CONF_DIR)];
    if !op.spec.repository_files.is_empty() {
        volumes.push(projected_volume(
            "repository",
            pinned_sources(&op.spec.repository_files),
        ));
        mounts.push(read_only_mount("repository", REPOSITORY_DIR));
    }
    if let Some(secret) = &op.spec.ssh_auth_ref {
        volumes.push(key_volume("auth", &secret.name, SSH_PRIVATE_KEY));
        mounts.push(read_only_mount("auth", AUTH_DIR));
    }
    if let Some(vault) = &op.spec.vault_password_ref {
        volumes.push(key_volume("vault", &vault.name, VAULT_PASSWORD_KEY));
        mounts.push(read_only_mount("vault", VAULT_DIR));
    }
    volumes.push(Volume {
        name: "credentials".to_string(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(credentials_secret(&op.spec.cluster)),
            default_mode: Some(KEY_MODE),
            optional: Some(true),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    });
    mounts.push(read_only_mount("credentials", CREDENTIALS_DIR));
    (volumes, mounts)
}

/// The volume `name` projecting `sources`, its files readable by all.
fn projected_volume(name: &str, sources: Vec<VolumeProjection>) -> Volume {
    Volume {
        name: name.to_string(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(sources),
            default_mode: Some(0o444),
        }),
        ..Volume::default()
    }
}

/// The volume `name` holding the one key `key` of the Secret `secret` at [`KEY_MODE`]; the pod does not
/// start without it.
fn key_volume(name: &str, secret: &str, key: &str) -> Volume {
    Volume {
        name: name.to_string(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.to_string()),
            items: Some(vec![KeyToPath {
                key: key.to_string(),
                path: key.to_string(),
                mode: None,
            }]),
            default_mode: Some(KEY_MODE),
            optional: Some(false),
        }),
        ..Volume::default()
    }
}

/// The volume `name` mounted read-only at `path`.
fn read_only_mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.to_string(),
        mount_path: path.to_string(),
        read_only: Some(true),
        ..VolumeMount::default()
    }
}

/// The container that runs `op`'s entry script with `mounts`: no privilege escalation, no
/// capabilities, the runtime's seccomp profile, the run summary as its termination message.
fn run_container(op: &ClusterOperation, cfg: &JobConfig, mounts: Vec<VolumeMount>) -> Container {
    Container {
        name: CONTAINER_NAME.to_string(),
        image: Some(op.spec.image.clone()),
        command: Some(container_command(op)),
        env: Some(container_env(op)),
        resources: Some(
            op.spec
                .resources
                .as_deref()
                .cloned()
                .unwrap_or_else(|| cfg.default_resources.clone()),
        ),
        volume_mounts: Some(mounts),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_string()]),
                add: None,
            }),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".to_string(),
                ..Default::default()
            }),
            ..SecurityContext::default()
        }),
        termination_message_path: Some(TERMINATION_MESSAGE_PATH.to_string()),
        termination_message_policy: Some("FallbackToLogsOnError".to_string()),
        ..Container::default()
    }
}

/// The pod failure policy that fails the Job when its pod is disrupted (evicted, preempted, its node
/// drained) instead of running it again.
fn fail_on_disruption() -> PodFailurePolicy {
    PodFailurePolicy {
        rules: vec![PodFailurePolicyRule {
            action: "FailJob".to_string(),
            on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                type_: DISRUPTION_CONDITION.to_string(),
                status: "True".to_string(),
            }]),
            on_exit_codes: None,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_kept_as_they_are() {
        assert_eq!(job_name("prod-install-0123abcd"), "kok-prod-install-0123abcd");
    }

    #[test]
    fn long_names_are_cut_to_63_characters_with_a_stable_hash_suffix() {
        let long = format!("{}-{}-0123abcd-202601020304", "c".repeat(40), "i".repeat(30));
        let a = job_name(&long);
        assert_eq!(a.len(), MAX_NAME_LEN);
        assert_eq!(a, job_name(&long));
        assert_ne!(a, job_name(&long.replace("0304", "0305")));
        assert!(a.starts_with("kok-ccc"));
    }

    #[test]
    fn every_job_has_a_deadline_the_default_when_nothing_sets_one() {
        let mut op = ClusterOperation::new("prod-install-0123abcd", Default::default());
        let deadline = |op: &ClusterOperation| {
            build_job(op, &JobConfig::default())
                .spec
                .and_then(|s| s.active_deadline_seconds)
        };
        assert_eq!(deadline(&op), Some(crate::api::DEFAULT_ACTIVE_DEADLINE_SECONDS));
        op.spec.active_deadline_seconds = Some(7200);
        assert_eq!(deadline(&op), Some(7200));
    }

    #[test]
    fn a_step_kept_in_the_repository_runs_from_the_pinned_files_and_an_image_path_from_the_image() {
        let mut op = ClusterOperation::new("local-hello-0123abcd", Default::default());
        op.spec.action = "./playbooks/hello.yml".into();
        op.spec.post_hooks = vec![Hook {
            action: "cluster-info.yml".into(),
            action_type: ActionType::Playbook,
            extra_args: vec![],
        }];
        op.spec.repository_files = vec![
            PinnedFile {
                path: "playbooks/files/big.txt".into(),
                config_map: "local-file-bbbbbbbb".into(),
                gzip: true,
            },
            PinnedFile {
                path: "playbooks/hello.yml".into(),
                config_map: "local-file-aaaaaaaa".into(),
                gzip: false,
            },
        ];
        let script = entry_script(&op);
        for line in [
            "cp \"$KOK_REPOSITORY_DIR/playbooks/hello.yml\" \"$KOK_REPOSITORY/playbooks/hello.yml\"\n",
            "gzip -dc \"$KOK_REPOSITORY_DIR/playbooks/files/big.txt.gz\" > \"$KOK_REPOSITORY/playbooks/files/big.txt\"\n",
            "(cd \"$KOK_REPOSITORY\" && ansible-playbook -i \"$KOK_INVENTORY/hosts.yml\" -b 'playbooks/hello.yml')\n",
            "\nansible-playbook -i \"$KOK_INVENTORY/hosts.yml\" -b 'cluster-info.yml'\n",
        ] {
            assert!(script.contains(line), "{line:?} missing from:\n{script}");
        }
        let job = build_job(&op, &JobConfig::default());
        let pod = job.spec.unwrap().template.spec.unwrap();
        let volume = pod
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == "repository")
            .unwrap();
        let items: Vec<(String, String, String)> = volume
            .projected
            .unwrap()
            .sources
            .unwrap()
            .into_iter()
            .flat_map(|s| {
                let cm = s.config_map.unwrap();
                cm.items
                    .unwrap()
                    .into_iter()
                    .map(move |i| (cm.name.clone(), i.key, i.path))
            })
            .collect();
        assert_eq!(
            items,
            [
                (
                    "local-file-aaaaaaaa".into(),
                    "file".into(),
                    "playbooks/hello.yml".into()
                ),
                (
                    "local-file-bbbbbbbb".into(),
                    "file.gz".into(),
                    "playbooks/files/big.txt.gz".into()
                ),
            ]
        );
        let container = &pod.containers[0];
        assert!(container
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .any(|m| m.name == "repository" && m.mount_path == REPOSITORY_DIR && m.read_only == Some(true)));
        assert!(container
            .env
            .as_ref()
            .unwrap()
            .iter()
            .any(|e| e.name == ENV_REPOSITORY_DIR && e.value.as_deref() == Some(REPOSITORY_DIR)));
    }

    #[test]
    fn an_operation_without_repository_steps_mounts_no_repository() {
        let op = ClusterOperation::new("prod-install-0123abcd", Default::default());
        assert!(!entry_script(&op).contains("KOK_REPOSITORY"));
        let pod = build_job(&op, &JobConfig::default())
            .spec
            .unwrap()
            .template
            .spec
            .unwrap();
        assert!(pod.volumes.unwrap().iter().all(|v| v.name != "repository"));
    }

    #[test]
    fn quoting_escapes_single_quotes() {
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
