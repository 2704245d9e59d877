//! Stage two of loading: apply defaults, check every rule, collect every problem.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use chrono_tz::Tz;

use super::error::{ConfigError, Problem};
use super::raw::{RawConfig, RawDefaults, RawJob};
use super::{Catchup, Config, Handler, HttpHandler, Job, LeaderConfig, Overlap};
use crate::names::{JobName, QueueName};
use crate::schedule::Schedule;

/// Turns the raw file into a valid [`Config`], or lists every problem.
pub(crate) fn resolve(raw: RawConfig, path: &Path) -> Result<Config, ConfigError> {
    let mut problems = Vec::new();
    let leader = resolve_leader(&raw, &mut problems);
    let mut jobs = Vec::new();
    let mut seen = HashSet::new();
    for (i, rj) in raw.jobs.iter().enumerate() {
        if let Some(job) = resolve_job(i, rj, &raw.defaults, &mut problems) {
            if !seen.insert(job.name.clone()) {
                problems.push(Problem::new(
                    format!("job {:?}", job.name.as_str()),
                    "name",
                    "is used by an earlier job: job names must be unique",
                ));
            }
            jobs.push(job);
        }
    }
    if !problems.is_empty() {
        return Err(ConfigError::Invalid {
            path: path.to_owned(),
            problems,
        });
    }
    Ok(Config {
        path: path.to_owned(),
        leader,
        jobs,
        warnings: Vec::new(),
    })
}

fn duration(
    scope: &str,
    field: &str,
    value: Option<&str>,
    default: &str,
    problems: &mut Vec<Problem>,
) -> Duration {
    let text = value.unwrap_or(default);
    match humantime::parse_duration(text) {
        Ok(d) => d,
        Err(_) => {
            problems.push(Problem::new(
                scope,
                field,
                format!("{text:?} is not a duration: use humantime syntax such as \"90s\", \"5m\" or \"1h 30m\""),
            ));
            humantime::parse_duration(default).unwrap_or_default()
        }
    }
}

fn resolve_leader(raw: &RawConfig, problems: &mut Vec<Problem>) -> LeaderConfig {
    let scope = "[leader]";
    let lease = duration(scope, "lease", raw.leader.lease.as_deref(), "15s", problems);
    let renew_deadline = duration(
        scope,
        "renew_deadline",
        raw.leader.renew_deadline.as_deref(),
        "10s",
        problems,
    );
    let retry = duration(scope, "retry", raw.leader.retry.as_deref(), "2s", problems);
    if renew_deadline >= lease {
        problems.push(Problem::new(
            scope,
            "renew_deadline",
            format!(
                "must be shorter than lease ({}), got {:?}",
                humantime::format_duration(lease),
                humantime::format_duration(renew_deadline).to_string()
            ),
        ));
    }
    if retry >= renew_deadline {
        problems.push(Problem::new(
            scope,
            "retry",
            format!(
                "must be shorter than renew_deadline ({}), got {:?}",
                humantime::format_duration(renew_deadline),
                humantime::format_duration(retry).to_string()
            ),
        ));
    }
    LeaderConfig {
        lease,
        renew_deadline,
        retry,
    }
}

fn resolve_job(i: usize, rj: &RawJob, d: &RawDefaults, problems: &mut Vec<Problem>) -> Option<Job> {
    let Some(name_text) = rj.name.as_deref() else {
        problems.push(Problem::new(
            format!("job #{}", i + 1),
            "name",
            "is missing: every [[job]] needs a name",
        ));
        return None;
    };
    let scope = format!("job {name_text:?}");
    let name = match JobName::new(name_text) {
        Ok(n) => n,
        Err(e) => {
            problems.push(Problem::new(&scope, "name", e.to_string()));
            return None;
        }
    };
    let c = &rj.common;
    let tz_text = c
        .timezone
        .as_deref()
        .or(d.timezone.as_deref())
        .unwrap_or("UTC");
    let timezone: Tz = match tz_text.parse() {
        Ok(tz) => tz,
        Err(_) => {
            problems.push(Problem::new(
                &scope,
                "timezone",
                format!("{tz_text:?} is not an IANA time zone name, such as \"Europe/Berlin\""),
            ));
            Tz::UTC
        }
    };
    let schedule = match rj.schedule.as_deref() {
        None => {
            problems.push(Problem::new(
                &scope,
                "schedule",
                "is missing: give a cron expression or \"@every 5m\"",
            ));
            None
        }
        Some(text) => match Schedule::parse(text, timezone) {
            Ok(s) => Some(s),
            Err(e) => {
                problems.push(Problem::new(&scope, "schedule", format!("{text:?}: {e}")));
                None
            }
        },
    };
    let pick = |own: &Option<String>, def: &Option<String>| own.clone().or_else(|| def.clone());
    let timeout = duration(
        &scope,
        "timeout",
        pick(&c.timeout, &d.timeout).as_deref(),
        "10m",
        problems,
    );
    let catchup_window = duration(
        &scope,
        "catchup_window",
        pick(&c.catchup_window, &d.catchup_window).as_deref(),
        "1h",
        problems,
    );
    let backoff = duration(
        &scope,
        "backoff",
        pick(&c.backoff, &d.backoff).as_deref(),
        "10s",
        problems,
    );
    let backoff_max = duration(
        &scope,
        "backoff_max",
        pick(&c.backoff_max, &d.backoff_max).as_deref(),
        "10m",
        problems,
    );
    let jitter = duration(
        &scope,
        "jitter",
        pick(&c.jitter, &d.jitter).as_deref(),
        "0s",
        problems,
    );
    let retention = duration(
        &scope,
        "retention",
        pick(&c.retention, &d.retention).as_deref(),
        "7d",
        problems,
    );
    let deadline = match pick(&c.deadline, &d.deadline).as_deref() {
        None | Some("none") => None,
        Some(text) => Some(duration(&scope, "deadline", Some(text), "0s", problems)),
    };
    let overlap = match pick(&c.overlap, &d.overlap).as_deref().unwrap_or("skip") {
        "allow" => Overlap::Allow,
        "skip" => Overlap::Skip,
        "queue" => Overlap::Queue,
        "replace" => Overlap::Replace,
        other => {
            problems.push(Problem::new(
                &scope,
                "overlap",
                format!("{other:?} is not an overlap policy: use allow, skip, queue or replace"),
            ));
            Overlap::Skip
        }
    };
    let catchup = match pick(&c.catchup, &d.catchup).as_deref().unwrap_or("latest") {
        "none" => Catchup::None,
        "latest" => Catchup::Latest,
        "all" => Catchup::All,
        other => {
            problems.push(Problem::new(
                &scope,
                "catchup",
                format!("{other:?} is not a catch-up policy: use none, latest or all"),
            ));
            Catchup::Latest
        }
    };
    let max_attempts = match c.max_attempts.or(d.max_attempts).unwrap_or(3) {
        n if (1..=1000).contains(&n) => n as u32,
        n => {
            problems.push(Problem::new(
                &scope,
                "max_attempts",
                format!("{n} is out of range: use 1 to 1000"),
            ));
            1
        }
    };
    let queue_text = pick(&c.queue, &d.queue).unwrap_or_else(|| "default".to_owned());
    let queue = match QueueName::new(&queue_text) {
        Ok(q) => q,
        Err(e) => {
            problems.push(Problem::new(&scope, "queue", e.to_string()));
            QueueName::new("default").expect("\"default\" is a valid queue name")
        }
    };
    let handler = match (&rj.command, &rj.http) {
        (Some(_), Some(_)) => {
            problems.push(Problem::new(
                &scope,
                "command",
                "and http are both set: a job has exactly one handler",
            ));
            None
        }
        (Some(argv), None) if argv.is_empty() => {
            problems.push(Problem::new(&scope, "command", "is empty: give the program and its arguments, such as [\"/usr/local/bin/report\", \"--daily\"]"));
            None
        }
        (Some(argv), None) => Some(Handler::Command(argv.clone())),
        (None, Some(h)) => match &h.url {
            Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
                Some(Handler::Http(HttpHandler {
                    url: url.clone(),
                    method: h
                        .method
                        .clone()
                        .unwrap_or_else(|| "POST".to_owned())
                        .to_uppercase(),
                    headers: h
                        .headers
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                }))
            }
            Some(url) => {
                problems.push(Problem::new(
                    &scope,
                    "http.url",
                    format!("{url:?} is not an http:// or https:// URL"),
                ));
                None
            }
            None => {
                problems.push(Problem::new(&scope, "http.url", "is missing"));
                None
            }
        },
        (None, None) => None,
    };
    let payload = match &rj.payload {
        Some(table) => serde_json::to_value(table).unwrap_or(serde_json::Value::Null),
        None => serde_json::Value::Object(Default::default()),
    };
    Some(Job {
        name,
        schedule: schedule?,
        timezone,
        timeout,
        overlap,
        catchup,
        catchup_window,
        deadline,
        max_attempts,
        backoff,
        backoff_max,
        jitter,
        queue,
        retention,
        payload,
        handler,
    })
}
