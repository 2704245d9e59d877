//! The fleet-reporting runtime every producer, consumer and standalone runs beside its work,
//! on the registry port (`cronq_shared::registry`):
//!
//! - [`digester`]: the digest of each config the process loads, computed once and shared.
//! - [`reporter`]: the loop that reports the process to the registry, writes its config's
//!   per-job digests and adds what it counted to the per-minute counters.
//! - [`tally`]: counting in process, around the broker and the ledger, what those counters
//!   add up.
//! - [`compare`]: which instances run another config than a reference one, and in which
//!   jobs (the leader's config check, the dashboard's Fleet page).
//!
//! The rule this crate keeps: it is runtime built on the contract's ports and types only
//! (never a backend); what is stored, and what a digest is, stays in the contract.

// A library: every public item documented and reachable (the workspace lints, in the
// root Cargo.toml, hold for the binary too).
#![warn(missing_docs, unreachable_pub)]

pub mod compare;
pub mod digester;
pub mod reporter;
pub mod tally;
