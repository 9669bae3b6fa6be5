//! OpenAPI v3 (`/openapi/v3` and `/openapi/v3/{api/v1 | apis/group/version}`): the schemas of the
//! served built-in kinds from k8s-openapi, and of custom resources from their CRD's
//! `openAPIV3Schema`, each marked with `x-kubernetes-group-version-kind` as `kubectl explain` expects.
//! `/openapi/v2` is the same content in one Swagger 2.0 document (JSON).

use k8s_openapi::api::{apps::v1 as apps, batch::v1 as batch, coordination::v1 as coordination};
use k8s_openapi::api::{core::v1 as core, events::v1 as events, rbac::v1 as rbac};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::JsonSchema;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::api::State;
use crate::resources::ResourceKey;

const METADATA: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const API_VERSION: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";

/// The document path of a group version: `api/v1` or `apis/{group}/{version}`.
fn doc_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// Built-in kinds' schemas, by schema name, with the kinds they describe.
struct Kinds {
    generator: SchemaGenerator,
    kinds: Vec<(String, Value)>,
}

impl Kinds {
    fn add<T: JsonSchema + k8s_openapi::Resource>(&mut self) {
        self.generator.subschema_for::<T>();
        self.kinds.push((
            T::schema_name().into_owned(),
            json!({"group": T::GROUP, "version": T::VERSION, "kind": T::KIND}),
        ));
    }
}

/// Schemas by name, and the schema name of each kind.
type Schemas = (Map<String, Value>, Vec<(String, String)>);

fn builtin_schemas(group: &str, version: &str) -> Schemas {
    let mut k = Kinds {
        generator: SchemaSettings::openapi3().into_generator(),
        kinds: Vec::new(),
    };
    match (group, version) {
        ("", "v1") => {
            k.add::<core::Namespace>();
            k.add::<core::ConfigMap>();
            k.add::<core::Secret>();
            k.add::<core::ServiceAccount>();
            k.add::<core::Pod>();
            k.add::<core::Node>();
            k.add::<core::Service>();
            k.add::<core::Event>();
        }
        ("apps", "v1") => {
            k.add::<apps::Deployment>();
            k.add::<apps::DaemonSet>();
        }
        ("batch", "v1") => k.add::<batch::Job>(),
        ("events.k8s.io", "v1") => k.add::<events::Event>(),
        ("coordination.k8s.io", "v1") => k.add::<coordination::Lease>(),
        ("apiextensions.k8s.io", "v1") => k.add::<apiextensions::CustomResourceDefinition>(),
        ("rbac.authorization.k8s.io", "v1") => {
            k.add::<rbac::Role>();
            k.add::<rbac::RoleBinding>();
            k.add::<rbac::ClusterRole>();
            k.add::<rbac::ClusterRoleBinding>();
        }
        _ => {}
    }
    let mut schemas = k.generator.take_definitions(true);
    let mut kinds = Vec::new();
    for (name, gvk) in k.kinds {
        if let Some(Value::Object(s)) = schemas.get_mut(&name) {
            kinds.push((gvk["kind"].as_str().unwrap_or("").to_string(), name));
            s.insert("x-kubernetes-group-version-kind".into(), json!([gvk]));
        }
    }
    (schemas, kinds)
}

/// `dev.kok` for `kok.dev`: the reversed group, as schema names of custom resources begin.
fn reversed(group: &str) -> String {
    group.split('.').rev().collect::<Vec<_>>().join(".")
}

/// The schema a served version of a CRD gives its kind, with the fields every object has.
fn crd_schema(crd: &Value, version: &Value) -> Value {
    let mut schema = version
        .pointer("/schema/openAPIV3Schema")
        .cloned()
        .unwrap_or_else(|| json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
    if !schema["properties"].is_object() {
        schema["properties"] = json!({});
    }
    for (field, description) in [("apiVersion", API_VERSION), ("kind", KIND)] {
        if schema["properties"][field].is_null() {
            schema["properties"][field] = json!({"type": "string", "description": description});
        }
    }
    schema["properties"]["metadata"] = json!({"type": "object", "description": METADATA});
    schema["x-kubernetes-group-version-kind"] = json!([{
        "group": crd.pointer("/spec/group").cloned().unwrap_or(Value::Null),
        "version": version["name"],
        "kind": crd.pointer("/spec/names/kind").cloned().unwrap_or(Value::Null),
    }]);
    schema
}

fn custom_schemas(state: &State, group: &str, version: &str, (schemas, kinds): &mut Schemas) {
    let crds = ResourceKey {
        group: "apiextensions.k8s.io".into(),
        resource: "customresourcedefinitions".into(),
    };
    for (_, stored) in state.store.list(&crds, None) {
        let crd = stored.value();
        if crd.pointer("/spec/group").and_then(Value::as_str) != Some(group) {
            continue;
        }
        let kind = crd
            .pointer("/spec/names/kind")
            .and_then(Value::as_str)
            .unwrap_or("");
        for v in crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if v["name"] == version && v["served"] != Value::Bool(false) {
                let name = format!("{}.{version}.{kind}", reversed(group));
                schemas.insert(name.clone(), crd_schema(&crd, v));
                kinds.push((kind.to_string(), name));
            }
        }
    }
}

/// The OpenAPI v3 document of one group version, or None when it is not served.
pub fn group_doc(state: &State, group: &str, version: &str) -> Option<Value> {
    if state.registry.resources(group, version).is_empty() {
        return None;
    }
    let mut schemas = builtin_schemas(group, version);
    custom_schemas(state, group, version, &mut schemas);
    let (schemas, kinds) = schemas;
    let mut paths = Map::new();
    for info in state.registry.resources(group, version) {
        let Some((_, name)) = kinds.iter().find(|(kind, _)| kind == &info.kind) else {
            continue;
        };
        let prefix = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let path = if info.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", info.resource)
        } else {
            format!("{prefix}/{}/{{name}}", info.resource)
        };
        let gvk = json!({"group": group, "version": version, "kind": info.kind});
        let body = json!({"content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{name}")}}}});
        // kubectl sends `fieldValidation=Strict` when the patch operation declares it, as it does on
        // a real server; testkit enforces it (`schema.rs` for custom resources, `typed.rs` for built-ins).
        let parameters = json!([{"name": "fieldValidation", "in": "query",
            "schema": {"type": "string", "uniqueItems": true},
            "description": "Ignore, Warn (default) or Strict: what unknown fields in the request do."}]);
        paths.insert(
            path,
            json!({
                "get": {
                    "description": format!("read the specified {}", info.kind),
                    "operationId": format!("read{}", info.kind),
                    "responses": {"200": body},
                    "x-kubernetes-action": "get",
                    "x-kubernetes-group-version-kind": gvk,
                },
                "patch": {
                    "description": format!("partially update the specified {}", info.kind),
                    "operationId": format!("patch{}", info.kind),
                    "parameters": parameters,
                    "responses": {"200": body},
                    "x-kubernetes-action": "patch",
                    "x-kubernetes-group-version-kind": gvk,
                },
            }),
        );
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": crate::discovery::version()["gitVersion"]},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// `/openapi/v3`: every served group version with the URL of its document (the hash changes with it).
pub fn index(state: &State) -> Value {
    let mut paths = Map::new();
    for group in state.registry.groups() {
        for version in state.registry.versions(&group) {
            let Some(doc) = group_doc(state, &group, &version) else {
                continue;
            };
            let hash = Sha256::digest(serde_json::to_vec(&doc).unwrap_or_default());
            let hex: String = hash.iter().map(|b| format!("{b:02X}")).collect();
            let path = doc_path(&group, &version);
            paths.insert(
                path.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={hex}")}),
            );
        }
    }
    json!({ "paths": paths })
}

/// The document a `/openapi/v3/...` path names, or None.
pub fn document(state: &State, path: &str) -> Option<Value> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    match segs.as_slice() {
        ["api", version] => group_doc(state, "", version),
        ["apis", group, version] => group_doc(state, group, version),
        _ => None,
    }
}

/// Rewrites every OpenAPI v3 `$ref` (`#/components/schemas/X`) to Swagger's `#/definitions/X`, and
/// a reference wrapped in a one-item `allOf` (to give it a description) to a plain `$ref` beside the
/// description, as the apiserver's Swagger document writes it.
fn swagger_refs(v: &mut Value) {
    match v {
        Value::Object(map) => {
            let single_ref = match map.get("allOf").and_then(Value::as_array).map(Vec::as_slice) {
                Some([only]) if only.as_object().is_some_and(|o| o.len() == 1) => only.get("$ref").cloned(),
                _ => None,
            };
            if let Some(r) = single_ref {
                map.remove("allOf");
                map.insert("$ref".into(), r);
            }
            for (key, value) in map.iter_mut() {
                match value {
                    Value::String(r) if key == "$ref" => {
                        if let Some(name) = r.strip_prefix("#/components/schemas/") {
                            *r = format!("#/definitions/{name}");
                        }
                    }
                    _ => swagger_refs(value),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(swagger_refs),
        _ => {}
    }
}

/// One OpenAPI v3 operation in Swagger 2.0: the response schema and query parameters move up a level.
fn swagger_operation(op: &Value) -> Value {
    let mut op = op.clone();
    if let Some(schema) = op
        .pointer("/responses/200/content/application~1json/schema")
        .cloned()
    {
        op["responses"] = json!({"200": {"description": "OK", "schema": schema}});
    }
    if let Some(params) = op["parameters"].as_array_mut() {
        for p in params.iter_mut() {
            if let Some(Value::Object(schema)) = p.as_object_mut().and_then(|p| p.remove("schema")) {
                p["type"] = schema.get("type").cloned().unwrap_or(json!("string"));
                if let Some(u) = schema.get("uniqueItems") {
                    p["uniqueItems"] = u.clone();
                }
            }
        }
    }
    op
}

/// `/openapi/v2`: every served group version's schemas and operations in one Swagger 2.0 document.
pub fn swagger(state: &State) -> Value {
    let mut definitions = Map::new();
    let mut paths = Map::new();
    for group in state.registry.groups() {
        for version in state.registry.versions(&group) {
            let Some(doc) = group_doc(state, &group, &version) else {
                continue;
            };
            if let Some(schemas) = doc.pointer("/components/schemas").and_then(Value::as_object) {
                definitions.extend(schemas.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            for (path, item) in doc["paths"].as_object().into_iter().flatten() {
                let ops: Map<String, Value> = item
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(method, op)| (method.clone(), swagger_operation(op)))
                    .collect();
                paths.insert(path.clone(), Value::Object(ops));
            }
        }
    }
    let mut doc = json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": crate::discovery::version()["gitVersion"]},
        "paths": paths,
        "definitions": definitions,
    });
    swagger_refs(&mut doc);
    doc
}
