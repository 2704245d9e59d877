//! cronq's store ports on Redis: every operation that the guarantees rest on is one atomic
//! Lua script (loaded with `include_str!`), timed by the Redis server's clock.
//!
//! - [`connect`](mod@connect): the connection, [`RedisConn`] (fails fast while Redis is down,
//!   reconnects by itself; through Sentinel it follows the master, see [`sentinel`]), and
//!   the replication barrier of the writes the guarantees rest on (`CRONQ_REDIS_MIN_REPLICAS`,
//!   in [`conn`]; through Sentinel, every replica in sync: the switch barrier, `replicas.rs`).
//! - [`ledger`]: [`RedisLedger`], idempotency records, execution leases, overlap locks and
//!   wait lists (`ledger/*.lua`).
//! - [`runlog`]: [`RedisRunLog`], the run history as a capped stream.
//! - [`lease`]: [`RedisLease`], the producers' leader lease with fencing epochs.
//! - [`control`]: [`RedisControl`], cursors, pauses and requests, written fenced.
//!
//! The Redis key layout is in `docs/consumer.md` and in each module's docs.
//!
//! The connection's modules import one way: `url`, `tls`, `error`, `script` and `replicas`
//! import none of this crate's modules; `sentinel` builds on those, [`conn`] on `sentinel`,
//! [`connect`](mod@connect) on `conn`; the stores build on `conn` and `connect`, and nothing
//! below imports them back.

// A library: every public item documented and reachable (the workspace lints, in the
// root Cargo.toml, hold for the binary too).
#![warn(missing_docs, unreachable_pub)]

mod args;
pub mod audit;
pub mod conn;
pub mod connect;
pub mod control;
mod error;
pub mod jobs;
pub mod lease;
pub mod ledger;
pub mod registry;
mod replicas;
pub mod runlog;
mod script;
pub mod sentinel;
mod tls;
pub mod url;

pub use audit::RedisAudit;
pub use conn::{REPLICA_WAIT, RedisConn};
pub use connect::{connect, connect_tls, connect_with};
pub use control::RedisControl;
pub use jobs::RedisJobStore;
pub use lease::RedisLease;
pub use ledger::RedisLedger;
pub use registry::RedisRegistry;
pub use runlog::RedisRunLog;
pub use url::{RedisUrl, SentinelUrl};
