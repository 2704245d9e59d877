//! The scale bench's job mix: thousands of distinct (schedule, zone) pairs, as a large
//! deployment would have, none of which fires while the bench measures.
//!
//! Owns: generating the pairs from "now" and checking each one's next fire. Invariant:
//! every pair in a [`Mix`] first fires more than [`QUIET`] after the `now` it was built
//! for, so the producer is measured idle whatever the time of day the bench runs.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::str::FromStr as _;
use std::time::Duration;

use anyhow::{Context as _, bail};
use chrono::{DateTime, Datelike as _, TimeDelta, Utc};
use cronq_shared::schedule::Schedule;

/// No pair of the mix fires within this long after `now`: room for several runs of the
/// bench at a million jobs.
pub const QUIET: Duration = Duration::from_secs(6 * 3600);

/// Zones of the mix: with and without daylight saving, both hemispheres, a half-hour
/// offset.
const ZONES: &[&str] = &[
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Asia/Shanghai",
    "Australia/Sydney",
    "Asia/Kolkata",
    "America/Sao_Paulo",
];

/// How many `@every` durations the mix has.
const EVERY: usize = 300;

/// The kinds of schedule, and which of every 8 jobs gets each: 3 weekly pinned, 2 yearly
/// pinned, 1 wildcard-minute (croner's zone-aware path), 2 `@every`.
const KIND_OF_JOB: [usize; 8] = [0, 0, 0, 1, 1, 2, 3, 3];

/// The distinct pairs, by kind: weekly, yearly, wildcard, `@every`.
#[derive(Debug)]
pub struct Mix {
    kinds: [Vec<(String, &'static str)>; 4],
}

impl Mix {
    /// The mix for a bench started at `now`.
    ///
    /// Weekly schedules use the weekdays two to five days after today (UTC), yearly and
    /// wildcard ones the months five to seven months away, `@every` durations of 6 hours
    /// to about 90 days; each pair is then parsed and dropped if it fires within [`QUIET`].
    ///
    /// # Errors
    /// When a generated pattern does not parse (a bug in the generator).
    pub fn new(now: DateTime<Utc>) -> anyhow::Result<Self> {
        let weekday = now.weekday().num_days_from_sunday();
        let days: Vec<u32> = (2..=5).map(|d| (weekday + d) % 7).collect();
        let months: Vec<u32> = (5..=7).map(|m| (now.month0() + m) % 12 + 1).collect();
        let mut kinds: [Vec<(String, &'static str)>; 4] = Default::default();
        for &zone in ZONES {
            for &dow in &days {
                for hour in 0..24 {
                    for minute in (0..60).step_by(7) {
                        kinds[0].push((format!("{minute} {hour} * * {dow}"), zone));
                    }
                }
            }
            for (i, &month) in months.iter().enumerate() {
                let day = 1 + 9 * u32::try_from(i).unwrap_or(0);
                for hour in 0..24 {
                    for minute in [0, 15, 30, 45] {
                        kinds[1].push((format!("{minute} {hour} {day} {month} *"), zone));
                    }
                }
            }
            for step in [5, 10, 15, 20, 30] {
                for day in 1..=28 {
                    kinds[2].push((format!("*/{step} * {day} {} *", months[0]), zone));
                }
            }
        }
        for i in 0..EVERY as u64 {
            // 6 h up to ≈ 90 days, in uneven steps so the phases differ.
            let every = Duration::from_secs(6 * 3600 + i * (7 * 3600 + 61));
            let text = format!("@every {}", humantime::format_duration(every));
            kinds[3].push((text, "UTC"));
        }
        let quiet = now + TimeDelta::from_std(QUIET).context("QUIET fits a TimeDelta")?;
        for kind in &mut kinds {
            let mut kept = Vec::with_capacity(kind.len());
            for (text, zone) in kind.drain(..) {
                let tz = chrono_tz::Tz::from_str(zone)
                    .map_err(|e| anyhow::anyhow!("zone {zone}: {e}"))?;
                let schedule = Schedule::parse_at(&text, tz, now)
                    .with_context(|| format!("mix schedule {text:?} in {zone}"))?;
                if schedule.next_after(now).is_some_and(|next| next > quiet) {
                    kept.push((text, zone));
                }
            }
            if kept.is_empty() {
                bail!("the scale mix has no quiet schedule of some kind at {now}");
            }
            *kind = kept;
        }
        Ok(Self { kinds })
    }

    /// A config of `jobs` jobs, each with a command handler, and how many distinct
    /// (schedule, zone) pairs it uses.
    pub fn config_text(&self, jobs: usize) -> (String, usize) {
        let mut text = String::with_capacity(jobs * 100);
        let mut used = HashSet::new();
        // Each kind's jobs go round its pairs in turn.
        let mut taken = [0usize; 4];
        for i in 0..jobs {
            let kind = KIND_OF_JOB[i % KIND_OF_JOB.len()];
            let pairs = &self.kinds[kind];
            let index = taken[kind] % pairs.len();
            taken[kind] += 1;
            used.insert((kind, index));
            let (schedule, zone) = &pairs[index];
            let _ = write!(
                text,
                "[[job]]\nname = \"s{i}\"\nschedule = \"{schedule}\"\ntimezone = \"{zone}\"\ncommand = [\"true\"]\n"
            );
        }
        (text, used.len())
    }

    /// How many distinct (schedule, zone) pairs the mix has.
    pub fn len(&self) -> usize {
        self.kinds.iter().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use cronq_shared::config::Config;

    use super::*;

    #[test]
    fn the_mix_is_varied_and_quiet_at_any_time() {
        let start: DateTime<Utc> = "2026-01-01T00:00:00Z".parse().unwrap();
        // Every 12 hours 11 minutes over a week: each weekday, varied times of day.
        for step in 0..14 {
            let now = start + TimeDelta::minutes(731 * step);
            let mix = Mix::new(now).unwrap();
            assert!(mix.len() > 5_000, "{} pairs at {now}", mix.len());
            let (text, distinct) = mix.config_text(16_000);
            assert!(distinct > 5_000, "{distinct} used at {now}");
            if step % 7 == 3 {
                let config = Config::from_toml_at(&text, Path::new("mix.toml"), now).unwrap();
                let quiet = now + TimeDelta::from_std(QUIET).unwrap();
                let first = config
                    .jobs
                    .iter()
                    .filter_map(|j| j.schedule.next_after(now))
                    .min()
                    .unwrap();
                assert!(first > quiet, "{first} fires within QUIET of {now}");
                let every = config
                    .jobs
                    .iter()
                    .filter(|j| j.schedule.is_every().is_some())
                    .count();
                assert_eq!(every, 4_000, "a quarter are @every");
            }
        }
    }
}
