//! A host entry of an inventory as ansible expands it: an optional `:port`, and ranges such as
//! `node[01:03]`, `db-[a:c]` or `n[1:10:2]` (several in one name multiply).

/// Most hosts one entry may expand to.
const MAX_EXPANSION: usize = 100_000;

const ASCII_LETTERS: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

/// The host names `pattern` stands for, and the port it gives them. As in ansible, a port is split off only
/// when what precedes it is a valid host name or address (`[v6addr]:port` for IPv6).
pub(crate) fn expand_host_pattern(pattern: &str) -> Result<(Vec<String>, Option<u64>), String> {
    let (name, port) = split_port(pattern).unwrap_or((pattern, None));
    if pattern.trim().ends_with(':') && port.is_none() {
        return Err(format!(
            "host \"{pattern}\" ends with ':', which is reserved for a port: write host:port, or remove the ':'"
        ));
    }
    let names = if name.contains('[') {
        let mut out = Vec::new();
        expand(name, &mut out)?;
        out
    } else {
        vec![name.to_string()]
    };
    if names.iter().any(|n| n.trim() == "---") {
        return Err(format!(
            "host \"{pattern}\" looks like a YAML document start: name the file hosts.yml if it is YAML"
        ));
    }
    Ok((names, port))
}

/// ansible's `parse_address`: the host part and port, or `None` when the host part is not a valid name or
/// address (the whole pattern is then the host name).
fn split_port(address: &str) -> Option<(&str, Option<u64>)> {
    let mut host = address;
    let mut port = None;
    // `[host]:port`
    if let Some(inner) = host.strip_prefix('[') {
        if let Some((inner, digits)) = inner.rsplit_once("]:") {
            if !inner.is_empty() && is_digits(digits) {
                host = &address[1..1 + inner.len()];
                port = digits.parse().ok();
            }
        }
    }
    // `host:port`, where `host` has no ':' outside brackets.
    if let Some((front, digits)) = host.rsplit_once(':') {
        if is_digits(digits) && colon_free_outside_brackets(front) {
            host = front;
            port = digits.parse().ok();
        }
    }
    (is_hostname(host) || is_ipv6(host)).then_some((host, port))
}

fn is_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// Matches `(?:[^:\[\]]|\[[^\]]*\])*`.
fn colon_free_outside_brackets(text: &str) -> bool {
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            ':' | ']' => return false,
            '[' if !chars.by_ref().any(|c| c == ']') => return false,
            _ => {}
        }
    }
    true
}

/// ansible's host name pattern: dot-separated labels of word characters and '-' (not first, not last; '_'
/// not last), where `[a:z]` / `[1:9]` ranges may stand for characters.
fn is_hostname(host: &str) -> bool {
    !host.is_empty() && host.split('.').all(is_label)
}

fn is_label(label: &str) -> bool {
    let mut rest = label;
    let mut first = true;
    let mut last = None;
    while let Some(c) = rest.chars().next() {
        if c == '[' {
            let Some(close) = rest.find(']') else {
                return false;
            };
            if !is_alphanumeric_range(&rest[1..close]) {
                return false;
            }
            rest = &rest[close + 1..];
            last = Some(']');
        } else {
            let word = c.is_alphanumeric() || c == '_';
            if !(word || (!first && c == '-')) {
                return false;
            }
            rest = &rest[c.len_utf8()..];
            last = Some(c);
        }
        first = false;
    }
    last.is_some_and(|c| c != '-' && c != '_')
}

/// `a:z` or `1:9`, with an optional `:step`.
fn is_alphanumeric_range(inner: &str) -> bool {
    let parts: Vec<&str> = inner.split(':').collect();
    if parts.len() != 2 && parts.len() != 3 {
        return false;
    }
    if parts.len() == 3 && !is_digits(parts[2]) {
        return false;
    }
    let letter = |s: &str| s.len() == 1 && s.chars().all(|c| c.is_ascii_alphabetic());
    (letter(parts[0]) && letter(parts[1])) || (is_digits(parts[0]) && is_digits(parts[1]))
}

/// An IPv6 address, where hexadecimal ranges may stand for parts.
fn is_ipv6(host: &str) -> bool {
    if !host.contains(':') {
        return false;
    }
    let mut plain = String::new();
    let mut rest = host;
    while let Some(open) = rest.find('[') {
        plain.push_str(&rest[..open]);
        let Some(close) = rest[open..].find(']') else {
            return false;
        };
        plain.push('0');
        rest = &rest[open + close + 1..];
    }
    plain.push_str(rest);
    plain.parse::<std::net::Ipv6Addr>().is_ok()
}

/// Expands the first range of `line` (ansible's `expand_hostname_range`), then the ranges left.
fn expand(line: &str, out: &mut Vec<String>) -> Result<(), String> {
    let marked = line.replacen('[', "|", 1).replacen(']', "|", 1);
    let parts: Vec<&str> = marked.split('|').collect();
    let [head, range, tail] = parts[..] else {
        return Err(format!(
            "host \"{line}\" has an unbalanced or unexpected '[', ']' or '|': write a range as name[1:3]"
        ));
    };
    let bounds: Vec<&str> = range.split(':').collect();
    if bounds.len() != 2 && bounds.len() != 3 {
        return Err(format!(
            "host range [{range}] must be begin:end or begin:end:step, e.g. node[01:10] or node[1:10:2]"
        ));
    }
    let begin = if bounds[0].is_empty() { "0" } else { bounds[0] };
    let end = bounds[1];
    if end.is_empty() {
        return Err(format!("host range [{range}] has no end value: write begin:end"));
    }
    let width = if begin.starts_with('0') && begin.len() > 1 {
        if begin.len() != end.len() {
            return Err(format!(
                "host range [{range}] must write begin and end with the same number of digits (\"{begin}\" and \
                 \"{end}\"), as the leading zeros set the width"
            ));
        }
        Some(begin.len())
    } else {
        None
    };
    let step_text = bounds.get(2).copied().unwrap_or("1");
    let letters = match (ASCII_LETTERS.find(begin), ASCII_LETTERS.find(end)) {
        (Some(b), Some(e)) => {
            if b > e {
                return Err(format!("host range [{range}] must have begin <= end"));
            }
            py_int(step_text).filter(|s| *s > 0).map(|step| {
                ASCII_LETTERS[b..=e]
                    .chars()
                    .step_by(step as usize)
                    .map(String::from)
                    .collect::<Vec<_>>()
            })
        }
        _ => None,
    };
    let items = match letters {
        Some(items) => items,
        None => {
            let bad =
                || format!("host range [{range}] must be numbers (or single letters) with a non-zero step");
            let (b, e, step) = (
                py_int(begin).ok_or_else(bad)?,
                py_int(end).ok_or_else(bad)?,
                py_int(step_text).ok_or_else(bad)?,
            );
            if step == 0 {
                return Err(bad());
            }
            let count = if step > 0 {
                (e + 1 - b).max(0).div_euclid(step) + i64::from((e + 1 - b).max(0) % step != 0)
            } else {
                (b - e - 1).max(0).div_euclid(-step) + i64::from((b - e - 1).max(0) % -step != 0)
            };
            if count as usize > MAX_EXPANSION {
                return Err(too_many(line));
            }
            (0..count).map(|i| (b + i * step).to_string()).collect()
        }
    };
    for item in items {
        let item = match width {
            Some(width) => zfill(&item, width),
            None => item,
        };
        let name = format!("{head}{item}{tail}");
        if name.contains('[') {
            expand(&name, out)?;
        } else {
            out.push(name);
        }
        if out.len() > MAX_EXPANSION {
            return Err(too_many(line));
        }
    }
    Ok(())
}

fn too_many(line: &str) -> String {
    format!("host range \"{line}\" expands to more than {MAX_EXPANSION} hosts: narrow the range")
}

/// Python's `int(text)` for the texts a range holds: optional sign, digits with single underscores.
fn py_int(text: &str) -> Option<i64> {
    let text = text.trim();
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if digits.is_empty() || digits.starts_with('_') || digits.ends_with('_') || digits.contains("__") {
        return None;
    }
    let value: i64 = digits.replace('_', "").parse().ok()?;
    Some(if negative { -value } else { value })
}

/// Python's `str.zfill`: zeros after any sign, up to `width` characters.
fn zfill(text: &str, width: usize) -> String {
    let (sign, digits) = match text.strip_prefix(['-', '+']) {
        Some(rest) => (&text[..1], rest),
        None => ("", text),
    };
    let pad = width.saturating_sub(text.chars().count());
    format!("{sign}{}{digits}", "0".repeat(pad))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(pattern: &str) -> Vec<String> {
        expand_host_pattern(pattern).unwrap().0
    }

    #[test]
    fn numeric_ranges_keep_their_width_and_step() {
        assert_eq!(hosts("node[01:03]"), ["node01", "node02", "node03"]);
        assert_eq!(hosts("node[1:10:4]"), ["node1", "node5", "node9"]);
        assert_eq!(hosts("n[:2]"), ["n0", "n1", "n2"]);
        assert_eq!(
            hosts("n[8:10].example.com"),
            ["n8.example.com", "n9.example.com", "n10.example.com"]
        );
        assert_eq!(hosts("n[3:1]"), Vec::<String>::new());
    }

    #[test]
    fn letter_ranges_and_several_ranges_multiply() {
        assert_eq!(hosts("db-[a:c]"), ["db-a", "db-b", "db-c"]);
        assert_eq!(hosts("r[1:2]-[x:y]"), ["r1-x", "r1-y", "r2-x", "r2-y"]);
        assert_eq!(hosts("[a:c:2]"), ["a", "c"]);
    }

    #[test]
    fn ports_split_off_valid_names_and_bracketed_addresses() {
        assert_eq!(
            expand_host_pattern("node1:2222").unwrap(),
            (vec!["node1".to_string()], Some(2222))
        );
        assert_eq!(expand_host_pattern("10.0.0.1:22").unwrap().1, Some(22));
        assert_eq!(
            expand_host_pattern("[fe80::1]:22").unwrap(),
            (vec!["fe80::1".to_string()], Some(22))
        );
        assert_eq!(
            expand_host_pattern("fe80::1").unwrap(),
            (vec!["fe80::1".to_string()], None)
        );
        assert_eq!(
            expand_host_pattern("node[1:2]:22").unwrap(),
            (vec!["node1".to_string(), "node2".to_string()], Some(22))
        );
        // Not a valid name: the whole entry is the host, as in ansible.
        assert_eq!(
            expand_host_pattern("bad_:22").unwrap(),
            (vec!["bad_:22".to_string()], None)
        );
    }

    #[test]
    fn malformed_ranges_are_refused_with_a_remedy() {
        for (pattern, words) in [
            ("n[1:2:3:4]", "begin:end"),
            ("n[1:]", "no end"),
            ("n[01:3]", "same number of digits"),
            ("n[c:a]", "begin <= end"),
            ("n[1:3:0]", "step"),
            ("n[x:3]", "numbers"),
            ("n[1:3", "unbalanced"),
            ("n[1:9999999]", "narrow"),
            ("host:", "port"),
        ] {
            let err = expand_host_pattern(pattern).unwrap_err();
            assert!(err.contains(words), "{pattern}: {err}");
        }
    }
}
