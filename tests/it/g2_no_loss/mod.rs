//! G2, no silent loss: every occurrence reaches a terminal outcome the run log shows, and
//! failures reach the dead-letter queue.

mod outcomes;
mod overlap;
mod overlap_consumers;
