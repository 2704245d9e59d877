//! A job's `sla = { start_within, max_duration, success_within }` (`docs/alerts.md`): the
//! service levels the leader's alerting checks (`cronq_producer`'s `alerts`). Read from
//! `[defaults]` and from each job, field by field: a job's `sla` overrides the fields it
//! names and keeps the others of `[defaults]`.

use std::time::Duration;

use toml::{Table, Value};

use super::raw::unknown_field;
use super::report::Report;

/// The fields of an `sla` table.
pub(crate) const SLA_FIELDS: &[&str] = &["start_within", "max_duration", "success_within"];

/// A job's service levels; each `None` when not set (nothing is checked).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Sla {
    /// An attempt that starts later than this after its scheduled time breaches it.
    pub start_within: Option<Duration>,
    /// An attempt that runs longer than this breaches it (while it still runs).
    pub max_duration: Option<Duration>,
    /// No success of the job for this long breaches it: a dead man's switch.
    pub success_within: Option<Duration>,
}

impl Sla {
    /// Whether any level is set.
    pub fn is_set(&self) -> bool {
        self.start_within.is_some() || self.max_duration.is_some() || self.success_within.is_some()
    }

    /// Whether a running attempt is worth watching: a start or a duration level is set.
    pub fn watches_runs(&self) -> bool {
        self.start_within.is_some() || self.max_duration.is_some()
    }
}

/// `base` with the fields `raw` sets; each bad field is a problem naming `sla.FIELD`, and
/// keeps `base`'s value.
pub(super) fn resolve(
    base: Sla,
    raw: Option<&Table>,
    scope: &str,
    parse: impl Fn(&str) -> Result<Duration, String>,
    out: &mut Report,
) -> Sla {
    let Some(table) = raw else {
        return base;
    };
    let mut sla = base;
    for (key, value) in table {
        let field = format!("sla.{key}");
        let slot = match key.as_str() {
            "start_within" => &mut sla.start_within,
            "max_duration" => &mut sla.max_duration,
            "success_within" => &mut sla.success_within,
            _ => {
                out.problems.push(unknown_field(
                    scope,
                    "sla.",
                    key,
                    SLA_FIELDS.iter().copied(),
                ));
                continue;
            }
        };
        let Value::String(text) = value else {
            out.problem(
                scope,
                &field,
                format!("expected a duration string such as \"10m\", or \"none\", got {value}"),
            );
            continue;
        };
        if text == "none" {
            *slot = None;
            continue;
        }
        match parse(text) {
            Ok(d) if d.is_zero() => out.problem(
                scope,
                &field,
                format!("must be longer than 0s (or \"none\"), got {text:?}"),
            ),
            Ok(d) => *slot = Some(d),
            Err(message) => out.problem(scope, &field, message),
        }
    }
    sla
}
