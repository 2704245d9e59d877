//! One term's state: what a leader knows between taking over and losing the lease: the job
//! table, the timer, the pause set, and the cursors and settlements not yet written.
//!
//! Pure bookkeeping (no I/O, no clock: `now` is passed in), so the scheduler's rules are
//! unit-tested here. Invariant: each due occurrence is handed out together with the cursor
//! it moves, so the caller can commit exactly what it had confirmed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use cronq_shared::broker::Outgoing;
use cronq_shared::config::{Config, Job};
use cronq_shared::control::{Commit, Request, RequestKind};
use cronq_shared::lease::Term;
use cronq_shared::message::Trigger;
use cronq_shared::names::JobName;
use cronq_shared::schedule::Alike;
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

/// A config of this many jobs or more is planned on every core at take-over
/// ([`Leading::take_over`]); a smaller one on the caller's thread.
const PLAN_ON_THREADS_FROM: usize = 16_384;

/// What taking over plans for some of a config's jobs: their timer entries, the catch-up
/// to publish first, and the cursors to write once it is confirmed.
#[derive(Default)]
struct Planned {
    entries: Vec<Entry>,
    batch: Vec<Outgoing>,
    moved: Vec<Cursor>,
}

/// Plans the jobs `range` of `config` for a term of `epoch` taking over at `now`.
fn plan(
    config: &Config,
    range: std::ops::Range<usize>,
    cursors: &HashMap<JobName, DateTime<Utc>>,
    paused: &HashSet<JobName>,
    epoch: u64,
    now: DateTime<Utc>,
) -> Planned {
    let mut planned = Planned {
        entries: Vec::with_capacity(range.len()),
        ..Planned::default()
    };
    let mut alike = Alike::bounded(PLANS_KEPT);
    for index in range {
        let job = &config.jobs[index];
        if job.is_after() {
            // It never fires: its cursor marks when a leader first saw it, from which
            // it follows its parents (`crate::chains`), and never moves.
            if !cursors.contains_key(&job.name) {
                let since = config.runtime_since.get(&job.name).copied();
                planned.moved.push((job.name.clone(), since.unwrap_or(now)));
            }
            continue;
        }
        // A runtime job no leader has committed a cursor for (its leader died between the
        // apply and the commit) starts at its revision, not now.
        let cursor = cursors
            .get(&job.name)
            .or_else(|| config.runtime_since.get(&job.name))
            .copied();
        let plan = alike.get(
            &job.schedule,
            || PlanInputs {
                schedule: &job.schedule,
                catchup: job.catchup,
                window: job.catchup_window,
                jitter: job.jitter,
                cursor,
            },
            || {
                planner::take_over(
                    &job.schedule,
                    job.catchup,
                    job.catchup_window,
                    job.jitter,
                    cursor,
                    now,
                )
            },
        );
        if !paused.contains(&job.name) {
            for at in plan.catchup {
                planned
                    .batch
                    .push(outgoing(job, at, Trigger::Catchup, epoch, now));
            }
        }
        if plan.moved {
            planned.moved.push((job.name.clone(), plan.cursor));
        }
        if let Some(next) = plan.next {
            planned.entries.push(entry(job, index, next));
        }
    }
    planned
}

/// What a take-over plan depends on besides `now` (the same for every job of a plan): jobs
/// alike in all of it share one plan ([`Alike`]).
#[derive(PartialEq, Eq, Hash)]
struct PlanInputs<'c> {
    schedule: &'c cronq_shared::schedule::Schedule,
    catchup: cronq_shared::config::Catchup,
    window: Duration,
    jitter: Duration,
    cursor: Option<DateTime<Utc>>,
}

/// At most this many take-over plans are kept per planning thread: jobs whose cursors all
/// differ are planned one by one rather than held in a map as large as the config.
const PLANS_KEPT: usize = 65_536;

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
        let jobs = config.jobs.len();
        let threads = if jobs < PLAN_ON_THREADS_FROM {
            1
        } else {
            std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
        };
        let planned = if threads <= 1 {
            plan(&config, 0..jobs, cursors, &paused, term.epoch, now)
        } else {
            // Each job's plan is its own (its schedule, cursor and policies): contiguous
            // ranges are planned on the machine's cores, then joined in file order, so the
            // timer, the catch-up and the cursors are those of one pass.
            let size = jobs.div_ceil(threads);
            let (config, paused, epoch) = (&*config, &paused, term.epoch);
            std::thread::scope(|scope| {
                let parts: Vec<_> = (0..jobs)
                    .step_by(size)
                    .map(|from| {
                        let range = from..(from + size).min(jobs);
                        scope.spawn(move || plan(config, range, cursors, paused, epoch, now))
                    })
                    .collect();
                let mut all = Planned::default();
                all.entries.reserve_exact(jobs);
                for part in parts {
                    let part = part.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
                    all.entries.extend(part.entries);
                    all.batch.extend(part.batch);
                    all.moved.extend(part.moved);
                }
                all
            })
        };
        let lead = Self {
            term,
            config,
            timer: Timer::from_entries(planned.entries),
            paused,
            uncommitted: Commit::default(),
        };
        (lead, planned.batch, planned.moved)
    }

    /// How many jobs the term schedules.
    pub(crate) fn jobs(&self) -> usize {
        self.config.jobs.len()
    }

    /// Pops up to `limit` occurrences due at `now` (several of one job when publishing was
    /// held up), fewer only when no more are due, and schedules each job's next one: a
    /// herd of jobs due together is taken batch by batch.
    pub(crate) fn take_due(&mut self, now: DateTime<Utc>, limit: usize) -> Vec<Due> {
        let mut due = Vec::new();
        while due.len() < limit {
            let popped = self.timer.pop_due(now, limit - due.len());
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
        let old = Arc::clone(&self.config);
        // Where each old job is in the new config (`Config::positions_in`: names compared
        // in place, only the few that moved looked up), and so whether it is there with the
        // same timing.
        let positions = old.positions_in(&config);
        let kept: Vec<Option<u32>> = old
            .jobs
            .iter()
            .zip(&positions)
            .map(|(job, at)| at.filter(|i| same_timing(job, &config.jobs[*i as usize])))
            .collect();
        self.timer.retain_mut(|e| match kept[e.job as usize] {
            Some(i) => {
                e.job = i;
                true
            }
            None => false,
        });
        let (mut scheduled, mut known) = (
            vec![false; config.jobs.len()],
            vec![false; config.jobs.len()],
        );
        for i in kept.iter().flatten() {
            scheduled[*i as usize] = true;
        }
        for i in positions.iter().flatten() {
            known[*i as usize] = true;
        }
        let (mut added, mut changed) = (0usize, 0usize);
        for (index, job) in config.jobs.iter().enumerate() {
            if scheduled[index] {
                continue;
            }
            if known[index] {
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
            // By hash (`Config::job`): the config's index is built at the first request
            // after a change, 44 ms at a million jobs, not at the take-over.
            let Some(job) = self.config.job(request.job.as_str()) else {
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

    /// The jobs whose cursors the leader will write, in order.
    fn cursors_written(lead: &Leading) -> Vec<&str> {
        lead.uncommitted
            .cursors
            .iter()
            .map(|(j, _)| j.as_str())
            .collect()
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
    fn a_large_take_over_planned_on_threads_is_the_one_pass_plan() {
        // Over the threshold, with catch-up (cursors an hour back), paused jobs, jobs
        // that do not fire and jobs new to this term: the threads' plan, joined, is the
        // plan of one pass over the file, in the same order.
        let jobs = PLAN_ON_THREADS_FROM + 3_001;
        let schedules = ["@every 10m", "0 * * * *", "*/7 * * * *", "0 0 29 2 *"];
        let mut toml = String::new();
        for i in 0..jobs {
            let schedule = schedules[i % schedules.len()];
            toml.push_str(&format!(
                "[[job]]\nname = \"j{i}\"\nschedule = \"{schedule}\"\ncatchup = \"all\"\n"
            ));
        }
        let config =
            Arc::new(Config::from_toml(&toml, std::path::Path::new("t.toml")).expect("loads"));
        let now = t("2026-11-30T10:00:00.5Z");
        let cursors: HashMap<JobName, DateTime<Utc>> = (0..jobs)
            .filter(|i| i % 3 != 0)
            .map(|i| (job(&format!("j{i}")), t("2026-11-30T09:00:00Z")))
            .collect();
        let paused: HashSet<JobName> = (0..jobs)
            .filter(|i| i % 5 == 0)
            .map(|i| job(&format!("j{i}")))
            .collect();
        let one = plan(&config, 0..jobs, &cursors, &paused, 4, now);
        let (lead, batch, moved) =
            Leading::take_over(Term::new(4, "t"), config, &cursors, paused, now);
        assert!(!one.batch.is_empty() && !one.moved.is_empty());
        assert_eq!(
            format!("{:?}", lead.timer),
            format!("{:?}", Timer::from_entries(one.entries))
        );
        assert_eq!(format!("{batch:?}"), format!("{:?}", one.batch));
        assert_eq!(moved, one.moved);
    }

    #[test]
    fn jobs_planned_alike_each_get_the_plan_of_their_own() {
        // Jobs of one shared schedule, with the same and with other cursors, jitters and
        // catch-up policies: planned together (one plan worked out per alike group) each
        // gets what planning it alone gives.
        let variants = [
            "",
            "jitter = \"30s\"\n",
            "catchup = \"latest\"\n",
            "catchup = \"all\"\ncatchup_window = \"20m\"\n",
            "catchup = \"none\"\n",
        ];
        let jobs = 60;
        let mut toml = String::new();
        for i in 0..jobs {
            toml.push_str(&format!(
                "[[job]]\nname = \"j{i}\"\nschedule = \"*/7 * * * *\"\n{}",
                variants[i % variants.len()]
            ));
        }
        let config =
            Arc::new(Config::from_toml(&toml, std::path::Path::new("t.toml")).expect("loads"));
        assert!(config.jobs.iter().all(|j| j.schedule.is_shared()));
        let now = t("2026-11-30T10:00:00.5Z");
        let cursors: HashMap<JobName, DateTime<Utc>> = (0..jobs)
            .filter_map(|i| {
                let at = match i % 4 {
                    0 => return None,
                    1 => "2026-11-30T09:00:00Z",
                    2 => "2026-11-30T09:50:00Z",
                    _ => "2026-11-30T10:00:00Z",
                };
                Some((job(&format!("j{i}")), t(at)))
            })
            .collect();
        let paused = HashSet::new();
        let together = plan(&config, 0..jobs, &cursors, &paused, 4, now);
        let mut alone = Planned::default();
        for i in 0..jobs {
            let one = plan(&config, i..i + 1, &cursors, &paused, 4, now);
            alone.entries.extend(one.entries);
            alone.batch.extend(one.batch);
            alone.moved.extend(one.moved);
        }
        assert!(!alone.batch.is_empty(), "some jobs catch up");
        assert_eq!(
            format!("{:?}", together.entries),
            format!("{:?}", alone.entries)
        );
        assert_eq!(
            format!("{:?}", together.batch),
            format!("{:?}", alone.batch)
        );
        assert_eq!(together.moved, alone.moved);
    }

    #[test]
    fn due_occurrences_carry_the_epoch_and_paused_jobs_only_move_their_cursor() {
        let now = t("2026-11-30T10:00:00.5Z");
        let mut lead = leading(config(&[("a", "@every 1s"), ("b", "@every 1s")]), now);
        lead.paused.insert(job("b"));
        let due = lead.take_due(t("2026-11-30T10:00:02Z"), usize::MAX);
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
        let written = cursors_written(&lead);
        assert_eq!(
            written,
            ["change", "new"],
            "changed and new jobs start from now"
        );
        assert!(lead.uncommitted.cursors.iter().all(|(_, at)| *at == later));
        let due = lead.take_due(t("2026-11-30T10:00:12Z"), usize::MAX);
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
        let due = lead.take_due(t("2026-11-30T10:00:15Z"), usize::MAX);
        assert!(
            due.iter()
                .any(|(_, (j, at))| j.as_str() == "change" && *at == t("2026-11-30T10:00:15Z"))
        );
    }

    #[test]
    fn a_reload_that_moves_jobs_keeps_each_timer_with_its_job() {
        // A job inserted near the start and one removed: every job after them is at
        // another index, and each keeps its own timing.
        let now = t("2026-11-30T10:00:00.5Z");
        let mut lead = leading(
            config(&[
                ("a", "@every 1s"),
                ("b", "@every 2s"),
                ("c", "@every 1s"),
                ("d", "@every 3s"),
                ("e", "@every 4s"),
            ]),
            now,
        );
        lead.reload(
            config(&[
                ("a", "@every 1s"),
                ("x", "@every 5s"),
                ("b", "@every 2s"),
                ("d", "@every 3s"),
                ("e", "@every 4s"),
            ]),
            t("2026-11-30T10:00:00.6Z"),
        );
        let written = cursors_written(&lead);
        assert_eq!(written, ["x"], "only the new job starts from now");
        let due = lead.take_due(t("2026-11-30T10:00:12Z"), usize::MAX);
        let count = |name: &str| due.iter().filter(|(_, (j, _))| j.as_str() == name).count();
        assert_eq!(
            ["a", "x", "b", "c", "d", "e"].map(count),
            [12, 2, 6, 0, 4, 3],
            "each job at its own timing, the removed one at none"
        );
    }

    #[test]
    fn a_reload_that_keeps_every_name_in_place_moves_only_the_changed_job() {
        let now = t("2026-11-30T10:00:00.5Z");
        let jobs = [("a", "@every 1s"), ("b", "0 0 29 2 *"), ("c", "@every 1s")];
        let mut lead = leading(config(&jobs), now);
        let later = t("2026-11-30T10:00:10.5Z");
        lead.reload(
            config(&[("a", "@every 1s"), ("b", "@every 2s"), ("c", "@every 1s")]),
            later,
        );
        let written = cursors_written(&lead);
        assert_eq!(written, ["b"], "only the changed job starts anew");
        let due = lead.take_due(t("2026-11-30T10:00:12Z"), usize::MAX);
        let count = |name: &str| due.iter().filter(|(_, (j, _))| j.as_str() == name).count();
        assert_eq!((count("a"), count("b"), count("c")), (12, 1, 12));
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
        let due = lead.take_due(polled, usize::MAX);
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
