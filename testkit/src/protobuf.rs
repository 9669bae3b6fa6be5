//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`), as kubectl's generator commands
//! send them: the `k8s\0` magic, then a `runtime.Unknown` whose `raw` is the object.
//!
//! Objects are decoded with the generated types of `k8s-pb` and converted field by field into the
//! `k8s-openapi` types, whose JSON is what testkit stores. A message carrying a field outside the
//! converted set is refused (415) rather than stored without it.

use std::collections::BTreeMap;
use std::mem::take;

use k8s_openapi::api::{apps::v1 as apps, batch::v1 as batch, coordination::v1 as coordination};
use k8s_openapi::api::{core::v1 as core, events::v1 as events, rbac::v1 as rbac};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::ByteString;
use k8s_pb::api::{apps::v1 as pb_apps, batch::v1 as pb_batch, coordination::v1 as pb_coordination};
use k8s_pb::api::{core::v1 as pb_core, events::v1 as pb_events, rbac::v1 as pb_rbac};
use k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1 as pb_apiextensions;
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
        /// An item of a list.
        impl Conv<$t> for $t {
            fn conv(self, _: &mut Unsupported) -> $t {
                self
            }
        }
        impl Back<$t> for $t {
            fn back(self, _: &mut Unsupported) -> $t {
                self
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

impl Back<Option<PbIntOrString>> for IntOrString {
    fn back(self, u: &mut Unsupported) -> Option<PbIntOrString> {
        Some(self).back(u)
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
      $(ignored { $($i:ident),* })? $(embedded { $($e:ident),* })?) => {
        impl Conv<$dst> for $src {
            fn conv(mut self, u: &mut Unsupported) -> $dst {
                let mut d = <$dst>::default();
                $( d.$f = Conv::conv(take(&mut self.$f), u); )*
                $($( d.$r = <_ as Conv<Option<_>>>::conv(take(&mut self.$r), u).unwrap_or_default(); )*)?
                $($( d.$to = Conv::conv(take(&mut self.$from), u); )*)?
                $($( drop(take(&mut self.$i)); )*)?
                $($( if let Some(e) = take(&mut self.$e) { e.conv_into(&mut d, u); } )*)?
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
                $($( d.$e = Some(Embed::back_from(&mut self, u)); )*)?
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

/// A Go struct embedded in `D`: its own message in protobuf, inline fields of `D` in JSON.
trait Embed<D>: Sized {
    fn conv_into(self, d: &mut D, u: &mut Unsupported);
    fn back_from(d: &mut D, u: &mut Unsupported) -> Self;
}

macro_rules! embedded {
    ($src:ty => $dst:ty { $($f:ident),* $(,)? }) => {
        impl Embed<$dst> for $src {
            fn conv_into(mut self, d: &mut $dst, u: &mut Unsupported) {
                $( d.$f = Conv::conv(take(&mut self.$f), u); )*
                if self != <$src>::default() {
                    u.push(stringify!($src).rsplit("::").next().unwrap_or_default().trim());
                }
            }
            fn back_from(d: &mut $dst, u: &mut Unsupported) -> Self {
                let mut e = <$src>::default();
                $( e.$f = Back::back(take(&mut d.$f), u); )*
                e
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
/// events.k8s.io/v1 EventSeries has no Default (its time is required), so it is converted by hand.
impl Conv<events::EventSeries> for pb_events::EventSeries {
    fn conv(self, u: &mut Unsupported) -> events::EventSeries {
        let time = Conv::conv(self.last_observed_time, u);
        events::EventSeries {
            count: self.count.unwrap_or_default(),
            last_observed_time: time.unwrap_or(meta::MicroTime(jiff::Timestamp::UNIX_EPOCH)),
        }
    }
}

impl Conv<Option<events::EventSeries>> for Option<pb_events::EventSeries> {
    fn conv(self, u: &mut Unsupported) -> Option<events::EventSeries> {
        self.map(|s| s.conv(u))
    }
}

impl Back<Option<pb_events::EventSeries>> for Option<events::EventSeries> {
    fn back(self, u: &mut Unsupported) -> Option<pb_events::EventSeries> {
        self.map(|s| pb_events::EventSeries {
            count: Some(s.count),
            last_observed_time: Some(s.last_observed_time).back(u),
        })
    }
}

// The parts of a CRD schema that JSON writes as a value of either shape (a schema or a list, a
// schema or a bool, a schema or strings) and arbitrary JSON values (`default`, `enum`, `example`).
impl Conv<apiextensions::JSON> for pb_apiextensions::Json {
    fn conv(self, u: &mut Unsupported) -> apiextensions::JSON {
        match serde_json::from_slice(&self.raw.unwrap_or_default()) {
            Ok(v) => apiextensions::JSON(v),
            Err(_) => {
                u.push("JSON");
                apiextensions::JSON(Value::Null)
            }
        }
    }
}

impl Back<pb_apiextensions::Json> for apiextensions::JSON {
    fn back(self, _: &mut Unsupported) -> pb_apiextensions::Json {
        pb_apiextensions::Json {
            raw: serde_json::to_vec(&self.0).ok(),
        }
    }
}

impl Conv<Option<apiextensions::JSON>> for Option<pb_apiextensions::Json> {
    fn conv(self, u: &mut Unsupported) -> Option<apiextensions::JSON> {
        self.map(|j| j.conv(u))
    }
}

impl Back<Option<pb_apiextensions::Json>> for Option<apiextensions::JSON> {
    fn back(self, u: &mut Unsupported) -> Option<pb_apiextensions::Json> {
        self.map(|j| j.back(u))
    }
}

/// The status subresource is an empty message: present or not.
impl Conv<Option<apiextensions::CustomResourceSubresourceStatus>>
    for Option<pb_apiextensions::CustomResourceSubresourceStatus>
{
    fn conv(self, _: &mut Unsupported) -> Option<apiextensions::CustomResourceSubresourceStatus> {
        self.map(|_| apiextensions::CustomResourceSubresourceStatus(Value::Object(Default::default())))
    }
}

impl Back<Option<pb_apiextensions::CustomResourceSubresourceStatus>>
    for Option<apiextensions::CustomResourceSubresourceStatus>
{
    fn back(self, _: &mut Unsupported) -> Option<pb_apiextensions::CustomResourceSubresourceStatus> {
        self.map(|_| Default::default())
    }
}

impl Conv<Option<ByteString>> for Option<Vec<u8>> {
    fn conv(self, _: &mut Unsupported) -> Option<ByteString> {
        self.map(ByteString)
    }
}

impl Back<Option<Vec<u8>>> for Option<ByteString> {
    fn back(self, _: &mut Unsupported) -> Option<Vec<u8>> {
        self.map(|b| b.0)
    }
}

type PbSchema = pb_apiextensions::JsonSchemaProps;

impl Conv<Option<Box<apiextensions::JSONSchemaProps>>> for Option<Box<PbSchema>> {
    fn conv(self, u: &mut Unsupported) -> Option<Box<apiextensions::JSONSchemaProps>> {
        self.map(|s| Box::new((*s).conv(u)))
    }
}

impl Back<Option<Box<PbSchema>>> for Option<Box<apiextensions::JSONSchemaProps>> {
    fn back(self, u: &mut Unsupported) -> Option<Box<PbSchema>> {
        self.map(|s| Box::new((*s).back(u)))
    }
}

impl Conv<Option<apiextensions::JSONSchemaPropsOrArray>>
    for Option<Box<pb_apiextensions::JsonSchemaPropsOrArray>>
{
    fn conv(self, u: &mut Unsupported) -> Option<apiextensions::JSONSchemaPropsOrArray> {
        let v = *self?;
        Some(match v.schema {
            Some(s) => apiextensions::JSONSchemaPropsOrArray::Schema(Box::new((*s).conv(u))),
            None => apiextensions::JSONSchemaPropsOrArray::Schemas(
                v.j_son_schemas.into_iter().map(|s| s.conv(u)).collect(),
            ),
        })
    }
}

impl Back<Option<Box<pb_apiextensions::JsonSchemaPropsOrArray>>>
    for Option<apiextensions::JSONSchemaPropsOrArray>
{
    fn back(self, u: &mut Unsupported) -> Option<Box<pb_apiextensions::JsonSchemaPropsOrArray>> {
        Some(Box::new(match self? {
            apiextensions::JSONSchemaPropsOrArray::Schema(s) => pb_apiextensions::JsonSchemaPropsOrArray {
                schema: Some(Box::new((*s).back(u))),
                j_son_schemas: Vec::new(),
            },
            apiextensions::JSONSchemaPropsOrArray::Schemas(all) => pb_apiextensions::JsonSchemaPropsOrArray {
                schema: None,
                j_son_schemas: all.into_iter().map(|s| s.back(u)).collect(),
            },
        }))
    }
}

impl Conv<Option<apiextensions::JSONSchemaPropsOrBool>>
    for Option<Box<pb_apiextensions::JsonSchemaPropsOrBool>>
{
    fn conv(self, u: &mut Unsupported) -> Option<apiextensions::JSONSchemaPropsOrBool> {
        let v = *self?;
        Some(match v.schema {
            Some(s) => apiextensions::JSONSchemaPropsOrBool::Schema(Box::new((*s).conv(u))),
            None => apiextensions::JSONSchemaPropsOrBool::Bool(v.allows.unwrap_or_default()),
        })
    }
}

impl Back<Option<Box<pb_apiextensions::JsonSchemaPropsOrBool>>>
    for Option<apiextensions::JSONSchemaPropsOrBool>
{
    fn back(self, u: &mut Unsupported) -> Option<Box<pb_apiextensions::JsonSchemaPropsOrBool>> {
        Some(Box::new(match self? {
            apiextensions::JSONSchemaPropsOrBool::Schema(s) => pb_apiextensions::JsonSchemaPropsOrBool {
                allows: Some(true),
                schema: Some(Box::new((*s).back(u))),
            },
            apiextensions::JSONSchemaPropsOrBool::Bool(b) => pb_apiextensions::JsonSchemaPropsOrBool {
                allows: Some(b),
                schema: None,
            },
        }))
    }
}

impl Conv<apiextensions::JSONSchemaPropsOrStringArray> for pb_apiextensions::JsonSchemaPropsOrStringArray {
    fn conv(self, u: &mut Unsupported) -> apiextensions::JSONSchemaPropsOrStringArray {
        match self.schema {
            Some(s) => apiextensions::JSONSchemaPropsOrStringArray::Schema(Box::new(s.conv(u))),
            None => apiextensions::JSONSchemaPropsOrStringArray::Strings(self.property),
        }
    }
}

impl Back<pb_apiextensions::JsonSchemaPropsOrStringArray> for apiextensions::JSONSchemaPropsOrStringArray {
    fn back(self, u: &mut Unsupported) -> pb_apiextensions::JsonSchemaPropsOrStringArray {
        match self {
            apiextensions::JSONSchemaPropsOrStringArray::Schema(s) => {
                pb_apiextensions::JsonSchemaPropsOrStringArray {
                    schema: Some((*s).back(u)),
                    property: Vec::new(),
                }
            }
            apiextensions::JSONSchemaPropsOrStringArray::Strings(property) => {
                pb_apiextensions::JsonSchemaPropsOrStringArray {
                    schema: None,
                    property,
                }
            }
        }
    }
}

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

message!(pb_apiextensions::CustomResourceDefinition => apiextensions::CustomResourceDefinition {
    ,
} required { metadata, spec } ignored { status });
message!(pb_apiextensions::CustomResourceDefinitionSpec => apiextensions::CustomResourceDefinitionSpec {
    conversion, preserve_unknown_fields,
} required { group, names, scope, versions });
message!(pb_apiextensions::CustomResourceDefinitionStatus => apiextensions::CustomResourceDefinitionStatus {
    conditions, accepted_names, stored_versions,
});
message!(pb_apiextensions::CustomResourceDefinitionNames => apiextensions::CustomResourceDefinitionNames {
    singular, short_names, list_kind, categories,
} required { plural, kind });
message!(pb_apiextensions::CustomResourceDefinitionVersion => apiextensions::CustomResourceDefinitionVersion {
    deprecated, deprecation_warning, schema, subresources, additional_printer_columns, selectable_fields,
} required { name, served, storage });
message!(pb_apiextensions::CustomResourceConversion => apiextensions::CustomResourceConversion {
    webhook,
} required { strategy });
message!(pb_apiextensions::CustomResourceDefinitionCondition => apiextensions::CustomResourceDefinitionCondition {
    last_transition_time, reason, message,
} required { status } renamed { r#type => type_ });
message!(pb_apiextensions::CustomResourceValidation => apiextensions::CustomResourceValidation {
    ,
} renamed { open_apiv3_schema => open_api_v3_schema });
message!(pb_apiextensions::CustomResourceSubresources => apiextensions::CustomResourceSubresources {
    status, scale,
});
message!(pb_apiextensions::CustomResourceColumnDefinition => apiextensions::CustomResourceColumnDefinition {
    format, description, priority,
} required { name, json_path } renamed { r#type => type_ });
message!(pb_apiextensions::SelectableField => apiextensions::SelectableField {  } required { json_path });
message!(pb_apiextensions::WebhookConversion => apiextensions::WebhookConversion {
    client_config,
} required { conversion_review_versions });
message!(pb_apiextensions::CustomResourceSubresourceScale => apiextensions::CustomResourceSubresourceScale {
    label_selector_path,
} required { spec_replicas_path, status_replicas_path });
message!(pb_apiextensions::WebhookClientConfig => apiextensions::WebhookClientConfig {
    url, service, ca_bundle,
});
message!(pb_apiextensions::ServiceReference => apiextensions::ServiceReference {
    path, port,
} required { namespace, name });
message!(pb_apiextensions::JsonSchemaProps => apiextensions::JSONSchemaProps {
    id, schema, description, format, title, default, maximum, exclusive_maximum, minimum,
    exclusive_minimum, max_length, min_length, pattern, max_items, min_items, unique_items, multiple_of,
    max_properties, min_properties, required, items, all_of, one_of, any_of, not, properties,
    additional_properties, pattern_properties, dependencies, additional_items, definitions, external_docs,
    example, nullable, x_kubernetes_preserve_unknown_fields, x_kubernetes_embedded_resource,
    x_kubernetes_int_or_string, x_kubernetes_list_map_keys, x_kubernetes_list_type,
    x_kubernetes_map_type, x_kubernetes_validations,
} renamed { r#ref => ref_path, r#type => type_, r#enum => enum_ });
message!(pb_apiextensions::ExternalDocumentation => apiextensions::ExternalDocumentation {
    description, url,
});
message!(pb_apiextensions::ValidationRule => apiextensions::ValidationRule {
    message, message_expression, reason, field_path, optional_old_self,
} required { rule });

// Every message of the served built-in kinds, generated from the field lists of both crates; a
// Go struct embedded in another (a Volume's VolumeSource) is its own message in protobuf and inline in
// JSON. Fields newer than k8s-openapi's v1.33 types (PodSpec.hostnameOverride, ...) are not converted.
message!(pb_core::Pod => core::Pod { spec } required { metadata } ignored { status });
message!(pb_core::Namespace => core::Namespace { spec } required { metadata } ignored { status });
message!(pb_core::ConfigMap => core::ConfigMap { immutable, data, binary_data } required { metadata });
message!(pb_core::Secret => core::Secret {
    immutable, data, string_data,
} required { metadata } renamed { r#type => type_ });
message!(pb_core::ServiceAccount => core::ServiceAccount {
    secrets, image_pull_secrets, automount_service_account_token,
} required { metadata });
message!(pb_core::Service => core::Service { spec } required { metadata } ignored { status });
message!(pb_core::Event => core::Event {
    reason, message, source, first_timestamp, last_timestamp, count, event_time, series, action, related,
    reporting_component, reporting_instance,
} required { metadata, involved_object } renamed { r#type => type_ });
message!(pb_batch::Job => batch::Job { spec } required { metadata } ignored { status });
message!(pb_apps::Deployment => apps::Deployment { spec } required { metadata } ignored { status });
message!(pb_coordination::Lease => coordination::Lease { spec } required { metadata });
message!(pb_rbac::Role => rbac::Role { rules } required { metadata });
message!(pb_rbac::ClusterRole => rbac::ClusterRole { rules, aggregation_rule } required { metadata });
message!(pb_rbac::RoleBinding => rbac::RoleBinding { subjects } required { metadata, role_ref });
message!(pb_rbac::ClusterRoleBinding => rbac::ClusterRoleBinding {
    subjects,
} required { metadata, role_ref });
message!(pb_events::Event => events::Event {
    event_time, series, reporting_controller, reporting_instance, action, reason, regarding, related, note,
    deprecated_source, deprecated_first_timestamp, deprecated_last_timestamp, deprecated_count,
} required { metadata } renamed { r#type => type_ });
message!(pb_core::PodSpec => core::PodSpec {
    volumes, init_containers, ephemeral_containers, restart_policy, termination_grace_period_seconds,
    active_deadline_seconds, dns_policy, node_selector, service_account_name, service_account,
    automount_service_account_token, node_name, host_network, host_pid, host_ipc, share_process_namespace,
    security_context, image_pull_secrets, hostname, subdomain, affinity, scheduler_name, tolerations,
    host_aliases, priority_class_name, priority, dns_config, readiness_gates, runtime_class_name,
    enable_service_links, preemption_policy, overhead, topology_spread_constraints, set_hostname_as_fqdn, os,
    host_users, scheduling_gates, resource_claims, resources,
} required { containers });
message!(pb_core::PodStatus => core::PodStatus {
    observed_generation, phase, conditions, message, reason, nominated_node_name, host_ip, host_ips, pod_ip,
    pod_ips, start_time, init_container_statuses, container_statuses, qos_class, ephemeral_container_statuses,
    resize, resource_claim_statuses,
});
message!(pb_core::NamespaceSpec => core::NamespaceSpec { finalizers });
message!(pb_core::NamespaceStatus => core::NamespaceStatus { phase, conditions });
message!(pb_core::ObjectReference => core::ObjectReference {
    kind, namespace, name, uid, api_version, resource_version, field_path,
});
message!(pb_core::LocalObjectReference => core::LocalObjectReference {  } required { name });
message!(pb_core::ServiceSpec => core::ServiceSpec {
    ports, selector, cluster_ip, cluster_ips, external_ips, session_affinity, load_balancer_ip,
    load_balancer_source_ranges, external_name, external_traffic_policy, health_check_node_port,
    publish_not_ready_addresses, session_affinity_config, ip_families, ip_family_policy,
    allocate_load_balancer_node_ports, load_balancer_class, internal_traffic_policy, traffic_distribution,
} renamed { r#type => type_ });
message!(pb_core::ServiceStatus => core::ServiceStatus { load_balancer, conditions });
message!(pb_core::EventSource => core::EventSource { component, host });
message!(pb_core::EventSeries => core::EventSeries { count, last_observed_time });
message!(pb_batch::JobSpec => batch::JobSpec {
    parallelism, completions, active_deadline_seconds, pod_failure_policy, success_policy, backoff_limit,
    backoff_limit_per_index, max_failed_indexes, selector, manual_selector, ttl_seconds_after_finished,
    completion_mode, suspend, pod_replacement_policy, managed_by,
} required { template });
message!(pb_batch::JobStatus => batch::JobStatus {
    conditions, start_time, completion_time, active, succeeded, failed, terminating, completed_indexes,
    failed_indexes, uncounted_terminated_pods, ready,
});
message!(pb_apps::DeploymentSpec => apps::DeploymentSpec {
    replicas, strategy, min_ready_seconds, revision_history_limit, paused, progress_deadline_seconds,
} required { selector, template });
message!(pb_apps::DeploymentStatus => apps::DeploymentStatus {
    observed_generation, replicas, updated_replicas, ready_replicas, available_replicas, unavailable_replicas,
    terminating_replicas, conditions, collision_count,
});
message!(pb_coordination::LeaseSpec => coordination::LeaseSpec {
    holder_identity, lease_duration_seconds, acquire_time, renew_time, lease_transitions, strategy,
    preferred_holder,
});
message!(pb_rbac::PolicyRule => rbac::PolicyRule {
    api_groups, resources, resource_names,
} required { verbs } renamed { non_resource_ur_ls => non_resource_urls });
message!(pb_rbac::AggregationRule => rbac::AggregationRule { cluster_role_selectors });
message!(pb_rbac::Subject => rbac::Subject { api_group, namespace } required { kind, name });
message!(pb_rbac::RoleRef => rbac::RoleRef {  } required { api_group, kind, name });
message!(pb_core::Volume => core::Volume {  } required { name } embedded { volume_source });
message!(pb_core::Container => core::Container {
    image, command, args, working_dir, ports, env_from, env, resources, resize_policy, restart_policy,
    volume_mounts, volume_devices, liveness_probe, readiness_probe, startup_probe, lifecycle,
    termination_message_path, termination_message_policy, image_pull_policy, security_context, stdin,
    stdin_once, tty,
} required { name });
message!(pb_core::EphemeralContainer => core::EphemeralContainer {
    target_container_name,
} embedded { ephemeral_container_common });
message!(pb_core::PodSecurityContext => core::PodSecurityContext {
    se_linux_options, windows_options, run_as_user, run_as_group, run_as_non_root, supplemental_groups,
    supplemental_groups_policy, fs_group, sysctls, fs_group_change_policy, seccomp_profile, app_armor_profile,
    se_linux_change_policy,
});
message!(pb_core::Affinity => core::Affinity { node_affinity, pod_affinity, pod_anti_affinity });
message!(pb_core::Toleration => core::Toleration { key, operator, value, effect, toleration_seconds });
message!(pb_core::HostAlias => core::HostAlias { hostnames } required { ip });
message!(pb_core::PodDnsConfig => core::PodDNSConfig { nameservers, searches, options });
message!(pb_core::PodReadinessGate => core::PodReadinessGate {  } required { condition_type });
message!(pb_core::TopologySpreadConstraint => core::TopologySpreadConstraint {
    label_selector, min_domains, node_affinity_policy, node_taints_policy, match_label_keys,
} required { max_skew, topology_key, when_unsatisfiable });
message!(pb_core::PodOs => core::PodOS {  } required { name });
message!(pb_core::PodSchedulingGate => core::PodSchedulingGate {  } required { name });
message!(pb_core::PodResourceClaim => core::PodResourceClaim {
    resource_claim_name, resource_claim_template_name,
} required { name });
message!(pb_core::ResourceRequirements => core::ResourceRequirements { limits, requests, claims });
message!(pb_core::PodCondition => core::PodCondition {
    observed_generation, last_probe_time, last_transition_time, reason, message,
} required { status } renamed { r#type => type_ });
message!(pb_core::HostIp => core::HostIP {  } required { ip });
message!(pb_core::PodIp => core::PodIP {  } required { ip });
message!(pb_core::ContainerStatus => core::ContainerStatus {
    state, last_state, container_id, started, allocated_resources, resources, volume_mounts, user,
    allocated_resources_status, stop_signal,
} required { name, ready, restart_count, image, image_id });
message!(pb_core::PodResourceClaimStatus => core::PodResourceClaimStatus {
    resource_claim_name,
} required { name });
message!(pb_core::NamespaceCondition => core::NamespaceCondition {
    last_transition_time, reason, message,
} required { status } renamed { r#type => type_ });
message!(pb_core::ServicePort => core::ServicePort {
    name, protocol, app_protocol, target_port, node_port,
} required { port });
message!(pb_core::SessionAffinityConfig => core::SessionAffinityConfig { client_ip });
message!(pb_core::LoadBalancerStatus => core::LoadBalancerStatus { ingress });
message!(pb_batch::PodFailurePolicy => batch::PodFailurePolicy {  } required { rules });
message!(pb_batch::SuccessPolicy => batch::SuccessPolicy {  } required { rules });
message!(pb_core::PodTemplateSpec => core::PodTemplateSpec { metadata, spec });
message!(pb_batch::JobCondition => batch::JobCondition {
    last_probe_time, last_transition_time, reason, message,
} required { status } renamed { r#type => type_ });
message!(pb_batch::UncountedTerminatedPods => batch::UncountedTerminatedPods { succeeded, failed });
message!(pb_apps::DeploymentStrategy => apps::DeploymentStrategy {
    rolling_update,
} renamed { r#type => type_ });
message!(pb_apps::DeploymentCondition => apps::DeploymentCondition {
    last_update_time, last_transition_time, reason, message,
} required { status } renamed { r#type => type_ });
message!(pb_core::HostPathVolumeSource => core::HostPathVolumeSource {
    ,
} required { path } renamed { r#type => type_ });
message!(pb_core::EmptyDirVolumeSource => core::EmptyDirVolumeSource { medium, size_limit });
message!(pb_core::GcePersistentDiskVolumeSource => core::GCEPersistentDiskVolumeSource {
    fs_type, partition, read_only,
} required { pd_name });
message!(pb_core::AwsElasticBlockStoreVolumeSource => core::AWSElasticBlockStoreVolumeSource {
    fs_type, partition, read_only,
} required { volume_id });
message!(pb_core::GitRepoVolumeSource => core::GitRepoVolumeSource {
    revision, directory,
} required { repository });
message!(pb_core::SecretVolumeSource => core::SecretVolumeSource {
    secret_name, items, default_mode, optional,
});
message!(pb_core::NfsVolumeSource => core::NFSVolumeSource { read_only } required { server, path });
message!(pb_core::IscsiVolumeSource => core::ISCSIVolumeSource {
    iscsi_interface, fs_type, read_only, portals, chap_auth_discovery, chap_auth_session, secret_ref,
    initiator_name,
} required { target_portal, iqn, lun });
message!(pb_core::GlusterfsVolumeSource => core::GlusterfsVolumeSource {
    read_only,
} required { endpoints, path });
message!(pb_core::PersistentVolumeClaimVolumeSource => core::PersistentVolumeClaimVolumeSource {
    read_only,
} required { claim_name });
message!(pb_core::RbdVolumeSource => core::RBDVolumeSource {
    fs_type, pool, user, keyring, secret_ref, read_only,
} required { monitors, image });
message!(pb_core::FlexVolumeSource => core::FlexVolumeSource {
    fs_type, secret_ref, read_only, options,
} required { driver });
message!(pb_core::CinderVolumeSource => core::CinderVolumeSource {
    fs_type, read_only, secret_ref,
} required { volume_id });
message!(pb_core::CephFsVolumeSource => core::CephFSVolumeSource {
    path, user, secret_file, secret_ref, read_only,
} required { monitors });
message!(pb_core::FlockerVolumeSource => core::FlockerVolumeSource { dataset_name, dataset_uuid });
message!(pb_core::DownwardAPIVolumeSource => core::DownwardAPIVolumeSource { items, default_mode });
message!(pb_core::FcVolumeSource => core::FCVolumeSource {
    lun, fs_type, read_only, wwids,
} renamed { target_ww_ns => target_wwns });
message!(pb_core::AzureFileVolumeSource => core::AzureFileVolumeSource {
    read_only,
} required { secret_name, share_name });
message!(pb_core::ConfigMapVolumeSource => core::ConfigMapVolumeSource {
    items, default_mode, optional,
} embedded { local_object_reference });
message!(pb_core::VsphereVirtualDiskVolumeSource => core::VsphereVirtualDiskVolumeSource {
    fs_type, storage_policy_name, storage_policy_id,
} required { volume_path });
message!(pb_core::QuobyteVolumeSource => core::QuobyteVolumeSource {
    read_only, user, group, tenant,
} required { registry, volume });
message!(pb_core::AzureDiskVolumeSource => core::AzureDiskVolumeSource {
    caching_mode, fs_type, read_only, kind,
} required { disk_name, disk_uri });
message!(pb_core::PhotonPersistentDiskVolumeSource => core::PhotonPersistentDiskVolumeSource {
    fs_type,
} required { pd_id });
message!(pb_core::ProjectedVolumeSource => core::ProjectedVolumeSource { sources, default_mode });
message!(pb_core::PortworxVolumeSource => core::PortworxVolumeSource {
    fs_type, read_only,
} required { volume_id });
message!(pb_core::ScaleIoVolumeSource => core::ScaleIOVolumeSource {
    ssl_enabled, protection_domain, storage_pool, storage_mode, volume_name, fs_type, read_only,
} required { gateway, system, secret_ref });
message!(pb_core::StorageOsVolumeSource => core::StorageOSVolumeSource {
    volume_name, volume_namespace, fs_type, read_only, secret_ref,
});
message!(pb_core::CSIVolumeSource => core::CSIVolumeSource {
    read_only, fs_type, volume_attributes, node_publish_secret_ref,
} required { driver });
message!(pb_core::EphemeralVolumeSource => core::EphemeralVolumeSource { volume_claim_template });
message!(pb_core::ImageVolumeSource => core::ImageVolumeSource { reference, pull_policy });
message!(pb_core::ContainerPort => core::ContainerPort {
    name, host_port, protocol, host_ip,
} required { container_port });
message!(pb_core::EnvFromSource => core::EnvFromSource { prefix, config_map_ref, secret_ref });
message!(pb_core::EnvVar => core::EnvVar { value, value_from } required { name });
message!(pb_core::ContainerResizePolicy => core::ContainerResizePolicy {
    ,
} required { resource_name, restart_policy });
message!(pb_core::VolumeMount => core::VolumeMount {
    read_only, recursive_read_only, sub_path, mount_propagation, sub_path_expr,
} required { name, mount_path });
message!(pb_core::VolumeDevice => core::VolumeDevice {  } required { name, device_path });
message!(pb_core::Probe => core::Probe {
    initial_delay_seconds, timeout_seconds, period_seconds, success_threshold, failure_threshold,
    termination_grace_period_seconds,
} embedded { handler });
message!(pb_core::Lifecycle => core::Lifecycle { post_start, pre_stop, stop_signal });
message!(pb_core::SecurityContext => core::SecurityContext {
    capabilities, privileged, se_linux_options, windows_options, run_as_user, run_as_group, run_as_non_root,
    read_only_root_filesystem, allow_privilege_escalation, proc_mount, seccomp_profile, app_armor_profile,
});
message!(pb_core::SeLinuxOptions => core::SELinuxOptions { user, role, level } renamed { r#type => type_ });
message!(pb_core::WindowsSecurityContextOptions => core::WindowsSecurityContextOptions {
    gmsa_credential_spec_name, gmsa_credential_spec, run_as_user_name, host_process,
});
message!(pb_core::Sysctl => core::Sysctl {  } required { name, value });
message!(pb_core::SeccompProfile => core::SeccompProfile { localhost_profile } renamed { r#type => type_ });
message!(pb_core::AppArmorProfile => core::AppArmorProfile { localhost_profile } renamed { r#type => type_ });
message!(pb_core::NodeAffinity => core::NodeAffinity {
    required_during_scheduling_ignored_during_execution, preferred_during_scheduling_ignored_during_execution,
});
message!(pb_core::PodAffinity => core::PodAffinity {
    required_during_scheduling_ignored_during_execution, preferred_during_scheduling_ignored_during_execution,
});
message!(pb_core::PodAntiAffinity => core::PodAntiAffinity {
    required_during_scheduling_ignored_during_execution, preferred_during_scheduling_ignored_during_execution,
});
message!(pb_core::PodDnsConfigOption => core::PodDNSConfigOption { name, value });
message!(pb_core::ResourceClaim => core::ResourceClaim { request } required { name });
message!(pb_core::ContainerState => core::ContainerState { waiting, running, terminated });
message!(pb_core::VolumeMountStatus => core::VolumeMountStatus {
    read_only, recursive_read_only,
} required { name, mount_path });
message!(pb_core::ContainerUser => core::ContainerUser { linux });
message!(pb_core::ResourceStatus => core::ResourceStatus { resources } required { name });
message!(pb_core::ClientIpConfig => core::ClientIPConfig { timeout_seconds });
message!(pb_core::LoadBalancerIngress => core::LoadBalancerIngress { ip, hostname, ip_mode, ports });
message!(pb_batch::PodFailurePolicyRule => batch::PodFailurePolicyRule {
    on_exit_codes, on_pod_conditions,
} required { action });
message!(pb_batch::SuccessPolicyRule => batch::SuccessPolicyRule { succeeded_indexes, succeeded_count });
message!(pb_apps::RollingUpdateDeployment => apps::RollingUpdateDeployment { max_unavailable, max_surge });
message!(pb_core::KeyToPath => core::KeyToPath { mode } required { key, path });
message!(pb_core::DownwardAPIVolumeFile => core::DownwardAPIVolumeFile {
    field_ref, resource_field_ref, mode,
} required { path });
message!(pb_core::VolumeProjection => core::VolumeProjection {
    secret, downward_api, config_map, service_account_token, cluster_trust_bundle,
});
message!(pb_core::PersistentVolumeClaimTemplate => core::PersistentVolumeClaimTemplate {
    metadata,
} required { spec });
message!(pb_core::ConfigMapEnvSource => core::ConfigMapEnvSource {
    optional,
} embedded { local_object_reference });
message!(pb_core::SecretEnvSource => core::SecretEnvSource { optional } embedded { local_object_reference });
message!(pb_core::EnvVarSource => core::EnvVarSource {
    field_ref, resource_field_ref, config_map_key_ref, secret_key_ref,
});
message!(pb_core::ExecAction => core::ExecAction { command });
message!(pb_core::HttpGetAction => core::HTTPGetAction {
    path, host, scheme, http_headers,
} required { port });
message!(pb_core::TcpSocketAction => core::TCPSocketAction { host } required { port });
message!(pb_core::GrpcAction => core::GRPCAction { service } required { port });
message!(pb_core::LifecycleHandler => core::LifecycleHandler { exec, http_get, tcp_socket, sleep });
message!(pb_core::Capabilities => core::Capabilities { add, drop });
message!(pb_core::NodeSelector => core::NodeSelector {  } required { node_selector_terms });
message!(pb_core::PreferredSchedulingTerm => core::PreferredSchedulingTerm {
    ,
} required { weight, preference });
message!(pb_core::PodAffinityTerm => core::PodAffinityTerm {
    label_selector, namespaces, namespace_selector, match_label_keys, mismatch_label_keys,
} required { topology_key });
message!(pb_core::WeightedPodAffinityTerm => core::WeightedPodAffinityTerm {
    ,
} required { weight, pod_affinity_term });
message!(pb_core::ContainerStateWaiting => core::ContainerStateWaiting { reason, message });
message!(pb_core::ContainerStateRunning => core::ContainerStateRunning { started_at });
message!(pb_core::ContainerStateTerminated => core::ContainerStateTerminated {
    signal, reason, message, started_at, finished_at, container_id,
} required { exit_code });
message!(pb_core::LinuxContainerUser => core::LinuxContainerUser {
    supplemental_groups,
} required { uid, gid });
message!(pb_core::ResourceHealth => core::ResourceHealth { health } required { resource_id });
message!(pb_core::PortStatus => core::PortStatus { error } required { port, protocol });
message!(pb_batch::PodFailurePolicyOnExitCodesRequirement => batch::PodFailurePolicyOnExitCodesRequirement {
    container_name,
} required { operator, values });
message!(pb_batch::PodFailurePolicyOnPodConditionsPattern => batch::PodFailurePolicyOnPodConditionsPattern {
    ,
} required { status } renamed { r#type => type_ });
message!(pb_core::ObjectFieldSelector => core::ObjectFieldSelector { api_version } required { field_path });
message!(pb_core::ResourceFieldSelector => core::ResourceFieldSelector {
    container_name, divisor,
} required { resource });
message!(pb_core::SecretProjection => core::SecretProjection {
    items, optional,
} embedded { local_object_reference });
message!(pb_core::DownwardAPIProjection => core::DownwardAPIProjection { items });
message!(pb_core::ConfigMapProjection => core::ConfigMapProjection {
    items, optional,
} embedded { local_object_reference });
message!(pb_core::ServiceAccountTokenProjection => core::ServiceAccountTokenProjection {
    audience, expiration_seconds,
} required { path });
message!(pb_core::ClusterTrustBundleProjection => core::ClusterTrustBundleProjection {
    name, signer_name, label_selector, optional,
} required { path });
message!(pb_core::PersistentVolumeClaimSpec => core::PersistentVolumeClaimSpec {
    access_modes, selector, resources, volume_name, storage_class_name, volume_mode, data_source,
    data_source_ref, volume_attributes_class_name,
});
message!(pb_core::ConfigMapKeySelector => core::ConfigMapKeySelector {
    optional,
} required { key } embedded { local_object_reference });
message!(pb_core::SecretKeySelector => core::SecretKeySelector {
    optional,
} required { key } embedded { local_object_reference });
message!(pb_core::HttpHeader => core::HTTPHeader {  } required { name, value });
message!(pb_core::SleepAction => core::SleepAction {  } required { seconds });
message!(pb_core::NodeSelectorTerm => core::NodeSelectorTerm { match_expressions, match_fields });
message!(pb_core::VolumeResourceRequirements => core::VolumeResourceRequirements { limits, requests });
message!(pb_core::TypedLocalObjectReference => core::TypedLocalObjectReference {
    api_group,
} required { kind, name });
message!(pb_core::TypedObjectReference => core::TypedObjectReference {
    api_group, namespace,
} required { kind, name });
message!(pb_core::NodeSelectorRequirement => core::NodeSelectorRequirement {
    values,
} required { key, operator });
embedded!(pb_core::VolumeSource => core::Volume {
    host_path, empty_dir, gce_persistent_disk, aws_elastic_block_store, git_repo, secret, nfs, iscsi,
    glusterfs, persistent_volume_claim, rbd, flex_volume, cinder, cephfs, flocker, downward_api, fc,
    azure_file, config_map, vsphere_volume, quobyte, azure_disk, photon_persistent_disk, projected,
    portworx_volume, scale_io, storageos, csi, ephemeral, image,
});
embedded!(pb_core::EphemeralContainerCommon => core::EphemeralContainer {
    name, image, command, args, working_dir, ports, env_from, env, resources, resize_policy, restart_policy,
    volume_mounts, volume_devices, liveness_probe, readiness_probe, startup_probe, lifecycle,
    termination_message_path, termination_message_policy, image_pull_policy, security_context, stdin,
    stdin_once, tty,
});
embedded!(pb_core::LocalObjectReference => core::ConfigMapVolumeSource { name });
embedded!(pb_core::ProbeHandler => core::Probe { exec, http_get, tcp_socket, grpc });
embedded!(pb_core::LocalObjectReference => core::ConfigMapEnvSource { name });
embedded!(pb_core::LocalObjectReference => core::SecretEnvSource { name });
embedded!(pb_core::LocalObjectReference => core::SecretProjection { name });
embedded!(pb_core::LocalObjectReference => core::ConfigMapProjection { name });
embedded!(pb_core::LocalObjectReference => core::ConfigMapKeySelector { name });
embedded!(pb_core::LocalObjectReference => core::SecretKeySelector { name });

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

        /// An object of the kind with nothing but metadata (a watch bookmark), which need not read as
        /// the k8s-openapi type (its required fields are absent).
        fn encode_metadata_only(api_version: &str, kind: &str, metadata: &Value) -> Result<Vec<u8>, ApiError> {
            let what = format!("{api_version} {kind}");
            let metadata = Some(message_of::<pb_meta::ObjectMeta, meta::ObjectMeta>(metadata, &what)?);
            match (api_version, kind) {
                $( ($av, $kind) => {
                    let mut m = <$pb>::default();
                    m.metadata = metadata;
                    Ok(m.encode_to_vec())
                } )*
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
    pb_events::EventList => pb_events::Event,
    pb_batch::JobList => pb_batch::Job,
    pb_apiextensions::CustomResourceDefinitionList => pb_apiextensions::CustomResourceDefinition,
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
    ("events.k8s.io/v1", "Event") => pb_events::Event, events::Event, pb_events::EventList;
    ("batch/v1", "Job") => pb_batch::Job, batch::Job, pb_batch::JobList;
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => pb_apiextensions::CustomResourceDefinition,
        apiextensions::CustomResourceDefinition, pb_apiextensions::CustomResourceDefinitionList;
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
        Ok(ev) if ev["type"] == "BOOKMARK" => {
            let obj = &ev["object"];
            let api_version = obj["apiVersion"].as_str().unwrap_or_default();
            let kind = obj["kind"].as_str().unwrap_or_default();
            let raw = encode_metadata_only(api_version, kind, &obj["metadata"]);
            (
                "BOOKMARK".to_string(),
                raw.map(|raw| envelope(api_version, kind, raw)),
            )
        }
        Ok(ev) => (
            ev["type"].as_str().unwrap_or_default().to_string(),
            encode(&ev["object"]),
        ),
        Err(e) => (
            String::new(),
            Err(ApiError::new(
                500,
                format!("testkit wrote an unreadable watch event: {e}"),
            )),
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
                    ..Default::default()
                }],
                hostname_override: Some("newer-than-k8s-openapi".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let e = decode(&envelope("v1", "Pod", pod.encode_to_vec())).unwrap_err();
        assert_eq!(e.code, 415);
        assert!(
            e.message.contains("fields of PodSpec are not converted"),
            "{}",
            e.message
        );
    }

    #[test]
    fn pods_with_probes_volumes_references_and_scheduling_convert_both_ways() {
        let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "n", "labels": {"app": "a"}},
            "spec": {
                "containers": [{"name": "c", "image": "busybox",
                    "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 5},
                    "readinessProbe": {"exec": {"command": ["true"]}},
                    "lifecycle": {"preStop": {"sleep": {"seconds": 3}}},
                    "envFrom": [{"configMapRef": {"name": "cfg"}}],
                    "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}},
                            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                    "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
                    "securityContext": {"readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}},
                    "volumeMounts": [{"name": "conf", "mountPath": "/conf"}]}],
                "volumes": [{"name": "conf", "configMap": {"name": "cfg", "defaultMode": 420}},
                            {"name": "scratch", "emptyDir": {}},
                            {"name": "both", "projected": {"sources": [{"secret": {"name": "s"}}]}}],
                "securityContext": {"runAsNonRoot": true, "runAsUser": 1000},
                "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
                "restartPolicy": "Never"},
            "status": {"phase": "Pending"}});
        round_trip(pod);
    }

    /// JSON → protobuf → JSON gives back what went in (less the status request bodies drop).
    fn round_trip(obj: serde_json::Value) {
        let wire = encode(&obj).expect("every field converts");
        let back = decode(&wire).expect("and back");
        let mut want = obj;
        want.as_object_mut().unwrap().remove("status");
        assert_eq!(back, want);
    }

    #[test]
    fn crds_with_every_schema_shape_and_events_convert_both_ways() {
        round_trip(
            serde_json::json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.test"},
            "spec": {"group": "example.test", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "required": ["size"],
                            "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "immutable"}],
                            "properties": {
                                "size": {"type": "integer", "minimum": 1.0, "default": 3},
                                "mode": {"type": "string", "enum": ["a", "b"]},
                                "port": {"x-kubernetes-int-or-string": true},
                                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                                "tags": {"type": "array", "items": {"type": "string"}}}},
                        "status": {"type": "object"}}}}}]},
            "status": {"storedVersions": ["v1"]}}),
        );
        round_trip(
            serde_json::json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "n"},
            "eventTime": "2026-11-23T21:00:00.123456Z", "reportingController": "kok", "reportingInstance": "kok-1",
            "action": "Apply", "reason": "Applied", "type": "Normal", "note": "applied",
            "regarding": {"kind": "ConfigMap", "name": "c", "namespace": "n"},
            "series": {"count": 2, "lastObservedTime": "2026-11-23T21:00:01.000001Z"}}),
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
