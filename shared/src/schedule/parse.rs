//! Reading a schedule string: descriptors, `@every`, and cron expressions (fields checked
//! by [`super::fields`], then compiled by croner).

use std::time::Duration;

use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};

use super::error::ScheduleError;
use super::fields::{Field, FieldKind, parse_field};
use super::kind::{CronSchedule, Kind};

/// Parses an `@` form: a descriptor or `@every`.
pub(super) fn descriptor(text: &str, tz: Tz) -> Result<Kind, ScheduleError> {
    let (word, rest) = text
        .split_once(char::is_whitespace)
        .map_or((text, ""), |(w, r)| (w, r.trim()));
    let word = word.to_ascii_lowercase();
    if word == "@every" {
        return every(rest);
    }
    let expansion = match word.as_str() {
        _ if !rest.is_empty() => None,
        "@yearly" | "@annually" => Some("0 0 1 1 *"),
        "@monthly" => Some("0 0 1 * *"),
        "@weekly" => Some("0 0 * * 0"),
        "@daily" | "@midnight" => Some("0 0 * * *"),
        "@hourly" => Some("0 * * * *"),
        _ => None,
    };
    match expansion {
        Some(expansion) => Ok(Kind::Cron(cron(expansion, tz)?)),
        None => Err(ScheduleError::UnknownDescriptor {
            descriptor: text.to_owned(),
        }),
    }
}

/// Parses the duration of `@every`.
fn every(text: &str) -> Result<Kind, ScheduleError> {
    if text.is_empty() {
        return Err(ScheduleError::MissingDuration);
    }
    let every = humantime::parse_duration(text).map_err(|_| ScheduleError::NotADuration {
        text: text.to_owned(),
    })?;
    if every < Duration::from_secs(1) {
        return Err(ScheduleError::TooShort {
            text: text.to_owned(),
        });
    }
    if every.subsec_nanos() != 0 {
        return Err(ScheduleError::Fractional {
            text: text.to_owned(),
        });
    }
    let secs = i64::try_from(every.as_secs()).map_err(|_| ScheduleError::NeverFires {
        reason: "its next time is out of range".to_owned(),
    })?;
    Ok(Kind::Every { every, secs })
}

/// The seven fields of a 5, 6 or 7-field cron expression, in croner's order; the seconds
/// default to `0` and the year to `*`.
fn fields(text: &str) -> Result<[Field; 7], ScheduleError> {
    use FieldKind::{DayOfMonth, DayOfWeek, Hour, Minute, Month, Second, Year as YearField};

    let parts: Vec<&str> = text.split_whitespace().collect();
    let kinds: &[FieldKind] = match parts.len() {
        5 => &[Minute, Hour, DayOfMonth, Month, DayOfWeek],
        6 => &[Second, Minute, Hour, DayOfMonth, Month, DayOfWeek],
        7 => &[
            Second, Minute, Hour, DayOfMonth, Month, DayOfWeek, YearField,
        ],
        got => return Err(ScheduleError::FieldCount { got }),
    };
    let mut parsed: [Option<Field>; 7] = Default::default();
    for (kind, part) in kinds.iter().zip(&parts) {
        let field = parse_field(*kind, part).map_err(|detail| ScheduleError::Field {
            field: kind.name(),
            detail,
        })?;
        parsed[*kind as usize] = Some(field);
    }
    let default = |kind: FieldKind, text: &str| {
        parse_field(kind, text).map_err(|detail| ScheduleError::Field {
            field: kind.name(),
            detail,
        })
    };
    let [sec, min, hour, dom, month, dow, year] = parsed;
    let sec = match sec {
        Some(f) => f,
        None => default(Second, "0")?,
    };
    let year = match year {
        Some(f) => f,
        None => default(YearField, "*")?,
    };
    let missing = || ScheduleError::FieldCount { got: parts.len() };
    Ok([
        sec,
        min.ok_or_else(missing)?,
        hour.ok_or_else(missing)?,
        dom.ok_or_else(missing)?,
        month.ok_or_else(missing)?,
        dow.ok_or_else(missing)?,
        year,
    ])
}

/// Parses a 5, 6 or 7-field cron expression.
pub(super) fn cron(text: &str, tz: Tz) -> Result<CronSchedule, ScheduleError> {
    let [sec, min, hour, dom, month, dow, year] = fields(text)?;

    // crontab(5): when either day field starts with `*`, a day must match both; croner
    // only knows a bare `*` as unrestricted, so `+` (croner's AND) makes it agree.
    let and = (dom.starts_with_star || dow.starts_with_star)
        && dom.canonical != "*"
        && dow.canonical != "*";
    let pattern = format!(
        "{} {} {} {} {} {}{} {}",
        sec.canonical,
        min.canonical,
        hour.canonical,
        dom.canonical,
        month.canonical,
        if and { "+" } else { "" },
        dow.canonical,
        year.canonical,
    );
    let cron = CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Optional)
        .build()
        .parse(&pattern)
        .map_err(|e| ScheduleError::Field {
            field: "pattern",
            detail: e.to_string(),
        })?;
    let last_year = year.largest.and_then(|y| i32::try_from(y).ok());
    let mut schedule = CronSchedule {
        cron,
        pinned: !(min.starts_with_star || hour.starts_with_star),
        last: None,
        last_year,
    };
    if let Some(y) = last_year {
        schedule.last = schedule.last_fire(tz, y);
    }
    Ok(schedule)
}
