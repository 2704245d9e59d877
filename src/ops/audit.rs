//! The audit log as the command line and the dashboard write and show it
//! (`cronq_shared::audit`, docs/security.md "Audit log"): who the CLI acts as, recording an
//! entry without failing the action, reading `--since`, and an entry as JSON and as a line.

use chrono::{DateTime, Utc};
use cronq_shared::audit::{AuditLog, Entry};
use serde_json::{Value, json};

use crate::output;
use crate::settings::UsageError;

/// Where the command line's entries come from.
pub const CLI: &str = "cli";

/// Who the command line acts as: `user@host` (the user of `USER` or `LOGNAME`, else the
/// process's user as `/etc/passwd` names it, else `uid-N`).
pub fn operator() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(process_user);
    format!("{user}@{}", cronq_shared::host::name())
}

/// The name of this process's user in `/etc/passwd`, or `uid-N`.
fn process_user() -> String {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(uid) = std::fs::metadata("/proc/self").map(|m| m.uid()) else {
        return "unknown".to_owned();
    };
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|line| {
                let mut f = line.split(':');
                let (name, _, id) = (f.next()?, f.next()?, f.next()?);
                (id.parse::<u32>().ok()? == uid).then(|| name.to_owned())
            })
        })
        .unwrap_or_else(|| format!("uid-{uid}"))
}

/// Records `entry`. The action it describes has happened (or was refused) already, so a
/// store that cannot be written is logged as a warning, not an error of the action.
pub async fn record(log: &dyn AuditLog, entry: Entry) {
    if let Err(err) = log.record(&entry).await {
        tracing::warn!(
            action = %entry.action,
            who = %entry.who,
            error = %anyhow::Error::new(err),
            "cannot write the audit log: this action is not recorded"
        );
    }
}

/// A `--since` (or `since=`): an RFC 3339 instant, or a duration such as `2h` meaning that
/// long ago.
///
/// # Errors
/// A usage error naming `flag` and both forms.
pub fn since(flag: &str, text: &str) -> Result<DateTime<Utc>, UsageError> {
    let text = text.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    humantime::parse_duration(text)
        .ok()
        .and_then(|d| chrono::TimeDelta::from_std(d).ok())
        .and_then(|d| Utc::now().checked_sub_signed(d))
        .ok_or_else(|| {
            UsageError(format!(
                "{flag} {text:?} is neither an RFC 3339 instant such as 2026-11-29T19:30:00Z nor a duration such as 2h"
            ))
        })
}

/// An entry as the API and `cronq audit --json` show it.
pub fn json(e: &Entry) -> Value {
    json!({
        "at": output::utc(e.at),
        "who": e.who,
        "action": e.action,
        "job": e.job,
        "outcome": e.outcome.as_str(),
        "reason": e.reason,
        "detail": e.detail,
        "from": e.from,
    })
}

/// An entry as `cronq audit` prints it: one line, then the detail's lines indented.
pub fn text(e: &Entry) -> String {
    let mut line = format!(
        "{} {} {} {}",
        output::utc(e.at),
        e.who,
        e.action,
        e.outcome.as_str()
    );
    if let Some(job) = &e.job {
        line.push_str(&format!(" job={job}"));
    }
    line.push_str(&format!(" from={}", e.from));
    if let Some(reason) = &e.reason {
        line.push_str(&format!(": {reason}"));
    }
    for l in e.detail.as_deref().unwrap_or_default().lines() {
        line.push_str(&format!("\n  {l}"));
    }
    line
}

/// A done `action` of the command line, on `job` when given.
pub fn cli(action: &str, job: Option<&str>) -> Entry {
    Entry::done(action, &operator(), CLI).job(job)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_an_instant_or_a_duration_ago() {
        let t = since("--since", "2026-11-29T19:30:00Z").unwrap();
        assert_eq!(output::utc(t), "2026-11-29T19:30:00Z");
        let ago = Utc::now() - since("--since", "2h").unwrap();
        assert!((7190..=7210).contains(&ago.num_seconds()), "{ago}");
        let err = since("--since", "yesterday").unwrap_err().0;
        assert!(err.starts_with("--since \"yesterday\" is neither"), "{err}");
    }

    #[test]
    fn an_entry_prints_as_one_line_then_its_detail() {
        let mut e = Entry::done("job.update", "ada", "10.0.0.7")
            .job(Some("report"))
            .detail(Some("- a = 1\n+ a = 2".into()));
        e.at = "2026-11-29T19:30:00Z".parse().unwrap();
        assert_eq!(
            text(&e),
            "2026-11-29T19:30:00Z ada job.update done job=report from=10.0.0.7\n  - a = 1\n  + a = 2"
        );
        let refused = e.refused("403 no");
        assert!(text(&refused).contains("refused job=report from=10.0.0.7: 403 no"));
        assert_eq!(json(&refused)["outcome"], "refused");
    }
}
