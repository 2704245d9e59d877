//! Catch-up on taking over: what a new leader publishes of the occurrences missed while
//! no producer led. A pure rule of a schedule, a cursor and an instant, used by the
//! producer when it takes the lead (`producer/src/planner.rs`, `producer/src/term.rs`) and
//! by the accounting (`crate::accounting`), which judges an occurrence due while no
//! producer led by the same rule, so the two cannot disagree.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::Schedule;
use crate::config::Catchup;

/// What a new leader does with one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Takeover {
    /// The cursor to persist once `catchup` is confirmed published.
    pub cursor: DateTime<Utc>,
    /// Missed occurrences to publish now (trigger `Catchup`), oldest first.
    pub catchup: Vec<DateTime<Utc>>,
    /// The next occurrence to schedule normally, if the schedule has one.
    pub next: Option<DateTime<Utc>>,
    /// The cursor moved (write it even when nothing is published).
    pub moved: bool,
}

/// Converts a config duration to a chrono delta, saturating far in the future.
fn delta(d: Duration) -> TimeDelta {
    TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX)
}

/// Plans one job for a producer that just became leader at `now`.
///
/// - No cursor (a job no leader has seen): start from `now`; nothing is caught up.
/// - Occurrences in `(cursor, now - jitter]` were missed (with jitter, a later one may
///   still be waiting for its delay and is scheduled normally). Of those inside
///   `catchup_window` (scheduled at or after `now - window`), `all` publishes each,
///   `latest` the most recent, `none` none. The cursor then moves to `now - jitter`.
/// - The next occurrence is the first after the new cursor.
pub fn take_over(
    schedule: &Schedule,
    policy: Catchup,
    window: Duration,
    jitter: Duration,
    cursor: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Takeover {
    let Some(cursor) = cursor else {
        return Takeover {
            cursor: now,
            catchup: Vec::new(),
            next: schedule.next_after(now),
            moved: true,
        };
    };
    let upper = now - delta(jitter);
    if upper <= cursor {
        return Takeover {
            cursor,
            catchup: Vec::new(),
            next: schedule.next_after(cursor),
            moved: false,
        };
    }
    let lower = now
        .checked_sub_signed(delta(window))
        .unwrap_or(DateTime::<Utc>::MIN_UTC);
    let catchup = match policy {
        Catchup::None => Vec::new(),
        Catchup::All | Catchup::Latest => {
            // Start just before the window, so an ancient cursor costs nothing.
            let start = if cursor >= lower {
                cursor
            } else {
                lower - TimeDelta::nanoseconds(1)
            };
            let missed = schedule
                .iter_after(start)
                .take_while(|t| *t <= upper)
                .filter(|t| *t >= lower && *t > cursor);
            if policy == Catchup::All {
                missed.collect()
            } else {
                missed.last().into_iter().collect()
            }
        }
    };
    Takeover {
        cursor: upper,
        catchup,
        next: schedule.next_after(upper),
        moved: true,
    }
}
