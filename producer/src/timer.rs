//! One timer for all jobs: a min-heap of (fire instant, job), so the scheduler sleeps until
//! the earliest fire and never polls. Idle cost is one sleeping task whatever the number of
//! jobs.
//!
//! An entry names its job by its index in the config (4 bytes, not the name), so the heap
//! costs 28 bytes per job; a reload that moves, changes or removes jobs rewrites the
//! entries at once ([`Timer::retain_mut`], O(n)), so every entry is of a current job.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use chrono::{DateTime, Utc};

/// One scheduled fire.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    /// When to publish (scheduled instant plus jitter). First field: heap order.
    pub fire: DateTime<Utc>,
    /// The nominal scheduled instant (the key's).
    pub at: DateTime<Utc>,
    /// Which job: its index in the config's jobs.
    pub job: u32,
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

    /// Removes and returns up to `limit` entries due at `now`, earliest first.
    pub fn pop_due(&mut self, now: DateTime<Utc>, limit: usize) -> Vec<Entry> {
        let mut due = Vec::new();
        while due.len() < limit && self.heap.peek().is_some_and(|Reverse(e)| e.fire <= now) {
            if let Some(Reverse(e)) = self.heap.pop() {
                due.push(e);
            }
        }
        due
    }

    /// Keeps the entries `keep` returns true for, as it changed them, in O(n).
    pub fn retain_mut(&mut self, mut keep: impl FnMut(&mut Entry) -> bool) {
        let mut entries = std::mem::take(&mut self.heap).into_vec();
        entries.retain_mut(|Reverse(e)| keep(e));
        self.heap = BinaryHeap::from(entries);
    }

    /// How many entries are queued.
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

    fn entry(fire: &str, job: u32) -> Entry {
        let fire: DateTime<Utc> = fire.parse().unwrap();
        Entry {
            fire,
            at: fire,
            job,
        }
    }

    #[test]
    fn pops_due_entries_in_fire_order() {
        let mut timer = Timer::from_entries(vec![
            entry("2026-11-30T10:00:03Z", 2),
            entry("2026-11-30T10:00:01Z", 0),
            entry("2026-11-30T10:00:02Z", 1),
        ]);
        assert_eq!(
            timer.next_fire(),
            Some("2026-11-30T10:00:01Z".parse().unwrap())
        );
        let first = timer.pop_due("2026-11-30T10:00:02Z".parse().unwrap(), 1);
        let due = timer.pop_due("2026-11-30T10:00:02Z".parse().unwrap(), usize::MAX);
        let jobs: Vec<_> = first.iter().chain(&due).map(|e| e.job).collect();
        assert_eq!(jobs, [0, 1]);
        assert_eq!(timer.len(), 1);
        timer.push(entry("2026-11-30T10:00:00Z", 3));
        assert_eq!(
            timer.next_fire(),
            Some("2026-11-30T10:00:00Z".parse().unwrap())
        );
        // Rewritten in place: 3 dropped, 2 renumbered, still in fire order.
        timer.push(entry("2026-11-30T10:00:04Z", 4));
        timer.retain_mut(|e| {
            e.job = e.job.saturating_sub(1);
            e.job != 2
        });
        let rest: Vec<_> = timer
            .pop_due("2026-11-30T10:00:09Z".parse().unwrap(), usize::MAX)
            .iter()
            .map(|e| e.job)
            .collect();
        assert_eq!(rest, [1, 3]);
        assert_eq!(std::mem::size_of::<Entry>(), 28);
    }

    #[test]
    fn a_million_jobs_build_quickly() {
        let base: DateTime<Utc> = "2026-11-30T10:00:00Z".parse().unwrap();
        let entries = (0..1_000_000u32)
            .map(|i| Entry {
                fire: base + chrono::TimeDelta::seconds(i64::from(i % 86_400)),
                at: base,
                job: i,
            })
            .collect();
        let timer = Timer::from_entries(entries);
        assert_eq!(timer.len(), 1_000_000);
        assert_eq!(timer.next_fire(), Some(base));
    }
}
