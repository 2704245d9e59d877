//! One timer for all jobs: a min-heap of (fire instant, job), so the scheduler sleeps until
//! the earliest fire and never polls. Idle cost is one sleeping task whatever the number of
//! jobs.
//!
//! Entries are never removed in place: a job that changed or left the config gets a new
//! generation, and [`Timer::pop_due`] hands stale entries back for the caller to drop
//! (lazy deletion keeps every operation O(log n)).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use chrono::{DateTime, Utc};
use cronq_shared::names::JobName;

/// One scheduled fire.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    /// When to publish (scheduled instant plus jitter). First field: heap order.
    pub fire: DateTime<Utc>,
    /// The nominal scheduled instant (the key's).
    pub at: DateTime<Utc>,
    /// Which job.
    pub job: JobName,
    /// The job's generation when this entry was pushed.
    pub generation: u64,
}

/// The min-heap of every job's next fire.
#[derive(Debug, Default)]
pub struct Timer {
    heap: BinaryHeap<Reverse<Entry>>,
}

impl Timer {
    /// Builds the heap from every job's first entry in O(n).
    pub fn from_entries(entries: Vec<Entry>) -> Self {
        Self {
            heap: entries.into_iter().map(Reverse).collect(),
        }
    }

    /// Schedules one fire.
    pub fn push(&mut self, entry: Entry) {
        self.heap.push(Reverse(entry));
    }

    /// The earliest fire instant, if any.
    pub fn next_fire(&self) -> Option<DateTime<Utc>> {
        self.heap.peek().map(|Reverse(e)| e.fire)
    }

    /// Removes and returns every entry due at `now`, earliest first.
    pub fn pop_due(&mut self, now: DateTime<Utc>) -> Vec<Entry> {
        let mut due = Vec::new();
        while self.heap.peek().is_some_and(|Reverse(e)| e.fire <= now) {
            if let Some(Reverse(e)) = self.heap.pop() {
                due.push(e);
            }
        }
        due
    }

    /// How many entries (including stale ones) are queued.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(fire: &str, job: &str) -> Entry {
        let fire: DateTime<Utc> = fire.parse().unwrap();
        Entry {
            fire,
            at: fire,
            job: JobName::new(job).unwrap(),
            generation: 0,
        }
    }

    #[test]
    fn pops_due_entries_in_fire_order() {
        let mut timer = Timer::from_entries(vec![
            entry("2026-11-30T10:00:03Z", "c"),
            entry("2026-11-30T10:00:01Z", "a"),
            entry("2026-11-30T10:00:02Z", "b"),
        ]);
        assert_eq!(
            timer.next_fire(),
            Some("2026-11-30T10:00:01Z".parse().unwrap())
        );
        let due = timer.pop_due("2026-11-30T10:00:02Z".parse().unwrap());
        let jobs: Vec<_> = due.iter().map(|e| e.job.as_str()).collect();
        assert_eq!(jobs, ["a", "b"]);
        assert_eq!(timer.len(), 1);
        timer.push(entry("2026-11-30T10:00:00Z", "d"));
        assert_eq!(
            timer.next_fire(),
            Some("2026-11-30T10:00:00Z".parse().unwrap())
        );
    }

    #[test]
    fn a_million_jobs_build_quickly() {
        let base: DateTime<Utc> = "2026-11-30T10:00:00Z".parse().unwrap();
        let job = JobName::new("j").unwrap();
        let entries = (0..1_000_000i64)
            .map(|i| Entry {
                fire: base + chrono::TimeDelta::seconds(i % 86_400),
                at: base,
                job: job.clone(),
                generation: 0,
            })
            .collect();
        let timer = Timer::from_entries(entries);
        assert_eq!(timer.len(), 1_000_000);
        assert_eq!(timer.next_fire(), Some(base));
    }
}
