//! Stage two of loading: apply the built-in defaults, then `[defaults]`, then each job's
//! overrides; check every rule; collect every problem and every warning.
//!
//! Invariant: a problem is reported once, where the bad value is written: a bad value in
//! `[defaults]` is reported under `[defaults]`, not again for every job that inherits it.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::error::{ConfigError, Problem};
use super::raw::{RawConfig, RawDefaults, RawHttp, RawJob, RawLeader};
use super::suggest::{did_you_mean, suggest_zone};
use super::{Catchup, Config, Handler, HttpHandler, Job, LeaderConfig, Overlap};
use crate::names::{JobName, QueueName};
use crate::redacted::Redacted;
use crate::schedule::{Schedule, ScheduleError};

/// How far ahead `cronq check` looks for daylight-saving transitions.
const DST_HORIZON: Duration = Duration::from_secs(366 * 24 * 3600);

/// How many upcoming fire times are sampled to find a cron schedule's shortest interval.
const INTERVAL_SAMPLES: usize = 64;

/// The longest duration accepted anywhere: 100 years. Longer values are typos, and would
/// overflow date arithmetic downstream.
const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// HTTP methods an `http` handler may use.
const HTTP_METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/// Turns the raw file into a valid [`Config`], or lists every problem.
///
/// `now` anchors what looks ahead: a schedule must fire at least once after it, and the
/// warnings (daylight-saving transitions in the next year, intervals) start from it.
pub(crate) fn resolve(
    raw: RawConfig,
    path: &Path,
    now: DateTime<Utc>,
) -> Result<Config, ConfigError> {
    let mut out = Report::default();
    out.problems.extend(raw.problems);

    out.problems.extend(raw.defaults.problems);
    let defaults = resolve_common(
        &Common::builtin(),
        &raw.defaults.value,
        "[defaults]",
        true,
        &mut out,
    );

    out.problems.extend(raw.leader.problems);
    let leader = resolve_leader(&raw.leader.value, &mut out);

    let mut jobs = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for section in raw.jobs {
        let job = &section.value;
        if let Some(name) = job.own.name.as_deref() {
            if let Some(first) = seen.get(name) {
                out.problem(
                    &job.scope,
                    "name",
                    format!(
                        "{name:?} is already the name of job #{first}: job names must be unique"
                    ),
                );
            } else {
                seen.insert(name.to_owned(), job.ordinal);
            }
        }
        out.problems.extend(section.problems.iter().cloned());
        if let Some(job) = resolve_job(job, &defaults, now, &mut out) {
            jobs.push(job);
        }
    }
    if out.problems.is_empty() && jobs.is_empty() {
        out.warn("", "", "no [[job]] is defined: nothing will be scheduled");
    }

    if !out.problems.is_empty() {
        return Err(ConfigError::Invalid {
            path: path.to_owned(),
            problems: out.problems,
        });
    }
    Ok(Config {
        path: path.to_owned(),
        leader,
        jobs,
        warnings: out.warnings,
    })
}

/// Problems and warnings, in the order found.
#[derive(Default)]
struct Report {
    problems: Vec<Problem>,
    warnings: Vec<Problem>,
}

impl Report {
    fn problem(&mut self, scope: &str, field: &str, message: impl Into<String>) {
        self.problems.push(Problem::new(scope, field, message));
    }

    fn warn(&mut self, scope: &str, field: &str, message: impl Into<String>) {
        self.warnings.push(Problem::new(scope, field, message));
    }
}

/// The fields `[defaults]` sets and a job may override, resolved.
#[derive(Debug, Clone)]
struct Common {
    timezone: Tz,
    timeout: Duration,
    overlap: Overlap,
    catchup: Catchup,
    catchup_window: Duration,
    deadline: Option<Duration>,
    max_attempts: u32,
    backoff: Duration,
    backoff_max: Duration,
    jitter: Duration,
    queue: QueueName,
    retention: Duration,
}

impl Common {
    /// SPEC section 2's defaults.
    fn builtin() -> Self {
        Self {
            timezone: Tz::UTC,
            timeout: Duration::from_secs(600),
            overlap: Overlap::Skip,
            catchup: Catchup::Latest,
            catchup_window: Duration::from_secs(3600),
            deadline: None,
            max_attempts: 3,
            backoff: Duration::from_secs(10),
            backoff_max: Duration::from_secs(600),
            jitter: Duration::ZERO,
            queue: QueueName::new("default").expect("\"default\" is a valid queue name"),
            retention: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// `base` with the values `raw` sets. Bad values are reported and `base`'s value is kept,
/// so later checks still run. `own_section` is true for `[defaults]`; for a job, checks
/// between two fields only run when the job sets one of them.
fn resolve_common(
    base: &Common,
    raw: &RawDefaults,
    scope: &str,
    own_section: bool,
    out: &mut Report,
) -> Common {
    let mut c = base.clone();
    if let Some(text) = raw.timezone.as_deref() {
        match parse_zone(text) {
            Ok(tz) => c.timezone = tz,
            Err(message) => out.problem(scope, "timezone", message),
        }
    }
    let mut positive = |field: &str, value: &Option<String>, slot: &mut Duration| {
        if let Some(text) = value.as_deref() {
            match parse_duration(text) {
                Ok(d) if d.is_zero() => out.problem(
                    scope,
                    field,
                    format!("must be longer than 0s, got {text:?}"),
                ),
                Ok(d) => *slot = d,
                Err(message) => out.problem(scope, field, message),
            }
        }
    };
    positive("timeout", &raw.timeout, &mut c.timeout);
    positive("retention", &raw.retention, &mut c.retention);
    for (field, value, slot) in [
        ("catchup_window", &raw.catchup_window, &mut c.catchup_window),
        ("backoff", &raw.backoff, &mut c.backoff),
        ("backoff_max", &raw.backoff_max, &mut c.backoff_max),
        ("jitter", &raw.jitter, &mut c.jitter),
    ] {
        if let Some(text) = value.as_deref() {
            match parse_duration(text) {
                Ok(d) => *slot = d,
                Err(message) => out.problem(scope, field, message),
            }
        }
    }
    if let Some(text) = raw.overlap.as_deref() {
        match text {
            "allow" => c.overlap = Overlap::Allow,
            "skip" => c.overlap = Overlap::Skip,
            "queue" => c.overlap = Overlap::Queue,
            "replace" => c.overlap = Overlap::Replace,
            other => out.problem(
                scope,
                "overlap",
                enum_message(
                    other,
                    "an overlap policy",
                    &["allow", "skip", "queue", "replace"],
                ),
            ),
        }
    }
    if let Some(text) = raw.catchup.as_deref() {
        match text {
            "none" => c.catchup = Catchup::None,
            "latest" => c.catchup = Catchup::Latest,
            "all" => c.catchup = Catchup::All,
            other => out.problem(
                scope,
                "catchup",
                enum_message(other, "a catch-up policy", &["none", "latest", "all"]),
            ),
        }
    }
    if let Some(text) = raw.deadline.as_deref() {
        match text {
            "none" => c.deadline = None,
            text => match humantime::parse_duration(text) {
                Ok(d) if d > MAX_DURATION => out.problem(
                    scope,
                    "deadline",
                    format!("{text:?} is too long: at most 100 years"),
                ),
                Ok(d) if !d.is_zero() => c.deadline = Some(d),
                Ok(_) => out.problem(
                    scope,
                    "deadline",
                    format!("must be longer than 0s, got {text:?}; use \"none\" for no deadline"),
                ),
                Err(_) => out.problem(
                    scope,
                    "deadline",
                    format!(
                        "{text:?} is neither a duration nor \"none\": use humantime syntax such as \"90s\", \"5m\" or \"1h 30m\", or \"none\""
                    ),
                ),
            },
        }
    }
    if let Some(n) = raw.max_attempts {
        match u32::try_from(n) {
            Ok(n) if n >= 1 => c.max_attempts = n,
            _ if n < 1 => out.problem(
                scope,
                "max_attempts",
                format!("must be at least 1 (the first try counts), got {n}"),
            ),
            _ => out.problem(
                scope,
                "max_attempts",
                format!("must be at most {}, got {n}", u32::MAX),
            ),
        }
    }
    if let Some(text) = raw.queue.as_deref() {
        match QueueName::new(text) {
            Ok(q) => c.queue = q,
            Err(e) => out.problem(scope, "queue", e.to_string()),
        }
    }
    let touches_backoff = raw.backoff.is_some() || raw.backoff_max.is_some();
    if (own_section || touches_backoff) && c.backoff > c.backoff_max {
        out.problem(
            scope,
            "backoff",
            format!(
                "must not be longer than backoff_max ({}), got {:?}",
                humantime::format_duration(c.backoff_max),
                humantime::format_duration(c.backoff).to_string()
            ),
        );
    }
    c
}

fn resolve_leader(raw: &RawLeader, out: &mut Report) -> LeaderConfig {
    let scope = "[leader]";
    let mut leader = LeaderConfig {
        lease: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry: Duration::from_secs(2),
    };
    let mut ok = true;
    for (field, value, slot) in [
        ("lease", &raw.lease, &mut leader.lease),
        (
            "renew_deadline",
            &raw.renew_deadline,
            &mut leader.renew_deadline,
        ),
        ("retry", &raw.retry, &mut leader.retry),
    ] {
        if let Some(text) = value.as_deref() {
            match parse_duration(text) {
                Ok(d) if d.is_zero() => {
                    ok = false;
                    out.problem(
                        scope,
                        field,
                        format!("must be longer than 0s, got {text:?}"),
                    );
                }
                Ok(d) => *slot = d,
                Err(message) => {
                    ok = false;
                    out.problem(scope, field, message);
                }
            }
        }
    }
    if !ok {
        return leader;
    }
    let shown = |value: &Option<String>, d: Duration| {
        value
            .clone()
            .unwrap_or_else(|| humantime::format_duration(d).to_string())
    };
    if leader.renew_deadline >= leader.lease {
        out.problem(
            scope,
            "renew_deadline",
            format!(
                "must be shorter than lease ({}), got {:?}",
                shown(&raw.lease, leader.lease),
                shown(&raw.renew_deadline, leader.renew_deadline)
            ),
        );
    }
    if leader.retry >= leader.renew_deadline {
        out.problem(
            scope,
            "retry",
            format!(
                "must be shorter than renew_deadline ({}), got {:?}",
                shown(&raw.renew_deadline, leader.renew_deadline),
                shown(&raw.retry, leader.retry)
            ),
        );
    }
    leader
}

fn resolve_job(
    raw: &RawJob,
    defaults: &Common,
    now: DateTime<Utc>,
    out: &mut Report,
) -> Option<Job> {
    let scope = raw.scope.as_str();
    let before = out.problems.len();
    let name = match raw.own.name.as_deref() {
        None if raw.rejected.contains(&"name") => None,
        None => {
            out.problem(
                scope,
                "name",
                "is required: 1 to 128 characters from A-Z a-z 0-9 _ . -",
            );
            None
        }
        Some(text) => match JobName::new(text) {
            Ok(name) => Some(name),
            Err(e) => {
                out.problem(scope, "name", e.to_string());
                None
            }
        },
    };
    let common = resolve_common(defaults, &raw.common, scope, false, out);
    let schedule = match raw.own.schedule.as_deref() {
        None if raw.rejected.contains(&"schedule") => None,
        None => {
            out.problem(
                scope,
                "schedule",
                "is required: a cron expression such as \"30 3 * * *\", or \"@every 5m\"",
            );
            None
        }
        Some(text) => match Schedule::parse_at(text, common.timezone, now) {
            Ok(s) => Some(s),
            Err(e) => {
                out.problem(scope, "schedule", schedule_message(text, &e));
                None
            }
        },
    };
    let handler = resolve_handler(raw, scope, out);
    let payload = match &raw.own.payload {
        Some(table) => toml_to_json(&toml::Value::Table(table.clone()), scope, "payload", out),
        None => serde_json::Value::Object(serde_json::Map::new()),
    };
    if out.problems.len() > before {
        return None;
    }
    let job = Job {
        name: name?,
        schedule: schedule?,
        timezone: common.timezone,
        timeout: common.timeout,
        overlap: common.overlap,
        catchup: common.catchup,
        catchup_window: common.catchup_window,
        deadline: common.deadline,
        max_attempts: common.max_attempts,
        backoff: common.backoff,
        backoff_max: common.backoff_max,
        jitter: common.jitter,
        queue: common.queue,
        retention: common.retention,
        payload,
        handler,
    };
    warn_risky(&job, scope, now, out);
    Some(job)
}

fn resolve_handler(raw: &RawJob, scope: &str, out: &mut Report) -> Option<Handler> {
    if raw.own.command.is_some() && raw.http.is_some() {
        out.problem(
            scope,
            "http",
            "is set together with command: a job has exactly one handler, so keep one of them (or neither, when an embedding program registers the handler)",
        );
        return None;
    }
    if let Some(argv) = &raw.own.command {
        return match argv.first() {
            None => {
                out.problem(
                    scope,
                    "command",
                    "is empty: give the program and its arguments, such as [\"/usr/local/bin/report\", \"--daily\"]",
                );
                None
            }
            Some(program) if program.trim().is_empty() => {
                out.problem(
                    scope,
                    "command",
                    "the program (first element) is empty: give a path such as \"/usr/local/bin/report\"",
                );
                None
            }
            Some(_) => Some(Handler::Command(argv.clone())),
        };
    }
    raw.http
        .as_ref()
        .and_then(|http| resolve_http(http, scope, out))
        .map(Handler::Http)
}

fn resolve_http(raw: &RawHttp, scope: &str, out: &mut Report) -> Option<HttpHandler> {
    let before = out.problems.len();
    match raw.url.as_deref() {
        None => out.problem(
            scope,
            "http.url",
            "is required: an http:// or https:// URL such as \"http://127.0.0.1:8080/sync\"",
        ),
        Some(url) if !is_http_url(url) => out.problem(
            scope,
            "http.url",
            format!(
                "\"{}\" is not an http:// or https:// URL with a host, such as \"http://127.0.0.1:8080/sync\"",
                Redacted(url)
            ),
        ),
        Some(_) => {}
    }
    let method = raw.method.as_deref().unwrap_or("POST").to_ascii_uppercase();
    if !HTTP_METHODS.contains(&method.as_str()) {
        out.problem(
            scope,
            "http.method",
            format!(
                "{:?} is not an HTTP method: use {}",
                raw.method.as_deref().unwrap_or_default(),
                HTTP_METHODS.join(", ")
            ),
        );
    }
    let mut headers = Vec::new();
    for (name, value) in raw.headers.iter().flatten() {
        let field = format!("http.headers.{}", super::raw::key_text(name));
        let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        if name.is_empty() || !name.chars().all(token) {
            out.problem(
                scope,
                "http.headers",
                format!("{name:?} is not a valid header name: use letters, digits and -"),
            );
            continue;
        }
        match value {
            toml::Value::String(v) if v.chars().any(|c| c.is_control() && c != '\t') => {
                out.problem(
                    scope,
                    &field,
                    "the value contains a line break or control character",
                );
            }
            toml::Value::String(v) => headers.push((name.clone(), v.clone())),
            other => out.problem(
                scope,
                &field,
                format!("expected a string, got {}", super::raw::describe(other)),
            ),
        }
    }
    if out.problems.len() > before {
        return None;
    }
    Some(HttpHandler {
        url: raw.url.clone().unwrap_or_default(),
        method,
        headers,
    })
}

fn is_http_url(url: &str) -> bool {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(rest) => {
            let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
            let host = authority.rsplit('@').next().unwrap_or_default();
            !host.is_empty() && !url.chars().any(|c| c.is_whitespace() || c.is_control())
        }
        None => false,
    }
}

/// Converts a TOML value to JSON; date-times become RFC 3339 strings.
fn toml_to_json(
    value: &toml::Value,
    scope: &str,
    field: &str,
    out: &mut Report,
) -> serde_json::Value {
    use serde_json::Value as J;
    match value {
        toml::Value::String(s) => J::String(s.clone()),
        toml::Value::Integer(i) => J::from(*i),
        toml::Value::Float(f) => match serde_json::Number::from_f64(*f) {
            Some(n) => J::Number(n),
            None => {
                out.problem(
                    scope,
                    field,
                    format!("{f} cannot be represented in JSON: use a finite number or a string"),
                );
                J::Null
            }
        },
        toml::Value::Boolean(b) => J::Bool(*b),
        toml::Value::Datetime(d) => J::String(d.to_string()),
        toml::Value::Array(items) => J::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| toml_to_json(v, scope, &format!("{field}[{i}]"), out))
                .collect(),
        ),
        toml::Value::Table(t) => J::Object(
            t.iter()
                .map(|(k, v)| {
                    let path = format!("{field}.{}", super::raw::key_text(k));
                    (k.clone(), toml_to_json(v, scope, &path, out))
                })
                .collect(),
        ),
    }
}

/// Legal but risky combinations of one job.
fn warn_risky(job: &Job, scope: &str, now: DateTime<Utc>, out: &mut Report) {
    let fmt = |d: Duration| humantime::format_duration(d).to_string();
    if let Some(interval) = shortest_interval(&job.schedule, now) {
        if !job.jitter.is_zero() && job.jitter >= interval {
            out.warn(
                scope,
                "jitter",
                format!(
                    "{} is not shorter than the schedule's interval ({}): an occurrence may be published after the next one",
                    fmt(job.jitter),
                    fmt(interval)
                ),
            );
        }
        if job.catchup == Catchup::All && job.catchup_window < interval {
            out.warn(
                scope,
                "catchup_window",
                format!(
                    "{} is shorter than the schedule's interval ({}): catchup = \"all\" can recover at most one missed occurrence",
                    fmt(job.catchup_window),
                    fmt(interval)
                ),
            );
        }
    }
    if let Some(deadline) = job.deadline
        && !job.jitter.is_zero()
        && deadline <= job.jitter
    {
        out.warn(
            scope,
            "deadline",
            format!(
                "{} is not longer than jitter ({}): occurrences delayed by jitter will be recorded as missed",
                fmt(deadline),
                fmt(job.jitter)
            ),
        );
    }
    if job.catchup != Catchup::None && job.retention < job.catchup_window {
        out.warn(
            scope,
            "retention",
            format!(
                "{} is shorter than catchup_window ({}): an occurrence published again by catch-up after its record expired would run again",
                fmt(job.retention),
                fmt(job.catchup_window)
            ),
        );
    }
    out.warnings
        .extend(dst_warnings(scope, &job.schedule, now, DST_HORIZON));
}

/// Warnings for a pinned schedule whose wall-clock time falls into a daylight-saving
/// transition within `horizon` after `from` (SPEC section 3: `cronq check` warns about
/// them), each as `job "x": schedule: "30 2 * * *" fires at 02:30 which …`.
fn dst_warnings(
    scope: &str,
    schedule: &Schedule,
    from: DateTime<Utc>,
    horizon: Duration,
) -> Vec<Problem> {
    schedule
        .dst_warnings(from, horizon)
        .into_iter()
        .map(|w| Problem::new(scope, "schedule", format!("{:?} {w}", schedule.as_str())))
        .collect()
}

/// The interval of an `@every` schedule, or the shortest gap between a cron schedule's
/// upcoming fire times, sampled after `now`.
fn shortest_interval(schedule: &Schedule, now: DateTime<Utc>) -> Option<Duration> {
    if let Some(every) = schedule.is_every() {
        return Some(every);
    }
    let times: Vec<_> = schedule.iter_after(now).take(INTERVAL_SAMPLES).collect();
    times
        .windows(2)
        .filter_map(|w| (w[1] - w[0]).to_std().ok())
        .min()
}

/// `"TEXT" <error>`: the schedule error's text reads after the schedule as written.
fn schedule_message(text: &str, error: &ScheduleError) -> String {
    let message = error.to_string();
    if message.starts_with('"') {
        format!("{text:?}: {message}")
    } else {
        format!("{text:?} {message}")
    }
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text).map_err(|_| {
        format!(
            "{text:?} is not a duration: use humantime syntax such as \"90s\", \"5m\" or \"1h 30m\""
        )
    })?;
    if d > MAX_DURATION {
        return Err(format!("{text:?} is too long: at most 100 years"));
    }
    Ok(d)
}

fn parse_zone(text: &str) -> Result<Tz, String> {
    if let Ok(tz) = text.parse::<Tz>() {
        return Ok(tz);
    }
    let lower = text.to_ascii_lowercase();
    if lower == "local" || lower == "localtime" || lower.is_empty() {
        return Err(format!(
            "{text:?} is not an IANA time zone name: cronq never uses the machine's local zone; name one such as \"Europe/Berlin\" or \"UTC\""
        ));
    }
    Err(match suggest_zone(text) {
        Some(s) => format!("{text:?} is not an IANA time zone name; did you mean \"{s}\"?"),
        None => format!(
            "{text:?} is not an IANA time zone name: use one such as \"Europe/Berlin\", \"America/New_York\" or \"UTC\""
        ),
    })
}

fn enum_message(value: &str, what: &str, allowed: &[&str]) -> String {
    let list = match allowed {
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
        [] => String::new(),
    };
    match did_you_mean(value, allowed.iter().copied()) {
        Some(s) => format!("{value:?} is not {what}: use {list}; did you mean \"{s}\"?"),
        None => format!("{value:?} is not {what}: use {list}"),
    }
}
