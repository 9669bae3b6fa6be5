//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`), as kubectl's generator commands
//! send them: the `k8s\0` magic, then a `runtime.Unknown` whose `raw` is the object.
//!
//! Objects are decoded with the generated types of `k8s-pb` and converted field by field into the
//! `k8s-openapi` types, whose JSON is what testkit stores. A message carrying a field outside the
//! converted set is refused (415) rather than stored without it.

use std::collections::BTreeMap;
use std::mem::take;

use k8s_openapi::api::{apps::v1 as apps, batch::v1 as batch, coordination::v1 as coordination};
use k8s_openapi::api::{core::v1 as core, rbac::v1 as rbac};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::ByteString;
use k8s_pb::api::{apps::v1 as pb_apps, batch::v1 as pb_batch, coordination::v1 as pb_coordination};
use k8s_pb::api::{core::v1 as pb_core, rbac::v1 as pb_rbac};
use k8s_pb::apimachinery::pkg::api::resource::Quantity as PbQuantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb_meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString as PbIntOrString;
use prost::Message;
use serde_json::Value;

use crate::errors::ApiError;

/// The prefix of every Kubernetes protobuf document.
const MAGIC: &[u8] = b"k8s\0";

/// The media type kubectl sends and asks for.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// Names of messages that carried fields the conversion does not cover.
type Unsupported = Vec<&'static str>;

/// One generated protobuf type to its k8s-openapi counterpart.
trait Conv<T> {
    fn conv(self, u: &mut Unsupported) -> T;
}

impl Conv<String> for String {
    fn conv(self, _: &mut Unsupported) -> String {
        self
    }
}

/// Go writes every non-pointer string, so an empty one means "not set".
impl Conv<Option<String>> for Option<String> {
    fn conv(self, _: &mut Unsupported) -> Option<String> {
        self.filter(|s| !s.is_empty())
    }
}

macro_rules! same {
    ($($t:ty),*) => {$(
        impl Conv<Option<$t>> for Option<$t> {
            fn conv(self, _: &mut Unsupported) -> Option<$t> {
                self
            }
        }
    )*};
}
same!(bool, i32, i64);

impl Conv<ByteString> for Vec<u8> {
    fn conv(self, _: &mut Unsupported) -> ByteString {
        ByteString(self)
    }
}

impl Conv<Quantity> for PbQuantity {
    fn conv(self, _: &mut Unsupported) -> Quantity {
        Quantity(self.string.unwrap_or_default())
    }
}

impl<T: Conv<U>, U> Conv<Option<Vec<U>>> for Vec<T> {
    fn conv(self, u: &mut Unsupported) -> Option<Vec<U>> {
        (!self.is_empty()).then(|| self.into_iter().map(|t| t.conv(u)).collect())
    }
}

impl<T: Conv<U>, U> Conv<Option<BTreeMap<String, U>>> for BTreeMap<String, T> {
    fn conv(self, u: &mut Unsupported) -> Option<BTreeMap<String, U>> {
        (!self.is_empty()).then(|| self.into_iter().map(|(k, v)| (k, v.conv(u))).collect())
    }
}

impl Conv<Option<IntOrString>> for Option<PbIntOrString> {
    fn conv(self, _: &mut Unsupported) -> Option<IntOrString> {
        self.map(|v| match v.r#type {
            Some(1) => IntOrString::String(v.str_val.unwrap_or_default()),
            _ => IntOrString::Int(v.int_val.unwrap_or_default()),
        })
    }
}

fn timestamp(seconds: Option<i64>, nanos: Option<i32>) -> Option<jiff::Timestamp> {
    // A zero time is written as an empty message.
    let seconds = seconds.filter(|s| *s != 0)?;
    jiff::Timestamp::new(seconds, nanos.unwrap_or(0)).ok()
}

impl Conv<Option<meta::Time>> for Option<pb_meta::Time> {
    fn conv(self, _: &mut Unsupported) -> Option<meta::Time> {
        self.and_then(|t| timestamp(t.seconds, t.nanos)).map(meta::Time)
    }
}

impl Conv<Option<meta::MicroTime>> for Option<pb_meta::MicroTime> {
    fn conv(self, _: &mut Unsupported) -> Option<meta::MicroTime> {
        self.and_then(|t| timestamp(t.seconds, t.nanos))
            .map(meta::MicroTime)
    }
}

/// Converts a message: `fields` map to optional fields of the same name, `required` to fields the
/// k8s-openapi type does not wrap in an Option, `renamed` to differently named ones, and `ignored`
/// fields are dropped (a `status`, which the server sets itself). Whatever is left set afterwards was
/// not converted, and the message's name is recorded.
macro_rules! message {
    ($src:ty => $dst:ty {
        $($f:ident),* $(,)?
    } $(required { $($r:ident),* $(,)? })? $(renamed { $($from:ident => $to:ident),* $(,)? })?
      $(ignored { $($i:ident),* })?) => {
        impl Conv<$dst> for $src {
            fn conv(mut self, u: &mut Unsupported) -> $dst {
                let mut d = <$dst>::default();
                $( d.$f = Conv::conv(take(&mut self.$f), u); )*
                $($( d.$r = <_ as Conv<Option<_>>>::conv(take(&mut self.$r), u).unwrap_or_default(); )*)?
                $($( d.$to = Conv::conv(take(&mut self.$from), u); )*)?
                $($( drop(take(&mut self.$i)); )*)?
                if self != <$src>::default() {
                    u.push(stringify!($src).rsplit("::").next().unwrap_or_default().trim());
                }
                d
            }
        }
        impl Conv<Option<$dst>> for Option<$src> {
            fn conv(self, u: &mut Unsupported) -> Option<$dst> {
                self.map(|m| m.conv(u))
            }
        }
    };
}

message!(pb_meta::ObjectMeta => meta::ObjectMeta {
    name, generate_name, namespace, self_link, uid, resource_version, generation,
    creation_timestamp, deletion_timestamp, deletion_grace_period_seconds, labels, annotations,
    owner_references, finalizers,
});
// managedFields sent in a body are ignored by testkit; drop them here too.
message!(pb_meta::OwnerReference => meta::OwnerReference { controller, block_owner_deletion }
    required { api_version, kind, name, uid });
message!(pb_meta::LabelSelector => meta::LabelSelector { match_labels, match_expressions });
message!(pb_meta::LabelSelectorRequirement => meta::LabelSelectorRequirement { values }
    required { key, operator });
message!(pb_meta::Preconditions => meta::Preconditions { resource_version, uid });
message!(pb_meta::DeleteOptions => meta::DeleteOptions {
    grace_period_seconds, preconditions, orphan_dependents, propagation_policy, dry_run,
});

message!(pb_core::Namespace => core::Namespace { spec } required { metadata } ignored { status });
message!(pb_core::NamespaceSpec => core::NamespaceSpec { finalizers });
message!(pb_core::ConfigMap => core::ConfigMap { immutable, data, binary_data } required { metadata });
message!(pb_core::Secret => core::Secret { immutable, data, string_data } required { metadata }
    renamed { r#type => type_ });
message!(pb_core::ServiceAccount => core::ServiceAccount {
    secrets, image_pull_secrets, automount_service_account_token,
} required { metadata });
message!(pb_core::ObjectReference => core::ObjectReference {
    kind, namespace, name, uid, api_version, resource_version, field_path,
});
message!(pb_core::LocalObjectReference => core::LocalObjectReference {} required { name });
message!(pb_core::Service => core::Service { spec } required { metadata } ignored { status });
message!(pb_core::ServiceSpec => core::ServiceSpec {
    ports, selector, cluster_ip, cluster_ips, external_ips, session_affinity, load_balancer_ip,
    load_balancer_source_ranges, external_name, external_traffic_policy, health_check_node_port,
    publish_not_ready_addresses, ip_families, ip_family_policy, allocate_load_balancer_node_ports,
    load_balancer_class, internal_traffic_policy, traffic_distribution,
} renamed { r#type => type_ });
message!(pb_core::ServicePort => core::ServicePort {
    name, protocol, app_protocol, target_port, node_port,
} required { port });
message!(pb_core::Pod => core::Pod { spec } required { metadata } ignored { status });
message!(pb_core::PodTemplateSpec => core::PodTemplateSpec { metadata, spec });
message!(pb_core::PodSpec => core::PodSpec {
    restart_policy, termination_grace_period_seconds, active_deadline_seconds, dns_policy,
    node_selector, service_account_name, service_account, automount_service_account_token,
    node_name, host_network, host_pid, host_ipc, share_process_namespace, image_pull_secrets,
    hostname, subdomain, scheduler_name, priority_class_name, priority, runtime_class_name,
    enable_service_links, preemption_policy, set_hostname_as_fqdn, host_users, init_containers,
} required { containers });
message!(pb_core::Container => core::Container {
    image, command, args, working_dir, ports, env, resources, volume_mounts,
    termination_message_path, termination_message_policy, image_pull_policy, stdin, stdin_once, tty,
} required { name });
message!(pb_core::ContainerPort => core::ContainerPort { name, host_port, protocol, host_ip }
    required { container_port });
message!(pb_core::EnvVar => core::EnvVar { value } required { name });
message!(pb_core::ResourceRequirements => core::ResourceRequirements { limits, requests });
message!(pb_core::VolumeMount => core::VolumeMount {
    read_only, recursive_read_only, sub_path, mount_propagation, sub_path_expr,
} required { name, mount_path });
message!(pb_core::Event => core::Event {
    reason, message, source, first_timestamp, last_timestamp, count, event_time, series, action,
    related, reporting_component, reporting_instance,
} required { metadata, involved_object } renamed { r#type => type_ });
message!(pb_core::EventSource => core::EventSource { component, host });
message!(pb_core::EventSeries => core::EventSeries { count, last_observed_time });

message!(pb_batch::Job => batch::Job { spec } required { metadata } ignored { status });
message!(pb_batch::JobSpec => batch::JobSpec {
    parallelism, completions, active_deadline_seconds, backoff_limit, backoff_limit_per_index,
    max_failed_indexes, selector, manual_selector, ttl_seconds_after_finished, completion_mode,
    suspend, pod_replacement_policy, managed_by,
} required { template });
message!(pb_apps::Deployment => apps::Deployment { spec } required { metadata } ignored { status });
message!(pb_apps::DeploymentSpec => apps::DeploymentSpec {
    replicas, strategy, min_ready_seconds, revision_history_limit, paused,
    progress_deadline_seconds,
} required { selector, template });
message!(pb_apps::DeploymentStrategy => apps::DeploymentStrategy { rolling_update }
    renamed { r#type => type_ });
message!(pb_apps::RollingUpdateDeployment => apps::RollingUpdateDeployment { max_unavailable, max_surge });
message!(pb_coordination::Lease => coordination::Lease { spec } required { metadata });
message!(pb_coordination::LeaseSpec => coordination::LeaseSpec {
    holder_identity, lease_duration_seconds, acquire_time, renew_time, lease_transitions, strategy,
    preferred_holder,
});

message!(pb_rbac::Role => rbac::Role { rules } required { metadata });
message!(pb_rbac::ClusterRole => rbac::ClusterRole { rules, aggregation_rule } required { metadata });
message!(pb_rbac::AggregationRule => rbac::AggregationRule { cluster_role_selectors });
message!(pb_rbac::PolicyRule => rbac::PolicyRule {
    api_groups, resources, resource_names,
} required { verbs } renamed { non_resource_ur_ls => non_resource_urls });
message!(pb_rbac::RoleBinding => rbac::RoleBinding { subjects } required { metadata, role_ref });
message!(pb_rbac::ClusterRoleBinding => rbac::ClusterRoleBinding { subjects }
    required { metadata, role_ref });
message!(pb_rbac::Subject => rbac::Subject { api_group, namespace } required { kind, name });
message!(pb_rbac::RoleRef => rbac::RoleRef {} required { api_group, kind, name });

fn unsupported(what: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        415,
        format!("testkit cannot decode {what} from protobuf; send it as JSON (e.g. kubectl create -f FILE)"),
    )
}

fn object<P, T>(raw: &[u8], what: &str) -> Result<Value, ApiError>
where
    P: Message + Default + Conv<T>,
    T: serde::Serialize,
{
    let msg =
        P::decode(raw).map_err(|e| ApiError::bad_request(format!("error decoding protobuf {what}: {e}")))?;
    let mut u = Unsupported::new();
    let obj = msg.conv(&mut u);
    if !u.is_empty() {
        u.dedup();
        return Err(unsupported(format!(
            "every field of this {what} (fields of {} are not converted)",
            u.join(", ")
        )));
    }
    serde_json::to_value(obj)
        .map_err(|e| ApiError::bad_request(format!("error encoding {what} as JSON: {e}")))
}

/// Decodes a protobuf request body into the JSON object testkit stores.
pub fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let Some(envelope) = body.strip_prefix(MAGIC) else {
        return Err(ApiError::bad_request(
            "protobuf body does not start with the k8s\\0 prefix",
        ));
    };
    let unknown = Unknown::decode(envelope)
        .map_err(|e| ApiError::bad_request(format!("error decoding the protobuf envelope: {e}")))?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    let raw = unknown.raw.unwrap_or_default();
    let what = format!("{api_version} {kind}");
    let mut obj = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace") => object::<pb_core::Namespace, core::Namespace>(&raw, &what),
        ("v1", "ConfigMap") => object::<pb_core::ConfigMap, core::ConfigMap>(&raw, &what),
        ("v1", "Secret") => object::<pb_core::Secret, core::Secret>(&raw, &what),
        ("v1", "ServiceAccount") => object::<pb_core::ServiceAccount, core::ServiceAccount>(&raw, &what),
        ("v1", "Service") => object::<pb_core::Service, core::Service>(&raw, &what),
        ("v1", "Pod") => object::<pb_core::Pod, core::Pod>(&raw, &what),
        ("v1", "Event") => object::<pb_core::Event, core::Event>(&raw, &what),
        ("batch/v1", "Job") => object::<pb_batch::Job, batch::Job>(&raw, &what),
        ("apps/v1", "Deployment") => object::<pb_apps::Deployment, apps::Deployment>(&raw, &what),
        ("coordination.k8s.io/v1", "Lease") => {
            object::<pb_coordination::Lease, coordination::Lease>(&raw, &what)
        }
        ("rbac.authorization.k8s.io/v1", "Role") => object::<pb_rbac::Role, rbac::Role>(&raw, &what),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
            object::<pb_rbac::ClusterRole, rbac::ClusterRole>(&raw, &what)
        }
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
            object::<pb_rbac::RoleBinding, rbac::RoleBinding>(&raw, &what)
        }
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            object::<pb_rbac::ClusterRoleBinding, rbac::ClusterRoleBinding>(&raw, &what)
        }
        ("meta.k8s.io/v1" | "v1", "DeleteOptions") => {
            object::<pb_meta::DeleteOptions, meta::DeleteOptions>(&raw, &what)
        }
        _ => Err(unsupported(format!("a {what}"))),
    }?;
    // k8s-openapi writes the kind's apiVersion and kind; keep what the envelope named.
    obj["apiVersion"] = Value::String(api_version);
    obj["kind"] = Value::String(kind);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let unknown = Unknown {
            type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        [MAGIC, &unknown.encode_to_vec()].concat()
    }

    fn meta(name: &str) -> Option<pb_meta::ObjectMeta> {
        Some(pb_meta::ObjectMeta {
            name: Some(name.into()),
            namespace: Some(String::new()),
            creation_timestamp: Some(pb_meta::Time::default()),
            ..Default::default()
        })
    }

    #[test]
    fn secret_data_is_base64_and_empty_go_fields_are_absent() {
        let secret = pb_core::Secret {
            metadata: meta("s"),
            data: [("key".to_string(), b"\x00\xffbytes".to_vec())].into(),
            r#type: Some("kubernetes.io/ssh-auth".into()),
            ..Default::default()
        };
        let obj = decode(&envelope("v1", "Secret", secret.encode_to_vec())).unwrap();
        assert_eq!(
            obj,
            serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                "data": {"key": "AP9ieXRlcw=="}, "type": "kubernetes.io/ssh-auth"})
        );
    }

    #[test]
    fn a_field_outside_the_converted_set_is_refused_not_dropped() {
        let pod = pb_core::Pod {
            metadata: meta("p"),
            spec: Some(pb_core::PodSpec {
                containers: vec![pb_core::Container {
                    name: Some("c".into()),
                    liveness_probe: Some(Default::default()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let e = decode(&envelope("v1", "Pod", pod.encode_to_vec())).unwrap_err();
        assert_eq!(e.code, 415);
        assert!(
            e.message.contains("fields of Container are not converted"),
            "{}",
            e.message
        );
    }

    #[test]
    fn bodies_without_the_prefix_or_of_unknown_kinds_are_refused() {
        assert_eq!(decode(b"{}").unwrap_err().code, 400);
        let e = decode(&envelope("kok.dev/v1alpha1", "Cluster", Vec::new())).unwrap_err();
        assert_eq!(e.code, 415);
        assert!(e.message.contains("kok.dev/v1alpha1 Cluster"), "{}", e.message);
    }
}
