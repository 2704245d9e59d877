//! The port contracts: each suite is a plain generic `async fn` over one port (queue,
//! ledger, run log, lease, control store), run on every backend through a small adapter;
//! plus what the RabbitMQ and Redis implementations promise beyond the contract.

mod audit;
mod broker;
mod jobs;
mod lease;
mod ledger;
mod ledger_after;
mod ledger_cancel;
mod ledger_limits;
mod ledger_overlap;
mod rabbitmq;
mod redis;
mod registry;
mod reload;
mod runlog;
