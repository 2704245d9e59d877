//! What every page shows, read from the stores every [`REFRESH`] by one task and shared
//! read-only with the requests (a `watch` channel): pause flags, the newest runs, the
//! leader, queue depths and each job's next fire time. A page then costs no store round
//! trip, however many jobs there are, and keeps showing the last state while Redis or
//! RabbitMQ is away, saying since when.
//!
//! Invariant: a failed read keeps the previous value of what it reads and records the
//! outage; the next successful read clears it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use cronq_fleet::compare::{Comparer, Difference, Reference};
use cronq_shared::config::Config;
use cronq_shared::control::Pause;
use cronq_shared::lease::Holder;
use cronq_shared::names::JobName;
use cronq_shared::registry::digest::ConfigDigest;
use cronq_shared::registry::{Beat, Counter, Role, minute_of};
use cronq_shared::runlog::Run;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::read::within;
use super::source::{QueueDepth, Source};
use super::view::{View, Views};

/// How often the snapshot is refreshed (pages poll about as often).
pub const REFRESH: Duration = Duration::from_secs(2);

/// How many of the newest runs the snapshot holds: the jobs page's last outcomes and
/// outcome strips come from them, and on Redis the runs listings too (docs/dashboard.md, "What the pages read").
pub const RECENT_RUNS: usize = 10_000;

/// How often the occurrences expected in the last hour are counted again.
const EXPECTED_EVERY: chrono::TimeDelta = chrono::TimeDelta::minutes(5);

/// How many outcomes a job's strip shows.
pub const STRIP: usize = 20;

/// A service that did not answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Outage {
    /// `Redis`, `RabbitMQ`, `the data file`.
    pub service: &'static str,
    /// Since the first failed read.
    pub since: DateTime<Utc>,
    /// The last error.
    pub error: String,
}

/// The state at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// When the last refresh ended (`None` before the first).
    pub taken_at: Option<DateTime<Utc>>,
    /// Paused jobs.
    pub paused: BTreeMap<JobName, Pause>,
    /// The newest runs, newest first.
    pub recent: Arc<Vec<Run>>,
    /// Per job, the indices in `recent` of its newest runs (at most [`STRIP`]).
    pub by_job: Arc<HashMap<JobName, Vec<usize>>>,
    /// The leader, if any.
    pub leader: Option<Holder>,
    /// Each queue's depth.
    pub queues: Vec<QueueDepth>,
    /// Letters in the dead-letter queue.
    pub dead_letters: Option<u64>,
    /// Each job's next fire time, by its index in the config of `view`.
    pub next: Arc<Vec<Option<DateTime<Utc>>>>,
    /// The jobs `next` is of (`None` before the first refresh).
    pub view: Option<Arc<View>>,
    /// Occurrences the schedules produced from `expected_from` to `expected_at`, paused
    /// jobs counted only up to their pause.
    pub expected_last_hour: Option<usize>,
    /// When `expected_last_hour` was counted.
    pub expected_at: Option<DateTime<Utc>>,
    /// Where its window starts: an hour before `expected_at`, or the start of the oldest
    /// producer alive when that is later (before, nothing was published).
    pub expected_from: Option<DateTime<Utc>>,
    /// Occurrences published in the last hour (the per-minute counters).
    pub published_last_hour: Option<u64>,
    /// Occurrences run to a terminal outcome in the last hour (the per-minute counters).
    pub executed_last_hour: Option<u64>,
    /// The instances alive, from their heartbeats, in instance order.
    pub instances: Vec<Beat>,
    /// The instances whose config differs from the reference one.
    pub differences: Vec<Difference>,
    /// Whose config the others are compared with: the leader's, or the dashboard's own
    /// when no leader reports.
    pub reference: Option<String>,
    /// The store outage now, if any.
    pub store_outage: Option<Outage>,
    /// The queue outage now, if any.
    pub queue_outage: Option<Outage>,
}

impl Snapshot {
    /// The newest runs of `job` in the window, newest first.
    pub fn runs_of<'s>(&'s self, job: &JobName) -> impl Iterator<Item = &'s Run> + 's {
        self.by_job
            .get(job)
            .into_iter()
            .flatten()
            .map(|i| &self.recent[*i])
    }

    /// Since when the leader leads, as its last heartbeat says (none before its first
    /// heartbeat as the leader).
    pub fn leading_since(&self) -> Option<DateTime<Utc>> {
        let leader = self.leader.as_ref()?;
        self.instances
            .iter()
            .find(|b| b.instance == leader.instance)?
            .leading_since
    }

    /// Each job's next fire time by its index in `view`'s config, when this snapshot was
    /// taken of that view (else empty: the caller computes what it shows).
    pub fn next_of(&self, view: &Arc<View>) -> &[Option<DateTime<Utc>>] {
        match &self.view {
            Some(v) if Arc::ptr_eq(v, view) => &self.next,
            _ => &[],
        }
    }

    /// The last outcome of `job` in the window.
    pub fn last(&self, job: &JobName) -> Option<&Run> {
        self.runs_of(job).next()
    }

    /// The services that do not answer now: the stores, then the queue.
    pub fn outages(&self) -> Vec<&Outage> {
        self.store_outage.iter().chain(&self.queue_outage).collect()
    }

    /// Outcomes of the window's runs that started after `since`, by outcome.
    pub fn outcomes_since(&self, since: DateTime<Utc>) -> BTreeMap<&'static str, usize> {
        let mut out = BTreeMap::new();
        for run in self.recent.iter().take_while(|r| r.started_at >= since) {
            *out.entry(run.outcome.as_str()).or_insert(0) += 1;
        }
        out
    }
}

/// Reads a snapshot every [`REFRESH`] until `token` is cancelled.
pub struct Refresher {
    source: Source,
    views: Arc<Views>,
    tx: watch::Sender<Arc<Snapshot>>,
}

impl Refresher {
    /// A refresher and the receiver the requests read.
    pub fn new(source: Source, views: Arc<Views>) -> (Self, watch::Receiver<Arc<Snapshot>>) {
        let (tx, rx) = watch::channel(Arc::new(Snapshot::default()));
        (Self { source, views, tx }, rx)
    }

    /// Refreshes until `token` is cancelled.
    ///
    /// # Errors
    /// None so far; the signature is that of every long-running part.
    pub async fn run(self, token: CancellationToken) -> anyhow::Result<()> {
        let mut next = Arc::new(Vec::new());
        let mut comparer = Comparer::default();
        // The file config the fleet's instances are compared with, and its digest: made
        // again when another file config comes in (a reload, a new recorded config).
        let mut own: Option<(Arc<Config>, Reference)> = None;
        loop {
            let previous = self.tx.borrow().clone();
            let view = self.views.get().await;
            if !own
                .as_ref()
                .is_some_and(|(file, _)| Arc::ptr_eq(file, &view.file))
            {
                // Every job's next fire time anew: the file's jobs are others.
                next = Arc::new(Vec::new());
                let digest = ConfigDigest::of_shared(view.file.clone()).await;
                own = Some((view.file.clone(), digest));
            }
            if !previous
                .view
                .as_ref()
                .is_some_and(|v| Arc::ptr_eq(v, &view))
            {
                // Other runtime jobs: the file's come first in every view and keep theirs.
                next = runtime_moved(&view, &next, view.file.jobs.len());
            }
            next = next_fires(&view.config, next).await;
            let mut snapshot = refresh(&self.source, &previous, next.clone()).await;
            snapshot.view = Some(view.clone());
            if let Some((_, reference)) = &own {
                fleet(&self.source, &mut snapshot, &mut comparer, reference).await;
            }
            let now = Utc::now();
            let hour_ago = now - chrono::TimeDelta::hours(1);
            let from = snapshot
                .instances
                .iter()
                .filter(|b| matches!(b.role, Role::Producer | Role::Standalone))
                .map(|b| b.started_at)
                .min()
                .map_or(hour_ago, |t| t.max(hour_ago));
            // Counted again every refresh while the fleet is younger than the hour (its
            // window grows), else every EXPECTED_EVERY.
            if from > hour_ago
                || previous
                    .expected_at
                    .is_none_or(|at| now - at >= EXPECTED_EVERY)
            {
                let config = view.config.clone();
                let paused = snapshot.paused.clone();
                snapshot.expected_last_hour = tokio::task::spawn_blocking(move || {
                    config
                        .jobs
                        .iter()
                        .map(|j| {
                            let to = paused.get(&j.name).map_or(now, |p| p.since.min(now));
                            if to < from {
                                return 0;
                            }
                            crate::ops::backfill::Preview::of(&j.schedule, from, to).count
                        })
                        .sum()
                })
                .await
                .ok();
                snapshot.expected_at = Some(now);
                snapshot.expected_from = Some(from);
            }
            self.tx.send_replace(Arc::new(snapshot));
            if token
                .run_until_cancelled(tokio::time::sleep(REFRESH))
                .await
                .is_none()
            {
                return Ok(());
            }
        }
    }
}

/// The next fire times of `view`'s jobs from `known`, those of another view: the file's
/// first `file_len` jobs keep theirs, the runtime jobs after them are computed.
fn runtime_moved(
    view: &View,
    known: &[Option<DateTime<Utc>>],
    file_len: usize,
) -> Arc<Vec<Option<DateTime<Utc>>>> {
    if known.len() < file_len {
        return Arc::new(Vec::new());
    }
    let now = Utc::now();
    let mut next = known[..file_len].to_vec();
    let chained = view.config.jobs.iter().any(|j| j.is_after());
    let index = chained.then(|| view.config.index());
    next.extend(view.config.jobs[file_len..].iter().map(|job| match &index {
        Some(index) => index.next_time(job, now),
        None => job.schedule.next_after(now),
    }));
    Arc::new(next)
}

/// Each job's next fire time: recomputed only for the jobs whose last one has passed, so a
/// refresh of 100,000 jobs costs the few that fired.
async fn next_fires(
    config: &Arc<Config>,
    known: Arc<Vec<Option<DateTime<Utc>>>>,
) -> Arc<Vec<Option<DateTime<Utc>>>> {
    let now = Utc::now();
    let stale =
        known.len() != config.jobs.len() || known.iter().any(|t| t.is_some_and(|t| t <= now));
    if !stale {
        return known;
    }
    let config = config.clone();
    let computed = tokio::task::spawn_blocking(move || {
        let fresh = known.len() == config.jobs.len();
        // Jobs with parents follow them by name.
        let index = config
            .jobs
            .iter()
            .any(|j| j.is_after())
            .then(|| config.index());
        config
            .jobs
            .iter()
            .enumerate()
            .map(|(i, job)| match known.get(i).copied().flatten() {
                Some(t) if fresh && t > now => Some(t),
                None if fresh => None,
                // A job with parents: their next common time.
                _ => match &index {
                    Some(index) => index.next_time(job, now),
                    None => job.schedule.next_after(now),
                },
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    Arc::new(computed)
}

async fn refresh(
    source: &Source,
    previous: &Snapshot,
    next: Arc<Vec<Option<DateTime<Utc>>>>,
) -> Snapshot {
    let now = Utc::now();
    let stores = &source.stores;
    let (paused, recent, leader, depths) = tokio::join!(
        within(stores.control.paused()),
        within(stores.runlog.list(None, RECENT_RUNS)),
        within(stores.lease.holder()),
        source.depths(),
    );
    let mut out = Snapshot {
        taken_at: Some(now),
        next,
        ..previous.clone()
    };
    let mut store_error = None;
    match paused {
        Ok(p) => out.paused = p,
        Err(e) => store_error = Some(e),
    }
    match recent {
        Ok(runs) => {
            let mut by_job: HashMap<JobName, Vec<usize>> = HashMap::new();
            for (i, run) in runs.iter().enumerate() {
                let list = by_job.entry(run.job.clone()).or_default();
                if list.len() < STRIP {
                    list.push(i);
                }
            }
            out.recent = Arc::new(runs);
            out.by_job = Arc::new(by_job);
        }
        Err(e) => store_error = Some(e),
    }
    match leader {
        Ok(l) => out.leader = l,
        Err(e) => store_error = Some(e),
    }
    out.store_outage = outage(source.store_name, store_error, &previous.store_outage, now);
    let queue_error = match depths {
        Ok((rows, dlq)) => {
            out.queues = rows;
            out.dead_letters = dlq;
            None
        }
        Err(e) => Some(e),
    };
    out.queue_outage = outage(source.queue_name, queue_error, &previous.queue_outage, now);
    out
}

/// The instances alive, which run another config than the leader's (or, without a
/// leader's report, the dashboard's own), and the last hour's counters: a failed read keeps
/// the previous values (the outage is the other reads' to say).
async fn fleet(source: &Source, out: &mut Snapshot, comparer: &mut Comparer, own: &Reference) {
    let registry = &*source.stores.registry;
    let now_minute = minute_of(Utc::now());
    let minutes = now_minute - 59..=now_minute;
    let (beats, published, executed) = tokio::join!(
        within(registry.instances()),
        within(registry.counted(Counter::Published, minutes.clone())),
        within(registry.counted(Counter::Executed, minutes)),
    );
    if let Ok(n) = published {
        out.published_last_hour = Some(n);
    }
    if let Ok(n) = executed {
        out.executed_last_hour = Some(n);
    }
    let Ok(beats) = beats else { return };
    let leader = out
        .leader
        .as_ref()
        .and_then(|h| beats.iter().find(|b| b.instance == h.instance));
    let mut reference = (own.clone(), "this dashboard's config".to_owned());
    if let Some(leader) = leader
        && let Ok(Some(jobs)) = within(comparer.map(registry, &leader.digest)).await
    {
        reference = (
            Reference {
                overall: leader.digest.clone(),
                jobs,
            },
            format!("the leader's config ({})", leader.instance),
        );
    }
    if let Ok(differences) = within(comparer.differences(registry, &reference.0, &beats)).await {
        cronq_producer::config_check::publish_mismatch(&out.differences, &differences);
        out.differences = differences;
    }
    out.reference = Some(reference.1);
    out.instances = beats;
}

fn outage(
    service: &'static str,
    error: Option<String>,
    before: &Option<Outage>,
    now: DateTime<Utc>,
) -> Option<Outage> {
    let error = error?;
    if let Some(before) = before {
        tracing::debug!(service, error = %error, "dashboard: still cannot read");
        return Some(Outage {
            error,
            ..before.clone()
        });
    }
    tracing::warn!(service, error = %error, "dashboard: cannot read; showing the last state read");
    Some(Outage {
        service,
        since: now,
        error,
    })
}
