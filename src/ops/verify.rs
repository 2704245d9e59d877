//! How `cronq verify` shows an accounting report (`cronq_shared::accounting::Report`): the
//! text table with a line per gap and the notes, or one JSON document, and the error
//! that makes a report with gaps exit 1; and the dead letters' reasons the accounting
//! takes. It accounts for nothing itself: that is `cronq_shared::accounting`.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use cronq_shared::accounting::{self, Account, Report, Window};
use cronq_shared::broker::{Broker, bounded};
use cronq_shared::config::Catchup;
use cronq_shared::runlog::{DEFAULT_MAX_RUNS, Outcome};
use serde_json::json;

use crate::output::{self, Table};

/// The outcomes a table shows, in its column order.
const SHOWN: [Outcome; 5] = [
    Outcome::Succeeded,
    Outcome::Failed,
    Outcome::Skipped,
    Outcome::Cancelled,
    Outcome::Missed,
];

/// Each dead letter's reason, by its occurrence key; the queue is closed after the read.
///
/// # Errors
/// The dead-letter queue unreadable.
pub async fn dead_letter_reasons(queue: &dyn Broker) -> anyhow::Result<HashMap<String, String>> {
    let letters = bounded("list dead letters", queue.dead_letters()).await;
    queue.close().await;
    let letters = letters
        .map_err(|e| anyhow::Error::new(e).context("while listing the dead-letter queue"))?;
    Ok(letters
        .into_iter()
        .filter_map(|l| Some((l.key?, l.reason)))
        .collect())
}

/// `Ok` when `report` has no gap; otherwise the error (exit 1) that counts them.
///
/// # Errors
/// Any gap in `report`.
pub fn gaps(report: &Report, from: DateTime<Utc>, to: DateTime<Utc>) -> anyhow::Result<()> {
    match report.gaps() {
        0 => Ok(()),
        n => Err(anyhow::anyhow!(
            "{n} occurrence{} not accounted for in [{}, {}]",
            if n == 1 { "" } else { "s" },
            output::utc(from),
            output::utc(to)
        )),
    }
}

/// The table, then one line per gap, then the notes.
pub fn print_text(report: &Report) {
    if report.accounts.is_empty() {
        println!("no job to account for");
        return;
    }
    let mut table = Table::new(&[
        "JOB",
        "EXPECTED",
        "SUCCEEDED",
        "FAILED",
        "SKIPPED",
        "CANCELLED",
        "MISSED",
        "PENDING",
        "PAUSED",
        "NO LEADER",
        "GAPS",
    ]);
    for a in &report.accounts {
        let mut row = vec![a.job.clone(), a.expected.to_string()];
        row.extend(SHOWN.iter().map(|o| a.count(*o).to_string()));
        row.extend([
            a.pending.to_string(),
            a.paused.to_string(),
            a.no_leader.to_string(),
            a.gaps.len().to_string(),
        ]);
        table.row(row);
    }
    print!("{}", table.render());
    for a in &report.accounts {
        for (key, gap) in &a.gaps {
            println!("{key}: {gap}");
        }
    }
    for a in report.accounts.iter().filter(|a| a.no_leader > 0) {
        println!(
            "{}: {} occurrence{} {}",
            a.job,
            a.no_leader,
            if a.no_leader == 1 { "" } else { "s" },
            not_published(a)
        );
    }
    for note in notes(report) {
        println!("note: {note}");
    }
}

/// Why the occurrences of `a` counted in `NO LEADER` were not published.
fn not_published(a: &Account) -> String {
    let policy = a.catchup.map_or("none", |c| match c {
        Catchup::None => "none",
        Catchup::Latest => "latest",
        Catchup::All => "all",
    });
    format!("not published: no leader, catchup = {policy}")
}

/// What the reader must know of the report's limits.
fn notes(report: &Report) -> Vec<String> {
    let mut out = Vec::new();
    if report.terms == 0 {
        out.push(
            "no leadership term is recorded (a store older than the terms): what a catch-up policy left unpublished while no producer led is counted as never published".to_owned(),
        );
    }
    for a in report.accounts.iter().filter(|a| a.cut) {
        out.push(format!(
            "job {:?}: only its first {} occurrences were accounted for; verify a shorter range",
            a.job,
            accounting::MAX_PER_JOB
        ));
    }
    if let Some(oldest) = report.runs_from {
        out.push(format!(
            "the run history read starts at {} (its newest {DEFAULT_MAX_RUNS} runs): the occurrences before were not accounted for; verify one job (--job) for more",
            output::utc(oldest)
        ));
    }
    out
}

pub fn as_json(report: &Report, window: &Window) -> serde_json::Value {
    let jobs: Vec<_> = report.accounts.iter().map(account_json).collect();
    json!({
        "from": window.from,
        "to": window.to,
        "grace_seconds": window.grace.as_secs(),
        "terms": report.terms,
        "gaps": report.gaps(),
        "jobs": jobs,
        "notes": notes(report),
    })
}

fn account_json(a: &Account) -> serde_json::Value {
    let gaps: Vec<_> = a
        .gaps
        .iter()
        .map(|(key, gap)| {
            let mut v = serde_json::to_value(gap).unwrap_or_default();
            v["key"] = json!(key.as_str());
            v["what"] = json!(gap.to_string());
            v
        })
        .collect();
    let mut v = json!({
        "job": a.job,
        "expected": a.expected,
        "pending": a.pending,
        "paused": a.paused,
        "no_leader": a.no_leader,
        "gaps": gaps,
    });
    if a.no_leader > 0 {
        v["not_published"] = json!(not_published(a));
    }
    for o in SHOWN {
        v[o.as_str()] = json!(a.count(o));
    }
    v
}
