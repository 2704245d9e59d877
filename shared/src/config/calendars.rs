//! `[calendars.NAME]`: named sets of dates that jobs exclude with `calendars = ["NAME"]`,
//! given as `dates = ["2026-12-25", …]` and/or `ics = "PATH"` (an iCalendar file).
//!
//! Owns: reading both forms into one set of dates per calendar, and every problem of a
//! calendar section (an unreadable or malformed `.ics` names the calendar and the field).
//! What is read of an `.ics` (`docs/config.md`): each VEVENT whose DTSTART is a date (an
//! all-day event) gives its days, from DTSTART up to the day before DTEND (one day when
//! DTEND is missing); events with a time of day are not days off and are left out; an
//! RRULE is not expanded (a warning says so: only the first day of such an event counts).
//!
//! Invariant: a calendar's dates are read once per load, from the file as it is then; the
//! jobs that name it share them, and a job's digest includes them, so processes whose
//! files differ see differing digests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::NaiveDate;
use icalendar::{Component as _, DatePerhapsTime};
use toml::{Table, Value};

use super::raw::{describe, unknown_field};
use super::report::Report;

/// One `[calendars.NAME]`, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calendar {
    /// Every date it lists, of `dates` and of its `.ics`.
    pub dates: Arc<BTreeSet<NaiveDate>>,
    /// `ics`: the file its dates were read from, if any (as resolved against the config
    /// file's directory).
    pub ics: Option<PathBuf>,
}

/// The longest span one all-day event may cover: longer ones are typos or not holidays.
const MAX_EVENT_DAYS: i64 = 366;

/// Reads every `[calendars.NAME]` of `table` (the value of the top-level `calendars` key);
/// `config` is the config file's path (a relative `ics` is read from its directory).
pub(super) fn resolve(
    table: Option<Value>,
    config: &Path,
    out: &mut Report,
) -> BTreeMap<Arc<str>, Calendar> {
    super::sections::read("calendars", table, out, |_, scope, fields, out| {
        read(fields, scope, config, out)
    })
}

/// One calendar's fields.
fn read(fields: &Table, scope: &str, config: &Path, out: &mut Report) -> Option<Calendar> {
    let mut dates = BTreeSet::new();
    let mut ics = None;
    for (key, value) in fields {
        match key.as_str() {
            "dates" => read_dates(value, scope, &mut dates, out),
            "ics" => match value {
                Value::String(path) => {
                    let path = config
                        .parent()
                        .map_or_else(|| PathBuf::from(path), |dir| dir.join(path));
                    if let Err(message) = read_ics(&path, &mut dates, scope, out) {
                        out.problem(scope, "ics", message);
                    }
                    ics = Some(path);
                }
                other => out.problem(
                    scope,
                    "ics",
                    format!(
                        "expected a string naming an iCalendar file such as \"/etc/cronq/holidays.ics\", got {}",
                        describe(other)
                    ),
                ),
            },
            other => out
                .problems
                .push(unknown_field(scope, "", other, ["dates", "ics"].into_iter())),
        }
    }
    if !fields.contains_key("dates") && !fields.contains_key("ics") {
        out.problem(
            scope,
            "",
            "has no dates: give dates = [\"2026-12-25\"] or ics = \"/path/holidays.ics\"",
        );
    }
    Some(Calendar {
        dates: Arc::new(dates),
        ics,
    })
}

/// `dates = [...]`: each a `YYYY-MM-DD` string or a TOML date.
fn read_dates(value: &Value, scope: &str, dates: &mut BTreeSet<NaiveDate>, out: &mut Report) {
    let expected = "an array of dates such as [\"2026-12-25\", \"2027-01-01\"]";
    let Value::Array(items) = value else {
        out.problem(
            scope,
            "dates",
            format!("expected {expected}, got {}", describe(value)),
        );
        return;
    };
    for item in items {
        match date_of(item) {
            Some(date) => {
                dates.insert(date);
            }
            None => out.problem(
                scope,
                "dates",
                format!(
                    "{} is not a date: write it as \"YYYY-MM-DD\", such as \"2026-12-25\"",
                    describe(item)
                ),
            ),
        }
    }
}

/// A `YYYY-MM-DD` string, or a TOML local date.
pub(super) fn date_of(value: &Value) -> Option<NaiveDate> {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Datetime(d) if d.time.is_none() && d.offset.is_none() => d.to_string(),
        _ => return None,
    };
    let text = text.trim();
    (text.len() == 10)
        .then(|| NaiveDate::parse_from_str(text, "%Y-%m-%d").ok())
        .flatten()
}

/// The days of the all-day events of the `.ics` at `path`.
fn read_ics(
    path: &Path,
    dates: &mut BTreeSet<NaiveDate>,
    scope: &str,
    out: &mut Report,
) -> Result<(), String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "cannot read {:?}: {e}; give the path of a readable iCalendar (.ics) file",
            shown.to_string()
        )
    })?;
    let calendar: icalendar::Calendar = text.parse().map_err(|e: String| {
        let first = e.lines().next().unwrap_or("").trim().to_owned();
        format!(
            "{:?} is not an iCalendar file ({first}): export the calendar as .ics (BEGIN:VCALENDAR … END:VCALENDAR)",
            shown.to_string()
        )
    })?;
    let mut recurring = 0usize;
    let mut events = 0usize;
    for component in &calendar.components {
        let icalendar::CalendarComponent::Event(event) = component else {
            continue;
        };
        events += 1;
        let Some(DatePerhapsTime::Date(start)) = event.get_start() else {
            continue;
        };
        if event.property_value("RRULE").is_some() {
            recurring += 1;
        }
        let end = match event.get_end() {
            Some(DatePerhapsTime::Date(end)) if end > start => end,
            _ => start.succ_opt().unwrap_or(start),
        };
        if (end - start).num_days() > MAX_EVENT_DAYS {
            return Err(format!(
                "{:?}: an all-day event from {start} to {end} spans more than {MAX_EVENT_DAYS} days: split it or fix its DTEND",
                shown.to_string()
            ));
        }
        let mut day = start;
        while day < end {
            dates.insert(day);
            let Some(next) = day.succ_opt() else { break };
            day = next;
        }
    }
    if events == 0 {
        return Err(format!(
            "{:?} has no event (VEVENT): a calendar of days off lists them as all-day events",
            shown.to_string()
        ));
    }
    if recurring > 0 {
        out.warn(
            scope,
            "ics",
            format!(
                "{:?}: {recurring} all-day event(s) repeat (RRULE), which is not expanded: only their first day is excluded; list the other days in dates or as events of their own",
                shown.to_string()
            ),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_an_ics_file_are_read() {
        let dir = std::env::temp_dir().join(format!("cronq-cal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ics = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//t//EN\r\n\
BEGIN:VEVENT\r\nUID:1\r\nDTSTAMP:20260101T000000Z\r\nDTSTART;VALUE=DATE:20261224\r\nDTEND;VALUE=DATE:20261227\r\nSUMMARY:Christmas\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:2\r\nDTSTAMP:20260101T000000Z\r\nDTSTART;VALUE=DATE:20270101\r\nSUMMARY:New year\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:3\r\nDTSTAMP:20260101T000000Z\r\nDTSTART:20270105T100000Z\r\nDTEND:20270105T110000Z\r\nSUMMARY:Meeting\r\nEND:VEVENT\r\n\
END:VCALENDAR\r\n";
        std::fs::write(dir.join("h.ics"), ics).unwrap();
        std::fs::write(dir.join("bad.ics"), "not a calendar").unwrap();
        let table: Value = toml::from_str::<Table>(
            "[x]\ndates = [\"2026-05-01\", 2026-10-03]\nics = \"h.ics\"\n[bad]\nics = \"bad.ics\"\n[missing]\nics = \"nope.ics\"\n[odd]\ndates = [\"2026-02-30\"]\ncolour = 1\n",
        )
        .map(Value::Table)
        .unwrap();
        let mut out = Report::default();
        let read = resolve(Some(table), &dir.join("cronq.toml"), &mut out);
        let dates: Vec<String> = read["x"].dates.iter().map(ToString::to_string).collect();
        assert_eq!(
            dates,
            [
                "2026-05-01",
                "2026-10-03",
                "2026-12-24",
                "2026-12-25",
                "2026-12-26",
                "2027-01-01"
            ]
        );
        assert_eq!(read.len(), 1, "only the good calendar");
        let lines: Vec<String> = out.problems.iter().map(ToString::to_string).collect();
        let bad = dir.join("bad.ics").display().to_string();
        let missing = dir.join("nope.ics").display().to_string();
        assert!(
            lines[0].starts_with(&format!(
                "[calendars.bad]: ics: {bad:?} is not an iCalendar file ("
            )),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with(&format!(
                "[calendars.missing]: ics: cannot read {missing:?}: "
            )),
            "{lines:?}"
        );
        assert_eq!(
            &lines[2..],
            [
                "[calendars.odd]: dates: the string \"2026-02-30\" is not a date: write it as \"YYYY-MM-DD\", such as \"2026-12-25\"",
                "[calendars.odd]: colour: unknown field; allowed: dates, ics",
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
