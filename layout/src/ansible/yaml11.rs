//! YAML values typed as ansible's loader types them: PyYAML's YAML 1.1 rules for plain scalars (`yes`/`on`
//! booleans, `017` octal, `1:30` sexagesimal, floats only with a dot) and ansible's `!vault` and `!unsafe`.

use serde_json::{Number, Value};

use super::value::{is_template, Known, Unknown};
use crate::yaml::{Kind, Node};

/// `node` as ansible reads it: known, or why not (a template, a `!vault` value, a date...).
pub(crate) fn typed(node: &Node) -> Known {
    let mut templated = false;
    match convert(node, false, &mut templated) {
        Ok(value) if templated => Known::Unknown(Unknown::Templated(value)),
        Ok(value) => Known::Value(value),
        Err(why) => Known::Unknown(why),
    }
}

/// The text of a key as ansible uses it for a variable name (a plain `yes` key is the boolean True, which
/// JSON writes `true`).
pub(crate) fn key_text(node: &Node) -> String {
    let mut templated = false;
    match convert(node, true, &mut templated) {
        Ok(Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => node.scalar_text().unwrap_or_default(),
    }
}

fn tag_of(node: &Node) -> Option<&str> {
    node.written.as_ref().and_then(|w| w.tag.as_deref())
}

fn convert(node: &Node, unsafe_: bool, templated: &mut bool) -> Result<Value, Unknown> {
    let tag = tag_of(node);
    match tag {
        Some("!vault" | "!vault-encrypted") => return Err(Unknown::Vault),
        Some("!unsafe") => return convert_untagged(node, true, templated),
        None => return convert_untagged(node, unsafe_, templated),
        Some(_) => {}
    }
    let tag = tag.unwrap_or_default();
    let short = tag
        .strip_prefix("!!")
        .or_else(|| tag.strip_prefix("tag:yaml.org,2002:"))
        .unwrap_or(tag);
    let text = scalar_source(node);
    let value = match (short, text) {
        ("str", Some(text)) => Value::String(text),
        ("int", Some(text)) => int(&text).ok_or_else(|| tagged(tag))??,
        ("float", Some(text)) => float(&text).ok_or_else(|| tagged(tag))??,
        ("bool", Some(text)) => Value::Bool(boolean(&text).ok_or_else(|| tagged(tag))?),
        ("null", _) => Value::Null,
        ("map" | "seq", None) => return convert_untagged(node, unsafe_, templated),
        _ => return Err(tagged(tag)),
    };
    if !unsafe_ && value.as_str().is_some_and(is_template) {
        *templated = true;
    }
    Ok(value)
}

fn tagged(tag: &str) -> Unknown {
    Unknown::Unsupported(format!("a value tagged {tag}"))
}

/// The text of a scalar as written (plain) or as its quotes give it; `None` for collections.
fn scalar_source(node: &Node) -> Option<String> {
    if let Some(plain) = node.written.as_ref().and_then(|w| w.plain.clone()) {
        return Some(plain);
    }
    match &node.kind {
        Kind::Seq(_) | Kind::Map(_) => None,
        _ => node.scalar_text(),
    }
}

fn convert_untagged(node: &Node, unsafe_: bool, templated: &mut bool) -> Result<Value, Unknown> {
    match &node.kind {
        Kind::Seq(items) => items
            .iter()
            .map(|item| convert(item, unsafe_, templated))
            .collect::<Result<_, _>>()
            .map(Value::Array),
        Kind::Map(entries) => map(entries, unsafe_, templated),
        _ => {
            let value = match node.written.as_ref().and_then(|w| w.plain.as_deref()) {
                Some(plain) => plain_scalar(plain)?,
                None => Value::String(node.scalar_text().unwrap_or_default()),
            };
            if !unsafe_ && value.as_str().is_some_and(is_template) {
                *templated = true;
            }
            Ok(value)
        }
    }
}

/// A mapping, with YAML 1.1 merge keys (`<<: *defaults`) applied as PyYAML applies them: merged entries
/// first, the mapping's own entries over them.
fn map(entries: &[(Node, Node)], unsafe_: bool, templated: &mut bool) -> Result<Value, Unknown> {
    let mut merged = serde_json::Map::new();
    let mut own = serde_json::Map::new();
    for (key, value) in entries {
        let is_merge = key.written.as_ref().and_then(|w| w.plain.as_deref()) == Some("<<");
        if is_merge {
            let sources: Vec<&Node> = match &value.kind {
                Kind::Seq(items) => items.iter().collect(),
                _ => vec![value],
            };
            // Earlier mappings in a merge list win over later ones.
            for source in sources.into_iter().rev() {
                if let Value::Object(fields) = convert(source, unsafe_, templated)? {
                    merged.extend(fields);
                }
            }
            continue;
        }
        let name = match convert(key, true, templated)? {
            Value::String(s) => s,
            other => other.to_string(),
        };
        if !unsafe_ && is_template(&name) {
            *templated = true;
        }
        own.insert(name, convert(value, unsafe_, templated)?);
    }
    merged.extend(own);
    Ok(Value::Object(merged))
}

/// A plain scalar resolved by PyYAML's YAML 1.1 implicit resolvers, in their order.
fn plain_scalar(text: &str) -> Result<Value, Unknown> {
    if let Some(b) = boolean(text) {
        return Ok(Value::Bool(b));
    }
    if let Some(value) = float(text) {
        return value;
    }
    if let Some(value) = int(text) {
        return value;
    }
    if matches!(text, "~" | "null" | "Null" | "NULL" | "") {
        return Ok(Value::Null);
    }
    if is_timestamp(text) {
        return Err(Unknown::Unsupported("a date (YAML 1.1 timestamp)".into()));
    }
    Ok(Value::String(text.to_string()))
}

fn boolean(text: &str) -> Option<bool> {
    match text {
        "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => Some(true),
        "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => Some(false),
        _ => None,
    }
}

fn split_sign(text: &str) -> (bool, &str) {
    match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    }
}

fn all(text: &str, f: impl Fn(u8) -> bool) -> bool {
    text.bytes().all(f)
}

/// `[0-5]?[0-9]`: one sexagesimal part after the first.
fn base60_part(part: &str) -> bool {
    let b = part.as_bytes();
    match b.len() {
        1 => b[0].is_ascii_digit(),
        2 => (b'0'..=b'5').contains(&b[0]) && b[1].is_ascii_digit(),
        _ => false,
    }
}

/// PyYAML's int: `0b`, `0x`, leading-zero octal, decimal, and `1:30` sexagesimal; underscores ignored.
/// `None` when `text` is not one; `Some(Err)` for one beyond 64 bits.
fn int(text: &str) -> Option<Result<Value, Unknown>> {
    let (negative, body) = split_sign(text);
    let digit = |c: u8| c.is_ascii_digit() || c == b'_';
    let value: i128 = if let Some(bin) = body.strip_prefix("0b") {
        if bin.is_empty() || !all(bin, |c| c == b'0' || c == b'1' || c == b'_') {
            return None;
        }
        radix(bin, 2)?
    } else if let Some(hex) = body.strip_prefix("0x") {
        if hex.is_empty() || !all(hex, |c| c.is_ascii_hexdigit() || c == b'_') {
            return None;
        }
        radix(hex, 16)?
    } else if body.len() > 1 && body.starts_with('0') {
        if !all(&body[1..], |c| (b'0'..=b'7').contains(&c) || c == b'_') {
            return None;
        }
        radix(&body[1..], 8)?
    } else if body == "0" {
        0
    } else if body.starts_with(|c: char| ('1'..='9').contains(&c)) {
        let mut parts = body.split(':');
        let first = parts.next().unwrap_or_default();
        if !all(first, digit) {
            return None;
        }
        let rest: Vec<&str> = parts.collect();
        if !rest.iter().all(|p| base60_part(p)) {
            return None;
        }
        let mut value = radix(first, 10)?;
        for part in rest {
            value = value.checked_mul(60)?.checked_add(radix(part, 10)?)?;
        }
        value
    } else {
        return None;
    };
    let value = if negative { -value } else { value };
    Some(
        i64::try_from(value)
            .map(Value::from)
            .or_else(|_| u64::try_from(value).map(Value::from))
            .map_err(|_| Unknown::Unsupported("an integer beyond 64 bits".into())),
    )
}

/// Digits in `radix` with underscores ignored; `None` past 128 bits (Python's int literals read the same).
pub(super) fn radix(digits: &str, radix: u32) -> Option<i128> {
    let mut value: i128 = 0;
    for c in digits.chars().filter(|c| *c != '_') {
        value = value
            .checked_mul(radix as i128)?
            .checked_add(c.to_digit(radix)? as i128)?;
    }
    Some(value)
}

/// PyYAML's float: a dot is required, an exponent needs its sign; `.inf`, `.nan` and `1:30.5`.
fn float(text: &str) -> Option<Result<Value, Unknown>> {
    let not_finite = || Some(Err(Unknown::Unsupported("a float that is not finite".into())));
    let (negative, body) = split_sign(text);
    if matches!(body, ".inf" | ".Inf" | ".INF") {
        return not_finite();
    }
    if matches!(text, ".nan" | ".NaN" | ".NAN") {
        return not_finite();
    }
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(at) => (&body[..at], Some(&body[at + 1..])),
        None => (body, None),
    };
    if let Some(exponent) = exponent {
        let digits = exponent.strip_prefix(['+', '-'])?;
        if digits.is_empty() || !all(digits, |c| c.is_ascii_digit()) {
            return None;
        }
    }
    let (int_part, frac) = mantissa.split_once('.')?;
    if !all(frac, |c| c.is_ascii_digit() || c == b'_') {
        return None;
    }
    let value = if int_part.contains(':') {
        // Sexagesimal: no exponent, and no sign-less leading dot.
        if exponent.is_some() {
            return None;
        }
        let mut parts = int_part.split(':');
        let first = parts.next().unwrap_or_default();
        if !first.starts_with(|c: char| c.is_ascii_digit())
            || !all(first, |c| c.is_ascii_digit() || c == b'_')
        {
            return None;
        }
        let rest: Vec<&str> = parts.collect();
        if !rest.iter().all(|p| base60_part(p)) {
            return None;
        }
        let mut value: f64 = first.replace('_', "").parse().ok()?;
        for part in &rest {
            value = value * 60.0 + part.parse::<f64>().ok()?;
        }
        // PyYAML adds the fraction to the last part.
        let frac: f64 = format!("0.{}", frac.replace('_', "")).parse().unwrap_or(0.0);
        value + frac
    } else {
        if int_part.is_empty() {
            // `.5`: no sign allowed, and a digit must follow the dot.
            if negative || text.starts_with('+') || !frac.starts_with(|c: char| c.is_ascii_digit()) {
                return None;
            }
        } else if !int_part.starts_with(|c: char| c.is_ascii_digit())
            || !all(int_part, |c| c.is_ascii_digit() || c == b'_')
        {
            return None;
        }
        let cleaned = body.replace('_', "");
        let cleaned = if cleaned.ends_with('.') || cleaned.contains(".e") || cleaned.contains(".E") {
            cleaned.replacen('.', ".0", 1)
        } else {
            cleaned
        };
        cleaned.parse::<f64>().ok()?
    };
    let value = if negative { -value } else { value };
    Some(match Number::from_f64(value) {
        Some(n) => Ok(Value::Number(n)),
        None => Err(Unknown::Unsupported("a float that is not finite".into())),
    })
}

/// PyYAML's timestamp: `2024-01-31`, or a date and time.
fn is_timestamp(text: &str) -> bool {
    let b = text.as_bytes();
    let digits =
        |range: std::ops::Range<usize>| b.get(range).is_some_and(|s| s.iter().all(u8::is_ascii_digit));
    if b.len() == 10 && digits(0..4) && b[4] == b'-' && digits(5..7) && b[7] == b'-' && digits(8..10) {
        return true;
    }
    // Date and time: YYYY-M(M)-D(D) followed by `T`/`t`/spaces and a time; kok only needs to recognise it.
    digits(0..4)
        && b.get(4) == Some(&b'-')
        && text.len() > 10
        && text[5..].contains(':')
        && text[5..].split(['T', 't', ' ', '\t']).next().is_some_and(|date| {
            let mut parts = date.split('-');
            let (m, d) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
            parts.next().is_none()
                && (1..=2).contains(&m.len())
                && (1..=2).contains(&d.len())
                && all(m, |c| c.is_ascii_digit())
                && all(d, |c| c.is_ascii_digit())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml::parse;
    use serde_json::json;

    fn value_of(text: &str) -> Known {
        let root = parse(&format!("v: {text}\n")).unwrap().root.unwrap();
        typed(&root.as_map().unwrap()[0].1)
    }

    fn known(text: &str) -> Value {
        match value_of(text) {
            Known::Value(v) => v,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn yaml_1_1_booleans_include_yes_no_on_off() {
        for t in ["yes", "Yes", "YES", "on", "true", "True"] {
            assert_eq!(known(t), json!(true), "{t}");
        }
        for t in ["no", "Off", "FALSE"] {
            assert_eq!(known(t), json!(false), "{t}");
        }
        assert_eq!(known("'yes'"), json!("yes"));
        assert_eq!(known("y"), json!("y"));
        assert_eq!(known("tRue"), json!("tRue"));
    }

    #[test]
    fn yaml_1_1_integers_read_octal_hex_binary_and_base_60() {
        assert_eq!(known("017"), json!(15));
        assert_eq!(known("0x1F"), json!(31));
        assert_eq!(known("0b101"), json!(5));
        assert_eq!(known("1_000"), json!(1000));
        assert_eq!(known("-42"), json!(-42));
        assert_eq!(known("1:30"), json!(90));
        assert_eq!(known("0o17"), json!("0o17"));
        assert_eq!(known("09"), json!("09"));
        assert_eq!(known("0"), json!(0));
        assert_eq!(known("\"017\""), json!("017"));
    }

    #[test]
    fn yaml_1_1_floats_need_a_dot_and_a_signed_exponent() {
        assert_eq!(known("1.5"), json!(1.5));
        assert_eq!(known("1.0e+3"), json!(1000.0));
        assert_eq!(known("1.0e3"), json!("1.0e3"));
        assert_eq!(known("1e3"), json!("1e3"));
        assert_eq!(known("1."), json!(1.0));
        assert_eq!(known(".5"), json!(0.5));
        assert_eq!(known("-.5"), json!("-.5"));
        assert_eq!(known("1:30.5"), json!(90.5));
        assert_eq!(known("1_0.5"), json!(10.5));
        assert!(matches!(
            value_of(".inf"),
            Known::Unknown(Unknown::Unsupported(_))
        ));
        assert_eq!(known("10.0.0.1"), json!("10.0.0.1"));
        assert_eq!(known("v1.31.4"), json!("v1.31.4"));
    }

    #[test]
    fn nulls_dates_and_strings() {
        assert_eq!(known("~"), json!(null));
        assert_eq!(known("Null"), json!(null));
        assert_eq!(known(""), json!(null));
        assert!(matches!(
            value_of("2024-01-31"),
            Known::Unknown(Unknown::Unsupported(_))
        ));
        assert!(matches!(
            value_of("2001-12-14t21:59:43.10-05:00"),
            Known::Unknown(_)
        ));
        assert_eq!(known("2024-1-31"), json!("2024-1-31"));
        assert_eq!(known("plain text"), json!("plain text"));
    }

    #[test]
    fn vault_values_and_templates_are_unknown_and_unsafe_ones_are_known() {
        assert_eq!(
            value_of("!vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  3132\n"),
            Known::Unknown(Unknown::Vault)
        );
        assert!(matches!(
            value_of("[a, !vault x]"),
            Known::Unknown(Unknown::Vault)
        ));
        assert!(matches!(
            value_of("\"{{ x }}\""),
            Known::Unknown(Unknown::Templated(_))
        ));
        assert_eq!(known("!unsafe '{{ x }}'"), json!("{{ x }}"));
        assert_eq!(known("!!str 017"), json!("017"));
        assert_eq!(known("!!int '017'"), json!(15));
    }

    #[test]
    fn merge_keys_merge_and_own_keys_win() {
        let root = parse("d: &d {a: 1, b: 2}\nv:\n  <<: *d\n  b: 3\n")
            .unwrap()
            .root
            .unwrap();
        assert_eq!(
            typed(&root.as_map().unwrap()[1].1),
            Known::Value(json!({"a": 1, "b": 3}))
        );
    }
}
