//! A job's `payload` table, converted to the JSON an occurrence carries.
//!
//! Invariant: every TOML value has one JSON form (date-times become RFC 3339 strings); a
//! value JSON cannot hold (a NaN or infinite float) is a problem naming its dotted path.

use toml::Table;

use super::raw::key_text;
use super::report::Report;

/// The job's payload as JSON: an empty object when the job sets none.
pub(super) fn resolve_payload(
    payload: Option<&Table>,
    scope: &str,
    out: &mut Report,
) -> serde_json::Value {
    match payload {
        Some(table) => toml_to_json(&toml::Value::Table(table.clone()), scope, "payload", out),
        None => serde_json::Value::Object(serde_json::Map::new()),
    }
}

/// Converts a TOML value to JSON; date-times become RFC 3339 strings.
fn toml_to_json(
    value: &toml::Value,
    scope: &str,
    field: &str,
    out: &mut Report,
) -> serde_json::Value {
    use serde_json::Value as J;
    match value {
        toml::Value::String(s) => J::String(s.clone()),
        toml::Value::Integer(i) => J::from(*i),
        toml::Value::Float(f) => match serde_json::Number::from_f64(*f) {
            Some(n) => J::Number(n),
            None => {
                out.problem(
                    scope,
                    field,
                    format!("{f} cannot be represented in JSON: use a finite number or a string"),
                );
                J::Null
            }
        },
        toml::Value::Boolean(b) => J::Bool(*b),
        toml::Value::Datetime(d) => J::String(d.to_string()),
        toml::Value::Array(items) => J::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| toml_to_json(v, scope, &format!("{field}[{i}]"), out))
                .collect(),
        ),
        toml::Value::Table(t) => J::Object(
            t.iter()
                .map(|(k, v)| {
                    let path = format!("{field}.{}", key_text(k));
                    (k.clone(), toml_to_json(v, scope, &path, out))
                })
                .collect(),
        ),
    }
}
