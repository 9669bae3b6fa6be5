//! `maintenance` in cluster.yml and kok.yml: weekly windows and freezes, with IANA time zones, validated.

use jiff::civil::{Date, Time, Weekday};
use jiff::tz::TimeZone;
use jiff::SignedDuration;

use super::diag::{get, keyed_map, FileDiags};
use super::yaml::Node;
use crate::spec::{Maintenance, MaintenanceFreeze, MaintenanceWindow};

/// Keys of `maintenance`.
const MAINTENANCE_KEYS: &[&str] = &["windows", "freezes"];
/// Keys of a window.
const WINDOW_KEYS: &[&str] = &["days", "start", "duration", "timeZone"];
/// Keys of a freeze.
const FREEZE_KEYS: &[&str] = &["from", "to", "timeZone", "reason"];
/// Longest window: a week (a longer one would never close).
const MAX_WINDOW: SignedDuration = SignedDuration::from_hours(7 * 24);
/// Time zone of a window or freeze that names none.
const DEFAULT_ZONE: &str = "UTC";

/// A duration written as numbers with units `d`, `h`, `m`, `s`: `30m`, `4h`, `1h30m`, `2d`. Nothing else
/// (no spaces, no fractions, no bare numbers).
pub fn parse_duration(s: &str) -> Option<SignedDuration> {
    let mut total = SignedDuration::ZERO;
    let mut rest = s;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let (number, tail) = rest.split_at(digits);
        let n: i64 = number.parse().ok()?;
        let unit = tail.chars().next()?;
        let seconds = match unit {
            'd' => 86_400,
            'h' => 3_600,
            'm' => 60,
            's' => 1,
            _ => return None,
        };
        total = total.checked_add(SignedDuration::from_secs(n.checked_mul(seconds)?))?;
        rest = &tail[1..];
    }
    Some(total)
}

/// A local time of day written `HH:MM` (24-hour clock).
pub fn parse_hhmm(s: &str) -> Option<Time> {
    let (h, m) = s.split_once(':')?;
    if h.len() != 2 || m.len() != 2 || !(h.bytes().chain(m.bytes())).all(|b| b.is_ascii_digit()) {
        return None;
    }
    Time::new(h.parse().ok()?, m.parse().ok()?, 0, 0).ok()
}

/// A day of the week: `Mon` ... `Sun` or the full English name, in any case.
pub fn parse_weekday(s: &str) -> Option<Weekday> {
    const DAYS: [(&str, Weekday); 7] = [
        ("monday", Weekday::Monday),
        ("tuesday", Weekday::Tuesday),
        ("wednesday", Weekday::Wednesday),
        ("thursday", Weekday::Thursday),
        ("friday", Weekday::Friday),
        ("saturday", Weekday::Saturday),
        ("sunday", Weekday::Sunday),
    ];
    let lower = s.to_ascii_lowercase();
    DAYS.iter()
        .find(|(name, _)| lower == *name || (lower.len() == 3 && name.starts_with(lower.as_str())))
        .map(|(_, day)| *day)
}

/// The three-letter name kok writes for `day`: `Mon` ... `Sun`.
pub fn weekday_name(day: Weekday) -> &'static str {
    match day {
        Weekday::Monday => "Mon",
        Weekday::Tuesday => "Tue",
        Weekday::Wednesday => "Wed",
        Weekday::Thursday => "Thu",
        Weekday::Friday => "Fri",
        Weekday::Saturday => "Sat",
        Weekday::Sunday => "Sun",
    }
}

/// Parses `maintenance`: `windows` and `freezes`, each entry checked; `None` when it is not a mapping.
pub(crate) fn parse_maintenance(node: &Node, diags: &mut FileDiags<'_>) -> Option<Maintenance> {
    let expected = || {
        "maintenance must be a mapping with windows and/or freezes, e.g. {windows: [{days: [Sat], start: \"02:00\", \
         duration: 4h, timeZone: Europe/Berlin}]}"
            .to_string()
    };
    let map = keyed_map(node, MAINTENANCE_KEYS, "maintenance", expected, diags)?;
    let windows = list(get(map, "windows"), "maintenance.windows", diags)
        .iter()
        .filter_map(|item| window(item, diags))
        .collect();
    let freezes = list(get(map, "freezes"), "maintenance.freezes", diags)
        .iter()
        .filter_map(|item| freeze(item, diags))
        .collect();
    Some(Maintenance { windows, freezes })
}

/// The items of a list-valued key (none when absent or not a list, which is reported).
fn list<'n>(node: Option<&'n Node>, what: &str, diags: &mut FileDiags<'_>) -> &'n [Node] {
    match node {
        None => &[],
        Some(n) if n.is_null() => &[],
        Some(n) => n.as_seq().unwrap_or_else(|| {
            diags.error(n, format!("{what} must be a list, not {}", n.type_name()));
            &[]
        }),
    }
}

/// The entries of a window or freeze mapping, reporting unknown keys; `None` when it is not a mapping.
fn entry<'n>(
    item: &'n Node,
    keys: &[&str],
    what: &str,
    diags: &mut FileDiags<'_>,
) -> Option<&'n [(Node, Node)]> {
    let expected = || format!("a {what} must be a mapping ({})", keys.join(", "));
    keyed_map(item, keys, what, expected, diags)
}

/// The string at `key`, required; reported when missing or not a string.
fn required<'n>(
    map: &'n [(Node, Node)],
    item: &Node,
    key: &str,
    example: &str,
    diags: &mut FileDiags<'_>,
) -> Option<(&'n Node, &'n str)> {
    match get(map, key) {
        None => {
            diags.error(item, format!("{key} is missing, e.g. {key}: {example}"));
            None
        }
        Some(node) => match node.as_str() {
            Some(s) => Some((node, s)),
            None => {
                diags.error(
                    node,
                    format!(
                        "{key} must be a string like {example}, not {}; quote it",
                        node.type_name()
                    ),
                );
                None
            }
        },
    }
}

/// The `timeZone` of a window or freeze: an IANA name kok's time-zone database knows, `UTC` when absent.
fn zone(map: &[(Node, Node)], diags: &mut FileDiags<'_>) -> Option<String> {
    let Some(node) = get(map, "timeZone") else {
        return Some(DEFAULT_ZONE.to_string());
    };
    let name = node.as_str().unwrap_or_default();
    match TimeZone::get(name) {
        Ok(_) if !name.is_empty() => Some(name.to_string()),
        _ => {
            diags.error(
                node,
                format!(
                    "timeZone \"{}\" is not a time zone kok knows: use an IANA name such as Europe/Berlin, \
                     America/New_York or UTC",
                    node.scalar_text().unwrap_or_default()
                ),
            );
            None
        }
    }
}

fn window(item: &Node, diags: &mut FileDiags<'_>) -> Option<MaintenanceWindow> {
    let map = entry(item, WINDOW_KEYS, "maintenance window", diags)?;
    let errors = diags.error_count();
    let days = days(get(map, "days"), diags);
    let start = required(map, item, "start", "\"02:00\"", diags).and_then(|(node, s)| {
        parse_hhmm(s).map(|_| s.to_string()).or_else(|| {
            diags.error(
                node,
                format!("start \"{s}\" is not a time of day: write HH:MM, e.g. \"02:00\" or \"22:30\""),
            );
            None
        })
    });
    let duration = required(map, item, "duration", "4h", diags).and_then(|(node, s)| {
        match parse_duration(s) {
            Some(d) if d > SignedDuration::ZERO && d <= MAX_WINDOW => Some(s.to_string()),
            _ => {
                diags.error(
                    node,
                    format!("duration \"{s}\" is not a window length: write e.g. 4h, 90m or 1h30m, more than 0 and at most 7d"),
                );
                None
            }
        }
    });
    let time_zone = zone(map, diags);
    (diags.error_count() == errors).then_some(())?;
    Some(MaintenanceWindow {
        days: days?,
        start: start?,
        duration: duration?,
        time_zone: time_zone?,
    })
}

/// `days`: a non-empty list of weekdays, written back as `Mon` ... `Sun`; absent means every day.
fn days(node: Option<&Node>, diags: &mut FileDiags<'_>) -> Option<Vec<String>> {
    let Some(node) = node else {
        return Some(Vec::new());
    };
    let items = match node.as_seq() {
        Some(items) if !items.is_empty() => items,
        _ => {
            diags.error(
                node,
                "days must be a non-empty list of weekdays, e.g. [Sat, Sun]; leave it out for every day",
            );
            return None;
        }
    };
    let mut out = Vec::new();
    for item in items {
        match item.as_str().and_then(parse_weekday) {
            Some(day) => out.push(weekday_name(day).to_string()),
            None => diags.error(
                item,
                format!(
                    "\"{}\" is not a day of the week: use Mon, Tue, Wed, Thu, Fri, Sat or Sun",
                    item.scalar_text().unwrap_or_default()
                ),
            ),
        }
    }
    (out.len() == items.len()).then_some(out)
}

fn freeze(item: &Node, diags: &mut FileDiags<'_>) -> Option<MaintenanceFreeze> {
    let map = entry(item, FREEZE_KEYS, "maintenance freeze", diags)?;
    let errors = diags.error_count();
    let mut date = |key: &str| {
        required(map, item, key, "2026-12-20", diags).and_then(|(node, s)| match s.parse::<Date>() {
            Ok(d) if s.len() == 10 => Some((node, d, s.to_string())),
            _ => {
                diags.error(
                    node,
                    format!("{key} \"{s}\" is not a date: write YYYY-MM-DD, e.g. 2026-12-20"),
                );
                None
            }
        })
    };
    let from = date("from");
    let to = date("to");
    if let (Some((_, f, _)), Some((node, t, _))) = (&from, &to) {
        if t <= f {
            diags.error(
                node,
                "to must be after from: it is the first day operations may start again",
            );
        }
    }
    let reason = match get(map, "reason") {
        None => None,
        Some(node) => match node.as_str() {
            Some(s) if !s.trim().is_empty() => Some(s.to_string()),
            _ => {
                diags.error(node, "reason must be a non-empty string, e.g. year-end");
                None
            }
        },
    };
    let time_zone = zone(map, diags);
    (diags.error_count() == errors).then_some(())?;
    Some(MaintenanceFreeze {
        from: from?.2,
        to: to?.2,
        time_zone: time_zone?,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::parse_settings;
    use crate::Diagnostic;

    fn check(text: &str) -> (Option<Maintenance>, Vec<Diagnostic>) {
        let mut out = Vec::new();
        let s = parse_settings(
            text,
            "cluster.yml",
            &mut FileDiags::new("cluster.yml", None, &mut out),
        );
        (s.maintenance, out)
    }

    fn errors(text: &str) -> Vec<String> {
        check(text).1.iter().map(Diagnostic::at).collect()
    }

    #[test]
    fn durations_are_numbers_with_units() {
        assert_eq!(parse_duration("30m"), Some(SignedDuration::from_mins(30)));
        assert_eq!(parse_duration("1h30m"), Some(SignedDuration::from_mins(90)));
        assert_eq!(parse_duration("2d"), Some(SignedDuration::from_hours(48)));
        assert_eq!(parse_duration("45s"), Some(SignedDuration::from_secs(45)));
        for bad in ["", "4", "h", "4 h", "1.5h", "4w", "-1h", "4h30"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn times_and_days_are_read_strictly() {
        assert_eq!(parse_hhmm("02:00"), Some(Time::constant(2, 0, 0, 0)));
        assert_eq!(parse_hhmm("23:59"), Some(Time::constant(23, 59, 0, 0)));
        for bad in ["2:00", "24:00", "02:60", "0200", "02:00:00", "ab:cd"] {
            assert_eq!(parse_hhmm(bad), None, "{bad}");
        }
        assert_eq!(parse_weekday("Sat"), Some(Weekday::Saturday));
        assert_eq!(parse_weekday("sunday"), Some(Weekday::Sunday));
        assert_eq!(parse_weekday("Sa"), None);
        assert_eq!(parse_weekday("Sonntag"), None);
    }

    #[test]
    fn windows_and_freezes_are_read_with_their_zones() {
        let text = "maintenance:\n  windows:\n    - {days: [Sat, sunday], start: \"02:00\", duration: 4h, timeZone: Europe/Berlin}\n    - {start: \"22:00\", duration: 90m}\n  freezes:\n    - {from: 2026-12-20, to: 2027-01-04, timeZone: Europe/Berlin, reason: year-end}\n";
        let (m, d) = check(text);
        assert_eq!(d, vec![]);
        let m = m.unwrap();
        assert_eq!(m.windows[0].days, vec!["Sat", "Sun"]);
        assert_eq!(m.windows[1].days, Vec::<String>::new(), "no days: every day");
        assert_eq!(m.windows[1].time_zone, "UTC");
        assert_eq!(m.freezes[0].reason.as_deref(), Some("year-end"));
        assert_eq!(m.freezes[0].to, "2027-01-04");
    }

    #[test]
    fn bad_zones_days_times_and_durations_name_their_line() {
        let text = "maintenance:\n  windows:\n    - days: [Sat, Caturday]\n      start: \"2am\"\n      duration: 8d\n      timeZone: Europe/Atlantis\n";
        let e = errors(text);
        assert!(
            e[0].starts_with("3:19: \"Caturday\" is not a day of the week"),
            "{e:?}"
        );
        assert!(
            e[1].starts_with("4:14: start \"2am\" is not a time of day"),
            "{e:?}"
        );
        assert!(
            e[2].starts_with("5:17: duration \"8d\" is not a window length"),
            "{e:?}"
        );
        assert!(
            e[3].starts_with("6:17: timeZone \"Europe/Atlantis\" is not a time zone"),
            "{e:?}"
        );
        assert_eq!(e.len(), 4);
    }

    #[test]
    fn unknown_keys_missing_fields_and_reversed_freezes_are_errors() {
        let e = errors("maintenance:\n  window: []\n");
        assert!(
            e[0].starts_with("2:3: unknown key \"window\" in maintenance; did you mean \"windows\""),
            "{e:?}"
        );
        let e = errors("maintenance:\n  windows:\n    - {start: \"02:00\", duration: 4h, zone: UTC}\n");
        assert!(
            e[0].contains("unknown key \"zone\" in maintenance window"),
            "{e:?}"
        );
        let e = errors("maintenance:\n  windows:\n    - {start: \"02:00\"}\n");
        assert!(e[0].starts_with("3:7: duration is missing"), "{e:?}");
        let e = errors("maintenance:\n  freezes:\n    - {from: 2027-01-04, to: 2026-12-20}\n");
        assert!(e[0].starts_with("3:30: to must be after from"), "{e:?}");
        let e = errors("maintenance:\n  freezes:\n    - {from: 2026-13-01, to: 2027-01-04}\n");
        assert!(e[0].contains("from \"2026-13-01\" is not a date"), "{e:?}");
        let e = errors("maintenance: [a]\n");
        assert!(e[0].starts_with("1:14: maintenance must be a mapping"), "{e:?}");
    }

    #[test]
    fn the_bundled_time_zone_database_knows_the_zones_without_the_system_one() {
        let db = jiff::tz::TimeZoneDatabase::bundled();
        assert!(
            !db.is_definitively_empty(),
            "jiff's tzdb-bundle-always feature is on"
        );
        assert!(db.get("Europe/Berlin").is_ok());
        assert!(db.get("Asia/Shanghai").is_ok());
    }
}
