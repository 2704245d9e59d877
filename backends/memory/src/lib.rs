//! cronq's ports in process memory, for `cronq standalone` and fast tests: the same rules
//! as the RabbitMQ and Redis backends (every behavioural suite runs on both), each
//! behind one mutex that is never held across an await.
//!
//! - [`broker`]: [`MemoryBroker`], queues with delays and a dead-letter queue.
//! - [`ledger`]: [`MemoryLedger`], idempotency records, leases, overlap locks, wait lists.
//! - [`runlog`]: [`MemoryRunLog`], the run history, capped.
//! - [`lease`]: [`MemoryLease`], the leader lease with fencing epochs.
//! - [`control`]: [`MemoryControl`], cursors, pauses and requests, fenced by a
//!   [`MemoryLease`].

// A library: every public item documented and reachable (the workspace lints, in the
// root Cargo.toml, hold for the binary too).
#![warn(missing_docs, unreachable_pub)]

pub mod audit;
pub mod broker;
pub mod control;
pub mod jobs;
pub mod lease;
pub mod ledger;
pub mod registry;
pub mod runlog;

pub use audit::MemoryAudit;
pub use broker::MemoryBroker;
pub use control::MemoryControl;
pub use jobs::MemoryJobStore;
pub use lease::MemoryLease;
pub use ledger::MemoryLedger;
pub use registry::MemoryRegistry;
pub use runlog::MemoryRunLog;
