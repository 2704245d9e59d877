//! The careful path of stage one: what the file says, as plain serde structs, section by
//! section.
//!
//! The text is parsed into a [`toml::Table`], then every section and every job is
//! deserialized on its own, field by field, so one bad value never hides the others: each
//! unknown field (with a "did you mean") and each wrong type is recorded as a [`Problem`]
//! against its section, the bad field is dropped, and the rest still goes to stage two.
//! No rule beyond TOML syntax and types is checked here. (A section or job whose fields
//! are all known and of their type is deserialized at once instead, which reads the same.)
//!
//! This module also owns the raw forms (`RawConfig`, `RawJob`, …) that the fast path
//! (`super::quick`) reads into and stage two (`super::validate`) resolves; [`job`] reads
//! one job's table, for the whole text, for a piece the fast path cannot read, and for a
//! runtime job. It reads no text but what it is given and knows nothing of the fast path.

use serde::Deserialize;
use serde::de::DeserializeOwned;
use toml::{Table, Value};

use super::error::Problem;
use super::suggest::did_you_mean;
use crate::names::JobName;

/// A config field: its TOML key and the form it must have, for type errors.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Field {
    pub(crate) name: &'static str,
    pub(crate) expected: &'static str,
}

const fn field(name: &'static str, expected: &'static str) -> Field {
    Field { name, expected }
}

/// The fields of `[defaults]`, which a `[[job]]` may override.
pub(crate) const COMMON_FIELDS: &[Field] = &[
    field(
        "timezone",
        "a string naming an IANA zone, such as \"Europe/Berlin\"",
    ),
    field("timeout", "a duration string such as \"10m\""),
    field(
        "overlap",
        "one of \"allow\", \"skip\", \"queue\", \"replace\"",
    ),
    field("catchup", "one of \"none\", \"latest\", \"all\""),
    field("catchup_window", "a duration string such as \"1h\""),
    field("deadline", "a duration string such as \"5m\", or \"none\""),
    field("max_attempts", "an integer such as 3"),
    field("backoff", "a duration string such as \"10s\""),
    field("backoff_max", "a duration string such as \"10m\""),
    field("jitter", "a duration string such as \"30s\""),
    field("queue", "a string such as \"default\""),
    field("retention", "a duration string such as \"7d\""),
    field("max_concurrent", "an integer such as 3"),
    field(
        "sla",
        "a table such as { start_within = \"30s\", max_duration = \"10m\", success_within = \"25h\" }",
    ),
];

/// The fields only a `[[job]]` has.
pub(crate) const JOB_FIELDS: &[Field] = &[
    field("name", "a string such as \"nightly-report\""),
    field(
        "schedule",
        "a string such as \"30 3 * * *\" or \"@every 5m\"",
    ),
    field(
        "schedules",
        "an array of schedules such as [\"0 9 * * MON-FRI\", \"0 11 * * SAT\"]",
    ),
    field(
        "exclude",
        "an array of dates and cron expressions such as [\"2026-12-25\", \"0 12 * * *\"]",
    ),
    field(
        "calendars",
        "an array of [calendars.NAME] names such as [\"holidays\"]",
    ),
    field("payload", "a table such as { region = \"cn\" }"),
    field(
        "pool",
        "a string naming a [pools.NAME] section, such as \"reports\"",
    ),
    field(
        "handler",
        "a string naming a [handlers.NAME] section or a handler registered in Rust, such as \"report\"",
    ),
    field(
        "command",
        "an array of strings such as [\"/usr/local/bin/report\", \"--daily\"]",
    ),
    field(
        "http",
        "a table such as { url = \"http://127.0.0.1:8080/sync\", method = \"POST\" }",
    ),
    field(
        "user",
        "a string naming a user or a uid, such as \"report\" or \"1001\"",
    ),
    field(
        "group",
        "a string naming a group or a gid, such as \"report\" or \"1001\"",
    ),
    field("env", "a table of strings such as { LANG = \"C.UTF-8\" }"),
    field("clear_env", "true or false"),
    field("cwd", "an absolute path such as \"/srv/report\""),
    field(
        "start_at",
        "an RFC 3339 instant such as \"2026-12-01T09:00:00+01:00\", or a local date-time in the job's zone",
    ),
    field(
        "end_at",
        "an RFC 3339 instant such as \"2026-12-31T18:00:00+01:00\", or a local date-time in the job's zone",
    ),
    field(
        "at",
        "an RFC 3339 instant such as \"2026-12-24T10:00:00+01:00\", or a local date-time in the job's zone",
    ),
    field(
        "after",
        "an array of job names such as [\"extract\", \"load\"]",
    ),
];

/// The fields of a `[handlers.NAME]` section: a job's inline handler fields.
pub(crate) const HANDLER_FIELDS: &[&str] = &[
    "command",
    "http",
    "user",
    "group",
    "env",
    "clear_env",
    "cwd",
];

/// The fields of `[runtime]`.
pub(crate) const RUNTIME_FIELDS: &[Field] = &[field("jobs", "true or false")];

/// The fields of `[leader]`.
pub(crate) const LEADER_FIELDS: &[Field] = &[
    field("lease", "a duration string such as \"15s\""),
    field("renew_deadline", "a duration string such as \"10s\""),
    field("retry", "a duration string such as \"2s\""),
];

/// The fields of `[metrics]`.
pub(crate) const METRICS_FIELDS: &[Field] = &[field(
    "job_label_limit",
    "an integer such as 1000, or \"unlimited\"",
)];

/// The fields of a job's `http = { … }`.
pub(crate) const HTTP_FIELDS: &[Field] = &[
    field(
        "url",
        "a string such as \"http://127.0.0.1:8080/sync\", or { env = \"VARIABLE\" } or { file = \"/path\" }",
    ),
    field("method", "a string such as \"POST\""),
    field(
        "headers",
        "a table such as { \"X-Token\" = { env = \"SYNC_TOKEN\" } } (each value a string, { env = … } or { file = … })",
    ),
];

/// The whole file, every section read as far as it could be.
#[derive(Debug, Default)]
pub(crate) struct RawConfig<'t> {
    /// Problems outside any section: syntax, unknown top-level keys.
    pub(crate) problems: Vec<Problem>,
    /// `[defaults]`.
    pub(crate) defaults: Section<RawDefaults>,
    /// `[leader]`.
    pub(crate) leader: Section<RawLeader>,
    /// `[metrics]`.
    pub(crate) metrics: Section<RawMetrics>,
    /// `[runtime]`.
    pub(crate) runtime: Section<RawRuntime>,
    /// Every `[handlers.NAME]`, in file order, each read as a job holding only a handler.
    pub(crate) handlers: Vec<(String, Section<RawJob>)>,
    /// Every `[[job]]`, in file order, read as the caller iterates.
    pub(crate) jobs: RawJobs<'t>,
    /// Every `[[alert]]`, in file order, read in stage two (`super::alert`).
    pub(crate) alerts: Vec<Table>,
    /// `[calendars.NAME]`, as written, read in stage two (`super::calendars`).
    pub(crate) calendars: Option<Value>,
    /// `[pools.NAME]`, as written, read in stage two (`super::pools`).
    pub(crate) pools: Option<Value>,
}

/// The `[[job]]` tables, each read into a [`RawJob`] only when the caller gets to it, so
/// a large file never holds every job in two forms at once. Whoever reads the text says
/// how each job is read: here ([`RawConfig::parse_whole`]) each table of the whole text
/// through [`job`]; on the fast path (`super::quick`) each piece of text as it is reached.
pub(crate) struct RawJobs<'t>(Box<dyn Iterator<Item = Section<RawJob>> + 't>);

impl<'t> RawJobs<'t> {
    /// The jobs `jobs` yields, in file order, each with its problems.
    pub(crate) fn new(jobs: impl Iterator<Item = Section<RawJob>> + 't) -> Self {
        Self(Box::new(jobs))
    }

    /// Reads each job in file order; problems are recorded in its section.
    pub(crate) fn into_sections(self) -> impl Iterator<Item = Section<RawJob>> + 't {
        self.0
    }
}

impl Default for RawJobs<'_> {
    fn default() -> Self {
        Self::new(std::iter::empty())
    }
}

impl std::fmt::Debug for RawJobs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawJobs").finish_non_exhaustive()
    }
}

/// One section's values and the problems met while reading it.
#[derive(Debug, Default)]
pub(crate) struct Section<T> {
    /// What could be read; bad fields are absent.
    pub(crate) value: T,
    /// Unknown fields and type errors.
    pub(crate) problems: Vec<Problem>,
}

/// `[defaults]`, and the same fields in a `[[job]]`: every field optional.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDefaults {
    pub(crate) timezone: Option<String>,
    pub(crate) timeout: Option<String>,
    pub(crate) overlap: Option<String>,
    pub(crate) catchup: Option<String>,
    pub(crate) catchup_window: Option<String>,
    pub(crate) deadline: Option<String>,
    pub(crate) max_attempts: Option<i64>,
    pub(crate) backoff: Option<String>,
    pub(crate) backoff_max: Option<String>,
    pub(crate) jitter: Option<String>,
    pub(crate) queue: Option<String>,
    pub(crate) retention: Option<String>,
    pub(crate) sla: Option<Table>,
    pub(crate) max_concurrent: Option<i64>,
}

/// `[leader]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLeader {
    pub(crate) lease: Option<String>,
    pub(crate) renew_deadline: Option<String>,
    pub(crate) retry: Option<String>,
}

/// `[metrics]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMetrics {
    pub(crate) job_label_limit: Option<RawLimit>,
}

/// A limit written as a count or as a word (`"unlimited"`); the word is checked in stage two.
/// `[runtime]`: whether jobs created at runtime (`cronq job apply`) are taken.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRuntime {
    pub(crate) jobs: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawLimit {
    Count(i64),
    Word(String),
}

/// One `[[job]]`.
#[derive(Debug, Default)]
pub(crate) struct RawJob {
    /// 1-based position in the file, for `job #3`.
    pub(crate) ordinal: usize,
    /// `job "name"` when the name is valid, else `job #N`.
    pub(crate) scope: String,
    /// The job's own fields.
    pub(crate) own: RawJobOwn,
    /// Its overrides of `[defaults]`.
    pub(crate) common: RawDefaults,
    /// Its `http` table, read.
    pub(crate) http: Option<RawHttp>,
    /// Fields that are present but had the wrong type (already reported), so stage two
    /// does not also call them missing.
    pub(crate) rejected: Vec<&'static str>,
}

/// The fields only a job has.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawJobOwn {
    pub(crate) name: Option<String>,
    pub(crate) schedule: Option<String>,
    pub(crate) at: Option<toml::Value>,
    pub(crate) schedules: Option<Vec<String>>,
    pub(crate) exclude: Option<Vec<toml::Value>>,
    pub(crate) calendars: Option<Vec<String>>,
    pub(crate) pool: Option<String>,
    pub(crate) payload: Option<Table>,
    pub(crate) handler: Option<String>,
    pub(crate) command: Option<Vec<String>>,
    pub(crate) user: Option<String>,
    pub(crate) group: Option<String>,
    pub(crate) env: Option<std::collections::BTreeMap<String, String>>,
    pub(crate) clear_env: Option<bool>,
    pub(crate) cwd: Option<String>,
    pub(crate) start_at: Option<toml::Value>,
    pub(crate) end_at: Option<toml::Value>,
    pub(crate) after: Option<Vec<String>>,
    #[expect(
        dead_code,
        reason = "only type-checked here; the table is read into RawHttp"
    )]
    pub(crate) http: Option<Table>,
}

/// `http = { … }`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHttp {
    pub(crate) url: Option<toml::Value>,
    pub(crate) method: Option<String>,
    pub(crate) headers: Option<Table>,
}

impl<'t> RawConfig<'t> {
    /// The careful path: reads TOML text as one document, section by section and each
    /// `[[job]]` through [`job`]; never fails, problems (a syntax error with its line and
    /// column in the text) are recorded inside.
    pub(crate) fn parse_whole(text: &str) -> Self {
        let mut raw = RawConfig::default();
        match text.parse::<Table>() {
            Ok(table) => raw.read(table),
            Err(err) => raw.problems.push(syntax_problem(text, &err)),
        }
        raw
    }

    /// The sections of `head` (a document with no `job` key), read as
    /// [`RawConfig::parse_whole`] reads them, and `jobs` as its jobs.
    pub(crate) fn with_jobs(head: Table, jobs: RawJobs<'t>) -> Self {
        let mut raw = RawConfig::default();
        raw.read(head);
        raw.jobs = jobs;
        raw
    }

    /// Reads the top-level keys of `table`.
    fn read(&mut self, table: Table) {
        let raw = self;
        for (key, value) in table {
            match key.as_str() {
                "defaults" => match value {
                    Value::Table(t) => {
                        raw.defaults = section(t, "[defaults]", "", COMMON_FIELDS);
                    }
                    other => raw.problems.push(not_a_table(&key, "[defaults]", &other)),
                },
                "leader" => match value {
                    Value::Table(t) => raw.leader = section(t, "[leader]", "", LEADER_FIELDS),
                    other => raw.problems.push(not_a_table(&key, "[leader]", &other)),
                },
                "metrics" => match value {
                    Value::Table(t) => {
                        raw.metrics = section(t, "[metrics]", "", METRICS_FIELDS);
                    }
                    other => raw.problems.push(not_a_table(&key, "[metrics]", &other)),
                },
                "runtime" => match value {
                    Value::Table(t) => {
                        raw.runtime = section(t, "[runtime]", "", RUNTIME_FIELDS);
                    }
                    other => raw.problems.push(not_a_table(&key, "[runtime]", &other)),
                },
                "handlers" => match value {
                    Value::Table(t) => raw.handlers = handlers(t),
                    other => raw
                        .problems
                        .push(not_a_table(&key, "[handlers.NAME]", &other)),
                },
                "alert" => match value {
                    Value::Array(items) => {
                        for (i, item) in items.into_iter().enumerate() {
                            match item {
                                Value::Table(t) => raw.alerts.push(t),
                                other => raw.problems.push(Problem::new(
                                    format!("alert #{}", i + 1),
                                    "",
                                    format!(
                                        "expected a table, written [[alert]], got {}",
                                        describe(&other)
                                    ),
                                )),
                            }
                        }
                    }
                    other => raw.problems.push(Problem::new(
                        "",
                        "alert",
                        format!(
                            "expected an array of tables, written [[alert]], got {}",
                            describe(&other)
                        ),
                    )),
                },
                "calendars" => raw.calendars = Some(value),
                "pools" => raw.pools = Some(value),
                "job" => match value {
                    Value::Array(items) => {
                        raw.jobs = RawJobs::new(
                            (1..).zip(items).map(|(ordinal, item)| job(ordinal, item)),
                        );
                    }
                    other => raw.problems.push(Problem::new(
                        "",
                        "job",
                        format!(
                            "expected an array of tables, written [[job]], got {}",
                            describe(&other)
                        ),
                    )),
                },
                _ => raw.problems.push(unknown_top_level(&key)),
            }
        }
    }
}

fn syntax_problem(text: &str, err: &toml::de::Error) -> Problem {
    let message = err
        .message()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    let scope = match err.span() {
        Some(span) => {
            let (line, column) = line_column(text, span.start);
            format!("line {line}, column {column}")
        }
        None => String::new(),
    };
    Problem::new(scope, "", format!("not valid TOML: {message}"))
}

/// 1-based line and column (in characters) of byte `offset`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

fn not_a_table(key: &str, header: &str, value: &Value) -> Problem {
    Problem::new(
        "",
        key,
        format!(
            "expected a table, written {header}, got {}",
            describe(value)
        ),
    )
}

fn unknown_top_level(key: &str) -> Problem {
    let message = if COMMON_FIELDS.iter().any(|f| f.name == key) {
        "unknown top-level key; it belongs in [defaults] or in a [[job]]".to_owned()
    } else if JOB_FIELDS.iter().any(|f| f.name == key) {
        "unknown top-level key; it belongs in a [[job]]".to_owned()
    } else if LEADER_FIELDS.iter().any(|f| f.name == key) {
        "unknown top-level key; it belongs in [leader]".to_owned()
    } else if METRICS_FIELDS.iter().any(|f| f.name == key) {
        "unknown top-level key; it belongs in [metrics]".to_owned()
    } else {
        match did_you_mean(
            key,
            [
                "defaults",
                "leader",
                "metrics",
                "runtime",
                "handlers",
                "calendars",
                "pools",
                "job",
            ],
        ) {
            Some(s) => format!("unknown section; did you mean \"{s}\"?"),
            None => "unknown section; allowed: [defaults], [leader], [metrics], [runtime], [handlers.NAME], [calendars.NAME], [pools.NAME], [[job]]".to_owned(),
        }
    };
    Problem::new("", key_text(key), message)
}

/// `[handlers.NAME]` sections: each read as a job of only its handler fields, under the
/// scope `[handlers.NAME]`; any other field is reported and dropped.
fn handlers(table: Table) -> Vec<(String, Section<RawJob>)> {
    let mut read = Vec::new();
    for (name, value) in table {
        let scope = format!("[handlers.{}]", key_text(&name));
        let Value::Table(fields) = value else {
            read.push((
                name.clone(),
                Section {
                    value: RawJob {
                        scope: scope.clone(),
                        ..RawJob::default()
                    },
                    problems: vec![Problem::new(
                        &scope,
                        "",
                        format!(
                            "expected a table, written {scope}, got {}",
                            describe(&value)
                        ),
                    )],
                },
            ));
            continue;
        };
        let mut problems = Vec::new();
        let mut kept = Table::new();
        for (key, value) in fields {
            if HANDLER_FIELDS.contains(&key.as_str()) {
                kept.insert(key, value);
            } else if JOB_FIELDS
                .iter()
                .chain(COMMON_FIELDS)
                .any(|f| f.name == key)
            {
                problems.push(Problem::new(
                    &scope,
                    key_text(&key),
                    "belongs in a [[job]], not in a named handler: a handler says only how a job runs (command or http, and how the command starts)",
                ));
            } else {
                problems.push(unknown_field(
                    &scope,
                    "",
                    &key,
                    HANDLER_FIELDS.iter().copied(),
                ));
            }
        }
        let mut section = job(0, Value::Table(kept));
        section.value.scope = scope.clone();
        for p in &mut section.problems {
            p.scope.clone_from(&scope);
        }
        problems.extend(section.problems);
        section.problems = problems;
        read.push((name, section));
    }
    read
}

pub(crate) fn job(ordinal: usize, item: Value) -> Section<RawJob> {
    let Value::Table(table) = item else {
        return Section {
            value: RawJob {
                ordinal,
                scope: format!("job #{ordinal}"),
                ..RawJob::default()
            },
            problems: vec![Problem::new(
                format!("job #{ordinal}"),
                "",
                format!("expected a table, written [[job]], got {}", describe(&item)),
            )],
        };
    };
    let scope = match table.get("name") {
        Some(Value::String(name)) if JobName::new(name.as_str()).is_ok() => {
            format!("job {name:?}")
        }
        _ => format!("job #{ordinal}"),
    };
    if let Some(read) = job_at_once(ordinal, &scope, &table) {
        return read;
    }
    let mut own = Table::new();
    let mut common = Table::new();
    let mut problems = Vec::new();
    let mut http = None;
    let mut rejected = Vec::new();
    for (key, value) in table {
        if let Some(spec) = JOB_FIELDS.iter().find(|f| f.name == key) {
            let checked = check_field::<RawJobOwn>(&key, &value, &scope, "", spec);
            if checked.is_err() {
                rejected.push(spec.name);
            }
            match checked {
                Ok(()) if key == "http" => {
                    if let Value::Table(t) = value {
                        let section: Section<RawHttp> = section(t, &scope, "http.", HTTP_FIELDS);
                        problems.extend(section.problems);
                        http = Some(section.value);
                    }
                }
                Ok(()) => {
                    own.insert(key, value);
                }
                Err(problem) => problems.push(problem),
            }
        } else if let Some(spec) = COMMON_FIELDS.iter().find(|f| f.name == key) {
            match check_field::<RawDefaults>(&key, &value, &scope, "", spec) {
                Ok(()) => {
                    common.insert(key, value);
                }
                Err(problem) => problems.push(problem),
            }
        } else {
            let names = JOB_FIELDS.iter().chain(COMMON_FIELDS).map(|f| f.name);
            problems.push(unknown_field(&scope, "", &key, names));
        }
    }
    let own: Section<RawJobOwn> = section(own, &scope, "", JOB_FIELDS);
    let common: Section<RawDefaults> = section(common, &scope, "", COMMON_FIELDS);
    problems.extend(own.problems);
    problems.extend(common.problems);
    Section {
        value: RawJob {
            ordinal,
            scope,
            own: own.value,
            common: common.value,
            http,
            rejected,
        },
        problems,
    }
}

/// The common case of [`job`]: every field known and of its type, so each part of the job
/// deserializes at once, from a copy (the field-by-field path still needs the table when it
/// does not). `None` when some field is unknown or of the wrong type: then only the
/// field-by-field path says which, and the result is the same as if this had not run.
fn job_at_once(ordinal: usize, scope: &str, table: &Table) -> Option<Section<RawJob>> {
    let mut own = Table::new();
    let mut common = Table::new();
    let mut http = None;
    for (key, value) in table {
        if key == "http" {
            let Value::Table(t) = value else { return None };
            http = Some(t.clone());
        } else if JOB_FIELDS.iter().any(|f| f.name == key) {
            own.insert(key.clone(), value.clone());
        } else if COMMON_FIELDS.iter().any(|f| f.name == key) {
            common.insert(key.clone(), value.clone());
        } else {
            return None;
        }
    }
    let own: RawJobOwn = Value::Table(own).try_into().ok()?;
    let common: RawDefaults = Value::Table(common).try_into().ok()?;
    let (http, problems) = match http {
        Some(t) => {
            let read: Section<RawHttp> = section(t, scope, "http.", HTTP_FIELDS);
            (Some(read.value), read.problems)
        }
        None => (None, Vec::new()),
    };
    Some(Section {
        value: RawJob {
            ordinal,
            scope: scope.to_owned(),
            own,
            common,
            http,
            rejected: Vec::new(),
        },
        problems,
    })
}

/// Checks that `key = value` alone deserializes into `T`.
fn check_field<T: DeserializeOwned>(
    key: &str,
    value: &Value,
    scope: &str,
    prefix: &str,
    spec: &Field,
) -> Result<(), Problem> {
    let mut single = Table::new();
    single.insert(key.to_owned(), value.clone());
    match Value::Table(single).try_into::<T>() {
        Ok(_) => Ok(()),
        Err(_) => Err(Problem::new(
            scope,
            format!("{prefix}{key}"),
            format!("expected {}, got {}", spec.expected, describe(value)),
        )),
    }
}

/// Deserializes `table` into `T` one field at a time, so every unknown field and every
/// type error is reported, and the good fields are kept.
fn section<T: DeserializeOwned + Default>(
    table: Table,
    scope: &str,
    prefix: &str,
    fields: &[Field],
) -> Section<T> {
    // The common case first: every field known and of its type (from a copy, as the
    // field-by-field reading below still needs the table when it is not).
    if table.keys().all(|k| fields.iter().any(|f| f.name == k))
        && let Ok(value) = Value::Table(table.clone()).try_into::<T>()
    {
        return Section {
            value,
            problems: Vec::new(),
        };
    }
    let mut problems = Vec::new();
    let mut clean = Table::new();
    for (key, value) in table {
        let Some(spec) = fields.iter().find(|f| f.name == key) else {
            problems.push(unknown_field(
                scope,
                prefix,
                &key,
                fields.iter().map(|f| f.name),
            ));
            continue;
        };
        match check_field::<T>(&key, &value, scope, prefix, spec) {
            Ok(()) => {
                clean.insert(key, value);
            }
            Err(problem) => problems.push(problem),
        }
    }
    let value = match Value::Table(clean).try_into::<T>() {
        Ok(value) => value,
        Err(err) => {
            // Each field was checked alone above, so this is not expected; still say so.
            problems.push(Problem::new(scope, "", err.message().to_owned()));
            T::default()
        }
    };
    Section { value, problems }
}

/// The problem of an unknown `key` (named `PREFIX.KEY`) among `allowed`: a "did you mean"
/// when one is close, else the allowed names. Every section, job and sub-table says it so.
pub(crate) fn unknown_field<'a>(
    scope: &str,
    prefix: &str,
    key: &str,
    allowed: impl Iterator<Item = &'a str> + Clone,
) -> Problem {
    let message = match did_you_mean(key, allowed.clone()) {
        Some(s) => format!("unknown field; did you mean \"{s}\"?"),
        None => format!(
            "unknown field; allowed: {}",
            allowed.collect::<Vec<_>>().join(", ")
        ),
    };
    Problem::new(scope, format!("{prefix}{}", key_text(key)), message)
}

/// A key as written in TOML: bare when it can be, quoted otherwise (so a problem stays
/// one line).
pub(crate) fn key_text(key: &str) -> String {
    let bare = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if !key.is_empty() && key.chars().all(bare) {
        key.to_owned()
    } else {
        format!("{key:?}")
    }
}

/// A short description of a TOML value for "expected …, got …".
pub(crate) fn describe(value: &Value) -> String {
    match value {
        Value::String(s) => format!("the string {}", shorten(&format!("{s:?}"))),
        Value::Integer(i) => format!("the integer {i}"),
        Value::Float(f) => format!("the number {f}"),
        Value::Boolean(b) => format!("the boolean {b}"),
        Value::Datetime(d) => format!("the date-time {d}"),
        Value::Array(_) => format!("the array {}", shorten(&value.to_string())),
        Value::Table(_) => "a table".to_owned(),
    }
}

fn shorten(text: &str) -> String {
    const MAX: usize = 60;
    if text.chars().count() <= MAX {
        return text.to_owned();
    }
    let cut: String = text.chars().take(MAX).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bad_field_is_reported_and_good_ones_kept() {
        let raw = RawConfig::parse_whole(
            r#"
            [[job]]
            name = "a"
            schedual = "x"
            max_attempts = "3"
            timeout = "5m"
            command = "ls"
            http = { method = 1, methd = "GET" }
            "#,
        );
        let job = &raw.jobs.into_sections().next().unwrap();
        let lines: Vec<String> = job.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "job \"a\": schedual: unknown field; did you mean \"schedule\"?",
                "job \"a\": max_attempts: expected an integer such as 3, got the string \"3\"",
                "job \"a\": command: expected an array of strings such as [\"/usr/local/bin/report\", \"--daily\"], got the string \"ls\"",
                "job \"a\": http.method: expected a string such as \"POST\", got the integer 1",
                "job \"a\": http.methd: unknown field; did you mean \"method\"?",
            ]
        );
        assert_eq!(job.value.common.timeout.as_deref(), Some("5m"));
        assert_eq!(job.value.own.name.as_deref(), Some("a"));
    }

    #[test]
    fn syntax_errors_have_line_and_column() {
        let raw = RawConfig::parse_whole("[defaults]\ntimeout = \n");
        assert_eq!(raw.problems.len(), 1);
        let line = raw.problems[0].to_string();
        assert!(
            line.starts_with("line 2, column 11: not valid TOML: "),
            "{line}"
        );
    }

    #[test]
    fn line_column_counts_characters() {
        assert_eq!(line_column("ab\ncé=", 6), (2, 3));
        assert_eq!(line_column("", 10), (1, 1));
    }
}
