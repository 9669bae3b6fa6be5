//! The string `format`s the apiserver checks in custom resources (its `strfmt` registry): date-time,
//! date, byte, uuid (and uuid3/4/5), ipv4, ipv6, cidr, mac and hostname. Other formats (int32,
//! int64, double, password, ...) are not checked, as on a real server.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether `s` conforms to `format`; true for formats that are not checked.
pub fn conforms(format: &str, s: &str) -> bool {
    match format {
        "date-time" | "datetime" => s.parse::<jiff::Timestamp>().is_ok(),
        "date" => s.len() == 10 && s.parse::<jiff::civil::Date>().is_ok(),
        "byte" => is_base64(s),
        "uuid" => is_uuid(s, None),
        "uuid3" => is_uuid(s, Some('3')),
        "uuid4" => is_uuid(s, Some('4')),
        "uuid5" => is_uuid(s, Some('5')),
        "ipv4" => s.parse::<Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<Ipv6Addr>().is_ok(),
        "cidr" => is_cidr(s),
        "mac" => is_mac(s),
        "hostname" => is_hostname(s),
        _ => true,
    }
}

/// Standard base64 with padding, as Go's `base64.StdEncoding` reads it.
fn is_base64(s: &str) -> bool {
    if !s.len().is_multiple_of(4) {
        return false;
    }
    let body = s.trim_end_matches('=');
    s.len() - body.len() <= 2
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

fn is_uuid(s: &str, version: Option<char>) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    let shape = groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()));
    shape && version.is_none_or(|v| groups[2].starts_with(v))
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, prefix)) = s.split_once('/') else {
        return false;
    };
    let max = match ip.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => 32,
        Ok(IpAddr::V6(_)) => 128,
        Err(_) => return false,
    };
    !prefix.is_empty()
        && prefix.bytes().all(|b| b.is_ascii_digit())
        && prefix.parse::<u32>().is_ok_and(|p| p <= max)
}

/// `01:23:45:67:89:ab`, `01-23-...` (6, 8 or 20 octets) or `0123.4567.89ab`, as Go's `net.ParseMAC`.
fn is_mac(s: &str) -> bool {
    let hex = |g: &str, n: usize| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit());
    for sep in [':', '-'] {
        let groups: Vec<&str> = s.split(sep).collect();
        if groups.len() > 1 {
            return matches!(groups.len(), 6 | 8 | 20) && groups.iter().all(|g| hex(g, 2));
        }
    }
    let groups: Vec<&str> = s.split('.').collect();
    matches!(groups.len(), 3 | 4 | 10) && groups.iter().all(|g| hex(g, 4))
}

/// An RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens, each at most
/// 63 characters, 255 in all.
fn is_hostname(s: &str) -> bool {
    let name = s.strip_suffix('.').unwrap_or(s);
    !name.is_empty()
        && s.len() <= 255
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::conforms;

    #[test]
    fn checked_formats_refuse_what_the_apiserver_refuses() {
        for (format, good, bad) in [
            ("date-time", "2026-11-23T21:00:00Z", "yesterday"),
            ("date", "2026-11-23", "2026-11-23T00:00:00Z"),
            ("byte", "aGk=", "not base64!"),
            ("uuid", "123e4567-e89b-12d3-a456-426614174000", "123e4567"),
            (
                "uuid4",
                "123e4567-e89b-42d3-a456-426614174000",
                "123e4567-e89b-12d3-a456-426614174000",
            ),
            ("ipv4", "10.0.0.1", "10.0.0.256"),
            ("ipv6", "fe80::1", "10.0.0.1"),
            ("cidr", "10.0.0.0/8", "10.0.0.0/33"),
            ("mac", "01:23:45:67:89:ab", "01:23:45"),
            ("hostname", "node-1.example.test", "-bad-.test"),
        ] {
            assert!(conforms(format, good), "{format}: {good}");
            assert!(!conforms(format, bad), "{format}: {bad}");
        }
        assert!(
            conforms("int32", "anything"),
            "int32 is not a checked string format"
        );
    }
}
