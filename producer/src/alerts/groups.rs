//! Grouping, per sink: the first event of a job and kind is sent at once; repeats within
//! the sink's `repeat_interval` are counted, then sent as one notice with their count; a
//! resolution ends the group (the job's next success, or the condition cleared).
//!
//! Pure: time comes in as arguments, so the rules are tested without waiting.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use cronq_shared::config::AlertKind;

use super::notice::{Event, Notice, Status};

/// One job's (or subject's) open alert of one kind.
#[derive(Debug, Clone)]
struct Group {
    first_at: DateTime<Utc>,
    latest: Event,
    /// When the last notice went out.
    sent_at: DateTime<Utc>,
    /// Events since then.
    pending: u64,
    /// Events in all.
    total: u64,
}

/// The open groups of one sink.
#[derive(Debug)]
pub struct Groups {
    repeat: TimeDelta,
    dashboard: Option<String>,
    open: HashMap<(AlertKind, String), Group>,
}

impl Groups {
    /// Groups repeating at most once per `repeat`, linking to `dashboard`.
    pub fn new(repeat: Duration, dashboard: Option<String>) -> Self {
        Self {
            repeat: TimeDelta::from_std(repeat).unwrap_or(TimeDelta::MAX),
            dashboard,
            open: HashMap::new(),
        }
    }

    /// Takes `event` in at `now`: the notice to send now, if any.
    pub fn offer(&mut self, event: &Event, now: DateTime<Utc>) -> Option<Notice> {
        let key = event.group();
        if let Some(group) = self.open.get_mut(&key) {
            group.latest = event.clone();
            group.pending += 1;
            group.total += 1;
            return self.due_one(&key, now);
        }
        let group = Group {
            first_at: event.at,
            latest: event.clone(),
            sent_at: now,
            pending: 0,
            total: 1,
        };
        let notice = self.notice(&group, Status::Firing, 1);
        self.open.insert(key, group);
        Some(notice)
    }

    /// The repeats due at `now`: one notice per group with events counted since its last
    /// notice a `repeat_interval` or more ago.
    pub fn due(&mut self, now: DateTime<Utc>) -> Vec<Notice> {
        let keys: Vec<_> = self.open.keys().cloned().collect();
        keys.iter().filter_map(|k| self.due_one(k, now)).collect()
    }

    fn due_one(&mut self, key: &(AlertKind, String), now: DateTime<Utc>) -> Option<Notice> {
        let repeat = self.repeat;
        let group = self.open.get_mut(key)?;
        if group.pending == 0 || now - group.sent_at < repeat {
            return None;
        }
        let count = std::mem::take(&mut group.pending);
        group.sent_at = now;
        let group = group.clone();
        Some(self.notice(&group, Status::Firing, count))
    }

    /// Ends the open groups of `job` (every per-job kind but those in `except`) at `now`:
    /// one resolution each, saying `why`.
    pub fn resolve_job(
        &mut self,
        job: &str,
        except: &[AlertKind],
        why: &str,
        now: DateTime<Utc>,
    ) -> Vec<Notice> {
        let keys: Vec<_> = self
            .open
            .keys()
            .filter(|(kind, scope)| kind.is_per_job() && scope == job && !except.contains(kind))
            .cloned()
            .collect();
        keys.iter()
            .filter_map(|k| self.close(k, why, now))
            .collect()
    }

    /// Ends the open group of `kind` about `subject` (a fleet kind), if any.
    pub fn resolve(
        &mut self,
        kind: AlertKind,
        subject: &str,
        why: &str,
        now: DateTime<Utc>,
    ) -> Option<Notice> {
        self.close(&(kind, subject.to_owned()), why, now)
    }

    /// Whether a group of `kind` about `scope` (a job or a subject) is open.
    pub fn is_open(&self, kind: AlertKind, scope: &str) -> bool {
        self.open.contains_key(&(kind, scope.to_owned()))
    }

    fn close(
        &mut self,
        key: &(AlertKind, String),
        why: &str,
        now: DateTime<Utc>,
    ) -> Option<Notice> {
        let mut group = self.open.remove(key)?;
        group.latest.summary = why.to_owned();
        group.latest.at = now;
        let total = group.total;
        Some(self.notice(&group, Status::Resolved, total))
    }

    fn notice(&self, group: &Group, status: Status, count: u64) -> Notice {
        let e = &group.latest;
        let link = self.dashboard.as_ref().map(|base| match &e.job {
            Some(job) => format!("{base}/jobs/{job}"),
            None => format!("{base}/"),
        });
        Notice {
            status,
            kind: e.kind,
            job: e.job.clone(),
            subject: e.subject.clone(),
            summary: e.summary.clone(),
            at: e.at,
            first_at: group.first_at,
            count,
            link,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: u32) -> DateTime<Utc> {
        DateTime::from_timestamp(1_796_000_000 + i64::from(s), 0).unwrap()
    }

    fn failed(job: &str, s: u32) -> Event {
        Event {
            kind: AlertKind::DeadLettered,
            job: Some(job.to_owned()),
            subject: format!("{job}@{s}"),
            summary: format!("attempt 3 failed at {s}"),
            at: at(s),
        }
    }

    #[test]
    fn the_first_event_is_sent_at_once_repeats_are_counted_then_sent_together() {
        let mut g = Groups::new(Duration::from_secs(60), Some("https://c.example".into()));
        let first = g.offer(&failed("a", 0), at(0)).expect("the first is sent");
        assert_eq!((first.status, first.count), (Status::Firing, 1));
        assert_eq!(first.link.as_deref(), Some("https://c.example/jobs/a"));
        for s in 1..=4 {
            assert_eq!(g.offer(&failed("a", s), at(s)), None, "within the interval");
        }
        assert!(g.due(at(59)).is_empty());
        let repeat = g.due(at(60));
        assert_eq!(repeat.len(), 1);
        assert_eq!(repeat[0].count, 4, "the four since the first");
        assert_eq!(repeat[0].subject, "a@4", "the latest one's key");
        assert_eq!(repeat[0].first_at, at(0));
        assert!(g.due(at(200)).is_empty(), "nothing new, nothing sent");
        let again = g
            .offer(&failed("a", 201), at(201))
            .expect("an interval later, at once");
        assert_eq!(again.count, 1);
    }

    #[test]
    fn jobs_and_kinds_group_apart_and_a_success_resolves_the_jobs_groups_once() {
        let mut g = Groups::new(Duration::from_secs(3600), None);
        assert!(g.offer(&failed("a", 0), at(0)).is_some());
        assert!(g.offer(&failed("b", 0), at(0)).is_some(), "another job");
        let missed = Event {
            kind: AlertKind::Missed,
            ..failed("a", 1)
        };
        assert!(g.offer(&missed, at(1)).is_some(), "another kind");
        g.offer(&failed("a", 2), at(2));
        let resolved = g.resolve_job("a", &[], "succeeded", at(10));
        assert_eq!(resolved.len(), 2);
        assert!(resolved.iter().all(|n| n.status == Status::Resolved));
        let dead = resolved
            .iter()
            .find(|n| n.kind == AlertKind::DeadLettered)
            .unwrap();
        assert_eq!((dead.count, dead.summary.as_str()), (2, "succeeded"));
        assert!(
            g.resolve_job("a", &[], "succeeded", at(11)).is_empty(),
            "once"
        );
        assert!(g.is_open(AlertKind::DeadLettered, "b"), "b's stays open");
    }

    #[test]
    fn a_fleet_kind_groups_by_its_subject_and_resolves_alone() {
        let mut g = Groups::new(Duration::from_secs(3600), Some("http://d".into()));
        let queue = |q: &str| Event {
            kind: AlertKind::NoConsumer,
            job: None,
            subject: q.to_owned(),
            summary: format!("no consumer serves queue {q}"),
            at: at(0),
        };
        let n = g.offer(&queue("default"), at(0)).unwrap();
        assert_eq!(n.link.as_deref(), Some("http://d/"));
        assert!(g.offer(&queue("reports"), at(0)).is_some());
        assert!(g.resolve_job("default", &[], "x", at(1)).is_empty());
        let r = g
            .resolve(AlertKind::NoConsumer, "default", "served again", at(5))
            .unwrap();
        assert_eq!(r.status, Status::Resolved);
        assert!(g.is_open(AlertKind::NoConsumer, "reports"));
    }
}
