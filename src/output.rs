//! Output of the operations commands: aligned text tables for people, and one JSON document
//! on stdout for `--json`. Values are formatted here only, so every command prints times,
//! durations and errors the same way.

use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};

/// The widest a table cell gets; longer text (errors) is cut with `…` (`--json` has it all).
const MAX_CELL: usize = 60;

/// A text table with a header row; columns are padded to their widest cell.
#[derive(Debug)]
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these column headers.
    pub fn new(headers: &[&'static str]) -> Self {
        Self {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds one row (one cell per header); newlines are flattened and long cells cut.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows
            .push(cells.into_iter().map(|c| cell(&c)).collect());
    }

    /// Whether no row was added.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as text, one line per row, ending with a newline.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = String::new();
        let header: Vec<String> = self.headers.iter().map(|h| (*h).to_owned()).collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (i, (c, w)) in row.iter().zip(&widths).enumerate() {
                if i + 1 == row.len() {
                    line.push_str(c);
                } else {
                    let _ = write!(line, "{c:<w$}  ");
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

fn cell(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= MAX_CELL {
        return flat;
    }
    let mut cut: String = flat.chars().take(MAX_CELL - 1).collect();
    cut.push('…');
    cut
}

/// An instant in UTC, whole seconds: `2026-11-29T19:30:00Z`.
pub fn utc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// An instant in UTC to the millisecond: `2026-11-30T03:30:00.012Z` (the times of a run).
pub fn utc_ms(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// An instant in a zone, whole seconds with its offset: `2026-11-30T03:30:00+08:00`.
pub fn local<Tz: TimeZone>(t: &DateTime<Tz>) -> String
where
    Tz::Offset: std::fmt::Display,
{
    t.to_rfc3339_opts(SecondsFormat::Secs, false)
}

/// A short human duration: `350ms`, `2.5s`, `3m 20s`.
pub fn duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        return format!("{}ms", d.as_millis());
    }
    if d < Duration::from_secs(60) {
        return format!("{:.1}s", d.as_secs_f64());
    }
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

/// A lateness in seconds to the millisecond, `0.012` (`-0.003` when early, which two
/// hosts' clocks can make), for `cronq runs` ([`lateness`]) and the dashboard.
pub fn seconds(d: chrono::TimeDelta) -> String {
    format!("{:.3}", d.num_milliseconds() as f64 / 1000.0)
}

/// A lateness as `cronq runs` shows it: `0.012s` under a minute, `8m 52s` from a minute
/// on (a catch-up, a backlog), `-` when not known.
pub fn lateness(d: Option<chrono::TimeDelta>) -> String {
    let Some(d) = d else {
        return "-".to_owned();
    };
    match d.to_std() {
        Ok(long) if long >= Duration::from_secs(60) => {
            humantime::format_duration(Duration::from_secs(long.as_secs())).to_string()
        }
        _ => format!("{}s", seconds(d)),
    }
}

/// An optional text, `-` when absent.
pub fn or_dash(text: Option<&str>) -> String {
    text.filter(|t| !t.is_empty()).unwrap_or("-").to_owned()
}

/// Prints one JSON document on stdout.
pub fn print_json(value: &serde_json::Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("a JSON value always serialises")
    );
}

/// An error and its causes, `: `-separated as `{:#}` prints them, less a cause whose text
/// its error already ends with (a client error that repeats its I/O error's text).
pub fn chain(err: &anyhow::Error) -> String {
    let mut out = String::new();
    let mut last = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if !last.is_empty() && last.ends_with(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
        last = text;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_chain_says_a_repeated_cause_once() {
        let io = std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "refused (os error 111)",
        );
        let err = anyhow::Error::new(io)
            .context("client: refused (os error 111)")
            .context("while connecting");
        assert_eq!(
            chain(&err),
            "while connecting: client: refused (os error 111)"
        );
        let err = anyhow::anyhow!("root").context("outer");
        assert_eq!(chain(&err), "outer: root");
    }

    #[test]
    fn tables_align_and_cut() {
        let mut t = Table::new(&["KEY", "OUTCOME"]);
        t.row(vec!["a@1".into(), "succeeded".into()]);
        t.row(vec!["longer@key".into(), "x\ny".into()]);
        assert_eq!(
            t.render(),
            "KEY         OUTCOME\na@1         succeeded\nlonger@key  x y\n"
        );
        assert_eq!(cell(&"e".repeat(100)).chars().count(), MAX_CELL);
    }

    #[test]
    fn durations_are_short() {
        assert_eq!(duration(Duration::from_millis(350)), "350ms");
        assert_eq!(duration(Duration::from_millis(2500)), "2.5s");
        assert_eq!(duration(Duration::from_secs(200)), "3m 20s");
    }

    #[test]
    fn latenesses_are_seconds_to_the_millisecond() {
        let ms = chrono::TimeDelta::milliseconds;
        assert_eq!(lateness(Some(ms(12))), "0.012s");
        assert_eq!(lateness(Some(ms(42_051))), "42.051s");
        assert_eq!(lateness(Some(ms(-3))), "-0.003s");
        assert_eq!(lateness(None), "-");
        assert_eq!(lateness(Some(ms(532_543))), "8m 52s");
        assert_eq!(lateness(Some(ms(59_999))), "59.999s");
    }
}
