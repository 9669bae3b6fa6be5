//! `/openapi/v2` in protobuf (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`), the form
//! kubectl reads for `kubectl explain --output=plaintext-openapiv2` and its client-side validation:
//! gnostic's `openapi.v2.Document` with the definitions of the Swagger document (paths are left out;
//! kubectl reads only definitions from it). The messages below declare the fields testkit writes,
//! with the field numbers of gnostic's `OpenAPIv2.proto`; `prost` encodes them.

use prost::Message;
use serde_json::Value;

/// `openapi.v2.Document`.
#[derive(Clone, PartialEq, Message)]
pub struct Document {
    #[prost(string, tag = "1")]
    pub swagger: String,
    #[prost(message, optional, tag = "2")]
    pub info: Option<Info>,
    #[prost(message, optional, tag = "9")]
    pub definitions: Option<Definitions>,
}

/// `openapi.v2.Info`.
#[derive(Clone, PartialEq, Message)]
pub struct Info {
    #[prost(string, tag = "1")]
    pub title: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

/// `openapi.v2.Definitions` (and `Properties`: the same shape).
#[derive(Clone, PartialEq, Message)]
pub struct Definitions {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSchema>,
}

/// `openapi.v2.NamedSchema`.
#[derive(Clone, PartialEq, Message)]
pub struct NamedSchema {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<Schema>,
}

/// `openapi.v2.Any`: a value as YAML.
#[derive(Clone, PartialEq, Message)]
pub struct Any {
    #[prost(string, tag = "2")]
    pub yaml: String,
}

/// `openapi.v2.NamedAny`: a vendor extension.
#[derive(Clone, PartialEq, Message)]
pub struct NamedAny {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<Any>,
}

/// `openapi.v2.AdditionalPropertiesItem`.
#[derive(Clone, PartialEq, Message)]
pub struct AdditionalPropertiesItem {
    #[prost(oneof = "AdditionalProperties", tags = "1, 2")]
    pub oneof: Option<AdditionalProperties>,
}

/// Its `oneof`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum AdditionalProperties {
    #[prost(message, tag = "1")]
    Schema(Box<Schema>),
    #[prost(bool, tag = "2")]
    Boolean(bool),
}

/// `openapi.v2.TypeItem`.
#[derive(Clone, PartialEq, Message)]
pub struct TypeItem {
    #[prost(string, repeated, tag = "1")]
    pub value: Vec<String>,
}

/// `openapi.v2.ItemsItem`.
#[derive(Clone, PartialEq, Message)]
pub struct ItemsItem {
    #[prost(message, repeated, tag = "1")]
    pub schema: Vec<Schema>,
}

/// `openapi.v2.Schema`.
#[derive(Clone, PartialEq, Message)]
pub struct Schema {
    #[prost(string, tag = "1")]
    pub r#ref: String,
    #[prost(string, tag = "2")]
    pub format: String,
    #[prost(string, tag = "3")]
    pub title: String,
    #[prost(string, tag = "4")]
    pub description: String,
    #[prost(double, tag = "6")]
    pub multiple_of: f64,
    #[prost(double, tag = "7")]
    pub maximum: f64,
    #[prost(bool, tag = "8")]
    pub exclusive_maximum: bool,
    #[prost(double, tag = "9")]
    pub minimum: f64,
    #[prost(bool, tag = "10")]
    pub exclusive_minimum: bool,
    #[prost(int64, tag = "11")]
    pub max_length: i64,
    #[prost(int64, tag = "12")]
    pub min_length: i64,
    #[prost(string, tag = "13")]
    pub pattern: String,
    #[prost(int64, tag = "14")]
    pub max_items: i64,
    #[prost(int64, tag = "15")]
    pub min_items: i64,
    #[prost(int64, tag = "17")]
    pub max_properties: i64,
    #[prost(int64, tag = "18")]
    pub min_properties: i64,
    #[prost(string, repeated, tag = "19")]
    pub required: Vec<String>,
    #[prost(message, repeated, tag = "20")]
    pub r#enum: Vec<Any>,
    #[prost(message, optional, boxed, tag = "21")]
    pub additional_properties: Option<Box<AdditionalPropertiesItem>>,
    #[prost(message, optional, tag = "22")]
    pub r#type: Option<TypeItem>,
    #[prost(message, optional, tag = "23")]
    pub items: Option<ItemsItem>,
    #[prost(message, repeated, tag = "24")]
    pub all_of: Vec<Schema>,
    #[prost(message, optional, tag = "25")]
    pub properties: Option<Definitions>,
    #[prost(message, repeated, tag = "31")]
    pub vendor_extension: Vec<NamedAny>,
}

fn yaml(v: &Value) -> Any {
    Any {
        yaml: serde_yaml::to_string(v).unwrap_or_default(),
    }
}

fn named(map: &serde_json::Map<String, Value>) -> Definitions {
    Definitions {
        additional_properties: map
            .iter()
            .map(|(name, s)| NamedSchema {
                name: name.clone(),
                value: Some(schema(s)),
            })
            .collect(),
    }
}

/// One Swagger schema as a gnostic `Schema`.
fn schema(s: &Value) -> Schema {
    let text = |k: &str| s[k].as_str().unwrap_or_default().to_string();
    let float = |k: &str| s[k].as_f64().unwrap_or_default();
    let int = |k: &str| s[k].as_i64().unwrap_or_default();
    let flag = |k: &str| s[k].as_bool().unwrap_or_default();
    let types: Vec<String> = match &s["type"] {
        Value::String(t) => vec![t.clone()],
        Value::Array(ts) => ts.iter().filter_map(|t| t.as_str().map(str::to_string)).collect(),
        _ => Vec::new(),
    };
    Schema {
        r#ref: text("$ref"),
        format: text("format"),
        title: text("title"),
        description: text("description"),
        multiple_of: float("multipleOf"),
        maximum: float("maximum"),
        exclusive_maximum: flag("exclusiveMaximum"),
        minimum: float("minimum"),
        exclusive_minimum: flag("exclusiveMinimum"),
        max_length: int("maxLength"),
        min_length: int("minLength"),
        pattern: text("pattern"),
        max_items: int("maxItems"),
        min_items: int("minItems"),
        max_properties: int("maxProperties"),
        min_properties: int("minProperties"),
        required: s["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r.as_str().map(str::to_string))
            .collect(),
        r#enum: s["enum"].as_array().into_iter().flatten().map(yaml).collect(),
        additional_properties: match &s["additionalProperties"] {
            Value::Bool(b) => Some(AdditionalProperties::Boolean(*b)),
            v @ Value::Object(_) => Some(AdditionalProperties::Schema(Box::new(schema(v)))),
            _ => None,
        }
        .map(|a| Box::new(AdditionalPropertiesItem { oneof: Some(a) })),
        r#type: (!types.is_empty()).then_some(TypeItem { value: types }),
        items: match &s["items"] {
            v @ Value::Object(_) => Some(ItemsItem {
                schema: vec![schema(v)],
            }),
            Value::Array(all) => Some(ItemsItem {
                schema: all.iter().map(schema).collect(),
            }),
            _ => None,
        },
        all_of: s["allOf"].as_array().into_iter().flatten().map(schema).collect(),
        properties: s["properties"].as_object().map(named),
        vendor_extension: s
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.starts_with("x-"))
            .map(|(k, v)| NamedAny {
                name: k.clone(),
                value: Some(yaml(v)),
            })
            .collect(),
    }
}

/// The protobuf form of a Swagger 2.0 document (see [`crate::openapi::swagger`]).
pub fn encode(swagger: &Value) -> Vec<u8> {
    Document {
        swagger: "2.0".into(),
        info: Some(Info {
            title: swagger["info"]["title"].as_str().unwrap_or_default().into(),
            version: swagger["info"]["version"].as_str().unwrap_or_default().into(),
        }),
        definitions: swagger["definitions"].as_object().map(named),
    }
    .encode_to_vec()
}
