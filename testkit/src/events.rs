//! Events: one storage for `v1` and `events.k8s.io/v1`, as kube-apiserver keeps them.
//!
//! The real server stores one internal Event and converts it field by field for each API, so what is
//! written through one API is read through the other. testkit stores the `v1` form ([`Api::Core`]) and
//! converts through [`Event`], the internal form: `involvedObject` ↔ `regarding`, `message` ↔ `note`,
//! `reportingComponent` ↔ `reportingController`, and `source`, `firstTimestamp`, `lastTimestamp`,
//! `count` ↔ the `deprecated*` fields. Each API writes its own zero values (`v1` always writes
//! `reportingComponent` and `reportingInstance`, `events.k8s.io/v1` never writes an empty
//! `reportingController`), keeps its own validation ([`validate_create`], [`validate_update`]: the lax
//! rules of `v1`, the strict ones of `events.k8s.io/v1`, whose errors name the `v1` fields) and its own
//! field-selector labels ([`field_label`]), which select the stored fields ([`selectable`]).

use serde_json::{json, Map, Value};

use crate::errors::{cause, ApiError, Cause};

/// The group of the new Events API.
pub const GROUP: &str = "events.k8s.io";

const REPORTING_INSTANCE_MAX: usize = 128;
const ACTION_MAX: usize = 128;
const REASON_MAX: usize = 128;
const NOTE_MAX: usize = 1024;
const QUALIFIED_NAME_MAX: usize = 63;
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// The API an Event is written or read through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `v1` (`/api/v1/.../events`): the storage form.
    Core,
    /// `events.k8s.io/v1`.
    EventsV1,
}

impl Api {
    /// The Events API a group/resource serves, if it serves Events.
    pub fn of(group: &str, resource: &str) -> Option<Api> {
        match (group, resource) {
            ("", "events") => Some(Api::Core),
            (GROUP, "events") => Some(Api::EventsV1),
            _ => None,
        }
    }

    /// The Events API of an `apiVersion`, if it has Events.
    pub fn of_api_version(api_version: &str) -> Option<Api> {
        match api_version {
            "v1" => Some(Api::Core),
            "events.k8s.io/v1" => Some(Api::EventsV1),
            _ => None,
        }
    }

    fn api_version(self) -> &'static str {
        match self {
            Api::Core => "v1",
            Api::EventsV1 => "events.k8s.io/v1",
        }
    }

    /// The name of the reporting controller's field in this API, which its errors use too.
    fn reporting_field(self) -> &'static str {
        match self {
            Api::Core => "reportingComponent",
            Api::EventsV1 => "reportingController",
        }
    }
}

/// An object reference (`involvedObject`, `regarding`, `related`), field by field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectRef {
    /// `kind`.
    pub kind: String,
    /// `namespace`.
    pub namespace: String,
    /// `name`.
    pub name: String,
    /// `uid`.
    pub uid: String,
    /// `apiVersion`.
    pub api_version: String,
    /// `resourceVersion`.
    pub resource_version: String,
    /// `fieldPath`.
    pub field_path: String,
}

impl ObjectRef {
    fn read(v: &Value, path: &str) -> Result<ObjectRef, ApiError> {
        Ok(ObjectRef {
            kind: string(v, "kind", path)?,
            namespace: string(v, "namespace", path)?,
            name: string(v, "name", path)?,
            uid: string(v, "uid", path)?,
            api_version: string(v, "apiVersion", path)?,
            resource_version: string(v, "resourceVersion", path)?,
            field_path: string(v, "fieldPath", path)?,
        })
    }

    fn write(&self) -> Value {
        let mut m = Map::new();
        for (key, value) in [
            ("kind", &self.kind),
            ("namespace", &self.namespace),
            ("name", &self.name),
            ("uid", &self.uid),
            ("apiVersion", &self.api_version),
            ("resourceVersion", &self.resource_version),
            ("fieldPath", &self.field_path),
        ] {
            put_nonempty(&mut m, key, value);
        }
        Value::Object(m)
    }

    /// The reference as a validation message prints a Go struct: field names capitalized, every field.
    fn go_value(&self) -> String {
        go_struct(&[
            ("Kind", &self.kind),
            ("Namespace", &self.namespace),
            ("Name", &self.name),
            ("UID", &self.uid),
            ("APIVersion", &self.api_version),
            ("ResourceVersion", &self.resource_version),
            ("FieldPath", &self.field_path),
        ])
    }
}

/// A Go struct of strings as a validation message prints it: its fields as JSON, in declaration order.
fn go_struct(fields: &[(&str, &str)]) -> String {
    let fields: Vec<String> = fields
        .iter()
        .map(|(key, value)| format!("{}:{}", json!(key), json!(value)))
        .collect();
    format!("{{{}}}", fields.join(","))
}

/// `series`: a repeated Event's count and when it was last seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Series {
    /// `count`.
    pub count: i64,
    /// `lastObservedTime` (microseconds).
    pub last_observed: Option<jiff::Timestamp>,
}

/// An Event in the server's internal form, which both APIs convert to and from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Event {
    /// `metadata`, as written.
    pub metadata: Value,
    /// `involvedObject` / `regarding`.
    pub involved: ObjectRef,
    /// `reason`.
    pub reason: String,
    /// `message` / `note`.
    pub message: String,
    /// `source.component` / `deprecatedSource.component`.
    pub source_component: String,
    /// `source.host` / `deprecatedSource.host`.
    pub source_host: String,
    /// `firstTimestamp` / `deprecatedFirstTimestamp` (seconds).
    pub first_timestamp: Option<jiff::Timestamp>,
    /// `lastTimestamp` / `deprecatedLastTimestamp` (seconds).
    pub last_timestamp: Option<jiff::Timestamp>,
    /// `count` / `deprecatedCount`.
    pub count: i64,
    /// `type`.
    pub type_: String,
    /// `eventTime` (microseconds).
    pub event_time: Option<jiff::Timestamp>,
    /// `series`.
    pub series: Option<Series>,
    /// `action`.
    pub action: String,
    /// `related`.
    pub related: Option<ObjectRef>,
    /// `reportingComponent` / `reportingController`.
    pub reporting_controller: String,
    /// `reportingInstance`.
    pub reporting_instance: String,
}

fn decode_error(api: Api, detail: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!(
        "Event in version \"{}\" cannot be handled as a Event: {detail}",
        api.api_version().rsplit('/').next().unwrap_or("v1")
    ))
}

fn string(v: &Value, key: &str, path: &str) -> Result<String, ApiError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(ApiError::bad_request(format!(
            "json: cannot unmarshal {} into Go struct field {path}.{key} of type string",
            json_type(other)
        ))),
    }
}

fn int(v: &Value, key: &str, path: &str) -> Result<i64, ApiError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(0),
        Some(n) => n.as_i64().ok_or_else(|| {
            ApiError::bad_request(format!(
                "json: cannot unmarshal {} into Go struct field {path}.{key} of type int32",
                json_type(n)
            ))
        }),
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "bool",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
        Value::Null => "null",
    }
}

fn time(v: &Value, key: &str) -> Result<Option<jiff::Timestamp>, ApiError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => s.parse::<jiff::Timestamp>().map(Some).map_err(|_| {
            ApiError::bad_request(format!(
                "parsing time \"{s}\" as \"2006-01-02T15:04:05Z07:00\": cannot parse \"{s}\" as \"2006\""
            ))
        }),
        Some(other) => Err(ApiError::bad_request(format!(
            "json: cannot unmarshal {} into Go value of type string",
            json_type(other)
        ))),
    }
}

fn put_nonempty(m: &mut Map<String, Value>, key: &str, value: &str) {
    if !value.is_empty() {
        m.insert(key.into(), Value::String(value.into()));
    }
}

/// A `Time` as the server writes it: whole seconds, UTC.
pub fn format_time(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A `MicroTime` as the server writes it: six fractional digits, UTC.
pub fn format_micro_time(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

fn time_value(t: Option<jiff::Timestamp>) -> Value {
    t.map_or(Value::Null, |t| Value::String(format_time(t)))
}

fn micro_time_value(t: Option<jiff::Timestamp>) -> Value {
    t.map_or(Value::Null, |t| Value::String(format_micro_time(t)))
}

/// Go's `time.Time.String()` of a UTC time, as a validation message prints a timestamp.
fn go_time(t: Option<jiff::Timestamp>) -> String {
    let t = t.unwrap_or_else(|| {
        "0001-01-01T00:00:00Z"
            .parse()
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
    });
    let nanos = t.subsec_nanosecond();
    let fraction = if nanos == 0 {
        String::new()
    } else {
        format!(".{nanos:09}").trim_end_matches('0').to_string()
    };
    format!("{}{fraction} +0000 UTC", t.strftime("%Y-%m-%d %H:%M:%S"))
}

impl Event {
    /// Reads an Event as `api` writes it. Fields of the wrong type, and unreadable times, are 400 errors.
    pub fn read(api: Api, obj: &Value) -> Result<Event, ApiError> {
        let (involved, message, source, first, last, count, controller) = match api {
            Api::Core => (
                "involvedObject",
                "message",
                "source",
                "firstTimestamp",
                "lastTimestamp",
                "count",
                "reportingComponent",
            ),
            Api::EventsV1 => (
                "regarding",
                "note",
                "deprecatedSource",
                "deprecatedFirstTimestamp",
                "deprecatedLastTimestamp",
                "deprecatedCount",
                "reportingController",
            ),
        };
        let read = || -> Result<Event, ApiError> {
            let source_value = obj.get(source).cloned().unwrap_or(Value::Null);
            let series = match obj.get("series") {
                None | Some(Value::Null) => None,
                Some(s) => Some(Series {
                    count: int(s, "count", "EventSeries")?,
                    last_observed: time(s, "lastObservedTime")?,
                }),
            };
            let related = match obj.get("related") {
                None | Some(Value::Null) => None,
                Some(r) => Some(ObjectRef::read(r, "Event.related")?),
            };
            Ok(Event {
                metadata: obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
                involved: ObjectRef::read(obj.get(involved).unwrap_or(&Value::Null), "Event")?,
                reason: string(obj, "reason", "Event")?,
                message: string(obj, message, "Event")?,
                source_component: string(&source_value, "component", "EventSource")?,
                source_host: string(&source_value, "host", "EventSource")?,
                first_timestamp: time(obj, first)?,
                last_timestamp: time(obj, last)?,
                count: int(obj, count, "Event")?,
                type_: string(obj, "type", "Event")?,
                event_time: time(obj, "eventTime")?,
                series,
                action: string(obj, "action", "Event")?,
                related,
                reporting_controller: string(obj, controller, "Event")?,
                reporting_instance: string(obj, "reportingInstance", "Event")?,
            })
        };
        read().map_err(|e| decode_error(api, e.message))
    }

    /// The Event as `api` writes it, with the zero values that API writes.
    pub fn write(&self, api: Api) -> Value {
        let mut m = Map::new();
        m.insert("kind".into(), json!("Event"));
        m.insert("apiVersion".into(), json!(api.api_version()));
        m.insert("metadata".into(), self.metadata.clone());
        let mut source = Map::new();
        put_nonempty(&mut source, "component", &self.source_component);
        put_nonempty(&mut source, "host", &self.source_host);
        put_nonempty(&mut m, "reason", &self.reason);
        put_nonempty(&mut m, "type", &self.type_);
        put_nonempty(&mut m, "action", &self.action);
        m.insert("eventTime".into(), micro_time_value(self.event_time));
        if let Some(series) = &self.series {
            m.insert(
                "series".into(),
                json!({"count": series.count, "lastObservedTime": micro_time_value(series.last_observed)}),
            );
        }
        if let Some(related) = &self.related {
            m.insert("related".into(), related.write());
        }
        match api {
            Api::Core => {
                m.insert("involvedObject".into(), self.involved.write());
                put_nonempty(&mut m, "message", &self.message);
                m.insert("source".into(), Value::Object(source));
                m.insert("firstTimestamp".into(), time_value(self.first_timestamp));
                m.insert("lastTimestamp".into(), time_value(self.last_timestamp));
                if self.count != 0 {
                    m.insert("count".into(), json!(self.count));
                }
                m.insert("reportingComponent".into(), json!(self.reporting_controller));
                m.insert("reportingInstance".into(), json!(self.reporting_instance));
            }
            Api::EventsV1 => {
                m.insert("regarding".into(), self.involved.write());
                put_nonempty(&mut m, "note", &self.message);
                m.insert("deprecatedSource".into(), Value::Object(source));
                m.insert(
                    "deprecatedFirstTimestamp".into(),
                    time_value(self.first_timestamp),
                );
                m.insert("deprecatedLastTimestamp".into(), time_value(self.last_timestamp));
                if self.count != 0 {
                    m.insert("deprecatedCount".into(), json!(self.count));
                }
                put_nonempty(&mut m, "reportingController", &self.reporting_controller);
                put_nonempty(&mut m, "reportingInstance", &self.reporting_instance);
            }
        }
        Value::Object(m)
    }

    fn namespace(&self) -> &str {
        self.metadata["namespace"].as_str().unwrap_or("")
    }

    fn name(&self) -> &str {
        self.metadata["name"].as_str().unwrap_or("")
    }
}

/// An Event (in either API's form) as `api_version` serves it; `None` when that version has no Events
/// or the Event does not read (it was stored by this module, so it does).
pub fn convert(obj: &Value, api_version: &str) -> Option<Value> {
    let to = Api::of_api_version(api_version)?;
    let from = Api::of_api_version(obj["apiVersion"].as_str().unwrap_or(""))?;
    Event::read(from, obj).ok().map(|e| e.write(to))
}

fn invalid(field: &str, value: &str, detail: &str) -> Cause {
    cause(
        "FieldValueInvalid",
        field,
        format!("Invalid value: {}: {detail}", json!(value)),
    )
}

fn required(field: &str) -> Cause {
    cause("FieldValueRequired", field, "Required value")
}

/// Kubernetes' qualified-name check (`[prefix/]name`), its messages word for word.
fn qualified_name_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else if !crate::validation::is_dns_subdomain(prefix) {
                errs.push(format!("prefix part {}", crate::validation::SUBDOMAIN_MSG));
            }
            *name
        }
        _ => {
            return vec![format!(
                "a qualified name {QUALIFIED_NAME_MSG} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )]
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > QUALIFIED_NAME_MAX {
        errs.push(format!(
            "name part must be no more than {QUALIFIED_NAME_MAX} characters"
        ));
    }
    let bytes = name.as_bytes();
    let edge = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_alphanumeric());
    let inner = bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !(inner && edge(bytes.first()) && edge(bytes.last())) {
        errs.push(format!("name part {QUALIFIED_NAME_MSG}"));
    }
    errs
}

/// What every Event must pass, through either API (the server's legacy checks).
fn legacy_causes(api: Api, ev: &Event) -> Vec<Cause> {
    let mut causes = Vec::new();
    let namespace = ev.namespace();
    let involved_ns = ev.involved.namespace.as_str();
    let mismatch = || {
        invalid(
            "involvedObject.namespace",
            involved_ns,
            "does not match event.namespace",
        )
    };
    match ev.event_time {
        None => {
            let refused = if involved_ns.is_empty() {
                !namespace.is_empty() && namespace != "default"
            } else {
                namespace != involved_ns
            };
            if refused {
                causes.push(mismatch());
            }
        }
        Some(_) => {
            if involved_ns.is_empty() && namespace != "default" && namespace != "kube-system" {
                causes.push(mismatch());
            }
            let field = api.reporting_field();
            if ev.reporting_controller.is_empty() {
                causes.push(required(field));
            }
            for msg in qualified_name_errors(&ev.reporting_controller) {
                causes.push(invalid(field, &ev.reporting_controller, &msg));
            }
            let too_long =
                |field: &str, max: usize| invalid(field, "", &format!("can have at most {max} characters"));
            if ev.reporting_instance.is_empty() {
                causes.push(required("reportingInstance"));
            }
            if ev.reporting_instance.len() > REPORTING_INSTANCE_MAX {
                causes.push(too_long("reportingInstance", REPORTING_INSTANCE_MAX));
            }
            if ev.action.is_empty() {
                causes.push(required("action"));
            }
            if ev.action.len() > ACTION_MAX {
                causes.push(too_long("action", ACTION_MAX));
            }
            if ev.reason.is_empty() {
                causes.push(required("reason"));
            }
            if ev.reason.len() > REASON_MAX {
                causes.push(too_long("reason", REASON_MAX));
            }
            if ev.message.len() > NOTE_MAX {
                causes.push(too_long("message", NOTE_MAX));
            }
        }
    }
    causes
}

fn series_causes(ev: &Event) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(series) = &ev.series {
        if series.count < 2 {
            causes.push(invalid("series.count", "", "should be at least 2"));
        }
        if series.last_observed.is_none() {
            causes.push(required("series.lastObservedTime"));
        }
    }
    causes
}

fn refuse(ev: &Event, causes: Vec<Cause>) -> Result<(), ApiError> {
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid("", "Event", ev.name(), causes))
    }
}

/// Checks a new Event as the API it is written through does: `v1` only by the legacy rules;
/// `events.k8s.io/v1` also wants `eventTime`, a `type` of `Normal` or `Warning`, a well-formed `series`
/// and none of the deprecated fields.
pub fn validate_create(api: Api, ev: &Event) -> Result<(), ApiError> {
    let mut causes = legacy_causes(api, ev);
    if api == Api::EventsV1 {
        causes.extend(series_causes(ev));
        if ev.event_time.is_none() {
            causes.push(required("eventTime"));
        }
        if ev.type_ != "Normal" && ev.type_ != "Warning" {
            causes.push(invalid("type", "", &format!("has invalid value: {}", ev.type_)));
        }
        let unset = |field: &str| invalid(field, "", "needs to be unset");
        if ev.first_timestamp.is_some() {
            causes.push(unset("firstTimestamp"));
        }
        if ev.last_timestamp.is_some() {
            causes.push(unset("lastTimestamp"));
        }
        if ev.count != 0 {
            causes.push(unset("count"));
        }
        if !ev.source_component.is_empty() || !ev.source_host.is_empty() {
            causes.push(unset("source"));
        }
    }
    refuse(ev, causes)
}

/// Checks a changed Event: `v1` by the legacy rules only; `events.k8s.io/v1` also refuses any change but
/// to `series` (validated when it changes) and metadata, in the order and wording of the real server
/// (which names `reason` twice).
pub fn validate_update(api: Api, new: &Event, old: &Event) -> Result<(), ApiError> {
    let mut causes = legacy_causes(api, new);
    if api == Api::EventsV1 {
        if new.series != old.series {
            causes.extend(series_causes(new));
        }
        let mut immutable = |field: &str, changed: bool, shown: String| {
            if changed {
                causes.push(cause(
                    "FieldValueInvalid",
                    field,
                    format!("Invalid value: {shown}: field is immutable"),
                ));
            }
        };
        let quoted = |s: &str| json!(s).to_string();
        immutable(
            "involvedObject",
            new.involved != old.involved,
            new.involved.go_value(),
        );
        immutable("reason", new.reason != old.reason, quoted(&new.reason));
        immutable("message", new.message != old.message, quoted(&new.message));
        immutable(
            "source",
            (&new.source_component, &new.source_host) != (&old.source_component, &old.source_host),
            go_struct(&[("Component", &new.source_component), ("Host", &new.source_host)]),
        );
        immutable(
            "firstTimestamp",
            new.first_timestamp != old.first_timestamp,
            go_time(new.first_timestamp),
        );
        immutable(
            "lastTimestamp",
            new.last_timestamp != old.last_timestamp,
            go_time(new.last_timestamp),
        );
        immutable("count", new.count != old.count, new.count.to_string());
        immutable("reason", new.reason != old.reason, quoted(&new.reason));
        immutable("type", new.type_ != old.type_, quoted(&new.type_));
        immutable(
            "eventTime",
            new.event_time != old.event_time,
            go_time(new.event_time),
        );
        immutable("action", new.action != old.action, quoted(&new.action));
        immutable(
            "related",
            new.related != old.related,
            new.related
                .as_ref()
                .map_or("null".to_string(), ObjectRef::go_value),
        );
        immutable(
            api.reporting_field(),
            new.reporting_controller != old.reporting_controller,
            quoted(&new.reporting_controller),
        );
        immutable(
            "reportingInstance",
            new.reporting_instance != old.reporting_instance,
            quoted(&new.reporting_instance),
        );
    }
    refuse(new, causes)
}

/// The stored field a field-selector label of `api` selects, `None` for a label that API does not
/// support (the server's answer: 400 `field label not supported: <label>`).
pub fn field_label(api: Api, label: &str) -> Option<&'static str> {
    const STORED: &[&str] = &[
        "metadata.name",
        "metadata.namespace",
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ];
    let stored = match api {
        Api::Core => label,
        Api::EventsV1 => match label {
            "reportingController" => "reportingComponent",
            other => match other.strip_prefix("regarding.") {
                Some(field) => {
                    return STORED
                        .iter()
                        .find(|s| **s == format!("involvedObject.{field}"))
                        .copied()
                }
                None if other.starts_with("involvedObject.") || other == "reportingComponent" => return None,
                None => other,
            },
        },
    };
    STORED.iter().find(|s| **s == stored).copied()
}

/// The value of a stored field ([`field_label`]) of a stored (`v1`) Event: `source` is the source
/// component, or the reporting controller when there is none.
pub fn selectable(stored: &Value, field: &str) -> String {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    match field {
        "metadata.name" => s(&stored["metadata"]["name"]),
        "metadata.namespace" => s(&stored["metadata"]["namespace"]),
        "source" => {
            let component = s(&stored["source"]["component"]);
            if component.is_empty() {
                s(&stored["reportingComponent"])
            } else {
                component
            }
        }
        other => match other.strip_prefix("involvedObject.") {
            Some(key) => s(&stored["involvedObject"][key]),
            None => s(&stored[other]),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_style() -> Value {
        json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "ns"},
            "eventTime": "2026-11-28T01:22:15.564368Z", "reportingController": "kok",
            "reportingInstance": "kok-1", "action": "Reconcile", "reason": "Applied", "type": "Normal",
            "regarding": {"kind": "Cluster", "namespace": "ns", "name": "a", "uid": "u", "apiVersion": "kok.dev/v1alpha1"},
            "note": "applied"})
    }

    #[test]
    fn an_event_written_through_one_api_reads_through_the_other_and_back_unchanged() {
        let core = convert(&new_style(), "v1").unwrap();
        assert_eq!(core["involvedObject"]["name"], "a");
        assert_eq!(core["message"], "applied");
        assert_eq!(core["reportingComponent"], "kok");
        assert_eq!(core["source"], json!({}));
        assert_eq!(core["firstTimestamp"], Value::Null);
        assert!(core.get("count").is_none(), "count 0 is not written");
        let back = convert(&core, "events.k8s.io/v1").unwrap();
        let mut want = new_style();
        want["deprecatedSource"] = json!({});
        want["deprecatedFirstTimestamp"] = Value::Null;
        want["deprecatedLastTimestamp"] = Value::Null;
        assert_eq!(back, want);
    }

    #[test]
    fn times_are_written_to_the_second_and_micro_times_to_the_microsecond() {
        let mut ev = new_style();
        ev["eventTime"] = json!("2026-11-28T01:22:15Z");
        let core = convert(&ev, "v1").unwrap();
        assert_eq!(core["eventTime"], "2026-11-28T01:22:15.000000Z");
        let mut old = core.clone();
        old["firstTimestamp"] = json!("2026-11-28T01:22:15.9Z");
        assert_eq!(
            convert(&old, "v1").unwrap()["firstTimestamp"],
            "2026-11-28T01:22:15Z"
        );
    }

    #[test]
    fn the_reporting_controller_is_named_after_the_api_in_errors() {
        let mut ev = Event::read(Api::EventsV1, &new_style()).unwrap();
        ev.reporting_controller = "Not Qualified!".into();
        let core = validate_create(Api::Core, &ev).unwrap_err();
        assert_eq!(core.details.causes[0].field, "reportingComponent");
        let new = validate_create(Api::EventsV1, &ev).unwrap_err();
        assert_eq!(new.details.causes[0].field, "reportingController");
    }

    #[test]
    fn qualified_names_are_checked_part_by_part() {
        assert!(qualified_name_errors("kok.dev/controller").is_empty());
        assert_eq!(qualified_name_errors("").len(), 2);
        assert_eq!(qualified_name_errors("/x"), vec!["prefix part must be non-empty"]);
        assert!(qualified_name_errors("a/b/c")[0].starts_with("a qualified name must consist"));
    }

    #[test]
    fn each_api_selects_by_its_own_labels() {
        assert_eq!(
            field_label(Api::Core, "involvedObject.uid"),
            Some("involvedObject.uid")
        );
        assert_eq!(field_label(Api::Core, "regarding.name"), None);
        assert_eq!(
            field_label(Api::EventsV1, "regarding.name"),
            Some("involvedObject.name")
        );
        assert_eq!(field_label(Api::EventsV1, "involvedObject.name"), None);
        assert_eq!(
            field_label(Api::EventsV1, "reportingController"),
            Some("reportingComponent")
        );
        let core = convert(&new_style(), "v1").unwrap();
        assert_eq!(
            selectable(&core, "source"),
            "kok",
            "no source: the reporting controller"
        );
        assert_eq!(selectable(&core, "involvedObject.kind"), "Cluster");
    }

    #[test]
    fn go_values_print_like_the_server_prints_them() {
        assert_eq!(
            go_time(Some("2026-11-28T01:22:15.5643Z".parse().unwrap())),
            "2026-11-28 01:22:15.5643 +0000 UTC"
        );
        assert_eq!(go_time(None), "0001-01-01 00:00:00 +0000 UTC");
        let r = ObjectRef {
            kind: "Pod".into(),
            name: "p".into(),
            ..ObjectRef::default()
        };
        assert_eq!(
            r.go_value(),
            r#"{"Kind":"Pod","Namespace":"","Name":"p","UID":"","APIVersion":"","ResourceVersion":"","FieldPath":""}"#
        );
    }
}
