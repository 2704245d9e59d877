//! The schedule of a job that runs after other jobs (`after = ["a", "b"]`): it never fires
//! on its own. Its occurrences are its parents' common scheduled times, published by the
//! leader as its parents end (`crate::chains` computes the times, `cronq_producer::chains`
//! publishes them).
//!
//! Invariant: such a schedule has no fire time at all, so the planner, catch-up and the
//! timer leave the job alone; whatever shows its times asks `crate::chains`.

use std::sync::Arc;

use chrono_tz::Tz;

use super::kind::Kind;
use super::{Bounds, Parsed, Schedule};
use crate::names::JobName;

/// The prefix of such a schedule's text: `after a, b`.
const AFTER_PREFIX: &str = "after ";

impl Schedule {
    /// The schedule of a job that runs after `parents`; `tz` is the job's zone.
    ///
    /// ```
    /// use cronq_shared::names::JobName;
    /// use cronq_shared::schedule::Schedule;
    ///
    /// let parents = [JobName::new("a").unwrap(), JobName::new("b").unwrap()];
    /// let s = Schedule::after(&parents, chrono_tz::UTC);
    /// assert_eq!(s.as_str(), "after a, b");
    /// assert!(s.is_after());
    /// assert_eq!(s.parents(), parents);
    /// assert_eq!(s.next_after(chrono::Utc::now()), None);
    /// ```
    pub fn after(parents: &[JobName], tz: Tz) -> Self {
        let names: Vec<&str> = parents.iter().map(JobName::as_str).collect();
        Self {
            inner: Arc::new(Parsed {
                text: format!("{AFTER_PREFIX}{}", names.join(", ")),
                resolved: None,
                bounds: Bounds::default(),
                tz,
                kind: Kind::After(parents.into()),
                controls: None,
            }),
        }
    }

    /// Whether this is the schedule of a job that runs after other jobs: it never fires.
    pub fn is_after(&self) -> bool {
        matches!(self.inner.kind, Kind::After(_))
    }

    /// The jobs a job with this schedule runs after; empty for every other schedule.
    pub fn parents(&self) -> &[JobName] {
        match &self.inner.kind {
            Kind::After(parents) => parents,
            _ => &[],
        }
    }
}
