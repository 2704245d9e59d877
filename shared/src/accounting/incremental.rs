//! The leader's continuous reconciliation, incrementally: the same report as
//! [`super::reconcile`] over a trailing window that moves forward check after check, at the
//! cost of what changed since the last check rather than of the whole window.
//!
//! Owns: a copy of the run history's end, read once in full and then followed with
//! [`RunLog::tail`](crate::runlog::RunLog::tail) (only the runs appended since the last
//! check are read), kept bounded: the newest [`Window::max_runs`] runs' start times (what a
//! full read would list, so the oldest of them bounds the range as it does there) and, by
//! key, the runs of the occurrences scheduled from the window's start on (a key is dropped
//! once it leaves the window); and, per file job in force now, its next instant after the
//! last check's end (so that only the jobs with an occurrence entering the window are
//! walked).
//!
//! Invariant: each report equals the full one. A file job is accounted for again when an
//! occurrence of it entered the window, a run of one of its keys was appended (or fell out
//! of the newest runs), its last account had a gap or a pending occurrence, or an audit
//! entry or a pause concerns it (now or at the last check); any other job's occurrences
//! are those of its last account less the ones that left the window, each settled without
//! a gap then, and so now. Everything else is accounted for in full (from the runs kept):
//! the jobs with versions (runtime jobs) and the jobs with parents at every check, and
//! every job when the config changed, the range's start moved back, or a leadership
//! outage (a stretch no recorded term covers) falls in the range, whose catch-up policy
//! depends on the range. A store that cannot be read, a window that is not the trailing
//! one of the last check ([`Window::job`], [`Window::only_gaps`] off, the clock moved
//! back) or another cap start over from a full read.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::{Report, Scope, Sources, Window, reconcile_in};
use crate::config::Config;
use crate::control::Pause;
use crate::key::OccurrenceKey;
use crate::lease::TermRecord;
use crate::names::JobName;
use crate::runlog::{Run, TailFrom};
use crate::schedule::{Alike, Schedule};
use crate::store::StoreError;

/// How many runs one read of the history's end asks for.
const PAGE: usize = 1000;

/// The reconciliation of a trailing window, check after check (see the module's doc).
#[derive(Default)]
pub struct Incremental {
    /// Where the next read of the history starts; `None`: from the start (a full read).
    cursor: Option<TailFrom>,
    /// The cap the runs were kept under.
    max_runs: usize,
    /// The newest runs read, in the order they were appended (at most `max_runs`).
    appended: VecDeque<Appended>,
    /// The runs of the keys scheduled from the window's start on, in the order appended.
    runs: HashMap<String, Vec<Run>>,
    /// What the last check accounted from.
    basis: Option<Basis>,
    /// The file jobs in force (positions in the config's jobs) by their next instant
    /// after the last check's end.
    due: BTreeMap<DateTime<Utc>, Vec<u32>>,
    /// Those positions, sorted by job name once a check first needs it (`by_name_sorted`):
    /// sorting a million names costs about a second, and an idle leader never needs it.
    by_name: Vec<u32>,
    /// Whether `by_name` is sorted yet.
    by_name_sorted: bool,
    /// The file jobs whose account may change with the time alone (positions).
    unsettled: Vec<usize>,
    /// Whether the last check accounted for every job.
    last_full: bool,
}

/// One run of the history's end.
struct Appended {
    started_at: DateTime<Utc>,
    /// Its key, when its runs are kept by key.
    kept: Option<OccurrenceKey>,
}

/// What a check accounted from.
struct Basis {
    config: Arc<Config>,
    /// The window's start.
    window_from: DateTime<Utc>,
    /// The range's start (the window's, or the oldest run read).
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    terms: Terms,
}

/// What the leadership terms say of a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Terms {
    /// None recorded: nothing is judged by a catch-up policy.
    None,
    /// One term covers the whole range: no occurrence of it was due while no one led.
    Covered,
    /// Some stretch of the range had no recorded leader.
    Outage,
}

impl Terms {
    fn of(terms: &[TermRecord], from: DateTime<Utc>, to: DateTime<Utc>) -> Self {
        if terms.is_empty() {
            Self::None
        } else if terms.iter().any(|t| t.start <= from && to <= t.alive) {
            Self::Covered
        } else {
            Self::Outage
        }
    }
}

impl Incremental {
    /// A reconciliation that starts with a full read.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets everything: the next check reads the history in full (a new term, a store
    /// that failed).
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// How many runs are kept by key (for tests and the bench).
    pub fn kept(&self) -> usize {
        self.runs.values().map(Vec::len).sum()
    }

    /// Whether the last check accounted for every job (a first check, a reload, an
    /// outage in the range) rather than only for those that changed.
    pub fn last_full(&self) -> bool {
        self.last_full
    }

    /// The report [`super::reconcile`] would make of `window` (without dead letters), from
    /// the runs appended since the last check and the jobs whose account may have changed.
    ///
    /// # Errors
    /// When a store cannot be read; the next check then starts over from a full read.
    pub async fn check(
        &mut self,
        sources: Sources<'_>,
        config: &Arc<Config>,
        paused_now: &BTreeMap<JobName, Pause>,
        window: &Window,
    ) -> Result<Report, StoreError> {
        let checked = self.check_in(sources, config, paused_now, window).await;
        if checked.is_err() {
            self.reset();
        }
        checked
    }

    async fn check_in(
        &mut self,
        sources: Sources<'_>,
        config: &Arc<Config>,
        paused_now: &BTreeMap<JobName, Pause>,
        window: &Window,
    ) -> Result<Report, StoreError> {
        let trailing = window.job.is_none() && window.only_gaps;
        let restart = !trailing
            || self.max_runs != window.max_runs
            || self
                .basis
                .as_ref()
                .is_some_and(|b| window.from < b.window_from || window.to < b.to);
        if restart {
            self.reset();
        }
        if self.cursor.is_none() {
            self.max_runs = window.max_runs.max(1);
        }
        let mut touched: Vec<JobName> = Vec::new();
        let mut cursor = self
            .cursor
            .take()
            .unwrap_or(TailFrom::Since(DateTime::UNIX_EPOCH));
        loop {
            let tail = sources.runlog.tail(&cursor, PAGE).await?;
            let read = tail.runs.len();
            for run in tail.runs {
                self.append(run, window.from, &mut touched);
            }
            cursor = tail.next;
            if read < PAGE {
                break;
            }
        }
        self.cursor = Some(cursor);
        self.runs.retain(|_, runs| {
            runs.first()
                .and_then(|r| r.key.scheduled_at())
                .is_some_and(|at| at >= window.from)
        });
        let runs_from = (self.appended.len() >= self.max_runs)
            .then(|| self.appended.iter().map(|a| a.started_at).min())
            .flatten();
        let from = runs_from.map_or(window.from, |oldest| oldest.max(window.from));
        let terms = Terms::of(sources.terms, from, window.to);
        let same_config = self
            .basis
            .as_ref()
            .is_some_and(|b| Arc::ptr_eq(&b.config, config));
        if !same_config {
            self.index(config, window.to);
        }
        let full = !trailing
            || !same_config
            || terms == Terms::Outage
            || self
                .basis
                .as_ref()
                .is_none_or(|b| from < b.from || terms != b.terms);
        // The file jobs whose account may have changed: an occurrence entered the window,
        // a run of one of their keys came or went, or their last account was unsettled.
        let mut dirty: Vec<usize> = std::mem::take(&mut self.unsettled);
        let mut shared = Alike::new();
        while let Some(entry) = self.due.first_entry() {
            if *entry.key() > window.to {
                break;
            }
            for i in entry.remove() {
                dirty.push(i as usize);
                if let Some(next) =
                    next_after(&mut shared, &config.jobs[i as usize].schedule, window.to)
                {
                    self.due.entry(next).or_default().push(i);
                }
            }
        }
        if !full && !touched.is_empty() {
            if !self.by_name_sorted {
                self.by_name.sort_unstable_by(|a, b| {
                    config.jobs[*a as usize]
                        .name
                        .cmp(&config.jobs[*b as usize].name)
                });
                self.by_name_sorted = true;
            }
            for name in &touched {
                if let Ok(at) = self
                    .by_name
                    .binary_search_by(|i| config.jobs[*i as usize].name.as_str().cmp(name.as_str()))
                {
                    dirty.push(self.by_name[at] as usize);
                }
            }
        }
        if !full {
            dirty.sort_unstable();
            dirty.dedup();
        }
        let scope = Scope {
            runs: &self.runs,
            runs_from,
            dirty: (!full).then_some(dirty.as_slice()),
        };
        let found =
            reconcile_in(sources, config, paused_now, &HashMap::new(), window, &scope).await?;
        self.unsettled = found.unsettled;
        self.last_full = full;
        self.basis = Some(Basis {
            config: config.clone(),
            window_from: window.from,
            from,
            to: window.to,
            terms,
        });
        Ok(found.report)
    }

    /// Keeps `run`, appended after the runs kept: its start time among the newest, and the
    /// run by key when its key is scheduled from `window_from` on; the job of each key
    /// whose runs changed goes to `touched`.
    fn append(&mut self, run: Run, window_from: DateTime<Utc>, touched: &mut Vec<JobName>) {
        let keep = run.key.scheduled_at().is_some_and(|at| at >= window_from);
        self.appended.push_back(Appended {
            started_at: run.started_at,
            kept: keep.then(|| run.key.clone()),
        });
        if keep {
            touched.push(run.job.clone());
            // Only what the account reads of a run is kept.
            let run = Run {
                consumer: String::new(),
                error: None,
                ..run
            };
            self.runs
                .entry(run.key.as_str().to_owned())
                .or_default()
                .push(run);
        }
        while self.appended.len() > self.max_runs {
            let Some(gone) = self.appended.pop_front() else {
                break;
            };
            // The oldest run of its key is the one that goes: both are in append order.
            if let Some(key) = gone.kept
                && let Some(runs) = self.runs.get_mut(key.as_str())
            {
                runs.remove(0);
                if runs.is_empty() {
                    self.runs.remove(key.as_str());
                }
                touched.push(key.job().clone());
            }
        }
    }

    /// Indexes the file jobs in force of `config` by their next instant after `to` (by
    /// name when a check first needs it).
    fn index(&mut self, config: &Config, to: DateTime<Utc>) {
        self.due.clear();
        let mut shared = Alike::new();
        let mut positions = Vec::new();
        for (i, job) in config.jobs.iter().enumerate() {
            if config.runtime_since.contains_key(&job.name) || job.is_after() {
                continue;
            }
            let Ok(i) = u32::try_from(i) else {
                break;
            };
            positions.push(i);
            if let Some(next) = next_after(&mut shared, &job.schedule, to) {
                self.due.entry(next).or_default().push(i);
            }
        }
        self.by_name = positions;
        self.by_name_sorted = false;
    }
}

/// Each schedule's next instant after one `to`, worked out once for a schedule several
/// jobs share.
fn next_after<'c>(
    alike: &mut Alike<&'c Schedule, Option<DateTime<Utc>>>,
    schedule: &'c Schedule,
    to: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    alike.get(schedule, || schedule, || schedule.next_after(to))
}
