//! One term's state: what a leader knows between taking over and losing the lease: the job
//! table, the timer, the pause set, and the cursors and settlements not yet written.
//!
//! Pure bookkeeping (no I/O, no clock: `now` is passed in), so the scheduler's rules are
//! unit-tested here. Invariant: each due occurrence is handed out together with the cursor
//! it moves, so the caller can commit exactly what it had confirmed.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use cronq_shared::broker::Outgoing;
use cronq_shared::config::{Config, Job};
use cronq_shared::control::{Commit, Request, RequestKind};
use cronq_shared::lease::Term;
use cronq_shared::message::Trigger;
use cronq_shared::names::JobName;
use tracing::{debug, info, warn};

use crate::planner;
use crate::timer::{Entry, Timer};

/// A backfill publishes at most this many occurrences per control poll, so a year of
/// `@every 1s` neither floods the broker nor blocks scheduled occurrences.
pub(crate) const BACKFILL_CHUNK: usize = 1_000;

/// At most this many requests are carried out per control poll.
pub(crate) const REQUESTS_PER_POLL: usize = 100;

/// One term's state.
pub(crate) struct Leading {
    pub(crate) term: Term,
    pub(crate) config: Arc<Config>,
    /// The config's jobs by name, built when first needed (a request or a reload): a
    /// million jobs cost 4 MB here, against 66 MB for a hash map, and nothing at take-over.
    by_name: OnceLock<Vec<u32>>,
    pub(crate) timer: Timer,
    pub(crate) paused: HashSet<JobName>,
    pub(crate) uncommitted: Commit,
}

/// A job's cursor position.
pub(crate) type Cursor = (JobName, DateTime<Utc>);

/// One due occurrence: the message (none when the job is paused) and the cursor it moves.
pub(crate) type Due = (Option<Outgoing>, Cursor);

fn same_timing(a: &Job, b: &Job) -> bool {
    // Schedules are equal when their text, `H` resolution, bounds and zone are.
    a.schedule == b.schedule && a.timezone == b.timezone && a.jitter == b.jitter
}

/// How far back a reload starts a new or changed runtime job: the poll's lag, with room for
/// a slow store. A revision older than this is a job the leader did not take in then (it
/// did not resolve here, say): it starts now, as a file job does.
const RECENT: Duration = Duration::from_secs(10);

/// Where a new or changed job starts when a reload brings it in at `now`: a runtime job
/// written within [`RECENT`] (and its `catchup_window`) at its revision `since` (the leader
/// reads the job store a poll later, and the occurrences in between are the job's too;
/// the timer fires them at once); any other job at `now`.
fn start(job: &Job, since: Option<&DateTime<Utc>>, now: DateTime<Utc>) -> DateTime<Utc> {
    let back = chrono::TimeDelta::from_std(job.catchup_window.min(RECENT))
        .unwrap_or(chrono::TimeDelta::zero());
    match since {
        Some(since) if *since <= now && now - *since <= back => *since,
        _ => now,
    }
}

fn outgoing(
    job: &Job,
    at: DateTime<Utc>,
    trigger: Trigger,
    epoch: u64,
    now: DateTime<Utc>,
) -> Outgoing {
    Outgoing {
        queue: job.queue.clone(),
        occurrence: planner::occurrence(job, at, trigger, epoch, now),
        delay: Duration::ZERO,
    }
}

/// `index` as a timer entry's job (a config holds far fewer than 2^32 jobs).
fn slot(index: usize) -> u32 {
    u32::try_from(index).expect("a config has fewer than 2^32 jobs")
}

fn entry(job: &Job, index: usize, at: DateTime<Utc>) -> Entry {
    Entry {
        fire: planner::fire_at(job, at),
        at,
        job: slot(index),
    }
}

/// The indices of `config`'s jobs, sorted by name.
fn by_name(config: &Config) -> Vec<u32> {
    let mut order: Vec<u32> = (0..config.jobs.len()).map(slot).collect();
    order.sort_unstable_by(|a, b| {
        config.jobs[*a as usize]
            .name
            .cmp(&config.jobs[*b as usize].name)
    });
    order
}

/// The index of the job `name` in `config`, through its `by_name` order.
fn find(config: &Config, by_name: &[u32], name: &str) -> Option<usize> {
    by_name
        .binary_search_by(|i| config.jobs[*i as usize].name.as_str().cmp(name))
        .ok()
        .map(|at| by_name[at] as usize)
}

impl Leading {
    /// Builds the job table and the timer for a new term, with the catch-up messages to
    /// publish first and the cursors to write once they are confirmed.
    pub(crate) fn take_over(
        term: Term,
        config: Arc<Config>,
        cursors: &HashMap<JobName, DateTime<Utc>>,
        paused: HashSet<JobName>,
        now: DateTime<Utc>,
    ) -> (Self, Vec<Outgoing>, Vec<Cursor>) {
        let mut entries = Vec::with_capacity(config.jobs.len());
        let mut batch = Vec::new();
        let mut moved = Vec::new();
        for (index, job) in config.jobs.iter().enumerate() {
            if job.is_after() {
                // It never fires: its cursor marks when a leader first saw it, from which
                // it follows its parents (`crate::chains`), and never moves.
                if !cursors.contains_key(&job.name) {
                    let since = config.runtime_since.get(&job.name).copied();
                    moved.push((job.name.clone(), since.unwrap_or(now)));
                }
                continue;
            }
            let plan = planner::take_over(
                &job.schedule,
                job.catchup,
                job.catchup_window,
                job.jitter,
                // A runtime job no leader has committed a cursor for (its leader died
                // between the apply and the commit) starts at its revision, not now.
                cursors
                    .get(&job.name)
                    .or_else(|| config.runtime_since.get(&job.name))
                    .copied(),
                now,
            );
            if !paused.contains(&job.name) {
                for at in plan.catchup {
                    batch.push(outgoing(job, at, Trigger::Catchup, term.epoch, now));
                }
            }
            if plan.moved {
                moved.push((job.name.clone(), plan.cursor));
            }
            if let Some(next) = plan.next {
                entries.push(entry(job, index, next));
            }
        }
        let lead = Self {
            term,
            config,
            by_name: OnceLock::new(),
            timer: Timer::from_entries(entries),
            paused,
            uncommitted: Commit::default(),
        };
        (lead, batch, moved)
    }

    /// How many jobs the term schedules.
    pub(crate) fn jobs(&self) -> usize {
        self.config.jobs.len()
    }

    /// Pops everything due at `now` (several occurrences of one job when publishing was
    /// held up) and schedules each job's next occurrence.
    #[cfg(test)]
    pub(crate) fn take_due(&mut self, now: DateTime<Utc>) -> Vec<Due> {
        self.take_due_at_most(now, usize::MAX)
    }

    /// As [`Leading::take_due`], up to `limit` of them (fewer only when no more are due):
    /// a herd of jobs due together is taken batch by batch.
    pub(crate) fn take_due_at_most(&mut self, now: DateTime<Utc>, limit: usize) -> Vec<Due> {
        let mut due = Vec::new();
        while due.len() < limit {
            let popped = self.timer.pop_due_at_most(now, limit - due.len());
            if popped.is_empty() {
                break;
            }
            self.schedule_next(popped, now, &mut due);
        }
        due
    }

    fn schedule_next(&mut self, popped: Vec<Entry>, now: DateTime<Utc>, due: &mut Vec<Due>) {
        for e in popped {
            // Every entry is of a job of the current config: a reload remaps them.
            let index = e.job as usize;
            let job = &self.config.jobs[index];
            // Every tick the schedule produced while leading; `published` lags it by the
            // paused and the not-yet-confirmed ones.
            metrics::counter!("cronq_occurrences_expected_total", "job" => job.name.to_string())
                .increment(1);
            let message = if self.paused.contains(&job.name) {
                debug!(job = %job.name, at = %e.at, "not publishing: job is paused");
                None
            } else {
                Some(outgoing(job, e.at, Trigger::Schedule, self.term.epoch, now))
            };
            if let Some(next) = job.schedule.next_after(e.at) {
                self.timer.push(entry(job, index, next));
            }
            due.push((message, (job.name.clone(), e.at)));
        }
    }

    /// Applies a reloaded config: unchanged jobs keep their timer entry; new jobs and jobs
    /// whose timing changed start from `now` (cursor written); removed jobs are dropped.
    pub(crate) fn reload(&mut self, config: Arc<Config>, now: DateTime<Utc>) {
        let order = by_name(&config);
        let old = Arc::clone(&self.config);
        // Where each old job is in the new config, if it is there with the same timing.
        let kept: Vec<Option<u32>> = old
            .jobs
            .iter()
            .map(|job| {
                find(&config, &order, job.name.as_str())
                    .filter(|i| same_timing(job, &config.jobs[*i]))
                    .map(slot)
            })
            .collect();
        self.timer.retain_mut(|e| match kept[e.job as usize] {
            Some(i) => {
                e.job = i;
                true
            }
            None => false,
        });
        let mut scheduled = vec![false; config.jobs.len()];
        for i in kept.iter().flatten() {
            scheduled[*i as usize] = true;
        }
        let old_order = self.by_name.take().unwrap_or_else(|| by_name(&old));
        let (mut added, mut changed) = (0usize, 0usize);
        for (index, job) in config.jobs.iter().enumerate() {
            if scheduled[index] {
                continue;
            }
            if find(&old, &old_order, job.name.as_str()).is_some() {
                changed += 1;
            } else {
                added += 1;
            }
            let from = start(job, config.runtime_since.get(&job.name), now);
            if let Some(next) = job.schedule.next_after(from) {
                self.timer.push(entry(job, index, next));
            }
            self.uncommitted.cursors.push((job.name.clone(), from));
        }
        let removed = old.jobs.len() - kept.iter().flatten().count() - changed;
        info!(
            jobs = config.jobs.len(),
            added, changed, removed, "leader applied reloaded config"
        );
        self.by_name = OnceLock::from(order);
        self.config = config;
    }

    /// Turns requests into messages, and says how to settle each once they are confirmed.
    pub(crate) fn requests(
        &self,
        requests: Vec<Request>,
        now: DateTime<Utc>,
    ) -> (Vec<Outgoing>, Vec<(String, Option<Request>)>) {
        let mut batch = Vec::new();
        let mut settle = Vec::new();
        // A trigger for a later instant stays in the store, untouched, until it is due.
        let due = requests
            .into_iter()
            .filter(|r| r.not_before().is_none_or(|at| at <= now));
        for request in due.take(REQUESTS_PER_POLL) {
            let by_name = self.by_name.get_or_init(|| by_name(&self.config));
            let job =
                find(&self.config, by_name, request.job.as_str()).map(|i| &self.config.jobs[i]);
            let Some(job) = job else {
                warn!(
                    job = %request.job,
                    request = %request.id,
                    "dropping request: no such job in the config",
                );
                settle.push((request.id, None));
                continue;
            };
            match &request.kind {
                RequestKind::Trigger { key, payload, at } => {
                    info!(job = %job.name, key = %key, "publishing manual trigger");
                    batch.push(Outgoing {
                        queue: job.queue.clone(),
                        occurrence: planner::manual(
                            job,
                            key.clone(),
                            at.unwrap_or(request.requested_at),
                            payload.clone(),
                            self.term.epoch,
                            now,
                        ),
                        delay: Duration::ZERO,
                    });
                    settle.push((request.id, None));
                }
                RequestKind::Backfill {
                    from,
                    to,
                    done_through,
                } => {
                    let (chunk, finished) =
                        planner::backfill(&job.schedule, *from, *to, *done_through, BACKFILL_CHUNK);
                    info!(
                        job = %job.name,
                        request = %request.id,
                        occurrences = chunk.len(),
                        finished,
                        "publishing backfill",
                    );
                    for at in &chunk {
                        batch.push(outgoing(job, *at, Trigger::Backfill, self.term.epoch, now));
                    }
                    let progress =
                        chunk
                            .last()
                            .copied()
                            .filter(|_| !finished)
                            .map(|last| Request {
                                kind: RequestKind::Backfill {
                                    from: *from,
                                    to: *to,
                                    done_through: Some(last),
                                },
                                ..request.clone()
                            });
                    settle.push((request.id, progress));
                }
            }
        }
        (batch, settle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cronq_shared::control::RequestKind;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn config(jobs: &[(&str, &str)]) -> Arc<Config> {
        let mut toml = String::new();
        for (name, schedule) in jobs {
            toml.push_str(&format!(
                "[[job]]\nname = \"{name}\"\nschedule = \"{schedule}\"\n"
            ));
        }
        Arc::new(Config::from_toml(&toml, std::path::Path::new("t.toml")).unwrap())
    }

    fn job(name: &str) -> JobName {
        JobName::new(name).unwrap()
    }

    fn leading(config: Arc<Config>, now: DateTime<Utc>) -> Leading {
        let (lead, catchup, moved) = Leading::take_over(
            Term::new(4, "t"),
            config,
            &HashMap::new(),
            HashSet::new(),
            now,
        );
        assert!(catchup.is_empty(), "no cursor: nothing to catch up");
        assert_eq!(moved.len(), lead.jobs(), "every new job gets cursor = now");
        lead
    }

    #[test]
    fn due_occurrences_carry_the_epoch_and_paused_jobs_only_move_their_cursor() {
        let now = t("2026-11-30T10:00:00.5Z");
        let mut lead = leading(config(&[("a", "@every 1s"), ("b", "@every 1s")]), now);
        lead.paused.insert(job("b"));
        let due = lead.take_due(t("2026-11-30T10:00:02Z"));
        assert_eq!(due.len(), 4, "a and b at :01 and :02");
        for (message, (name, at)) in &due {
            match message {
                Some(out) => {
                    assert_eq!(name.as_str(), "a");
                    assert_eq!(out.occurrence.epoch, 4);
                    assert_eq!(out.occurrence.scheduled_at, *at);
                    assert_eq!(out.occurrence.trigger, Trigger::Schedule);
                }
                None => assert_eq!(name.as_str(), "b"),
            }
        }
        assert_eq!(lead.timer.next_fire(), Some(t("2026-11-30T10:00:03Z")));
    }

    #[test]
    fn reload_adds_changes_and_removes_jobs() {
        let now = t("2026-11-30T10:00:00.5Z");
        let mut lead = leading(
            config(&[
                ("keep", "@every 1s"),
                ("change", "@every 1s"),
                ("drop", "@every 1s"),
            ]),
            now,
        );
        let later = t("2026-11-30T10:00:10.5Z");
        lead.reload(
            config(&[
                ("keep", "@every 1s"),
                ("change", "@every 5s"),
                ("new", "@every 2s"),
            ]),
            later,
        );
        let written: Vec<&str> = lead
            .uncommitted
            .cursors
            .iter()
            .map(|(j, _)| j.as_str())
            .collect();
        assert_eq!(
            written,
            ["change", "new"],
            "changed and new jobs start from now"
        );
        assert!(lead.uncommitted.cursors.iter().all(|(_, at)| *at == later));
        let due = lead.take_due(t("2026-11-30T10:00:12Z"));
        let fired = |name: &str| -> Vec<DateTime<Utc>> {
            due.iter()
                .filter(|(_, (j, _))| j.as_str() == name)
                .map(|(_, (_, at))| *at)
                .collect()
        };
        assert_eq!(fired("keep").len(), 12, "an unchanged job keeps its timer");
        assert_eq!(fired("new"), [t("2026-11-30T10:00:12Z")]);
        assert!(fired("drop").is_empty(), "a removed job stops");
        assert!(
            fired("change").is_empty(),
            "the old timing of a changed job is gone"
        );
        let due = lead.take_due(t("2026-11-30T10:00:15Z"));
        assert!(
            due.iter()
                .any(|(_, (j, at))| j.as_str() == "change" && *at == t("2026-11-30T10:00:15Z"))
        );
    }

    /// `config` with `name` as a runtime job written at `since`.
    fn runtime(config: &Config, name: &str, since: DateTime<Utc>) -> Arc<Config> {
        let mut config = config.clone();
        config.runtime_since.insert(job(name), since);
        Arc::new(config)
    }

    #[test]
    fn a_runtime_job_no_leader_committed_starts_at_its_revision() {
        let created = t("2026-11-30T10:00:00.7Z");
        let config = runtime(&config(&[("rt", "@every 1s")]), "rt", created);
        // The leader that applied it died before committing a cursor; this one takes over.
        let now = t("2026-11-30T10:00:04.2Z");
        let (_, catchup, moved) = Leading::take_over(
            Term::new(5, "t"),
            config,
            &HashMap::new(),
            HashSet::new(),
            now,
        );
        let at: Vec<DateTime<Utc>> = catchup.iter().map(|o| o.occurrence.scheduled_at).collect();
        // `catchup = "latest"` (the default): the latest missed one.
        assert_eq!(at, [t("2026-11-30T10:00:04Z")]);
        assert_eq!(moved, [(job("rt"), now)]);

        let all = Config::from_toml(
            "[[job]]\nname = \"rt\"\nschedule = \"@every 1s\"\ncatchup = \"all\"\n",
            std::path::Path::new("t.toml"),
        )
        .unwrap();
        let (_, catchup, _) = Leading::take_over(
            Term::new(5, "t"),
            runtime(&all, "rt", created),
            &HashMap::new(),
            HashSet::new(),
            now,
        );
        let at: Vec<String> = catchup
            .iter()
            .map(|o| o.occurrence.scheduled_at.format("%S").to_string())
            .collect();
        assert_eq!(at, ["01", "02", "03", "04"], "every one since its creation");
    }

    #[test]
    fn a_runtime_job_a_reload_brings_in_starts_at_its_revision() {
        let now = t("2026-11-30T10:00:00.5Z");
        let mut lead = leading(config(&[("keep", "@every 1s")]), now);
        let created = t("2026-11-30T10:00:09.8Z");
        let polled = t("2026-11-30T10:00:10.3Z");
        lead.reload(
            runtime(
                &config(&[("keep", "@every 1s"), ("rt", "@every 1s")]),
                "rt",
                created,
            ),
            polled,
        );
        assert_eq!(lead.uncommitted.cursors, [(job("rt"), created)]);
        let due = lead.take_due(polled);
        let rt: Vec<DateTime<Utc>> = due
            .iter()
            .filter(|(_, (j, _))| j.as_str() == "rt")
            .map(|(_, (_, at))| *at)
            .collect();
        assert_eq!(
            rt,
            [t("2026-11-30T10:00:10Z")],
            "the tick between its creation and the poll"
        );

        // An old revision (a job this leader did not take in then) starts now.
        let mut lead = leading(config(&[("keep", "@every 1s")]), now);
        let old = t("2026-11-29T10:00:00Z");
        lead.reload(
            runtime(
                &config(&[("keep", "@every 1s"), ("rt", "@every 1s")]),
                "rt",
                old,
            ),
            polled,
        );
        assert_eq!(lead.uncommitted.cursors, [(job("rt"), polled)]);
    }

    #[test]
    fn requests_become_messages_and_settlements() {
        let now = t("2026-11-30T10:00:00Z");
        let lead = leading(config(&[("y", "0 0 1 1 *")]), now);
        let trigger_key = cronq_shared::key::OccurrenceKey::manual(job("y"));
        let base = |id: &str, name: &str, kind| Request {
            id: id.into(),
            job: job(name),
            requested_at: now,
            kind,
        };
        let requests = vec![
            base(
                "1",
                "y",
                RequestKind::Trigger {
                    key: trigger_key.clone(),
                    payload: Some(serde_json::json!({"x": 1})),
                    at: None,
                },
            ),
            base(
                "2",
                "gone",
                RequestKind::Trigger {
                    key: cronq_shared::key::OccurrenceKey::manual(job("gone")),
                    payload: None,
                    at: None,
                },
            ),
            base(
                "3",
                "y",
                RequestKind::Backfill {
                    from: t("2000-01-01T00:00:00Z"),
                    to: t("2026-01-01T00:00:00Z"),
                    done_through: None,
                },
            ),
        ];
        let (batch, settle) = lead.requests(requests, now);
        assert_eq!(batch[0].occurrence.key, trigger_key);
        assert_eq!(batch[0].occurrence.payload, serde_json::json!({"x": 1}));
        assert_eq!(batch.len(), 1 + 27, "one trigger and 27 new years");
        assert!(
            batch[1..]
                .iter()
                .all(|o| o.occurrence.trigger == Trigger::Backfill)
        );
        assert_eq!(settle[0], ("1".to_owned(), None));
        assert_eq!(settle[1], ("2".to_owned(), None), "unknown job: dropped");
        assert_eq!(
            settle[2],
            ("3".to_owned(), None),
            "backfill finished in one chunk"
        );
    }

    #[test]
    fn a_trigger_at_a_later_instant_waits_for_it_then_is_scheduled_at_it() {
        let now = t("2026-11-30T10:00:00Z");
        let at = t("2026-11-30T10:00:03Z");
        let lead = leading(config(&[("y", "0 0 1 1 *")]), now);
        let key = cronq_shared::key::OccurrenceKey::manual(job("y"));
        let request = Request {
            id: "1".into(),
            job: job("y"),
            requested_at: now,
            kind: RequestKind::Trigger {
                key: key.clone(),
                payload: None,
                at: Some(at),
            },
        };
        assert_eq!(request.not_before(), Some(at));
        let (batch, settle) = lead.requests(vec![request.clone()], now);
        assert!(
            batch.is_empty() && settle.is_empty(),
            "not before its instant"
        );
        let later = at + chrono::Duration::milliseconds(5);
        let (batch, settle) = lead.requests(vec![request], later);
        assert_eq!(batch.len(), 1);
        assert_eq!(batch[0].occurrence.key, key);
        assert_eq!(batch[0].occurrence.scheduled_at, at);
        assert_eq!(settle, vec![("1".to_owned(), None)]);
    }
}
