//! How `cronq dlq` shows the dead-letter queue and a replay's report
//! (`cronq_consumer::replay::ReplayReport`), and the audit detail a replay records.
//! Rendering only: the replay rules stay in `cronq_consumer::replay`.

use cronq_consumer::replay::{Plan, ReplayReport};
use cronq_shared::broker::Folded;
use cronq_shared::ledger::State;
use serde_json::json;

use crate::output::{self, Table};

/// `{"count": N, "letters": [...]}`.
pub fn list_json(letters: &[Folded]) -> serde_json::Value {
    let letters: Vec<_> = letters.iter().map(super::json::dead_letter).collect();
    json!({ "count": letters.len(), "letters": letters })
}

/// The letters' table and a line counting them (or a line saying the queue is empty).
pub fn print_list(letters: &[Folded]) {
    if letters.is_empty() {
        println!("the dead-letter queue is empty");
        return;
    }
    let mut table = Table::new(&[
        "KEY",
        "JOB",
        "ATTEMPTS",
        "COPIES",
        "REASON",
        "LAST ERROR",
        "DEAD-LETTERED AT",
    ]);
    for f in letters {
        let l = &f.letter;
        table.row(vec![
            output::or_dash(l.key.as_deref()),
            output::or_dash(l.job.as_deref()),
            l.attempts.to_string(),
            f.copies.to_string(),
            l.reason.clone(),
            output::or_dash(l.last_error.as_deref()),
            output::utc(l.dead_lettered_at),
        ]);
    }
    print!("{}", table.render());
    let copies: usize = letters.iter().map(|f| f.copies).sum();
    let extra = if copies > letters.len() {
        format!(
            " ({copies} letters: a run dead-lettered twice by a consumer that died before it acked is one run, replayed once)"
        )
    } else {
        String::new()
    };
    println!(
        "{} dead letter{}{extra}; replay with `cronq dlq replay --job JOB | --key KEY | --all`",
        letters.len(),
        if letters.len() == 1 { "" } else { "s" }
    );
}

/// The audit entry's detail of a replay: how many, and which keys.
pub fn replay_detail(report: &ReplayReport, dry_run: bool) -> String {
    let keys: Vec<&str> = report
        .entries
        .iter()
        .filter(|e| matches!(e.plan, Plan::Replayed | Plan::WouldReplay))
        .filter_map(|e| e.key.as_deref())
        .collect();
    format!(
        "{}{} replayed: {}",
        if dry_run { "dry run: " } else { "" },
        report.replayed,
        keys.join(" ")
    )
}

/// One line per selected letter with what became of it, then the totals (or a line
/// saying no letter matched).
pub fn print_replay(report: &ReplayReport, dry_run: bool) {
    let mut table = Table::new(&["KEY", "JOB", "REASON", "RESULT"]);
    let mut kept = 0;
    for e in &report.entries {
        let result = match &e.plan {
            Plan::WouldReplay => "would replay".to_owned(),
            Plan::Replayed => match e.record {
                Some(State::Succeeded) => {
                    "replayed (already succeeded: will not run again)".to_owned()
                }
                _ => "replayed".to_owned(),
            },
            Plan::Kept(why) => {
                kept += 1;
                format!("kept: {why}")
            }
            Plan::Gone => "gone (taken by another replay)".to_owned(),
        };
        table.row(vec![
            output::or_dash(e.key.as_deref()),
            output::or_dash(e.job.as_deref()),
            e.reason.clone(),
            result,
        ]);
    }
    if table.is_empty() {
        println!(
            "no dead letter matches ({} in the dead-letter queue)",
            report.listed
        );
        return;
    }
    print!("{}", table.render());
    if dry_run {
        println!(
            "dry run: {} of {} selected letters would be replayed; nothing was changed",
            report.entries.len() - kept,
            report.entries.len()
        );
    } else {
        println!(
            "replayed {} of {} selected letters; {kept} kept in the dead-letter queue",
            report.replayed,
            report.entries.len()
        );
    }
}
