//! `H` in a cron field: a value derived from the job's name, so that many jobs written
//! alike (`H * * * *`) spread over the field's range instead of firing together.
//!
//! Owns: rewriting each `H` item (`H`, `H/STEP`, `H(A-B)`, `H(A-B)/STEP`) into plain cron
//! syntax before [`super::fields`] checks the expression. Invariant (G4): the value of a
//! field is a pure function of the job's name bytes, the field and the item as written:
//! FNV-1a 64 with a fixed finaliser, never a per-process seed, and never another field, so
//! every producer of every version resolves a job's `H` alike.

use super::error::ScheduleError;
use super::fields::FieldKind;

/// The rewritten text of a cron expression with `H` items, `None` when it has none (or is
/// not a cron expression: the normal parse reports that).
///
/// # Errors
/// A malformed `H` item, an empty `H(A-B)` range, a step out of range, `H` in the year
/// field, or `H` with no job name (`job` is `None`).
pub(super) fn resolve(text: &str, job: Option<&str>) -> Result<Option<String>, ScheduleError> {
    use FieldKind::{DayOfMonth, DayOfWeek, Hour, Minute, Month, Second, Year};

    let text = text.trim();
    // No `H` item without an `H` (most schedules: asked once per job as a config loads).
    if text.starts_with('@') || !text.contains('H') {
        return Ok(None);
    }
    let parts: Vec<&str> = text.split_whitespace().collect();
    let kinds: &[FieldKind] = match parts.len() {
        5 => &[Minute, Hour, DayOfMonth, Month, DayOfWeek],
        6 => &[Second, Minute, Hour, DayOfMonth, Month, DayOfWeek],
        7 => &[Second, Minute, Hour, DayOfMonth, Month, DayOfWeek, Year],
        _ => return Ok(None),
    };
    if !parts.iter().any(|p| p.split(',').any(is_hash_item)) {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(parts.len());
    for (kind, part) in kinds.iter().zip(&parts) {
        let mut field = String::with_capacity(part.len() + 8);
        for (i, item) in part.split(',').enumerate() {
            if i > 0 {
                field.push(',');
            }
            if is_hash_item(item) {
                let detail = |detail: String| ScheduleError::Field {
                    field: kind.name(),
                    detail,
                };
                let Some(job) = job else {
                    return Err(detail(format!(
                        "{} {item:?}: H needs a job's name to derive its value: use it in a job's schedule",
                        kind.name()
                    )));
                };
                field.push_str(&resolve_item(*kind, item, job).map_err(detail)?);
            } else {
                field.push_str(item);
            }
        }
        out.push(field);
    }
    Ok(Some(out.join(" ")))
}

/// Whether a list item is an `H` form (no month or weekday name starts with H).
fn is_hash_item(item: &str) -> bool {
    item.starts_with('H')
}

/// The range a bare `H` or `H/STEP` picks from: the field's own, except day-of-month
/// (1-28, a day every month has) and day-of-week (0-6, Sunday once).
fn default_range(kind: FieldKind) -> (u32, u32) {
    match kind {
        FieldKind::DayOfMonth => (1, 28),
        FieldKind::DayOfWeek => (0, 6),
        _ => kind.bounds(),
    }
}

/// One `H` item as plain cron syntax: `H` and `H(A-B)` as one value, `H/STEP` and
/// `H(A-B)/STEP` as `FIRST-B/STEP` where FIRST is A plus the hash modulo STEP.
fn resolve_item(kind: FieldKind, item: &str, job: &str) -> Result<String, String> {
    let name = kind.name();
    let malformed = || {
        format!(
            "{name} {item:?} is not valid: use H, H/STEP, H(A-B) or H(A-B)/STEP, such as H(0-29)/10"
        )
    };
    if kind == FieldKind::Year {
        return Err(format!(
            "{name} {item:?}: H is not allowed in the year field"
        ));
    }
    let rest = &item[1..];
    let (range, rest) = match rest.strip_prefix('(') {
        Some(inner) => {
            let (range, rest) = inner.split_once(')').ok_or_else(malformed)?;
            let (a, b) = range.split_once('-').ok_or_else(malformed)?;
            let lo = kind.value(a, item, false)?;
            let hi = kind.value(b, item, true)?;
            if lo > hi {
                return Err(format!(
                    "{name} {item:?} has an empty range: write the smaller value first, such as H({b}-{a})"
                ));
            }
            ((lo, hi), rest)
        }
        None => (default_range(kind), rest),
    };
    let (lo, hi) = range;
    let span = hi - lo + 1;
    let hash = field_hash(job, kind);
    if rest.is_empty() {
        return Ok((lo + (hash % u64::from(span)) as u32).to_string());
    }
    let step_text = rest.strip_prefix('/').ok_or_else(malformed)?;
    let step = match step_text.parse::<u32>() {
        Ok(step) if (1..=span).contains(&step) && step_text.bytes().all(|b| b.is_ascii_digit()) => {
            step
        }
        _ => {
            return Err(format!(
                "{name} step in {item:?} must be a number in 1-{span}"
            ));
        }
    };
    let first = lo + (hash % u64::from(step)) as u32;
    Ok(format!("{first}-{hi}/{step}"))
}

/// The hash of a job's name for one field: FNV-1a 64 over the name's bytes, a 0xFF
/// separator (never in a name) and the field's name, then the murmur3 64-bit finaliser
/// so that the low bits of similar names (`job-1`, `job-2`) differ well.
///
/// Pinned by tests: changing it moves every `H` job of every deployment.
pub(super) fn field_hash(job: &str, kind: FieldKind) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    let bytes = job
        .bytes()
        .chain(std::iter::once(0xff))
        .chain(kind.name().bytes());
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(PRIME);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}
