//! One-shot schedules: a job's `at = T` fires once, at the instant `T`, under its normal
//! key `JOB@<T in UTC>`.
//!
//! Owns: building the [`Schedule`] of a one-shot and the text it shows as. Leaves to the
//! config (`crate::config`): reading `at` (an RFC 3339 instant, or a local date-time in the
//! job's zone) and warning when it is past. Invariant: a one-shot is an ordinary
//! [`Schedule`] with exactly one fire time, so the planner, catch-up, `cronq next`,
//! accounting and alerts treat it as any other; a past `at` is not an error (it simply
//! has no fire after now), and its fire is on a whole second only if `at` is.

use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};
use chrono_tz::Tz;

use super::kind::Kind;
use super::{Bounds, Parsed, Schedule};

/// The prefix of a one-shot's schedule text: `at 2026-12-24T10:00:00+01:00`.
const ONCE_PREFIX: &str = "at ";

impl Schedule {
    /// The schedule of a one-shot job: it fires once, at `at`; `tz` is the job's zone,
    /// in which its text shows the instant.
    ///
    /// ```
    /// use chrono::{DateTime, Utc};
    /// use cronq_shared::schedule::Schedule;
    ///
    /// let at: DateTime<Utc> = "2026-12-24T09:00:00Z".parse().unwrap();
    /// let s = Schedule::once(at, chrono_tz::Europe::Berlin);
    /// assert_eq!(s.as_str(), "at 2026-12-24T10:00:00+01:00");
    /// assert_eq!(s.next_after(at - chrono::Duration::seconds(1)), Some(at));
    /// assert_eq!(s.next_after(at), None);
    /// assert_eq!(s.once_at(), Some(at));
    /// ```
    pub fn once(at: DateTime<Utc>, tz: Tz) -> Self {
        let text = format!(
            "{ONCE_PREFIX}{}",
            at.with_timezone(&tz)
                .to_rfc3339_opts(SecondsFormat::AutoSi, false)
        );
        Self {
            inner: Arc::new(Parsed {
                text,
                resolved: None,
                bounds: Bounds::default(),
                tz,
                kind: Kind::Once(at),
                controls: None,
            }),
        }
    }

    /// The instant of a one-shot schedule; `None` for every other.
    pub fn once_at(&self) -> Option<DateTime<Utc>> {
        match &self.inner.kind {
            Kind::Once(at) => Some(*at),
            _ => None,
        }
    }
}
