//! cronq's ports on one SQLite file, for `cronq standalone`: the queue with delayed
//! messages and the dead-letter queue, the ledger, the run history, the leader lease and
//! the control store, with the same semantics as RabbitMQ + Redis (every behavioural suite
//! runs on this backend too). Several processes may use one file at once: a standalone and
//! the operations commands, or a standby standalone.
//!
//! - [`db`]: [`Db`], the data file: one connection per process, WAL, the schema
//!   ([`schema`]) brought up to date when opened, operations batched into transactions
//!   by the connection's thread (`writer`).
//! - [`broker`]: [`SqliteBroker`], messages as rows, delivered to one process at a time.
//! - [`ledger`]: [`SqliteLedger`], idempotency records, leases, overlap locks, wait lists.
//! - [`runlog`]: [`SqliteRunLog`], the run history, bounded.
//! - [`lease`]: [`SqliteLease`], the leader lease with fencing epochs.
//! - [`control`]: [`SqliteControl`], cursors, pauses and requests, fenced by the lease.
//!
//! Durability is SQLite's under the chosen [`Sync`] (`docs/standalone.md`).
//!
//! The file's modules import one way: `failure` and [`schema`] import none of this crate's
//! modules, `writer` builds on `failure`, [`db`] on those three, and the ports on `db`;
//! nothing below imports them back.

// A library: every public item documented and reachable (the workspace lints, in the
// root Cargo.toml, hold for the binary too).
#![warn(missing_docs, unreachable_pub)]

pub mod audit;
pub mod broker;
pub mod control;
pub mod db;
mod failure;
pub mod jobs;
pub mod lease;
pub mod ledger;
pub mod registry;
pub mod runlog;
pub mod schema;
mod writer;

pub use audit::SqliteAudit;
pub use broker::SqliteBroker;
pub use control::SqliteControl;
pub use db::{Db, Sync};
pub use jobs::SqliteJobStore;
pub use lease::SqliteLease;
pub use ledger::SqliteLedger;
pub use registry::SqliteRegistry;
pub use runlog::SqliteRunLog;
