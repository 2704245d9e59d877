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
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use cronq_shared::broker::{Broker, Ready};
use cronq_shared::config::Config;
use cronq_shared::control::{Commit, Control, ControlError, Request};
use cronq_shared::lease::{Lease, Term};
use cronq_shared::names::JobName;
use futures_util::StreamExt as _;
use futures_util::stream::{FuturesOrdered, FuturesUnordered};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
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
/// only the publishing is left; what a herd has not built by then is built while its first
/// batches are in flight (`Scheduler::fire`).
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
        // The fires still publishing, oldest first: the loop goes on to the next instants
        // meanwhile, and commits each fire's cursors once it and every older one are done.
        let mut publishing: FuturesOrdered<InFlight> = FuturesOrdered::new();
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
                Some(done) = publishing.next(), if !publishing.is_empty() => {
                    lead.uncommitted.cursors.extend(done?);
                    self.commit(&mut lead).await?;
                }
                changed = self.config.changed(), if reloadable => match changed {
                    Ok(()) => self.apply_reload(&mut lead, token).await?,
                    Err(_) => reloadable = false,
                },
                () = sleep(fire_in.unwrap_or(Duration::from_secs(3600))), if fire_in.is_some() => {
                    publishing.push_back(self.fire(&mut lead, token).await?);
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
    /// after batch: the precision bench). Entered up to [`PREPARE_AHEAD`] before the
    /// instant: what is due is worked out and its messages built for the wire first
    /// ([`Broker::ready`]: encoded, with their properties), batch by batch, until the
    /// instant (1 ms past it: wall clock and monotonic clock may disagree slightly); then
    /// only stamping `published_at` (the instant the publishing starts, which the run
    /// history's publish lateness is read from) and sending are left for what was built.
    /// Nothing is published before its instant. A herd (many jobs due together) that takes
    /// longer to build than [`PREPARE_AHEAD`] goes out as it is built: its first batches
    /// are in flight while the rest is built.
    ///
    /// The publishing runs in a task of its own, so that a herd (seconds of confirms) does
    /// not hold up the next instants: returned is that task, as the cursors it moves once
    /// all its messages are confirmed; the loop commits them in the order of the fires.
    /// Should one batch be abandoned, no cursor of that fire or a later one moves: the next
    /// leader publishes the confirmed ones again, and the consumers' idempotency records
    /// acknowledge those copies without running them.
    async fn fire(
        &mut self,
        lead: &mut Leading,
        token: &CancellationToken,
    ) -> Result<InFlight, Abandoned> {
        let epoch = lead.term.epoch;
        let Some(instant) = lead.timer.next_fire() else {
            return Ok(Box::pin(std::future::ready(Ok(Vec::new()))));
        };
        let now = instant.max(Utc::now());
        let publish_at = instant + chrono::TimeDelta::milliseconds(1);
        let mut fire = Fire {
            now,
            publish_at,
            cursors: Vec::new(),
            published: 0,
        };
        let mut ahead = Vec::new();
        while Utc::now() < publish_at {
            match fire.next_batch(&self.broker, lead) {
                Some(batch) => ahead.push(batch),
                None => break,
            }
        }
        if let Ok(wait) = (publish_at - Utc::now()).to_std()
            && token.run_until_cancelled(sleep(wait)).await.is_none()
        {
            return Err(Abandoned::Cancelled);
        }
        let started = Utc::now();
        let (tx, rx) = mpsc::unbounded_channel();
        for batch in ahead {
            let _ = tx.send(batch);
        }
        let task = AbortOnDrop(tokio::spawn(publish_all(
            Arc::clone(&self.broker),
            self.leadership.clone(),
            token.clone(),
            epoch,
            started,
            rx,
        )));
        // What was not built by the instant is built now, each batch sent on as it is.
        while let Some(batch) = fire.next_batch(&self.broker, lead) {
            let _ = tx.send(batch);
            tokio::task::yield_now().await;
        }
        drop(tx);
        let Fire {
            cursors, published, ..
        } = fire;
        Ok(Box::pin(async move {
            let confirmed = task.finished().await?;
            fired(instant, started, confirmed, published);
            Ok(cursors)
        }))
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

/// One fire being built: what is due at `now`, built for `publish_at`, batch by batch.
struct Fire {
    now: DateTime<Utc>,
    publish_at: DateTime<Utc>,
    /// The cursors of every occurrence taken so far (published or skipped).
    cursors: Vec<Cursor>,
    /// How many messages were built so far.
    published: usize,
}

impl Fire {
    /// The next batch of at most [`PUBLISH_BATCH`] messages due, made ready
    /// ([`Broker::ready`]), with its publish spans; `None` once nothing more is due.
    fn next_batch(
        &mut self,
        broker: &Arc<dyn Broker>,
        lead: &mut Leading,
    ) -> Option<(Ready, Option<Publishing>)> {
        loop {
            let due = lead.take_due_at_most(self.now, PUBLISH_BATCH);
            if due.is_empty() {
                return None;
            }
            let mut batch = Vec::with_capacity(due.len());
            for (message, cursor) in due {
                batch.extend(message);
                self.cursors.push(cursor);
            }
            // All of them paused: nothing to send, look further.
            if batch.is_empty() {
                continue;
            }
            self.published += batch.len();
            // The traceparents go in before the bodies are built.
            let spans = Publishing::start(&mut batch, Some(self.publish_at));
            return Some((broker.ready(batch), spans));
        }
    }
}

/// Publishes each batch `batches` brings as it comes, all in flight at once, each message
/// published at `at`, until the sender is dropped and every batch is confirmed. Returns
/// when the last confirm arrived.
///
/// # Errors
/// [`Abandoned`] as soon as one batch is given up.
async fn publish_all(
    broker: Arc<dyn Broker>,
    leadership: watch::Receiver<Option<Leadership>>,
    token: CancellationToken,
    epoch: u64,
    at: DateTime<Utc>,
    mut batches: mpsc::UnboundedReceiver<(Ready, Option<Publishing>)>,
) -> Result<Option<DateTime<Utc>>, Abandoned> {
    let (broker, leadership, token) = (&broker, &leadership, &token);
    let mut publishing = FuturesUnordered::new();
    let (mut open, mut last) = (true, None);
    loop {
        tokio::select! {
            batch = batches.recv(), if open => match batch {
                Some((ready, spans)) => publishing.push(async move {
                    publish_ready_confirmed(broker, &ready, at, leadership, epoch, token, spans)
                        .await
                }),
                None => open = false,
            },
            Some(done) = publishing.next(), if !publishing.is_empty() => last = last.max(done?),
            else => return Ok(last),
        }
    }
}

/// A fire still publishing: the cursors it moves once all its messages are confirmed.
type InFlight = Pin<Box<dyn Future<Output = Result<Vec<Cursor>, Abandoned>> + Send>>;

/// A fire's publishing task, aborted when dropped (the term ended: the loop that would
/// commit its cursors is gone, so it must not publish on).
struct AbortOnDrop(JoinHandle<Result<Option<DateTime<Utc>>, Abandoned>>);

impl AbortOnDrop {
    /// What the task returned; its panic goes on to the caller.
    async fn finished(mut self) -> Result<Option<DateTime<Utc>>, Abandoned> {
        match (&mut self.0).await {
            Ok(done) => done,
            Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
            Err(_) => Err(Abandoned::Cancelled),
        }
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
