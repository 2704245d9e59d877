//! Reading the `--log-format json` log of a process a test started (`TestEnv::log`).

use chrono::{DateTime, Utc};
use serde_json::Value;

/// The log's lines as JSON. A line being written while the log is read is cut short: it is
/// skipped, and read next time.
pub fn lines(log: &str) -> impl DoubleEndedIterator<Item = Value> + '_ {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
}

/// The lines whose `message` is `message`.
pub fn lines_of(log: &str, message: &str) -> Vec<Value> {
    lines(log)
        .filter(|l| l.get("message").and_then(Value::as_str) == Some(message))
        .collect()
}

/// When `line` was logged.
pub fn timestamp(line: &Value) -> DateTime<Utc> {
    let t = line["timestamp"]
        .as_str()
        .expect("a timestamp on every line");
    DateTime::parse_from_rfc3339(t)
        .expect("an RFC 3339 timestamp")
        .with_timezone(&Utc)
}
