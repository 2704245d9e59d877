//! The leader's work: on taking over, catch up per job; then sleep on one timer until
//! shortly before the next fire, build what is due, publish it at the instant in confirmed
//! batches, and advance the cursors (fenced).
//! Every `retry` it also reads pause flags and carries out trigger and backfill requests
//! (a trigger `--at` a later instant waits in the store, and the next poll is then no
//! later than that instant).
//!
//! A *herd* (more jobs due at one instant than one batch holds) is published in a task of
//! its own, over the broker's connection for herds ([`Broker::apart`]), while the loop goes
//! on to the next instants: the broker's flow control holds back a connection behind its
//! backlog, so seconds of a herd's confirms hold up neither the next ticks' publishing nor
//! their confirms. At most one herd is in flight; a second one waits for the first.
//!
//! Owns: the loop around one term's state (`term`: job table, timer, pauses, uncommitted
//! cursors) and the term's herd in flight. Everything is rebuilt from the control store on
//! each new term, so a producer that lost and regained leadership trusts nothing it
//! remembered. Invariant: a cursor is committed only after the occurrences up to it were
//! confirmed published (or deliberately skipped: paused, or outside the catch-up policy),
//! and only by the current term (the store fences it): while a herd is in flight no cursor
//! is committed (settled requests are), so no later occurrence's cursor moves past a
//! herd's unconfirmed one.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use cronq_shared::blocking::off_runtime;
use cronq_shared::broker::{Broker, Outgoing, Ready};
use cronq_shared::config::Config;
use cronq_shared::control::{Commit, Control, ControlError, Request};
use cronq_shared::lease::{Lease, Term};
use cronq_shared::names::JobName;
use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinError;
use tokio::time::{Instant, sleep, sleep_until};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
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

/// At most this many messages go into one confirmed publish, so a million jobs firing
/// together stream out in bounded batches; a fire of more than one batch is a herd.
pub const PUBLISH_BATCH: usize = 1_000;

/// The leader's loop; idle (waiting for leadership) on a standby.
pub struct Scheduler {
    broker: Arc<dyn Broker>,
    /// Where herds are published: the broker's connection for herds, or `broker` itself
    /// when it has none.
    herds: Arc<dyn Broker>,
    /// The herd of this term still publishing, if any.
    herd: Option<Herd>,
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
            herds: broker.apart().unwrap_or_else(|| Arc::clone(&broker)),
            herd: None,
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

    /// Leads one term until it ends; a herd of it still publishing is given up then (its
    /// cursors were not committed: the next leader publishes it again).
    async fn lead(&mut self, term: Term, token: &CancellationToken) -> Abandoned {
        let end = match self.lead_inner(term, token).await {
            Ok(never) => match never {},
            Err(end) => end,
        };
        if let Some(herd) = self.herd.take() {
            warn!(
                scheduled_at = %herd.instant,
                jobs = herd.published,
                "stopped leading while a herd was still publishing: its cursors were not committed, the next leader publishes it again (the consumers run each occurrence once)"
            );
        }
        end
    }

    async fn lead_inner(
        &mut self,
        term: Term,
        token: &CancellationToken,
    ) -> Result<std::convert::Infallible, Abandoned> {
        let epoch = term.epoch;
        let config = self.config.borrow_and_update().clone();
        // Declared over the connection for herds, which this opens before the first herd
        // is due (the declarations are the broker's, whichever connection makes them).
        let herds = self.herds.clone();
        let queues = config.queues();
        let leadership = &self.leadership;
        while_leading("declare queues", leadership, epoch, token, || {
            herds.declare(&queues)
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
        // Planning keeps every core busy (`term`; about 0.2-0.5 s at a million jobs, 1.6 s
        // at ten million): done off the runtime's threads, so that the lease's renewals
        // and the admin server go on meanwhile. The cursors (≈ 100 MB at a million jobs)
        // are dropped there too.
        let planned = off_runtime({
            let (term, paused) = (term.clone(), paused.into_keys().collect());
            move || Leading::take_over(term, config, &cursors, paused, now)
        })
        .await;
        let Some((mut lead, catchup, moved)) = planned else {
            return Err(Abandoned::Cancelled);
        };
        let planned_in = planning.elapsed();
        // The term, from the instant its catch-up was planned at: the accounting judges
        // what no leader published by the same rule from the same instant.
        while_leading("record the term", leadership, epoch, token, || {
            lease.begin(&term, now, keep)
        })
        .await?;
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
                done = confirmed(&mut self.herd), if self.herd.is_some() => {
                    self.herd_done(&mut lead, done).await?;
                }
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

    /// Publishes everything due at the timer's next fire instant. Entered up to
    /// [`PREPARE_AHEAD`] before the instant: what is due is worked out and its messages
    /// built for the wire first ([`Broker::ready`]: encoded, with their properties), batch
    /// by batch, until the instant (1 ms past it: wall clock and monotonic clock may
    /// disagree slightly); then only stamping `published_at` (the instant the publishing
    /// starts, which the run history's publish lateness is read from) and sending are left
    /// for what was built. Nothing is published before its instant.
    ///
    /// One batch at most is published here and confirmed before the loop goes on; its
    /// cursors are committed then (or with the herd in flight, once it is done). A herd
    /// goes to a task of its own ([`Herd`]), each batch sent as it is built, all in flight
    /// at once (the broker confirms a pipelined burst sooner than the same messages batch
    /// after batch: the precision bench). Should one batch be abandoned, no cursor moves:
    /// the next leader publishes the confirmed ones again, and the consumers' idempotency
    /// records acknowledge those copies without running them.
    async fn fire(
        &mut self,
        lead: &mut Leading,
        token: &CancellationToken,
    ) -> Result<(), Abandoned> {
        let epoch = lead.term.epoch;
        let Some(instant) = lead.timer.next_fire() else {
            return Ok(());
        };
        let publish_at = instant + chrono::TimeDelta::milliseconds(1);
        let mut fire = Fire {
            now: instant.max(Utc::now()),
            cursors: Vec::new(),
            published: 0,
            done: false,
        };
        let mut ahead = Vec::new();
        while let Some(batch) = fire.next_batch(lead) {
            ahead.push(made_ready(&self.broker, batch, publish_at));
            if Utc::now() >= publish_at {
                break;
            }
            // A herd's batches take up to PREPARE_AHEAD to build: the other tasks of this
            // runtime thread (the admin server's requests, a herd still confirming) run
            // between them rather than wait for the whole.
            tokio::task::yield_now().await;
        }
        if let Ok(wait) = (publish_at - Utc::now()).to_std()
            && token.run_until_cancelled(sleep(wait)).await.is_none()
        {
            return Err(Abandoned::Cancelled);
        }
        let started = Utc::now();
        if fire.done && ahead.len() <= 1 {
            let confirmed = match ahead.pop() {
                Some((batch, spans)) => {
                    publish_ready_confirmed(
                        &self.broker,
                        &batch,
                        started,
                        &self.leadership,
                        epoch,
                        token,
                        spans,
                    )
                    .await?
                }
                None => None,
            };
            fired(instant, started, confirmed, fire.published);
            lead.uncommitted.cursors.extend(fire.cursors);
            return self.commit(lead).await;
        }
        // One herd in flight at a time: an earlier one is waited for first.
        if self.herd.is_some() {
            let done = confirmed(&mut self.herd).await;
            self.herd_done(lead, done).await?;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        for (batch, spans) in ahead {
            let _ = tx.send(Batch::Ready(batch, spans));
        }
        let task = AbortOnDropHandle::new(tokio::spawn(publish_herd(
            Arc::clone(&self.herds),
            self.leadership.clone(),
            token.clone(),
            epoch,
            (publish_at, started),
            rx,
        )));
        // What was not taken by the instant is taken now, each batch sent on as it is, to
        // be built for the wire by the herd's task: the loop is soon free for the next
        // instants.
        while let Some(batch) = fire.next_batch(lead) {
            let _ = tx.send(Batch::Due(batch));
            // The herd's task (spawned onto this thread) publishes what is sent so far
            // while the rest is taken, and the admin server answers meanwhile.
            tokio::task::yield_now().await;
        }
        self.herd = Some(Herd {
            task,
            instant,
            started,
            published: fire.published,
            cursors: fire.cursors,
        });
        Ok(())
    }

    /// Ends the herd in flight once its publishing `done`: logs its fire, and commits its
    /// cursors with those held back while it was in flight.
    async fn herd_done(
        &mut self,
        lead: &mut Leading,
        done: Result<Result<Option<DateTime<Utc>>, Abandoned>, JoinError>,
    ) -> Result<(), Abandoned> {
        let Some(herd) = self.herd.take() else {
            return Ok(());
        };
        let confirmed = match done {
            Ok(confirmed) => confirmed?,
            Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
            Err(_) => return Err(Abandoned::Cancelled),
        };
        fired(herd.instant, herd.started, confirmed, herd.published);
        let held = std::mem::replace(&mut lead.uncommitted.cursors, herd.cursors);
        lead.uncommitted.cursors.extend(held);
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
    /// for the next try; a refused fence ends the term. With a herd in flight the cursors
    /// are kept until it is done; the settlements are written (a request carried out is
    /// not carried out again at the next poll).
    async fn commit(&self, lead: &mut Leading) -> Result<(), Abandoned> {
        let held = match self.herd {
            Some(_) => std::mem::take(&mut lead.uncommitted.cursors),
            None => Vec::new(),
        };
        let written = self.write(lead).await;
        lead.uncommitted.cursors.extend(held);
        written
    }

    async fn write(&self, lead: &mut Leading) -> Result<(), Abandoned> {
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

/// A fire of more than one batch, publishing in a task of its own; its cursors are
/// committed once all of it is confirmed.
struct Herd {
    /// The publishing: when its last confirm arrived. Dropping it (the term ended, and
    /// with it the loop that would commit the cursors) stops the publishing.
    task: AbortOnDropHandle<Result<Option<DateTime<Utc>>, Abandoned>>,
    instant: DateTime<Utc>,
    started: DateTime<Utc>,
    published: usize,
    cursors: Vec<Cursor>,
}

/// Resolves when the herd in flight is done publishing; pending while there is none.
async fn confirmed(
    herd: &mut Option<Herd>,
) -> Result<Result<Option<DateTime<Utc>>, Abandoned>, JoinError> {
    match herd {
        Some(herd) => (&mut herd.task).await,
        None => std::future::pending().await,
    }
}

/// One fire being taken: what is due at `now`, batch by batch.
struct Fire {
    now: DateTime<Utc>,
    /// The cursors of every occurrence taken so far (published or skipped).
    cursors: Vec<Cursor>,
    /// How many messages were taken so far.
    published: usize,
    /// Whether nothing more is due.
    done: bool,
}

impl Fire {
    /// The next batch of at most [`PUBLISH_BATCH`] messages due; `None` once nothing more
    /// is due.
    fn next_batch(&mut self, lead: &mut Leading) -> Option<Vec<Outgoing>> {
        while !self.done {
            let due = lead.take_due(self.now, PUBLISH_BATCH);
            self.done = due.len() < PUBLISH_BATCH;
            let mut batch = Vec::with_capacity(due.len());
            for (message, cursor) in due {
                batch.extend(message);
                self.cursors.push(cursor);
            }
            // All of them paused: nothing to send, look further.
            if !batch.is_empty() {
                self.published += batch.len();
                return Some(batch);
            }
        }
        None
    }
}

/// `batch` made ready by `broker` ([`Broker::ready`]) to be published at `publish_at`,
/// with its publish spans.
fn made_ready(
    broker: &Arc<dyn Broker>,
    mut batch: Vec<Outgoing>,
    publish_at: DateTime<Utc>,
) -> (Ready, Option<Publishing>) {
    // The traceparents go in before the bodies are built.
    let spans = Publishing::start(&mut batch, Some(publish_at));
    (broker.ready(batch), spans)
}

/// A batch of a herd: made ready before its instant, or taken after it (made ready by the
/// herd's task).
enum Batch {
    Ready(Ready, Option<Publishing>),
    Due(Vec<Outgoing>),
}

/// Publishes each batch `batches` brings as it comes, all in flight at once, each message
/// published at `at` (planned at `publish_at`), until the sender is dropped and every
/// batch is confirmed. Returns when the last confirm arrived.
///
/// # Errors
/// [`Abandoned`] as soon as one batch is given up.
async fn publish_herd(
    broker: Arc<dyn Broker>,
    leadership: watch::Receiver<Option<Leadership>>,
    token: CancellationToken,
    epoch: u64,
    (publish_at, at): (DateTime<Utc>, DateTime<Utc>),
    mut batches: mpsc::UnboundedReceiver<Batch>,
) -> Result<Option<DateTime<Utc>>, Abandoned> {
    let (broker, leadership, token) = (&broker, &leadership, &token);
    let mut publishing = FuturesUnordered::new();
    let (mut open, mut last) = (true, None);
    loop {
        tokio::select! {
            batch = batches.recv(), if open => {
                let (ready, spans) = match batch {
                    Some(Batch::Ready(ready, spans)) => (ready, spans),
                    Some(Batch::Due(batch)) => made_ready(broker, batch, publish_at),
                    None => {
                        open = false;
                        continue;
                    }
                };
                publishing.push(async move {
                    publish_ready_confirmed(broker, &ready, at, leadership, epoch, token, spans)
                        .await
                });
            }
            Some(done) = publishing.next(), if !publishing.is_empty() => last = last.max(done?),
            else => return Ok(last),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::fmt::Write as _;
    use std::path::Path;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};

    use async_trait::async_trait;
    use cronq_memory::{MemoryBroker, MemoryControl, MemoryLease};
    use cronq_shared::broker::{BrokerError, DeadLetter, Delivery, Outgoing, Pick};
    use cronq_shared::key::OccurrenceKey;
    use cronq_shared::names::QueueName;

    use super::*;

    /// Jobs due together every fourth second: a herd of two batches and a half.
    const HERD: usize = PUBLISH_BATCH * 5 / 2;

    /// A batch made ready: its instant, and the turns counted by then.
    type Readied = (DateTime<Utc>, u64);

    /// The turns counted at each batch made ready of the first instant after `after` of
    /// which `batches` or more were.
    fn herd_turns(readied: &[Readied], after: DateTime<Utc>, batches: usize) -> Option<Vec<u64>> {
        readied
            .iter()
            .filter(|(at, _)| *at > after)
            .find_map(|(at, _)| {
                let herd: Vec<u64> = readied
                    .iter()
                    .filter(|(other, _)| other == at)
                    .map(|(_, turns)| *turns)
                    .collect();
                (herd.len() >= batches).then_some(herd)
            })
    }

    /// Asserts that the counting task ran between the first and the last batch (`turns`
    /// counted at each) while `what`, then stops the leader and the count.
    async fn others_ran(
        turns: &[u64],
        what: &str,
        leader: Leader,
        counting: tokio::task::JoinHandle<()>,
    ) {
        assert!(
            turns.first() < turns.last(),
            "no other task ran while {what}: turns at each batch {turns:?}"
        );
        leader.token.cancel();
        leader.running.await.unwrap();
        counting.abort();
    }

    /// A task of the test's thread that only counts its turns in `turns` and yields.
    fn count_turns(turns: Arc<AtomicU64>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                turns.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        })
    }

    /// The memory broker, and what was confirmed published through it; on its connection
    /// for herds ([`Broker::apart`]) each publish is `held` until `open` says so.
    #[derive(Clone)]
    struct Gated {
        memory: MemoryBroker,
        published: Arc<Mutex<Vec<OccurrenceKey>>>,
        held: Arc<Mutex<Vec<OccurrenceKey>>>,
        open: watch::Receiver<bool>,
        herds: bool,
        /// Counted by a task of the test's that only counts and yields.
        turns: Arc<AtomicU64>,
        /// Per batch made ready on the main connection: its instant and the turns then.
        readied: Arc<Mutex<Vec<Readied>>>,
        /// The same for the batches the herd's task made ready (taken after the instant).
        readied_late: Arc<Mutex<Vec<Readied>>>,
        /// How long making a batch ready on the main connection takes (the thread held).
        slow: Duration,
    }

    impl Gated {
        fn new(open: watch::Receiver<bool>) -> Self {
            Self {
                memory: MemoryBroker::new(),
                published: Arc::default(),
                held: Arc::default(),
                open,
                herds: false,
                turns: Arc::default(),
                readied: Arc::default(),
                readied_late: Arc::default(),
                slow: Duration::ZERO,
            }
        }
    }

    #[async_trait]
    impl Broker for Gated {
        async fn declare(&self, queues: &BTreeSet<QueueName>) -> Result<(), BrokerError> {
            self.memory.declare(queues).await
        }

        async fn publish(&self, batch: &[Outgoing]) -> Result<(), BrokerError> {
            if self.herds {
                let keys = batch.iter().map(|o| o.occurrence.key.clone());
                self.held.lock().unwrap().extend(keys);
                let _ = self.open.clone().wait_for(|open| *open).await;
            }
            self.memory.publish(batch).await?;
            let keys = batch.iter().map(|o| o.occurrence.key.clone());
            self.published.lock().unwrap().extend(keys);
            Ok(())
        }

        fn ready(&self, messages: Vec<Outgoing>) -> Ready {
            if let Some(at) = messages
                .first()
                .and_then(|m| m.occurrence.key.scheduled_at())
            {
                let turns = self.turns.load(Ordering::Relaxed);
                let readied = if self.herds {
                    &self.readied_late
                } else {
                    std::thread::sleep(self.slow);
                    &self.readied
                };
                readied.lock().unwrap().push((at, turns));
            }
            Broker::ready(&self.memory, messages)
        }

        fn apart(&self) -> Option<Arc<dyn Broker>> {
            Some(Arc::new(Self {
                herds: true,
                ..self.clone()
            }))
        }

        async fn consume(
            &self,
            queues: &[QueueName],
            prefetch: u16,
            token: CancellationToken,
        ) -> Result<mpsc::Receiver<Delivery>, BrokerError> {
            self.memory.consume(queues, prefetch, token).await
        }

        async fn dead_letter(&self, letter: &DeadLetter) -> Result<(), BrokerError> {
            self.memory.dead_letter(letter).await
        }

        async fn dead_letters(&self) -> Result<Vec<DeadLetter>, BrokerError> {
            self.memory.dead_letters().await
        }

        async fn replay(
            &self,
            select: &(dyn for<'l> Fn(&'l DeadLetter) -> Pick + Send + Sync),
        ) -> Result<usize, BrokerError> {
            self.memory.replay(select).await
        }
    }

    fn published_at(published: &Mutex<Vec<OccurrenceKey>>, job: &str) -> Vec<DateTime<Utc>> {
        let published = published.lock().unwrap();
        let mut at: Vec<_> = published
            .iter()
            .filter(|k| k.job().as_str() == job)
            .filter_map(OccurrenceKey::scheduled_at)
            .collect();
        at.sort();
        at
    }

    async fn eventually<T>(what: &str, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(found) = probe().await {
                return found;
            }
            assert!(Instant::now() < deadline, "waited 15 s for {what}");
            sleep(Duration::from_millis(20)).await;
        }
    }

    /// A running leader of the herd's config ([`HERD`] jobs `@every 4s` and a `tick`
    /// `@every 1s`), on the memory lease and control store.
    struct Leader {
        control: Control,
        token: CancellationToken,
        running: tokio::task::JoinHandle<()>,
        /// Held for the test's whole life: dropped, the leadership channel closes and the
        /// leader stops publishing (so bind the `Leader`, do not destructure it with `..`).
        _leadership: watch::Sender<Option<Leadership>>,
        _config: watch::Sender<Arc<Config>>,
    }

    async fn lead(broker: Gated) -> Leader {
        let mut text = String::from(
            "[[job]]\nname = \"tick\"\nschedule = \"@every 1s\"\ncommand = [\"true\"]\n",
        );
        for i in 0..HERD {
            let _ = write!(
                text,
                "[[job]]\nname = \"herd{i}\"\nschedule = \"@every 4s\"\ncommand = [\"true\"]\n"
            );
        }
        let config = Arc::new(Config::from_toml(&text, Path::new("cronq.toml")).unwrap());
        let lease = MemoryLease::new();
        let control = Control::new(MemoryControl::new(&lease));
        let term = lease
            .acquire("test", Duration::from_secs(600))
            .await
            .unwrap()
            .unwrap();
        let (leadership_tx, leadership) = watch::channel(Some(Leadership {
            term,
            valid_until: Instant::now() + Duration::from_secs(600),
            since: Utc::now(),
        }));
        let (config_tx, config_rx) = watch::channel(config);
        let scheduler = Scheduler::new(
            Arc::new(broker),
            Arc::new(lease),
            control.clone(),
            config_rx,
            leadership,
        );
        let token = CancellationToken::new();
        let running = tokio::spawn(scheduler.run(token.clone()));
        Leader {
            control,
            token,
            running,
            _leadership: leadership_tx,
            _config: config_tx,
        }
    }

    /// A herd's batches are built ahead of its instant with the other tasks of the
    /// runtime's thread run meanwhile (the admin server answers while a herd is built),
    /// not once the whole herd is built. On one thread, so that only the leader's yield
    /// lets the counting task run.
    #[tokio::test(flavor = "current_thread")]
    async fn a_herd_is_built_with_the_other_tasks_of_its_thread_run_meanwhile() {
        let (_open_tx, open) = watch::channel(true);
        let broker = Gated::new(open);
        let (turns, readied) = (Arc::clone(&broker.turns), Arc::clone(&broker.readied));
        let counting = count_turns(turns);
        let leader = lead(broker).await;
        // An instant whose three batches were all built ahead of it, by the leader's loop.
        let turns = eventually("a herd built whole ahead of its instant", async || {
            let readied = readied.lock().unwrap();
            // The first fire may have come too soon after the take-over to be built whole.
            herd_turns(&readied, readied.first()?.0, 3)
        })
        .await;
        others_ran(&turns, "the herd was built", leader, counting).await;
    }

    /// The batches of a herd not built by its instant are taken one at a time, with the
    /// other tasks of the runtime's thread run between them (the herd's own task, which
    /// builds and publishes each as it comes, and the admin server), not all taken before
    /// any of them goes out. Building a batch ahead takes longer than the leader wakes
    /// before the instant ([`PREPARE_AHEAD`]), so one batch at most is built ahead and the
    /// others are taken after the instant. On one thread, so that only the leader's yield
    /// lets the others run.
    #[tokio::test(flavor = "current_thread")]
    async fn a_herd_taken_after_its_instant_lets_the_other_tasks_of_its_thread_run() {
        let (_open_tx, open) = watch::channel(true);
        let broker = Gated {
            slow: PREPARE_AHEAD + Duration::from_millis(50),
            ..Gated::new(open)
        };
        let (turns, late) = (Arc::clone(&broker.turns), Arc::clone(&broker.readied_late));
        let counting = count_turns(turns);
        let leader = lead(broker).await;
        // An instant of which the herd's task built two batches or more.
        let turns = eventually("a herd's batches built after its instant", async || {
            herd_turns(&late.lock().unwrap(), DateTime::<Utc>::MIN_UTC, 2)
        })
        .await;
        others_ran(&turns, "the herd's batches were taken", leader, counting).await;
    }

    /// A herd's publishing, held unconfirmed on its own connection, holds back neither the
    /// next second's tick nor its publish; and no cursor moves past the herd's instant
    /// until the whole herd is confirmed, then every one of its jobs is published once.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_herd_in_flight_delays_no_tick_and_holds_back_every_cursor() {
        let (open_tx, open) = watch::channel(false);
        let broker = Gated::new(open);
        let (published, held) = (Arc::clone(&broker.published), Arc::clone(&broker.held));
        let leader = lead(broker).await;
        let control = &leader.control;

        // The first herd is built and held, with the tick of its instant in it.
        let herd_at = eventually("the first herd to be held", async || {
            let held = held.lock().unwrap();
            (held.len() == HERD + 1).then(|| held[0].scheduled_at().unwrap())
        })
        .await;
        assert_eq!(published_at(&held, "tick"), [herd_at]);
        // The next second's tick is published meanwhile, and its cursor stays behind the
        // herd's instant: the herd's occurrence of it is not confirmed.
        let next = herd_at + chrono::TimeDelta::seconds(1);
        eventually("the next second's tick", async || {
            published_at(&published, "tick")
                .contains(&next)
                .then_some(())
        })
        .await;
        // A trigger is carried out, and settled, once.
        let tick = JobName::new("tick").unwrap();
        let manual = control.request_trigger(&tick, None).await.unwrap();
        eventually("the trigger to be settled", async || {
            control.pending().await.unwrap().is_empty().then_some(())
        })
        .await;
        sleep(CONTROL_POLL * 2).await;
        let copies = published
            .lock()
            .unwrap()
            .iter()
            .filter(|k| **k == manual)
            .count();
        assert_eq!(copies, 1, "the trigger {manual} published {copies} times");
        assert!(
            published_at(&published, "herd0").is_empty(),
            "the herd is held"
        );
        let cursors = control.cursors().await.unwrap();
        for job in ["tick", "herd0"] {
            let cursor = cursors.get(&JobName::new(job).unwrap());
            assert!(
                cursor.is_none_or(|c| *c < herd_at),
                "{job}: its cursor {cursor:?} moved to the herd's instant {herd_at} unconfirmed"
            );
        }

        open_tx.send_replace(true);
        // Once it is confirmed, its cursors and the next second's move together.
        eventually("the herd's cursors to be committed", async || {
            let cursors = control.cursors().await.unwrap();
            let herd = (0..HERD).all(|i| {
                let job = JobName::new(format!("herd{i}")).unwrap();
                cursors.get(&job).is_some_and(|at| *at >= herd_at)
            });
            let tick = cursors.get(&JobName::new("tick").unwrap());
            (herd && tick.is_some_and(|at| *at >= next)).then_some(())
        })
        .await;
        leader.token.cancel();
        leader.running.await.unwrap();

        // Every herd job published at the herd's instant once.
        for i in 0..HERD {
            let at = published_at(&published, &format!("herd{i}"));
            assert_eq!(
                at.iter().filter(|at| **at == herd_at).count(),
                1,
                "herd{i}: {at:?}"
            );
            assert_eq!(at.first(), Some(&herd_at), "herd{i}: {at:?}");
        }
    }
}
