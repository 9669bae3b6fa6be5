//! The Python literals an INI inventory's values are read as (`ast.literal_eval`): numbers, strings,
//! `True`/`False`/`None`, and lists, tuples and dicts of those.
//!
//! ansible's INI plugin tries `ast.literal_eval` on every value and keeps the text as a string when that
//! fails; [`literal_eval`] says which of the two happens, and gives the value as JSON.

use serde_json::Value;

/// Deepest nesting evaluated (Python's own parser stops near 200 as well).
const MAX_DEPTH: usize = 100;

/// What `ast.literal_eval(text)` gives, as ansible's INI plugin uses it: `None` when Python refuses the
/// text (ansible then keeps it as a string), `Some(Ok(json))` for a literal, `Some(Err(what))` for a
/// literal that JSON cannot hold (a set, a complex number, a float that is not finite, an integer
/// beyond 64 bits, bytes inside a collection...).
pub(crate) fn literal_eval(text: &str) -> Option<Result<Value, String>> {
    let text = text.trim_start_matches([' ', '\t']);
    let tokens = tokenize(text)?;
    let mut parser = Parser { tokens, pos: 0 };
    let py = parser.expr(0)?;
    if parser.pos != parser.tokens.len() {
        return None;
    }
    Some(to_json(py, true))
}

/// A Python value a literal evaluates to.
#[derive(Clone, Debug, PartialEq)]
enum Py {
    None,
    Bool(bool),
    /// An integer; `None` when beyond 128 bits.
    Int(Option<i128>),
    Float(f64),
    Complex,
    Ellipsis,
    Str(String),
    /// Bytes, or `None` when they hold an escape kok does not decode.
    Bytes(Vec<u8>),
    List(Vec<Py>),
    Tuple(Vec<Py>),
    Set(Vec<Py>),
    Dict(Vec<(Py, Py)>),
    /// A string literal kok does not decode (`\N{...}`, a lone surrogate).
    OpaqueStr,
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    /// A number as written.
    Num(String),
    /// One string literal, decoded.
    Str(Py),
    Name(String),
    Punct(char),
    Ellipsis,
}

fn tokenize(text: &str) -> Option<Vec<Token>> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\x0c' {
            i += 1;
        } else if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '\\' && chars.get(i + 1) == Some(&'\n') {
            i += 2;
        } else if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) {
            let start = i;
            while i < chars.len() {
                let d = chars[i];
                let sign_after_exponent = (d == '+' || d == '-')
                    && matches!(chars[i - 1], 'e' | 'E')
                    && !chars[start..i].iter().any(|c| matches!(c, 'x' | 'X'));
                if d.is_ascii_alphanumeric() || d == '_' || d == '.' || sign_after_exponent {
                    i += 1;
                } else {
                    break;
                }
            }
            out.push(Token::Num(chars[start..i].iter().collect()));
        } else if c == '.' {
            if chars.get(i + 1) == Some(&'.') && chars.get(i + 2) == Some(&'.') {
                out.push(Token::Ellipsis);
                i += 3;
            } else {
                return None;
            }
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let name: String = chars[start..i].iter().collect();
            if matches!(chars.get(i), Some('\'' | '"')) {
                let (literal, next) = string(&name.to_ascii_lowercase(), &chars, i)?;
                out.push(Token::Str(literal));
                i = next;
            } else {
                out.push(Token::Name(name));
            }
        } else if c == '\'' || c == '"' {
            let (literal, next) = string("", &chars, i)?;
            out.push(Token::Str(literal));
            i = next;
        } else if "()[]{},:+-".contains(c) {
            out.push(Token::Punct(c));
            i += 1;
        } else {
            return None;
        }
    }
    Some(out)
}

/// The string literal with `prefix` whose opening quote is at `chars[at]`, decoded, and the index after it.
fn string(prefix: &str, chars: &[char], at: usize) -> Option<(Py, usize)> {
    let (raw, bytes) = match prefix {
        "" | "u" => (false, false),
        "r" => (true, false),
        "b" => (false, true),
        "br" | "rb" => (true, true),
        // f-strings are not literals (ansible keeps the text), other prefixes are syntax errors.
        _ => return None,
    };
    let quote = chars[at];
    let triple = chars.get(at + 1) == Some(&quote) && chars.get(at + 2) == Some(&quote);
    let mut i = at + if triple { 3 } else { 1 };
    let mut body = Vec::new();
    loop {
        let c = *chars.get(i)?;
        if c == quote && (!triple || (chars.get(i + 1) == Some(&quote) && chars.get(i + 2) == Some(&quote))) {
            i += if triple { 3 } else { 1 };
            break;
        }
        if c == '\n' && !triple {
            return None;
        }
        if c == '\\' {
            let next = *chars.get(i + 1)?;
            body.push(c);
            body.push(next);
            i += 2;
            continue;
        }
        body.push(c);
        i += 1;
    }
    let literal = if raw {
        if bytes {
            if !body.iter().all(char::is_ascii) {
                return None;
            }
            Py::Bytes(body.iter().map(|c| *c as u8).collect())
        } else {
            Py::Str(body.into_iter().collect())
        }
    } else {
        unescape(&body, bytes)?
    };
    Some((literal, i))
}

/// Python's escape sequences in `body` (a str literal, or a bytes literal when `bytes`).
fn unescape(body: &[char], bytes: bool) -> Option<Py> {
    let mut out: Vec<u32> = Vec::new();
    let mut opaque = false;
    let mut i = 0;
    while i < body.len() {
        let c = body[i];
        if bytes && !c.is_ascii() {
            return None;
        }
        if c != '\\' {
            out.push(c as u32);
            i += 1;
            continue;
        }
        let e = body[i + 1];
        i += 2;
        let simple = match e {
            '\n' => Some(None),
            '\\' | '\'' | '"' => Some(Some(e as u32)),
            'a' => Some(Some(7)),
            'b' => Some(Some(8)),
            'f' => Some(Some(12)),
            'n' => Some(Some(10)),
            'r' => Some(Some(13)),
            't' => Some(Some(9)),
            'v' => Some(Some(11)),
            _ => None,
        };
        if let Some(code) = simple {
            out.extend(code);
            continue;
        }
        match e {
            '0'..='7' => {
                let mut value = e.to_digit(8)?;
                for _ in 0..2 {
                    match body.get(i).and_then(|d| d.to_digit(8)) {
                        Some(d) => {
                            value = value * 8 + d;
                            i += 1;
                        }
                        None => break,
                    }
                }
                if bytes && value > 0xff {
                    return None;
                }
                out.push(value);
            }
            'x' => {
                let hex: String = body.get(i..i + 2)?.iter().collect();
                out.push(u32::from_str_radix(&hex, 16).ok().filter(|_| hex.len() == 2)?);
                i += 2;
            }
            'u' | 'U' if !bytes => {
                let len = if e == 'u' { 4 } else { 8 };
                let hex: String = body.get(i..i + len)?.iter().collect();
                if !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                    return None;
                }
                let code = u32::from_str_radix(&hex, 16).ok()?;
                if code > 0x10ffff {
                    return None;
                }
                out.push(code);
                i += len;
            }
            'N' if !bytes => {
                // A named character: valid Python, but kok carries no table of Unicode names.
                let close = body[i..].iter().position(|c| *c == '}')?;
                i += close + 1;
                opaque = true;
            }
            _ => {
                out.push('\\' as u32);
                out.push(e as u32);
            }
        }
    }
    if bytes {
        return Some(Py::Bytes(out.into_iter().map(|b| b as u8).collect()));
    }
    let text: Option<String> = out.into_iter().map(char::from_u32).collect();
    Some(match text {
        Some(text) if !opaque => Py::Str(text),
        _ => Py::OpaqueStr,
    })
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(&Token::Punct(c)) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// A literal: a signed number, a complex `a+bj`, or an atom.
    fn expr(&mut self, depth: usize) -> Option<Py> {
        if depth > MAX_DEPTH {
            return None;
        }
        let left = self.signed(depth)?;
        if let Some(Token::Punct('+' | '-')) = self.peek() {
            // Only `real ± imaginary` is a literal.
            if !matches!(left.1, Numeric::Real) {
                return None;
            }
            self.pos += 1;
            let right = self.atom(depth)?;
            return matches!(right.1, Numeric::Imaginary).then_some(Py::Complex);
        }
        Some(left.0)
    }

    /// An atom, with one optional sign when it is a number.
    fn signed(&mut self, depth: usize) -> Option<(Py, Numeric)> {
        let negative = match self.peek() {
            Some(Token::Punct('-')) => true,
            Some(Token::Punct('+')) => false,
            _ => return self.atom(depth),
        };
        self.pos += 1;
        let (value, kind) = self.atom(depth)?;
        let value = match (value, &kind) {
            (_, Numeric::Not) => return None,
            (Py::Int(i), _) if negative => Py::Int(i.and_then(i128::checked_neg)),
            (Py::Float(f), _) if negative => Py::Float(-f),
            (value, _) => value,
        };
        let kind = match kind {
            Numeric::Imaginary => Numeric::Signed,
            _ => Numeric::Real,
        };
        Some((value, kind))
    }

    fn atom(&mut self, depth: usize) -> Option<(Py, Numeric)> {
        let token = self.peek()?.clone();
        self.pos += 1;
        let value = match token {
            Token::Num(text) => return number(&text),
            Token::Str(first) => {
                let mut value = first;
                while let Some(Token::Str(next)) = self.peek().cloned() {
                    self.pos += 1;
                    value = match (value, next) {
                        (Py::Str(a), Py::Str(b)) => Py::Str(a + &b),
                        (Py::Bytes(mut a), Py::Bytes(b)) => {
                            a.extend(b);
                            Py::Bytes(a)
                        }
                        (Py::Bytes(_), _) | (_, Py::Bytes(_)) => return None,
                        _ => Py::OpaqueStr,
                    };
                }
                value
            }
            Token::Ellipsis => Py::Ellipsis,
            Token::Name(name) => match name.as_str() {
                "True" => Py::Bool(true),
                "False" => Py::Bool(false),
                "None" => Py::None,
                "set" if self.eat('(') && self.eat(')') => Py::Set(vec![]),
                _ => return None,
            },
            Token::Punct('(') => {
                if self.eat(')') {
                    return Some((Py::Tuple(vec![]), Numeric::Not));
                }
                let first = self.expr_kind(depth + 1)?;
                if self.eat(')') {
                    // Parentheses make no node: `-(1)` is a signed number.
                    return Some(first);
                }
                let mut items = vec![first.0];
                self.items(')', depth, &mut items)?;
                Py::Tuple(items)
            }
            Token::Punct('[') => {
                let mut items = Vec::new();
                if !self.eat(']') {
                    items.push(self.expr(depth + 1)?);
                    if !self.eat(']') {
                        self.items(']', depth, &mut items)?;
                    }
                }
                Py::List(items)
            }
            Token::Punct('{') => self.braces(depth)?,
            Token::Punct(_) => return None,
        };
        Some((value, Numeric::Not))
    }

    /// Like [`Parser::expr`], keeping whether the result is a bare number (for `-(1)`).
    fn expr_kind(&mut self, depth: usize) -> Option<(Py, Numeric)> {
        let start = self.pos;
        let signed = self.signed(depth)?;
        if matches!(self.peek(), Some(Token::Punct('+' | '-'))) {
            self.pos = start;
            return self.expr(depth).map(|value| (value, Numeric::Not));
        }
        Some(signed)
    }

    /// The rest of a comma-separated list after its first item, up to and including `close`.
    fn items(&mut self, close: char, depth: usize, items: &mut Vec<Py>) -> Option<()> {
        loop {
            if !self.eat(',') {
                return None;
            }
            if self.eat(close) {
                return Some(());
            }
            items.push(self.expr(depth + 1)?);
            if self.eat(close) {
                return Some(());
            }
        }
    }

    /// A dict or a set, after its `{`.
    fn braces(&mut self, depth: usize) -> Option<Py> {
        if self.eat('}') {
            return Some(Py::Dict(vec![]));
        }
        let first = self.expr(depth + 1)?;
        if !self.eat(':') {
            let mut items = vec![first];
            if !self.eat('}') {
                self.items('}', depth, &mut items)?;
            }
            return Some(Py::Set(items));
        }
        let mut entries = vec![(first, self.expr(depth + 1)?)];
        loop {
            if self.eat('}') {
                return Some(Py::Dict(entries));
            }
            if !self.eat(',') {
                return None;
            }
            if self.eat('}') {
                return Some(Py::Dict(entries));
            }
            let key = self.expr(depth + 1)?;
            if !self.eat(':') {
                return None;
            }
            entries.push((key, self.expr(depth + 1)?));
        }
    }
}

/// Whether an atom is a number literal, and which kind (for signs and `a+bj`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Numeric {
    Not,
    Real,
    Imaginary,
    /// A signed imaginary number: no longer the right side of `a+bj`.
    Signed,
}

/// A Python number literal, or `None` when `text` is not one.
fn number(text: &str) -> Option<(Py, Numeric)> {
    let lower = text.to_ascii_lowercase();
    if let Some(imaginary) = lower.strip_suffix('j') {
        return (decimal_float(imaginary).is_some() || digitpart(imaginary))
            .then_some((Py::Complex, Numeric::Imaginary));
    }
    for (prefix, radix) in [("0x", 16), ("0o", 8), ("0b", 2)] {
        if let Some(digits) = lower.strip_prefix(prefix) {
            let digits = digits.strip_prefix('_').unwrap_or(digits);
            if !underscored(digits, |c| c.is_digit(radix)) {
                return None;
            }
            return Some((Py::Int(super::yaml11::radix(digits, radix)), Numeric::Real));
        }
    }
    if underscored(&lower, |c| c.is_ascii_digit()) {
        let all_zero = lower.chars().all(|c| c == '0' || c == '_');
        if lower.starts_with('0') && !all_zero {
            return None;
        }
        return Some((Py::Int(super::yaml11::radix(&lower, 10)), Numeric::Real));
    }
    decimal_float(&lower).map(|f| (Py::Float(f), Numeric::Real))
}

/// Digits (as `digit` accepts them) with single underscores between them.
fn underscored(text: &str, digit: impl Fn(char) -> bool) -> bool {
    !text.is_empty()
        && !text.starts_with('_')
        && !text.ends_with('_')
        && !text.contains("__")
        && text.chars().all(|c| c == '_' || digit(c))
}

fn digitpart(text: &str) -> bool {
    underscored(text, |c| c.is_ascii_digit())
}

/// A Python float literal without its sign: `1.5`, `1.`, `.5`, `1e3`, `1_0.0e-1_0`.
fn decimal_float(text: &str) -> Option<f64> {
    let (mantissa, exponent) = match text.split_once('e') {
        Some((m, e)) => (m, Some(e)),
        None => (text, None),
    };
    if let Some(exponent) = exponent {
        let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
        if !digitpart(digits) {
            return None;
        }
    }
    let mantissa_ok = match mantissa.split_once('.') {
        Some((int, frac)) => {
            (int.is_empty() || digitpart(int))
                && (frac.is_empty() || digitpart(frac))
                && int.len() + frac.len() > 0
        }
        None => exponent.is_some() && digitpart(mantissa),
    };
    if !mantissa_ok {
        return None;
    }
    text.replace('_', "").parse::<f64>().ok()
}

/// `py` as JSON, or what it is when JSON cannot hold it (`top`: bytes are decoded only there, as ansible's
/// `to_text` does).
fn to_json(py: Py, top: bool) -> Result<Value, String> {
    Ok(match py {
        Py::None => Value::Null,
        Py::Bool(b) => Value::Bool(b),
        Py::Int(Some(i)) => match (i64::try_from(i), u64::try_from(i)) {
            (Ok(i), _) => Value::from(i),
            (_, Ok(u)) => Value::from(u),
            _ => return Err("an integer beyond 64 bits".into()),
        },
        Py::Int(None) => return Err("an integer beyond 64 bits".into()),
        Py::Float(f) => serde_json::Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| "a float that is not finite".to_string())?,
        Py::Complex => return Err("a complex number".into()),
        Py::Ellipsis => return Err("Python's Ellipsis".into()),
        Py::Str(s) => Value::String(s),
        Py::OpaqueStr => return Err("a string with an escape kok does not decode".into()),
        Py::Bytes(b) if top => Value::String(String::from_utf8(b).map_err(|_| "bytes that are not UTF-8")?),
        Py::Bytes(_) => return Err("bytes".into()),
        Py::List(items) | Py::Tuple(items) => Value::Array(
            items
                .into_iter()
                .map(|i| to_json(i, false))
                .collect::<Result<_, _>>()?,
        ),
        Py::Set(_) => return Err("a set".into()),
        Py::Dict(entries) => {
            let mut map = serde_json::Map::new();
            for (key, value) in entries {
                let Py::Str(key) = key else {
                    return Err("a dict whose keys are not all strings".into());
                };
                map.insert(key, to_json(value, false)?);
            }
            Value::Object(map)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn eval(text: &str) -> Option<Value> {
        literal_eval(text).map(|r| r.unwrap())
    }

    #[test]
    fn numbers_are_read_as_python_reads_them() {
        assert_eq!(eval("42"), Some(json!(42)));
        assert_eq!(eval("-5"), Some(json!(-5)));
        assert_eq!(eval("+3.5"), Some(json!(3.5)));
        assert_eq!(eval("1_000"), Some(json!(1000)));
        assert_eq!(eval("0x1f"), Some(json!(31)));
        assert_eq!(eval("0o17"), Some(json!(15)));
        assert_eq!(eval("0b101"), Some(json!(5)));
        assert_eq!(eval("1e3"), Some(json!(1000.0)));
        assert_eq!(eval(".5"), Some(json!(0.5)));
        assert_eq!(eval("1."), Some(json!(1.0)));
        assert_eq!(eval("00"), Some(json!(0)));
        assert_eq!(eval("-(1)"), Some(json!(-1)));
        assert_eq!(eval("7 # a comment"), Some(json!(7)));
        assert_eq!(eval("  8"), Some(json!(8)));
    }

    #[test]
    fn text_python_refuses_stays_a_string() {
        for text in [
            "01", "1.2.3", "10.0.0.1", "yes", "true", "x # c", "1__0", "1_", "--1", "-True", "f'x'",
            "[1, x]", "1 2", "{k:True}", "'open", "a=b", "v1.31.4", "ur'x'", "1+2", "",
        ] {
            assert_eq!(literal_eval(text), None, "{text}");
        }
    }

    #[test]
    fn constants_strings_and_collections_are_values() {
        assert_eq!(eval("True"), Some(json!(true)));
        assert_eq!(eval("None"), Some(json!(null)));
        assert_eq!(eval("'a b'"), Some(json!("a b")));
        assert_eq!(
            eval(r#""tab\tnew\nq\'\x41\u00e9\101""#),
            Some(json!("tab\tnew\nq'Aé\u{41}"))
        );
        assert_eq!(eval(r"r'\d+'"), Some(json!("\\d+")));
        assert_eq!(eval(r"'\d'"), Some(json!("\\d")));
        assert_eq!(eval("'a' \"b\""), Some(json!("ab")));
        assert_eq!(eval("b'z'"), Some(json!("z")));
        assert_eq!(eval("'''x'y'''"), Some(json!("x'y")));
        assert_eq!(eval("[1, 'a', [True], ]"), Some(json!([1, "a", [true]])));
        assert_eq!(eval("(1, 2)"), Some(json!([1, 2])));
        assert_eq!(eval("(1,)"), Some(json!([1])));
        assert_eq!(eval("()"), Some(json!([])));
        assert_eq!(
            eval("{'k': {'n': None}, 'l': []}"),
            Some(json!({"k": {"n": null}, "l": []}))
        );
        assert_eq!(eval("{'a': 1, 'a': 2}"), Some(json!({"a": 2})));
    }

    #[test]
    fn literals_json_cannot_hold_are_told_apart() {
        for text in [
            "{1, 2}",
            "set()",
            "1+2j",
            "3j",
            "{1: 'a'}",
            "[b'x']",
            "1e400",
            "...",
            "'\\N{BULLET}'",
            "99999999999999999999999",
        ] {
            assert!(matches!(literal_eval(text), Some(Err(_))), "{text}");
        }
        assert_eq!(eval("18446744073709551615"), Some(json!(u64::MAX)));
    }

    #[test]
    fn deep_nesting_is_refused_without_overflowing() {
        let deep = "[".repeat(5000) + &"]".repeat(5000);
        assert_eq!(literal_eval(&deep), None);
    }
}
