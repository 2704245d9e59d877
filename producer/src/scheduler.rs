//! The leader's work: on taking over, catch up per job; then sleep on one timer until
//! shortly before the next fire, build what is due, publish it at the instant in confirmed
//! batches, and advance the cursors (fenced).
//! Every `retry` it also reads pause flags and carries out trigger and backfill requests
//! (a trigger `--at` a later instant waits in the store, and the next poll is then no
//! later than that instant).
//!
//! Owns: the loop around one term's state (`term`: job table, timer, pauses, uncommitted
//! cursors). Everything is rebuilt from the control store on each new term, so a producer
//! that lost and regained leadership trusts nothing it remembered. Invariant: a cursor is
//! committed only after the occurrences up to it were confirmed published (or deliberately
//! skipped: paused, or outside the catch-up policy), and only by the current term (the
//! store fences it).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use cronq_shared::broker::{Broker, Outgoing};
use cronq_shared::config::Config;
use cronq_shared::control::{Commit, Control, ControlError, Request};
use cronq_shared::lease::{Lease, Term};
use cronq_shared::names::JobName;
use tokio::sync::watch;
use tokio::time::{Instant, sleep, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// How often the leader reads pauses and requests at most: an operator's pause or trigger
/// takes effect within about a second (or one `[leader] retry`, if shorter).
const CONTROL_POLL: Duration = Duration::from_secs(1);

use crate::leader::{Leadership, lost};
use crate::publisher::{Abandoned, publish_confirmed, publish_ready_confirmed, while_leading};
use crate::term::{Cursor, Leading};
use crate::traces::Publishing;

/// How long before a fire instant the leader wakes to work out what is due and build its
/// messages (for 10,000 jobs due together, tens of milliseconds), so that at the instant
/// only the publishing is left.
pub const PREPARE_AHEAD: Duration = Duration::from_millis(200);

/// At most this many messages go into one confirmed publish (and one cursor commit), so a
/// million jobs firing together stream out in bounded batches.
pub const PUBLISH_BATCH: usize = 1_000;

/// The leader's loop; idle (waiting for leadership) on a standby.
pub struct Scheduler {
    broker: Arc<dyn Broker>,
    lease: Arc<dyn Lease>,
    control: Control,
    config: watch::Receiver<Arc<Config>>,
    leadership: watch::Receiver<Option<Leadership>>,
}

impl Scheduler {
    /// A scheduler publishing through `broker`, led by `leadership`, recording each term
    /// it takes over in `lease`.
    pub fn new(
        broker: Arc<dyn Broker>,
        lease: Arc<dyn Lease>,
        control: Control,
        config: watch::Receiver<Arc<Config>>,
        leadership: watch::Receiver<Option<Leadership>>,
    ) -> Self {
        Self {
            broker,
            lease,
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
        let leadership = &self.leadership;
        while_leading("declare queues", leadership, epoch, token, || {
            broker.declare(&queues)
        })
        .await?;
        let control = self.control.clone();
        let cursors = while_leading("read cursors", leadership, epoch, token, || {
            control.cursors()
        })
        .await?;
        let paused =
            while_leading("read pauses", leadership, epoch, token, || control.paused()).await?;
        let now = Utc::now();
        let keep = config.longest_retention();
        let lease = Arc::clone(&self.lease);
        let planning = Instant::now();
        let (mut lead, catchup, moved) = Leading::take_over(
            term.clone(),
            config,
            &cursors,
            paused.into_keys().collect(),
            now,
        );
        let planned_in = planning.elapsed();
        // The term, from the instant its catch-up was planned at: the accounting judges
        // what no leader published by the same rule from the same instant.
        while_leading("record the term", leadership, epoch, token, || {
            lease.begin(&term, now, keep)
        })
        .await?;
        // A million cursors are ≈ 100 MB: not kept for the whole term.
        drop(cursors);
        info!(
            epoch,
            jobs = lead.jobs(),
            catchup = catchup.len(),
            planned_ms = u64::try_from(planned_in.as_millis()).unwrap_or(u64::MAX),
            "taking over: publishing catch-up, then scheduling"
        );
        for chunk in catchup.chunks(PUBLISH_BATCH) {
            publish_confirmed(&self.broker, chunk, &self.leadership, epoch, token).await?;
        }
        lead.uncommitted.cursors.extend(moved);
        self.commit(&mut lead).await?;

        let mut control_at = Instant::now();
        // A closed config channel (no reloader) would make `changed()` ready forever.
        let mut reloadable = true;
        loop {
            // One timer for all jobs: sleep until shortly before the earliest fire (`fire`
            // prepares what is due, then waits for the instant itself).
            let fire_in = lead.timer.next_fire().map(|f| {
                (f - Utc::now())
                    .to_std()
                    .unwrap_or_default()
                    .saturating_sub(PREPARE_AHEAD)
            });
            let mut leadership = self.leadership.clone();
            tokio::select! {
                biased;
                () = token.cancelled() => return Err(Abandoned::Cancelled),
                () = lost(&mut leadership, epoch) => return Err(Abandoned::LostLeadership),
                changed = self.config.changed(), if reloadable => match changed {
                    Ok(()) => self.apply_reload(&mut lead, token).await?,
                    Err(_) => reloadable = false,
                },
                () = sleep(fire_in.unwrap_or(Duration::from_secs(3600))), if fire_in.is_some() => {
                    self.fire(&mut lead, token).await?;
                }
                () = sleep_until(control_at) => {
                    let waiting = self.poll_control(&mut lead, token).await?;
                    control_at = Instant::now() + lead.config.leader.retry.min(CONTROL_POLL);
                    // A trigger for a later instant is published at that instant, not at
                    // the next poll after it (1 ms past it, as `fire` does).
                    if let Some(at) = waiting
                        && let Ok(wait) = (at - Utc::now()).to_std()
                    {
                        control_at = control_at.min(Instant::now() + wait + Duration::from_millis(1));
                    }
                }
            }
        }
    }

    /// Applies the latest config: declares its queues, then updates the job table.
    async fn apply_reload(
        &mut self,
        lead: &mut Leading,
        token: &CancellationToken,
    ) -> Result<(), Abandoned> {
        let new = self.config.borrow_and_update().clone();
        let queues = new.queues();
        let broker = self.broker.clone();
        let epoch = lead.term.epoch;
        while_leading("declare queues", &self.leadership, epoch, token, || {
            broker.declare(&queues)
        })
        .await?;
        lead.reload(new, Utc::now());
        self.commit(lead).await
    }

    /// Publishes everything due at the timer's next fire instant, all batches in flight at
    /// once (the broker confirms a pipelined burst sooner than the same messages batch
    /// after batch: the precision bench), then commits the cursors of them all. Entered up
    /// to [`PREPARE_AHEAD`] before the instant: what is due is worked out and its messages
    /// built for the wire first ([`Broker::ready`]: encoded, with their properties), then
    /// it waits for the instant (1 ms past it: wall clock and monotonic clock may disagree
    /// slightly), so that only stamping `published_at` (the instant the publishing starts,
    /// which the run history's publish lateness is read from) and sending are left then;
    /// nothing is published before its instant. Should one batch be abandoned, no cursor
    /// moves: the next leader publishes the confirmed ones again, and the consumers'
    /// idempotency records acknowledge those copies without running them.
    async fn fire(
        &mut self,
        lead: &mut Leading,
        token: &CancellationToken,
    ) -> Result<(), Abandoned> {
        let epoch = lead.term.epoch;
        let Some(instant) = lead.timer.next_fire() else {
            return Ok(());
        };
        let due = lead.take_due(instant.max(Utc::now()));
        let (messages, cursors): (Vec<Option<Outgoing>>, Vec<Cursor>) = due.into_iter().unzip();
        let published = messages.iter().flatten().count();
        let mut messages = messages.into_iter().flatten().peekable();
        let publish_at = instant + chrono::TimeDelta::milliseconds(1);
        let mut batches = Vec::new();
        while messages.peek().is_some() {
            let mut batch: Vec<Outgoing> = messages.by_ref().take(PUBLISH_BATCH).collect();
            // The traceparents go in before the bodies are built.
            let spans = Publishing::start(&mut batch, Some(publish_at));
            batches.push((self.broker.ready(batch), spans));
        }
        if let Ok(wait) = (publish_at - Utc::now()).to_std()
            && token.run_until_cancelled(sleep(wait)).await.is_none()
        {
            return Err(Abandoned::Cancelled);
        }
        let now = Utc::now();
        let (broker, leadership) = (&self.broker, &self.leadership);
        let confirmed = futures_util::future::try_join_all(batches.into_iter().map(
            |(batch, spans)| async move {
                publish_ready_confirmed(broker, &batch, now, leadership, epoch, token, spans).await
            },
        ))
        .await?;
        fired(
            instant,
            now,
            confirmed.into_iter().flatten().max(),
            published,
        );
        lead.uncommitted.cursors.extend(cursors);
        self.commit(lead).await
    }

    /// Reads pause flags and carries out pending requests that are due. Returns the
    /// earliest instant a waiting request (`cronq trigger --at`) is due at.
    async fn poll_control(
        &mut self,
        lead: &mut Leading,
        token: &CancellationToken,
    ) -> Result<Option<DateTime<Utc>>, Abandoned> {
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
        let now = Utc::now();
        let waiting = requests
            .iter()
            .filter_map(Request::not_before)
            .filter(|at| *at > now)
            .min();
        if !requests.is_empty() {
            let (batch, settle) = lead.requests(requests, now);
            let epoch = lead.term.epoch;
            for chunk in batch.chunks(PUBLISH_BATCH) {
                publish_confirmed(&self.broker, chunk, &self.leadership, epoch, token).await?;
            }
            lead.uncommitted.settle.extend(settle);
        }
        self.commit(lead).await?;
        Ok(waiting)
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
}

/// Logs (at debug) one fire: how many occurrences due at `instant` were `published`, how
/// late their publishing started (`started`) and how late their last confirm came
/// (`confirmed`): `cronq-bench herd` reads a herd's time from this line.
fn fired(
    instant: DateTime<Utc>,
    started: DateTime<Utc>,
    confirmed: Option<DateTime<Utc>>,
    published: usize,
) {
    let ms = |t: DateTime<Utc>| (t - instant).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e3;
    debug!(
        instant = %instant.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        occurrences = published,
        start_ms = ms(started),
        last_confirm_ms = confirmed.map(ms),
        "fired",
    );
}
