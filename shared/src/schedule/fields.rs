//! Cron field syntax: our own validation of each field, before `croner` sees it.
//!
//! Owns: naming the field and the allowed range in every syntax error (croner's own messages
//! do not), turning names (`MON`, `JAN`) into numbers per field, and writing one canonical
//! numeric 7-field pattern for croner. Leaves matching and searching to croner.
//! Invariant: a pattern this module accepts is one croner parses with the same meaning.

use std::fmt::Write as _;

/// One of the seven cron fields, in pattern order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldKind {
    Second,
    Minute,
    Hour,
    DayOfMonth,
    Month,
    DayOfWeek,
    Year,
}

/// The years a year field may name. croner accepts 1-5000; a narrower range keeps every
/// search short and still covers any real deployment.
pub(crate) const YEAR_MIN: u32 = 1970;
/// See [`YEAR_MIN`].
pub(crate) const YEAR_MAX: u32 = 2999;

const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const WEEKDAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

impl FieldKind {
    /// The field's name in messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Second => "second",
            Self::Minute => "minute",
            Self::Hour => "hour",
            Self::DayOfMonth => "day-of-month",
            Self::Month => "month",
            Self::DayOfWeek => "day-of-week",
            Self::Year => "year",
        }
    }

    pub(super) fn bounds(self) -> (u32, u32) {
        match self {
            Self::Second | Self::Minute => (0, 59),
            Self::Hour => (0, 23),
            Self::DayOfMonth => (1, 31),
            Self::Month => (1, 12),
            Self::DayOfWeek => (0, 7),
            Self::Year => (YEAR_MIN, YEAR_MAX),
        }
    }

    /// The allowed values, as shown in messages.
    fn allowed(self) -> &'static str {
        match self {
            Self::Second | Self::Minute => "0-59",
            Self::Hour => "0-23",
            Self::DayOfMonth => "1-31",
            Self::Month => "1-12 or JAN-DEC",
            Self::DayOfWeek => "0-7 or SUN-SAT",
            Self::Year => "1970-2999",
        }
    }

    /// Parses one value: a number, or a name in the month and day-of-week fields.
    /// `range_end` makes `SUN` mean 7, so that `FRI-SUN` works.
    pub(super) fn value(self, token: &str, item: &str, range_end: bool) -> Result<u32, String> {
        let (min, max) = self.bounds();
        if !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit()) {
            // A value too long for u32 is still "outside", not "not a value".
            let value = token.parse::<u32>().unwrap_or(u32::MAX);
            if value < min || value > max {
                return Err(format!(
                    "{} {token} is outside {}",
                    self.name(),
                    self.allowed()
                ));
            }
            return Ok(value);
        }
        let upper = token.to_ascii_uppercase();
        let named = match self {
            Self::Month => MONTH_NAMES
                .iter()
                .position(|n| *n == upper)
                .map(|i| i as u32 + 1),
            Self::DayOfWeek => WEEKDAY_NAMES
                .iter()
                .position(|n| *n == upper)
                .map(|i| if i == 0 && range_end { 7 } else { i as u32 }),
            _ => None,
        };
        named.ok_or_else(|| {
            format!(
                "{} {item:?} is not a value in {}",
                self.name(),
                self.allowed()
            )
        })
    }

    /// Parses a step: a number from 1 to the field's largest value.
    fn step(self, token: &str, item: &str) -> Result<u32, String> {
        let max = self.bounds().1;
        match token.parse::<u32>() {
            Ok(step) if (1..=max).contains(&step) && token.bytes().all(|b| b.is_ascii_digit()) => {
                Ok(step)
            }
            _ => Err(format!(
                "{} step in {item:?} must be a number in 1-{max}",
                self.name()
            )),
        }
    }
}

/// A field checked and rewritten for croner.
#[derive(Debug, Clone)]
pub(crate) struct Field {
    /// The field as written starts with `*` (or `?`): cronie's test for "unrestricted"
    /// (DOM/DOW rule) and for elapsed-time DST handling (minute and hour).
    pub(crate) starts_with_star: bool,
    /// The canonical numeric text croner parses.
    pub(crate) canonical: String,
    /// The largest value the field can match, `None` when it is a plain `*`.
    /// Only used for the year field, to know when a schedule ends.
    pub(crate) largest: Option<u32>,
}

/// Checks one field and rewrites it for croner.
///
/// # Errors
/// The detail of what is wrong, such as `minute 61 is outside 0-59`.
pub(crate) fn parse_field(kind: FieldKind, text: &str) -> Result<Field, String> {
    let max = kind.bounds().1;
    let starts_with_star = text.starts_with('*') || text.starts_with('?');
    if text == "*" || (text == "?" && matches!(kind, FieldKind::DayOfMonth | FieldKind::DayOfWeek))
    {
        return Ok(Field {
            starts_with_star,
            canonical: "*".to_owned(),
            largest: (kind != FieldKind::Year).then_some(max),
        });
    }
    let mut canonical = String::with_capacity(text.len() + 4);
    let mut largest = 0;
    for item in text.split(',') {
        if item.is_empty() {
            return Err(format!("{} {text:?} has an empty list item", kind.name()));
        }
        if !canonical.is_empty() {
            canonical.push(',');
        }
        let top = parse_item(kind, item, &mut canonical)?;
        largest = largest.max(top);
    }
    Ok(Field {
        starts_with_star,
        canonical,
        largest: Some(largest),
    })
}

/// Parses one list item into `out`; returns the largest value it can match.
fn parse_item(kind: FieldKind, item: &str, out: &mut String) -> Result<u32, String> {
    let upper = item.to_ascii_uppercase();
    check_specials(kind, item, &upper)?;
    let special = match kind {
        FieldKind::DayOfMonth => day_of_month_special(item, &upper, out)?,
        FieldKind::DayOfWeek => day_of_week_special(item, &upper, out)?,
        _ => None,
    };
    if let Some(largest) = special {
        return Ok(largest);
    }
    if item == "?" {
        // Inside a list: the same as *.
        return parse_item(kind, "*", out);
    }
    parse_range(kind, item, out)
}

/// Refuses L, W, # and ? where the field does not allow them. `upper` is the item in
/// upper case.
fn check_specials(kind: FieldKind, item: &str, upper: &str) -> Result<(), String> {
    let name = kind.name();
    // L, W and # belong to the day fields only. Names are removed first: JUL has an L,
    // WED a W.
    let names: &[&str] = match kind {
        FieldKind::Month => &MONTH_NAMES,
        FieldKind::DayOfWeek => &WEEKDAY_NAMES,
        _ => &[],
    };
    let bare = names
        .iter()
        .fold(upper.to_owned(), |acc, name| acc.replace(name, ""));
    let special = |c: char| bare.contains(c);
    match kind {
        FieldKind::DayOfMonth if special('#') => {
            Err(format!("{name} {item:?}: # is only allowed in day-of-week"))
        }
        FieldKind::DayOfWeek if special('W') => Err(format!(
            "{name} {item:?}: W is only allowed in day-of-month"
        )),
        FieldKind::DayOfMonth | FieldKind::DayOfWeek => Ok(()),
        _ if special('L') || special('W') || special('#') || special('?') => Err(format!(
            "{name} {item:?}: L, W, # and ? are only allowed in day-of-month and day-of-week"
        )),
        _ => Ok(()),
    }
}

/// Day-of-month `L`, `LW` and `15W` into `out`, with the largest day they can match;
/// `None` for any other item.
fn day_of_month_special(item: &str, upper: &str, out: &mut String) -> Result<Option<u32>, String> {
    let kind = FieldKind::DayOfMonth;
    let (name, max) = (kind.name(), kind.bounds().1);
    if upper == "L" {
        out.push('L');
        return Ok(Some(max));
    }
    if upper == "LW" {
        out.push_str("LW");
        return Ok(Some(max));
    }
    if let Some(day) = upper.strip_suffix('W') {
        let value = kind.value(day, item, false)?;
        let _ = write!(out, "{value}W");
        return Ok(Some(max.min(value + 2)));
    }
    if upper.contains('L') || upper.contains('W') {
        return Err(format!(
            "{name} {item:?} is not valid: use L (last day), LW (last weekday) or a day with W, such as 15W"
        ));
    }
    Ok(None)
}

/// Day-of-week `5#3` and `5L` into `out`, with the weekday they match; `None` for any
/// other item.
fn day_of_week_special(item: &str, upper: &str, out: &mut String) -> Result<Option<u32>, String> {
    let kind = FieldKind::DayOfWeek;
    let name = kind.name();
    if upper == "L" {
        return Err(format!(
            "{name} \"L\" needs a weekday before L, such as 5L for the last Friday of the month"
        ));
    }
    if let Some((day, nth)) = item.split_once('#') {
        let value = kind.value(day, item, false)?;
        return match nth {
            "1" | "2" | "3" | "4" | "5" => {
                let _ = write!(out, "{value}#{nth}");
                Ok(Some(value))
            }
            _ => Err(format!("{name} {item:?}: the number after # must be 1-5")),
        };
    }
    if let Some(day) = upper.strip_suffix('L') {
        let value = kind.value(day, item, false)?;
        let _ = write!(out, "{value}L");
        return Ok(Some(value));
    }
    Ok(None)
}

/// A value, a range or `*`, each with an optional `/step`, into `out`; returns the
/// largest value it can match.
fn parse_range(kind: FieldKind, item: &str, out: &mut String) -> Result<u32, String> {
    let (min, max) = kind.bounds();
    let name = kind.name();
    let (range, step) = match item.split_once('/') {
        Some((range, step)) => (range, Some(kind.step(step, item)?)),
        None => (item, None),
    };
    if range == "*" {
        // croner only knows a whole-field `*`; inside a list it is the full range.
        let _ = write!(out, "{min}-{max}");
        if let Some(step) = step {
            let _ = write!(out, "/{step}");
            return Ok(min + (max - min) / step * step);
        }
        return Ok(max);
    }
    if let Some((start, end_text)) = range.split_once('-') {
        let start = kind.value(start, item, false)?;
        let mut end = kind.value(end_text, item, true)?;
        if start == 0 && end == 7 && !end_text.bytes().all(|b| b.is_ascii_digit()) {
            // `SUN-SUN` (or `0-SUN`) is Sunday alone; a named SUN ends a range as 7 only
            // after another day (`FRI-SUN`).
            end = 0;
        }
        if start > end {
            return Err(format!(
                "{name} range {range:?} goes backwards: write the smaller value first"
            ));
        }
        let _ = write!(out, "{start}-{end}");
        if let Some(step) = step {
            let _ = write!(out, "/{step}");
            return Ok(start + (end - start) / step * step);
        }
        return Ok(end);
    }
    let value = kind.value(range, item, false)?;
    if let Some(step) = step {
        return Err(format!(
            "{name} {item:?} needs * or a range before the /: write \"*/{step}\" or \"{value}-{max}/{step}\""
        ));
    }
    let _ = write!(out, "{value}");
    Ok(value)
}
