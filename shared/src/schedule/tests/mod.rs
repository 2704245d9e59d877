//! Tests of the schedule engine: parsing, DST tables computed by hand, properties.

mod controls_props;
mod dst_table;
mod parse;
mod props;

use chrono::{DateTime, Utc};

/// An RFC 3339 instant.
pub(super) fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("bad instant {text:?}: {e}"))
        .with_timezone(&Utc)
}

/// "Now" for parse checks in tests: fixed, so never-fires results do not depend on the clock.
pub(super) fn now() -> DateTime<Utc> {
    at("2026-01-01T00:00:00Z")
}
mod hash;
