//! The planner: which occurrences are due, pure functions of a schedule, a cursor and an
//! instant. No clock, no I/O, so every rule here is unit-tested with fixed instants.
//!
//! Owns: deterministic jitter, deadlines and building the wire message. Catch-up on
//! taking over (the `catchup` policies) is `cronq_shared::schedule::catchup`'s, re-exported
//! here: the accounting judges by the same rule. Leaves to the caller: the clock,
//! publishing and persisting the cursor. Invariant: everything is derived from scheduled instants and keys, never
//! from when a producer started, so every producer plans the same occurrences (G4).

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
#[cfg(test)]
use cronq_shared::config::Catchup;
use cronq_shared::config::Job;
use cronq_shared::key::OccurrenceKey;
use cronq_shared::message::{Occurrence, Trigger};
use cronq_shared::schedule::Schedule;

pub use cronq_shared::schedule::catchup::{Takeover, take_over};

/// Converts a config duration to a chrono delta, saturating far in the future.
fn delta(d: Duration) -> TimeDelta {
    TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX)
}

/// The next chunk of a backfill over `from <= t <= to`, after `done_through`: at most
/// `limit` instants, and whether the backfill is then complete.
pub fn backfill(
    schedule: &Schedule,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    done_through: Option<DateTime<Utc>>,
    limit: usize,
) -> (Vec<DateTime<Utc>>, bool) {
    let start = match done_through {
        Some(done) => done,
        None => from - TimeDelta::nanoseconds(1),
    };
    let mut chunk: Vec<_> = schedule
        .iter_after(start)
        .take_while(|t| *t <= to)
        .filter(|t| *t >= from)
        .take(limit + 1)
        .collect();
    let finished = chunk.len() <= limit;
    chunk.truncate(limit);
    (chunk, finished)
}

/// FNV-1a, 64 bits: a stable hash (unlike `DefaultHasher`, fixed across Rust versions and
/// processes), so every producer derives the same jitter from the same key.
fn fnv1a(text: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    text.bytes()
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

/// The publish delay of `key`, in `[0, max)`, derived from the key alone, so every
/// producer, retry and replay computes the same delay.
pub fn jitter(key: &OccurrenceKey, max: Duration) -> Duration {
    let nanos = max.as_nanos();
    if nanos == 0 {
        return Duration::ZERO;
    }
    // Scale the 64-bit hash onto [0, max): (h * max) >> 64 is < max and spreads evenly.
    let scaled = (u128::from(fnv1a(key.as_str())) * nanos) >> 64;
    Duration::from_nanos(u64::try_from(scaled).unwrap_or(u64::MAX))
}

/// When the occurrence of `job` scheduled at `at` is published: `at` plus its jitter.
pub fn fire_at(job: &Job, at: DateTime<Utc>) -> DateTime<Utc> {
    if job.jitter.is_zero() {
        return at;
    }
    let key = OccurrenceKey::scheduled(job.name.clone(), at);
    at + delta(jitter(&key, job.jitter))
}

/// The start deadline of an occurrence whose deadline counts from `base`.
pub fn deadline(job: &Job, base: DateTime<Utc>) -> Option<DateTime<Utc>> {
    job.deadline.map(|d| base + delta(d))
}

/// The wire message for the occurrence of `job` scheduled at `at`, published at `now` by
/// the leader of `epoch`. A backfilled occurrence's deadline counts from `now` (its
/// scheduled time is usually long past); every other from `at`.
pub fn occurrence(
    job: &Job,
    at: DateTime<Utc>,
    trigger: Trigger,
    epoch: u64,
    now: DateTime<Utc>,
) -> Occurrence {
    let base = if trigger == Trigger::Backfill {
        now
    } else {
        at
    };
    Occurrence {
        key: OccurrenceKey::scheduled(job.name.clone(), at),
        job: job.name.clone(),
        scheduled_at: at,
        scheduled_local: at.with_timezone(&job.timezone).fixed_offset(),
        timezone: job.timezone.name().to_owned(),
        trigger,
        attempt: 1,
        payload: job.payload.clone(),
        epoch,
        published_at: now,
        deadline: deadline(job, base),
        last_error: None,
        traceparent: None,
    }
}

/// The wire message of a manual trigger under `key`, scheduled at `requested_at` (the
/// request's time, or its `--at` instant); its deadline counts from `now`, when it is
/// published.
pub fn manual(
    job: &Job,
    key: OccurrenceKey,
    requested_at: DateTime<Utc>,
    payload: Option<serde_json::Value>,
    epoch: u64,
    now: DateTime<Utc>,
) -> Occurrence {
    Occurrence {
        key,
        job: job.name.clone(),
        scheduled_at: requested_at,
        scheduled_local: requested_at.with_timezone(&job.timezone).fixed_offset(),
        timezone: job.timezone.name().to_owned(),
        trigger: Trigger::Manual,
        attempt: 1,
        payload: payload.unwrap_or_else(|| job.payload.clone()),
        epoch,
        published_at: now,
        deadline: deadline(job, now),
        last_error: None,
        traceparent: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cronq_shared::names::JobName;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn every(secs: u64) -> Schedule {
        Schedule::parse(&format!("@every {secs}s"), chrono_tz::UTC).unwrap()
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn no_cursor_starts_now_and_catches_up_nothing() {
        let now = t("2026-11-30T10:00:30.500Z");
        let plan = take_over(&every(60), Catchup::All, HOUR, Duration::ZERO, None, now);
        assert_eq!(plan.cursor, now);
        assert!(plan.catchup.is_empty());
        assert_eq!(plan.next, Some(t("2026-11-30T10:01:00Z")));
        assert!(plan.moved);
    }

    #[test]
    fn catchup_all_publishes_every_missed_occurrence() {
        let now = t("2026-11-30T10:05:30Z");
        let cursor = Some(t("2026-11-30T10:02:00Z"));
        let plan = take_over(&every(60), Catchup::All, HOUR, Duration::ZERO, cursor, now);
        assert_eq!(
            plan.catchup,
            vec![
                t("2026-11-30T10:03:00Z"),
                t("2026-11-30T10:04:00Z"),
                t("2026-11-30T10:05:00Z")
            ]
        );
        assert_eq!(plan.cursor, now);
        assert_eq!(plan.next, Some(t("2026-11-30T10:06:00Z")));
    }

    #[test]
    fn catchup_latest_publishes_only_the_most_recent() {
        let now = t("2026-11-30T10:05:30Z");
        let cursor = Some(t("2026-11-30T10:02:00Z"));
        let plan = take_over(
            &every(60),
            Catchup::Latest,
            HOUR,
            Duration::ZERO,
            cursor,
            now,
        );
        assert_eq!(plan.catchup, vec![t("2026-11-30T10:05:00Z")]);
        assert_eq!(plan.next, Some(t("2026-11-30T10:06:00Z")));
    }

    #[test]
    fn catchup_none_publishes_nothing_but_moves_the_cursor() {
        let now = t("2026-11-30T10:05:30Z");
        let cursor = Some(t("2026-11-30T10:02:00Z"));
        let plan = take_over(&every(60), Catchup::None, HOUR, Duration::ZERO, cursor, now);
        assert!(plan.catchup.is_empty());
        assert_eq!(plan.cursor, now);
        assert!(plan.moved);
        assert_eq!(plan.next, Some(t("2026-11-30T10:06:00Z")));
    }

    #[test]
    fn catchup_stays_inside_the_window() {
        let now = t("2026-11-30T10:05:30Z");
        let cursor = Some(t("2026-11-29T00:00:00Z"));
        let window = Duration::from_secs(150);
        let all = take_over(
            &every(60),
            Catchup::All,
            window,
            Duration::ZERO,
            cursor,
            now,
        );
        // now - 150s = 10:03:00, inclusive.
        assert_eq!(
            all.catchup,
            vec![
                t("2026-11-30T10:03:00Z"),
                t("2026-11-30T10:04:00Z"),
                t("2026-11-30T10:05:00Z")
            ]
        );
        let latest = take_over(
            &every(60),
            Catchup::Latest,
            window,
            Duration::ZERO,
            cursor,
            now,
        );
        assert_eq!(latest.catchup, vec![t("2026-11-30T10:05:00Z")]);
        let tiny = take_over(
            &every(3600),
            Catchup::Latest,
            Duration::from_secs(60),
            Duration::ZERO,
            cursor,
            now,
        );
        assert!(tiny.catchup.is_empty(), "10:00 is outside a 1m window");
        assert_eq!(tiny.cursor, now);
    }

    #[test]
    fn an_up_to_date_cursor_catches_up_nothing() {
        let now = t("2026-11-30T10:05:30Z");
        let cursor = Some(t("2026-11-30T10:05:00Z"));
        let plan = take_over(&every(60), Catchup::All, HOUR, Duration::ZERO, cursor, now);
        assert!(plan.catchup.is_empty());
        assert_eq!(plan.next, Some(t("2026-11-30T10:06:00Z")));
        let same = take_over(
            &every(60),
            Catchup::All,
            HOUR,
            Duration::ZERO,
            Some(now),
            now,
        );
        assert!(same.catchup.is_empty());
        assert!(!same.moved);
        assert_eq!(same.cursor, now);
    }

    #[test]
    fn occurrences_still_inside_their_jitter_are_scheduled_not_caught_up() {
        let now = t("2026-11-30T10:05:30Z");
        let cursor = Some(t("2026-11-30T10:03:00Z"));
        let plan = take_over(
            &every(60),
            Catchup::All,
            HOUR,
            Duration::from_secs(45),
            cursor,
            now,
        );
        assert_eq!(plan.catchup, vec![t("2026-11-30T10:04:00Z")]);
        assert_eq!(plan.next, Some(t("2026-11-30T10:05:00Z")));
    }

    #[test]
    fn backfill_is_inclusive_and_chunked() {
        let s = every(60);
        let (from, to) = (t("2026-11-30T10:00:00Z"), t("2026-11-30T10:04:00Z"));
        let (first, done) = backfill(&s, from, to, None, 3);
        assert_eq!(first.len(), 3);
        assert_eq!(first[0], from);
        assert!(!done);
        let (rest, done) = backfill(&s, from, to, Some(first[2]), 3);
        assert_eq!(rest, vec![t("2026-11-30T10:03:00Z"), to]);
        assert!(done);
        let (exact, done) = backfill(&s, from, to, None, 5);
        assert_eq!(exact.len(), 5);
        assert!(done);
    }

    #[test]
    fn jitter_is_deterministic_and_in_range() {
        let job = JobName::new("nightly-report").unwrap();
        let max = Duration::from_secs(30);
        let mut seen = std::collections::HashSet::new();
        for i in 0..500 {
            let key = OccurrenceKey::scheduled(
                job.clone(),
                t("2026-11-30T00:00:00Z") + TimeDelta::minutes(i),
            );
            let j = jitter(&key, max);
            assert!(j < max, "{j:?}");
            assert_eq!(j, jitter(&key.to_string().parse().unwrap(), max));
            seen.insert(j.as_secs());
        }
        assert!(seen.len() > 20, "jitter should spread: {seen:?}");
        let key = OccurrenceKey::scheduled(job, t("2026-11-30T00:00:00Z"));
        assert_eq!(jitter(&key, Duration::ZERO), Duration::ZERO);
        // Pinned value: a change here changes every deployment's publish times.
        assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
    }
}
