//! The pure statistics of the benchmarks: percentiles of one run's samples, the
//! min/median/max of a figure over runs, and how ratios and durations are printed.
//!
//! Owns: every number that reaches a table. No clock, no I/O, so it is unit-tested.
//! Invariant: a percentile is a value that was observed (nearest rank), never an
//! interpolation, so "max" and "p100" agree and a p99 of 100 samples is the 99th.

use serde::Serialize;

/// Nearest rank on already sorted, non-empty samples.
fn nearest_rank(sorted: &[f64], p: f64) -> f64 {
    let p = p.clamp(0.0, 100.0);
    // Rank ceil(p/100 * n), 1-based; rank 0 (p = 0) is the minimum.
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The percentiles a cumulative chart draws: every whole one, then 99.5 and 99.9.
const CHART_PERCENTILES: [f64; 2] = [99.5, 99.9];

/// `[percentile, value]` of unsorted `samples` at 0, 1, …, 100, 99.5 and 99.9 (in that
/// order of percentile), nearest rank; empty when there are none.
pub fn percentiles(samples: &[f64]) -> Vec<[f64; 2]> {
    if samples.is_empty() {
        return Vec::new();
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mut ps: Vec<f64> = (0..=100).map(f64::from).collect();
    ps.extend(CHART_PERCENTILES);
    ps.sort_by(f64::total_cmp);
    ps.into_iter()
        .map(|p| [p, nearest_rank(&sorted, p)])
        .collect()
}

/// p50, p99 and max of one run's samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Distribution {
    /// How many samples.
    pub count: usize,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
}

impl Distribution {
    /// The distribution of `samples`, or `None` when there are none.
    pub fn of(samples: &[f64]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        Some(Self {
            count: sorted.len(),
            p50: nearest_rank(&sorted, 50.0),
            p99: nearest_rank(&sorted, 99.0),
            max: sorted[sorted.len() - 1],
        })
    }
}

/// One figure over several runs: min, median and max of the per-run values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// Smallest run.
    pub min: f64,
    /// Median run (the lower middle one for an even count).
    pub median: f64,
    /// Largest run.
    pub max: f64,
}

impl Spread {
    /// The spread of `runs`, or `None` when there are none.
    pub fn of(runs: &[f64]) -> Option<Self> {
        if runs.is_empty() {
            return None;
        }
        let mut sorted = runs.to_vec();
        sorted.sort_by(f64::total_cmp);
        Some(Self {
            min: sorted[0],
            median: sorted[(sorted.len() - 1) / 2],
            max: sorted[sorted.len() - 1],
        })
    }
}

/// How a figure's values are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Seconds, printed as µs, ms or s.
    Seconds,
    /// A rate per second.
    PerSecond,
    /// A ratio, printed as a percentage.
    Ratio,
    /// Bytes, printed as KiB/MiB/GiB.
    Bytes,
    /// A share of one CPU core (0.01 = 1%).
    CoreShare,
    /// Nanoseconds per call.
    NanosPerCall,
    /// A plain count.
    Count,
}

/// Formats `value` in `unit` for a table cell.
pub fn format(value: f64, unit: Unit) -> String {
    if !value.is_finite() {
        return "n/a".to_owned();
    }
    match unit {
        Unit::Seconds => format_seconds(value),
        Unit::PerSecond => format!("{}/s", group(value)),
        Unit::Ratio => format_ratio(value),
        Unit::Bytes => format_bytes(value),
        Unit::CoreShare => format!("{:.2}%", value * 100.0),
        Unit::NanosPerCall => format!("{value:.0} ns"),
        Unit::Count => group(value),
    }
}

/// A duration in seconds, in the unit that keeps 3 significant-ish digits.
pub fn format_seconds(secs: f64) -> String {
    let abs = secs.abs();
    if abs < 1e-3 {
        format!("{:.0} µs", secs * 1e6)
    } else if abs < 1.0 {
        format!("{:.2} ms", secs * 1e3)
    } else {
        format!("{secs:.2} s")
    }
}

/// A ratio as a percentage with one decimal: `0.7312` → `73.1%`.
pub fn format_ratio(ratio: f64) -> String {
    if !ratio.is_finite() {
        return "n/a".to_owned();
    }
    format!("{:.1}%", ratio * 100.0)
}

/// `part / whole`, or NaN when `whole` is zero (printed `n/a`, never a division panic).
pub fn ratio(part: f64, whole: f64) -> f64 {
    if whole == 0.0 { f64::NAN } else { part / whole }
}

fn format_bytes(bytes: f64) -> String {
    const KIB: f64 = 1024.0;
    if bytes >= KIB * KIB * KIB {
        format!("{:.2} GiB", bytes / (KIB * KIB * KIB))
    } else if bytes >= KIB * KIB {
        format!("{:.1} MiB", bytes / (KIB * KIB))
    } else {
        format!("{:.0} KiB", bytes / KIB)
    }
}

/// An integer-rounded number with `,` thousands separators.
fn group(value: f64) -> String {
    let rounded = value.round();
    let digits = format!("{:.0}", rounded.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if rounded < 0.0 {
        out.insert(0, '-');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The nearest-rank `p`-th percentile of unsorted `samples`.
    fn percentile(samples: &[f64], p: f64) -> Option<f64> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        Some(nearest_rank(&sorted, p))
    }

    #[test]
    fn chart_percentiles_rise_to_the_maximum() {
        let samples: Vec<f64> = (1..=1000).rev().map(f64::from).collect();
        let points = percentiles(&samples);
        assert_eq!(points.len(), 103);
        assert_eq!(points[0], [0.0, 1.0]);
        assert_eq!(points[50], [50.0, 500.0]);
        assert!(points.contains(&[99.5, 995.0]), "{points:?}");
        assert_eq!(points[points.len() - 1], [100.0, 1000.0]);
        assert!(
            points
                .windows(2)
                .all(|w| w[0][0] < w[1][0] && w[0][1] <= w[1][1])
        );
        assert!(percentiles(&[]).is_empty());
    }

    #[test]
    fn nearest_rank_percentiles_are_observed_values() {
        let samples: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(percentile(&samples, 50.0), Some(50.0));
        assert_eq!(percentile(&samples, 99.0), Some(99.0));
        assert_eq!(percentile(&samples, 100.0), Some(100.0));
        assert_eq!(percentile(&samples, 0.0), Some(1.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
        // Two samples: the median is the lower one, p99 the upper one.
        assert_eq!(percentile(&[2.0, 1.0], 50.0), Some(1.0));
        assert_eq!(percentile(&[2.0, 1.0], 99.0), Some(2.0));
    }

    #[test]
    fn distribution_and_spread_summarise() {
        let d = Distribution::of(&[0.003, 0.001, 0.002, 0.010]).unwrap();
        assert_eq!(d.count, 4);
        assert_eq!(d.p50, 0.002);
        assert_eq!(d.p99, 0.010);
        assert_eq!(d.max, 0.010);
        assert_eq!(Distribution::of(&[]), None);
        let s = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.min, s.median, s.max), (1.0, 2.0, 3.0));
        let even = Spread::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(even.median, 2.0);
    }

    #[test]
    fn ratios_and_units_format_for_tables() {
        assert_eq!(format_ratio(0.7312), "73.1%");
        assert_eq!(format_ratio(1.0), "100.0%");
        assert_eq!(format_ratio(ratio(1.0, 0.0)), "n/a");
        assert_eq!(ratio(3.0, 4.0), 0.75);
        assert_eq!(format(0.0042, Unit::Seconds), "4.20 ms");
        assert_eq!(format(0.000_250, Unit::Seconds), "250 µs");
        assert_eq!(format(2.5, Unit::Seconds), "2.50 s");
        assert_eq!(format(12_345.6, Unit::PerSecond), "12,346/s");
        assert_eq!(format(1_000_000.0, Unit::Count), "1,000,000");
        assert_eq!(format(512.0 * 1024.0 * 1024.0, Unit::Bytes), "512.0 MiB");
        assert_eq!(format(0.0123, Unit::CoreShare), "1.23%");
        assert_eq!(format(f64::NAN, Unit::Ratio), "n/a");
    }
}
