//! API semantics on top of the store: create, read, update, patch, delete, and the Job controls.
//!
//! Everything here runs under the server's single state lock and is synchronous, so each request
//! sees and produces a consistent store.

use std::cell::RefCell;
use std::sync::Arc;

use axum::body::Bytes;
use serde_json::{json, Map, Value};

use crate::apply::{self, Scope};
use crate::errors::{cause, ApiError};
use crate::events;
use crate::patch::{self, PatchKind};
use crate::resources::{Registry, ResourceInfo, ResourceKey};
use crate::schema::{self, FieldValidation};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{label, object_key, ObjectKey, Store, Stored};
use crate::util;
use crate::validation;

/// Finalizer the server adds while a foreground deletion waits for dependents.
pub const FOREGROUND: &str = "foregroundDeletion";

/// The store plus the registry it defines (CRDs are objects in the store).
#[derive(Debug)]
pub struct State {
    /// Objects and events.
    pub store: Store,
    /// Served resources.
    pub registry: Registry,
}

/// Who writes and how.
#[derive(Debug, Clone, Default)]
pub struct WriteCtx {
    /// Namespace from the URL (None for cluster-scoped or all-namespace requests).
    pub namespace: Option<String>,
    /// Field manager for managedFields.
    pub manager: String,
    /// `dryRun=All`: compute, validate, but store nothing.
    pub dry_run: bool,
    /// `fieldValidation`: what unknown fields of custom resources do.
    pub field_validation: FieldValidation,
    /// Warnings for the response's `Warning` headers.
    pub warnings: RefCell<Vec<String>>,
}

/// How a DELETE cascades.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// Owner goes now; dependents are collected after.
    Background,
    /// Owner stays (with the foregroundDeletion finalizer) until its dependents are gone.
    Foreground,
    /// Dependents lose their ownerReference and stay.
    Orphan,
}

/// Parsed DeleteOptions.
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    /// `propagationPolicy` (or `orphanDependents`); None means the resource's default.
    pub propagation: Option<Propagation>,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
}

impl DeleteOpts {
    /// Reads DeleteOptions from a body and query parameters.
    pub fn parse(body: &Value, query_policy: Option<&str>) -> Result<DeleteOpts, ApiError> {
        let policy = body["propagationPolicy"].as_str().or(query_policy);
        let propagation = match policy {
            Some("Background") => Some(Propagation::Background),
            Some("Foreground") => Some(Propagation::Foreground),
            Some("Orphan") => Some(Propagation::Orphan),
            Some(other) => {
                return Err(ApiError::invalid(
                    "",
                    "DeleteOptions",
                    "",
                    vec![cause(
                        "FieldValueNotSupported",
                        "propagationPolicy",
                        format!("Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\""),
                    )],
                ))
            }
            None if body["orphanDependents"] == Value::Bool(true) => Some(Propagation::Orphan),
            None => None,
        };
        Ok(DeleteOpts {
            propagation,
            uid: body
                .pointer("/preconditions/uid")
                .and_then(Value::as_str)
                .map(str::to_string),
            resource_version: body
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str)
                .map(str::to_string),
        })
    }
}

/// One page of a list.
#[derive(Debug)]
pub struct Page {
    /// Matching objects, as stored.
    pub items: Vec<Arc<Stored>>,
    /// The list's resourceVersion.
    pub resource_version: u64,
    /// Continue token when more items remain.
    pub continue_token: Option<String>,
    /// How many items remain after this page, when the list has no selector (the server counts them
    /// only then).
    pub remaining: Option<usize>,
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
}

fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|f| f.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

fn set_finalizers(obj: &mut Value, list: Vec<String>) {
    if list.is_empty() {
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("finalizers");
        }
    } else {
        obj["metadata"]["finalizers"] = json!(list);
    }
}

/// `new` with the status an update may not change taken from `old`: through the status subresource
/// everything but the status (and managed fields) is `old`'s; otherwise a resource with a status keeps
/// `old`'s.
fn keep_status(info: &ResourceInfo, old: &Value, mut new: Value, status: bool) -> Value {
    if status {
        let st = new.get("status").cloned();
        let mut keep = old.clone();
        match st {
            Some(s) => keep["status"] = s,
            None => {
                if let Some(m) = keep.as_object_mut() {
                    m.remove("status");
                }
            }
        }
        if let Some(mf) = new.pointer("/metadata/managedFields") {
            keep["metadata"]["managedFields"] = mf.clone();
        }
        new = keep;
    } else if info.status {
        match old.get("status") {
            Some(s) => new["status"] = s.clone(),
            None => {
                if let Some(m) = new.as_object_mut() {
                    m.remove("status");
                }
            }
        }
    }
    new
}

/// Refuses an update of `old` whose UID precondition names another object, or that adds finalizers to an
/// object being deleted.
fn check_preconditions(info: &ResourceInfo, old: &Value, new: &Value) -> Result<(), ApiError> {
    let old_uid = meta_str(old, "uid").unwrap_or("");
    if let Some(uid) = meta_str(new, "uid").filter(|u| !u.is_empty() && *u != old_uid) {
        let name = meta_str(old, "name").unwrap_or("");
        return Err(ApiError::conflict(
            &info.group,
            &info.resource,
            name,
            &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {old_uid}"),
        ));
    }
    if old.pointer("/metadata/deletionTimestamp").is_some() {
        let before = finalizers(old);
        if finalizers(new).iter().any(|f| !before.contains(f)) {
            let name = meta_str(old, "name").unwrap_or("");
            return Err(ApiError::invalid(
                &info.group,
                &info.kind,
                name,
                vec![cause(
                    "FieldValueForbidden",
                    "metadata.finalizers",
                    "Forbidden: no new finalizers can be added if the object is being deleted",
                )],
            ));
        }
    }
    Ok(())
}

/// Copies the metadata the server owns (identity, creation, generation, deletion) from `old` onto `new`.
fn keep_identity(old: &Value, new: &mut Value) {
    for f in [
        "uid",
        "creationTimestamp",
        "generation",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "namespace",
        "name",
    ] {
        match old["metadata"].get(f) {
            Some(v) => new["metadata"][f] = v.clone(),
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove(f);
                }
            }
        }
    }
}

/// Sets the managed fields of an update: an apply's own (`managed`), or the request's manager recorded as
/// owner of what it changed; managed fields left null are dropped.
fn record_managers(
    info: &ResourceInfo,
    ctx: &WriteCtx,
    old: &Value,
    new: &mut Value,
    status: bool,
    managed: Option<Value>,
) {
    let now = util::now();
    match managed {
        Some(mf) => new["metadata"]["managedFields"] = mf,
        None => apply::record_update(
            Some(old),
            new,
            &ctx.manager,
            &info.api_version(),
            write_scope(status, info.status),
            &now,
        ),
    }
    if let Some(m) = new["metadata"].as_object_mut() {
        if m.get("managedFields").is_some_and(Value::is_null) {
            m.remove("managedFields");
        }
    }
}

/// The fields a write owns: the status alone through the status subresource, all but the status for a
/// resource that has one, the whole object otherwise.
fn write_scope(status_subresource: bool, has_status: bool) -> Scope {
    match (status_subresource, has_status) {
        (true, _) => Scope::Status,
        (false, true) => Scope::Main,
        (false, false) => Scope::Whole,
    }
}

/// The 409 of an apply to object `name` whose fields other managers own, one cause per field.
fn apply_conflict(info: &ResourceInfo, name: &str, c: Vec<apply::Conflict>) -> ApiError {
    let n = c.len();
    let mut e = if n == 1 {
        ApiError::new(
            409,
            format!(
                "Apply failed with 1 conflict: conflict with \"{}\" using {}: {}",
                c[0].manager, c[0].api_version, c[0].field
            ),
        )
    } else {
        let lines: Vec<String> = c.iter().map(|x| format!("- {}", x.field)).collect();
        ApiError::new(
            409,
            format!(
                "Apply failed with {n} conflicts: conflicts with \"{}\" using {}:\n{}",
                c[0].manager,
                c[0].api_version,
                lines.join("\n")
            ),
        )
    }
    .on(&info.group, &info.resource, name);
    e.details.causes = c
        .iter()
        .map(|x| {
            cause(
                "FieldManagerConflict",
                &x.field,
                format!("conflict with \"{}\" using {}", x.manager, x.api_version),
            )
        })
        .collect();
    e
}

/// What an apply that creates object `name` applies over: its apiVersion, kind, name, namespace and
/// `generateName`.
fn apply_base(info: &ResourceInfo, ctx: &WriteCtx, name: &str, applied: &Value) -> Value {
    let mut base = json!({"apiVersion": info.api_version(), "kind": info.kind,
        "metadata": {"name": name}});
    if let Some(ns) = meta_str(applied, "namespace").or(ctx.namespace.as_deref()) {
        base["metadata"]["namespace"] = json!(ns);
    }
    for f in ["generateName"] {
        if let Some(v) = applied["metadata"].get(f) {
            base["metadata"][f] = v.clone();
        }
    }
    base
}

/// The object as served at a resource's version (storage shares one object across versions; an Event is
/// converted between its two APIs, see [`crate::events`]).
pub fn served(info: &ResourceInfo, obj: &Arc<Value>) -> Arc<Value> {
    let version = info.api_version();
    if obj["apiVersion"].as_str() == Some(version.as_str()) {
        return obj.clone();
    }
    if obj["kind"] == "Event" {
        if let Some(converted) = events::convert(obj, &version) {
            return Arc::new(converted);
        }
    }
    let mut o = (**obj).clone();
    o["apiVersion"] = json!(version);
    Arc::new(o)
}

/// [`served`] of an owned object.
pub fn served_value(info: &ResourceInfo, obj: Value) -> Value {
    if obj.is_null() {
        return obj;
    }
    Arc::unwrap_or_clone(served(info, &Arc::new(obj)))
}

/// The object as its storage keeps it: an `events.k8s.io` Event in its `v1` form.
fn storage_form(info: &ResourceInfo, obj: Value) -> Value {
    if info.key().group == info.group {
        return obj;
    }
    events::convert(&obj, "v1").unwrap_or(obj)
}

/// A stored object's JSON as served at a resource's version: as stored when the versions agree.
pub fn served_json(info: &ResourceInfo, obj: &Stored) -> Bytes {
    if obj.api_version == info.api_version() {
        return obj.json.clone();
    }
    Bytes::from(served(info, &Arc::new(obj.value())).to_string())
}

impl Page {
    /// The items as served at `info`'s version, parsed.
    pub fn values(&self, info: &ResourceInfo) -> Vec<Arc<Value>> {
        self.items
            .iter()
            .map(|o| served(info, &Arc::new(o.value())))
            .collect()
    }
}

fn spec_changed(info: &ResourceInfo, old: &Value, new: &Value) -> bool {
    let skip =
        |k: &str| k == "metadata" || (info.status && k == "status") || k == "apiVersion" || k == "kind";
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else {
        return old != new;
    };
    o.iter()
        .filter(|(k, _)| !skip(k))
        .any(|(k, v)| n.get(k) != Some(v))
        || n.iter()
            .filter(|(k, _)| !skip(k))
            .any(|(k, _)| !o.contains_key(k))
}

/// Whether an update changes nothing but times: the managers' `time` and the resourceVersion (a
/// no-op write keeps the object as it is, resourceVersion included). Compares in place: an update
/// is checked on every write, and copying both objects to strip the times cost more than the rest
/// of the comparison.
fn same_but_times(a: &Value, b: &Value) -> bool {
    equal_except(a, b, &[], |key, a, b| match key {
        "metadata" => equal_except(a, b, &["resourceVersion"], |key, a, b| match (key, a, b) {
            ("managedFields", Value::Array(a), Value::Array(b)) => {
                a.len() == b.len()
                    && a.iter()
                        .zip(b)
                        .all(|(a, b)| equal_except(a, b, &["time"], |_, a, b| a == b))
            }
            _ => a == b,
        }),
        _ => a == b,
    })
}

/// Whether two values are equal, fields named in `skip` aside; `field` compares the other fields of
/// two objects. Anything but two objects is compared as it is.
fn equal_except(a: &Value, b: &Value, skip: &[&str], field: impl Fn(&str, &Value, &Value) -> bool) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let kept = |m: &Map<String, Value>| m.keys().filter(|k| !skip.contains(&k.as_str())).count();
    kept(a) == kept(b)
        && a.iter()
            .filter(|(k, _)| !skip.contains(&k.as_str()))
            .all(|(k, va)| b.get(k).is_some_and(|vb| field(k, va, vb)))
}

fn parse_continue(token: &str) -> Option<(u64, ObjectKey)> {
    let raw = String::from_utf8(util::unhex(token)?).ok()?;
    let mut parts = raw.splitn(3, '\u{0}');
    let rv = parts.next()?.parse().ok()?;
    Some((rv, (parts.next()?.to_string(), parts.next()?.to_string())))
}

fn make_continue(rv: u64, key: &ObjectKey) -> String {
    util::hex(format!("{rv}\u{0}{}\u{0}{}", key.0, key.1).as_bytes())
}

impl State {
    /// A state with the built-in kinds and no objects.
    pub fn new(window: usize) -> State {
        State {
            store: Store::new(window),
            registry: Registry::builtin(),
        }
    }

    fn ns_key(info: &ResourceInfo, ns: Option<&str>, name: &str) -> ObjectKey {
        (
            if info.namespaced {
                ns.unwrap_or("").to_string()
            } else {
                String::new()
            },
            name.to_string(),
        )
    }

    /// Reads one object.
    pub fn get(&self, info: &ResourceInfo, ns: Option<&str>, name: &str) -> Result<Arc<Value>, ApiError> {
        self.store
            .get(&info.key(), &Self::ns_key(info, ns, name))
            .map(|o| served(info, &o))
            .ok_or_else(|| ApiError::not_found(&info.group, &info.resource, name))
    }

    /// Whether the object exists, without reading it.
    pub fn exists(&self, info: &ResourceInfo, ns: Option<&str>, name: &str) -> bool {
        self.store.contains(&info.key(), &Self::ns_key(info, ns, name))
    }

    /// Lists objects matching selectors, one page at a time.
    pub fn list(
        &self,
        info: &ResourceInfo,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        limit: Option<usize>,
        cont: Option<&str>,
    ) -> Result<Page, ApiError> {
        let key = info.key();
        let ns = if info.namespaced { ns } else { None };
        let selected = |key: &ObjectKey, o: &Stored| {
            labels.matches_with(|k| label(&o.labels, k)) && fields.matches_stored(key, o)
        };
        if let (Some(name), None) = (fields.pinned_name(), cont) {
            if ns.is_some() || !info.namespaced {
                let okey = Self::ns_key(info, ns, name);
                let items = self
                    .store
                    .stored(&key, &okey)
                    .filter(|o| selected(&okey, o))
                    .map(|o| vec![o.clone()])
                    .unwrap_or_default();
                return Ok(Page {
                    items,
                    resource_version: self.store.resource_version(),
                    continue_token: None,
                    remaining: None,
                });
            }
        }
        let (rv, iter) = match cont {
            Some(token) => {
                let (rv, after) = parse_continue(token)
                    .ok_or_else(|| ApiError::bad_request(format!("invalid continue token {token:?}")))?;
                if rv < self.store.compacted(&key) {
                    return Err(ApiError::gone(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                    ));
                }
                (rv, self.store.list_after(&key, ns, &after))
            }
            None => (self.store.resource_version(), self.store.list(&key, ns)),
        };
        let mut items = Vec::new();
        let mut continue_token = None;
        let mut filtered = iter.filter(|(key, o)| selected(key, o));
        let max = limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let mut last = None;
        for (key, o) in filtered.by_ref() {
            items.push(o.clone());
            last = Some(key);
            if items.len() == max {
                break;
            }
        }
        let mut remaining = None;
        if items.len() == max && filtered.next().is_some() {
            if let Some(last) = last {
                continue_token = Some(make_continue(rv, last));
            }
            if labels.is_empty() && fields.is_empty() {
                remaining = Some(1 + filtered.count());
            }
        }
        Ok(Page {
            items,
            resource_version: rv,
            continue_token,
            remaining,
        })
    }

    /// Creates an object (POST).
    pub fn create(&mut self, info: &ResourceInfo, ctx: &WriteCtx, mut obj: Value) -> Result<Value, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request("the request body must be an object"));
        }
        self.check_kind(info, &obj)?;
        obj["apiVersion"] = json!(info.api_version());
        obj["kind"] = json!(info.kind);
        if !obj["metadata"].is_object() {
            obj["metadata"] = json!({});
        }
        self.place_in_namespace(info, ctx, &mut obj)?;
        if meta_str(&obj, "name").unwrap_or("").is_empty() {
            if let Some(prefix) = meta_str(&obj, "generateName").map(str::to_string) {
                let ns = meta_str(&obj, "namespace").unwrap_or("").to_string();
                let mut name = format!("{prefix}{}", util::name_suffix());
                while self.store.contains(&info.key(), &(ns.clone(), name.clone())) {
                    name = format!("{prefix}{}", util::name_suffix());
                }
                obj["metadata"]["name"] = json!(name);
            }
        }
        let name = meta_str(&obj, "name").unwrap_or("").to_string();
        apply_defaults(info, &mut obj);
        self.check_schema(info, ctx, None, &mut obj)?;
        if let Some(api) = events::Api::of(&info.group, &info.resource) {
            let event = events::Event::read(api, &obj)?;
            events::validate_create(api, &event)?;
            obj = event.write(api);
        }
        validation::validate_meta(info, &obj)?;
        validate_kind(info, None, &obj)?;
        let key = object_key(&obj);
        if self.store.contains(&info.key(), &key) {
            return Err(ApiError::already_exists(&info.group, &info.resource, &name));
        }
        let now = util::now();
        let meta = &mut obj["metadata"];
        meta["uid"] = json!(util::uid());
        meta["creationTimestamp"] = json!(now);
        for f in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ] {
            if let Some(m) = meta.as_object_mut() {
                m.remove(f);
            }
        }
        if info.generation {
            meta["generation"] = json!(1);
        } else if let Some(m) = meta.as_object_mut() {
            m.remove("generation");
        }
        let has_managed = obj
            .pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        if !has_managed {
            let scope = if info.status { Scope::Main } else { Scope::Whole };
            apply::record_update(None, &mut obj, &ctx.manager, &info.api_version(), scope, &now);
        }
        if info.resource == "jobs" {
            job_labels(&mut obj);
        }
        if ctx.dry_run {
            return Ok(obj);
        }
        Ok(self.commit(info, obj))
    }

    /// Prunes and validates a custom resource against its schema, or prunes the fields a built-in
    /// kind does not have; warnings go to `ctx`.
    fn check_schema(
        &self,
        info: &ResourceInfo,
        ctx: &WriteCtx,
        old: Option<&Value>,
        obj: &mut Value,
    ) -> Result<(), ApiError> {
        let Some(schema) = info.schema.as_deref().filter(|_| info.custom) else {
            let unknown = crate::typed::prune_unknown(&info.api_version(), &info.kind, obj);
            let warnings = schema::unknown_fields(&info.kind, &info.version, &unknown, ctx.field_validation)?;
            ctx.warnings.borrow_mut().extend(warnings);
            return Ok(());
        };
        let name = meta_str(obj, "name").unwrap_or("").to_string();
        let target = schema::Target {
            schema,
            group: &info.group,
            version: &info.version,
            kind: &info.kind,
        };
        let warnings = schema::validate(&target, &name, old, obj, ctx.field_validation)?;
        ctx.warnings.borrow_mut().extend(warnings);
        Ok(())
    }

    fn check_kind(&self, info: &ResourceInfo, obj: &Value) -> Result<(), ApiError> {
        if let Some(kind) = obj["kind"].as_str() {
            if kind != info.kind {
                return Err(ApiError::bad_request(format!(
                    "the kind in the request body ({kind}) does not match the resource ({}, kind {})",
                    info.resource, info.kind
                )));
            }
        }
        if let Some(av) = obj["apiVersion"].as_str() {
            let group = av.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
            if group != info.group {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({av}) does not match the expected API version ({})",
                    info.api_version()
                )));
            }
        }
        Ok(())
    }

    fn place_in_namespace(
        &self,
        info: &ResourceInfo,
        ctx: &WriteCtx,
        obj: &mut Value,
    ) -> Result<(), ApiError> {
        if !info.namespaced {
            if let Some(m) = obj["metadata"].as_object_mut() {
                m.remove("namespace");
            }
            return Ok(());
        }
        let url_ns = ctx.namespace.clone().unwrap_or_default();
        match meta_str(obj, "namespace") {
            Some(ns) if !ns.is_empty() && ns != url_ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ))
            }
            _ => obj["metadata"]["namespace"] = json!(url_ns),
        }
        let nskey = ResourceKey {
            group: String::new(),
            resource: "namespaces".into(),
        };
        match self.store.get(&nskey, &(String::new(), url_ns.clone())) {
            None => Err(ApiError::not_found("", "namespaces", &url_ns)),
            Some(n) if n.pointer("/metadata/deletionTimestamp").is_some() => Err(ApiError::new(
                403,
                format!("{} \"{}\" is forbidden: unable to create new content in namespace {url_ns} because it is being terminated", info.resource, meta_str(obj, "name").unwrap_or("")),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Replaces an object (PUT), on the main resource or the status subresource.
    pub fn update(
        &mut self,
        info: &ResourceInfo,
        ctx: &WriteCtx,
        name: &str,
        mut body: Value,
        status: bool,
    ) -> Result<Value, ApiError> {
        let key = Self::ns_key(info, ctx.namespace.as_deref(), name);
        let old = self
            .store
            .get(&info.key(), &key)
            .map(|o| served(info, &o))
            .ok_or_else(|| ApiError::not_found(&info.group, &info.resource, name))?;
        self.check_kind(info, &body)?;
        if let Some(n) = meta_str(&body, "name") {
            if n != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
        }
        match meta_str(&body, "resourceVersion") {
            Some(rv) if !rv.is_empty() && Some(rv) != meta_str(&old, "resourceVersion") => {
                return Err(ApiError::stale(&info.group, &info.resource, name));
            }
            Some(rv) if !rv.is_empty() => {}
            _ if info.custom => {
                return Err(ApiError::invalid(
                    &info.group,
                    &info.kind,
                    name,
                    vec![cause(
                        "FieldValueInvalid",
                        "metadata.resourceVersion",
                        "Invalid value: 0x0: must be specified for an update",
                    )],
                ))
            }
            _ => {}
        }
        if !body["metadata"].is_object() {
            body["metadata"] = json!({});
        }
        body["metadata"]["managedFields"] = old["metadata"]["managedFields"].clone();
        self.finish_update(info, ctx, &old, body, status, None)
    }

    /// Patches an object; apply patches create it when absent.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &mut self,
        info: &ResourceInfo,
        ctx: &WriteCtx,
        name: &str,
        kind: PatchKind,
        body: &[u8],
        status: bool,
        force: bool,
    ) -> Result<Value, ApiError> {
        let key = Self::ns_key(info, ctx.namespace.as_deref(), name);
        let old = self.store.get(&info.key(), &key).map(|o| served(info, &o));
        if kind != PatchKind::Apply {
            let old = old.ok_or_else(|| ApiError::not_found(&info.group, &info.resource, name))?;
            let candidate = patch::apply_patch(kind, &old, body)?;
            if meta_str(&candidate, "resourceVersion") != meta_str(&old, "resourceVersion") {
                return Err(ApiError::stale(&info.group, &info.resource, name));
            }
            return self.finish_update(info, ctx, &old, candidate, status, None);
        }
        let applied = self.read_applied(info, name, body, old.as_ref())?;
        let scope = write_scope(status, info.status);
        let now = util::now();
        // The configuration applied over `base` by the request's manager.
        let apply_over = |base: &Value| {
            apply::server_side_apply(
                base,
                &applied,
                &ctx.manager,
                force,
                &info.api_version(),
                scope,
                &now,
            )
            .map_err(|c| apply_conflict(info, name, c))
        };
        match old {
            Some(old) => {
                let mut merged = apply_over(&old)?;
                let mf = merged["metadata"]["managedFields"].clone();
                merged["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
                self.finish_update(info, ctx, &old, merged, status, Some(mf))
            }
            None => {
                if status {
                    return Err(ApiError::not_found(&info.group, &info.resource, name));
                }
                let mut obj = apply_over(&apply_base(info, ctx, name, &applied))?;
                if info.status {
                    if let Some(m) = obj.as_object_mut() {
                        m.remove("status");
                    }
                }
                self.create(info, ctx, obj)
            }
        }
    }

    /// The configuration of an apply patch to object `name` (`old` when it exists): decoded, and refused
    /// when it is not an object of this kind and name or names a resourceVersion other than `old`'s.
    fn read_applied(
        &self,
        info: &ResourceInfo,
        name: &str,
        body: &[u8],
        old: Option<&Arc<Value>>,
    ) -> Result<Value, ApiError> {
        let applied: Value = serde_json::from_slice(body)
            .or_else(|_| serde_yaml::from_slice(body))
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
        if !applied.is_object()
            || applied["apiVersion"].as_str().is_none()
            || applied["kind"].as_str().is_none()
        {
            return Err(ApiError::bad_request(
                "apply patches must be objects with apiVersion, kind and metadata.name",
            ));
        }
        self.check_kind(info, &applied)?;
        if let Some(n) = meta_str(&applied, "name") {
            if n != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
        }
        if let Some(rv) = meta_str(&applied, "resourceVersion") {
            if old.is_some_and(|o| meta_str(o, "resourceVersion") != Some(rv)) {
                return Err(ApiError::stale(&info.group, &info.resource, name));
            }
        }
        Ok(applied)
    }

    /// Writes `new` over `old` (an update, a patch, or an apply with its `managed` fields): keeps what the
    /// request may not change, checks and validates it, bumps the generation, records its manager, and
    /// stores it unless nothing but times changed or it is a dry run.
    fn finish_update(
        &mut self,
        info: &ResourceInfo,
        ctx: &WriteCtx,
        old: &Arc<Value>,
        new: Value,
        status: bool,
        managed: Option<Value>,
    ) -> Result<Value, ApiError> {
        if !new.is_object() {
            return Err(ApiError::bad_request("the request body must be an object"));
        }
        let mut new = keep_status(info, old, new, status);
        new["apiVersion"] = json!(info.api_version());
        new["kind"] = json!(info.kind);
        if !new["metadata"].is_object() {
            new["metadata"] = json!({});
        }
        check_preconditions(info, old, &new)?;
        keep_identity(old, &mut new);
        if info.resource == "secrets" {
            secret_string_data(&mut new);
        }
        self.validate_update(info, ctx, old, &mut new)?;
        if info.generation && spec_changed(info, old, &new) {
            let g = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            new["metadata"]["generation"] = json!(g + 1);
        }
        record_managers(info, ctx, old, &mut new, status, managed);
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
        if same_but_times(&new, old) {
            return Ok((*served(info, old)).clone());
        }
        if ctx.dry_run {
            return Ok(new);
        }
        Ok(self.commit(info, new))
    }

    /// Checks an update of `old` to `new` against the schema, the Event rules (normalising an Event),
    /// the metadata rules, the immutable fields and the kind's own rules.
    fn validate_update(
        &self,
        info: &ResourceInfo,
        ctx: &WriteCtx,
        old: &Arc<Value>,
        new: &mut Value,
    ) -> Result<(), ApiError> {
        self.check_schema(info, ctx, Some(old), new)?;
        if let Some(api) = events::Api::of(&info.group, &info.resource) {
            let event = events::Event::read(api, new)?;
            events::validate_update(api, &event, &events::Event::read(api, old)?)?;
            *new = event.write(api);
        }
        validation::validate_meta(info, new)?;
        validation::validate_immutable(info, old, new)?;
        validate_kind(info, Some(old), new)?;
        Ok(())
    }

    /// Stores a written object (in its storage form) and runs what follows: removal once finalizers are
    /// gone, CRD serving. Returns it as served at `info`'s version.
    fn commit(&mut self, info: &ResourceInfo, obj: Value) -> Value {
        let key = info.key();
        let obj = storage_form(info, obj);
        if obj.pointer("/metadata/deletionTimestamp").is_some() && finalizers(&obj).is_empty() {
            let okey = object_key(&obj);
            self.store.put(&key, obj);
            return served_value(info, self.remove_now(info, &okey).unwrap_or(Value::Null));
        }
        let stored = self.store.put(&key, obj);
        if info.resource == "customresourcedefinitions" && info.group == "apiextensions.k8s.io" {
            self.registry.install_crd(&stored);
        }
        served_value(info, stored)
    }

    /// Removes an object now and runs garbage collection for it.
    fn remove_now(&mut self, info: &ResourceInfo, key: &ObjectKey) -> Option<Value> {
        let last = self.store.remove(&info.key(), key)?;
        if info.group == "apiextensions.k8s.io" && info.resource == "customresourcedefinitions" {
            if let Some(served) = crate::resources::infos_from_crd(&last).first() {
                let rk = served.key();
                self.store.remove_all(&rk);
                self.registry.remove_key(&rk);
            }
        }
        if info.group.is_empty() && info.resource == "namespaces" {
            let ns = key.1.clone();
            let namespaced: Vec<Arc<ResourceInfo>> = self
                .registry
                .groups()
                .iter()
                .flat_map(|g| {
                    let vs = self.registry.versions(g);
                    vs.first()
                        .map(|v| self.registry.resources(g, v))
                        .unwrap_or_default()
                })
                .filter(|i| i.namespaced)
                .collect();
            for ri in namespaced {
                let keys: Vec<ObjectKey> = self
                    .store
                    .list(&ri.key(), Some(&ns))
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in keys {
                    self.store.remove(&ri.key(), &k);
                }
            }
        }
        if let Some(uid) = meta_str(&last, "uid") {
            let uid = uid.to_string();
            self.collect_dependents(&uid, Propagation::Background);
        }
        self.release_foreground_owners(&last);
        Some(last)
    }

    fn info_for(&self, key: &ResourceKey) -> Option<Arc<ResourceInfo>> {
        let versions = self.registry.versions_of(key);
        versions.into_iter().next()
    }

    /// Deletes or un-owns every dependent of a removed (or foreground-deleting) owner.
    fn collect_dependents(&mut self, owner_uid: &str, policy: Propagation) {
        for (rk, okey) in self.store.dependents_of(owner_uid) {
            let Some(dep) = self.store.get(&rk, &okey) else {
                continue;
            };
            let Some(info) = self.info_for(&rk) else { continue };
            let other_live = dep
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|r| r["uid"].as_str())
                .any(|u| u != owner_uid && self.store.by_uid(u).is_some());
            if other_live || policy == Propagation::Orphan {
                self.drop_owner_ref(&info, &dep, owner_uid);
            } else {
                let child = if policy == Propagation::Foreground {
                    Propagation::Foreground
                } else {
                    Propagation::Background
                };
                self.delete_object(&info, &okey, child);
            }
        }
    }

    fn drop_owner_ref(&mut self, info: &ResourceInfo, dep: &Value, owner_uid: &str) {
        let mut d = dep.clone();
        if let Some(Value::Array(refs)) = d.pointer_mut("/metadata/ownerReferences") {
            refs.retain(|r| r["uid"].as_str() != Some(owner_uid));
            if refs.is_empty() {
                if let Some(m) = d["metadata"].as_object_mut() {
                    m.remove("ownerReferences");
                }
            }
        }
        self.commit(info, d);
    }

    /// When a dependent goes, an owner waiting in foreground deletion may now go too.
    fn release_foreground_owners(&mut self, removed: &Value) {
        let owners: Vec<String> = removed
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|r| r["uid"].as_str().map(str::to_string))
            .collect();
        for uid in owners {
            self.try_finish_foreground(&uid);
        }
    }

    fn try_finish_foreground(&mut self, uid: &str) {
        let Some((rk, okey)) = self.store.by_uid(uid).cloned() else {
            return;
        };
        let Some(owner) = self.store.get(&rk, &okey) else {
            return;
        };
        let fins = finalizers(&owner);
        if owner.pointer("/metadata/deletionTimestamp").is_none() || !fins.iter().any(|f| f == FOREGROUND) {
            return;
        }
        if !self.store.dependents_of(uid).is_empty() {
            return;
        }
        let Some(info) = self.info_for(&rk) else { return };
        let mut o = (*owner).clone();
        set_finalizers(&mut o, fins.into_iter().filter(|f| f != FOREGROUND).collect());
        self.commit(&info, o);
    }

    /// Deletes one object by policy: finalizers keep it (with deletionTimestamp) until cleared.
    fn delete_object(&mut self, info: &ResourceInfo, key: &ObjectKey, policy: Propagation) -> Option<Value> {
        let obj = self.store.get(&info.key(), key)?;
        let uid = meta_str(&obj, "uid").unwrap_or("").to_string();
        let fins = finalizers(&obj);
        match policy {
            Propagation::Orphan => {
                self.collect_dependents(&uid, Propagation::Orphan);
            }
            Propagation::Foreground if !self.store.dependents_of(&uid).is_empty() => {
                let mut o = (*obj).clone();
                if o.pointer("/metadata/deletionTimestamp").is_none() {
                    o["metadata"]["deletionTimestamp"] = json!(util::now());
                    o["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                }
                let mut f = fins.clone();
                if !f.iter().any(|x| x == FOREGROUND) {
                    f.push(FOREGROUND.into());
                }
                set_finalizers(&mut o, f);
                self.commit(info, o);
                self.collect_dependents(&uid, Propagation::Foreground);
                self.try_finish_foreground(&uid);
                return Some(
                    self.store
                        .get(&info.key(), key)
                        .map(Arc::unwrap_or_clone)
                        .unwrap_or_else(|| (*obj).clone()),
                );
            }
            _ => {}
        }
        let obj = self.store.get(&info.key(), key)?;
        if !finalizers(&obj).is_empty() {
            if obj.pointer("/metadata/deletionTimestamp").is_some() {
                return Some((*obj).clone());
            }
            let mut o = (*obj).clone();
            o["metadata"]["deletionTimestamp"] = json!(util::now());
            o["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            if info.group.is_empty() && info.resource == "namespaces" {
                o["status"]["phase"] = json!("Terminating");
            }
            return Some(self.commit(info, o));
        }
        self.remove_now(info, key)
    }

    /// DELETE of one object.
    pub fn delete(
        &mut self,
        info: &ResourceInfo,
        ctx: &WriteCtx,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<Value, ApiError> {
        let key = Self::ns_key(info, ctx.namespace.as_deref(), name);
        let obj = self
            .store
            .get(&info.key(), &key)
            .ok_or_else(|| ApiError::not_found(&info.group, &info.resource, name))?;
        if let Some(uid) = &opts.uid {
            if meta_str(&obj, "uid") != Some(uid.as_str()) {
                return Err(ApiError::conflict(
                    &info.group,
                    &info.resource,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        meta_str(&obj, "uid").unwrap_or("")
                    ),
                ));
            }
        }
        if let Some(rv) = &opts.resource_version {
            if meta_str(&obj, "resourceVersion") != Some(rv.as_str()) {
                return Err(ApiError::conflict(
                    &info.group,
                    &info.resource,
                    name,
                    &format!("Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}", meta_str(&obj, "resourceVersion").unwrap_or("")),
                ));
            }
        }
        if ctx.dry_run {
            return Ok((*served(info, &obj)).clone());
        }
        let default = if info.group == "batch" && info.resource == "jobs" {
            Propagation::Orphan
        } else {
            Propagation::Background
        };
        let out = self
            .delete_object(info, &key, opts.propagation.unwrap_or(default))
            .unwrap_or(Value::Null);
        Ok(served_value(info, out))
    }

    /// DELETE of a collection: every matching object.
    pub fn delete_collection(
        &mut self,
        info: &ResourceInfo,
        ctx: &WriteCtx,
        labels: &LabelSelector,
        fields: &FieldSelector,
        opts: &DeleteOpts,
    ) -> Result<Vec<Value>, ApiError> {
        let page = self.list(info, ctx.namespace.as_deref(), labels, fields, None, None)?;
        let mut out = Vec::new();
        for o in page.values(info) {
            let name = meta_str(&o, "name").unwrap_or("").to_string();
            let c = WriteCtx {
                namespace: meta_str(&o, "namespace").map(str::to_string),
                ..ctx.clone()
            };
            match self.delete(info, &c, &name, opts) {
                Ok(v) => out.push(v),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Collects objects whose every owner uid is gone (the garbage collector's sweep).
    pub fn sweep_orphans(&mut self) {
        for uid in self.store.missing_owners() {
            self.collect_dependents(&uid, Propagation::Background);
        }
    }

    /// Changes a Job's status the way the Job controller would.
    pub fn job_status(
        &mut self,
        ns: &str,
        name: &str,
        f: impl FnOnce(&mut Value, &str),
    ) -> Result<Value, ApiError> {
        let info = self
            .registry
            .get("batch", "v1", "jobs")
            .ok_or_else(|| ApiError::not_found("batch", "jobs", name))?;
        let old = self
            .store
            .get(&info.key(), &(ns.to_string(), name.to_string()))
            .ok_or_else(|| ApiError::not_found("batch", "jobs", name))?;
        let mut new = (*old).clone();
        if !new["status"].is_object() {
            new["status"] = json!({});
        }
        let now = util::now();
        f(&mut new["status"], &now);
        let ctx = WriteCtx {
            namespace: Some(ns.into()),
            manager: "job-controller".into(),
            dry_run: false,
            ..Default::default()
        };
        self.finish_update(&info, &ctx, &old, new, true, None)
    }
}

fn job_labels(obj: &mut Value) {
    let uid = obj.pointer("/metadata/uid").cloned().unwrap_or(Value::Null);
    let name = obj.pointer("/metadata/name").cloned().unwrap_or(Value::Null);
    if obj.pointer("/spec/selector").is_none() && obj["spec"].is_object() {
        obj["spec"]["selector"] = json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}});
    }
    if let Some(t) = obj.pointer_mut("/spec/template").filter(|t| t.is_object()) {
        if !t["metadata"].is_object() {
            t["metadata"] = json!({});
        }
        if !t["metadata"]["labels"].is_object() {
            t["metadata"]["labels"] = json!({});
        }
        let l = &mut t["metadata"]["labels"];
        for (k, v) in [
            ("batch.kubernetes.io/controller-uid", &uid),
            ("batch.kubernetes.io/job-name", &name),
            ("controller-uid", &uid),
            ("job-name", &name),
        ] {
            l[k] = v.clone();
        }
    }
}

fn secret_string_data(obj: &mut Value) {
    if let Some(Value::Object(sd)) = obj.as_object_mut().and_then(|m| m.remove("stringData")) {
        if !obj["data"].is_object() {
            obj["data"] = json!({});
        }
        for (k, v) in sd {
            obj["data"][k] = json!(util::base64(v.as_str().unwrap_or("").as_bytes()));
        }
    }
}

/// Service defaults: type ClusterIP, session affinity None, TCP ports whose target is the port, and
/// a cluster IP derived from the namespace and name (no allocator: distinct Services may share one).
fn service_defaults(obj: &mut Value) {
    if let Some(m) = obj.as_object_mut() {
        m.remove("status");
    }
    obj["status"] = json!({"loadBalancer": {}});
    if !obj["spec"].is_object() {
        return;
    }
    let seed = format!(
        "{}/{}",
        meta_str(obj, "namespace").unwrap_or(""),
        meta_str(obj, "name").unwrap_or("")
    );
    let spec = &mut obj["spec"];
    for (k, v) in [
        ("type", json!("ClusterIP")),
        ("sessionAffinity", json!("None")),
        ("internalTrafficPolicy", json!("Cluster")),
        ("ipFamilies", json!(["IPv4"])),
        ("ipFamilyPolicy", json!("SingleStack")),
    ] {
        if spec[k].is_null() {
            spec[k] = v;
        }
    }
    if spec["clusterIP"].is_null() && spec["type"] != "ExternalName" {
        let h = seed
            .bytes()
            .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32));
        let ip = format!("10.96.{}.{}", (h >> 8) % 256, (h % 254) + 1);
        spec["clusterIP"] = json!(ip);
        spec["clusterIPs"] = json!([ip]);
    }
    for port in spec["ports"].as_array_mut().into_iter().flatten() {
        if port["protocol"].is_null() {
            port["protocol"] = json!("TCP");
        }
        if port["targetPort"].is_null() {
            port["targetPort"] = port["port"].clone();
        }
    }
}

/// Fills the defaults the real server's defaulting would (a documented subset).
fn apply_defaults(info: &ResourceInfo, obj: &mut Value) {
    match (info.group.as_str(), info.resource.as_str()) {
        ("", "namespaces") => {
            if !obj["status"].is_object() {
                obj["status"] = json!({"phase": "Active"});
            }
        }
        ("", "secrets") => {
            secret_string_data(obj);
            if obj["type"].is_null() {
                obj["type"] = json!("Opaque");
            }
        }
        ("", "pods") => {
            if !obj["status"].is_object() {
                obj["status"] = json!({"phase": "Pending"});
            }
            let gated = obj
                .pointer("/spec/schedulingGates")
                .and_then(Value::as_array)
                .is_some_and(|g| !g.is_empty());
            if gated {
                obj["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "False",
                    "lastProbeTime": null, "lastTransitionTime": util::now(), "reason": "SchedulingGated",
                    "message": "Scheduling is blocked due to non-empty scheduling gates"}]);
            }
        }
        ("", "services") => service_defaults(obj),
        ("batch", "jobs") => {
            if obj["spec"].is_object() {
                let spec = &mut obj["spec"];
                for (k, v) in [
                    ("backoffLimit", json!(6)),
                    ("completions", json!(1)),
                    ("parallelism", json!(1)),
                    ("completionMode", json!("NonIndexed")),
                    ("suspend", json!(false)),
                ] {
                    if spec[k].is_null() {
                        spec[k] = v;
                    }
                }
            }
            if info.status {
                if let Some(m) = obj.as_object_mut() {
                    m.remove("status");
                }
            }
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            let names = obj.pointer("/spec/names").cloned().unwrap_or(json!({}));
            let stored: Vec<Value> = obj
                .pointer("/spec/versions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|v| v["storage"] == Value::Bool(true))
                .filter_map(|v| v.get("name").cloned())
                .collect();
            let now = util::now();
            obj["status"] = json!({
                "acceptedNames": names,
                "storedVersions": stored,
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                     "message": "no conflicts found", "lastTransitionTime": now},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                     "message": "the initial names have been accepted", "lastTransitionTime": now},
                ],
            });
        }
        _ => {
            if info.status {
                if let Some(m) = obj.as_object_mut() {
                    m.remove("status");
                }
            }
        }
    }
}

/// Kind-specific validation: Job restart policy and immutable template.
fn validate_kind(info: &ResourceInfo, old: Option<&Value>, new: &Value) -> Result<(), ApiError> {
    if info.group != "batch" || info.resource != "jobs" {
        return Ok(());
    }
    let name = new
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut causes = Vec::new();
    match new
        .pointer("/spec/template/spec/restartPolicy")
        .and_then(Value::as_str)
    {
        Some("Never" | "OnFailure") => {}
        Some(other) => causes.push(cause(
            "FieldValueNotSupported",
            "spec.template.spec.restartPolicy",
            format!("Unsupported value: \"{other}\": supported values: \"OnFailure\", \"Never\""),
        )),
        None => causes.push(cause(
            "FieldValueRequired",
            "spec.template.spec.restartPolicy",
            "Required value: valid values: \"OnFailure\", \"Never\"",
        )),
    }
    if let Some(old) = old {
        if old.pointer("/spec/template") != new.pointer("/spec/template") {
            causes.push(cause(
                "FieldValueInvalid",
                "spec.template",
                "Invalid value: field is immutable",
            ));
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid("batch", "Job.batch", name, causes))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::same_but_times;

    fn object(rv: &str, time: &str, replicas: i64) -> serde_json::Value {
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "a",
                "resourceVersion": rv,
                "managedFields": [{"manager": "kok", "operation": "Apply", "time": time}],
            },
            "data": {"replicas": replicas},
        })
    }

    #[test]
    fn an_update_that_changes_only_times_is_the_same_object() {
        let old = object("1", "2026-01-01T00:00:00Z", 1);
        assert!(same_but_times(&object("2", "2026-06-01T00:00:00Z", 1), &old));
        assert!(!same_but_times(&object("1", "2026-01-01T00:00:00Z", 2), &old));
        let mut labelled = old.clone();
        labelled["metadata"]["labels"] = json!({"a": "b"});
        assert!(!same_but_times(&labelled, &old));
        let mut other_manager = old.clone();
        other_manager["metadata"]["managedFields"][0]["manager"] = json!("kubectl");
        assert!(!same_but_times(&other_manager, &old));
        let mut two_managers = old.clone();
        two_managers["metadata"]["managedFields"]
            .as_array_mut()
            .unwrap()
            .push(json!({"manager": "kubectl", "operation": "Update"}));
        assert!(!same_but_times(&two_managers, &old));
        let mut no_rv = old.clone();
        no_rv["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        assert!(same_but_times(&no_rv, &old));
        let mut extra = old.clone();
        extra["spec"] = json!({});
        assert!(!same_but_times(&extra, &old) && !same_but_times(&old, &extra));
    }
}
