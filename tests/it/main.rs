//! Integration tests: one binary, one module per behaviour, against the real RabbitMQ and
//! Redis (`CRONQ_AMQP_URL`, `CRONQ_REDIS_URL`) and the real `cronq` binary. Read as a list
//! of what cronq guarantees:
//!
//! - `ports`: the contract of each port (queue, ledger, run log, lease, control), and what
//!   the RabbitMQ and Redis implementations add to it;
//! - `g1_once`: one run per occurrence (G1);
//! - `g2_no_loss`: every occurrence reaches an outcome the run log shows, overlap policies
//!   included (G2);
//! - `g3_crash`: killed processes, dropped connections, a broker restart, a store outage (G3);
//! - `g4_keys`: fire times and keys from the schedule alone, `cronq next` across DST (G4);
//! - `g5_bad_input`: bad configs and bad messages (G5);
//! - `ha`: a node of a RabbitMQ cluster or the Redis master lost under a running fleet, and
//!   the Redis stores through Sentinel (following the master, the replication barrier of
//!   `CRONQ_REDIS_MIN_REPLICAS`), on the harness of `scripts/ha`;
//! - `chains`: jobs that run after other jobs (`after`), a chain through a replay and a
//!   leader `kill -9`;
//! - `handlers`, `queues`: how a consumer runs a job, and which queues it serves;
//!   `consumer_threads`: the runtime threads `cronq consumer` runs on (`--threads`);
//!   `fence_handlers`: the fencing token each kind of handler gets;
//! - `dashboard`: the web dashboard's API through a real `cronq dashboard` (on the
//!   services and on a data file) and its pages in headless Chromium; its Fleet page over
//!   real `cronq producer`s and `cronq consumer`s (`dashboard::fleet`: a config that differs
//!   named on the page, `/metrics` and the leader's log; the last hour against the run
//!   history; a killed consumer's record lapsing);
//! - `command_identity`: a command's `user`, `group`, `cwd`, `env` and `clear_env`, through a
//!   real `cronq standalone`;
//! - `operations`: pause, trigger, backfill, cancel, reload, the operations commands, the
//!   dead-letter queue;
//! - `docs_links`: every relative link of the README and `docs/` names a file and heading;
//! - `packaging`: completions, man pages, `cronq version` and the systemd units;
//! - `monitoring`: the Prometheus alert rules (promtool) and the Grafana dashboard of
//!   `deploy/`, against the metrics real processes export;
//! - `standalone`: `cronq standalone` with its defaults;
//! - `standalone_data`: `cronq standalone` on a data file: catch-up after a restart,
//!   `kill -9`, operations on the file while it runs, a standby on the same file, start
//!   errors;
//! - `tls`: `amqps://` and `rediss://` for real, on the harness of `scripts/tls`: a fleet
//!   over TLS runs each occurrence once; certificates from another CA or for another host
//!   name refused; a client certificate; the TLS files checked at start;
//! - `traces`: OpenTelemetry traces: one occurrence one trace, from the leader's publish
//!   to the command's `TRACEPARENT`, through real processes on the services and on a data
//!   file; nothing exported and no `TRACEPARENT` without the `OTEL_*` variables;
//! - `support`: the test environment, the backends and the helpers the modules share.
//!
//! Every behavioural suite is written once and run on every backend by
//! `support::backends::on_every_backend!` (`<suite>::memory` on the in-memory ports of
//! `cronq standalone --data :memory:`, `<suite>::real` on RabbitMQ and Redis,
//! `<suite>::sqlite` on the SQLite data file of `cronq standalone`), so the backends cannot
//! drift.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod alerts;
mod chains;
mod chaos;
mod command_identity;
mod consumer_threads;
mod dashboard;
mod docs_links;
mod fence_handlers;
mod footprint;
mod g1_once;
mod g2_no_loss;
mod g3_crash;
mod g4_keys;
mod g5_bad_input;
mod ha;
mod handlers;
mod job_labels;
mod limits;
mod monitoring;
mod one_shot;
mod operations;
mod packaging;
mod ports;
mod queues;
mod secrets;
mod signing;
mod standalone;
mod standalone_data;
mod support;
mod time_controls;
mod tls;
mod traces;
