//! Schedules: cron expressions (via `croner`) and epoch-aligned `@every`, evaluated in a
//! job's IANA zone.
//!
//! Owns: parsing a schedule string and computing fire instants. Leaves to the producer:
//! deciding which instants are due. Invariant: `next_after` is a pure function of the
//! schedule and its argument (no clock, no process start), strictly increasing, so every
//! producer computes the same keys (G4).

use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

/// Why a schedule string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ScheduleError(pub String);

/// A parsed schedule in a zone.
#[derive(Debug, Clone)]
pub struct Schedule {
    text: String,
    tz: Tz,
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    Every(Duration),
    Cron(Box<croner::Cron>),
}

impl Schedule {
    /// Parses `text` for zone `tz`.
    ///
    /// # Errors
    /// When the text is not a schedule, or one that can never fire.
    pub fn parse(text: &str, tz: Tz) -> Result<Self, ScheduleError> {
        let trimmed = text.trim();
        let kind = if let Some(rest) = trimmed.strip_prefix("@every") {
            let every = humantime::parse_duration(rest.trim())
                .map_err(|e| ScheduleError(format!("{rest:?} is not a duration: {e}")))?;
            Kind::Every(every)
        } else {
            let cron = croner::parser::CronParser::builder()
                .seconds(croner::parser::Seconds::Optional)
                .year(croner::parser::Year::Optional)
                .build()
                .parse(trimmed)
                .map_err(|e| ScheduleError(e.to_string()))?;
            Kind::Cron(Box::new(cron))
        };
        Ok(Self {
            text: text.to_owned(),
            tz,
            kind,
        })
    }

    /// The first fire instant strictly after `after`, or `None` when the schedule has no
    /// more (a 7-field expression whose years are past).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.kind {
            Kind::Every(every) => {
                let step = every.as_secs() as i64;
                let t = after.timestamp();
                let next = (t.div_euclid(step) + 1) * step;
                DateTime::from_timestamp(next, 0)
            }
            Kind::Cron(cron) => cron
                .find_next_occurrence(&after.with_timezone(&self.tz), false)
                .ok()
                .map(|t| t.with_timezone(&Utc)),
        }
    }

    /// The fire instants strictly after `after`, in order.
    pub fn iter_after(&self, after: DateTime<Utc>) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        std::iter::successors(self.next_after(after), move |t| self.next_after(*t))
    }

    /// The schedule as written in the config.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The zone the schedule is evaluated in.
    pub fn timezone(&self) -> Tz {
        self.tz
    }
}
