//! Operator actions that span several ports: replaying dead letters (broker + idempotency
//! records + config) and resetting a `failed` idempotency record so a replay can run.
//!
//! Owns: choosing which dead letters to replay and as what, and the order of the steps
//! (reset the record, republish confirmed, only then remove the letter). Leaves to the
//! broker the confirmed republish and removal ([`crate::broker::Broker::replay`]), to the
//! ledger every other record change, and to the CLI the printing.
//!
//! Invariants (G1, G2): only a `failed` record is ever reset, never a `succeeded` one, so a
//! replay (even run twice, or interrupted and run again) adds at most one success per key;
//! a letter leaves the dead-letter queue only after its republish was confirmed.

pub mod replay;
pub mod reset;

pub use replay::{Entry, Plan, ReplayError, ReplayReport, Selector, replay};
pub use reset::{MemoryResets, RecordReset, RedisResets};
