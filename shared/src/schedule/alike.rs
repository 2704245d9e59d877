//! Work done once for the jobs that share a parsed schedule: a large config's jobs share a
//! few thousand schedules ([`super::Interner`]), and working out an instant of one costs
//! about a microsecond, so what depends only on the schedule (and on inputs the jobs have
//! alike) is worked out for the first job and reused for the others.
//!
//! Invariant: [`Alike::get`] returns what its work returns; a result is kept only for a
//! shared schedule (a schedule of its own is asked for once), under a key that holds
//! every input the work reads.

use std::hash::Hash;

use super::Schedule;

/// Results of work on shared schedules, by key (see the module's doc).
pub struct Alike<K, V> {
    kept: foldhash::HashMap<K, V>,
    /// At most this many results are kept.
    cap: usize,
}

impl<K: Hash + Eq, V: Clone> Alike<K, V> {
    /// Keeps every result.
    pub fn new() -> Self {
        Self::bounded(usize::MAX)
    }

    /// Keeps at most `cap` results: for keys that may be as many as the jobs (then the
    /// others are worked out each time, rather than held in a map as large as the config).
    pub fn bounded(cap: usize) -> Self {
        Self {
            kept: foldhash::HashMap::default(),
            cap,
        }
    }

    /// `work`'s result for a job of `schedule`: kept under the key `key` makes (asked for
    /// only when the schedule is shared), which holds every input `work` reads.
    pub fn get(
        &mut self,
        schedule: &Schedule,
        key: impl FnOnce() -> K,
        work: impl FnOnce() -> V,
    ) -> V {
        if !schedule.is_shared() {
            return work();
        }
        let key = key();
        if let Some(known) = self.kept.get(&key) {
            return known.clone();
        }
        let result = work();
        if self.kept.len() < self.cap {
            self.kept.insert(key, result.clone());
        }
        result
    }
}

impl<K: Hash + Eq, V: Clone> Default for Alike<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};
    use chrono_tz::Tz;

    #[test]
    fn a_shared_schedule_is_worked_out_once_per_key_and_a_lone_one_each_time() {
        let now: DateTime<Utc> = "2026-01-15T00:00:00Z".parse().unwrap();
        let mut interner = super::super::Interner::new(now);
        let shared = interner.parse("0 9 * * MON", Tz::UTC).unwrap();
        let _other_job = interner.parse("0 9 * * MON", Tz::UTC).unwrap();
        let lone = Schedule::parse_at("0 10 * * MON", Tz::UTC, now).unwrap();
        assert!(shared.is_shared() && !lone.is_shared());
        let mut alike = Alike::bounded(2);
        let mut worked = 0;
        let mut ask = |schedule: &Schedule, key: u32| {
            alike.get(
                schedule,
                || key,
                || {
                    worked += 1;
                    key * 10
                },
            )
        };
        assert_eq!(ask(&shared, 1), 10);
        assert_eq!(ask(&shared, 1), 10);
        assert_eq!(ask(&shared, 2), 20);
        assert_eq!(ask(&lone, 1), 10, "a lone schedule's key is not looked up");
        assert_eq!(ask(&shared, 3), 30);
        assert_eq!(ask(&shared, 3), 30, "over the cap: worked out again");
        assert_eq!(worked, 5);
    }
}
