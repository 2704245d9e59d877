//! Configuration: the TOML file described in `docs/config.md`, resolved into one validated
//! job table.
//!
//! Loading has one entry (`load`: [`Config::load`], [`Config::from_toml`],
//! [`Config::from_toml_at`]) and two stages. Stage one reads what the file says into raw
//! sections, by one of two paths that read the same: the fast path (`quick`) reads a file
//! laid out the usual way a `[[job]]` piece at a time (`pieces` cuts it), on every core,
//! so a million jobs never sit in memory as one TOML tree; the careful path (`raw`) parses
//! the whole text into a TOML table and deserializes each section and each job on its own,
//! field by field, so one wrong type or unknown field never hides the others. `load`'s
//! module doc says which is taken when, and why. Stage two (`validate`) applies the
//! built-in defaults, then `[defaults]`, then each job's overrides, checks every rule, and
//! collects every problem (and every warning) before it returns. Loading never reads or
//! changes the process environment.
//!
//! Invariant: a [`Config`] value is always valid; nothing downstream re-checks it. A
//! [`ConfigError`] lists every problem, one line each: `FILE: SCOPE: FIELD: message`.

mod after;
mod alert;
mod bounds;
mod by_name;
mod calendars;
mod error;
mod handler;
mod herd;
mod load;
mod once;
mod payload;
mod pieces;
mod pools;
mod quick;
mod raw;
mod report;
mod runtime;
mod secret;
mod sections;
mod share;
mod sla;
mod suggest;
mod time_controls;
mod validate;
mod warnings;

#[cfg(test)]
mod once_tests;
#[cfg(test)]
mod pools_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono_tz::Tz;

pub use after::JobIndex;
pub use alert::{
    AlertKind, AlertSink, AlertTarget, DEFAULT_REPEAT, DEFAULT_SEND_TIMEOUT, EmailTarget, EmailTls,
    default_events,
};
pub use calendars::Calendar;
pub use error::{ConfigError, Problem};
pub use runtime::{Merged, RuntimeCache, RuntimeJob};
pub use secret::{Origin, Secret};
pub use sla::Sla;
pub use suggest::did_you_mean;

use crate::names::{JobName, QueueName};
use crate::schedule::Schedule;

/// A loaded, validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it was loaded from.
    pub path: PathBuf,
    /// The producer's leader lease.
    pub leader: LeaderConfig,
    /// `/metrics`: which jobs have a label of their own.
    pub metrics: MetricsConfig,
    /// `[runtime]`: whether jobs created at runtime are taken.
    pub runtime: RuntimeConfig,
    /// `[defaults]`, resolved: what a runtime job inherits too.
    pub defaults: Settings,
    /// `[handlers.NAME]`: the named handlers of this file, by name.
    pub handlers: BTreeMap<Arc<str>, Handler>,
    /// `[calendars.NAME]`: named sets of dates jobs exclude, by name (what a runtime job's
    /// `calendars` names too).
    pub calendars: BTreeMap<Arc<str>, Calendar>,
    /// `[pools.NAME] size = N`: each pool's size, by name (what a job's `pool` names,
    /// a runtime job's too).
    pub pools: BTreeMap<Arc<str>, u32>,
    /// `[[alert]]`: where the leader sends alerts (`docs/alerts.md`).
    pub alerts: Vec<AlertSink>,
    /// Every job, in file order, names unique (then the runtime jobs merged in, see
    /// [`Config::with_runtime`]).
    pub jobs: Vec<Job>,
    /// Runtime jobs deleted from the job store while this process ran, in the last
    /// [`FORGET_DELETED`](crate::reload::FORGET_DELETED): a consumer's view of its jobs
    /// keeps none of them, and their queued occurrences end `cancelled` ("job deleted")
    /// instead of running. Empty in a file's config.
    pub deleted: BTreeSet<JobName>,
    /// When each runtime job's current revision was written (a file job has none): a new
    /// or changed runtime job's occurrences start there, also when the leader learns of it
    /// a poll later or only after a failover (`cronq_producer`'s term and planner).
    pub runtime_since: BTreeMap<JobName, chrono::DateTime<chrono::Utc>>,
    /// Legal but risky combinations, to log at startup and show in `cronq check`.
    pub warnings: Vec<Problem>,
    /// Where each job is in `jobs`, by name ([`Config::job`]).
    by_name: by_name::ByName,
}

/// `[leader]`: lease > renew_deadline > retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderConfig {
    /// How long an acquired lease lives without renewal.
    pub lease: Duration,
    /// A leader that has not renewed within this stops publishing.
    pub renew_deadline: Duration,
    /// How often the leader renews and a standby tries to acquire.
    pub retry: Duration,
}

/// `[runtime]` (`docs/runtime-jobs.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// Whether jobs created at runtime (`cronq job apply`) are scheduled and run; `false`
    /// keeps every job in the file.
    pub jobs: bool,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self { jobs: true }
    }
}

/// `[metrics]` (`docs/config.md`): how many distinct jobs keep a `job` label of their own on
/// `/metrics` before the rest are counted under `job="other"`
/// ([`crate::job_labels::JobLabels`] applies it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricsConfig {
    /// The first this many distinct jobs seen keep their own label; `None` is unlimited
    /// (`"unlimited"`), `Some(0)` puts every job under `other`.
    pub job_label_limit: Option<usize>,
}

impl MetricsConfig {
    /// The default `job_label_limit`: every job's own series in a deployment of up to this
    /// many jobs, and a `/metrics` of bounded size past it.
    pub const DEFAULT_JOB_LABEL_LIMIT: usize = 1000;
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            job_label_limit: Some(Self::DEFAULT_JOB_LABEL_LIMIT),
        }
    }
}

/// One job with every default applied.
///
/// A compact record: what a job shares with others is behind an `Arc` (the parsed
/// schedule, the [`Settings`], the handler), so a million jobs over a few distinct settings
/// hold a few copies of them. The settings read as the job's own fields (`job.timeout`,
/// `job.queue`) through [`Deref`](std::ops::Deref).
#[derive(Debug, Clone)]
pub struct Job {
    /// Unique name.
    pub name: JobName,
    /// When it fires, in its zone.
    pub schedule: Schedule,
    /// Its resolved `[defaults]` fields, shared with every job that resolves the same.
    pub settings: Arc<Settings>,
    /// Delivered to the handler as JSON.
    pub payload: serde_json::Value,
    /// How it runs: its inline handler, or the `[handlers.NAME]` it names; `None` when an
    /// embedding program registers the handler (by job name or by handler name).
    pub handler: Option<Handler>,
    /// `handler = "NAME"`: the named handler it runs, resolved where it runs.
    pub handler_name: Option<Arc<str>>,
}

impl std::ops::Deref for Job {
    type Target = Settings;

    fn deref(&self) -> &Settings {
        &self.settings
    }
}

/// The fields `[defaults]` sets and a job may override, resolved: built-in defaults, then
/// `[defaults]`, then the job's own values.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Settings {
    /// The job's IANA zone.
    pub timezone: Tz,
    /// Per-attempt time limit.
    pub timeout: Duration,
    /// What to do when an earlier occurrence still runs.
    pub overlap: Overlap,
    /// What a new leader publishes of the occurrences it missed.
    pub catchup: Catchup,
    /// How far back a new leader looks.
    pub catchup_window: Duration,
    /// Start deadline after the scheduled time, if any.
    pub deadline: Option<Duration>,
    /// Total tries before dead-lettering (>= 1).
    pub max_attempts: u32,
    /// First retry delay.
    pub backoff: Duration,
    /// Retry delay cap.
    pub backoff_max: Duration,
    /// Publish delay in `[0, jitter)`, derived from the key.
    pub jitter: Duration,
    /// The logical queue its occurrences go to.
    pub queue: QueueName,
    /// How long run and idempotency records are kept.
    pub retention: Duration,
    /// `sla`: the service levels the leader alerts on (`docs/alerts.md`).
    pub sla: Sla,
    /// `max_concurrent`: how many occurrences may run at once, fleet-wide, when `overlap`
    /// is not `allow` (`None`: one); `overlap` says what the next one does.
    pub max_concurrent: Option<u32>,
    /// `pool = "NAME"`: the `[pools.NAME]` whose slots its runs take (a job's own field),
    /// with its size as resolved with the job, so a job kept past a reload that dropped the
    /// section still runs within it.
    pub pool: Option<Pool>,
}

/// A job's pool: `pool = "NAME"` and the size of `[pools.NAME]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pool {
    /// The pool's name.
    pub name: Arc<str>,
    /// How many runs of its jobs may run at once, fleet-wide (>= 1).
    pub size: u32,
}

/// What an occurrence does while an earlier one of the same job still runs (the rules in
/// full: the "Overlap" section of `docs/consumer.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Overlap {
    /// Run concurrently.
    Allow,
    /// Record `skipped` while an earlier one runs; behind a later one (a retry of an
    /// overtaken occurrence), wait as under `Queue`.
    Skip,
    /// Wait for the earlier one to end.
    Queue,
    /// Cancel the earlier one (`cancelled`) and run.
    Replace,
}

/// What a new leader publishes of the occurrences missed since the last published one
/// (within `catchup_window`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Catchup {
    /// Publish nothing that was missed.
    None,
    /// Publish only the most recent missed occurrence.
    Latest,
    /// Publish every missed occurrence inside the window.
    All,
}

/// How a job runs. Shared, not copied, by every attempt that runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handler {
    /// argv, executed without a shell.
    Command(Arc<CommandHandler>),
    /// An HTTP request with the message JSON as body.
    Http(Arc<HttpHandler>),
}

/// `command = [...]` and how it is started.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct CommandHandler {
    /// The program and its arguments (never empty).
    pub argv: Vec<String>,
    /// `user`: the user (name or uid) it runs as; only when cronq runs as root.
    pub user: Option<String>,
    /// `group`: its group (name or gid); default the user's own group.
    pub group: Option<String>,
    /// `env`: variables set for it (after `clear_env`; the `CRONQ_*` ones win).
    pub env: Vec<(String, String)>,
    /// `clear_env`: start from an empty environment instead of the consumer's.
    pub clear_env: bool,
    /// `cwd`: its working directory (absolute); default the consumer's.
    pub cwd: Option<std::path::PathBuf>,
}

impl CommandHandler {
    /// A command with `argv` and nothing else set.
    pub fn argv(argv: Vec<String>) -> Self {
        Self {
            argv,
            ..Self::default()
        }
    }
}

/// `http = { url, method, headers }`. The URL and the header values are [`Secret`]s: they
/// may come from the environment or a file, and never show in logs or errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpHandler {
    /// Target URL (http or https).
    pub url: Secret,
    /// HTTP method, upper case; default `POST`.
    pub method: String,
    /// Extra request headers.
    pub headers: Vec<(String, Secret)>,
}

impl Config {
    /// The job called `name`: a lookup by its hash once the config has more than a few
    /// jobs (the index is built at the first lookup, once per config).
    pub fn job(&self, name: &str) -> Option<&Job> {
        self.by_name.find(&self.jobs, name)
    }

    /// Builds what [`Config::job`] looks names up in now, not at its first lookup: for a
    /// config about to be looked up often, made where a build of tens of milliseconds
    /// (a million jobs) holds no task up.
    pub fn index_names(&self) {
        self.by_name.build(&self.jobs);
    }

    /// The names of the jobs of `self` that `new` no longer has: retired by a reload.
    pub fn retired(&self, new: &Config) -> Vec<JobName> {
        self.jobs
            .iter()
            .zip(self.positions_in(new))
            .filter(|(_, at)| at.is_none())
            .map(|(j, _)| j.name.clone())
            .collect()
    }

    /// Where each job of `self` is in `new` (its index in `new.jobs`), matched by name;
    /// `None` for a job `new` does not have.
    ///
    /// A reload mostly keeps the order of the jobs: a runtime job added, changed or
    /// deleted, a few tables of the file edited. So the names are compared in place from
    /// both ends first, and only the jobs between the first and the last difference are
    /// looked up by name: a million jobs with one added cost two passes of comparisons,
    /// not a sort or a table of a million names.
    pub fn positions_in(&self, new: &Config) -> Vec<Option<u32>> {
        let (old, new) = (self.jobs.as_slice(), new.jobs.as_slice());
        let same = |(a, b): &(&Job, &Job)| a.name == b.name;
        let head = old.iter().zip(new).take_while(same).count();
        let tail = old[head..]
            .iter()
            .rev()
            .zip(new[head..].iter().rev())
            .take_while(same)
            .count();
        let (old_end, new_end) = (old.len() - tail, new.len() - tail);
        let index = |i: usize| Some(u32::try_from(i).expect("a config has fewer than 2^32 jobs"));
        let middle: foldhash::HashMap<&str, usize> = new[head..new_end]
            .iter()
            .enumerate()
            .map(|(k, j)| (j.name.as_str(), head + k))
            .collect();
        let mut at = Vec::with_capacity(old.len());
        at.extend((0..head).map(index));
        at.extend(
            old[head..old_end]
                .iter()
                .map(|j| middle.get(j.name.as_str()).and_then(|i| index(*i))),
        );
        at.extend((new_end..new.len()).map(index));
        at
    }

    /// Every logical queue some job publishes to.
    pub fn queues(&self) -> BTreeSet<QueueName> {
        // Each queue cloned once, not once per job (a million jobs share a few queues).
        let queues: BTreeSet<&QueueName> = self.jobs.iter().map(|j| &j.queue).collect();
        queues.into_iter().cloned().collect()
    }

    /// The longest job `retention` ([`DEFAULT_RETENTION`] without jobs): how long the run
    /// history keeps entries.
    pub fn longest_retention(&self) -> Duration {
        self.jobs
            .iter()
            .map(|j| j.retention)
            .max()
            .unwrap_or(DEFAULT_RETENTION)
    }
}

/// The default `retention` of run and idempotency records.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
