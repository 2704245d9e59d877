//! The occurrence key `JOB@SCHEDULED_UTC` (G4), and the manual-trigger key `JOB@manual-ID`.
//!
//! Invariant: a scheduled key is derived from the job name and the scheduled UTC instant
//! only, never from a clock reading or the zone's wall time, so every producer computes the
//! same key for the same occurrence and keys survive failover.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};

use crate::names::JobName;

/// Identifies one occurrence of one job across the whole fleet.
///
/// Its text is written once, when the key is made or parsed, and shared by its clones: a
/// consumer hands it to the store three or four times per message (claim, end, history).
/// Equal keys have equal texts (a parsed key keeps its text only when it is the one the
/// key would write), so equality and hashing go by the text; the order is by job, then
/// slot.
#[derive(Debug, Clone)]
pub struct OccurrenceKey {
    job: JobName,
    slot: Slot,
    text: Arc<str>,
}

impl PartialEq for OccurrenceKey {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for OccurrenceKey {}

impl Hash for OccurrenceKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.text.hash(state);
    }
}

impl PartialOrd for OccurrenceKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OccurrenceKey {
    fn cmp(&self, other: &Self) -> Ordering {
        (&self.job, &self.slot).cmp(&(&other.job, &other.slot))
    }
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
        Self::new(job, Slot::Scheduled(at))
    }

    /// A fresh key for a manual trigger; a UUIDv7 makes it unique and never equal to a
    /// scheduled key.
    pub fn manual(job: JobName) -> Self {
        Self::new(job, Slot::Manual(uuid::Uuid::now_v7().simple().to_string()))
    }

    fn new(job: JobName, slot: Slot) -> Self {
        let text = match &slot {
            Slot::Scheduled(at) => {
                format!("{job}@{}", at.to_rfc3339_opts(SecondsFormat::AutoSi, true))
            }
            Slot::Manual(id) => format!("{job}@manual-{id}"),
        };
        Self {
            job,
            slot,
            text: text.into(),
        }
    }

    /// The key's text, `JOB@SCHEDULED_UTC` or `JOB@manual-ID`, as [`fmt::Display`] writes it.
    pub fn as_str(&self) -> &str {
        &self.text
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
        f.write_str(&self.text)
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
        if let Some(id) = rest.strip_prefix("manual-") {
            if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                return Err(err());
            }
            return Ok(Self {
                job,
                slot: Slot::Manual(id.to_owned()),
                text: s.into(),
            });
        }
        let at = DateTime::parse_from_rfc3339(rest).map_err(|_| err())?;
        if !rest.ends_with('Z') {
            return Err(err());
        }
        let at = at.with_timezone(&Utc);
        // `YYYY-MM-DDTHH:MM:SSZ`, whole seconds with an upper-case `T`, is the text the key
        // writes itself; any other spelling of the instant is written again.
        if rest.len() == 20 && rest.as_bytes()[10] == b'T' {
            Ok(Self {
                job,
                slot: Slot::Scheduled(at),
                text: s.into(),
            })
        } else {
            Ok(Self::scheduled(job, at))
        }
    }
}

impl Serialize for OccurrenceKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
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
    fn a_key_parsed_from_another_spelling_is_the_key_and_writes_its_own_text() {
        let job = JobName::new("x").unwrap();
        let at: DateTime<Utc> = "2026-11-29T19:30:00Z".parse().unwrap();
        let made = OccurrenceKey::scheduled(job.clone(), at);
        for spelling in [
            "x@2026-11-29T19:30:00Z",
            "x@2026-11-29t19:30:00Z",
            "x@2026-11-29T19:30:00.000Z",
        ] {
            let parsed: OccurrenceKey = spelling.parse().unwrap();
            assert_eq!(parsed, made, "{spelling}");
            assert_eq!(parsed.as_str(), "x@2026-11-29T19:30:00Z", "{spelling}");
            let hash = |k: &OccurrenceKey| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                k.hash(&mut h);
                h.finish()
            };
            assert_eq!(hash(&parsed), hash(&made), "{spelling}");
        }
        let sub: OccurrenceKey = "x@2026-11-29T19:30:00.250Z".parse().unwrap();
        assert_eq!(sub.as_str(), "x@2026-11-29T19:30:00.250Z");
        assert_ne!(sub, made);
        assert!(made < sub);
        // Ordered by job, then instant, not by text ('-' sorts before '@').
        let a = OccurrenceKey::scheduled(job, at + chrono::Duration::seconds(1));
        let ab = OccurrenceKey::scheduled(JobName::new("x-b").unwrap(), at);
        assert!(a < ab && a.as_str() > ab.as_str());
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
