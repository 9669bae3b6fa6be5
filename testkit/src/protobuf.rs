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

/// One generated protobuf type to its k8s-openapi counterpart (request bodies).
trait Conv<T> {
    fn conv(self, u: &mut Unsupported) -> T;
}

/// One k8s-openapi type to its generated protobuf counterpart (responses).
trait Back<P> {
    fn back(self, u: &mut Unsupported) -> P;
}

impl Conv<String> for String {
    fn conv(self, _: &mut Unsupported) -> String {
        self
    }
}

impl Back<String> for String {
    fn back(self, _: &mut Unsupported) -> String {
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
        impl Back<Option<$t>> for Option<$t> {
            fn back(self, _: &mut Unsupported) -> Option<$t> {
                self
            }
        }
        /// A field the k8s-openapi type does not wrap in an Option.
        impl Back<Option<$t>> for $t {
            fn back(self, _: &mut Unsupported) -> Option<$t> {
                Some(self)
            }
        }
    )*};
}
same!(bool, i32, i64, f64);

/// A string the k8s-openapi type does not wrap in an Option, under another name.
impl Conv<String> for Option<String> {
    fn conv(self, _: &mut Unsupported) -> String {
        self.unwrap_or_default()
    }
}

impl Back<Option<String>> for Option<String> {
    fn back(self, _: &mut Unsupported) -> Option<String> {
        self
    }
}

impl Back<Option<String>> for String {
    fn back(self, _: &mut Unsupported) -> Option<String> {
        Some(self)
    }
}

impl Conv<ByteString> for Vec<u8> {
    fn conv(self, _: &mut Unsupported) -> ByteString {
        ByteString(self)
    }
}

impl Back<Vec<u8>> for ByteString {
    fn back(self, _: &mut Unsupported) -> Vec<u8> {
        self.0
    }
}

impl Conv<Quantity> for PbQuantity {
    fn conv(self, _: &mut Unsupported) -> Quantity {
        Quantity(self.string.unwrap_or_default())
    }
}

impl Back<PbQuantity> for Quantity {
    fn back(self, _: &mut Unsupported) -> PbQuantity {
        PbQuantity { string: Some(self.0) }
    }
}

impl Conv<Option<Quantity>> for Option<PbQuantity> {
    fn conv(self, u: &mut Unsupported) -> Option<Quantity> {
        self.map(|q| q.conv(u))
    }
}

impl Back<Option<PbQuantity>> for Option<Quantity> {
    fn back(self, u: &mut Unsupported) -> Option<PbQuantity> {
        self.map(|q| q.back(u))
    }
}

impl<T: Conv<U>, U> Conv<Option<Vec<U>>> for Vec<T> {
    fn conv(self, u: &mut Unsupported) -> Option<Vec<U>> {
        (!self.is_empty()).then(|| self.into_iter().map(|t| t.conv(u)).collect())
    }
}

impl<T: Back<P>, P> Back<Vec<P>> for Option<Vec<T>> {
    fn back(self, u: &mut Unsupported) -> Vec<P> {
        self.unwrap_or_default().into_iter().map(|t| t.back(u)).collect()
    }
}

impl<T: Back<P>, P> Back<Vec<P>> for Vec<T> {
    fn back(self, u: &mut Unsupported) -> Vec<P> {
        self.into_iter().map(|t| t.back(u)).collect()
    }
}

impl<T: Conv<U>, U> Conv<Option<BTreeMap<String, U>>> for BTreeMap<String, T> {
    fn conv(self, u: &mut Unsupported) -> Option<BTreeMap<String, U>> {
        (!self.is_empty()).then(|| self.into_iter().map(|(k, v)| (k, v.conv(u))).collect())
    }
}

impl<T: Back<P>, P> Back<BTreeMap<String, P>> for Option<BTreeMap<String, T>> {
    fn back(self, u: &mut Unsupported) -> BTreeMap<String, P> {
        self.unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.back(u)))
            .collect()
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

impl Back<Option<PbIntOrString>> for Option<IntOrString> {
    fn back(self, _: &mut Unsupported) -> Option<PbIntOrString> {
        self.map(|v| match v {
            IntOrString::Int(i) => PbIntOrString {
                r#type: Some(0),
                int_val: Some(i),
                str_val: Some(String::new()),
            },
            IntOrString::String(s) => PbIntOrString {
                r#type: Some(1),
                int_val: Some(0),
                str_val: Some(s),
            },
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

impl Back<Option<pb_meta::Time>> for Option<meta::Time> {
    fn back(self, _: &mut Unsupported) -> Option<pb_meta::Time> {
        // Time is serialized with second precision.
        self.map(|t| pb_meta::Time {
            seconds: Some(t.0.as_second()),
            nanos: Some(0),
        })
    }
}

impl Back<Option<pb_meta::Time>> for meta::Time {
    fn back(self, u: &mut Unsupported) -> Option<pb_meta::Time> {
        Some(self).back(u)
    }
}

impl Conv<Option<meta::MicroTime>> for Option<pb_meta::MicroTime> {
    fn conv(self, _: &mut Unsupported) -> Option<meta::MicroTime> {
        self.and_then(|t| timestamp(t.seconds, t.nanos))
            .map(meta::MicroTime)
    }
}

impl Back<Option<pb_meta::MicroTime>> for Option<meta::MicroTime> {
    fn back(self, _: &mut Unsupported) -> Option<pb_meta::MicroTime> {
        self.map(|t| pb_meta::MicroTime {
            seconds: Some(t.0.as_second()),
            nanos: Some(t.0.subsec_nanosecond()),
        })
    }
}

impl Conv<Option<meta::FieldsV1>> for Option<pb_meta::FieldsV1> {
    fn conv(self, _: &mut Unsupported) -> Option<meta::FieldsV1> {
        let raw = self?.raw?;
        serde_json::from_slice(&raw).ok().map(meta::FieldsV1)
    }
}

impl Back<Option<pb_meta::FieldsV1>> for Option<meta::FieldsV1> {
    fn back(self, _: &mut Unsupported) -> Option<pb_meta::FieldsV1> {
        self.map(|f| pb_meta::FieldsV1 {
            raw: serde_json::to_vec(&f.0).ok(),
        })
    }
}

/// Converts a message both ways: `fields` map to optional fields of the same name, `required` to
/// fields the k8s-openapi type does not wrap in an Option, `renamed` to differently named ones, and
/// `ignored` fields (a `status`, which the server sets itself) are dropped from request bodies but
/// written in responses. Whatever is left set afterwards was not converted, and the message's name is
/// recorded.
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
        impl Back<$src> for $dst {
            fn back(mut self, u: &mut Unsupported) -> $src {
                let mut d = <$src>::default();
                $( d.$f = Back::back(take(&mut self.$f), u); )*
                $($( d.$r = Back::back(take(&mut self.$r), u); )*)?
                $($( d.$from = Back::back(take(&mut self.$to), u); )*)?
                $($( d.$i = Back::back(take(&mut self.$i), u); )*)?
                if self != <$dst>::default() {
                    u.push(stringify!($src).rsplit("::").next().unwrap_or_default().trim());
                }
                d
            }
        }
        impl Back<Option<$src>> for Option<$dst> {
            fn back(self, u: &mut Unsupported) -> Option<$src> {
                self.map(|m| m.back(u))
            }
        }
        impl Back<Option<$src>> for $dst {
            fn back(self, u: &mut Unsupported) -> Option<$src> {
                Some(self.back(u))
            }
        }
    };
}

message!(pb_meta::ObjectMeta => meta::ObjectMeta {
    name, generate_name, namespace, self_link, uid, resource_version, generation,
    creation_timestamp, deletion_timestamp, deletion_grace_period_seconds, labels, annotations,
    owner_references, finalizers, managed_fields,
});
message!(pb_meta::ManagedFieldsEntry => meta::ManagedFieldsEntry {
    manager, operation, api_version, time, fields_type, fields_v1, subresource,
});
message!(pb_meta::ListMeta => meta::ListMeta { self_link, resource_version, remaining_item_count }
    renamed { r#continue => continue_ });
message!(pb_meta::Status => meta::Status { status, message, reason, details, code } required { metadata });
message!(pb_meta::StatusDetails => meta::StatusDetails {
    name, group, kind, uid, causes, retry_after_seconds,
});
message!(pb_meta::StatusCause => meta::StatusCause { reason, message, field });
/// meta.v1.Condition has no Default (its time is required), so it is converted by hand.
impl Conv<meta::Condition> for pb_meta::Condition {
    fn conv(self, u: &mut Unsupported) -> meta::Condition {
        let time = Conv::conv(self.last_transition_time, u);
        meta::Condition {
            last_transition_time: time.unwrap_or(meta::Time(jiff::Timestamp::UNIX_EPOCH)),
            message: self.message.unwrap_or_default(),
            observed_generation: self.observed_generation,
            reason: self.reason.unwrap_or_default(),
            status: self.status.unwrap_or_default(),
            type_: self.r#type.unwrap_or_default(),
        }
    }
}

impl Back<pb_meta::Condition> for meta::Condition {
    fn back(self, u: &mut Unsupported) -> pb_meta::Condition {
        pb_meta::Condition {
            r#type: Some(self.type_),
            status: Some(self.status),
            observed_generation: self.observed_generation,
            last_transition_time: self.last_transition_time.back(u),
            reason: Some(self.reason),
            message: Some(self.message),
        }
    }
}
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

// Statuses, written in responses (request bodies drop them).
message!(pb_core::NamespaceStatus => core::NamespaceStatus { phase, conditions });
message!(pb_core::NamespaceCondition => core::NamespaceCondition {
    last_transition_time, reason, message,
} required { status } renamed { r#type => type_ });
message!(pb_core::ServiceStatus => core::ServiceStatus { load_balancer, conditions });
message!(pb_core::LoadBalancerStatus => core::LoadBalancerStatus { ingress });
message!(pb_core::LoadBalancerIngress => core::LoadBalancerIngress { ip, hostname, ip_mode, ports });
message!(pb_core::PortStatus => core::PortStatus { error } required { port, protocol });
message!(pb_core::PodStatus => core::PodStatus {
    observed_generation, phase, conditions, message, reason, nominated_node_name, host_ip, host_ips,
    pod_ip, pod_ips, start_time, qos_class, resize,
});
message!(pb_core::PodCondition => core::PodCondition {
    observed_generation, last_probe_time, last_transition_time, reason, message,
} required { status } renamed { r#type => type_ });
message!(pb_core::HostIp => core::HostIP {} required { ip });
message!(pb_core::PodIp => core::PodIP {} required { ip });
message!(pb_batch::JobStatus => batch::JobStatus {
    conditions, start_time, completion_time, active, succeeded, failed, terminating,
    completed_indexes, failed_indexes, uncounted_terminated_pods, ready,
});
message!(pb_batch::JobCondition => batch::JobCondition {
    last_probe_time, last_transition_time, reason, message,
} required { status } renamed { r#type => type_ });
message!(pb_batch::UncountedTerminatedPods => batch::UncountedTerminatedPods { succeeded, failed });
message!(pb_apps::DeploymentStatus => apps::DeploymentStatus {
    observed_generation, replicas, updated_replicas, ready_replicas, available_replicas,
    unavailable_replicas, terminating_replicas, conditions, collision_count,
});
message!(pb_apps::DeploymentCondition => apps::DeploymentCondition {
    last_update_time, last_transition_time, reason, message,
} required { status } renamed { r#type => type_ });

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

/// The kinds with a protobuf form: `(apiVersion, kind) => generated type, k8s-openapi type, list type`.
macro_rules! kinds {
    ($( ($av:literal, $kind:literal) => $pb:ty, $k8s:ty, $list:ty; )*) => {
        fn decode_kind(api_version: &str, kind: &str, raw: &[u8], what: &str) -> Result<Value, ApiError> {
            match (api_version, kind) {
                $( ($av, $kind) => object::<$pb, $k8s>(raw, what), )*
                ("meta.k8s.io/v1" | "v1", "DeleteOptions") => {
                    object::<pb_meta::DeleteOptions, meta::DeleteOptions>(raw, what)
                }
                _ => Err(unsupported(format!("a {what}"))),
            }
        }

        /// Whether testkit writes objects of this kind as protobuf.
        pub fn encodes(api_version: &str, kind: &str) -> bool {
            matches!((api_version, kind), $( ($av, $kind) )|*)
        }

        fn encode_kind(api_version: &str, kind: &str, obj: &Value) -> Result<Vec<u8>, ApiError> {
            let what = format!("{api_version} {kind}");
            match (api_version, kind) {
                $( ($av, $kind) => message_of::<$pb, $k8s>(obj, &what).map(|m| m.encode_to_vec()), )*
                ("v1" | "meta.k8s.io/v1", "Status") => {
                    message_of::<pb_meta::Status, meta::Status>(obj, &what).map(|m| m.encode_to_vec())
                }
                _ => Err(not_encoded(&what, "this kind has no protobuf form in testkit")),
            }
        }

        fn encode_list(api_version: &str, kind: &str, list: &Value) -> Result<Vec<u8>, ApiError> {
            let what = format!("{api_version} {kind}List");
            let metadata = Some(message_of::<pb_meta::ListMeta, meta::ListMeta>(&list["metadata"], &what)?);
            let items = list["items"].as_array().map(Vec::as_slice).unwrap_or_default();
            match (api_version, kind) {
                $( ($av, $kind) => Ok(<$list>::encode_to_vec(&<$list>::from_parts(
                    metadata,
                    items.iter().map(|i| message_of::<$pb, $k8s>(i, &what)).collect::<Result<_, _>>()?,
                ))), )*
                _ => Err(not_encoded(&what, "this kind has no protobuf form in testkit")),
            }
        }
    };
}

/// A generated list type built from its metadata and items.
trait ListParts<P>: Sized {
    fn from_parts(metadata: Option<pb_meta::ListMeta>, items: Vec<P>) -> Self;
}

macro_rules! list_parts {
    ($($list:ty => $item:ty),* $(,)?) => {$(
        impl ListParts<$item> for $list {
            fn from_parts(metadata: Option<pb_meta::ListMeta>, items: Vec<$item>) -> Self {
                Self { metadata, items }
            }
        }
    )*};
}

list_parts!(
    pb_core::NamespaceList => pb_core::Namespace,
    pb_core::ConfigMapList => pb_core::ConfigMap,
    pb_core::SecretList => pb_core::Secret,
    pb_core::ServiceAccountList => pb_core::ServiceAccount,
    pb_core::ServiceList => pb_core::Service,
    pb_core::PodList => pb_core::Pod,
    pb_core::EventList => pb_core::Event,
    pb_batch::JobList => pb_batch::Job,
    pb_apps::DeploymentList => pb_apps::Deployment,
    pb_coordination::LeaseList => pb_coordination::Lease,
    pb_rbac::RoleList => pb_rbac::Role,
    pb_rbac::ClusterRoleList => pb_rbac::ClusterRole,
    pb_rbac::RoleBindingList => pb_rbac::RoleBinding,
    pb_rbac::ClusterRoleBindingList => pb_rbac::ClusterRoleBinding,
);

kinds! {
    ("v1", "Namespace") => pb_core::Namespace, core::Namespace, pb_core::NamespaceList;
    ("v1", "ConfigMap") => pb_core::ConfigMap, core::ConfigMap, pb_core::ConfigMapList;
    ("v1", "Secret") => pb_core::Secret, core::Secret, pb_core::SecretList;
    ("v1", "ServiceAccount") => pb_core::ServiceAccount, core::ServiceAccount, pb_core::ServiceAccountList;
    ("v1", "Service") => pb_core::Service, core::Service, pb_core::ServiceList;
    ("v1", "Pod") => pb_core::Pod, core::Pod, pb_core::PodList;
    ("v1", "Event") => pb_core::Event, core::Event, pb_core::EventList;
    ("batch/v1", "Job") => pb_batch::Job, batch::Job, pb_batch::JobList;
    ("apps/v1", "Deployment") => pb_apps::Deployment, apps::Deployment, pb_apps::DeploymentList;
    ("coordination.k8s.io/v1", "Lease") => pb_coordination::Lease, coordination::Lease,
        pb_coordination::LeaseList;
    ("rbac.authorization.k8s.io/v1", "Role") => pb_rbac::Role, rbac::Role, pb_rbac::RoleList;
    ("rbac.authorization.k8s.io/v1", "ClusterRole") => pb_rbac::ClusterRole, rbac::ClusterRole,
        pb_rbac::ClusterRoleList;
    ("rbac.authorization.k8s.io/v1", "RoleBinding") => pb_rbac::RoleBinding, rbac::RoleBinding,
        pb_rbac::RoleBindingList;
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => pb_rbac::ClusterRoleBinding,
        rbac::ClusterRoleBinding, pb_rbac::ClusterRoleBindingList;
}

/// A response testkit cannot write as protobuf: 406, as for a kind with no protobuf form.
fn not_encoded(what: &str, why: &str) -> ApiError {
    let mut e = ApiError::new(
        406,
        format!("testkit cannot write this {what} as protobuf ({why}); accept application/json as well"),
    );
    e.reason = "NotAcceptable".into();
    e
}

/// The generated message of a stored JSON object.
fn message_of<P, T>(obj: &Value, what: &str) -> Result<P, ApiError>
where
    T: serde::de::DeserializeOwned + Back<P>,
{
    let typed: T = serde_json::from_value(obj.clone())
        .map_err(|e| not_encoded(what, &format!("it does not read as {what}: {e}")))?;
    let mut u = Unsupported::new();
    let msg = typed.back(&mut u);
    if !u.is_empty() {
        u.dedup();
        return Err(not_encoded(
            what,
            &format!("fields of {} are not converted", u.join(", ")),
        ));
    }
    Ok(msg)
}

/// `k8s\0` and a `runtime.Unknown` around an encoded object, as the apiserver writes it.
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

/// Encodes a JSON response (an object, a list of a kind, or a Status) as protobuf.
pub fn encode(obj: &Value) -> Result<Vec<u8>, ApiError> {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default();
    let kind = obj["kind"].as_str().unwrap_or_default();
    let raw = match kind.strip_suffix("List") {
        Some(item) if obj["items"].is_array() => encode_list(api_version, item, obj)?,
        _ => encode_kind(api_version, kind, obj)?,
    };
    Ok(envelope(api_version, kind, raw))
}

/// The media type of a protobuf watch stream.
pub const WATCH_CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// One watch event (a JSON line `{"type", "object"}`) as a protobuf stream frame: a 4-byte
/// big-endian length, then a `meta.v1.WatchEvent` whose object is an enveloped object. An object
/// testkit cannot encode becomes an ERROR event with its Status.
pub fn watch_frame(line: &[u8]) -> Vec<u8> {
    let (kind, object) = match serde_json::from_slice::<Value>(line) {
        Ok(ev) => (ev["type"].as_str().unwrap_or_default().to_string(), encode(&ev["object"])),
        Err(e) => (
            String::new(),
            Err(ApiError::new(500, format!("testkit wrote an unreadable watch event: {e}"))),
        ),
    };
    let (kind, raw) = match object {
        Ok(raw) => (kind, raw),
        Err(e) => ("ERROR".to_string(), encode(&e.status()).unwrap_or_default()),
    };
    let event = pb_meta::WatchEvent {
        r#type: Some(kind),
        object: Some(k8s_pb::apimachinery::pkg::runtime::RawExtension { raw: Some(raw) }),
    };
    let body = event.encode_to_vec();
    [&(body.len() as u32).to_be_bytes()[..], &body].concat()
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
    let mut obj = decode_kind(&api_version, &kind, &raw, &what)?;
    // k8s-openapi writes the kind's apiVersion and kind; keep what the envelope named.
    obj["apiVersion"] = Value::String(api_version);
    obj["kind"] = Value::String(kind);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

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
