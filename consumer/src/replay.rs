//! `cronq dlq replay`: send selected dead letters back for execution under their original
//! key, without losing any if interrupted.
//!
//! Steps: list the dead-letter queue, folding copies of one dead run into one
//! ([`fold_copies`]: a consumer killed after dead-lettering a run but before acking it
//! leaves two letters for it); decide for each selected letter whether it can be
//! replayed (its body decodes, its job is still in the config, and, with a keyring, it is
//! sealed by one of its keys: a forged message is never laundered into a signed one); admit each replayable
//! key in the ledger ([`Ledger::admit_replay`]: a `failed` record becomes runnable again);
//! then let [`Broker::replay`] republish them
//! (trigger `replay`, attempt 1, fresh `published_at`, to the job's queue) and remove each
//! letter only after its republish was confirmed. Each dead run is replayed once: its
//! other copies are removed after that replay was confirmed ([`Pick::Remove`]).
//!
//! Why this is safe to interrupt and repeat: an admission without a replay leaves the letter in
//! the queue for the next run; a replay whose letter was not yet removed is republished
//! again next time under the same key, and the consumers' records let at most one copy
//! succeed (a `succeeded` record is never reset).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};

use cronq_shared::broker::{
    Broker, BrokerError, DeadLetter, DeadRun, Folded, Outgoing, Pick, bounded, fold_copies,
};
use cronq_shared::config::Config;
use cronq_shared::key::OccurrenceKey;
use cronq_shared::ledger::{Ledger, State};
use cronq_shared::message::{Occurrence, Trigger};
use cronq_shared::names::JobName;
use cronq_shared::signing::Keyring;
use cronq_shared::store::StoreError;

/// Which dead letters to replay. With nothing set, none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    /// Only this job's letters.
    pub job: Option<JobName>,
    /// Only this key's letters.
    pub key: Option<OccurrenceKey>,
    /// Every letter (narrowed by `job` and `key` when they are given too).
    pub all: bool,
}

impl Selector {
    /// Whether no selector was given (then nothing is selected).
    pub fn is_empty(&self) -> bool {
        !self.all && self.job.is_none() && self.key.is_none()
    }

    /// Whether `letter` is selected: it matches every given filter.
    pub fn matches(&self, letter: &DeadLetter) -> bool {
        if self.is_empty() {
            return false;
        }
        let job_ok = self
            .job
            .as_ref()
            .is_none_or(|j| letter.job.as_deref() == Some(j.as_str()));
        let key_ok = self
            .key
            .as_ref()
            .is_none_or(|k| letter.key.as_deref() == Some(k.to_string().as_str()));
        job_ok && key_ok
    }
}

/// What became of one selected letter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// `--dry-run`: it would be replayed.
    WouldReplay,
    /// Republished (confirmed) and removed from the dead-letter queue.
    Replayed,
    /// Left in the dead-letter queue, for this reason.
    Kept(String),
    /// It was no longer in the dead-letter queue when the replay walked it (another replay
    /// took it meanwhile).
    Gone,
}

/// One selected dead run (its letter and the copies of it) and what became of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The occurrence key, when the body had one.
    pub key: Option<String>,
    /// The job, when the body had one.
    pub job: Option<String>,
    /// Why it had been dead-lettered.
    pub reason: String,
    /// How many letters the dead-letter queue held for it when listed.
    pub copies: usize,
    /// The key's idempotency record before the replay (`failed` ones were reset).
    pub record: Option<State>,
    /// What happened.
    pub plan: Plan,
}

/// The outcome of a replay.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayReport {
    /// Every selected dead run, oldest first.
    pub entries: Vec<Entry>,
    /// How many dead runs were replayed.
    pub replayed: usize,
    /// How many dead runs (copies folded) the dead-letter queue held when listed.
    pub listed: usize,
}

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The dead-letter queue could not be listed; nothing was changed.
    #[error("cannot list the dead-letter queue")]
    List(#[source] BrokerError),
    /// A record could not be reset; nothing was republished yet.
    #[error(
        "cannot reset the idempotency record of {key}: nothing was replayed, run the command again"
    )]
    Reset {
        /// The key.
        key: String,
        /// Why.
        #[source]
        source: StoreError,
    },
    /// The replay walk stopped; letters not yet replayed stay in the dead-letter queue.
    #[error(
        "replay stopped; letters not yet replayed stay in the dead-letter queue: run the command again (a letter replayed twice still runs at most once)"
    )]
    Replay(#[source] BrokerError),
}

/// The message that replays `letter`, or why it cannot be replayed.
///
/// # Errors
/// A human reason when the body is not an occurrence, its job is not in `config`, or (with
/// a `keyring`) it does not open with one of its keys.
pub fn prepare(
    letter: &DeadLetter,
    config: &Config,
    keyring: Option<&Keyring>,
    now: DateTime<Utc>,
) -> Result<Outgoing, String> {
    if let Some(keyring) = keyring {
        keyring.open(&letter.body).map_err(|e| {
            format!("not replayed: unauthenticated: {e}; only messages signed by a key of CRONQ_SIGNING_KEY are replayed")
        })?;
    }
    let occ = Occurrence::decode(&letter.body).map_err(|e| {
        let mut text = format!("body is malformed: {e}");
        if let Some(source) = std::error::Error::source(&e) {
            text.push_str(&format!(": {source}"));
        }
        text
    })?;
    let Some(job) = config.job(occ.job.as_str()) else {
        return Err(format!(
            "job {:?} is no longer in {}",
            occ.job.as_str(),
            config.path.display()
        ));
    };
    let occurrence = Occurrence {
        trigger: Trigger::Replay,
        attempt: 1,
        published_at: now,
        // The operator asked for it to run now: its original start deadline has passed.
        deadline: None,
        last_error: None,
        ..occ
    };
    Ok(Outgoing {
        queue: job.queue.clone(),
        occurrence,
        delay: Duration::ZERO,
    })
}

/// Replays the letters `selector` picks (see the module docs); with `dry_run`, only
/// reports what would be replayed and changes nothing. With a `keyring`, only letters
/// sealed by one of its keys are replayed (the broker seals the replays with its own).
///
/// # Errors
/// [`ReplayError`]; whatever was not replayed stays in the dead-letter queue.
pub async fn replay(
    broker: &dyn Broker,
    ledger: &dyn Ledger,
    config: &Config,
    selector: &Selector,
    keyring: Option<&Keyring>,
    dry_run: bool,
) -> Result<ReplayReport, ReplayError> {
    let letters = bounded("list dead letters", broker.dead_letters())
        .await
        .map_err(ReplayError::List)?;
    let letters = fold_copies(&letters);
    let listed = letters.len();
    let (mut entries, approved) = plan(&letters, selector, config, keyring, dry_run);
    if dry_run || approved.is_empty() {
        return Ok(ReplayReport {
            entries,
            replayed: 0,
            listed,
        });
    }
    // The job's queue may not exist yet (no consumer or producer declared it): a publish
    // to it would be returned as unroutable.
    broker
        .declare(&config.queues())
        .await
        .map_err(ReplayError::Replay)?;
    // Reset first: a record reset without its replay is harmless (the letter is still
    // there for the next run); a replay before the reset would be acked as a duplicate.
    let before = admit(ledger, &approved).await?;
    let (replayed, done) = send(broker, config, selector, keyring, &approved).await?;
    for entry in &mut entries {
        let Some(key) = entry.key.clone() else {
            continue;
        };
        entry.record = before.get(&key).copied().flatten();
        if entry.plan == Plan::Gone && done.contains(&key) {
            entry.plan = Plan::Replayed;
        }
    }
    Ok(ReplayReport {
        entries,
        replayed,
        listed,
    })
}

/// One entry per dead run `selector` picks, and the keys of those that can be replayed.
fn plan(
    letters: &[Folded],
    selector: &Selector,
    config: &Config,
    keyring: Option<&Keyring>,
    dry_run: bool,
) -> (Vec<Entry>, HashSet<String>) {
    let now = Utc::now();
    let mut entries = Vec::new();
    let mut approved: HashSet<String> = HashSet::new();
    for Folded { letter, copies } in letters.iter().filter(|f| selector.matches(&f.letter)) {
        let plan = match prepare(letter, config, keyring, now) {
            Ok(out) => {
                approved.insert(out.occurrence.key.to_string());
                if dry_run {
                    Plan::WouldReplay
                } else {
                    Plan::Gone
                }
            }
            Err(why) => Plan::Kept(why),
        };
        entries.push(Entry {
            key: letter.key.clone(),
            job: letter.job.clone(),
            reason: letter.reason.clone(),
            copies: *copies,
            record: None,
            plan,
        });
    }
    (entries, approved)
}

/// Admits each approved key for a replay; returns each record's state before.
async fn admit(
    ledger: &dyn Ledger,
    approved: &HashSet<String>,
) -> Result<HashMap<String, Option<State>>, ReplayError> {
    let mut before = HashMap::new();
    for key in approved {
        let parsed: OccurrenceKey = key.parse().map_err(|_| ReplayError::Reset {
            key: key.clone(),
            source: StoreError::Corrupt {
                key: key.clone(),
                source: serde::de::Error::custom("not an occurrence key"),
            },
        })?;
        let state = ledger
            .admit_replay(&parsed)
            .await
            .map_err(|source| ReplayError::Reset {
                key: key.clone(),
                source,
            })?;
        before.insert(key.clone(), state);
    }
    Ok(before)
}

/// Replays the approved letters; returns how many, and their keys.
async fn send(
    broker: &dyn Broker,
    config: &Config,
    selector: &Selector,
    keyring: Option<&Keyring>,
    approved: &HashSet<String>,
) -> Result<(usize, Vec<String>), ReplayError> {
    // The keys replayed, and the dead runs they were copies of.
    let done: Mutex<(Vec<String>, HashSet<DeadRun>)> = Mutex::new((Vec::new(), HashSet::new()));
    let select = |letter: &DeadLetter| -> Pick {
        if !selector.matches(letter) {
            return Pick::Keep;
        }
        let mut done = done
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let run = DeadRun::of(letter);
        // The broker asks about a letter only once the replays picked before it were
        // confirmed: this dead run is already back in its queue.
        if done.1.contains(&run) {
            return Pick::Remove;
        }
        // Only letters whose record was admitted: one that arrived since the listing
        // waits for the next replay.
        let Ok(out) = prepare(letter, config, keyring, Utc::now()) else {
            return Pick::Keep;
        };
        let key = out.occurrence.key.to_string();
        if !approved.contains(&key) {
            return Pick::Keep;
        }
        done.0.push(key);
        done.1.insert(run);
        Pick::Replay(Box::new(out))
    };
    let result = broker.replay(&select).await;
    // A key is counted when selected; on error the last one may not have been confirmed.
    let replayed = result.map_err(ReplayError::Replay)?;
    let (done, _) = done
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Ok((replayed, done))
}
