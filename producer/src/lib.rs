//! cronq's producer: a leader-locked publisher of cron occurrences.
//!
//! Several producers run; the one holding the leader lease publishes. Pieces:
//! - [`leader`]: acquires and renews the lease, steps down before it can expire, releases
//!   it on shutdown; publishes [`Leadership`] on a `watch` channel.
//! - [`planner`]: pure rules: catch-up on taking over, backfill chunks,
//!   deterministic jitter, deadlines, the wire message.
//! - [`timer`]: one min-heap of every job's next fire, so the leader sleeps until the
//!   earliest one and never polls.
//! - [`publisher`]: confirmed publishing, and the leader's one retry loop (what the broker
//!   refuses, what the control store fails), while the leadership lasts.
//! - [`traces`]: the publish span of each occurrence, root of its trace, and the
//!   `traceparent` it writes into the message (when traces are on).
//! - [`scheduler`]: the leader's loop: take over, fire, commit cursors (fenced), carry out
//!   pause flags and trigger/backfill requests, apply reloaded configs.
//! - `term`: one term's bookkeeping (job table, timer, pauses, uncommitted cursors).
//! - [`Reloader`] (from `cronq_shared::reload`): SIGHUP or a runtime job change → the config
//!   in force, on a `watch` channel of `Arc<Config>`.
//! - [`config_record`]: while leading, records the config file's jobs for the operations
//!   commands.
//! - [`config_check`]: while leading, which instances run another config (log, `/metrics`).
//! - [`serving_check`]: while leading, which jobs no live consumer runs (log, `/metrics`).
//! - [`pool_check`]: while leading, how each pool is used (`/metrics`).
//! - [`accounting_check`]: while leading, the occurrences of a trailing window not
//!   accounted for (log, `/metrics`).
//! - [`chains`]: while leading, jobs that run after other jobs (`after`): started or
//!   skipped as their parents' occurrences end, followed from the run history.
//! - [`alerts`]: the `[[alert]]` sinks told of failures, misses, SLA breaches, gaps, and a
//!   fleet without a leader or a queue without a consumer.
//! - [`Producer`]: all of it as one `run(self, shutdown)`.
//! - [`assembly`]: the producer and its checks assembled once, for `cronq producer` and
//!   `cronq standalone` alike.
//!
//! Guarantees: a cursor moves only after the occurrences before it were confirmed
//! published, and only by the current leader (G2, G3); keys and jitter come from scheduled
//! instants only (G4).

// A library: every public item documented and reachable (the workspace lints, in the
// root Cargo.toml, hold for the binary too).
#![warn(missing_docs, unreachable_pub)]

pub mod accounting_check;
pub mod alerts;
pub mod assembly;
pub mod chains;
pub mod config_check;
pub mod config_record;
mod error;
#[doc(hidden)]
pub mod footprint;
pub mod leader;
pub mod planner;
pub mod pool_check;
pub mod publisher;
pub mod scheduler;
mod service;
pub mod serving_check;
mod term;
pub mod timer;
pub mod traces;

pub use accounting_check::AccountingCheck;
pub use alerts::Alerts;
pub use chains::Chains;
pub use config_check::ConfigCheck;
pub use config_record::ConfigRecorder;
pub use cronq_shared::reload::Reloader;
pub use error::Error;
pub use leader::{Elector, Leadership};
pub use pool_check::PoolCheck;
pub use scheduler::Scheduler;
pub use service::{Producer, instance_id};
pub use serving_check::ServingCheck;
