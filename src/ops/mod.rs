//! The operations behind `cronq jobs/runs/pause/resume/trigger/backfill/cancel/dlq` that the
//! dashboard (`crate::dashboard`) performs too: written once here, called by both, so the
//! command line and the browser cannot drift; and what the operations commands show
//! (one module each: `jobs`, `runtime_job` for `cronq job`, `runs`, `next`, `dlq`,
//! `verify`), so that a file of `crate::cmd` reads as its sequence: settings, open, ask
//! the stores, print. Nothing here imports `crate::cmd`.

pub mod audit;
pub mod backfill;
pub mod cancel;
pub mod dlq;
pub mod handler_check;
pub mod jobs;
pub mod json;
pub mod lookup;
pub mod next;
pub mod plan;
pub mod pools;
pub mod running;
pub mod runs;
pub mod runtime_job;
pub mod trigger;
pub mod verify;
