//! Publish lateness, the figure of the precision benches: from an occurrence's scheduled
//! instant to its publish. The p50 / p99 / max figures over runs, and reading lateness
//! from a producer's `published occurrence` log lines when the producer is a child process.
//!
//! Owns: those three figures' names and the log format they are read from. Invariant: a
//! sample is always "when published minus when scheduled", never a time the bench took.

use chrono::{DateTime, Utc};

use crate::report::Figure;
use crate::stats::{Distribution, Unit};

/// The p50, p99 and max figures of one measured configuration, next to a baseline.
#[derive(Debug)]
pub struct Figures {
    p50: Figure,
    p99: Figure,
    max: Figure,
}

impl Figures {
    /// `publish lateness p50, {subject}` and its p99 and max, each against `baseline`;
    /// `goal` goes on the p99.
    pub fn new(bench: &str, subject: &str, baseline: &str, goal: &str) -> Self {
        let figure = |p: &str| {
            Figure::new(
                bench,
                format!("publish lateness {p}, {subject}"),
                Unit::Seconds,
            )
            .baseline(baseline)
        };
        Self {
            p50: figure("p50"),
            p99: figure("p99").goal(goal),
            max: figure("max"),
        }
    }

    /// Adds one run: its distribution and its baseline's.
    pub fn push(&mut self, run: &Distribution, baseline: &Distribution) {
        for (figure, (value, base)) in [&mut self.p50, &mut self.p99, &mut self.max]
            .into_iter()
            .zip([
                (run.p50, baseline.p50),
                (run.p99, baseline.p99),
                (run.max, baseline.max),
            ])
        {
            figure.runs.push(value);
            figure.push_baseline(base);
        }
    }

    /// The p99 figure (to judge its goal).
    pub fn p99(&self) -> &Figure {
        &self.p99
    }

    /// The figures, p50 first.
    pub fn into_figures(self) -> [Figure; 3] {
        [self.p50, self.p99, self.max]
    }
}

/// A one-line summary of `d` for progress output: the count, p50, p99 and max in ms.
pub fn summary(d: &Distribution) -> String {
    format!(
        "{} samples p50 {:.2} ms p99 {:.2} ms max {:.2} ms",
        d.count,
        d.p50 * 1e3,
        d.p99 * 1e3,
        d.max * 1e3
    )
}

/// One publish's lateness, with the whole second it was due at (every job of the
/// precision benches is `@every 1s`), so a run's samples can be cut into its seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Late {
    /// Scheduled instant → confirm, in seconds.
    pub seconds: f64,
    /// The scheduled instant, whole seconds since the epoch.
    pub due: i64,
}

impl Late {
    /// A lateness taken at `now`, after its confirm: due at `now − seconds`, to the
    /// nearest whole second (right while it is taken less than 0.5 s after its confirm;
    /// the seconds cut by the start and end of a measurement are counted too).
    pub fn taken_at(seconds: f64, now: DateTime<Utc>) -> Self {
        let now = now.timestamp_micros() as f64 / 1e6;
        Self {
            seconds,
            due: (now - seconds).round() as i64,
        }
    }
}

/// The lateness of each sample, in seconds.
pub fn values(samples: &[Late]) -> Vec<f64> {
    samples.iter().map(|s| s.seconds).collect()
}

/// The slowest confirm of each second due, in the seconds' order.
pub fn per_second_max(samples: &[Late]) -> Vec<f64> {
    let mut maxes = std::collections::BTreeMap::new();
    for s in samples {
        maxes
            .entry(s.due)
            .and_modify(|m: &mut f64| *m = m.max(s.seconds))
            .or_insert(s.seconds);
    }
    maxes.into_values().collect()
}

/// A one-line summary of each second's slowest confirm: how many seconds, and the min,
/// median and max of their maxes in ms (the p99 of a run is set by its slowest seconds).
pub fn per_second_summary(samples: &[Late]) -> String {
    let maxes = per_second_max(samples);
    match crate::stats::Spread::of(&maxes) {
        Some(s) => format!(
            "{} seconds, each second's slowest confirm min {:.1} / median {:.1} / max {:.1} ms",
            maxes.len(),
            s.min * 1e3,
            s.median * 1e3,
            s.max * 1e3
        ),
        None => "no seconds".to_owned(),
    }
}

/// The `published occurrence` line a producer logs at debug
/// (`RUST_LOG=cronq_producer::publisher=debug`) per occurrence.
pub const PUBLISHED: &str = "published occurrence";

/// One `--log-format json` line, if it is a `published occurrence` of a scheduled (or
/// caught-up) occurrence: its scheduled instant, and its lateness in seconds (the line's
/// timestamp minus the instant in its key `JOB@SCHEDULED_UTC`).
///
/// The timestamp is taken when the line is written, after the publish was confirmed, so
/// it also holds the time spent logging the lines before it in the same batch.
pub fn from_json_line(line: &str) -> Option<(DateTime<Utc>, f64)> {
    // Cheap test first: most lines of a busy process are other messages.
    if !line.contains(PUBLISHED) {
        return None;
    }
    let value: serde_json::Value = serde_json::from_str(line).ok()?;
    let text = |name: &str| value.get(name).and_then(serde_json::Value::as_str);
    if text("message") != Some(PUBLISHED)
        || !matches!(text("trigger"), Some("Schedule" | "Catchup"))
    {
        return None;
    }
    let (_, at) = text("key")?.rsplit_once('@')?;
    let scheduled = DateTime::parse_from_rfc3339(at).ok()?.with_timezone(&Utc);
    let published = DateTime::parse_from_rfc3339(text("timestamp")?)
        .ok()?
        .with_timezone(&Utc);
    let late = (published - scheduled).to_std().unwrap_or_default();
    Some((scheduled, late.as_secs_f64()))
}

/// The lateness samples of `lines` whose occurrence was scheduled in `[from, to)`.
pub fn in_window<'a>(
    lines: impl IntoIterator<Item = &'a String>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Vec<f64> {
    lines
        .into_iter()
        .filter_map(|l| from_json_line(l))
        .filter(|(at, _)| *at >= from && *at < to)
        .map(|(_, late)| late)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"{"timestamp":"2026-12-01T10:00:05.004250Z","level":"DEBUG","message":"published occurrence","job":"s7","key":"s7@2026-12-01T10:00:05Z","trigger":"Schedule","epoch":1,"target":"cronq_producer::publisher"}"#;

    #[test]
    fn reads_lateness_from_published_lines() {
        let (at, late) = from_json_line(LINE).unwrap();
        assert_eq!(at, "2026-12-01T10:00:05Z".parse::<DateTime<Utc>>().unwrap());
        assert!((late - 0.004_25).abs() < 1e-9, "{late}");
        let manual = LINE.replace("Schedule", "Manual");
        assert_eq!(from_json_line(&manual), None);
        let other = LINE.replace("published occurrence", "attempt succeeded");
        assert_eq!(from_json_line(&other), None);
        assert_eq!(from_json_line("published occurrence, cut sho"), None);
    }

    #[test]
    fn cuts_samples_into_the_seconds_they_were_due() {
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        // Taken 30 and 45 ms after 10:00:05, 90 ms after 10:00:06, and one of 10:00:05
        // whose confirm was 600 ms late, taken after the first of 10:00:06.
        let late = Late::taken_at(0.030, at("2026-12-01T10:00:05.030Z"));
        assert_eq!(late.due, at("2026-12-01T10:00:05Z").timestamp());
        let samples = [
            late,
            Late::taken_at(0.045, at("2026-12-01T10:00:05.046Z")),
            Late::taken_at(0.090, at("2026-12-01T10:00:06.091Z")),
            Late::taken_at(0.600, at("2026-12-01T10:00:05.601Z")),
        ];
        assert_eq!(per_second_max(&samples), [0.600, 0.090]);
        assert_eq!(values(&samples), [0.030, 0.045, 0.090, 0.600]);
        assert!(per_second_max(&[]).is_empty());
        assert_eq!(
            per_second_summary(&samples),
            "2 seconds, each second's slowest confirm min 90.0 / median 90.0 / max 600.0 ms"
        );
    }

    #[test]
    fn keeps_only_the_window() {
        let lines = vec![
            LINE.to_owned(),
            LINE.replace("10:00:05Z", "10:00:06Z")
                .replace("10:00:05.00", "10:00:06.00"),
        ];
        let from = "2026-12-01T10:00:06Z".parse().unwrap();
        let to = "2026-12-01T10:00:07Z".parse().unwrap();
        assert_eq!(in_window(&lines, from, to).len(), 1);
    }

    #[test]
    fn figures_take_each_percentile() {
        let mut f = Figures::new("b", "10 jobs", "base", "< 1 s");
        let run = Distribution::of(&[1.0, 2.0, 3.0]).unwrap();
        let base = Distribution::of(&[0.5]).unwrap();
        f.push(&run, &base);
        let [p50, p99, max] = f.into_figures();
        assert_eq!((p50.runs[0], p99.runs[0], max.runs[0]), (2.0, 3.0, 3.0));
        assert_eq!(p99.goal.as_deref(), Some("< 1 s"));
        assert_eq!(p50.name, "publish lateness p50, 10 jobs");
        assert_eq!(max.baseline.unwrap().runs, vec![0.5]);
    }
}
