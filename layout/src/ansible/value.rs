//! A variable's value as kok can know it without running ansible, and where it was set.

use serde_json::Value;

/// The value of one variable for one host: known, or not known and why.
#[derive(Clone, Debug, PartialEq)]
pub enum Known {
    /// The value ansible gives the variable, as JSON.
    Value(Value),
    /// kok cannot tell the value without running ansible.
    Unknown(Unknown),
}

/// Why a variable's value is not known.
#[derive(Clone, Debug, PartialEq)]
pub enum Unknown {
    /// A Jinja template (`{{`, `{%` or `{#` in a string) that ansible renders when it uses the value; the
    /// value as written.
    Templated(Value),
    /// A `!vault` value (or one holding one): only ansible-vault's password opens it.
    Vault,
    /// The variable is set (or could be) by a file encrypted as a whole with ansible-vault, at equal or
    /// higher precedence: its path relative to the cluster directory.
    VaultFile(String),
    /// A value ansible reads into something JSON cannot hold (a set, a complex number, a date, an integer
    /// beyond 64 bits...): what it is.
    Unsupported(String),
}

impl Known {
    /// The value when known.
    pub fn value(&self) -> Option<&Value> {
        match self {
            Known::Value(value) => Some(value),
            Known::Unknown(_) => None,
        }
    }

    /// The value when it is a known string.
    pub fn as_str(&self) -> Option<&str> {
        self.value().and_then(Value::as_str)
    }
}

impl std::fmt::Display for Unknown {
    /// Why the value is not known, as a phrase: "it is a template (`{{ x }}`)".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unknown::Templated(Value::String(text)) => {
                write!(f, "it is a template ansible renders: {text:?}")
            }
            Unknown::Templated(_) => f.write_str("it holds a template ansible renders"),
            Unknown::Vault => f.write_str("it is encrypted with ansible-vault"),
            Unknown::VaultFile(path) => write!(f, "{path} is encrypted with ansible-vault and may set it"),
            Unknown::Unsupported(what) => {
                write!(f, "ansible reads it as {what}, which kok does not evaluate")
            }
        }
    }
}

/// Where a value was set: a file of the cluster directory and, when known, the line.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Origin {
    /// Path relative to the cluster directory: `inventory.ini`, `group_vars/all/all.yml`...
    pub path: String,
    /// 1-based line of the variable's key (or of the inventory line setting it), when known.
    pub line: Option<usize>,
}

impl std::fmt::Display for Origin {
    /// `path:line`, or `path` when the line is unknown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}", self.path),
            None => f.write_str(&self.path),
        }
    }
}

/// A resolved variable: its value and the place that set the winning value.
#[derive(Clone, Debug, PartialEq)]
pub struct Setting {
    /// The value, or why it is not known.
    pub value: Known,
    /// Where the winning value was set (for a [`Unknown::VaultFile`], that file).
    pub origin: Origin,
}

/// One variable as a source sets it: its value, already judged known or not, and its line.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Var {
    pub value: Known,
    pub line: Option<usize>,
}

/// A source's variables: name → value.
pub(crate) type VarMap = std::collections::BTreeMap<String, Var>;

/// `value` judged: a template anywhere in it (strings only; mapping keys too, as ansible templates them)
/// makes it unknown.
pub(crate) fn judge(value: Value) -> Known {
    if holds_template(&value) {
        Known::Unknown(Unknown::Templated(value))
    } else {
        Known::Value(value)
    }
}

/// True when `text` is something ansible's templar renders: it holds a Jinja start marker.
pub(crate) fn is_template(text: &str) -> bool {
    text.contains("{{") || text.contains("{%") || text.contains("{#")
}

fn holds_template(value: &Value) -> bool {
    match value {
        Value::String(s) => is_template(s),
        Value::Array(items) => items.iter().any(holds_template),
        Value::Object(map) => map.iter().any(|(k, v)| is_template(k) || holds_template(v)),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_template_anywhere_in_a_value_makes_it_unknown() {
        assert_eq!(judge(json!("v1.31.4")), Known::Value(json!("v1.31.4")));
        assert!(matches!(
            judge(json!("{{ x }}")),
            Known::Unknown(Unknown::Templated(_))
        ));
        assert!(matches!(
            judge(json!(["a", {"b": "{% if x %}"}])),
            Known::Unknown(_)
        ));
        assert!(matches!(judge(json!("a {# note #}")), Known::Unknown(_)));
        assert_eq!(judge(json!({"a": "{ x }"})), Known::Value(json!({"a": "{ x }"})));
    }

    #[test]
    fn unknown_values_say_why() {
        assert_eq!(
            Unknown::VaultFile("group_vars/all/vault.yml".into()).to_string(),
            "group_vars/all/vault.yml is encrypted with ansible-vault and may set it"
        );
        let origin = Origin {
            path: "inventory.ini".into(),
            line: Some(3),
        };
        assert_eq!(origin.to_string(), "inventory.ini:3");
    }
}
