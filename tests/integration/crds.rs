//! The checked-in CRDs match `kok crds`, and the generated schemas are structural and documented.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};

const CHECKED_IN: &str = "crds/crds.yaml";

fn checked_in_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(CHECKED_IN)
}

#[test]
fn checked_in_crds_match_kok_crds() {
    let generated = kok::cli::crds::crds_yaml().unwrap();
    let path = checked_in_path();
    if std::env::var_os("KOK_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &generated).unwrap();
        eprintln!("rewrote {CHECKED_IN}");
        return;
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "{CHECKED_IN} differs from `kok crds` (the CRD types changed). Regenerate it with\n  \
         cargo run -q -- crds > {CHECKED_IN}\nor KOK_UPDATE_GOLDEN=1 cargo test --test integration crds::, and commit the result."
    );
}

#[test]
fn checked_in_crds_parse_back_into_the_crds_of_the_api() {
    let text = std::fs::read_to_string(checked_in_path()).unwrap();
    let parsed: Vec<CustomResourceDefinition> = serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .collect();
    assert_eq!(parsed, kok::api::crds());
}

fn crd(kind: &str) -> CustomResourceDefinition {
    kok::api::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap()
}

fn schema(kind: &str) -> JSONSchemaProps {
    let crd = crd(kind);
    let version = &crd.spec.versions[0];
    version
        .schema
        .as_ref()
        .unwrap()
        .open_api_v3_schema
        .clone()
        .unwrap()
}

fn printer_columns(kind: &str) -> Vec<String> {
    crd(kind).spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.clone())
        .collect()
}

#[test]
fn every_crd_is_namespaced_v1alpha1_in_the_kok_category_with_a_status_subresource() {
    assert_eq!(kok::api::crds().len(), 3);
    for kind in ["Cluster", "ClusterOperation", "FleetRollout"] {
        let crd = crd(kind);
        assert_eq!(crd.spec.group, "kok.dev");
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.versions.len(), 1);
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(version.served && version.storage);
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "{kind}"
        );
        assert_eq!(crd.spec.names.categories, Some(vec!["kok".to_string()]), "{kind}");
    }
}

#[test]
fn cluster_operations_answer_to_the_short_name_clusterops() {
    let names = crd("ClusterOperation").spec.names;
    assert!(names
        .short_names
        .unwrap_or_default()
        .contains(&"clusterops".to_string()));
}

#[test]
fn printer_columns_are_the_ones_the_design_lists() {
    assert_eq!(
        printer_columns("Cluster"),
        [
            "Ready",
            "Revision",
            "Last operation",
            "Version",
            "Nodes",
            "Healthy",
            "Certificates",
            "Expires",
            "Age"
        ]
    );
    assert_eq!(
        printer_columns("ClusterOperation"),
        ["Cluster", "Action", "Phase", "Started", "Duration", "Commit", "Result"]
    );
    assert_eq!(
        printer_columns("FleetRollout"),
        ["Operation", "Wave", "Progress", "Phase", "Age"]
    );
}

#[test]
fn the_rollout_kind_keeps_clear_of_argo_rollouts_plural() {
    let names = crd("FleetRollout").spec.names;
    assert_eq!(names.plural, "fleetrollouts");
    assert_ne!(names.plural, "rollouts");
}

/// Walks a schema, calling `check(path, node)` on every node.
fn walk(path: &str, node: &JSONSchemaProps, check: &mut dyn FnMut(&str, &JSONSchemaProps)) {
    check(path, node);
    for (name, child) in node.properties.iter().flatten() {
        walk(&format!("{path}.{name}"), child, check);
    }
    match &node.items {
        Some(JSONSchemaPropsOrArray::Schema(child)) => walk(&format!("{path}[]"), child, check),
        Some(JSONSchemaPropsOrArray::Schemas(children)) => {
            children.iter().for_each(|c| walk(&format!("{path}[]"), c, check))
        }
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(child)) = &node.additional_properties {
        walk(&format!("{path}{{}}"), child, check);
    }
}

#[test]
fn every_field_has_a_description_for_kubectl_explain() {
    for kind in ["Cluster", "ClusterOperation"] {
        let mut missing = vec![];
        let root = schema(kind);
        walk(kind, &root, &mut |path, node| {
            let documented = node.description.as_deref().is_some_and(|d| !d.trim().is_empty());
            // Array items and map values are described by their field.
            let is_element = path.ends_with("[]") || path.ends_with("{}");
            if !documented && !is_element && (path.contains(".spec") || path.contains(".status")) {
                missing.push(path.to_string());
            }
        });
        assert!(missing.is_empty(), "fields without a description: {missing:?}");
        assert!(
            !root.description.unwrap_or_default().contains("Auto-generated"),
            "{kind} has a real description"
        );
    }
}

#[test]
fn schemas_are_structural() {
    for kind in ["Cluster", "ClusterOperation"] {
        let mut problems = vec![];
        walk(kind, &schema(kind), &mut |path, node| {
            let int_or_string = node.x_kubernetes_int_or_string == Some(true);
            let preserve = node.x_kubernetes_preserve_unknown_fields == Some(true);
            if node.type_.is_none() && !int_or_string && !preserve {
                problems.push(format!("{path}: no type"));
            }
            if node.ref_path.is_some() {
                problems.push(format!("{path}: $ref"));
            }
            for (what, present) in [
                ("anyOf", node.any_of.is_some()),
                ("oneOf", node.one_of.is_some()),
                ("allOf", node.all_of.is_some()),
                ("not", node.not.is_some()),
            ] {
                if present && !int_or_string {
                    problems.push(format!("{path}: {what} outside int-or-string"));
                }
            }
            if node.type_.as_deref() == Some("object")
                && node.properties.is_some()
                && matches!(node.additional_properties, Some(JSONSchemaPropsOrBool::Schema(_)))
            {
                problems.push(format!("{path}: both properties and additionalProperties"));
            }
        });
        assert!(problems.is_empty(), "{kind}: {problems:?}");
    }
}

#[test]
fn schemas_use_only_formats_kubernetes_recognizes() {
    let known = [
        "int32",
        "int64",
        "float",
        "double",
        "date-time",
        "date",
        "byte",
        "binary",
        "password",
    ];
    for kind in ["Cluster", "ClusterOperation"] {
        let mut unknown = vec![];
        walk(kind, &schema(kind), &mut |path, node| {
            if let Some(format) = &node.format {
                if !known.contains(&format.as_str()) {
                    unknown.push(format!("{path}: {format}"));
                }
            }
        });
        assert!(unknown.is_empty(), "{kind}: {unknown:?}");
    }
}

#[test]
fn conditions_merge_by_type_under_server_side_apply() {
    let status = schema("Cluster").properties.unwrap()["status"].clone();
    let conditions = status.properties.unwrap()["conditions"].clone();
    assert_eq!(conditions.x_kubernetes_list_type.as_deref(), Some("map"));
    assert_eq!(
        conditions.x_kubernetes_list_map_keys,
        Some(vec!["type".to_string()])
    );
}

#[test]
fn resources_accept_quantities_as_numbers_or_strings() {
    let spec = schema("ClusterOperation").properties.unwrap()["spec"].clone();
    let resources = spec.properties.unwrap()["resources"].clone();
    let props = resources.properties.unwrap();
    for key in ["limits", "requests"] {
        let Some(JSONSchemaPropsOrBool::Schema(value)) = &props[key].additional_properties else {
            panic!("{key} is a map")
        };
        assert_eq!(value.x_kubernetes_int_or_string, Some(true), "{key}");
    }
}

/// A ClusterOperation as kok writes one.
fn operation(name: &str, id: &str) -> kok::api::ClusterOperation {
    let spec = kok::api::ClusterOperationSpec {
        cluster: "prod-bj".into(),
        id: id.into(),
        digest: "0".repeat(64),
        action: "cluster.yml".into(),
        image: "runner:1".into(),
        hosts_conf_ref: kok::api::ConfigMapRef {
            name: "hosts-1".into(),
        },
        vars_conf_ref: Some(kok::api::ConfigMapRef {
            name: "vars-1".into(),
        }),
        queue_position: "0001".into(),
        ..Default::default()
    };
    let mut op = kok::api::ClusterOperation::new(name, spec);
    op.metadata.namespace = Some("kok-system".into());
    op
}

fn refused(result: Result<kok::api::ClusterOperation, kube::Error>, field: &str, message: &str) {
    match result {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422, "{s:?}");
            assert!(
                s.message.contains(field) && s.message.contains(message),
                "{}",
                s.message
            );
        }
        other => panic!("expected 422 naming {field}, got {other:?}"),
    }
}

#[tokio::test]
async fn an_api_server_refuses_bad_ids_and_names_and_any_edit_of_an_operations_spec() {
    use kube::api::{Api, Patch, PatchParams, PostParams};
    let server = testkit::ApiServer::start().await.unwrap();
    server.install_crds(&kok::api::crds()).await.unwrap();
    let ops: Api<kok::api::ClusterOperation> = Api::namespaced(server.client(), "kok-system");
    let pp = PostParams::default();

    refused(
        ops.create(&pp, &operation("bad-id", "Install_Now")).await,
        "spec.id",
        "should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'",
    );
    refused(
        ops.create(&pp, &operation("long-id", &"a".repeat(31))).await,
        "spec.id",
        "Too long: may not be more than 30 bytes",
    );
    let mut cluster = operation("bad-cluster", "install");
    cluster.spec.cluster = "a".repeat(41);
    refused(
        ops.create(&pp, &cluster).await,
        "spec.cluster",
        "Too long: may not be more than 40 bytes",
    );
    let mut deadline = operation("no-time", "install");
    deadline.spec.active_deadline_seconds = Some(0);
    refused(
        ops.create(&pp, &deadline).await,
        "spec.activeDeadlineSeconds",
        "should be greater than or equal to 1",
    );
    let mut secret = operation("bad-secret", "install");
    secret.spec.ssh_auth_ref = Some(kok::api::SecretRef {
        name: "Prod_SSH".into(),
    });
    refused(
        ops.create(&pp, &secret).await,
        "spec.sshAuthRef.name",
        "should match",
    );
    let mut typed = serde_json::to_value(operation("bad-type", "install")).unwrap();
    typed["spec"]["type"] = "ansible".into();
    let resource = kube::api::ApiResource::erase::<kok::api::ClusterOperation>(&());
    let dynamic: Api<kube::api::DynamicObject> =
        Api::namespaced_with(server.client(), "kok-system", &resource);
    match dynamic.create(&pp, &serde_json::from_value(typed).unwrap()).await {
        Err(kube::Error::Api(s)) => assert!(
            s.message.contains(
                "spec.type: Unsupported value: \"ansible\": supported values: \"playbook\", \"shell\""
            ),
            "{}",
            s.message
        ),
        other => panic!("an unknown type is refused: {other:?}"),
    }

    // A valid operation is stored; its spec never changes again (promise 1), its metadata may.
    ops.create(&pp, &operation("install-1", "install")).await.unwrap();
    let edit = serde_json::json!({"spec": {"extraArgs": ["--limit=node7"]}});
    refused(
        ops.patch("install-1", &PatchParams::default(), &Patch::Merge(&edit))
            .await,
        "spec",
        "spec is immutable: an edited operation is a new run",
    );
    let label = serde_json::json!({"metadata": {"labels": {"kok.dev/current": "false"}}});
    ops.patch("install-1", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    // Applying the same spec again (as every reconcile does) is no edit.
    let same = operation("install-1", "install");
    ops.patch(
        "install-1",
        &PatchParams::apply("kok").force(),
        &Patch::Apply(&same),
    )
    .await
    .unwrap();
}
