//! Integration tests: one binary, a module per behaviour, against the real RabbitMQ and
//! Redis (`CRONQ_AMQP_URL`, `CRONQ_REDIS_URL`) and the real `cronq` binary. The port suites
//! and the consumer and producer behaviour suites are written once and also run on the
//! in-memory ports (`cronq standalone`), so those cannot drift.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod broker;
mod broker_restart;
mod cli_config;
mod cli_next;
mod consumer;
mod consumer_ledger;
mod consumer_process;
mod leader;
mod ops;
mod ops_replay;
mod overlap;
mod producer;
mod producer_behaviour;
mod standalone;
mod support;
