//! What the alerts are made of: an [`Event`] (one thing that happened, as a detector saw
//! it) and a [`Notice`] (what a sink sends: a group of events of one job and kind, or its
//! resolution), with the texts every sink shows.

use chrono::{DateTime, SecondsFormat, Utc};
use cronq_shared::config::AlertKind;
use serde::Serialize;

/// One thing that happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// What.
    pub kind: AlertKind,
    /// The job, for the per-job kinds.
    pub job: Option<String>,
    /// What it is about: an occurrence key, a queue, or the job itself.
    pub subject: String,
    /// One line saying what happened.
    pub summary: String,
    /// When it happened.
    pub at: DateTime<Utc>,
}

impl Event {
    /// What events are grouped by: the kind, and the job (or the subject for the kinds
    /// about the fleet).
    pub fn group(&self) -> (AlertKind, String) {
        let scope = match &self.job {
            Some(job) if self.kind.is_per_job() => job.clone(),
            _ => self.subject.clone(),
        };
        (self.kind, scope)
    }
}

/// Whether a notice raises or ends a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// It happens (again).
    Firing,
    /// It is over: the job succeeded since, or the condition cleared.
    Resolved,
}

impl Status {
    fn upper(self) -> &'static str {
        match self {
            Self::Firing => "FIRING",
            Self::Resolved => "RESOLVED",
        }
    }
}

/// What a sink sends, also the generic webhook's JSON body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Notice {
    /// Firing or resolved.
    pub status: Status,
    /// The kind, as `events = [...]` names it.
    #[serde(serialize_with = "kind_name")]
    pub kind: AlertKind,
    /// The job, for the per-job kinds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The latest event's subject: an occurrence key, a queue, the job.
    pub subject: String,
    /// The latest event's line (for a resolution, why it is resolved).
    pub summary: String,
    /// When the latest event happened (for a resolution, when it was resolved).
    #[serde(serialize_with = "rfc3339")]
    pub at: DateTime<Utc>,
    /// When the group's first event happened.
    #[serde(serialize_with = "rfc3339")]
    pub first_at: DateTime<Utc>,
    /// Events this notice stands for: 1 for a first notice, the events counted since the
    /// last notice for a repeat, every event of the group for a resolution.
    pub count: u64,
    /// The dashboard's page of the job (or its fleet page), when `dashboard_url` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

fn kind_name<S: serde::Serializer>(kind: &AlertKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(kind.as_str())
}

fn rfc3339<S: serde::Serializer>(at: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&at.to_rfc3339_opts(SecondsFormat::Millis, true))
}

impl Notice {
    /// The one-line title: `[cronq] FIRING dead_lettered: job nightly-report`.
    pub fn title(&self) -> String {
        let about = match &self.job {
            Some(job) => format!("job {job}"),
            None => self.subject.clone(),
        };
        format!("[cronq] {} {}: {about}", self.status.upper(), self.kind)
    }

    /// The full text (an email's body, a chat message's lines).
    pub fn text(&self) -> String {
        let mut lines = vec![self.title(), String::new(), self.summary.clone()];
        if self.job.is_some() {
            lines.push(format!("occurrence: {}", self.subject));
        }
        lines.push(format!(
            "at: {}",
            self.at.to_rfc3339_opts(SecondsFormat::Secs, true)
        ));
        match self.status {
            Status::Firing if self.count > 1 => lines.push(format!(
                "{} times since {}",
                self.count,
                self.first_at.to_rfc3339_opts(SecondsFormat::Secs, true)
            )),
            Status::Resolved => lines.push(format!(
                "firing since {} ({} events)",
                self.first_at.to_rfc3339_opts(SecondsFormat::Secs, true),
                self.count
            )),
            Status::Firing => {}
        }
        if let Some(link) = &self.link {
            lines.push(link.clone());
        }
        lines.join("\n")
    }
}
