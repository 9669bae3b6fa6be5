//! The Events kok publishes (`events.k8s.io/v1`): one create request each.
//!
//! kube's `Recorder` keeps every Event it published for six minutes, to count repeats into a series, and
//! scans that cache on every publish. kok's Events each mark a distinct transition, so at fleet size the
//! cache would only cost memory and time; [`Publisher`] keeps nothing.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::runtime::events::{Event, EventType};
use kube::Client;

use crate::api::FIELD_MANAGER;

/// Publishes Events as kok's controller (`reportingController: kok`, the pod's name as the instance).
#[derive(Clone)]
pub struct Publisher {
    client: Client,
    instance: String,
}

impl Publisher {
    /// A publisher talking to `client`.
    pub fn new(client: &Client) -> Self {
        Publisher {
            client: client.clone(),
            instance: std::env::var("HOSTNAME").unwrap_or_else(|_| FIELD_MANAGER.to_string()),
        }
    }

    /// Creates the Event `ev` about `reference`, in the reference's namespace.
    pub async fn publish(&self, ev: &Event, reference: &ObjectReference) -> Result<(), kube::Error> {
        let now = jiff::Timestamp::now();
        let namespace = reference.namespace.as_deref().unwrap_or("default");
        let name = reference.name.as_deref().unwrap_or(FIELD_MANAGER);
        let event = K8sEvent {
            metadata: ObjectMeta {
                name: Some(format!("{name}.{:x}", now.as_nanosecond())),
                namespace: Some(namespace.to_string()),
                ..ObjectMeta::default()
            },
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            note: ev.note.clone(),
            event_time: Some(MicroTime(now)),
            regarding: Some(reference.clone()),
            related: ev.secondary.clone(),
            reporting_controller: Some(FIELD_MANAGER.to_string()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some(
                match ev.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_string(),
            ),
            ..K8sEvent::default()
        };
        Api::<K8sEvent>::namespaced(self.client.clone(), namespace)
            .create(&PostParams::default(), &event)
            .await
            .map(|_| ())
    }
}
