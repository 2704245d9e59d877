//! Jobs that run after other jobs (`after = ["a", "b"]`, `docs/config.md`): while this
//! producer leads, it follows the run history (`RunLog::tail`) and, whenever an
//! occurrence of a parent ends, looks at every parent's occurrence of that scheduled time
//! in the ledger and decides the child's occurrence `CHILD@<that time>`:
//! - every parent's `succeeded`: publish it (confirmed, to the child's queue), first
//!   admitting it again if it was recorded `skipped` for a parent that a replay has since
//!   made succeed ([`Ledger::admit_replay`]);
//! - some parent's ended otherwise (`failed`, `missed`, `skipped`, `cancelled`): record it
//!   `skipped`, naming that parent ([`parent_ended`]), in the ledger with its history
//!   entry ([`Ledger::settle`]);
//! - else a parent has not ended yet: nothing; its end comes by later.
//!
//! Why nothing is lost or run twice: each decision reads the ledger, never the event that
//! woke it, and acts idempotently by the child's key: a second publish of a key is acked by
//! the consumers as a duplicate (G1), a second skip is not recorded. So reading an end
//! twice is harmless, and a new leader reads the history again from a window back
//! ([`lookback`]): the ends its predecessor saw but had not followed up yet, and those that
//! came while no one led, are followed up. A child's occurrence exists only for
//! parents' times after a leader first saw the child (its cursor in the control store,
//! written by the scheduler), so a new child does not run for the past.
//!
//! A paused child (`cronq pause`) runs as a paused scheduled job does: not at all, and not
//! caught up once resumed. An occurrence of it that its parents' ends would start while it
//! is paused is recorded `skipped` ([`JOB_PAUSED`]), so that a later leader reading the
//! same ends again does not start it after the resume; a `skipped` record of it for a
//! parent that a replay made succeed stays skipped while it is paused.
//!
//! Not modelled: a child's jitter (it is published as soon as its parents succeeded), its
//! `catchup` policy (every parent end inside the window is followed up).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use cronq_shared::broker::{Broker, Outgoing};
use cronq_shared::config::{Config, Job};
use cronq_shared::control::{Control, ControlError};
use cronq_shared::key::OccurrenceKey;
use cronq_shared::ledger::{Ledger, PARENT_ENDED, Settle, State, parent_ended};
use cronq_shared::message::Trigger;
use cronq_shared::names::JobName;
use cronq_shared::runlog::{Outcome, Run, RunLog, TailFrom};
use cronq_shared::store::StoreError;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::leader::{self, Leadership};
use crate::planner;
use crate::publisher;

/// How often the history is read while leading.
const TICK: Duration = Duration::from_millis(200);

/// Runs read per page of the history.
const PAGE: usize = 1000;

/// The reason recorded for an occurrence of a paused child: it ends `skipped`, and is not
/// run once the job is resumed.
pub const JOB_PAUSED: &str = "job paused";

/// Where the leader's chains read and write.
pub struct Sources {
    /// The run history, followed for parents' ends.
    pub runlog: Arc<dyn RunLog>,
    /// The records of parents' and children's occurrences.
    pub ledger: Arc<dyn Ledger>,
    /// Where children's occurrences are published.
    pub broker: Arc<dyn Broker>,
    /// The jobs' cursors: when a leader first saw each child.
    pub control: Control,
}

/// Follows parents' ends while leading, and starts or skips their children.
pub struct Chains {
    sources: Sources,
    config: watch::Receiver<Arc<Config>>,
    leadership: watch::Receiver<Option<Leadership>>,
    instance: String,
}

/// What one term remembers.
struct Term {
    epoch: u64,
    /// Where the history is read next.
    cursor: TailFrom,
    /// The config the graph was built from.
    config: Arc<Config>,
    graph: Graph,
}

/// The config's jobs with parents, as the leader follows them.
#[derive(Default)]
struct Graph {
    /// By parent: its children.
    children: HashMap<JobName, Vec<Job>>,
    /// By child: the first scheduled time it runs for (strictly after it).
    since: HashMap<JobName, DateTime<Utc>>,
    /// By child: the job.
    jobs: HashMap<JobName, Job>,
}

impl Graph {
    /// The graph of `config`, each child's start read from `cursors` (else the runtime
    /// job's revision time, else `now`).
    fn new(
        config: &Config,
        cursors: &HashMap<JobName, DateTime<Utc>>,
        known: &Graph,
        now: DateTime<Utc>,
    ) -> Self {
        let mut graph = Graph::default();
        for job in config.jobs.iter().filter(|j| j.is_after()) {
            let since = cursors
                .get(&job.name)
                .or_else(|| config.runtime_since.get(&job.name))
                .or_else(|| known.since.get(&job.name))
                .copied()
                .unwrap_or(now);
            graph.since.insert(job.name.clone(), since);
            graph.jobs.insert(job.name.clone(), job.clone());
            for parent in job.parents() {
                graph
                    .children
                    .entry(parent.clone())
                    .or_default()
                    .push(job.clone());
            }
        }
        graph
    }

    fn is_empty(&self) -> bool {
        self.since.is_empty()
    }
}

/// How far back a new leader reads the history: the longest `catchup_window` of a child,
/// and at least twice the leader lease (what a failover takes).
pub fn lookback(config: &Config) -> Duration {
    let lease = config.leader.lease * 2;
    config
        .jobs
        .iter()
        .filter(|j| j.is_after())
        .map(|j| j.catchup_window)
        .max()
        .map_or(lease, |w| w.max(lease))
}

impl Chains {
    /// Chains of the config `config` sends, followed while `leadership` holds; `instance`
    /// names this producer in the history entries of the skips it records.
    pub fn new(
        sources: Sources,
        config: watch::Receiver<Arc<Config>>,
        leadership: watch::Receiver<Option<Leadership>>,
        instance: String,
    ) -> Self {
        Self {
            sources,
            config,
            leadership,
            instance,
        }
    }

    /// Runs until `token` is cancelled.
    pub async fn run(mut self, token: CancellationToken) {
        let mut term: Option<Term> = None;
        loop {
            let leading = self.leadership.borrow().as_ref().map(|l| l.term.epoch);
            match leading {
                None => term = None,
                Some(epoch) => {
                    let config = self.config.borrow_and_update().clone();
                    let fresh = term.as_ref().is_none_or(|t| t.epoch != epoch);
                    if fresh {
                        term = self.begin(epoch, config).await;
                    } else if let Some(t) = term.as_mut()
                        && !Arc::ptr_eq(&t.config, &config)
                    {
                        self.reload(t, config).await;
                    }
                    if let Some(t) = term.as_mut()
                        && !t.graph.is_empty()
                    {
                        self.follow(t, &token).await;
                    }
                }
            }
            if token
                .run_until_cancelled(tokio::time::sleep(TICK))
                .await
                .is_none()
            {
                return;
            }
        }
    }

    /// A new term: the graph, and the history read from [`lookback`] ago.
    async fn begin(&self, epoch: u64, config: Arc<Config>) -> Option<Term> {
        let now = Utc::now();
        let graph = if config.jobs.iter().any(|j| j.is_after()) {
            match self.sources.control.cursors().await {
                Ok(cursors) => Graph::new(&config, &cursors, &Graph::default(), now),
                Err(e) => {
                    debug!(error = %e, "cannot read the cursors for the chained jobs; trying again");
                    return None;
                }
            }
        } else {
            Graph::default()
        };
        let back = TimeDelta::from_std(lookback(&config)).unwrap_or(TimeDelta::MAX);
        if !graph.is_empty() {
            info!(
                children = graph.since.len(),
                lookback = %humantime::format_duration(lookback(&config)),
                "following the parents of chained jobs"
            );
        }
        Some(Term {
            epoch,
            cursor: TailFrom::Since(now.checked_sub_signed(back).unwrap_or(now)),
            config,
            graph,
        })
    }

    /// A reloaded config: the graph again; a child new to it starts now.
    async fn reload(&self, term: &mut Term, config: Arc<Config>) {
        let cursors = if config.jobs.iter().any(|j| j.is_after()) {
            match self.sources.control.cursors().await {
                Ok(c) => c,
                Err(e) => {
                    debug!(error = %e, "cannot read the cursors for the chained jobs; trying again");
                    return;
                }
            }
        } else {
            HashMap::new()
        };
        let was_empty = term.graph.is_empty();
        term.graph = Graph::new(&config, &cursors, &term.graph, Utc::now());
        if was_empty && !term.graph.is_empty() {
            // Nothing was followed so far: start from here, not from the term's start.
            term.cursor = TailFrom::Since(Utc::now());
        }
        term.config = config;
    }

    /// Reads the history from the term's cursor and follows up each parent's end; the
    /// cursor moves past a page only once all of it was followed up.
    async fn follow(&self, term: &mut Term, token: &CancellationToken) {
        loop {
            let tail = match self.sources.runlog.tail(&term.cursor, PAGE).await {
                Ok(t) => t,
                Err(e) => {
                    debug!(error = %e, "cannot read the run history for the chained jobs; trying again");
                    return;
                }
            };
            let full = tail.runs.len() == PAGE;
            let slots = slots(&term.graph, &tail.runs);
            if !slots.is_empty() {
                match self.decide_all(term, &slots, token).await {
                    Ok(()) => {}
                    Err(e) => {
                        warn!(error = %e, "cannot follow up the ends of chained jobs' parents; trying again");
                        return;
                    }
                }
            }
            term.cursor = tail.next;
            if !full || token.is_cancelled() {
                return;
            }
        }
    }

    /// Decides each slot, then publishes what is to run, confirmed, while the term holds.
    async fn decide_all(
        &self,
        term: &Term,
        slots: &BTreeSet<(DateTime<Utc>, JobName)>,
        token: &CancellationToken,
    ) -> Result<(), Failure> {
        let mut batch = Vec::new();
        let now = Utc::now();
        // Read once for all the slots (each decided after its parents' ends were read).
        let paused = self.sources.control.paused().await?;
        for (at, child) in slots {
            // A deposed leader stops deciding at once (its successor reads the history
            // again): no skip is recorded from a stale read beside its successor's run.
            if !leader::holds(&self.leadership, term.epoch) {
                return Err(Failure::Abandoned);
            }
            let Some(job) = term.graph.jobs.get(child) else {
                continue;
            };
            if term.graph.since.get(child).is_some_and(|since| at <= since) {
                continue; // before a leader first saw the child
            }
            match self
                .decide(job, *at, now, paused.contains_key(child))
                .await?
            {
                Decision::Run => {
                    let mut occurrence =
                        planner::occurrence(job, *at, Trigger::Schedule, term.epoch, now);
                    // Its start deadline counts from when its parents all succeeded.
                    occurrence.deadline = planner::deadline(job, now);
                    batch.push(Outgoing {
                        queue: job.queue.clone(),
                        occurrence,
                        delay: Duration::ZERO,
                    });
                }
                Decision::Skipped | Decision::Wait | Decision::Done => {}
            }
        }
        if batch.is_empty() {
            return Ok(());
        }
        let count = batch.len();
        publisher::publish_confirmed(
            &self.sources.broker,
            &batch,
            &self.leadership,
            term.epoch,
            token,
        )
        .await
        .map_err(|_| Failure::Abandoned)?;
        debug!(count, "published chained jobs' occurrences");
        Ok(())
    }

    /// What becomes of `job`'s occurrence at `at`, from its parents' records and whether
    /// `job` is `paused`; a skip is recorded here, a run is left to the caller to publish.
    async fn decide(
        &self,
        job: &Job,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
        paused: bool,
    ) -> Result<Decision, StoreError> {
        let ledger = &self.sources.ledger;
        let mut all_succeeded = true;
        for parent in job.parents() {
            let key = OccurrenceKey::scheduled(parent.clone(), at);
            match ledger.record(&key).await?.map(|r| r.state) {
                Some(State::Succeeded) => {}
                Some(state) if state.is_terminal() => {
                    let why = parent_ended(&key, state);
                    return self.skip(job, at, why, now).await;
                }
                _ => all_succeeded = false,
            }
        }
        if !all_succeeded {
            return Ok(Decision::Wait);
        }
        let key = OccurrenceKey::scheduled(job.name.clone(), at);
        match ledger.record(&key).await? {
            None if paused => self.skip(job, at, JOB_PAUSED.to_owned(), now).await,
            None => Ok(Decision::Run),
            Some(r) if r.state == State::Skipped && is_parent_skip(r.error.as_deref()) => {
                if paused {
                    debug!(key = %key, "its parents all succeeded after a replay, but it is paused: it stays skipped");
                    return Ok(Decision::Done);
                }
                // A parent it was skipped for succeeded since (a replay): run it now.
                ledger.admit_replay(&key).await?;
                info!(key = %key, "its parents all succeeded after a replay: running it");
                Ok(Decision::Run)
            }
            Some(r) if r.state.is_terminal() => Ok(Decision::Done),
            // Admitted again but not yet published (a leader died in between), or retried:
            // a publish is a duplicate at worst.
            Some(r) if r.state == State::Retrying => Ok(Decision::Run),
            Some(_) => Ok(Decision::Done),
        }
    }

    /// Records `job`'s occurrence at `at` `skipped` for `why` (a parent that did not
    /// succeed, or [`JOB_PAUSED`]); nothing when it is recorded already.
    async fn skip(
        &self,
        job: &Job,
        at: DateTime<Utc>,
        why: String,
        now: DateTime<Utc>,
    ) -> Result<Decision, StoreError> {
        let key = OccurrenceKey::scheduled(job.name.clone(), at);
        let run = Run {
            key: key.clone(),
            job: job.name.clone(),
            attempt: 1,
            consumer: format!("leader {}", self.instance),
            started_at: now,
            duration: Duration::ZERO,
            outcome: Outcome::Skipped,
            error: Some(why.clone()),
            published_at: None,
        };
        let ended = self
            .sources
            .ledger
            .settle(&Settle {
                key: key.clone(),
                job: job.name.clone(),
                attempt: 1,
                state: State::Skipped,
                error: Some(why.clone()),
                retention: job.retention,
                run: Some(run),
            })
            .await?;
        if ended.recorded {
            if why == JOB_PAUSED {
                info!(key = %key, "skipped: the job is paused");
            } else {
                info!(key = %key, reason = %why, "skipped: a parent did not succeed");
            }
        }
        Ok(Decision::Skipped)
    }
}

/// Whether a `skipped` record's reason says a parent did not succeed.
fn is_parent_skip(error: Option<&str>) -> bool {
    error.is_some_and(|e| e.starts_with(PARENT_ENDED))
}

/// The child occurrences the terminal ends of parents among `runs` may decide, once each,
/// by scheduled time.
fn slots(graph: &Graph, runs: &[Run]) -> BTreeSet<(DateTime<Utc>, JobName)> {
    let mut out = BTreeSet::new();
    let terminal: HashSet<Outcome> = [
        Outcome::Succeeded,
        Outcome::Failed,
        Outcome::Skipped,
        Outcome::Cancelled,
        Outcome::Missed,
    ]
    .into_iter()
    .collect();
    for run in runs.iter().filter(|r| terminal.contains(&r.outcome)) {
        let (Some(children), Some(at)) = (graph.children.get(&run.job), run.key.scheduled_at())
        else {
            continue;
        };
        for child in children {
            out.insert((at, child.name.clone()));
        }
    }
    out
}

/// What [`Chains::decide`] found.
enum Decision {
    /// Publish it.
    Run,
    /// Recorded (or already) `skipped`.
    Skipped,
    /// A parent has not ended yet.
    Wait,
    /// Nothing to do: it ended, or runs.
    Done,
}

/// Why a page was not followed up.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error("the leadership ended while publishing")]
    Abandoned,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        Config::from_toml(text, std::path::Path::new("t.toml")).unwrap()
    }

    fn run(key: &str, outcome: Outcome) -> Run {
        let key: OccurrenceKey = key.parse().unwrap();
        Run {
            job: key.job().clone(),
            key,
            attempt: 1,
            consumer: "c".into(),
            started_at: Utc::now(),
            duration: Duration::ZERO,
            outcome,
            error: None,
            published_at: None,
        }
    }

    #[test]
    fn only_the_terminal_ends_of_scheduled_parents_wake_their_children_once() {
        let c = config(
            r#"
[[job]]
name = "a"
schedule = "@every 1s"
command = ["true"]
[[job]]
name = "b"
after = ["a"]
command = ["true"]
[[job]]
name = "c"
after = ["a", "b"]
command = ["true"]
"#,
        );
        let graph = Graph::new(&c, &HashMap::new(), &Graph::default(), Utc::now());
        let runs = [
            run("a@2026-01-01T00:00:01Z", Outcome::Retrying),
            run("a@2026-01-01T00:00:02Z", Outcome::Failed),
            run("a@2026-01-01T00:00:02Z", Outcome::Succeeded),
            run("b@2026-01-01T00:00:03Z", Outcome::Skipped),
            run("c@2026-01-01T00:00:04Z", Outcome::Succeeded),
            run("a@2026-01-01T00:00:05Z", Outcome::Lost),
        ];
        let woken: Vec<String> = slots(&graph, &runs)
            .into_iter()
            .map(|(at, job)| format!("{job}@{}", at.format("%S")))
            .collect();
        assert_eq!(woken, ["b@02", "c@02", "c@03"]);
    }

    #[test]
    fn the_lookback_is_the_longest_child_window_and_at_least_two_leases() {
        let c = config(
            r#"
[leader]
lease = "15s"
renew_deadline = "10s"
retry = "2s"
[[job]]
name = "a"
schedule = "@every 1s"
command = ["true"]
[[job]]
name = "b"
after = ["a"]
catchup_window = "2h"
command = ["true"]
"#,
        );
        assert_eq!(lookback(&c), Duration::from_secs(7200));
        let none = config(
            r#"
[[job]]
name = "a"
schedule = "@every 1s"
command = ["true"]
"#,
        );
        assert_eq!(lookback(&none), Duration::from_secs(30));
    }
}
