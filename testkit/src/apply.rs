//! Server-side apply and managedFields, with a simplified field set.
//!
//! A field set is a set of paths in the `fieldsV1` vocabulary (`f:name`, `k:{"name":"x"}`, `.`).
//! Maps are recursed, lists with a known merge key (see [`crate::patch::list_merge_key`]) are
//! associative, every other list is atomic. Every write records which manager set which leaves;
//! an apply removes the leaves its manager applied before and no longer applies (unless another
//! manager owns them) and conflicts when it changes a leaf another manager owns.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

use crate::patch::keyed;

/// A path of `fieldsV1` elements.
pub type FieldPath = Vec<String>;
/// A set of paths.
pub type FieldSet = BTreeSet<FieldPath>;

/// Which part of an object a write may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Everything (kinds without a status subresource).
    Whole,
    /// Everything except status (main endpoint of a kind with a status subresource).
    Main,
    /// Only status (the `/status` subresource).
    Status,
}

impl Scope {
    /// The `subresource` recorded in managedFields.
    pub fn subresource(self) -> Option<&'static str> {
        (self == Scope::Status).then_some("status")
    }
}

/// One managedFields entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagedEntry {
    /// Field manager name.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// apiVersion of the write.
    pub api_version: String,
    /// Time of the last change.
    pub time: String,
    /// `status` or none.
    pub subresource: Option<String>,
    /// Fields owned.
    pub set: FieldSet,
}

/// One apply conflict: the other manager and the contested field.
#[derive(Debug, Clone, PartialEq)]
pub struct Conflict {
    /// Manager that owns the field.
    pub manager: String,
    /// Its apiVersion.
    pub api_version: String,
    /// Field path in `.a.b[name="x"]` form.
    pub field: String,
}

const META_FIELDS: &[&str] = &["labels", "annotations", "ownerReferences", "finalizers"];

/// The part of an object a scope covers, reduced to user-owned fields.
pub fn scoped(obj: &Value, scope: Scope) -> Value {
    let mut out = Map::new();
    let Some(m) = obj.as_object() else {
        return Value::Object(out);
    };
    for (k, v) in m {
        match (k.as_str(), scope) {
            ("apiVersion" | "kind", _) => {}
            ("status", Scope::Status) => {
                out.insert(k.clone(), v.clone());
            }
            (_, Scope::Status) => {}
            ("status", Scope::Main) => {}
            ("metadata", _) => {
                let meta: Map<String, Value> = v
                    .as_object()
                    .map(|mm| {
                        mm.iter()
                            .filter(|(k, _)| META_FIELDS.contains(&k.as_str()))
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect()
                    })
                    .unwrap_or_default();
                if !meta.is_empty() {
                    out.insert(k.clone(), Value::Object(meta));
                }
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(out)
}

fn key_element(key: &str, item: &Value) -> String {
    format!(
        "k:{}",
        json!({ key: item.get(key).cloned().unwrap_or(Value::Null) })
    )
}

fn leaves(v: &Value, field: Option<&str>, path: &mut FieldPath, out: &mut FieldSet) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, c) in m {
                path.push(format!("f:{k}"));
                leaves(c, Some(k), path, out);
                path.pop();
            }
        }
        Value::Array(items) if !items.is_empty() && keyed(field, items).is_some() => {
            let key = keyed(field, items).unwrap_or("name");
            for item in items {
                path.push(key_element(key, item));
                path.push(".".into());
                out.insert(path.clone());
                path.pop();
                leaves(item, None, path, out);
                path.pop();
            }
        }
        _ => {
            out.insert(path.clone());
        }
    }
}

/// The leaves of an object within a scope.
pub fn field_set(obj: &Value, scope: Scope) -> FieldSet {
    let mut out = FieldSet::new();
    let s = scoped(obj, scope);
    if s.as_object().is_some_and(|m| !m.is_empty()) {
        leaves(&s, None, &mut Vec::new(), &mut out);
    }
    out
}

/// The value a path points at.
pub fn value_at<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = obj;
    for el in path {
        if el == "." {
            continue;
        }
        if let Some(f) = el.strip_prefix("f:") {
            cur = cur.get(f)?;
        } else if let Some(k) = el.strip_prefix("k:") {
            let want: Value = serde_json::from_str(k).ok()?;
            let want = want.as_object()?;
            cur = cur
                .as_array()?
                .iter()
                .find(|i| want.iter().all(|(wk, wv)| i.get(wk) == Some(wv)))?;
        } else {
            return None;
        }
    }
    Some(cur)
}

fn remove_at(obj: &mut Value, path: &[String]) {
    let Some((last, parent_path)) = path.split_last() else {
        return;
    };
    if last == "." {
        let Some((item, list_path)) = parent_path.split_last() else {
            return;
        };
        let Some(k) = item.strip_prefix("k:") else { return };
        let Ok(Value::Object(want)) = serde_json::from_str::<Value>(k) else {
            return;
        };
        if let Some(Value::Array(items)) = value_at_mut(obj, list_path) {
            items.retain(|i| !want.iter().all(|(wk, wv)| i.get(wk) == Some(wv)));
        }
        return;
    }
    if let (Some(f), Some(Value::Object(parent))) = (last.strip_prefix("f:"), value_at_mut(obj, parent_path))
    {
        parent.remove(f);
    }
}

fn value_at_mut<'a>(obj: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    let mut cur = obj;
    for el in path {
        if el == "." {
            continue;
        }
        if let Some(f) = el.strip_prefix("f:") {
            cur = cur.get_mut(f)?;
        } else if let Some(k) = el.strip_prefix("k:") {
            let want: Value = serde_json::from_str(k).ok()?;
            let want = want.as_object()?.clone();
            cur = cur
                .as_array_mut()?
                .iter_mut()
                .find(|i| want.iter().all(|(wk, wv)| i.get(wk) == Some(wv)))?;
        } else {
            return None;
        }
    }
    Some(cur)
}

/// Merges an applied configuration into an object: maps recurse, keyed lists merge by key.
pub fn merge_applied(dst: &mut Value, src: &Value, field: Option<&str>) {
    match (dst, src) {
        (Value::Object(d), Value::Object(s)) => {
            for (k, v) in s {
                if v.is_null() {
                    d.remove(k);
                    continue;
                }
                let entry = d.entry(k.clone()).or_insert(Value::Null);
                if entry.is_null() {
                    *entry = v.clone();
                } else {
                    merge_applied(entry, v, Some(k));
                }
            }
        }
        (Value::Array(d), Value::Array(s)) if keyed(field, s).is_some() && keyed(field, d).is_some() => {
            let key = keyed(field, s).unwrap_or("name");
            for item in s {
                match d.iter_mut().find(|x| x.get(key) == item.get(key)) {
                    Some(existing) => merge_applied(existing, item, None),
                    None => d.push(item.clone()),
                }
            }
        }
        (d, s) => *d = s.clone(),
    }
}

/// Reads the managedFields entries of an object.
pub fn read_managed(obj: &Value) -> Vec<ManagedEntry> {
    let mut out = Vec::new();
    for e in obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let mut set = FieldSet::new();
        if let Some(tree) = e.get("fieldsV1") {
            from_tree(tree, &mut Vec::new(), &mut set);
        }
        out.push(ManagedEntry {
            manager: e["manager"].as_str().unwrap_or("").into(),
            operation: e["operation"].as_str().unwrap_or("Update").into(),
            api_version: e["apiVersion"].as_str().unwrap_or("").into(),
            time: e["time"].as_str().unwrap_or("").into(),
            subresource: e["subresource"].as_str().map(str::to_string),
            set,
        });
    }
    out
}

fn from_tree(v: &Value, path: &mut FieldPath, out: &mut FieldSet) {
    let Some(m) = v.as_object() else { return };
    for (k, child) in m {
        path.push(k.clone());
        if child.as_object().is_none_or(Map::is_empty) {
            out.insert(path.clone());
        } else {
            from_tree(child, path, out);
        }
        path.pop();
    }
}

fn to_tree(set: &FieldSet) -> Value {
    let mut root = Value::Object(Map::new());
    for path in set {
        let mut cur = &mut root;
        for el in path {
            let Value::Object(m) = cur else { break };
            cur = m.entry(el.clone()).or_insert_with(|| Value::Object(Map::new()));
        }
    }
    root
}

/// Writes managedFields entries into an object (dropping empty ones).
pub fn write_managed(obj: &mut Value, entries: &[ManagedEntry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.set.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_tree(&e.set),
            });
            if let Some(s) = &e.subresource {
                v["subresource"] = json!(s);
            }
            v
        })
        .collect();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(list));
        }
    }
}

fn overlaps(a: &[String], b: &[String]) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn is_marker(p: &[String]) -> bool {
    p.last().is_some_and(|l| l == ".")
}

/// Path as the real server prints it in conflict messages: `.spec.containers[name="a"].image`.
pub fn path_string(path: &[String]) -> String {
    let mut s = String::new();
    for el in path {
        if let Some(f) = el.strip_prefix("f:") {
            s.push('.');
            s.push_str(f);
        } else if let Some(k) = el.strip_prefix("k:") {
            if let Ok(Value::Object(m)) = serde_json::from_str::<Value>(k) {
                let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
                s.push_str(&format!("[{}]", parts.join(",")));
            }
        }
    }
    s
}

fn same_identity(e: &ManagedEntry, manager: &str, operation: &str, scope: Scope) -> bool {
    e.manager == manager && e.operation == operation && e.subresource.as_deref() == scope.subresource()
}

/// Records a non-apply write by `manager`: it takes the leaves it changed; removed leaves are dropped.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    api_version: &str,
    scope: Scope,
    now: &str,
) {
    let mut entries = old.map(read_managed).unwrap_or_default();
    let new_set = field_set(new, scope);
    let old_set = old.map(|o| field_set(o, scope)).unwrap_or_default();
    let changed: FieldSet = new_set
        .iter()
        .filter(|p| !old_set.contains(*p) || old.and_then(|o| value_at(o, p)) != value_at(new, p))
        .cloned()
        .collect();
    let removed: FieldSet = old_set.difference(&new_set).cloned().collect();
    if changed.is_empty() && removed.is_empty() {
        write_managed(new, &entries);
        return;
    }
    for e in entries.iter_mut() {
        if e.subresource.as_deref() != scope.subresource() {
            continue;
        }
        e.set
            .retain(|p| !changed.contains(p) && !removed.iter().any(|r| p.starts_with(r)));
    }
    match entries
        .iter_mut()
        .find(|e| same_identity(e, manager, "Update", scope))
    {
        Some(e) => {
            e.set.extend(changed);
            e.time = now.to_string();
            e.api_version = api_version.to_string();
        }
        None if !changed.is_empty() => entries.push(ManagedEntry {
            manager: manager.to_string(),
            operation: "Update".into(),
            api_version: api_version.to_string(),
            time: now.to_string(),
            subresource: scope.subresource().map(str::to_string),
            set: changed,
        }),
        None => {}
    }
    write_managed(new, &entries);
}

/// Server-side apply of `applied` by `manager` onto `current` (or a fresh `base` when absent).
///
/// Returns the new object with updated managedFields, or the conflicts when `force` is false.
pub fn server_side_apply(
    current: &Value,
    applied: &Value,
    manager: &str,
    force: bool,
    api_version: &str,
    scope: Scope,
    now: &str,
) -> Result<Value, Vec<Conflict>> {
    let mut entries = read_managed(current);
    let applied_scoped = scoped(applied, scope);
    let applied_set = field_set(applied, scope);
    let mut conflicts = Vec::new();
    for e in entries.iter_mut() {
        if same_identity(e, manager, "Apply", scope) || e.subresource.as_deref() != scope.subresource() {
            continue;
        }
        let mut contested = Vec::new();
        for p in applied_set.iter().filter(|p| !is_marker(p)) {
            for owned in e.set.iter().filter(|o| overlaps(o, p)) {
                let q = if owned.len() > p.len() { owned } else { p };
                let proposed = value_at(applied, q);
                if proposed.is_some() && value_at(current, q) != proposed {
                    contested.push(owned.clone());
                    if !force {
                        conflicts.push(Conflict {
                            manager: e.manager.clone(),
                            api_version: e.api_version.clone(),
                            field: path_string(p),
                        });
                    }
                }
            }
        }
        if force {
            e.set.retain(|o| !contested.contains(o));
        }
    }
    if !conflicts.is_empty() {
        conflicts.dedup();
        return Err(conflicts);
    }
    let mut obj = current.clone();
    let previous = entries
        .iter()
        .find(|e| same_identity(e, manager, "Apply", scope))
        .map(|e| e.set.clone())
        .unwrap_or_default();
    let mut removed: Vec<&FieldPath> = previous.difference(&applied_set).collect();
    removed.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in removed {
        let owned_elsewhere = entries
            .iter()
            .filter(|e| !same_identity(e, manager, "Apply", scope))
            .any(|e| e.set.iter().any(|o| o.starts_with(p)));
        if !owned_elsewhere {
            remove_at(&mut obj, p);
        }
    }
    merge_applied(&mut obj, &applied_scoped, None);
    match entries
        .iter_mut()
        .find(|e| same_identity(e, manager, "Apply", scope))
    {
        Some(e) => {
            e.set = applied_set;
            e.time = now.to_string();
            e.api_version = api_version.to_string();
        }
        None => entries.push(ManagedEntry {
            manager: manager.to_string(),
            operation: "Apply".into(),
            api_version: api_version.to_string(),
            time: now.to_string(),
            subresource: scope.subresource().map(str::to_string),
            set: applied_set,
        }),
    }
    write_managed(&mut obj, &entries);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-01-01T00:00:00Z";

    fn cm(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": data})
    }

    #[test]
    fn field_dropped_by_the_same_manager_is_removed() {
        let base = json!({"metadata": {"name": "a"}});
        let first = server_side_apply(
            &base,
            &cm(json!({"x": "1", "y": "2"})),
            "m",
            false,
            "v1",
            Scope::Whole,
            NOW,
        )
        .unwrap();
        let second = server_side_apply(
            &first,
            &cm(json!({"x": "1"})),
            "m",
            false,
            "v1",
            Scope::Whole,
            NOW,
        )
        .unwrap();
        assert_eq!(second["data"], json!({"x": "1"}));
    }

    #[test]
    fn another_manager_changing_an_owned_field_conflicts_unless_forced() {
        let base = json!({"metadata": {"name": "a"}});
        let first =
            server_side_apply(&base, &cm(json!({"x": "1"})), "m", false, "v1", Scope::Whole, NOW).unwrap();
        let err = server_side_apply(
            &first,
            &cm(json!({"x": "2"})),
            "n",
            false,
            "v1",
            Scope::Whole,
            NOW,
        )
        .unwrap_err();
        assert_eq!(err[0].field, ".data.x");
        let forced =
            server_side_apply(&first, &cm(json!({"x": "2"})), "n", true, "v1", Scope::Whole, NOW).unwrap();
        assert_eq!(forced["data"]["x"], "2");
        let owners = read_managed(&forced);
        assert!(owners.iter().all(|e| e.manager == "n"), "{owners:?}");
    }

    #[test]
    fn same_value_from_two_managers_is_shared_without_conflict() {
        let base = json!({"metadata": {"name": "a"}});
        let first =
            server_side_apply(&base, &cm(json!({"x": "1"})), "m", false, "v1", Scope::Whole, NOW).unwrap();
        let second = server_side_apply(
            &first,
            &cm(json!({"x": "1"})),
            "n",
            false,
            "v1",
            Scope::Whole,
            NOW,
        )
        .unwrap();
        let third = server_side_apply(&second, &cm(json!({})), "m", false, "v1", Scope::Whole, NOW).unwrap();
        assert_eq!(third["data"]["x"], "1", "still owned by n");
    }

    #[test]
    fn keyed_list_items_round_trip_through_fields_v1() {
        let obj = json!({"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
        let mut with = obj.clone();
        record_update(None, &mut with, "u", "v1", Scope::Whole, NOW);
        let entries = read_managed(&with);
        assert!(entries[0].set.contains(&vec![
            "f:spec".to_string(),
            "f:containers".into(),
            "k:{\"name\":\"c\"}".into(),
            ".".into()
        ]));
        assert_eq!(
            path_string(&[
                "f:spec".into(),
                "f:containers".into(),
                "k:{\"name\":\"c\"}".into(),
                "f:image".into()
            ]),
            ".spec.containers[name=\"c\"].image"
        );
    }
}
