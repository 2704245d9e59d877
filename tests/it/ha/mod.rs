//! High availability: cronq on a Redis Sentinel topology of its own (`scripts/ha`:
//! `support::ha`). These tests share that topology and some change it (a failover, a
//! killed replica), so nextest runs everything under `ha::` one at a time (the `redis-ha`
//! group of `.config/nextest.toml`), and each test that changes it heals it first.
//!
//! - `redis_sentinel`: the stores through a `redis+sentinel://` URL; following the master
//!   across a planned failover and a demoted master's `READONLY`; the replication barrier
//!   of `CRONQ_REDIS_MIN_REPLICAS`, and that the writes it guards are safe to run again.

mod redis_sentinel;
