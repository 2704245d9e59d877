//! G1, one run per occurrence: at most one execution of an occurrence succeeds, across
//! duplicates, consumers, producers, replays and long runs.

mod duplicates;
mod every_second;
mod fence;
mod late_claim;
mod late_copy;
mod long_job;
mod routed;
mod stalled_renewal;
