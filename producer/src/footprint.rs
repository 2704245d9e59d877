//! What a leading producer keeps for its config, built without I/O: the term's job table
//! and timer as the scheduler builds them on taking over (no cursor stored yet), and the
//! config digest its fleet reports share. For the memory test (`producer/tests/memory.rs`),
//! which counts the heap it takes per job; not part of the API.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use cronq_shared::config::Config;
use cronq_shared::lease::Term;
use cronq_shared::registry::digest::ConfigDigest;

use crate::term::Leading;

/// What a leading producer holds for a config besides the config itself; dropping it frees
/// it all.
pub struct Footprint {
    _lead: Leading,
    _digest: ConfigDigest,
}

impl Footprint {
    /// What a producer that took over at `now` holds for `config`. The catch-up and the
    /// cursors to write are dropped, as the scheduler drops them once written.
    pub fn leading(config: Arc<Config>, now: DateTime<Utc>) -> Self {
        let digest = ConfigDigest::of(&config);
        let (lead, catchup, moved) = Leading::take_over(
            Term::new(1, "footprint"),
            config,
            &HashMap::new(),
            HashSet::new(),
            now,
        );
        drop((catchup, moved));
        Self {
            _lead: lead,
            _digest: digest,
        }
    }
}
