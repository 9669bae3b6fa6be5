//! Shared test fixtures: a small custom resource with a status subresource and printer columns.
#![allow(dead_code)]

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Spec of the test resource.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, JsonSchema, PartialEq)]
#[kube(
    group = "example.test",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus"
)]
#[kube(shortname = "wd", category = "all")]
#[kube(printcolumn = r#"{"name":"Size","type":"integer","jsonPath":".spec.size"}"#)]
pub struct WidgetSpec {
    /// Size.
    pub size: i64,
}

/// Status of the test resource.
#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema, PartialEq)]
pub struct WidgetStatus {
    /// Phase.
    pub phase: String,
}

/// A ConfigMap with one key.
pub fn cm(name: &str, key: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some([(key.to_string(), value.to_string())].into()),
        ..Default::default()
    }
}

/// The status of a kube API error, or a panic naming what happened instead.
pub fn status_of<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> Box<kube::core::Status> {
    match r {
        Err(kube::Error::Api(s)) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}
