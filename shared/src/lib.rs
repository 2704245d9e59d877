//! cronq's contract: what the producer, the consumer, the operations commands and every
//! backend agree on. No I/O client lives here (no lapin, no redis); each backend technology
//! implements the port traits in a crate of its own under `backends/`.
//!
//! The rule this crate keeps: it holds types, ports and the rules a backend must keep, and
//! nothing that only runs them: connection plumbing (TLS files, the Redis URL grammar) lives
//! with the backends (`backends/tls`, `backends/redis`), the in-process ledger rules in
//! `backends/rules`, the fleet-reporting runtime in `fleet/`; a vendor's hint (how to start
//! its server) comes from its backend.
//!
//! - [`config`]: the TOML config, loaded and validated into one job table.
//! - [`schedule`]: cron expressions and `@every`, DST-correct, in a job's zone.
//! - [`key`] and [`message`]: the occurrence key `JOB@SCHEDULED_UTC` and the wire message.
//! - [`names`]: validated names, and the only place broker and store names are formatted.
//! - [`endpoints`]: where the services are (`CRONQ_AMQP_URL`, `CRONQ_REDIS_URL`,
//!   `CRONQ_NAMESPACE`).
//! - [`job_labels`]: which jobs have a `job` label of their own on `/metrics`.
//! - [`redacted`]: URLs with credentials hidden, for logs and errors.
//! - [`signing`]: signed messages (`CRONQ_SIGNING_KEY`): the keyring, sealing and opening.
//! - [`traces`]: one occurrence in one OpenTelemetry trace: the tracer, span names, and
//!   the `traceparent` a message carries.
//! - [`retry`]: the one retry primitive (exponential, capped, jittered, cancellable), and
//!   which layer retries what.
//! - The ports, each a trait with its rules in its docs: [`broker`] (the queue),
//!   [`ledger`] (idempotency records and overlap), [`runlog`] (the run history), [`lease`]
//!   (the producer's leader lease), [`control`] (cursors, pauses, requests) and [`registry`]
//!   (the instances alive, their config digests, per-minute counts), [`jobs`] (runtime
//!   jobs) and [`audit`] (the operators' actions); [`store`]
//!   is the error the stores share.

// A library: every public item documented and reachable (the workspace lints, in the
// root Cargo.toml, hold for the binary too).
#![warn(missing_docs, unreachable_pub)]

pub mod accounting;
pub mod audit;
pub mod blocking;
pub mod broker;
pub mod causes;
pub mod config;
pub mod control;
pub mod endpoints;
pub mod host;
pub mod job_labels;
pub mod jobs;
pub mod key;
pub mod lease;
pub mod ledger;
pub mod message;
pub mod names;
pub mod recorded;
pub mod redacted;
pub mod registry;
pub mod reload;
pub mod retry;
pub mod runlog;
pub mod schedule;
pub mod signing;
pub mod store;
pub mod traces;
