//! Wall-clock arithmetic in an IANA zone: mapping a local time to the instant a pinned
//! schedule fires at, and finding the zone's offset changes.
//!
//! Invariant: [`pinned_instant`] is monotone non-decreasing in the local time, so a walk
//! through local times yields instants in order (equal ones collapse).

use chrono::{DateTime, LocalResult, NaiveDateTime, Offset as _, TimeZone as _, Utc};
use chrono_tz::Tz;

/// Offsets in real zones stay within ±15 h; 18 h brackets every local time.
const MAX_OFFSET_SECS: i64 = 18 * 3600;

/// The instant a pinned schedule fires at for local time `local` (cronie's rule): the
/// time itself, the first of two passes, or for a time inside a spring-forward gap the
/// first instant after the gap (the transition instant).
pub(crate) fn pinned_instant(tz: Tz, local: NaiveDateTime) -> DateTime<Utc> {
    match tz.from_local_datetime(&local) {
        LocalResult::Single(t) => t.with_timezone(&Utc),
        LocalResult::Ambiguous(a, b) => a.min(b).with_timezone(&Utc),
        LocalResult::None => first_instant_after(tz, local),
    }
}

/// The UTC offset of `tz` at instant `t`, in seconds.
pub(crate) fn offset_secs(tz: Tz, t: i64) -> i64 {
    DateTime::from_timestamp(t, 0).map_or(0, |t| {
        i64::from(
            tz.offset_from_utc_datetime(&t.naive_utc())
                .fix()
                .local_minus_utc(),
        )
    })
}

/// The first instant whose local time is later than `local`.
///
/// Bisection over the instants that can show `local`: the local time goes up with the
/// instant except at a fall-back, and no real zone has a fall-back within hours of a gap.
fn first_instant_after(tz: Tz, local: NaiveDateTime) -> DateTime<Utc> {
    let naive = local.and_utc().timestamp();
    let local_at = |t: i64| t + offset_secs(tz, t);
    let (mut lo, mut hi) = (naive - MAX_OFFSET_SECS, naive + MAX_OFFSET_SECS);
    // Invariant: local_at(lo) <= naive < local_at(hi).
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if local_at(mid) > naive {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    DateTime::from_timestamp(hi, 0).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// One change of a zone's UTC offset.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Transition {
    /// The first instant with the new offset (Unix seconds).
    pub(crate) at: i64,
    /// Offset before, in seconds.
    pub(crate) before: i64,
    /// Offset from `at` on, in seconds.
    pub(crate) after: i64,
}

/// The offset changes of `tz` in `(from, to]`, found by hourly probes and bisection.
/// Transitions less than an hour apart (none in real zones) could be missed.
pub(crate) fn transitions(tz: Tz, from: i64, to: i64) -> Vec<Transition> {
    const PROBE: i64 = 3600;
    let mut found = Vec::new();
    let mut t = from;
    let mut off = offset_secs(tz, t);
    while t < to {
        let next = (t + PROBE).min(to);
        let next_off = offset_secs(tz, next);
        if next_off != off {
            // First instant in (t, next] with the new offset.
            let (mut lo, mut hi) = (t, next);
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if offset_secs(tz, mid) == off {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            found.push(Transition {
                at: hi,
                before: off,
                after: next_off,
            });
        }
        t = next;
        off = next_off;
    }
    found
}
