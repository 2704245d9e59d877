//! Publish lateness, the figure of the precision benches: from an occurrence's scheduled
//! instant to its publish. The p50 / p99 / max figures over runs.
//!
//! Owns: those three figures' names. Invariant: a sample is always "when published minus
//! when scheduled", never a time the bench took.

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

#[cfg(test)]
mod tests {
    use super::*;

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
