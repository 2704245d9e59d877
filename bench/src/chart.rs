//! SVG charts of saved reports, the pictures of docs/benchmarks.md: lateness
//! distributions (cronq against its baselines), rates against their same-run baseline,
//! and the producer's memory against its job count.
//!
//! Owns: reading the JSON reports `scripts/bench` keeps under `docs/benchmarks/runs/`
//! and drawing them. Invariant: a chart shows measured values only, each with its run's
//! commit and date in the caption; where reports overlap, the newest one's values are
//! drawn (charts never mix two runs on one line).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use plotters::prelude::*;
use serde::Deserialize;

use crate::report::{Curves, Series};
use crate::stats::{Spread, Unit};

/// A saved report, as much of it as the charts read.
#[derive(Debug, Deserialize)]
struct Saved {
    started_at: String,
    #[serde(default)]
    commit: Option<String>,
    figures: Vec<SavedFigure>,
    #[serde(default)]
    curves: Vec<Curves>,
}

#[derive(Debug, Deserialize)]
struct SavedFigure {
    bench: String,
    name: String,
    unit: Unit,
    #[serde(deserialize_with = "values")]
    runs: Vec<f64>,
    baseline: Option<SavedBaseline>,
}

#[derive(Debug, Deserialize)]
struct SavedBaseline {
    name: String,
    #[serde(deserialize_with = "values")]
    runs: Vec<f64>,
}

/// A figure's values as saved: a run that measured nothing (NaN, such as no delivery in a
/// window) is saved as `null`, and read back as NaN.
fn values<'de, D: serde::Deserializer<'de>>(values: D) -> Result<Vec<f64>, D::Error> {
    let saved: Vec<Option<f64>> = Deserialize::deserialize(values)?;
    Ok(saved.into_iter().map(|v| v.unwrap_or(f64::NAN)).collect())
}

impl Saved {
    /// `commit, date` for a caption.
    fn source(&self) -> String {
        let day = self.started_at.get(..10).unwrap_or(&self.started_at);
        format!(
            "{}, {day}",
            self.commit.as_deref().unwrap_or("commit unknown")
        )
    }
}

/// Colours of the series, cronq first.
const PALETTE: [RGBColor; 5] = [
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0xff, 0x7f, 0x0e),
];

/// Width and height of every chart, in pixels.
const SIZE: (u32, u32) = (760, 440);

/// Reads every report in `from` (files, or directories of `*.json`), and writes the
/// charts into `out`; returns the paths written.
///
/// # Errors
/// An unreadable or malformed report, or a chart that cannot be written.
pub fn write_all(from: &[PathBuf], out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut reports = Vec::new();
    for path in files(from)? {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("while reading {}", path.display()))?;
        let saved: Saved = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a cronq-bench report", path.display()))?;
        reports.push(saved);
    }
    // Oldest first: a later report's values replace an earlier one's.
    reports.sort_by(|a, b| a.started_at.cmp(&b.started_at));
    std::fs::create_dir_all(out).with_context(|| format!("while creating {}", out.display()))?;
    let mut written = Vec::new();
    let mut curves: BTreeMap<String, (&Saved, &Curves)> = BTreeMap::new();
    let mut rates: BTreeMap<String, (&Saved, Vec<&SavedFigure>)> = BTreeMap::new();
    for r in &reports {
        for c in &r.curves {
            curves.insert(slug(&c.name), (r, c));
        }
        for (first, group) in rate_groups(&r.figures) {
            rates.insert(slug(&format!("{} {}", first.bench, first.name)), (r, group));
        }
    }
    for (name, (r, c)) in &curves {
        let path = out.join(format!("{name}.svg"));
        cumulative(&path, c, &r.source())?;
        written.push(path);
    }
    for (name, (r, group)) in &rates {
        let path = out.join(format!("{name}.svg"));
        rate(&path, group, &r.source())?;
        written.push(path);
    }
    let memory = memory_points(&reports);
    if !memory.is_empty() {
        let path = out.join("scale-producer-memory.svg");
        memory_chart(&path, &memory)?;
        written.push(path);
    }
    Ok(written)
}

/// The rate figures with a baseline, grouped so that figures of one bench with the same
/// cronq runs (one measurement against several baselines, as the throughput bench's raw
/// loops) make one chart; each group keyed by its first figure.
fn rate_groups(figures: &[SavedFigure]) -> Vec<(&SavedFigure, Vec<&SavedFigure>)> {
    let mut groups: Vec<(&SavedFigure, Vec<&SavedFigure>)> = Vec::new();
    for f in figures {
        if f.unit != Unit::PerSecond || f.baseline.is_none() {
            continue;
        }
        match groups
            .iter_mut()
            .find(|(first, _)| first.bench == f.bench && first.runs == f.runs)
        {
            Some((_, group)) => group.push(f),
            None => groups.push((f, vec![f])),
        }
    }
    groups
}

/// The report files: each path given, or the `*.json` directly in a directory given.
fn files(from: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for path in from {
        if path.is_dir() {
            let entries = std::fs::read_dir(path)
                .with_context(|| format!("while listing {}", path.display()))?;
            for entry in entries {
                let p = entry?.path();
                if p.extension().is_some_and(|e| e == "json") {
                    out.push(p);
                }
            }
        } else {
            out.push(path.clone());
        }
    }
    out.sort();
    Ok(out)
}

/// A file name from a figure's name: lower-case words joined by `-`.
fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() && c != ',' && c != '\'' {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_owned()
}

fn draw_error(e: impl std::fmt::Display, path: &Path) -> anyhow::Error {
    anyhow::anyhow!("while drawing {}: {e}", path.display())
}

/// Percentile (y) against value (x, in ms for seconds) for each series, up to p99.9 so
/// the tail of one slow sample does not squash the rest.
fn cumulative(path: &Path, c: &Curves, source: &str) -> anyhow::Result<()> {
    let scale = if c.unit == Unit::Seconds { 1e3 } else { 1.0 };
    let shown = |s: &Series| -> Vec<(f64, f64)> {
        s.points
            .iter()
            .filter(|[p, _]| *p <= 99.9)
            .map(|[p, v]| (v * scale, *p))
            .collect()
    };
    let x_max = c
        .series
        .iter()
        .flat_map(|s| shown(s).into_iter().map(|(x, _)| x))
        .fold(0.0_f64, f64::max)
        .max(1e-3)
        * 1.05;
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_error(e, path))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{} ({source})", c.name), ("sans-serif", 17))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(52)
        .build_cartesian_2d(0.0..x_max, 0.0..100.0)
        .map_err(|e| draw_error(e, path))?;
    let x_desc = if c.unit == Unit::Seconds {
        "ms"
    } else {
        "value"
    };
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc("percentile (up to p99.9)")
        .draw()
        .map_err(|e| draw_error(e, path))?;
    for (s, colour) in c.series.iter().zip(PALETTE.iter().cycle()) {
        let style = colour.stroke_width(2);
        chart
            .draw_series(LineSeries::new(shown(s), style))
            .map_err(|e| draw_error(e, path))?
            .label(format!("{} ({} samples)", s.name, s.samples))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| draw_error(e, path))?;
    root.present().map_err(|e| draw_error(e, path))
}

/// cronq's bar and each baseline's (medians, each with a min–max whisker).
fn rate(path: &Path, group: &[&SavedFigure], source: &str) -> anyhow::Result<()> {
    let Some(f) = group.first() else {
        return Ok(());
    };
    let baselines = group
        .iter()
        .filter_map(|g| g.baseline.as_ref())
        .map(|b| (b.name.clone(), &b.runs));
    let bars: Vec<(String, Spread)> = std::iter::once(("cronq".to_owned(), &f.runs))
        .chain(baselines)
        .filter_map(|(name, runs)| Spread::of(runs).map(|s| (name, s)))
        .collect();
    let names = bar_labels(bars.iter().map(|(n, _)| n.as_str()));
    let y_max = bars
        .iter()
        .map(|(_, s)| s.max)
        .fold(0.0_f64, f64::max)
        .max(1.0)
        * 1.15;
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_error(e, path))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{} ({source})", f.name), ("sans-serif", 15))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(70)
        // A segmented range of 0..n has a segment for each of 0..=n: end at the last bar.
        .build_cartesian_2d(
            (0..bars.len().saturating_sub(1)).into_segmented(),
            0.0..y_max,
        )
        .map_err(|e| draw_error(e, path))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => names.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .y_label_formatter(&|v| format!("{v:.0}"))
        .y_desc("per second (median; whisker: min to max over the runs)")
        .draw()
        .map_err(|e| draw_error(e, path))?;
    for (i, ((_, s), colour)) in bars.iter().zip(PALETTE.iter()).enumerate() {
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [
                    (SegmentValue::Exact(i), 0.0),
                    (SegmentValue::Exact(i + 1), s.median),
                ],
                colour.mix(0.75).filled(),
            )))
            .map_err(|e| draw_error(e, path))?;
        chart
            .draw_series(std::iter::once(ErrorBar::new_vertical(
                SegmentValue::CenterOf(i),
                s.min,
                s.median,
                s.max,
                BLACK.stroke_width(2),
                14,
            )))
            .map_err(|e| draw_error(e, path))?;
    }
    root.present().map_err(|e| draw_error(e, path))
}

/// Short labels under the bars: a name up to its `:`, without the label of an earlier bar
/// it only extends ("raw loop" then "raw loop, acks coalesced" read "raw loop" and "acks
/// coalesced").
fn bar_labels<'a>(names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut labels: Vec<String> = Vec::new();
    for name in names {
        let short = name.split(':').next().unwrap_or(name).trim();
        let extends = labels
            .iter()
            .find_map(|earlier| short.strip_prefix(earlier.as_str())?.strip_prefix(", "));
        labels.push(extends.unwrap_or(short).to_owned());
    }
    labels
}

/// The producer's memory figures by job count: for each of idle and peak RSS, the
/// newest report's spread at each job count, with the report's source.
type MemoryPoints = BTreeMap<&'static str, BTreeMap<u64, (Spread, String)>>;

/// Idle and peak RSS of `cronq producer` by job count, from the scale figures.
fn memory_points(reports: &[Saved]) -> MemoryPoints {
    const KINDS: [(&str, &str); 2] = [
        ("idle RSS", crate::scale::RSS_IDLE),
        ("peak RSS", crate::scale::RSS_PEAK),
    ];
    let mut points: MemoryPoints = BTreeMap::new();
    for r in reports {
        for f in r.figures.iter().filter(|f| f.bench == "scale") {
            for (kind, prefix) in KINDS {
                let jobs = f
                    .name
                    .strip_prefix(prefix)
                    .and_then(|rest| rest.strip_suffix(" jobs"))
                    .and_then(|n| n.replace(',', "").parse::<u64>().ok());
                if let (Some(jobs), Some(spread)) = (jobs, Spread::of(&f.runs)) {
                    points
                        .entry(kind)
                        .or_default()
                        .insert(jobs, (spread, r.source()));
                }
            }
        }
    }
    points
}

/// MiB against job count (logarithmic), a line per kind, whiskers min to max.
fn memory_chart(path: &Path, points: &MemoryPoints) -> anyhow::Result<()> {
    const MIB: f64 = 1024.0 * 1024.0;
    let all = points.values().flat_map(|p| p.iter());
    let (lo, hi, top) = all.fold((u64::MAX, 0, 0.0_f64), |(lo, hi, top), (n, (s, _))| {
        (lo.min(*n), hi.max(*n), top.max(s.max / MIB))
    });
    let sources: Vec<&str> = {
        let mut s: Vec<&str> = points
            .values()
            .flat_map(|p| p.values().map(|(_, src)| src.as_str()))
            .collect();
        s.sort_unstable();
        s.dedup();
        s
    };
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_error(e, path))?;
    let x_range = (lo as f64 / 2.0).max(1.0)..(hi as f64 * 2.0);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "cronq producer memory by job count ({})",
                sources.join("; ")
            ),
            ("sans-serif", 15),
        )
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(60)
        .build_cartesian_2d(x_range.log_scale(), 0.0..(top * 1.15).max(1.0))
        .map_err(|e| draw_error(e, path))?;
    chart
        .configure_mesh()
        .light_line_style(WHITE)
        .x_labels(8)
        .x_label_formatter(&|x| compact(*x))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .x_desc("jobs (logarithmic)")
        .y_desc("MiB (median; whisker: min to max)")
        .draw()
        .map_err(|e| draw_error(e, path))?;
    for ((kind, p), colour) in points.iter().zip(PALETTE.iter()) {
        let line: Vec<(f64, f64)> = p
            .iter()
            .map(|(n, (s, _))| (*n as f64, s.median / MIB))
            .collect();
        let style = colour.stroke_width(2);
        chart
            .draw_series(LineSeries::new(line.clone(), style).point_size(4))
            .map_err(|e| draw_error(e, path))?
            .label(*kind)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        chart
            .draw_series(p.iter().map(|(n, (s, _))| {
                ErrorBar::new_vertical(
                    *n as f64,
                    s.min / MIB,
                    s.median / MIB,
                    s.max / MIB,
                    colour.stroke_width(1),
                    10,
                )
            }))
            .map_err(|e| draw_error(e, path))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| draw_error(e, path))?;
    root.present().map_err(|e| draw_error(e, path))
}

/// A job count as a short label: `300k`, `1M`, `2.5M`.
fn compact(n: f64) -> String {
    if n >= 1e6 {
        format!("{}M", (n / 1e5).round() / 10.0)
    } else if n >= 1e3 {
        format!("{}k", (n / 1e2).round() / 10.0)
    } else {
        format!("{n:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(started_at: &str, commit: &str, rss: f64, curve_p50: f64) -> serde_json::Value {
        serde_json::json!({
            "started_at": started_at,
            "commit": commit,
            "command": "cronq-bench all",
            "machine": {},
            "sizes": {},
            "figures": [
                {"bench": "scale", "name": "`cronq producer` RSS while idle, 1,000,000 jobs",
                 "unit": "bytes", "runs": [rss, rss * 1.1, rss * 0.9], "baseline": null, "goal": null},
                {"bench": "throughput", "name": "executed/s, 20k occurrences, 2 consumers x 64",
                 "unit": "per_second", "runs": [100.0, 120.0],
                 "baseline": {"name": "raw lapin", "runs": [150.0, 160.0]}, "goal": null},
                {"bench": "throughput", "name": "executed/s, 20k occurrences, 2 consumers x 64 (vs acks coalesced)",
                 "unit": "per_second", "runs": [100.0, 120.0],
                 "baseline": {"name": "raw lapin, acks coalesced", "runs": [400.0, 420.0]}, "goal": null}
            ],
            "curves": [{"bench": "precision", "name": "publish lateness, 1,000 jobs", "unit": "seconds",
                        "series": [{"name": "cronq", "samples": 3,
                                    "points": [[0.0, 0.001], [50.0, curve_p50], [100.0, 0.2]]}]}],
            "notes": []
        })
    }

    #[test]
    fn charts_of_saved_reports_show_the_newest_values() {
        let dir = std::env::temp_dir().join(format!("cronq-chart-{}", std::process::id()));
        let runs = dir.join("runs");
        std::fs::create_dir_all(&runs).unwrap();
        let write = |name: &str, v: serde_json::Value| {
            std::fs::write(runs.join(name), v.to_string()).unwrap();
        };
        write(
            "b.json",
            report("2026-12-01T00:00:00Z", "aaaa", 300.0 * 1048576.0, 0.05),
        );
        write(
            "a.json",
            report("2026-12-02T00:00:00Z", "bbbb", 200.0 * 1048576.0, 0.07),
        );
        let out = dir.join("charts");
        let written = write_all(std::slice::from_ref(&runs), &out).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "publish-lateness-1000-jobs.svg",
                "throughput-executed-s-20k-occurrences-2-consumers-x-64.svg",
                "scale-producer-memory.svg"
            ]
        );
        for p in &written {
            let svg = std::fs::read_to_string(p).unwrap();
            assert!(svg.starts_with("<svg"), "{}", p.display());
            // The newer report (started 12-02) is the one drawn, whatever the file order.
            assert!(svg.contains("bbbb, 2026-12-02"), "{}: {svg}", p.display());
            assert!(!svg.contains("aaaa"), "{}", p.display());
        }
        // One throughput chart: the same cronq runs against both raw loops.
        let throughput = std::fs::read_to_string(&written[1]).unwrap();
        let labels: Vec<&str> = throughput.lines().map(str::trim).collect();
        assert!(labels.contains(&"raw lapin"), "{throughput}");
        assert!(labels.contains(&"acks coalesced"), "{throughput}");
        let memory = std::fs::read_to_string(&written[2]).unwrap();
        assert!(memory.contains("idle RSS"), "{memory}");
        let bad = runs.join("c.json");
        std::fs::write(&bad, "{}").unwrap();
        let err = write_all(&[runs], &out).unwrap_err();
        assert!(
            format!("{err:#}").contains("c.json is not a cronq-bench report"),
            "{err:#}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_run_that_measured_nothing_reads_back_as_nan() {
        let saved: SavedFigure = serde_json::from_value(serde_json::json!({
            "bench": "herd", "name": "ticks", "unit": "seconds", "runs": [null, 0.5],
            "baseline": {"name": "before", "runs": [0.01, null]}, "goal": null
        }))
        .unwrap();
        assert!(saved.runs[0].is_nan() && saved.runs[1] == 0.5);
        let baseline = saved.baseline.unwrap();
        assert!(baseline.runs[0] == 0.01 && baseline.runs[1].is_nan());
    }

    #[test]
    fn bar_labels_drop_what_an_earlier_bar_says() {
        let names = [
            "cronq",
            "raw lapin: consumed+acked/s",
            "raw lapin, one ack per 32: consumed+acked/s",
        ];
        assert_eq!(
            bar_labels(names.into_iter()),
            ["cronq", "raw lapin", "one ack per 32"]
        );
    }

    #[test]
    fn job_counts_read_short() {
        assert_eq!(compact(300_000.0), "300k");
        assert_eq!(compact(1_000_000.0), "1M");
        assert_eq!(compact(2_500_000.0), "2.5M");
        assert_eq!(compact(500.0), "500");
    }

    #[test]
    fn slugs_are_file_names() {
        assert_eq!(
            slug("publish lateness, 10,000 jobs"),
            "publish-lateness-10000-jobs"
        );
        assert_eq!(slug("cronq's own part"), "cronqs-own-part");
    }
}
