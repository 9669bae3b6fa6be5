//! A ClusterOperation as kok's watches decode it: the object without `metadata.managedFields`.
//!
//! The API server sends the managed fields with every watch event: a tree of field paths for each
//! writer of the object (kok's pass, the controller, the reporter). Nothing in kok reads them, and
//! decoding them builds a JSON tree per event, so the two watches of operations skip them while they
//! decode, as an unknown field, instead of building them and dropping them after.
//!
//! The answers to kok's busiest writes (a run's apply, the controller's status transitions) are read
//! the same way: [`patch_answered`] decodes only the name and resourceVersion ([`Written`]), or nothing.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::NamespaceResourceScope;
use kube::runtime::watcher;
use kube::Resource;
use serde::{Deserialize, Deserializer};

use super::{ClusterOperation, ClusterOperationSpec, ClusterOperationStatus};

/// A ClusterOperation decoded without its managed fields; see the module docs.
#[derive(Clone, Debug)]
pub struct WatchedOperation(pub ClusterOperation);

/// Every field of `ObjectMeta` but `managedFields`, which is skipped unread.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

#[derive(Deserialize)]
struct Wire {
    metadata: Meta,
    spec: ClusterOperationSpec,
    #[serde(default)]
    status: Option<ClusterOperationStatus>,
}

impl<'de> Deserialize<'de> for WatchedOperation {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let Wire {
            metadata: m,
            spec,
            status,
        } = Wire::deserialize(deserializer)?;
        let mut op = ClusterOperation::new("", spec);
        op.metadata = ObjectMeta {
            annotations: m.annotations,
            creation_timestamp: m.creation_timestamp,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            deletion_timestamp: m.deletion_timestamp,
            finalizers: m.finalizers,
            generate_name: m.generate_name,
            generation: m.generation,
            labels: m.labels,
            managed_fields: None,
            name: m.name,
            namespace: m.namespace,
            owner_references: m.owner_references,
            resource_version: m.resource_version,
            self_link: m.self_link,
            uid: m.uid,
        };
        op.status = status;
        Ok(WatchedOperation(op))
    }
}

impl Resource for WatchedOperation {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        ClusterOperation::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        ClusterOperation::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        ClusterOperation::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        ClusterOperation::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

/// A watch event of [`WatchedOperation`]s as one of ClusterOperations.
pub fn operation_event(event: watcher::Event<WatchedOperation>) -> watcher::Event<ClusterOperation> {
    match event {
        watcher::Event::Apply(op) => watcher::Event::Apply(op.0),
        watcher::Event::Delete(op) => watcher::Event::Delete(op.0),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(op) => watcher::Event::InitApply(op.0),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operation_decodes_as_the_api_object_without_its_managed_fields() {
        let mut op = ClusterOperation::new(
            "prod-install-0a1b2c3d",
            ClusterOperationSpec {
                cluster: "prod".into(),
                id: "install".into(),
                action: "cluster.yml".into(),
                ..Default::default()
            },
        );
        op.metadata = ObjectMeta {
            name: Some("prod-install-0a1b2c3d".into()),
            namespace: Some("kok-system".into()),
            uid: Some("5d0c8a0e-0000-4000-8000-000000000001".into()),
            resource_version: Some("42".into()),
            generation: Some(1),
            labels: Some(BTreeMap::from([("kok.dev/cluster".into(), "prod".into())])),
            annotations: Some(BTreeMap::from([("kok.dev/content-hash".into(), "abc".into())])),
            owner_references: Some(vec![OwnerReference {
                api_version: "kok.dev/v1alpha1".into(),
                kind: "Cluster".into(),
                name: "prod".into(),
                uid: "5d0c8a0e-0000-4000-8000-000000000002".into(),
                controller: Some(true),
                ..Default::default()
            }]),
            finalizers: Some(vec!["kok.dev/report".into()]),
            ..Default::default()
        };
        op.status = Some(ClusterOperationStatus {
            message: Some("waiting for Secret prod-ssh".into()),
            ..Default::default()
        });
        let mut json = serde_json::to_value(&op).expect("serializes");
        json["metadata"]["managedFields"] = serde_json::json!([{
            "manager": "kok", "operation": "Update", "apiVersion": "kok.dev/v1alpha1",
            "time": "2026-11-22T00:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:cluster": {}, "f:id": {}}}
        }]);
        let whole: ClusterOperation = serde_json::from_value(json.clone()).expect("a ClusterOperation");
        let watched: WatchedOperation = serde_json::from_value(json).expect("a watched operation");
        assert!(whole.metadata.managed_fields.is_some());
        assert!(watched.0.metadata.managed_fields.is_none());
        assert_eq!(watched.0, op, "everything else as the API object has it");
        assert_eq!(WatchedOperation::plural(&()), "clusteroperations");
        assert_eq!(WatchedOperation::api_version(&()), "kok.dev/v1alpha1");
    }
}

/// What kok keeps of the object an API server answers a write with: its name and resourceVersion.
/// The answer is the whole object with its managed fields (a tree per writer); a write that needs
/// only these reads them and skips the rest unread ([`patch_answered`]).
#[derive(Debug, Default, Deserialize)]
pub struct Written {
    /// The object's metadata, these two fields of it.
    #[serde(default)]
    pub metadata: WrittenMeta,
}

/// The name and resourceVersion of a written object.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WrittenMeta {
    /// `metadata.name`.
    pub name: Option<String>,
    /// `metadata.resourceVersion` after the write.
    pub resource_version: Option<String>,
}

/// Patches `name` (its `status` subresource when `status`) through `api`'s URL and decodes the answer
/// as `T`: [`Written`] for the name and resourceVersion, [`serde::de::IgnoredAny`] for nothing.
/// Errors are the API server's, as `Api::patch` and `Api::patch_status` give them.
pub async fn patch_answered<K, P, T>(
    client: &kube::Client,
    api: &kube::Api<K>,
    name: &str,
    status: bool,
    params: &kube::api::PatchParams,
    patch: &kube::api::Patch<P>,
) -> kube::Result<T>
where
    K: Resource,
    P: serde::Serialize,
    T: serde::de::DeserializeOwned,
{
    let url = kube::core::Request::new(api.resource_url());
    let request = match status {
        true => url.patch_subresource("status", name, params, patch),
        false => url.patch(name, params, patch),
    }
    .map_err(kube::Error::BuildRequest)?;
    client.request::<T>(request).await
}
