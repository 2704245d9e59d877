//! Alerts (`docs/alerts.md`): the `[[alert]]` sinks told when a run fails, is late, runs
//! too long or never happens, when the fleet has no leader or a queue no consumer.
//!
//! Every producer (and standalone) runs [`Alerts`]; what it watches depends on its part:
//! - **The leader** follows the run history as it grows (`RunLog::tail`): dead letters,
//!   misses, failed attempts (opt-in), late starts and too long runs once they end, and
//!   each success, which resolves its job's open alerts. Every `REPORT_EVERY` it reads the
//!   fleet registry: the running attempts the consumers report (late or too long while
//!   they run), and the queues no live consumer serves. It checks `sla.success_within`
//!   (a dead man's switch), the occurrences not started within `sla.start_within`, and
//!   the gaps the continuous reconciliation found (`crate::accounting_check`).
//! - **A standby** watches the leader lease and the leader's own report: when no producer
//!   has led for [`no_leader_after`] (the lease free, or held by a producer that does not
//!   lead), the first standby by instance id says so, and says so again when a leader is
//!   back.
//!
//! Each sink groups what it is told (`groups`: one notice per job and kind per
//! `repeat_interval`, then a resolution) and sends from a task of its own (`sink`), so a
//! slow or failing sink never delays scheduling, execution or another sink.
//!
//! Invariant: an event is told once per process: the same attempt seen running and then
//! ended, or read twice from the history, raises one event (`Seen`). A new leader reads
//! the history from one leader lease before its term began, so what ended while no one
//! led is told too (a failover may tell one event twice, never none).

mod detect;
mod groups;
mod notice;
mod sink;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use cronq_shared::audit::AuditLog;
use cronq_shared::config::{AlertKind, AlertSink, Config};
use cronq_shared::control::Control;
use cronq_shared::lease::Lease;
use cronq_shared::registry::{REPORT_EVERY, Registry, Role};
use cronq_shared::runlog::{Outcome, RunLog, TailFrom};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::debug;

pub use groups::Groups;
pub use notice::{Event, Notice, Status};
pub use sink::sign;

use crate::leader::Leadership;

/// How often the alerts look.
const TICK: Duration = Duration::from_secs(1);

/// How many runs one read of the history takes; a backlog is read a page per tick more.
const PAGE: usize = 1000;

/// How many pages one tick reads at most, so a huge backlog never holds the loop.
const PAGES: usize = 20;

/// How long a queue goes without a consumer before it is told: a consumer restarting
/// reports again within this.
const NO_CONSUMER_AFTER: Duration = Duration::from_secs(10);

/// How much later than `start_within` an occurrence is told as not started: a running
/// attempt shows in the registry within a beat.
const START_MARGIN: Duration = Duration::from_secs(5);

/// The subject of a `no_leader` alert.
const LEADER: &str = "leader";

/// How long an event is remembered as told.
const REMEMBER: Duration = Duration::from_secs(6 * 3600);

/// How long no producer may hold the leader lease before it is told: twice the lease, at
/// least 10 s (a failover takes up to one lease).
pub fn no_leader_after(config: &Config) -> Duration {
    (config.leader.lease * 2).max(Duration::from_secs(10))
}

/// Where the alerts read.
pub struct Sources {
    /// The run history.
    pub runlog: Arc<dyn RunLog>,
    /// The fleet registry.
    pub registry: Arc<dyn Registry>,
    /// The leader lease.
    pub lease: Arc<dyn Lease>,
    /// The pauses (a paused job is not expected to start or succeed).
    pub control: Control,
    /// Where each send is recorded.
    pub audit: Arc<dyn AuditLog>,
}

/// The gaps the continuous reconciliation found: by job, each key and what is missing.
pub type Gaps = BTreeMap<String, Vec<(String, String)>>;

/// Tells the `[[alert]]` sinks what happens.
pub struct Alerts {
    sources: Sources,
    config: watch::Receiver<Arc<Config>>,
    leadership: watch::Receiver<Option<Leadership>>,
    gaps: Option<watch::Receiver<Arc<Gaps>>>,
    instance: String,
}

impl Alerts {
    /// Alerts for the producer `instance`, leading while `leadership` holds, with the
    /// sinks of the config `config` sends.
    pub fn new(
        sources: Sources,
        config: watch::Receiver<Arc<Config>>,
        leadership: watch::Receiver<Option<Leadership>>,
        instance: impl Into<String>,
    ) -> Self {
        Self {
            sources,
            config,
            leadership,
            gaps: None,
            instance: instance.into(),
        }
    }

    /// Also tells the gaps the continuous reconciliation sends on `gaps`.
    #[must_use]
    pub fn with_gaps(mut self, gaps: watch::Receiver<Arc<Gaps>>) -> Self {
        self.gaps = Some(gaps);
        self
    }

    /// Runs until `token` is cancelled. Without `[[alert]]` sinks it only waits for a
    /// reload that adds some.
    pub async fn run(mut self, token: CancellationToken) {
        let mut config = self.config.borrow_and_update().clone();
        let mut senders = Senders::start(&config.alerts, &self.sources.audit, &token);
        let mut state = State::default();
        let mut last_fleet_check: Option<tokio::time::Instant> = None;
        loop {
            if self.config.has_changed().unwrap_or(false) {
                let new = self.config.borrow_and_update().clone();
                if new.alerts != config.alerts {
                    senders.stop().await;
                    senders = Senders::start(&new.alerts, &self.sources.audit, &token);
                    state = State::default();
                }
                config = new;
            }
            if !senders.is_empty() {
                let leading = self.leadership.borrow().as_ref().map(|l| l.since);
                let now = Utc::now();
                match leading {
                    Some(since) => {
                        if state.term != Some(since) {
                            if state.told_no_leader {
                                senders.resolve(
                                    AlertKind::NoLeader,
                                    LEADER,
                                    &format!("{} leads", self.instance),
                                );
                            }
                            state
                                .begin_term(since, &config, &*self.sources.runlog)
                                .await;
                        }
                        self.read_history(&config, &mut state, &mut senders).await;
                        let fleet_due =
                            last_fleet_check.is_none_or(|at| at.elapsed() >= REPORT_EVERY);
                        if fleet_due {
                            last_fleet_check = Some(tokio::time::Instant::now());
                            self.check_fleet(&config, &mut state, &mut senders, now)
                                .await;
                            self.check_expected(&config, &mut state, &mut senders, now)
                                .await;
                        }
                        self.check_gaps(&mut state, &mut senders);
                    }
                    None => {
                        state.term = None;
                        let due = last_fleet_check.is_none_or(|at| at.elapsed() >= REPORT_EVERY);
                        if due {
                            last_fleet_check = Some(tokio::time::Instant::now());
                            self.check_leader(&config, &mut state, &mut senders, now)
                                .await;
                        }
                    }
                }
                senders.due(Utc::now());
                state.prune(now);
            }
            if token
                .run_until_cancelled(tokio::time::sleep(TICK))
                .await
                .is_none()
            {
                senders.stop().await;
                return;
            }
        }
    }

    /// The history from where the last read stopped: events, and each success resolving.
    async fn read_history(&self, config: &Config, state: &mut State, senders: &mut Senders) {
        for _ in 0..PAGES {
            let Some(from) = state.cursor.clone() else {
                return;
            };
            let tail = match self.sources.runlog.tail(&from, PAGE).await {
                Ok(t) => t,
                Err(e) => {
                    debug!(error = %e, "cannot read the run history for the alerts; trying again");
                    return;
                }
            };
            let full = tail.runs.len() == PAGE;
            for run in &tail.runs {
                let job = config.job(run.job.as_str());
                // Only the starts of jobs with a `start_within` are looked up.
                if job.is_some_and(|j| j.sla.start_within.is_some()) {
                    state.started.insert(run.key.to_string());
                }
                let events = detect::from_run(run, job);
                let raised: Vec<AlertKind> = events.iter().map(|e| e.kind).collect();
                for event in events {
                    let attempt = run.attempt;
                    if state
                        .seen
                        .first(event.kind, &event.subject, attempt, run.started_at)
                    {
                        senders.offer(&event);
                    }
                }
                if run.outcome == Outcome::Succeeded {
                    let end =
                        run.started_at + TimeDelta::from_std(run.duration).unwrap_or_default();
                    state.succeeded(run.job.as_str(), end);
                    senders.resolve_job(
                        run.job.as_str(),
                        &raised,
                        &format!("{} succeeded (attempt {})", run.key, run.attempt),
                    );
                }
            }
            state.cursor = Some(tail.next);
            if !full {
                return;
            }
        }
    }

    /// The running attempts the consumers report, and the queues none serves.
    async fn check_fleet(
        &self,
        config: &Config,
        state: &mut State,
        senders: &mut Senders,
        now: DateTime<Utc>,
    ) {
        let beats = match self.sources.registry.instances().await {
            Ok(b) => b,
            Err(e) => {
                debug!(error = %e, "cannot read the fleet registry for the alerts");
                return;
            }
        };
        for beat in &beats {
            for attempt in &beat.running {
                let Some(job) = config.job(&attempt.job) else {
                    continue;
                };
                if job.sla.start_within.is_some() {
                    state.started.insert(attempt.key.clone());
                }
                let events = [
                    detect::running_late(attempt, job, &beat.instance),
                    detect::running_long(attempt, job, &beat.instance, now),
                ];
                for event in events.into_iter().flatten() {
                    if state.seen.first(
                        event.kind,
                        &event.subject,
                        attempt.attempt,
                        attempt.started_at,
                    ) {
                        senders.offer(&event);
                    }
                }
            }
        }
        let unserved = detect::unserved_queues(config, &beats);
        let term_began = state.term_began.unwrap_or(now);
        for queue in &unserved {
            let since = *state
                .unserved
                .entry(queue.clone())
                .or_insert(now.max(term_began));
            if now - since >= delta(NO_CONSUMER_AFTER) && state.told_unserved.insert(queue.clone())
            {
                senders.offer(&Event {
                    kind: AlertKind::NoConsumer,
                    job: None,
                    subject: format!("queue {queue}"),
                    summary: format!(
                        "no live consumer serves queue {queue} (for {}s): its occurrences wait in the queue; start a consumer of it",
                        (now - since).num_seconds()
                    ),
                    at: now,
                });
            }
        }
        state.unserved.retain(|q, _| unserved.contains(q));
        let back: Vec<String> = state
            .told_unserved
            .iter()
            .filter(|q| !unserved.contains(*q))
            .cloned()
            .collect();
        for queue in back {
            state.told_unserved.remove(&queue);
            senders.resolve(
                AlertKind::NoConsumer,
                &format!("queue {queue}"),
                &format!("queue {queue} has a consumer again"),
            );
        }
    }

    /// `sla.start_within` of the occurrences not started, and `sla.success_within`.
    async fn check_expected(
        &self,
        config: &Config,
        state: &mut State,
        senders: &mut Senders,
        now: DateTime<Utc>,
    ) {
        let paused = match self.sources.control.paused().await {
            Ok(p) => p,
            Err(e) => {
                debug!(error = %e, "cannot read the pauses for the alerts");
                return;
            }
        };
        let begun = state.term_began.unwrap_or(now);
        for job in config.jobs.iter().filter(|j| j.sla.is_set()) {
            let name = job.name.as_str();
            if paused.contains_key(&job.name) {
                // Counted again from the resume.
                state.watched_since.insert(name.to_owned(), now);
                state.checked_until.insert(name.to_owned(), now);
                continue;
            }
            let since = *state
                .watched_since
                .entry(name.to_owned())
                .or_insert_with(|| {
                    config
                        .runtime_since
                        .get(&job.name)
                        .copied()
                        .unwrap_or(begun)
                        .max(begun)
                });
            if let Some(within) = job.sla.start_within {
                let until = now - delta(within) - delta(START_MARGIN);
                let from = *state.checked_until.entry(name.to_owned()).or_insert(since);
                let mut next = from;
                for at in job
                    .schedule
                    .iter_after(from)
                    .take_while(|at| *at <= until)
                    .take(100)
                {
                    next = at;
                    let key = cronq_shared::key::OccurrenceKey::scheduled(job.name.clone(), at)
                        .to_string();
                    if !state.started.contains(&key)
                        && let Some(event) = detect::not_started(job, at, now)
                        && state.seen.first(event.kind, &event.subject, 1, at)
                    {
                        senders.offer(&event);
                    }
                }
                if next > from {
                    state.checked_until.insert(name.to_owned(), next);
                }
            }
            if job.sla.success_within.is_some() {
                let last = state.last_success.get(name).copied();
                let from = last.unwrap_or(since);
                if let Some(event) = detect::no_success(job, from, last, now)
                    && state.told_no_success.insert(name.to_owned())
                {
                    senders.offer(&event);
                }
            }
        }
    }

    /// The gaps the reconciliation found that were not told yet.
    fn check_gaps(&mut self, state: &mut State, senders: &mut Senders) {
        let Some(gaps) = self.gaps.as_mut() else {
            return;
        };
        if !gaps.has_changed().unwrap_or(false) {
            return;
        }
        let gaps = gaps.borrow_and_update().clone();
        let now = Utc::now();
        for (job, keys) in gaps.iter() {
            for (key, gap) in keys {
                if state.seen.first(AlertKind::Unaccounted, key, 0, now) {
                    senders.offer(&Event {
                        kind: AlertKind::Unaccounted,
                        job: Some(job.clone()),
                        subject: key.clone(),
                        summary: format!(
                            "not accounted for: {gap} (`cronq verify --job {job}` lists the gaps)"
                        ),
                        at: now,
                    });
                }
            }
        }
    }

    /// On a standby: whether the fleet has had no leader for too long. A leader is a
    /// holder of the lease whose own report says it leads: a producer that writes the
    /// lease but never has it confirmed (its Redis writes reach too few replicas) holds
    /// the key without publishing anything, and counts as no leader.
    async fn check_leader(
        &self,
        config: &Config,
        state: &mut State,
        senders: &mut Senders,
        now: DateTime<Utc>,
    ) {
        let holder = match self.sources.lease.holder().await {
            Ok(h) => h,
            Err(e) => {
                debug!(error = %e, "cannot read the leader lease for the alerts");
                return;
            }
        };
        let beats = self.sources.registry.instances().await.ok();
        let leads = |instance: &str| {
            // Without the registry, the lease alone says who leads.
            beats.as_ref().is_none_or(|beats| {
                beats
                    .iter()
                    .any(|b| b.instance == instance && b.leading_since.is_some())
            })
        };
        if let Some(holder) = holder.as_ref().filter(|h| leads(&h.instance)) {
            state.leaderless_since = None;
            if state.told_no_leader {
                state.told_no_leader = false;
                senders.resolve(
                    AlertKind::NoLeader,
                    LEADER,
                    &format!("{} leads (epoch {})", holder.instance, holder.epoch),
                );
            }
            return;
        }
        let since = *state.leaderless_since.get_or_insert(now);
        if state.told_no_leader || now - since < delta(no_leader_after(config)) {
            return;
        }
        // One standby tells: the first by instance id among the live producers.
        let first = beats.as_ref().and_then(|beats| {
            beats
                .iter()
                .filter(|b| matches!(b.role, Role::Producer | Role::Standalone))
                .map(|b| b.instance.clone())
                .min()
        });
        if first.as_deref().is_some_and(|f| f != self.instance) {
            return;
        }
        state.told_no_leader = true;
        let seconds = (now - since).num_seconds();
        let summary = match &holder {
            None => format!(
                "no producer has held the leader lease for {seconds}s: nothing is being scheduled; are the producers running and reaching the store?"
            ),
            Some(h) => format!(
                "no producer has led for {seconds}s: {} holds the leader lease but does not lead (its lease writes are not confirmed: see its log, and CRONQ_REDIS_MIN_REPLICAS against the replicas in sync); nothing is being scheduled",
                h.instance
            ),
        };
        senders.offer(&Event {
            kind: AlertKind::NoLeader,
            job: None,
            subject: LEADER.to_owned(),
            summary,
            at: now,
        });
    }
}

fn delta(d: Duration) -> TimeDelta {
    TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX)
}

/// What the alerts remember between ticks.
#[derive(Default)]
struct State {
    /// The leadership term being watched (its start), if leading.
    term: Option<DateTime<Utc>>,
    term_began: Option<DateTime<Utc>>,
    /// Where the history is read next.
    cursor: Option<TailFrom>,
    /// The last success of each job.
    last_success: HashMap<String, DateTime<Utc>>,
    /// From when each job with an `sla` is watched.
    watched_since: HashMap<String, DateTime<Utc>>,
    /// Up to which scheduled instant each job's starts were checked.
    checked_until: HashMap<String, DateTime<Utc>>,
    /// Occurrence keys seen started (running or ended).
    started: Remembered,
    told_no_success: HashSet<String>,
    /// Queues without a consumer, since when.
    unserved: BTreeMap<String, DateTime<Utc>>,
    told_unserved: BTreeSet<String>,
    leaderless_since: Option<DateTime<Utc>>,
    told_no_leader: bool,
    seen: Seen,
    pruned: Option<DateTime<Utc>>,
}

impl State {
    /// A new term: the history is read from one leader lease before it, and each job's
    /// last success looked up.
    async fn begin_term(&mut self, since: DateTime<Utc>, config: &Config, runlog: &dyn RunLog) {
        let now = Utc::now();
        *self = Self {
            seen: std::mem::take(&mut self.seen),
            ..Self::default()
        };
        self.term = Some(since);
        self.term_began = Some(now);
        self.cursor = Some(TailFrom::Since(now - delta(config.leader.lease)));
        if config.jobs.iter().any(|j| j.sla.success_within.is_some()) {
            match runlog
                .list(None, cronq_shared::runlog::DEFAULT_MAX_RUNS)
                .await
            {
                Ok(runs) => {
                    for run in runs.iter().filter(|r| r.outcome == Outcome::Succeeded) {
                        let end =
                            run.started_at + TimeDelta::from_std(run.duration).unwrap_or_default();
                        let last = self.last_success.entry(run.job.to_string()).or_insert(end);
                        *last = (*last).max(end);
                    }
                }
                Err(e) => debug!(error = %e, "cannot read the run history for the last successes"),
            }
        }
    }

    /// Forgets what is older than [`REMEMBER`], once a minute.
    fn prune(&mut self, now: DateTime<Utc>) {
        if self
            .pruned
            .is_some_and(|at| now - at < TimeDelta::minutes(1))
        {
            return;
        }
        self.pruned = Some(now);
        let cutoff = now - delta(REMEMBER);
        self.seen.told.retain(|_, at| *at >= cutoff);
        self.started.0.retain(|_, at| *at >= cutoff);
    }

    fn succeeded(&mut self, job: &str, at: DateTime<Utc>) {
        let last = self.last_success.entry(job.to_owned()).or_insert(at);
        *last = (*last).max(at);
        self.told_no_success.remove(job);
    }
}

/// Keys remembered for a while.
#[derive(Default)]
struct Remembered(HashMap<String, DateTime<Utc>>);

impl Remembered {
    fn insert(&mut self, key: String) {
        self.0.insert(key, Utc::now());
    }

    fn contains(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }
}

/// The events already told, by kind, subject and attempt.
#[derive(Default)]
struct Seen {
    told: HashMap<(AlertKind, String, u32), DateTime<Utc>>,
}

impl Seen {
    /// Whether this is the first time: remembers it.
    fn first(&mut self, kind: AlertKind, subject: &str, attempt: u32, at: DateTime<Utc>) -> bool {
        self.told
            .insert((kind, subject.to_owned(), attempt), at)
            .is_none()
    }
}

/// The running sinks: their groups and outboxes.
struct Senders {
    sinks: Vec<(AlertSink, Groups, sink::Outbox)>,
    tasks: JoinSet<()>,
    token: CancellationToken,
}

impl Senders {
    fn start(sinks: &[AlertSink], audit: &Arc<dyn AuditLog>, parent: &CancellationToken) -> Self {
        let token = parent.child_token();
        let mut tasks = JoinSet::new();
        let http = reqwest::Client::new();
        let sinks = sinks
            .iter()
            .map(|s| {
                let (outbox, task) = sink::start(s, http.clone(), audit.clone(), token.clone());
                tasks.spawn(task);
                (
                    s.clone(),
                    Groups::new(s.repeat_interval, s.dashboard_url.clone()),
                    outbox,
                )
            })
            .collect();
        Self {
            sinks,
            tasks,
            token,
        }
    }

    fn is_empty(&self) -> bool {
        self.sinks.is_empty()
    }

    fn offer(&mut self, event: &Event) {
        let now = Utc::now();
        for (sink, groups, outbox) in &mut self.sinks {
            if sink.events.contains(&event.kind)
                && let Some(notice) = groups.offer(event, now)
            {
                outbox.post(notice);
            }
        }
    }

    fn resolve_job(&mut self, job: &str, except: &[AlertKind], why: &str) {
        let now = Utc::now();
        for (_, groups, outbox) in &mut self.sinks {
            for notice in groups.resolve_job(job, except, why, now) {
                outbox.post(notice);
            }
        }
    }

    fn resolve(&mut self, kind: AlertKind, subject: &str, why: &str) {
        let now = Utc::now();
        for (_, groups, outbox) in &mut self.sinks {
            if let Some(notice) = groups.resolve(kind, subject, why, now) {
                outbox.post(notice);
            }
        }
    }

    fn due(&mut self, now: DateTime<Utc>) {
        for (_, groups, outbox) in &mut self.sinks {
            for notice in groups.due(now) {
                outbox.post(notice);
            }
        }
    }

    /// Stops the sinks' tasks: what is queued is dropped.
    async fn stop(&mut self) {
        self.token.cancel();
        while self.tasks.join_next().await.is_some() {}
    }
}
