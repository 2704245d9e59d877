//! The leader lease port: at most one producer publishes at a time.
//!
//! Owns: acquiring, renewing, releasing and inspecting the lease, and the epoch (fencing
//! token) each acquisition is stamped with. Leaves to the producer: when to renew and when
//! to step down (`producer::leader`).
//!
//! Also the record of the terms ([`TermRecord`]): a leader records its term when it takes
//! over ([`Lease::begin`], at the instant its catch-up was planned at), and each confirmed
//! renewal moves the term's last-known-alive time to the renewal's (in the same write); a
//! release leaves it (the leader stopped publishing before it released, at some instant
//! after its last renewal that no store saw). The accounting (`crate::accounting`) reads them to
//! tell when no producer led; terms last alive longer than the retention ago are dropped
//! when a new one begins.
//!
//! Invariants: a lease is held by at most one [`Term`]; every successful acquisition gets an
//! epoch strictly greater than every earlier one (even after the lease expired or was
//! released), so a write fenced on the current term (see [`crate::control`]) can never be
//! made by a leader that was replaced.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

/// One holding of the lease: what a leader proves its leadership with.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Term {
    /// The fencing token: grows with every acquisition.
    pub epoch: u64,
    /// Random per acquisition, so two terms of one instance never compare equal.
    pub token: String,
    /// Which producer holds it (for logs and `holder`).
    pub instance: String,
}

impl Term {
    /// A new term with a fresh random token.
    pub fn new(epoch: u64, instance: &str) -> Self {
        Self {
            epoch,
            token: fresh_token(),
            instance: instance.to_owned(),
        }
    }

    /// The value stored under the lease key: `EPOCH TOKEN INSTANCE`.
    pub fn value(&self) -> String {
        format!("{} {} {}", self.epoch, self.token, self.instance)
    }

    /// Parses a stored lease value.
    pub fn parse(value: &str) -> Option<Self> {
        let mut parts = value.splitn(3, ' ');
        let epoch = parts.next()?.parse().ok()?;
        let token = parts.next()?.to_owned();
        let instance = parts.next()?.to_owned();
        Some(Self {
            epoch,
            token,
            instance,
        })
    }
}

impl fmt::Debug for Term {
    // The token is a bearer secret of sorts: keep it out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Term")
            .field("epoch", &self.epoch)
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

/// A random per-term token (128 bits, hex).
pub fn fresh_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Who holds the lease right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The holder's epoch.
    pub epoch: u64,
    /// The holder's instance id.
    pub instance: String,
    /// How long the lease lives unless renewed.
    pub remaining: Duration,
}

/// One recorded term: who led, from when, until when it was last known alive.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TermRecord {
    /// Its epoch.
    pub epoch: u64,
    /// Which producer led.
    pub instance: String,
    /// When it took over: the instant its catch-up was planned at.
    pub start: DateTime<Utc>,
    /// When it was last known to lead: its last confirmed renewal (its start before one).
    pub alive: DateTime<Utc>,
}

impl TermRecord {
    /// Whether the term led at `at` (`start <= at <= alive`).
    pub fn contains(&self, at: DateTime<Utc>) -> bool {
        self.start <= at && at <= self.alive
    }
}

/// The lease store failed; the caller cannot tell whether the operation happened.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// A store command or script failed (connection lost, timeout, …).
    #[error("leader lease {op} failed in {store}: check that {store} is reachable")]
    Store {
        /// Which store (`Redis`).
        store: &'static str,
        /// `acquire`, `renew`, `release`, `holder`, `begin` or `terms`.
        op: &'static str,
        /// Why.
        #[source]
        source: crate::store::Source,
    },
    /// A write the store applied but that too few replicas acknowledged: it counts as
    /// failed (an acquired lease is not held, a renewal not confirmed).
    #[error("leader lease {op} not confirmed: {barrier}")]
    Unreplicated {
        /// `acquire`, `renew` or `release`.
        op: &'static str,
        /// How many replicas acknowledged it, of how many.
        barrier: crate::store::Unreplicated,
    },
    /// The stored lease value is not in the `EPOCH TOKEN INSTANCE` form.
    #[error("leader lease under {key} holds an unreadable value {value:?}: delete the key")]
    Corrupt {
        /// The Redis key.
        key: String,
        /// What was there.
        value: String,
    },
}

/// The lease port.
#[async_trait]
pub trait Lease: Send + Sync + 'static {
    /// Takes the lease for `ttl` if nobody holds it, stamped with a fresh epoch. Returns
    /// `None` when another term holds it.
    ///
    /// # Errors
    /// [`LeaseError`] when the store cannot be reached: the lease may or may not have
    /// been taken (if it was, it expires after `ttl`).
    async fn acquire(&self, instance: &str, ttl: Duration) -> Result<Option<Term>, LeaseError>;

    /// Extends the lease to `ttl` from now if `term` still holds it, and moves the term's
    /// record (if begun) to alive now, in the same write. Returns `false` when the lease is
    /// gone or another term holds it.
    ///
    /// # Errors
    /// [`LeaseError`] when the store cannot be reached.
    async fn renew(&self, term: &Term, ttl: Duration) -> Result<bool, LeaseError>;

    /// Gives the lease up if `term` still holds it. Returns whether it did. The term's
    /// record keeps its last renewal as its last-known-alive time.
    ///
    /// # Errors
    /// [`LeaseError`] when the store cannot be reached (the lease then expires on its own).
    async fn release(&self, term: &Term) -> Result<bool, LeaseError>;

    /// Who holds the lease, if anyone.
    ///
    /// # Errors
    /// [`LeaseError`] when the store cannot be reached or holds garbage.
    async fn holder(&self) -> Result<Option<Holder>, LeaseError>;

    /// Records that `term` took over at `start` (alive then too), and drops the records of
    /// terms last alive before `start - keep`.
    ///
    /// # Errors
    /// [`LeaseError`] when the store cannot be reached.
    async fn begin(
        &self,
        term: &Term,
        start: DateTime<Utc>,
        keep: Duration,
    ) -> Result<(), LeaseError>;

    /// The recorded terms, oldest first.
    ///
    /// # Errors
    /// [`LeaseError`] when the store cannot be reached or holds garbage.
    async fn terms(&self) -> Result<Vec<TermRecord>, LeaseError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn term_value_round_trips_and_debug_hides_token() {
        let term = Term::new(7, "host-1 pid 3");
        assert_eq!(Term::parse(&term.value()), Some(term.clone()));
        assert!(!format!("{term:?}").contains(&term.token));
        assert_ne!(Term::new(7, "a").token, Term::new(7, "a").token);
        assert_eq!(Term::parse("x y z"), None);
    }
}
