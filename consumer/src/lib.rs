//! cronq's consumer: runs the occurrences on the job queues, each at most once successfully
//! across the fleet (G1), none lost (G2, G3), bad messages dead-lettered (G5).
//!
//! - [`Consumer`] ([`service`]): subscribe with prefetch = concurrency, bound concurrency
//!   with a semaphore, reap orphaned claims, drain on shutdown.
//! - `worker`: one delivery's life, in order: admit, deadline, claim (idempotency +
//!   overlap), ack early, run, record the outcome, then retry or dead-letter; the I/O only.
//! - [`admission`]: a body opened and decoded once, into an admitted occurrence of a job
//!   that runs here, or a [`admission::Rejected`] (its reason and what did decode),
//!   dead-lettered at once; `claim`: what the claim asks of the ledger, the start deadline.
//! - [`outcome`]: the one mapping from how an attempt ended ([`outcome::Exit`], judged
//!   into an [`outcome::Verdict`]: `Retry { after }`, `Failed`, …) to the ledger's record
//!   state, the run history's outcome and error, and the message that follows; pure and
//!   unit-tested.
//! - `attempt`: supervising a running handler: heartbeats, timeout, panic catching;
//!   `cancels`: the poll that makes an operator's cancel take effect within a second.
//! - `handler`: `command` (own process group, killed as a whole), `http`, and `rust`: the
//!   [`Handlers`] an embedding program registers by job name or handler name, failing
//!   with a [`HandlerError`]; [`context`]: what a Rust handler learns of its attempt (the
//!   fencing token).
//! - `traces`: the attempt's spans (`cronq.claim`, `cronq.execute`, `cronq.end`) in the
//!   trace the message's `traceparent` names, and the `traceparent` a handler gets.
//! - `reaper`: republishes the stored message of a claim whose owner died.
//! - [`replay`]: `cronq dlq replay`, dead letters sent back to run under their key.
//!
//! The consumer runs on the port traits of `cronq-shared` ([`cronq_shared::broker`],
//! [`cronq_shared::ledger`], which also writes the [`cronq_shared::runlog`] history);
//! `cronq-backends` connects the real ones.
//!
//! ```no_run
//! # async fn demo(consumer: &mut cronq_consumer::Consumer) -> Result<(), Box<dyn std::error::Error>> {
//! use cronq_shared::names::JobName;
//! consumer.register(JobName::new("sync-orders")?, |occ, _token| async move {
//!     println!("running {}", occ.key);
//!     Ok::<(), String>(())
//! });
//! # Ok(()) }
//! ```

// A library: every public item documented and reachable (the workspace lints, in the
// root Cargo.toml, hold for the binary too).
#![warn(missing_docs, unreachable_pub)]

pub mod admission;
mod attempt;
mod cancels;
mod claim;
pub mod context;
mod dead_letter;
mod error;
mod handler;
pub mod outcome;
mod reaper;
pub mod replay;
mod running;
#[cfg(test)]
mod sample;
pub mod service;
mod telemetry;
mod traces;
mod view;
mod worker;

pub use context::Context;
pub use error::Error;
pub use handler::identity::{CommandProblem, check_commands};
pub use handler::rust::{HandlerError, HandlerFuture, Handlers, JobHandler};
pub use service::{Consumer, DEFAULT_LEASE, DEFAULT_THREADS, Options, default_consumer_id};
