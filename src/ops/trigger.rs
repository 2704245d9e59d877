//! What `cronq trigger` and the dashboard's trigger share: reading the replacement payload
//! and the instant of `--at`.

use chrono::{DateTime, Utc};

/// The payload an operator typed: `None` for nothing (or only blanks), else JSON. The
/// error message starts with "is not valid JSON": the caller names the field before it.
///
/// # Errors
/// A message naming what is wrong and the expected form, for text that is not JSON.
pub fn payload(text: Option<&str>) -> Result<Option<serde_json::Value>, String> {
    match text.map(str::trim) {
        None | Some("") => Ok(None),
        Some(text) => serde_json::from_str(text).map(Some).map_err(|e| {
            format!("is not valid JSON ({e}); give a JSON value such as {{\"region\": \"cn\"}}")
        }),
    }
}

/// The instant an operator asked a trigger to run at: RFC 3339, after `now`. The error
/// message starts with the value: the caller names the field before it.
///
/// # Errors
/// A message naming what is wrong, for text that is not RFC 3339 or an instant not after
/// `now`.
pub fn at(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let text = text.trim();
    let at = super::lookup::rfc3339(text)?;
    if at <= now {
        return Err(format!(
            "{text:?} is in the past (now is {}): give a future instant, or leave it out to run now",
            now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        ));
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_is_a_future_rfc3339_instant() {
        let now: DateTime<Utc> = "2026-12-04T10:00:00Z".parse().unwrap();
        assert_eq!(
            at("2026-12-04T11:00:01+01:00", now).unwrap(),
            "2026-12-04T10:00:01Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert!(
            at("2026-12-04T10:00:00Z", now)
                .unwrap_err()
                .contains("is in the past")
        );
        assert!(
            at("tomorrow", now)
                .unwrap_err()
                .contains("not an RFC 3339 instant")
        );
    }
}
