//! The occurrence key `JOB@SCHEDULED_UTC` (G4), and the manual-trigger key `JOB@manual-ID`.
//!
//! Invariant: a scheduled key is derived from the job name and the scheduled UTC instant
//! only, never from a clock reading or the zone's wall time, so every producer computes the
//! same key for the same occurrence and keys survive failover.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

use crate::names::JobName;

/// Identifies one occurrence of one job across the whole fleet.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OccurrenceKey {
    job: JobName,
    slot: Slot,
}

/// What follows the `@` of a key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Slot {
    /// A scheduled instant (UTC, whole seconds).
    Scheduled(DateTime<Utc>),
    /// A manual trigger with its unique id.
    Manual(String),
}

/// Why a key could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not an occurrence key: expected JOB@YYYY-MM-DDTHH:MM:SSZ or JOB@manual-ID")]
pub struct KeyError {
    /// The refused text.
    pub value: String,
}

impl OccurrenceKey {
    /// The key of a scheduled (or caught-up, backfilled, replayed) occurrence.
    ///
    /// ```
    /// # use cronq_shared::{key::OccurrenceKey, names::JobName};
    /// let at = "2026-11-29T19:30:00Z".parse().unwrap();
    /// let key = OccurrenceKey::scheduled(JobName::new("nightly-report").unwrap(), at);
    /// assert_eq!(key.to_string(), "nightly-report@2026-11-29T19:30:00Z");
    /// ```
    pub fn scheduled(job: JobName, at: DateTime<Utc>) -> Self {
        Self {
            job,
            slot: Slot::Scheduled(at),
        }
    }

    /// A fresh key for a manual trigger; a UUIDv7 makes it unique and never equal to a
    /// scheduled key.
    pub fn manual(job: JobName) -> Self {
        Self {
            job,
            slot: Slot::Manual(uuid::Uuid::now_v7().simple().to_string()),
        }
    }

    /// The job this key belongs to.
    pub fn job(&self) -> &JobName {
        &self.job
    }

    /// The scheduled instant, or `None` for a manual trigger.
    pub fn scheduled_at(&self) -> Option<DateTime<Utc>> {
        match &self.slot {
            Slot::Scheduled(at) => Some(*at),
            Slot::Manual(_) => None,
        }
    }

    /// What follows the `@`.
    pub fn slot(&self) -> &Slot {
        &self.slot
    }
}

impl fmt::Display for OccurrenceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.slot {
            Slot::Scheduled(at) => write!(
                f,
                "{}@{}",
                self.job,
                at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
            ),
            Slot::Manual(id) => write!(f, "{}@manual-{id}", self.job),
        }
    }
}

impl std::str::FromStr for OccurrenceKey {
    type Err = KeyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || KeyError {
            value: s.to_owned(),
        };
        let (job, rest) = s.split_once('@').ok_or_else(err)?;
        let job = JobName::new(job).map_err(|_| err())?;
        let slot = if let Some(id) = rest.strip_prefix("manual-") {
            if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                return Err(err());
            }
            Slot::Manual(id.to_owned())
        } else {
            let at = DateTime::parse_from_rfc3339(rest).map_err(|_| err())?;
            if !rest.ends_with('Z') {
                return Err(err());
            }
            Slot::Scheduled(at.with_timezone(&Utc))
        };
        Ok(Self { job, slot })
    }
}

impl Serialize for OccurrenceKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for OccurrenceKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduled_key_round_trips() {
        let key: OccurrenceKey = "nightly-report@2026-11-29T19:30:00Z".parse().unwrap();
        assert_eq!(key.job().as_str(), "nightly-report");
        assert_eq!(key.to_string(), "nightly-report@2026-11-29T19:30:00Z");
    }

    #[test]
    fn manual_keys_are_unique_and_parse() {
        let job = JobName::new("x").unwrap();
        let a = OccurrenceKey::manual(job.clone());
        let b = OccurrenceKey::manual(job);
        assert_ne!(a, b);
        assert!(a.to_string().starts_with("x@manual-"));
        assert_eq!(a.to_string().parse::<OccurrenceKey>().unwrap(), a);
        assert_eq!(a.scheduled_at(), None);
    }

    #[test]
    fn bad_keys_are_refused() {
        for bad in [
            "x",
            "@2026-11-29T19:30:00Z",
            "x@yesterday",
            "x@2026-11-29T19:30:00+01:00",
            "x@manual-",
        ] {
            assert!(bad.parse::<OccurrenceKey>().is_err(), "{bad}");
        }
    }
}
