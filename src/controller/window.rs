//! Maintenance windows and freezes as start decisions (pure): whether an operation may start at an
//! instant, and else the [`Wait`] that says until when, so the reconciler looks again at that instant
//! by a timer instead of polling.
//!
//! A window opens on each of its days at its local start time in its IANA time zone, daylight-saving
//! changes included (a start the change skips opens at the same offset after it: 02:30 becomes
//! 03:30), and stays open for its duration of elapsed time. A freeze covers `from` 00:00 to `to` 00:00
//! in its zone. Only starts are decided here: a running Job is never stopped.

use std::sync::Arc;

use jiff::civil::{Date, Time, Weekday};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, ToSpan};

use super::queue::Wait;
use crate::api::Maintenance;
use crate::layout::{parse_duration, parse_hhmm, parse_weekday};

/// Where the controller reads the time: the system clock, or one the tests move.
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> Timestamp + Send + Sync>);

impl Clock {
    /// The system clock.
    pub fn system() -> Clock {
        Clock(Arc::new(Timestamp::now))
    }

    /// The system clock moved by `offset` (a test's "it is Saturday 01:59:58 in Berlin").
    pub fn offset(offset: SignedDuration) -> Clock {
        Clock(Arc::new(move || {
            Timestamp::now()
                .saturating_add(offset)
                .unwrap_or_else(|_| Timestamp::now())
        }))
    }

    /// Now, by this clock.
    pub fn now(&self) -> Timestamp {
        (self.0)()
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::system()
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Clock({})", self.now())
    }
}

/// A window, read.
struct Window {
    /// Days it opens on; empty: every day.
    days: Vec<Weekday>,
    start: Time,
    duration: SignedDuration,
    tz: TimeZone,
    zone: String,
}

impl Window {
    /// When the window opens on local `date`, if it opens that day.
    fn start_on(&self, date: Date) -> Option<Timestamp> {
        if !self.days.is_empty() && !self.days.contains(&date.weekday()) {
            return None;
        }
        let zoned = date.to_datetime(self.start).to_zoned(self.tz.clone()).ok()?;
        Some(zoned.timestamp())
    }

    /// Local dates from `back` days before `t`'s to `ahead` days after it.
    fn dates_around(&self, t: Timestamp, back: i64, ahead: i64) -> impl Iterator<Item = Date> + '_ {
        let today = t.to_zoned(self.tz.clone()).date();
        (-back..=ahead).filter_map(move |i| today.checked_add(i.days()).ok())
    }

    fn open_at(&self, t: Timestamp) -> bool {
        // A window lasts at most 7 days, so one opened 8 local days back has closed.
        self.dates_around(t, 8, 0)
            .filter_map(|d| self.start_on(d))
            .any(|s| s <= t && s.checked_add(self.duration).is_ok_and(|end| t < end))
    }

    /// The first opening after `t`.
    fn next_start(&self, t: Timestamp) -> Option<Timestamp> {
        self.dates_around(t, 1, 8)
            .filter_map(|d| self.start_on(d))
            .filter(|s| *s > t)
            .min()
    }
}

/// A freeze, read.
struct Freeze {
    from: Timestamp,
    to: Timestamp,
    /// `to` as written.
    until: String,
    reason: Option<String>,
}

fn zone(name: &str) -> Result<TimeZone, String> {
    TimeZone::get(name).map_err(|e| format!("time zone {name}: {e}"))
}

fn read(m: &Maintenance) -> Result<(Vec<Window>, Vec<Freeze>), String> {
    let mut windows = Vec::new();
    for w in &m.windows {
        let days = w
            .days
            .iter()
            .map(|d| parse_weekday(d).ok_or_else(|| format!("day {d}")))
            .collect::<Result<Vec<_>, _>>()?;
        windows.push(Window {
            days,
            start: parse_hhmm(&w.start).ok_or_else(|| format!("start {}", w.start))?,
            duration: parse_duration(&w.duration).ok_or_else(|| format!("duration {}", w.duration))?,
            tz: zone(&w.time_zone)?,
            zone: w.time_zone.clone(),
        });
    }
    let mut freezes = Vec::new();
    for f in &m.freezes {
        let tz = zone(&f.time_zone)?;
        let midnight = |s: &str| {
            let date: Date = s.parse().map_err(|_| format!("date {s}"))?;
            date.to_zoned(tz.clone())
                .map(|z| z.timestamp())
                .map_err(|e| format!("date {s}: {e}"))
        };
        freezes.push(Freeze {
            from: midnight(&f.from)?,
            to: midnight(&f.to)?,
            until: f.to.clone(),
            reason: f.reason.clone(),
        });
    }
    Ok((windows, freezes))
}

/// The freeze `t` lies in, the one that ends last when several do.
fn frozen_at(freezes: &[Freeze], t: Timestamp) -> Option<&Freeze> {
    freezes
        .iter()
        .filter(|f| f.from <= t && t < f.to)
        .max_by_key(|f| f.to)
}

/// The first instant at or after `now` inside a window (any, when there are none) and outside every
/// freeze; `None` when none comes within a year of openings and freezes.
fn next_opening(windows: &[Window], freezes: &[Freeze], now: Timestamp) -> Option<Timestamp> {
    let mut t = now;
    for _ in 0..1000 {
        if let Some(f) = frozen_at(freezes, t) {
            t = f.to;
        } else if windows.is_empty() || windows.iter().any(|w| w.open_at(t)) {
            return Some(t);
        } else {
            t = windows.iter().filter_map(|w| w.next_start(t)).min()?;
        }
    }
    None
}

/// `1d 5h`, `5h 30m`, `12m`, `45s`: how long until then, to the minute from a minute on.
pub fn until_text(d: SignedDuration) -> String {
    let secs = d.as_secs().max(0);
    if secs < 60 {
        return format!("{secs}s");
    }
    let mins = (secs + 30) / 60;
    let (days, hours, mins) = (mins / 1440, mins % 1440 / 60, mins % 60);
    match (days, hours) {
        (0, 0) => format!("{mins}m"),
        (0, h) => format!("{h}h {mins}m"),
        (d, h) => format!("{d}d {h}h"),
    }
}

/// Whether an operation under `maintenance` may start at `now`: `Ok` inside a window (or when there are
/// none) and outside every freeze; else [`Wait::Frozen`] until the freeze ends, or [`Wait::Window`]
/// until the next window opens (past any freeze).
pub fn maintenance_wait(maintenance: &Maintenance, now: Timestamp) -> Result<(), Wait> {
    let (windows, freezes) = read(maintenance).map_err(Wait::MaintenanceUnreadable)?;
    if let Some(f) = frozen_at(&freezes, now) {
        return Err(Wait::Frozen {
            until: f.until.clone(),
            reason: f.reason.clone(),
            ends: f.to,
        });
    }
    if windows.is_empty() || windows.iter().any(|w| w.open_at(now)) {
        return Ok(());
    }
    let opens = next_opening(&windows, &freezes, now)
        .or_else(|| windows.iter().filter_map(|w| w.next_start(now)).min())
        .ok_or_else(|| Wait::MaintenanceUnreadable("no window ever opens".to_string()))?;
    let window = windows.iter().find(|w| w.open_at(opens)).unwrap_or(&windows[0]);
    let local = opens.to_zoned(window.tz.clone());
    Err(Wait::Window {
        opens,
        at: format!("{} {}", local.strftime("%a %Y-%m-%d %H:%M"), window.zone),
        within: until_text(opens.duration_since(now)),
    })
}

/// The queue's verdict with maintenance folded in: an operation that could start, or that waits only
/// for a Job slot, waits for its window or freeze instead; one that waits for its cluster keeps saying
/// so. `Ok(Some(wait))`: it starts because it ignores maintenance, and `wait` is what it ignored.
pub fn with_maintenance(
    queue: Result<(), Wait>,
    maintenance: Option<&Maintenance>,
    ignore: bool,
    now: Timestamp,
) -> Result<Option<Wait>, Wait> {
    let window = match maintenance {
        Some(m) => maintenance_wait(m, now),
        None => Ok(()),
    };
    match (queue, window) {
        (Ok(()), Ok(())) => Ok(None),
        (Ok(()), Err(w)) if ignore => Ok(Some(w)),
        (Ok(()), Err(w)) => Err(w),
        (Err(Wait::NoJobSlot { .. }), Err(w)) if !ignore => Err(w),
        (Err(q), _) => Err(q),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{MaintenanceFreeze, MaintenanceWindow};

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn window(days: &[&str], start: &str, duration: &str, zone: &str) -> MaintenanceWindow {
        MaintenanceWindow {
            days: days.iter().map(|d| d.to_string()).collect(),
            start: start.into(),
            duration: duration.into(),
            time_zone: zone.into(),
        }
    }

    fn weekend_berlin() -> Maintenance {
        Maintenance {
            windows: vec![window(&["Sat", "Sun"], "02:00", "4h", "Europe/Berlin")],
            freezes: vec![MaintenanceFreeze {
                from: "2026-12-20".into(),
                to: "2027-01-04".into(),
                time_zone: "Europe/Berlin".into(),
                reason: Some("year-end".into()),
            }],
        }
    }

    fn says(m: &Maintenance, now: &str) -> String {
        match maintenance_wait(m, at(now)) {
            Ok(()) => "start".into(),
            Err(w) => w.to_string(),
        }
    }

    #[test]
    fn outside_the_window_an_operation_waits_for_the_next_opening_in_its_zone() {
        // Thursday 21:00 in Berlin (CET, UTC+1).
        assert_eq!(
            says(&weekend_berlin(), "2026-11-26T20:00:00Z"),
            "waiting for the maintenance window: Sat 2026-11-28 02:00 Europe/Berlin (in 1d 5h)"
        );
        let Err(Wait::Window { opens, .. }) = maintenance_wait(&weekend_berlin(), at("2026-11-26T20:00:00Z"))
        else {
            panic!("a window wait")
        };
        assert_eq!(
            opens,
            at("2026-11-28T01:00:00Z"),
            "the instant the timer wakes it"
        );
    }

    #[test]
    fn inside_the_window_it_starts_and_the_window_closes_after_its_duration() {
        let m = weekend_berlin();
        assert_eq!(says(&m, "2026-11-28T01:00:00Z"), "start", "Sat 02:00 Berlin");
        assert_eq!(says(&m, "2026-11-28T04:59:59Z"), "start", "Sat 05:59:59 Berlin");
        assert_eq!(
            says(&m, "2026-11-28T05:00:00Z"),
            "waiting for the maintenance window: Sun 2026-11-29 02:00 Europe/Berlin (in 20h 0m)"
        );
    }

    #[test]
    fn a_window_that_opens_while_an_operation_waits_lets_it_start_at_the_opening() {
        let m = weekend_berlin();
        let Err(wait) = maintenance_wait(&m, at("2026-11-28T00:59:58Z")) else {
            panic!("waits two seconds before the opening")
        };
        assert_eq!(wait.wake_at(), Some(at("2026-11-28T01:00:00Z")));
        assert!(wait.to_string().ends_with("(in 2s)"), "{wait}");
        assert_eq!(maintenance_wait(&m, wait.wake_at().unwrap()), Ok(()));
    }

    #[test]
    fn in_a_freeze_it_waits_until_the_freeze_ends_whatever_the_windows_say() {
        let m = weekend_berlin();
        // Saturday 2026-12-26 03:00 Berlin: inside the window, inside the freeze.
        let wait = maintenance_wait(&m, at("2026-12-26T02:00:00Z")).unwrap_err();
        assert_eq!(wait.to_string(), "frozen until 2027-01-04 (year-end)");
        assert_eq!(
            wait.wake_at(),
            Some(at("2027-01-03T23:00:00Z")),
            "2027-01-04 00:00 Berlin"
        );
        // Just before the freeze, a Saturday morning outside the window: the next opening is past the
        // freeze (the weekends of the freeze are skipped).
        assert_eq!(
            says(&m, "2026-12-19T06:00:00Z"),
            "waiting for the maintenance window: Sat 2027-01-09 02:00 Europe/Berlin (in 20d 19h)"
        );
        let no_reason = Maintenance {
            windows: vec![],
            freezes: vec![MaintenanceFreeze {
                reason: None,
                ..m.freezes[0].clone()
            }],
        };
        assert_eq!(
            says(&no_reason, "2026-12-20T12:00:00Z"),
            "frozen until 2027-01-04"
        );
        assert_eq!(
            says(&no_reason, "2027-01-04T00:00:00Z"),
            "start",
            "no windows: any time after it"
        );
    }

    #[test]
    fn daylight_saving_changes_move_the_window_in_utc_and_a_skipped_start_opens_after_the_change() {
        let daily = Maintenance {
            windows: vec![window(&[], "02:30", "1h", "Europe/Berlin")],
            freezes: vec![],
        };
        // Spring forward, Sunday 2027-03-28: 02:00 CET becomes 03:00 CEST; 02:30 does not exist.
        let wait = maintenance_wait(&daily, at("2027-03-27T22:00:00Z")).unwrap_err();
        assert_eq!(
            wait.to_string(),
            "waiting for the maintenance window: Sun 2027-03-28 03:30 Europe/Berlin (in 3h 30m)"
        );
        assert_eq!(wait.wake_at(), Some(at("2027-03-28T01:30:00Z")));
        // The day before (CET) it opened at 01:30 UTC; the day after (CEST) at 00:30 UTC.
        assert_eq!(says(&daily, "2027-03-27T01:30:00Z"), "start");
        assert_eq!(says(&daily, "2027-03-29T00:30:00Z"), "start");
        assert_ne!(
            says(&daily, "2027-03-29T01:30:00Z"),
            "start",
            "closed by 03:30 CEST"
        );
        // Fall back, Sunday 2026-10-25: 02:30 happens twice; the window opens at the first (CEST) and
        // lasts one elapsed hour.
        let wait = maintenance_wait(&daily, at("2026-10-24T22:00:00Z")).unwrap_err();
        assert_eq!(wait.wake_at(), Some(at("2026-10-25T00:30:00Z")));
        assert_eq!(says(&daily, "2026-10-25T01:29:59Z"), "start");
        assert_ne!(says(&daily, "2026-10-25T01:30:00Z"), "start");
    }

    #[test]
    fn a_window_past_midnight_stays_open_into_the_next_day() {
        let late = Maintenance {
            windows: vec![window(&["Fri"], "22:00", "6h", "UTC")],
            freezes: vec![],
        };
        assert_eq!(
            says(&late, "2026-11-28T03:59:00Z"),
            "start",
            "Saturday 03:59, opened Friday"
        );
        assert_ne!(says(&late, "2026-11-28T04:00:00Z"), "start");
    }

    #[test]
    fn maintenance_folds_into_the_queue_verdict_and_ignore_maintenance_lets_it_through() {
        let m = weekend_berlin();
        let now = at("2026-11-26T20:00:00Z");
        let slot = Wait::NoJobSlot { running: 4, max: 4 };
        let behind = Wait::Behind("earlier".into());
        assert!(matches!(
            with_maintenance(Ok(()), Some(&m), false, now),
            Err(Wait::Window { .. })
        ));
        assert!(matches!(
            with_maintenance(Err(slot.clone()), Some(&m), false, now),
            Err(Wait::Window { .. })
        ));
        assert_eq!(
            with_maintenance(Err(behind.clone()), Some(&m), false, now),
            Err(behind)
        );
        assert_eq!(with_maintenance(Ok(()), None, false, now), Ok(None));
        assert!(matches!(
            with_maintenance(Ok(()), Some(&m), true, now),
            Ok(Some(Wait::Window { .. }))
        ));
        assert_eq!(
            with_maintenance(Err(slot.clone()), Some(&m), true, now),
            Err(slot)
        );
        let inside = at("2026-11-28T02:00:00Z");
        assert_eq!(with_maintenance(Ok(()), Some(&m), true, inside), Ok(None));
    }

    #[test]
    fn unreadable_settings_hold_the_operation_and_say_why() {
        let bad = Maintenance {
            windows: vec![window(&["Sat"], "02:00", "4h", "Europe/Atlantis")],
            freezes: vec![],
        };
        assert!(says(&bad, "2026-11-26T20:00:00Z")
            .starts_with("waiting: the maintenance settings cannot be read"));
    }

    #[test]
    fn waits_read_in_days_hours_and_minutes() {
        assert_eq!(until_text(SignedDuration::from_secs(45)), "45s");
        assert_eq!(until_text(SignedDuration::from_secs(12 * 60 + 10)), "12m");
        assert_eq!(until_text(SignedDuration::from_mins(330)), "5h 30m");
        assert_eq!(until_text(SignedDuration::from_secs(29 * 3600 - 1)), "1d 5h");
    }

    #[test]
    fn the_offset_clock_runs_with_the_system_clock() {
        let clock = Clock::offset(SignedDuration::from_hours(24));
        let ahead = clock.now().duration_since(Clock::system().now());
        assert!(ahead > SignedDuration::from_hours(23), "{ahead:?}");
    }
}
