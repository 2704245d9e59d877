//! What the dashboard's operations answer (`super::actions`): one typed value each, which
//! the API serializes (`super::api`) and the pages render (`super::pages`), with the
//! sentence a page shows and what the audit log keeps of it ([`Done`]).
//!
//! Invariant: an answer's fields are its JSON's names and shapes; no page or audit entry
//! reads an answer back from JSON.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

/// What a done operation answers: the API serializes it, a page shows its message, the
/// audit log keeps its detail.
pub trait Done: Serialize {
    /// What happened, in a sentence.
    fn message(&self) -> &str;

    /// What the audit log keeps of it beyond the action and the job, if anything.
    fn detail(&self) -> Option<String> {
        None
    }
}

/// A pause as an answer shows it.
#[derive(Debug, Clone, Serialize)]
pub struct PauseShown {
    /// When the job was paused.
    pub since: String,
    /// Why.
    pub note: Option<String>,
}

/// What [`pause`](super::actions::pause) did.
#[derive(Debug, Clone, Serialize)]
pub struct Paused {
    /// The job.
    pub job: String,
    /// The pause in force.
    pub paused: PauseShown,
    /// What happened.
    pub message: String,
}

impl Done for Paused {
    fn message(&self) -> &str {
        &self.message
    }
}

/// What [`resume`](super::actions::resume) did.
#[derive(Debug, Clone, Serialize)]
pub struct Resumed {
    /// The job.
    pub job: String,
    /// Whether it was paused.
    pub was_paused: bool,
    /// What happened.
    pub message: String,
}

impl Done for Resumed {
    fn message(&self) -> &str {
        &self.message
    }

    fn detail(&self) -> Option<String> {
        (!self.was_paused).then(|| "was not paused".to_owned())
    }
}

/// What [`trigger`](super::actions::trigger) requested.
#[derive(Debug, Clone, Serialize)]
pub struct Triggered {
    /// The job.
    pub job: String,
    /// The occurrence key requested.
    pub key: String,
    /// When it runs, if not now.
    pub at: Option<DateTime<Utc>>,
    /// What happened.
    pub message: String,
}

impl Done for Triggered {
    fn message(&self) -> &str {
        &self.message
    }

    fn detail(&self) -> Option<String> {
        Some(self.key.clone())
    }
}

/// What [`backfill`](super::actions::backfill) counted, and requested unless dry.
#[derive(Debug, Clone, Serialize)]
pub struct Backfilled {
    /// The job.
    pub job: String,
    /// The first instant.
    pub from: String,
    /// The last instant.
    pub to: String,
    /// The occurrences in the range.
    pub count: usize,
    /// `count` as shown (`more than …` when counting stopped).
    pub shown: String,
    /// Whether it only counted.
    pub dry_run: bool,
    /// The request's id, when one was made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// What happened.
    pub message: String,
}

impl Done for Backfilled {
    fn message(&self) -> &str {
        &self.message
    }

    fn detail(&self) -> Option<String> {
        let dry = if self.dry_run { "dry run: " } else { "" };
        Some(format!(
            "{dry}{} to {} ({} occurrences)",
            self.from, self.to, self.shown
        ))
    }
}

impl Done for ReplayReport {
    fn message(&self) -> &str {
        &self.message
    }

    fn detail(&self) -> Option<String> {
        let dry = if self.dry_run { "dry run: " } else { "" };
        let keys: Vec<&str> = self
            .entries
            .iter()
            .filter(|e| matches!(e.result.as_str(), "replayed" | "would replay"))
            .filter_map(|e| e.key.as_deref())
            .collect();
        Some(format!(
            "{dry}{} replayed: {}",
            self.replayed,
            keys.join(" ")
        ))
    }
}

/// A cancel's answer, whose shape `crate::ops::cancel::json` owns (the command line's
/// `--json` writes the same).
impl Done for Value {
    fn message(&self) -> &str {
        self["message"].as_str().unwrap_or("done")
    }
}

/// One letter's result, as the API answers it.
#[derive(Debug, Clone, Serialize)]
pub struct Replayed {
    /// The key, when the letter had one.
    pub key: Option<String>,
    /// The job, when the letter had one.
    pub job: Option<String>,
    /// Why it had been dead-lettered.
    pub reason: String,
    /// `would replay`, `replayed`, `kept: WHY`, `gone`.
    pub result: String,
}

/// What a replay did (or, dry, would do): the API's answer and the page's result.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    /// Whether it only listed.
    pub dry_run: bool,
    /// How many letters it republished.
    pub replayed: usize,
    /// Each selected letter's result.
    pub entries: Vec<Replayed>,
    /// What happened, in a sentence.
    pub message: String,
}

/// One next fire time of a job, as the API answers it and the job's page and the editor
/// show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NextFire {
    /// The instant in UTC.
    pub utc: String,
    /// The same instant in the job's zone, with its offset.
    pub local: String,
    /// The change of the zone's UTC offset since the fire before, if any.
    pub transition: Option<String>,
}
