//! The leader's work: on taking over, catch up per job; then sleep on one timer until the
//! next fire, publish what is due in one confirmed batch, and advance the cursors (fenced).
//! Every `retry` it also reads pause flags and carries out trigger and backfill requests.
//!
//! Owns: the per-term state (job table, timer, pause set, uncommitted cursors). Everything
//! is rebuilt from the control store on each new term, so a producer that lost and regained
//! leadership trusts nothing it remembered. Invariant: a cursor is committed only after the
//! occurrences up to it were confirmed published (or deliberately skipped: paused, or
//! outside the catch-up policy), and only by the current term (the store fences it).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use cronq_shared::broker::{Broker, Outgoing};
use cronq_shared::config::{Config, Job};
use cronq_shared::control::{Commit, Control, ControlError, Request, RequestKind};
use cronq_shared::lease::Term;
use cronq_shared::message::Trigger;
use cronq_shared::names::JobName;
use tokio::sync::watch;
use tokio::time::{Instant, sleep, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::leader::{Leadership, holds, lost};
use crate::planner;
use crate::publisher::{Abandoned, PUBLISH_BACKOFF, publish_confirmed};
use crate::timer::{Entry, Timer};

/// At most this many messages go into one confirmed publish (and one cursor commit), so a
/// million jobs firing together stream out in bounded batches.
pub const PUBLISH_BATCH: usize = 1_000;

/// A backfill publishes at most this many occurrences per control poll, so a year of
/// `@every 1s` neither floods the broker nor blocks scheduled occurrences.
pub const BACKFILL_CHUNK: usize = 1_000;

/// At most this many requests are carried out per control poll.
pub const REQUESTS_PER_POLL: usize = 100;

/// The leader's loop; idle (waiting for leadership) on a standby.
pub struct Scheduler {
    broker: Arc<dyn Broker>,
    control: Control,
    config: watch::Receiver<Arc<Config>>,
    leadership: watch::Receiver<Option<Leadership>>,
}

struct JobSlot {
    index: usize,
    generation: u64,
}

/// One term's state.
struct Leading {
    term: Term,
    config: Arc<Config>,
    jobs: HashMap<JobName, JobSlot>,
    timer: Timer,
    paused: HashSet<JobName>,
    uncommitted: Commit,
    generations: u64,
}

/// A job's cursor position.
type Cursor = (JobName, DateTime<Utc>);

/// One due occurrence: the message (none when the job is paused) and the cursor it moves.
type Due = (Option<Outgoing>, Cursor);

impl Scheduler {
    /// A scheduler publishing through `broker`, led by `leadership`.
    pub fn new(
        broker: Arc<dyn Broker>,
        control: Control,
        config: watch::Receiver<Arc<Config>>,
        leadership: watch::Receiver<Option<Leadership>>,
    ) -> Self {
        Self {
            broker,
            control,
            config,
            leadership,
        }
    }

    /// Waits for leadership, leads until it ends, and again, until `token` is cancelled.
    pub async fn run(mut self, token: CancellationToken) {
        loop {
            let term = loop {
                let current = self.leadership.borrow_and_update().clone();
                if let Some(l) = current.filter(|l| l.is_valid_at(Instant::now())) {
                    break l.term;
                }
                tokio::select! {
                    biased;
                    () = token.cancelled() => return,
                    changed = self.leadership.changed() => if changed.is_err() { return },
                }
            };
            let epoch = term.epoch;
            match self.lead(term, &token).await {
                Abandoned::Cancelled => return,
                Abandoned::LostLeadership => debug!(epoch, "scheduler stopped: leadership ended"),
            }
        }
    }

    /// Leads one term until it ends.
    async fn lead(&mut self, term: Term, token: &CancellationToken) -> Abandoned {
        match self.lead_inner(term, token).await {
            Ok(never) => match never {},
            Err(end) => end,
        }
    }

    async fn lead_inner(
        &mut self,
        term: Term,
        token: &CancellationToken,
    ) -> Result<std::convert::Infallible, Abandoned> {
        let epoch = term.epoch;
        let config = self.config.borrow_and_update().clone();
        let broker = self.broker.clone();
        let queues = config.queues();
        self.retry("declare queues", epoch, token, || broker.declare(&queues))
            .await?;
        let control = self.control.clone();
        let cursors = self
            .retry("read cursors", epoch, token, || control.cursors())
            .await?;
        let paused = self
            .retry("read pauses", epoch, token, || control.paused())
            .await?;
        let now = Utc::now();
        let (mut lead, catchup, moved) =
            Leading::take_over(term, config, &cursors, paused.into_keys().collect(), now);
        info!(
            epoch,
            jobs = lead.jobs.len(),
            catchup = catchup.len(),
            "leading: caught up, scheduling"
        );
        for chunk in catchup.chunks(PUBLISH_BATCH) {
            publish_confirmed(&self.broker, chunk, &self.leadership, epoch, token).await?;
        }
        lead.uncommitted.cursors.extend(moved);
        self.commit(&mut lead).await?;

        let mut control_at = Instant::now();
        loop {
            // One timer for all jobs: sleep until the earliest fire (1 ms late rather than
            // early, since wall clock and monotonic clock may disagree slightly).
            let fire_in = lead
                .timer
                .next_fire()
                .map(|f| (f - Utc::now()).to_std().unwrap_or_default() + Duration::from_millis(1));
            let mut leadership = self.leadership.clone();
            tokio::select! {
                biased;
                () = token.cancelled() => return Err(Abandoned::Cancelled),
                () = lost(&mut leadership, epoch) => return Err(Abandoned::LostLeadership),
                changed = self.config.changed() => {
                    if changed.is_ok() {
                        let new = self.config.borrow_and_update().clone();
                        let queues = new.queues();
                        let broker = self.broker.clone();
                        self.retry("declare queues", epoch, token, || broker.declare(&queues)).await?;
                        lead.reload(new, Utc::now());
                        self.commit(&mut lead).await?;
                    }
                }
                () = sleep(fire_in.unwrap_or(Duration::from_secs(3600))), if fire_in.is_some() => {
                    let due = lead.take_due(Utc::now());
                    for chunk in due.chunks(PUBLISH_BATCH) {
                        let batch: Vec<Outgoing> = chunk.iter().filter_map(|(o, _)| o.clone()).collect();
                        publish_confirmed(&self.broker, &batch, &self.leadership, epoch, token).await?;
                        lead.uncommitted.cursors.extend(chunk.iter().map(|(_, c)| c.clone()));
                        self.commit(&mut lead).await?;
                    }
                }
                () = sleep_until(control_at) => {
                    self.poll_control(&mut lead, token).await?;
                    control_at = Instant::now() + lead.config.leader.retry;
                }
            }
        }
    }

    /// Reads pause flags and carries out pending requests.
    async fn poll_control(
        &mut self,
        lead: &mut Leading,
        token: &CancellationToken,
    ) -> Result<(), Abandoned> {
        match self.control.paused().await {
            Ok(paused) => {
                let paused: HashSet<JobName> = paused.into_keys().collect();
                for job in paused.difference(&lead.paused) {
                    info!(job = %job, "job paused: not publishing it");
                }
                for job in lead.paused.difference(&paused) {
                    info!(job = %job, "job resumed");
                }
                lead.paused = paused;
            }
            Err(err) => warn!(error = %err, "cannot read pause flags, keeping the last known"),
        }
        let requests = match self.control.pending().await {
            Ok(r) => r,
            Err(err) => {
                warn!(error = %err, "cannot read trigger and backfill requests, retrying");
                Vec::new()
            }
        };
        if !requests.is_empty() {
            let (batch, settle) = lead.requests(requests, Utc::now());
            let epoch = lead.term.epoch;
            for chunk in batch.chunks(PUBLISH_BATCH) {
                publish_confirmed(&self.broker, chunk, &self.leadership, epoch, token).await?;
            }
            lead.uncommitted.settle.extend(settle);
        }
        self.commit(lead).await
    }

    /// Writes the uncommitted cursors and settlements (fenced). A store error keeps them
    /// for the next try; a refused fence ends the term.
    async fn commit(&self, lead: &mut Leading) -> Result<(), Abandoned> {
        if lead.uncommitted.is_empty() {
            return Ok(());
        }
        match self.control.commit(&lead.term, &lead.uncommitted).await {
            Ok(()) => {
                lead.uncommitted = Commit::default();
                Ok(())
            }
            Err(ControlError::NotLeader { epoch }) => {
                info!(epoch, "cursor write refused: this producer no longer leads");
                Err(Abandoned::LostLeadership)
            }
            Err(err) => {
                warn!(error = %err, "cannot write cursors, keeping them for the next try");
                Ok(())
            }
        }
    }

    /// Retries a store or broker operation per [`PUBLISH_BACKOFF`] while `epoch` leads.
    async fn retry<T, E, F, Fut>(
        &self,
        what: &'static str,
        epoch: u64,
        token: &CancellationToken,
        mut op: F,
    ) -> Result<T, Abandoned>
    where
        E: std::fmt::Display,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut leadership = self.leadership.clone();
        for attempt in 0usize.. {
            if !holds(&leadership, epoch) {
                return Err(Abandoned::LostLeadership);
            }
            let err = tokio::select! {
                biased;
                () = token.cancelled() => return Err(Abandoned::Cancelled),
                () = lost(&mut leadership, epoch) => return Err(Abandoned::LostLeadership),
                r = op() => match r {
                    Ok(v) => return Ok(v),
                    Err(e) => e,
                },
            };
            warn!(operation = what, attempt = attempt + 1, error = %err, "leader operation failed, retrying");
            let delay = PUBLISH_BACKOFF[attempt.min(PUBLISH_BACKOFF.len() - 1)];
            tokio::select! {
                biased;
                () = token.cancelled() => return Err(Abandoned::Cancelled),
                () = lost(&mut leadership, epoch) => return Err(Abandoned::LostLeadership),
                () = sleep(delay) => {}
            }
        }
        Err(Abandoned::LostLeadership)
    }
}

fn same_timing(a: &Job, b: &Job) -> bool {
    a.schedule.as_str() == b.schedule.as_str() && a.timezone == b.timezone && a.jitter == b.jitter
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

fn entry(job: &Job, at: DateTime<Utc>, generation: u64) -> Entry {
    Entry {
        fire: planner::fire_at(job, at),
        at,
        job: job.name.clone(),
        generation,
    }
}

impl Leading {
    /// Builds the job table and the timer for a new term, with the catch-up messages to
    /// publish first and the cursors to write once they are confirmed.
    fn take_over(
        term: Term,
        config: Arc<Config>,
        cursors: &HashMap<JobName, DateTime<Utc>>,
        paused: HashSet<JobName>,
        now: DateTime<Utc>,
    ) -> (Self, Vec<Outgoing>, Vec<Cursor>) {
        let mut jobs = HashMap::with_capacity(config.jobs.len());
        let mut entries = Vec::with_capacity(config.jobs.len());
        let mut batch = Vec::new();
        let mut moved = Vec::new();
        for (index, job) in config.jobs.iter().enumerate() {
            let plan = planner::take_over(
                &job.schedule,
                job.catchup,
                job.catchup_window,
                job.jitter,
                cursors.get(&job.name).copied(),
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
                entries.push(entry(job, next, 0));
            }
            jobs.insert(
                job.name.clone(),
                JobSlot {
                    index,
                    generation: 0,
                },
            );
        }
        let lead = Self {
            term,
            config,
            jobs,
            timer: Timer::from_entries(entries),
            paused,
            uncommitted: Commit::default(),
            generations: 0,
        };
        (lead, batch, moved)
    }

    /// Pops what is due at `now` and schedules each job's next occurrence.
    fn take_due(&mut self, now: DateTime<Utc>) -> Vec<Due> {
        let mut due = Vec::new();
        for e in self.timer.pop_due(now) {
            let Some(slot) = self.jobs.get(&e.job) else {
                continue; // removed from the config
            };
            if slot.generation != e.generation {
                continue; // superseded by a reload
            }
            let job = &self.config.jobs[slot.index];
            let message = if self.paused.contains(&job.name) {
                debug!(job = %job.name, at = %e.at, "not publishing: job is paused");
                None
            } else {
                Some(outgoing(job, e.at, Trigger::Schedule, self.term.epoch, now))
            };
            if let Some(next) = job.schedule.next_after(e.at) {
                self.timer.push(entry(job, next, slot.generation));
            }
            due.push((message, (e.job, e.at)));
        }
        due
    }

    /// Applies a reloaded config: unchanged jobs keep their timer entry; new jobs and jobs
    /// whose timing changed start from `now` (cursor written); removed jobs are dropped.
    fn reload(&mut self, config: Arc<Config>, now: DateTime<Utc>) {
        let (mut added, mut changed) = (0usize, 0usize);
        let mut jobs = HashMap::with_capacity(config.jobs.len());
        for (index, job) in config.jobs.iter().enumerate() {
            let old = self.jobs.get(&job.name);
            if let Some(slot) = old.filter(|s| same_timing(&self.config.jobs[s.index], job)) {
                jobs.insert(
                    job.name.clone(),
                    JobSlot {
                        index,
                        generation: slot.generation,
                    },
                );
                continue;
            }
            if old.is_some() {
                changed += 1;
            } else {
                added += 1;
            }
            self.generations += 1;
            let generation = self.generations;
            if let Some(next) = job.schedule.next_after(now) {
                self.timer.push(entry(job, next, generation));
            }
            self.uncommitted.cursors.push((job.name.clone(), now));
            jobs.insert(job.name.clone(), JobSlot { index, generation });
        }
        let removed = self.jobs.keys().filter(|j| !jobs.contains_key(*j)).count();
        info!(
            jobs = config.jobs.len(),
            added, changed, removed, "leader applied reloaded config"
        );
        self.jobs = jobs;
        self.config = config;
    }

    /// Turns requests into messages, and says how to settle each once they are confirmed.
    fn requests(
        &self,
        requests: Vec<Request>,
        now: DateTime<Utc>,
    ) -> (Vec<Outgoing>, Vec<(String, Option<Request>)>) {
        let mut batch = Vec::new();
        let mut settle = Vec::new();
        for request in requests.into_iter().take(REQUESTS_PER_POLL) {
            let job = self
                .jobs
                .get(&request.job)
                .map(|s| &self.config.jobs[s.index]);
            let Some(job) = job else {
                warn!(job = %request.job, request = %request.id, "dropping request: no such job in the config");
                settle.push((request.id, None));
                continue;
            };
            match &request.kind {
                RequestKind::Trigger { key, payload } => {
                    info!(job = %job.name, key = %key, "publishing manual trigger");
                    batch.push(Outgoing {
                        queue: job.queue.clone(),
                        occurrence: planner::manual(
                            job,
                            key.clone(),
                            request.requested_at,
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
                    info!(job = %job.name, request = %request.id, occurrences = chunk.len(), finished, "publishing backfill");
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
