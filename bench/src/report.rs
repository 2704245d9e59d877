//! The results: figures with their baselines, printed as a table, saved as JSON, and
//! written as a Markdown section of `docs/benchmarks-notebook.md`.
//!
//! Owns: the result model and its three renderings. Invariant: every figure is shown as
//! min / median / max over its runs, next to its same-run baseline when it has one.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::procfs::Machine;
use crate::stats::{Spread, Unit, format};

/// The same-run reference a figure is compared with.
#[derive(Debug, Clone, Serialize)]
pub struct Baseline {
    /// What the baseline is, e.g. `bare lapin publish+confirm`.
    pub name: String,
    /// Its value in each run.
    pub runs: Vec<f64>,
}

/// One measured figure over several runs.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    /// Which benchmark (`precision`, `throughput`, …).
    pub bench: String,
    /// What is measured, e.g. `publish lateness p99, 10,000 jobs`.
    pub name: String,
    /// How the values print.
    pub unit: Unit,
    /// The value in each run.
    pub runs: Vec<f64>,
    /// The same-run baseline, if any.
    pub baseline: Option<Baseline>,
    /// The stated goal, e.g. `< 5 ms`.
    pub goal: Option<String>,
}

impl Figure {
    /// A figure with no baseline and no goal yet.
    pub fn new(bench: &str, name: impl Into<String>, unit: Unit) -> Self {
        Self {
            bench: bench.to_owned(),
            name: name.into(),
            unit,
            runs: Vec::new(),
            baseline: None,
            goal: None,
        }
    }

    /// Sets the baseline's name (values come with [`Figure::push_baseline`]).
    pub fn baseline(mut self, name: impl Into<String>) -> Self {
        self.baseline = Some(Baseline {
            name: name.into(),
            runs: Vec::new(),
        });
        self
    }

    /// Sets the goal text.
    pub fn goal(mut self, goal: impl Into<String>) -> Self {
        self.goal = Some(goal.into());
        self
    }

    /// Adds one run's baseline value.
    pub fn push_baseline(&mut self, value: f64) {
        if let Some(b) = self.baseline.as_mut() {
            b.runs.push(value);
        }
    }

    fn cell(&self, runs: &[f64]) -> String {
        match Spread::of(runs) {
            Some(s) if runs.len() == 1 => format(s.median, self.unit),
            Some(s) => format!(
                "{} / {} / {}",
                format(s.min, self.unit),
                format(s.median, self.unit),
                format(s.max, self.unit)
            ),
            None => "n/a".to_owned(),
        }
    }
}

/// One measured distribution: its percentiles, for a cumulative chart.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Series {
    /// What was measured, e.g. `cronq` or `bare lapin burst`.
    pub name: String,
    /// How many samples, over every run.
    pub samples: usize,
    /// `[percentile, value]` pairs in increasing percentile (see [`crate::stats::percentiles`]).
    pub points: Vec<[f64; 2]>,
}

/// Distributions measured side by side (cronq and its baselines), drawn on one chart.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Curves {
    /// Which benchmark.
    pub bench: String,
    /// What is measured, e.g. `publish lateness, 1,000 jobs`.
    pub name: String,
    /// How the values print.
    pub unit: Unit,
    /// cronq's first, then its baselines'.
    pub series: Vec<Series>,
}

/// Everything one invocation measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// When the bench started (RFC 3339, UTC).
    pub started_at: String,
    /// The commit measured (`git describe --always --dirty`), when the bench runs in a
    /// checkout.
    pub commit: Option<String>,
    /// The command line.
    pub command: String,
    /// Where it ran.
    pub machine: Machine,
    /// The sizes used, per benchmark.
    pub sizes: serde_json::Map<String, serde_json::Value>,
    /// Every figure.
    pub figures: Vec<Figure>,
    /// Distributions kept whole for charts (`crate::chart`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub curves: Vec<Curves>,
    /// Remarks (skipped parts, caveats found while running).
    pub notes: Vec<String>,
}

impl Report {
    /// An empty report for this invocation.
    pub fn new(command: String) -> Self {
        Self {
            started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            commit: commit(),
            command,
            machine: Machine::describe(),
            sizes: serde_json::Map::new(),
            figures: Vec::new(),
            curves: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// The human table: one line per figure.
    pub fn table(&self) -> String {
        let header = [
            "bench",
            "figure",
            "cronq min / median / max",
            "baseline min / median / max",
            "goal",
        ];
        let rows: Vec<[String; 5]> = self
            .figures
            .iter()
            .map(|f| {
                [
                    f.bench.clone(),
                    f.name.clone(),
                    f.cell(&f.runs),
                    f.baseline
                        .as_ref()
                        .map_or_else(String::new, |b| format!("{} ({})", f.cell(&b.runs), b.name)),
                    f.goal.clone().unwrap_or_default(),
                ]
            })
            .collect();
        let mut widths = header.map(str::len);
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let line = |out: &mut String, cells: &[String]| {
            for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
                let pad = w.saturating_sub(cell.chars().count());
                let sep = if i + 1 == cells.len() { "\n" } else { "  " };
                let _ = write!(out, "{cell}{}{sep}", " ".repeat(pad));
            }
        };
        line(&mut out, &header.map(str::to_owned));
        for row in &rows {
            line(&mut out, row);
        }
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        out
    }

    /// The Markdown results section.
    pub fn markdown(&self) -> String {
        let m = &self.machine;
        let mut out = String::new();
        let _ = writeln!(out, "## Results of {}\n", self.started_at);
        let _ = writeln!(
            out,
            "Machine: {} logical CPUs ({}), {:.1} GiB RAM, Linux {}. A shared machine: other \
             work may have run beside the bench, which is why every figure sits next to a \
             baseline measured in the same run.\n",
            m.cpus,
            m.cpu_model,
            m.memory as f64 / (1024.0 * 1024.0 * 1024.0),
            m.kernel
        );
        let _ = writeln!(
            out,
            "Command (`scripts/bench ARGS` runs `cronq-bench --cronq target/release/cronq ARGS` after building both in release):\n\n```sh\n{}\n```\n",
            self.command
        );
        let _ = writeln!(
            out,
            "Sizes: `{}`\n",
            serde_json::Value::Object(self.sizes.clone())
        );
        let _ = writeln!(
            out,
            "Each cell is min / median / max over the runs (a single value when there was one run).\n"
        );
        let _ = writeln!(out, "| bench | figure | cronq | baseline | goal |");
        let _ = writeln!(out, "| --- | --- | --- | --- | --- |");
        for f in &self.figures {
            let baseline = f
                .baseline
                .as_ref()
                .map_or_else(String::new, |b| format!("{} ({})", f.cell(&b.runs), b.name));
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                f.bench,
                f.name,
                f.cell(&f.runs),
                baseline,
                f.goal.clone().unwrap_or_default()
            );
        }
        if !self.notes.is_empty() {
            out.push('\n');
            for note in &self.notes {
                let _ = writeln!(out, "- {note}");
            }
        }
        out
    }

    /// Writes the JSON report to `path` (creating its directory).
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn save_json(&self, path: &Path) -> anyhow::Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("while creating {}", dir.display()))?;
        }
        let text = serde_json::to_string_pretty(self).context("while encoding the report")?;
        std::fs::write(path, text).with_context(|| format!("while writing {}", path.display()))
    }

    /// Puts the Markdown section into `path` between the result markers, replacing an
    /// earlier section, or appends it (with the markers) when there is none.
    ///
    /// # Errors
    /// When the file cannot be read or written.
    pub fn write_markdown(&self, path: &Path) -> anyhow::Result<()> {
        let old = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e).with_context(|| format!("while reading {}", path.display())),
        };
        let text = splice(&old, &self.markdown());
        std::fs::write(path, text).with_context(|| format!("while writing {}", path.display()))
    }
}

/// The checkout's commit, `-dirty` when it has changes; `None` outside a git checkout.
fn commit() -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=10"])
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

/// Opening marker of the generated section.
const START: &str = "<!-- cronq-bench results: start (generated by `scripts/bench --markdown`) -->";
/// Closing marker of the generated section.
const END: &str = "<!-- cronq-bench results: end -->";

/// `doc` with `section` between the markers (replacing what was there, or appended).
fn splice(doc: &str, section: &str) -> String {
    let block = format!("{START}\n\n{}\n{END}\n", section.trim_end());
    match (doc.find(START), doc.find(END)) {
        (Some(s), Some(e)) if e > s => {
            format!(
                "{}{block}{}",
                &doc[..s],
                doc[e + END.len()..].trim_start_matches('\n')
            )
        }
        _ if doc.is_empty() => block,
        _ => format!("{}\n\n{block}", doc.trim_end()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_section_is_replaced_not_duplicated() {
        let first = splice("# Bench\n\nintro\n", "## Results A\n");
        assert!(first.starts_with("# Bench\n\nintro\n\n<!--"));
        let second = splice(&first, "## Results B\n");
        assert!(second.contains("Results B") && !second.contains("Results A"));
        assert_eq!(second.matches(START).count(), 1);
        let with_tail = splice(&format!("{first}\n## Analysis\n"), "## Results C\n");
        assert!(with_tail.ends_with("## Analysis\n"));
    }

    #[test]
    fn cells_show_min_median_max() {
        let mut f = Figure::new("t", "rate", Unit::PerSecond).baseline("raw");
        f.runs = vec![3.0, 1.0, 2.0];
        f.push_baseline(4.0);
        assert_eq!(f.cell(&f.runs), "1/s / 2/s / 3/s");
        let b = f.baseline.clone().unwrap();
        assert_eq!(f.cell(&b.runs), "4/s");
    }
}
