//! cronq's shared core.
//!
//! - [`config`]: the TOML config, loaded and validated into one job table.
//! - [`schedule`]: cron expressions and `@every`, DST-correct, in a job's zone.
//! - [`key`] and [`message`]: the occurrence key `JOB@SCHEDULED_UTC` and the wire message.
//! - [`names`]: validated names, and the only place broker and Redis names are formatted.
//! - [`broker`]: the queue port (RabbitMQ and in-memory).
//! - [`ledger`]: idempotency records and per-job overlap locks (Redis and in-memory).
//! - [`runlog`]: the run history (Redis stream and in-memory).
//! - [`connect`]: service endpoints and the Redis connection.
//! - [`lease`]: the producer's leader lease (Redis and in-memory), with fencing epochs.
//! - [`control`]: the producer's persistent state: cursors, pauses, trigger and backfill
//!   requests (Redis and in-memory).
//! - [`ops`]: operator actions across ports (dead-letter replay).
//! - [`redacted`]: URLs with credentials hidden, for logs and errors.

pub mod broker;
pub mod config;
pub mod connect;
pub mod control;
pub mod key;
pub mod lease;
pub mod ledger;
pub mod message;
pub mod names;
pub mod ops;
pub mod redacted;
pub mod runlog;
pub mod schedule;
