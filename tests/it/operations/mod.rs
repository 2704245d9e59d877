//! Operator input: control requests (pause and resume, trigger, backfill) and config
//! reloads as the leader carries them out, the operations commands of the binary, and the
//! dead-letter queue's list and replay.

mod cancel;
mod commands;
mod control;
mod dlq;
mod dlq_copies;
mod dlq_scale;
mod plan;
mod producer_process;
mod reconcile_outage;
mod recorded;
mod reload;
mod runtime_failover;
mod runtime_jobs;
mod runtime_ops;
mod runtime_served;
mod verify;
mod verify_catchup;
