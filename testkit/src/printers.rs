//! The Tables of built-in kinds, column for column as kube-apiserver prints them for `kubectl get`: names
//! in Title Case, priority 1 for what `-o wide` adds, and each kind's own cells (a pod's status from its
//! container states, a Job's from its conditions, an Event's last seen from its timestamps). Cells are
//! strings but for the counts the server writes as JSON numbers (Secret and ConfigMap `Data`, Event
//! `Count`). Times are relative to the `now` given, so that a recorded Table can be printed again.

use serde_json::{json, Value};

use crate::events::{self, Api};

/// One column of a built-in kind's Table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    /// Title Case name (kubectl upper-cases it).
    pub name: &'static str,
    /// OpenAPI type.
    pub type_: &'static str,
    /// `name` for the column holding the object's name, else empty.
    pub format: &'static str,
    /// 0, or 1 for the columns only `-o wide` shows.
    pub priority: i64,
    /// What the column shows.
    pub description: &'static str,
}

const fn column(name: &'static str, type_: &'static str, priority: i64, description: &'static str) -> Column {
    Column {
        name,
        type_,
        format: "",
        priority,
        description,
    }
}

const NAME: Column = Column {
    name: "Name",
    type_: "string",
    format: "name",
    priority: 0,
    description: "Name must be unique within a namespace.",
};
const AGE: Column = column(
    "Age",
    "string",
    0,
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
);
const CONTAINERS: Column = column(
    "Containers",
    "string",
    1,
    "Names of each container in the template.",
);
const IMAGES: Column = column(
    "Images",
    "string",
    1,
    "Images referenced by each container in the template.",
);

const PODS: &[Column] = &[
    NAME,
    column("Ready", "string", 0, "The aggregate readiness state of this pod for accepting traffic."),
    column("Status", "string", 0, "The aggregate status of the containers in this pod."),
    column(
        "Restarts",
        "string",
        0,
        "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
    ),
    AGE,
    column("IP", "string", 1, "The IP address of the pod."),
    column("Node", "string", 1, "The node the pod is bound to."),
    column("Nominated Node", "string", 1, "The node the scheduler nominated for the pod."),
    column("Readiness Gates", "string", 1, "The pod's readiness gates that are true, of all."),
];
const JOBS: &[Column] = &[
    NAME,
    column("Status", "string", 0, "Status of the job."),
    column(
        "Completions",
        "string",
        0,
        "The number of pods which reached phase Succeeded.",
    ),
    column("Duration", "string", 0, "Time required to complete the job."),
    AGE,
    CONTAINERS,
    IMAGES,
    column(
        "Selector",
        "string",
        1,
        "A label query over pods that should match the pod count.",
    ),
];
const SECRETS: &[Column] = &[
    NAME,
    column("Type", "string", 0, "The type of secret"),
    column("Data", "string", 0, "The number of keys in the secret"),
    AGE,
];
const CONFIG_MAPS: &[Column] = &[
    NAME,
    column("Data", "string", 0, "The number of keys in the config map"),
    AGE,
];
const NAME_AGE: &[Column] = &[NAME, AGE];
const ROLES: &[Column] = &[
    NAME,
    column("Created At", "date", 0, "The time the role was created."),
];
const BINDINGS: &[Column] = &[
    NAME,
    column(
        "Role",
        "string",
        0,
        "The role the binding grants: its kind and name.",
    ),
    AGE,
    column("Users", "string", 1, "The users the binding names."),
    column("Groups", "string", 1, "The groups the binding names."),
    column(
        "ServiceAccounts",
        "string",
        1,
        "The service accounts the binding names.",
    ),
];
const LEASES: &[Column] = &[
    NAME,
    column("Holder", "string", 0, "The holder of the lease."),
    AGE,
];
const NAMESPACES: &[Column] = &[
    NAME,
    column("Status", "string", 0, "The status of the namespace"),
    AGE,
];
const EVENTS: &[Column] = &[
    column("Last Seen", "string", 0, "The time the event was last seen."),
    column("Type", "string", 0, "Type of this event (Normal, Warning)."),
    column("Reason", "string", 0, "A short reason for this event."),
    column(
        "Object",
        "string",
        0,
        "The object the event is about: its kind and name.",
    ),
    column(
        "Subobject",
        "string",
        1,
        "The part of the object the event is about.",
    ),
    column(
        "Source",
        "string",
        1,
        "The component that reported the event, and its instance or host.",
    ),
    column("Message", "string", 0, "A description of the event."),
    column("First Seen", "string", 1, "The time the event was first seen."),
    column("Count", "string", 1, "The number of times the event occurred."),
    Column { priority: 1, ..NAME },
];

/// The built-in kinds with Tables of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Pod,
    Job,
    Secret,
    ConfigMap,
    ServiceAccount,
    Role,
    RoleBinding,
    Lease,
    Event,
    Namespace,
}

fn kind(group: &str, resource: &str) -> Option<Kind> {
    Some(match (group, resource) {
        ("", "pods") => Kind::Pod,
        ("batch", "jobs") => Kind::Job,
        ("", "secrets") => Kind::Secret,
        ("", "configmaps") => Kind::ConfigMap,
        ("", "serviceaccounts") => Kind::ServiceAccount,
        ("rbac.authorization.k8s.io", "roles" | "clusterroles") => Kind::Role,
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => Kind::RoleBinding,
        ("coordination.k8s.io", "leases") => Kind::Lease,
        ("", "events") | (events::GROUP, "events") => Kind::Event,
        ("", "namespaces") => Kind::Namespace,
        _ => return None,
    })
}

/// The columns of a built-in resource's Table; `None` for a resource printed by its printer columns (or
/// with Name and Age).
pub fn columns(group: &str, resource: &str) -> Option<&'static [Column]> {
    Some(match kind(group, resource)? {
        Kind::Pod => PODS,
        Kind::Job => JOBS,
        Kind::Secret => SECRETS,
        Kind::ConfigMap => CONFIG_MAPS,
        Kind::ServiceAccount => NAME_AGE,
        Kind::Role => ROLES,
        Kind::RoleBinding => BINDINGS,
        Kind::Lease => LEASES,
        Kind::Event => EVENTS,
        Kind::Namespace => NAMESPACES,
    })
}

/// A row of a built-in kind's Table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// One cell per column.
    pub cells: Vec<Value>,
    /// The row's conditions: a finished pod's `Completed`.
    pub conditions: Option<Value>,
}

/// The row of an object of a built-in resource at `now`; `None` for a resource [`columns`] has not.
pub fn row(group: &str, resource: &str, obj: &Value, now: jiff::Timestamp) -> Option<Row> {
    let kind = kind(group, resource)?;
    let plain = |cells: Vec<Value>| Row {
        cells,
        conditions: None,
    };
    let name = || str_at(obj, "/metadata/name");
    let age = || json!(since(time_at(obj, "/metadata/creationTimestamp"), now));
    Some(match kind {
        Kind::Pod => pod(obj, now),
        Kind::Job => plain(job(obj, now)),
        Kind::Secret => {
            let data = obj["data"].as_object().map_or(0, |d| d.len());
            plain(vec![
                json!(name()),
                json!(str_at(obj, "/type")),
                json!(data),
                age(),
            ])
        }
        Kind::ConfigMap => {
            let count = |key: &str| obj[key].as_object().map_or(0, |d| d.len());
            plain(vec![
                json!(name()),
                json!(count("data") + count("binaryData")),
                age(),
            ])
        }
        Kind::ServiceAccount => plain(vec![json!(name()), age()]),
        Kind::Role => {
            let created = time_at(obj, "/metadata/creationTimestamp").map(events::format_time);
            plain(vec![json!(name()), json!(created.unwrap_or_default())])
        }
        Kind::RoleBinding => plain(binding(obj, now)),
        Kind::Lease => plain(vec![
            json!(name()),
            json!(str_at(obj, "/spec/holderIdentity")),
            age(),
        ]),
        Kind::Event => plain(event(obj, now)),
        Kind::Namespace => plain(vec![json!(name()), json!(str_at(obj, "/status/phase")), age()]),
    })
}

fn str_at<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn time_at(obj: &Value, pointer: &str) -> Option<jiff::Timestamp> {
    obj.pointer(pointer)?.as_str()?.parse().ok()
}

/// How long ago `t` was, as the server prints an age (`<unknown>` without a time).
pub fn since(t: Option<jiff::Timestamp>, now: jiff::Timestamp) -> String {
    match t {
        Some(t) => human_duration(now.duration_since(t).as_secs()),
        None => "<unknown>".into(),
    }
}

/// Kubernetes' human-readable duration of whole seconds (`45s`, `5m3s`, `3h`, `2d4h`, `3y12d`).
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    let secs = secs.max(0);
    let (minutes, hours) = (secs / 60, secs / 3600);
    let days = hours / 24;
    if secs < 120 {
        format!("{secs}s")
    } else if minutes < 10 {
        match secs % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        }
    } else if minutes < 180 {
        format!("{minutes}m")
    } else if hours < 8 {
        match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        match hours % 24 {
            0 => format!("{days}d"),
            h => format!("{days}d{h}h"),
        }
    } else if hours < 24 * 365 * 2 {
        format!("{days}d")
    } else if hours < 24 * 365 * 8 {
        match days % 365 {
            0 => format!("{}y", days / 365),
            d => format!("{}y{d}d", days / 365),
        }
    } else {
        format!("{}y", days / 365)
    }
}

fn array<'a>(obj: &'a Value, pointer: &str) -> &'a [Value] {
    obj.pointer(pointer)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// What a pod's containers add up to: how many are ready, how often they restarted, and when last.
#[derive(Debug, Default)]
struct Containers {
    ready: usize,
    restarts: i64,
    last_restart: Option<jiff::Timestamp>,
}

impl Containers {
    fn count(&mut self, status: &Value) {
        self.restarts += status["restartCount"].as_i64().unwrap_or(0);
        self.last_restart = self
            .last_restart
            .max(time_at(status, "/lastState/terminated/finishedAt"));
    }
}

/// A terminated container's reason, else its signal or exit code.
fn exit_reason(terminated: &Value, prefix: &str) -> String {
    match terminated["reason"].as_str() {
        Some(r) if !r.is_empty() => format!("{prefix}{r}"),
        _ => match terminated["signal"].as_i64() {
            Some(s) if s != 0 => format!("{prefix}Signal:{s}"),
            _ => format!(
                "{prefix}ExitCode:{}",
                terminated["exitCode"].as_i64().unwrap_or(0)
            ),
        },
    }
}

fn has_true_condition(obj: &Value, pointer: &str, type_: &str) -> bool {
    array(obj, pointer)
        .iter()
        .any(|c| c["type"] == type_ && c["status"] == "True")
}

/// The init containers: the counts of all and of the restartable ones (sidecars), and the status of the
/// first that has not completed (`Init:1/2`, `Init:Error`), if one has not.
fn init_containers(obj: &Value) -> (Containers, Containers, Option<String>) {
    let specs = array(obj, "/spec/initContainers");
    let sidecar = |name: &str| {
        specs
            .iter()
            .any(|c| c["name"] == name && c["restartPolicy"] == "Always")
    };
    let (mut all, mut sidecars) = (Containers::default(), Containers::default());
    for (i, c) in array(obj, "/status/initContainerStatuses").iter().enumerate() {
        all.count(c);
        let name = c["name"].as_str().unwrap_or("");
        if sidecar(name) {
            sidecars.count(c);
        }
        let terminated = &c["state"]["terminated"];
        let waiting = c["state"]["waiting"]["reason"].as_str().unwrap_or("");
        if terminated.is_object() && terminated["exitCode"].as_i64().unwrap_or(0) == 0 {
            continue;
        }
        if sidecar(name) && c["started"] == Value::Bool(true) {
            if c["ready"] == Value::Bool(true) {
                sidecars.ready += 1;
            }
            continue;
        }
        let status = if terminated.is_object() {
            exit_reason(terminated, "Init:")
        } else if !waiting.is_empty() && waiting != "PodInitializing" {
            format!("Init:{waiting}")
        } else {
            format!("Init:{i}/{}", specs.len())
        };
        return (all, sidecars, Some(status));
    }
    (all, sidecars, None)
}

/// The app containers, last first: counted on top of the sidecars, and the status their states give
/// (a waiting or terminated reason), if they give one.
fn app_containers(obj: &Value, mut counts: Containers, mut reason: String) -> (Containers, String) {
    let mut running = false;
    for c in array(obj, "/status/containerStatuses").iter().rev() {
        counts.count(c);
        let state = &c["state"];
        let waiting = state["waiting"]["reason"].as_str().unwrap_or("");
        if !waiting.is_empty() {
            reason = waiting.to_string();
        } else if state["terminated"].is_object() {
            reason = exit_reason(&state["terminated"], "");
        } else if c["ready"] == Value::Bool(true) && state["running"].is_object() {
            running = true;
            counts.ready += 1;
        }
    }
    if reason == "Completed" && running {
        let ready = has_true_condition(obj, "/status/conditions", "Ready");
        reason = if ready { "Running" } else { "NotReady" }.into();
    }
    (counts, reason)
}

/// A pod's `-o wide` cells: its IP, node, nominated node and readiness gates (met of all).
fn pod_placement(obj: &Value) -> [Value; 4] {
    let none = |s: &str| json!(if s.is_empty() { "<none>" } else { s });
    let gates = array(obj, "/spec/readinessGates");
    let gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let conditions = array(obj, "/status/conditions");
        let met = gates
            .iter()
            .filter(|g| {
                conditions
                    .iter()
                    .find(|c| c["type"] == g["conditionType"])
                    .is_some_and(|c| c["status"] == "True")
            })
            .count();
        format!("{met}/{}", gates.len())
    };
    [
        none(str_at(obj, "/status/podIPs/0/ip")),
        none(str_at(obj, "/spec/nodeName")),
        none(str_at(obj, "/status/nominatedNodeName")),
        json!(gates),
    ]
}

/// A pod's row. Its status is its phase (or `status.reason`), unless scheduling gates, an init container,
/// an app container's state or its deletion say more; a finished pod's row has a `Completed` condition.
fn pod(obj: &Value, now: jiff::Timestamp) -> Row {
    let phase = str_at(obj, "/status/phase");
    let mut reason = match str_at(obj, "/status/reason") {
        "" => phase.to_string(),
        r => r.to_string(),
    };
    if array(obj, "/status/conditions")
        .iter()
        .any(|c| c["type"] == "PodScheduled" && c["reason"] == "SchedulingGated")
    {
        reason = "SchedulingGated".into();
    }
    let sidecars = array(obj, "/spec/initContainers")
        .iter()
        .filter(|c| c["restartPolicy"] == "Always")
        .count();
    let total = array(obj, "/spec/containers").len() + sidecars;
    let (mut counts, sidecar_counts, initializing) = init_containers(obj);
    if let Some(status) = &initializing {
        reason = status.clone();
    }
    if initializing.is_none() || has_true_condition(obj, "/status/conditions", "Initialized") {
        (counts, reason) = app_containers(obj, sidecar_counts, reason);
    } else {
        counts.ready = sidecar_counts.ready;
    }
    let deleting = obj.pointer("/metadata/deletionTimestamp").is_some();
    if deleting && str_at(obj, "/status/reason") == "NodeLost" {
        reason = "Unknown".into();
    } else if deleting && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".into();
    }
    let restarts = match counts.last_restart {
        Some(t) if counts.restarts != 0 => format!("{} ({} ago)", counts.restarts, since(Some(t), now)),
        _ => counts.restarts.to_string(),
    };
    let conditions = match phase {
        "Succeeded" => Some(
            json!([{"type": "Completed", "status": "True", "reason": "Succeeded",
            "message": "The pod has completed successfully."}]),
        ),
        "Failed" => Some(json!([{"type": "Completed", "status": "True", "reason": "Failed",
            "message": "The pod failed."}])),
        _ => None,
    };
    let mut cells = vec![
        json!(str_at(obj, "/metadata/name")),
        json!(format!("{}/{total}", counts.ready)),
        json!(reason),
        json!(restarts),
        json!(since(time_at(obj, "/metadata/creationTimestamp"), now)),
    ];
    cells.extend(pod_placement(obj));
    Row { cells, conditions }
}

/// Whether a Job has a condition of this type that is true.
fn has_condition(obj: &Value, type_: &str) -> bool {
    has_true_condition(obj, "/status/conditions", type_)
}

fn job(obj: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let succeeded = obj
        .pointer("/status/succeeded")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let completions = match obj.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(c) => format!("{succeeded}/{c}"),
        None => match obj.pointer("/spec/parallelism").and_then(Value::as_i64) {
            Some(p) if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let start = time_at(obj, "/status/startTime");
    let duration = match (start, time_at(obj, "/status/completionTime")) {
        (None, _) => String::new(),
        (Some(start), None) => since(Some(start), now),
        (Some(start), Some(end)) => human_duration(end.duration_since(start).as_secs()),
    };
    let status = if has_condition(obj, "Complete") {
        "Complete"
    } else if has_condition(obj, "Failed") {
        "Failed"
    } else if obj.pointer("/metadata/deletionTimestamp").is_some() {
        "Terminating"
    } else if has_condition(obj, "Suspended") {
        "Suspended"
    } else if has_condition(obj, "FailureTarget") {
        "FailureTarget"
    } else if has_condition(obj, "SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else {
        "Running"
    };
    let containers = array(obj, "/spec/template/spec/containers");
    let joined = |key: &str| {
        containers
            .iter()
            .map(|c| c[key].as_str().unwrap_or(""))
            .collect::<Vec<_>>()
            .join(",")
    };
    vec![
        json!(str_at(obj, "/metadata/name")),
        json!(status),
        json!(completions),
        json!(duration),
        json!(since(time_at(obj, "/metadata/creationTimestamp"), now)),
        json!(joined("name")),
        json!(joined("image")),
        json!(selector(&obj["spec"]["selector"])),
    ]
}

/// A label selector as the server writes it: its requirements sorted by key, joined with commas.
pub fn selector(sel: &Value) -> String {
    let mut reqs: Vec<(String, String)> = Vec::new();
    for (k, v) in sel["matchLabels"].as_object().into_iter().flatten() {
        reqs.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or(""))));
    }
    for e in array(sel, "/matchExpressions") {
        let key = e["key"].as_str().unwrap_or("").to_string();
        let mut values: Vec<&str> = array(e, "/values").iter().filter_map(Value::as_str).collect();
        values.sort_unstable();
        let text = match e["operator"].as_str().unwrap_or("") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.clone(),
            _ => format!("!{key}"),
        };
        reqs.push((key, text));
    }
    reqs.sort();
    reqs.into_iter()
        .map(|(_, text)| text)
        .collect::<Vec<_>>()
        .join(",")
}

fn binding(obj: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let subjects = array(obj, "/subjects");
    let of_kind = |kind: &str| {
        subjects
            .iter()
            .filter(|s| s["kind"] == kind)
            .map(|s| match kind {
                "ServiceAccount" => format!(
                    "{}/{}",
                    s["namespace"].as_str().unwrap_or(""),
                    s["name"].as_str().unwrap_or("")
                ),
                _ => s["name"].as_str().unwrap_or("").to_string(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    vec![
        json!(str_at(obj, "/metadata/name")),
        json!(format!(
            "{}/{}",
            str_at(obj, "/roleRef/kind"),
            str_at(obj, "/roleRef/name")
        )),
        json!(since(time_at(obj, "/metadata/creationTimestamp"), now)),
        json!(of_kind("User")),
        json!(of_kind("Group")),
        json!(of_kind("ServiceAccount")),
    ]
}

/// An Event's row, from its `v1` form whichever API it is read through.
fn event(obj: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let api = Api::of_api_version(obj["apiVersion"].as_str().unwrap_or("")).unwrap_or(Api::Core);
    let ev = events::Event::read(api, obj).unwrap_or_default();
    let first = match ev.first_timestamp {
        Some(t) => since(Some(t), now),
        None => since(ev.event_time, now),
    };
    let mut last = match ev.last_timestamp {
        Some(t) => since(Some(t), now),
        None => first.clone(),
    };
    let count = match &ev.series {
        Some(series) => {
            last = since(series.last_observed, now);
            series.count
        }
        None if ev.count == 0 => 1,
        None => ev.count,
    };
    let kind = ev.involved.kind.to_lowercase();
    let object = if ev.involved.name.is_empty() {
        kind
    } else {
        format!("{kind}/{}", ev.involved.name)
    };
    let first_nonempty = |a: &str, b: &str| {
        if a.is_empty() {
            b.to_string()
        } else {
            a.to_string()
        }
    };
    let component = first_nonempty(&ev.source_component, &ev.reporting_controller);
    let instance = first_nonempty(&ev.source_host, &ev.reporting_instance);
    let source = if instance.is_empty() {
        component
    } else {
        format!("{component}, {instance}")
    };
    vec![
        json!(last),
        json!(ev.type_),
        json!(ev.reason),
        json!(object),
        json!(ev.involved.field_path),
        json!(source),
        json!(ev.message.trim()),
        json!(first),
        json!(count),
        json!(str_at(obj, "/metadata/name")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn durations_read_like_kubectl() {
        for (secs, want) in [
            (45, "45s"),
            (119, "119s"),
            (303, "5m3s"),
            (600, "10m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60, "3h1m"),
            (52 * 3600, "2d4h"),
            (9 * 86400, "9d"),
            (3 * 365 * 86400 + 12 * 86400, "3y12d"),
            (-1, "0s"),
            (-2, "<invalid>"),
        ] {
            assert_eq!(human_duration(secs), want, "{secs}");
        }
    }

    #[test]
    fn a_running_job_keeps_counting_and_a_complete_one_stops() {
        let job = json!({"metadata": {"name": "j", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"completions": 1, "selector": {"matchLabels": {"b": "2", "a": "1"}},
                "template": {"spec": {"containers": [{"name": "c", "image": "i"}, {"name": "d", "image": "j"}]}}},
            "status": {"startTime": "2026-01-01T00:00:00Z"}});
        let now = at("2026-01-01T00:05:00Z");
        let cells = row("batch", "jobs", &job, now).unwrap().cells;
        assert_eq!(
            cells,
            vec![
                json!("j"),
                json!("Running"),
                json!("0/1"),
                json!("5m"),
                json!("5m"),
                json!("c,d"),
                json!("i,j"),
                json!("a=1,b=2")
            ]
        );
        let mut done = job.clone();
        done["status"]["completionTime"] = json!("2026-01-01T00:01:00Z");
        done["status"]["succeeded"] = json!(1);
        done["status"]["conditions"] = json!([{"type": "Complete", "status": "True"}]);
        let cells = row("batch", "jobs", &done, now).unwrap().cells;
        assert_eq!(&cells[1..4], &[json!("Complete"), json!("1/1"), json!("60s")]);
    }

    #[test]
    fn a_pod_whose_container_was_killed_without_a_reason_shows_its_exit_code() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Failed", "containerStatuses": [{"name": "c", "restartCount": 0,
                "state": {"terminated": {"exitCode": 137}}}]}});
        let row = row("", "pods", &pod, at("2026-01-01T00:00:00Z")).unwrap();
        assert_eq!(row.cells[2], "ExitCode:137");
        assert_eq!(row.conditions.unwrap()[0]["reason"], "Failed");
    }
}
