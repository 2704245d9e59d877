//! Stage two of loading: apply the built-in defaults, then `[defaults]`, then each job's
//! overrides; check every rule; collect every problem and every warning.
//!
//! Invariant: a problem is reported once, where the bad value is written: a bad value in
//! `[defaults]` is reported under `[defaults]`, not again for every job that inherits it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::error::ConfigError;
use super::raw::{
    RawConfig, RawDefaults, RawJob, RawLeader, RawLimit, RawMetrics, RawRuntime, Section,
};
use super::report::Report;
use super::share::Sharing;
use super::suggest::{did_you_mean, suggest_zone};
use super::warnings::{Memo, warn_risky};
use super::{
    Catchup, Config, Handler, Job, LeaderConfig, MetricsConfig, Overlap, RuntimeConfig, Settings,
};
use super::{after, bounds, calendars, handler, once, payload, time_controls};
use crate::names::{JobName, QueueName};
use crate::schedule::Interner;

/// The longest duration accepted anywhere: 100 years. Longer values are typos, and would
/// overflow date arithmetic downstream.
const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

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
        &Settings::builtin(),
        &raw.defaults.value,
        "[defaults]",
        true,
        &mut out,
    );

    out.problems.extend(raw.leader.problems);
    let leader = resolve_leader(&raw.leader.value, &mut out);

    out.problems.extend(raw.metrics.problems);
    let metrics = resolve_metrics(&raw.metrics.value, &mut out);

    out.problems.extend(raw.runtime.problems);
    let runtime = resolve_runtime(&raw.runtime.value);

    let alerts = super::alert::resolve(raw.alerts, parse_duration, &mut out);

    let calendars = calendars::resolve(raw.calendars, path, &mut out);

    let pools = super::pools::resolve(raw.pools, &mut out);

    let sections = raw.jobs.into_sections();
    // As many as the file has (the fast path's jobs: at most its pieces), so that a large
    // file's jobs are not moved as their vector grows.
    let expected = sections.size_hint().1.unwrap_or(0);
    let mut jobs = Vec::with_capacity(expected);
    // A fast hash: a million names are looked up as a large file loads.
    let mut seen: foldhash::HashMap<String, usize> = foldhash::HashMapExt::with_capacity(expected);
    // One parsed schedule per distinct (text, zone): jobs share it (memory), and the parse
    // and never-fires check run once per distinct schedule (load time).
    let mut schedules = Interner::new(now);
    // Look-ahead results for the warnings, shared the same way.
    let mut memo = Memo::default();
    // Jobs per distinct schedule, for the same-second herd warning.
    let mut herd = super::herd::Herd::default();
    // One copy of each distinct settings value and command, shared by the jobs (memory).
    let mut sharing = Sharing::default();
    let handlers = resolve_handlers(raw.handlers, &mut sharing, &mut out);
    for section in sections {
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
        let context = JobContext {
            defaults: &defaults,
            handlers: &handlers,
            calendars: &calendars,
            pools: &pools,
        };
        if let Some(resolved) = resolve_job(job, &context, &mut schedules, &mut sharing, &mut out) {
            warn_risky(&resolved, &job.scope, now, &mut memo, &mut out);
            herd.add(&resolved.schedule);
            jobs.push(resolved);
        }
    }
    herd.warn(now, &mut out);
    out.problems.extend(
        after::check_graph(&jobs, |_| true)
            .into_iter()
            .map(|b| b.problem),
    );
    if out.problems.is_empty() {
        after::warn_never_met(&jobs, now, &mut out);
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
        metrics,
        runtime,
        defaults,
        handlers,
        calendars,
        pools,
        alerts,
        jobs,
        deleted: std::collections::BTreeSet::new(),
        runtime_since: std::collections::BTreeMap::new(),
        warnings: out.warnings,
        by_name: super::by_name::ByName::default(),
    })
}

/// What a job resolves against besides its own fields.
pub(super) struct JobContext<'a> {
    /// `[defaults]`, resolved.
    pub(super) defaults: &'a Settings,
    /// `[handlers.NAME]`, resolved.
    pub(super) handlers: &'a BTreeMap<Arc<str>, Handler>,
    /// `[calendars.NAME]`, read.
    pub(super) calendars: &'a BTreeMap<Arc<str>, calendars::Calendar>,
    /// `[pools.NAME]`: each pool's size.
    pub(super) pools: &'a BTreeMap<Arc<str>, u32>,
}

/// `[runtime]`, with its default: runtime jobs are taken.
fn resolve_runtime(raw: &RawRuntime) -> RuntimeConfig {
    RuntimeConfig {
        jobs: raw.jobs.unwrap_or(true),
    }
}

/// Each `[handlers.NAME]`: a valid name, and exactly one of `command` or `http`.
fn resolve_handlers(
    raw: Vec<(String, Section<RawJob>)>,
    sharing: &mut Sharing,
    out: &mut Report,
) -> BTreeMap<Arc<str>, Handler> {
    let mut handlers = BTreeMap::new();
    for (name, section) in raw {
        let scope = section.value.scope.as_str();
        let before = out.problems.len();
        out.problems.extend(section.problems.iter().cloned());
        if let Err(message) = check_handler_name(&name) {
            out.problem(scope, "", message);
        }
        let raw = &section.value;
        if raw.own.command.is_none()
            && raw.http.is_none()
            && !raw.rejected.contains(&"command")
            && !raw.rejected.contains(&"http")
        {
            out.problem(
                scope,
                "",
                "has no handler: give it command = [\"/path/to/program\", \"arg\"] or http = { url = \"http://…\" }",
            );
        }
        let handler = handler::resolve_handler(raw, scope, out);
        if out.problems.len() == before
            && let Some(handler) = handler
        {
            handlers.insert(Arc::from(name.as_str()), sharing.handler(handler));
        }
    }
    handlers
}

/// A handler name: 1 to 128 characters from A-Z a-z 0-9 _ . - (as a job name).
pub(super) fn check_handler_name(name: &str) -> Result<(), String> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    if name.is_empty() || name.len() > 128 || !name.chars().all(legal) {
        return Err(format!(
            "{name:?} is not a handler name: 1 to 128 characters from A-Z a-z 0-9 _ . -"
        ));
    }
    Ok(())
}

impl Settings {
    /// The built-in defaults, as listed in the `[defaults]` table of `docs/config.md`.
    pub(super) fn builtin() -> Self {
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
            retention: super::DEFAULT_RETENTION,
            sla: super::Sla::default(),
            max_concurrent: None,
            pool: None,
        }
    }
}

/// `base` with the values `raw` sets. Bad values are reported and `base`'s value is kept,
/// so later checks still run. `own_section` is true for `[defaults]`; for a job, checks
/// between two fields only run when the job sets one of them.
fn resolve_common(
    base: &Settings,
    raw: &RawDefaults,
    scope: &str,
    own_section: bool,
    out: &mut Report,
) -> Settings {
    let mut c = base.clone();
    out.set(
        scope,
        "timezone",
        raw.timezone.as_deref(),
        parse_zone,
        &mut c.timezone,
    );
    resolve_durations(raw, scope, &mut c, out);
    out.set(
        scope,
        "overlap",
        raw.overlap.as_deref(),
        parse_overlap,
        &mut c.overlap,
    );
    out.set(
        scope,
        "catchup",
        raw.catchup.as_deref(),
        parse_catchup,
        &mut c.catchup,
    );
    out.set(
        scope,
        "deadline",
        raw.deadline.as_deref(),
        parse_deadline,
        &mut c.deadline,
    );
    out.set(
        scope,
        "max_attempts",
        raw.max_attempts,
        parse_max_attempts,
        &mut c.max_attempts,
    );
    c.sla = super::sla::resolve(c.sla, raw.sla.as_ref(), scope, parse_duration, out);
    out.set(
        scope,
        "max_concurrent",
        raw.max_concurrent,
        parse_max_concurrent,
        &mut c.max_concurrent,
    );
    if (own_section || raw.max_concurrent.is_some() || raw.overlap.is_some())
        && c.overlap == Overlap::Allow
        && let Some(n) = c.max_concurrent
    {
        out.problem(
            scope,
            "max_concurrent",
            format!("is {n} but overlap is \"allow\" (no limit): set overlap to \"skip\", \"queue\" or \"replace\" to say what the occurrence past the limit does, or remove max_concurrent"),
        );
    }
    let queue = |text: &str| QueueName::new(text).map_err(|e| e.to_string());
    out.set(scope, "queue", raw.queue.as_deref(), queue, &mut c.queue);
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

/// The duration fields of `raw` into `c`, in field order; `timeout` and `retention` must
/// be longer than zero.
fn resolve_durations(raw: &RawDefaults, scope: &str, c: &mut Settings, out: &mut Report) {
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
}

fn parse_max_concurrent(n: i64) -> Result<Option<u32>, String> {
    match u32::try_from(n) {
        Ok(n) if n >= 1 => Ok(Some(n)),
        _ => Err(format!(
            "must be at least 1 (how many occurrences of the job may run at once, fleet-wide), got {n}: give it 1 or more, or remove it (one at a time under overlap skip, queue or replace)"
        )),
    }
}

fn parse_overlap(text: &str) -> Result<Overlap, String> {
    match text {
        "allow" => Ok(Overlap::Allow),
        "skip" => Ok(Overlap::Skip),
        "queue" => Ok(Overlap::Queue),
        "replace" => Ok(Overlap::Replace),
        other => Err(enum_message(
            other,
            "an overlap policy",
            &["allow", "skip", "queue", "replace"],
        )),
    }
}

fn parse_catchup(text: &str) -> Result<Catchup, String> {
    match text {
        "none" => Ok(Catchup::None),
        "latest" => Ok(Catchup::Latest),
        "all" => Ok(Catchup::All),
        other => Err(enum_message(
            other,
            "a catch-up policy",
            &["none", "latest", "all"],
        )),
    }
}

/// `"none"` or a duration longer than zero.
fn parse_deadline(text: &str) -> Result<Option<Duration>, String> {
    if text == "none" {
        return Ok(None);
    }
    match humantime::parse_duration(text) {
        Ok(d) if d > MAX_DURATION => Err(format!("{text:?} is too long: at most 100 years")),
        Ok(d) if !d.is_zero() => Ok(Some(d)),
        Ok(_) => Err(format!(
            "must be longer than 0s, got {text:?}; use \"none\" for no deadline"
        )),
        Err(_) => Err(format!(
            "{text:?} is neither a duration nor \"none\": use humantime syntax such as \"90s\", \"5m\" or \"1h 30m\", or \"none\""
        )),
    }
}

fn parse_max_attempts(n: i64) -> Result<u32, String> {
    match u32::try_from(n) {
        Ok(n) if n >= 1 => Ok(n),
        _ if n < 1 => Err(format!(
            "must be at least 1 (the first try counts), got {n}"
        )),
        _ => Err(format!("must be at most {}, got {n}", u32::MAX)),
    }
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

fn resolve_metrics(raw: &RawMetrics, out: &mut Report) -> MetricsConfig {
    let mut metrics = MetricsConfig::default();
    match &raw.job_label_limit {
        None => {}
        Some(RawLimit::Count(n)) => match usize::try_from(*n) {
            Ok(n) => metrics.job_label_limit = Some(n),
            Err(_) => out.problem(
                "[metrics]",
                "job_label_limit",
                format!("must be 0 or more (0: no job has a label of its own), got {n}"),
            ),
        },
        Some(RawLimit::Word(w)) if w == "unlimited" => metrics.job_label_limit = None,
        Some(RawLimit::Word(w)) => out.problem(
            "[metrics]",
            "job_label_limit",
            format!("expected an integer such as 1000, or \"unlimited\", got the string {w:?}"),
        ),
    }
    metrics
}

pub(super) fn resolve_job(
    raw: &RawJob,
    context: &JobContext<'_>,
    schedules: &mut Interner,
    sharing: &mut Sharing,
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
    let mut common = resolve_common(context.defaults, &raw.common, scope, false, out);
    if let Some(pool) = raw.own.pool.as_deref() {
        common.pool = super::pools::check(pool, context.pools, scope, out);
    }
    // `H` needs the job's name (a job whose name is refused gets the name's problem only,
    // unless the schedule is wrong on its own). A one-shot (`at`) has no schedule of its own.
    // A job with `after` runs after other jobs: no schedule of its own.
    let after = after::resolve_after(raw, name.as_ref(), common.timezone, scope, out);
    let schedule = if raw.rejected.contains(&"at") || raw.rejected.contains(&"after") {
        None
    } else if raw.own.after.is_some() {
        after
    } else if raw.own.at.is_some() {
        once::resolve_once(raw, common.timezone, schedules.now(), scope, out)
    } else {
        time_controls::resolve_schedule(
            raw,
            common.timezone,
            name.as_ref().map_or("", JobName::as_str),
            context.calendars,
            schedules,
            out,
        )
    };
    let bounds = bounds::resolve_bounds(raw, common.timezone, schedules.now(), scope, out);
    let schedule = match schedule {
        Some(s) if !bounds.is_none() => Some(schedules.bounded(&s, bounds)),
        other => other,
    };
    let (handler, handler_name) = match raw.own.handler.as_deref() {
        None => (handler::resolve_handler(raw, scope, out), None),
        Some(named) => named_handler(raw, named, context, scope, out),
    };
    let payload = payload::resolve_payload(raw.own.payload.as_ref(), scope, out);
    if out.problems.len() > before {
        return None;
    }
    let job = Job {
        name: name?,
        schedule: schedule?,
        settings: sharing.settings(common),
        payload,
        handler: handler.map(|h| sharing.handler(h)),
        handler_name,
    };
    Some(job)
}

/// `handler = "NAME"`: no inline handler beside it; the `[handlers.NAME]` of this file when
/// there is one (else a consumer must define it or register it in Rust: a warning).
fn named_handler(
    raw: &RawJob,
    named: &str,
    context: &JobContext<'_>,
    scope: &str,
    out: &mut Report,
) -> (Option<Handler>, Option<Arc<str>>) {
    let mut inline = false;
    for (field, set) in [
        ("command", raw.own.command.is_some()),
        ("http", raw.http.is_some()),
    ] {
        if set {
            inline = true;
            out.problem(
                scope,
                field,
                format!("is set together with handler = {named:?}: a job has exactly one handler, so keep the named one or the inline one"),
            );
        }
    }
    if inline {
        return (None, None);
    }
    for (field, set) in handler::command_options(raw) {
        if set {
            out.problem(
                scope,
                field,
                format!(
                    "is only for an inline command handler: set it in [handlers.{named}] instead"
                ),
            );
        }
    }
    if let Err(message) = check_handler_name(named) {
        out.problem(scope, "handler", message);
        return (None, None);
    }
    match context.handlers.get_key_value(named) {
        Some((name, handler)) => (Some(handler.clone()), Some(name.clone())),
        None => {
            let known = context.handlers.keys().map(|k| &**k);
            let hint = match did_you_mean(named, known) {
                Some(s) => format!(" (did you mean \"{s}\"?)"),
                None => String::new(),
            };
            out.warn(
                scope,
                "handler",
                format!("{named:?} is not a [handlers.NAME] of this file{hint}: a consumer must define it or register it in Rust, or its occurrences are dead-lettered"),
            );
            (None, Some(Arc::from(named)))
        }
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
