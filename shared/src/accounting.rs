//! Accounting: every occurrence a job's schedules expected over a range, and what the run
//! log says became of each (`cronq verify`, and the leader's continuous check in
//! `cronq_producer::accounting_check`). Both use this module, so they agree.
//!
//! Owns: the expected occurrences of a range for a job's definitions as they were then
//! ([`expected`]: a file job as the config defines it now; a runtime job per revision of
//! the job store, from its time; a job with parents, `after`, at its parents' common
//! expected times, judged after its slowest parent could have ended: `chained`), less the stretches it was paused ([`paused`]: from the
//! audit log's `pause` and `resume` entries, and the control store's pause in force), and
//! the classification of each from its runs and dead letters ([`account`]).
//!
//! The gaps ([`Gap`]): expected but never published (no run at all, past its grace);
//! published but never ending in a terminal state; succeeded twice; dead-lettered
//! without a `failed` record. An occurrence still within its time to end
//! ([`Expected::judged_from`] plus the grace) is *pending*, not a gap.
//!
//! A file job's definitions over time come from the recorded loads of the config file
//! ([`Sources::file_history`], [`history`]): each version from when it was first loaded.
//!
//! An occurrence due while no producer led (outside every recorded term of the lease
//! store, [`Sources::terms`]) is judged by the job's catch-up policy as the next term
//! applied it ([`leaderless`]): what that policy did not publish is not expected
//! ([`Account::no_leader`]); a job with parents follows its parents'.
//!
//! What cannot be known, and is not modelled: a pause older than the audit log's oldest
//! entry (a `resume` without its `pause` counts as paused from the range's start); a file
//! job's schedule before the oldest recorded load (or before the last reload, where no
//! history is given: the current one is used for the whole range); where no term is
//! recorded (a store older than the terms, or kept past their retention), what a catch-up
//! policy chose not to publish (reported as never published; [`Report::terms`] is 0); with
//! `--job`, the runtime parents of a runtime job with parents (not read: it expects
//! nothing).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;

use crate::audit::{self, AuditLog};
use crate::config::{Catchup, Config, Job};
use crate::control::Pause;
use crate::jobs::{JobStore, Revision};
use crate::key::OccurrenceKey;
use crate::lease::TermRecord;
use crate::names::JobName;
use crate::runlog::{Outcome, Run, RunLog};
use crate::schedule::{Alike, Schedule};
use crate::store::StoreError;

pub mod history;
pub use history::{FileVersion, file_definitions};
pub mod leaderless;

/// How long a pause, a resume, or a runtime job's change takes to reach the leader (its
/// poll and its `[leader] retry`): an occurrence within this of one is *optional*, counted
/// when it ran and no gap when it did not.
pub const SETTLE: Duration = Duration::from_secs(3);

/// At most this many occurrences of one job are expected in one range; a longer range is
/// cut at its end (`cronq verify` says so).
pub const MAX_PER_JOB: usize = 100_000;

/// The default grace (`cronq verify --grace`): how long after an occurrence could have
/// ended it is judged.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(60);

/// One definition of a job, in force over `(since, until]` (unbounded where `None`).
///
/// A file job as the config defines it now is borrowed from the config, not copied: the
/// leader's check reads every job of a config of a million jobs each minute.
#[derive(Debug, Clone)]
pub struct Definition<'a> {
    /// When it took effect: a runtime revision's time; `None` for a file job.
    pub since: Option<DateTime<Utc>>,
    /// When the next revision (or the delete) replaced it.
    pub until: Option<DateTime<Utc>>,
    /// The job as it was defined.
    pub job: Cow<'a, Job>,
}

impl<'a> Definition<'a> {
    /// `job` as the config defines it now, in force over the whole range.
    pub fn now(job: &'a Job) -> Self {
        Self {
            since: None,
            until: None,
            job: Cow::Borrowed(job),
        }
    }
}

/// The definitions of a runtime job from its revisions (oldest first), resolved against
/// `config`. A revision that does not resolve (its handler's defaults changed since) is
/// left out: nothing was expected of it.
pub fn runtime_definitions(config: &Config, history: &[Revision]) -> Vec<Definition<'static>> {
    history
        .iter()
        .enumerate()
        .filter_map(|(i, rev)| {
            let job = config.runtime_job(rev.spec.as_deref()?).ok()?;
            Some(Definition {
                since: Some(rev.at),
                until: history.get(i + 1).map(|next| next.at),
                job: Cow::Owned(job),
            })
        })
        .collect()
}

/// A stretch a job was paused: from `from` (`None`: before the audit log knows) to `to`
/// (`None`: still paused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Stretch {
    /// When the pause began, if known.
    pub from: Option<DateTime<Utc>>,
    /// When it ended, if it did.
    pub to: Option<DateTime<Utc>>,
}

impl Stretch {
    /// Whether `at` falls in the stretch.
    fn contains(&self, at: DateTime<Utc>) -> bool {
        self.from.is_none_or(|f| f <= at) && self.to.is_none_or(|t| at < t)
    }

    /// Whether `at` is within `settle` of either end.
    fn near_edge(&self, at: DateTime<Utc>, settle: TimeDelta) -> bool {
        [self.from, self.to]
            .into_iter()
            .flatten()
            .any(|edge| (at - edge).abs() <= settle)
    }
}

/// The stretches a job was paused, oldest first: its audit entries (any order; only the
/// done `pause` and `resume` of a paused job count), and `current`, the control store's
/// pause in force, which holds until now whatever the log says.
pub fn paused(entries: &[audit::Entry], current: Option<&Pause>) -> Vec<Stretch> {
    let mut acts: Vec<&audit::Entry> = entries
        .iter()
        .filter(|e| e.outcome == audit::Outcome::Done)
        .filter(|e| e.action == "pause" || e.action == "resume")
        .filter(|e| e.detail.as_deref() != Some("was not paused"))
        .collect();
    acts.sort_by_key(|e| e.at);
    let mut out = Vec::new();
    let mut open: Option<Option<DateTime<Utc>>> = None;
    for e in acts {
        match (e.action.as_str(), open) {
            ("pause", None) => open = Some(Some(e.at)),
            ("resume", Some(from)) => {
                out.push(Stretch {
                    from,
                    to: Some(e.at),
                });
                open = None;
            }
            // A resume without its pause: the pause is older than the log.
            ("resume", None) if out.is_empty() => out.push(Stretch {
                from: None,
                to: Some(e.at),
            }),
            _ => {}
        }
    }
    match (open, current) {
        (Some(from), Some(p)) => out.push(Stretch {
            from: from.map(|f| f.min(p.since)),
            to: None,
        }),
        (None, Some(p)) => out.push(Stretch {
            from: Some(p.since),
            to: None,
        }),
        // The log says paused, the store says running: a resume the log lost.
        (Some(from), None) => out.push(Stretch { from, to: None }),
        (None, None) => {}
    }
    out
}

/// One occurrence a schedule expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// Its scheduled instant.
    pub at: DateTime<Utc>,
    /// Within [`SETTLE`] of a change or a pause's edge: counted when it ran, no gap when
    /// it did not.
    pub optional: bool,
    /// From when its first attempt must have ended: its instant plus the job's jitter and
    /// timeout (the grace comes on top).
    pub judged_from: DateTime<Utc>,
    /// How long a retry may take to start after an attempt's end, and run: the job's
    /// `backoff_max` plus its timeout.
    pub retry_within: Duration,
    /// Due while no producer led, and left unpublished by this catch-up policy of the
    /// term that took over next ([`leaderless`]); then also optional.
    pub no_leader: Option<Catchup>,
}

/// What [`expected`] found of one job over a range.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expectation {
    /// The occurrences expected, by instant.
    pub occurrences: Vec<Expected>,
    /// How many fell in a paused stretch (not expected).
    pub paused: usize,
    /// Whether the range was cut at [`MAX_PER_JOB`].
    pub cut: bool,
}

/// The occurrences `definitions` expected in `[from, to]`, less those in a `paused`
/// stretch. Each definition expects the instants of its schedule (bounded by its
/// `start_at`/`end_at`) strictly after its `since` and up to its `until`.
pub fn expected(
    definitions: &[Definition<'_>],
    paused: &[Stretch],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Expectation {
    let settle = delta(SETTLE);
    let mut found: BTreeMap<DateTime<Utc>, Expected> = BTreeMap::new();
    let mut out = Expectation::default();
    for def in definitions {
        let job = &def.job;
        // The first instant at or after `from`, strictly after `since`.
        let after = match def.since {
            Some(since) if since >= from => since,
            _ => from - TimeDelta::nanoseconds(1),
        };
        let end = def.until.map_or(to, |u| u.min(to));
        let judged = delta(job.jitter) + delta(job.timeout);
        for at in job.schedule.iter_after(after) {
            if at > end {
                break;
            }
            if found.len() >= MAX_PER_JOB {
                out.cut = true;
                break;
            }
            if paused.iter().any(|s| s.contains(at)) {
                out.paused += 1;
                continue;
            }
            let optional = def.since.is_some_and(|s| at - s <= settle)
                || paused.iter().any(|s| s.near_edge(at, settle));
            found.insert(
                at,
                Expected {
                    at,
                    optional,
                    judged_from: plus(at, judged),
                    retry_within: job.backoff_max + job.timeout,
                    no_leader: None,
                },
            );
        }
    }
    out.occurrences = found.into_values().collect();
    out
}

/// A gap: an occurrence not accounted for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Gap {
    /// Expected, and no run of it at all past its grace.
    NeverPublished,
    /// Published (it has runs) but no terminal state past its grace: the last run's
    /// outcome.
    Unfinished {
        /// The newest run's outcome (`retrying`, `interrupted`, `lost`).
        last: Outcome,
    },
    /// More than one successful run.
    SucceededTwice {
        /// How many.
        times: usize,
    },
    /// In the dead-letter queue without a `failed` record.
    DeadLetterWithoutFailed {
        /// The letter's reason.
        reason: String,
    },
}

impl Gap {
    /// The kind as `--json` names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NeverPublished => "never_published",
            Self::Unfinished { .. } => "unfinished",
            Self::SucceededTwice { .. } => "succeeded_twice",
            Self::DeadLetterWithoutFailed { .. } => "dead_letter_without_failed",
        }
    }
}

impl std::fmt::Display for Gap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NeverPublished => f.write_str("expected but never published (no run recorded)"),
            Self::Unfinished { last } => write!(
                f,
                "published but without a terminal state (last attempt {last})"
            ),
            Self::SucceededTwice { times } => write!(f, "succeeded {times} times"),
            Self::DeadLetterWithoutFailed { reason } => {
                write!(f, "dead-lettered ({reason}) without a failed record")
            }
        }
    }
}

/// What became of one job's occurrences over a range.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Account {
    /// The job.
    pub job: String,
    /// Occurrences expected (the optional ones that ran included).
    pub expected: usize,
    /// By terminal outcome ([`Outcome::index`]).
    pub outcomes: [usize; Outcome::ALL.len()],
    /// Still within their time to end.
    pub pending: usize,
    /// Not expected: the job was paused.
    pub paused: usize,
    /// Not expected: due while no producer led, and not published by the catch-up policy
    /// of the term that took over next (without a run).
    pub no_leader: usize,
    /// That policy (the newest, when several outages saw several).
    pub catchup: Option<Catchup>,
    /// Whether the range was cut at [`MAX_PER_JOB`].
    pub cut: bool,
    /// The gaps, by key.
    pub gaps: Vec<(OccurrenceKey, Gap)>,
}

impl Account {
    /// How many expected occurrences ended `outcome`.
    pub fn count(&self, outcome: Outcome) -> usize {
        self.outcomes[outcome.index()]
    }
}

/// The runs of a run log listing, by key.
pub fn by_key(runs: impl IntoIterator<Item = Run>) -> HashMap<String, Vec<Run>> {
    let mut out: HashMap<String, Vec<Run>> = HashMap::new();
    for run in runs {
        out.entry(run.key.as_str().to_owned())
            .or_default()
            .push(run);
    }
    out
}

/// The terminal outcomes, in the order one is chosen when a key has several.
const TERMINAL: [Outcome; 5] = [
    Outcome::Succeeded,
    Outcome::Failed,
    Outcome::Missed,
    Outcome::Skipped,
    Outcome::Cancelled,
];

/// Classifies `expectation` of `job` by `runs` (by key) and `letters` (the dead letters'
/// reasons, by key), at `now` with `grace`. A dead letter of the job whose key is in
/// `[from, to]` (a scheduled key) but not expected is judged too.
pub fn account(
    job: &JobName,
    expectation: &Expectation,
    runs: &HashMap<String, Vec<Run>>,
    letters: &HashMap<String, String>,
    range: (DateTime<Utc>, DateTime<Utc>),
    grace: Duration,
    now: DateTime<Utc>,
) -> Account {
    let grace = delta(grace);
    let mut out = Account {
        job: job.as_str().to_owned(),
        paused: expectation.paused,
        cut: expectation.cut,
        ..Account::default()
    };
    let mut seen = HashSet::new();
    for e in &expectation.occurrences {
        let key = OccurrenceKey::scheduled(job.clone(), e.at);
        seen.insert(key.as_str().to_owned());
        let of = runs.get(key.as_str()).map_or(&[][..], Vec::as_slice);
        let letter = letters.get(key.as_str());
        if of.is_empty() && letter.is_none() {
            if let Some(policy) = e.no_leader {
                out.no_leader += 1;
                out.catchup = Some(policy);
            }
            if e.optional {
                continue;
            }
            out.expected += 1;
            if now < plus(e.judged_from, grace) {
                out.pending += 1;
            } else {
                out.gaps.push((key, Gap::NeverPublished));
            }
            continue;
        }
        out.expected += 1;
        if let Some(gap) = judge(of, letter, e, grace, now, &mut out) {
            out.gaps.push((key, gap));
        }
    }
    let (from, to) = range;
    let mut extra: Vec<(&String, &String)> =
        letters.iter().filter(|(k, _)| !seen.contains(*k)).collect();
    extra.sort();
    for (key, reason) in extra {
        let Ok(parsed) = key.parse::<OccurrenceKey>() else {
            continue;
        };
        let in_range = parsed
            .scheduled_at()
            .is_some_and(|at| from <= at && at <= to);
        let failed = runs
            .get(key)
            .is_some_and(|rs| rs.iter().any(|r| r.outcome == Outcome::Failed));
        if parsed.job() == job && in_range && !failed {
            out.gaps.push((
                parsed,
                Gap::DeadLetterWithoutFailed {
                    reason: reason.clone(),
                },
            ));
        }
    }
    out
}

/// The gap of one expected occurrence with runs `of` (or a dead letter), if any; counts
/// its terminal outcome (or pending) in `out`.
fn judge(
    of: &[Run],
    letter: Option<&String>,
    e: &Expected,
    grace: TimeDelta,
    now: DateTime<Utc>,
    out: &mut Account,
) -> Option<Gap> {
    let successes = of
        .iter()
        .filter(|r| r.outcome == Outcome::Succeeded)
        .count();
    let terminal = TERMINAL
        .into_iter()
        .find(|t| of.iter().any(|r| r.outcome == *t));
    if let Some(t) = terminal {
        out.outcomes[t.index()] += 1;
    }
    if successes > 1 {
        return Some(Gap::SucceededTwice { times: successes });
    }
    let failed = of.iter().any(|r| r.outcome == Outcome::Failed);
    if let Some(reason) = letter
        && !failed
    {
        return Some(Gap::DeadLetterWithoutFailed {
            reason: reason.clone(),
        });
    }
    if terminal.is_some() {
        return None;
    }
    let last = of.iter().max_by_key(|r| (r.started_at, r.attempt))?;
    let ended = last.started_at + delta(last.duration);
    if now < plus(plus(ended, delta(e.retry_within)), grace) {
        out.pending += 1;
        return None;
    }
    Some(Gap::Unfinished { last: last.outcome })
}

/// Where [`reconcile`] reads.
#[derive(Clone, Copy)]
pub struct Sources<'a> {
    /// The run history.
    pub runlog: &'a dyn RunLog,
    /// The operators' actions (past pauses, runtime job changes).
    pub audit: &'a dyn AuditLog,
    /// Runtime jobs with their revisions.
    pub jobs: &'a dyn JobStore,
    /// The versions of the config file, oldest first (`crate::recorded`); empty: the file
    /// jobs of the config given are in force over the whole range.
    pub file_history: &'a [FileVersion],
    /// The leadership terms recorded (`crate::lease::Lease::terms`); empty: not known,
    /// what no leader published is expected as any occurrence.
    pub terms: &'a [TermRecord],
}

/// What [`reconcile`] answers.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// One account per job, by name.
    pub accounts: Vec<Account>,
    /// The oldest run read, when the listing reached its cap: the occurrences before it
    /// were not accounted for (their runs were not read).
    pub runs_from: Option<DateTime<Utc>>,
    /// How many leadership terms were recorded; 0: what a catch-up policy left unpublished
    /// while no producer led could not be told from a gap.
    pub terms: usize,
}

impl Report {
    /// How many gaps in all.
    pub fn gaps(&self) -> usize {
        self.accounts.iter().map(|a| a.gaps.len()).sum()
    }
}

/// What [`reconcile`] checks.
#[derive(Debug, Clone)]
pub struct Window {
    /// The range's start.
    pub from: DateTime<Utc>,
    /// Its end.
    pub to: DateTime<Utc>,
    /// Added to each occurrence's time to end before it is judged.
    pub grace: Duration,
    /// The time of the check.
    pub now: DateTime<Utc>,
    /// Only this job, when given.
    pub job: Option<JobName>,
    /// At most this many runs read (newest first).
    pub max_runs: usize,
    /// Only the accounts with a gap are reported (the leader's check, which needs nothing
    /// else: an account for each of a million jobs every minute would be a million
    /// allocations for nothing); otherwise one per job.
    pub only_gaps: bool,
}

/// Accounts for every job of `config` (its file jobs, as the file defines them now) and
/// every runtime job the job store has a history of (present, or deleted inside the
/// range) over `window`, with `paused_now` the control store's pauses and `letters` the
/// dead letters' reasons by key.
///
/// # Errors
/// When a store cannot be read.
pub async fn reconcile(
    sources: Sources<'_>,
    config: &Config,
    paused_now: &BTreeMap<JobName, Pause>,
    letters: &HashMap<String, String>,
    window: &Window,
) -> Result<Report, StoreError> {
    let runs = sources
        .runlog
        .list(window.job.as_ref(), window.max_runs)
        .await?;
    let runs_from = (runs.len() >= window.max_runs)
        .then(|| runs.iter().map(|r| r.started_at).min())
        .flatten();
    let runs = by_key(runs);
    let scope = Scope {
        runs: &runs,
        runs_from,
        dirty: None,
    };
    Ok(
        reconcile_in(sources, config, paused_now, letters, window, &scope)
            .await?
            .report,
    )
}

/// What [`reconcile_in`] accounts for, from what.
pub(crate) struct Scope<'r> {
    /// The runs read, by key.
    pub runs: &'r HashMap<String, Vec<Run>>,
    /// The oldest run read, when the listing reached its cap.
    pub runs_from: Option<DateTime<Utc>>,
    /// The file jobs in force now to account for (positions in the config's jobs, sorted);
    /// `None`: all. The jobs with versions, the jobs with parents, and the file jobs with
    /// an audit entry in the range or a pause in force are accounted for in any case.
    pub dirty: Option<&'r [usize]>,
}

/// What [`reconcile_in`] found beside its report.
pub(crate) struct Found {
    /// The report of the jobs accounted for.
    pub report: Report,
    /// The file jobs accounted for (positions) with a gap or a pending occurrence, or
    /// accounted for in any case for an audit entry or a pause: their account may change
    /// with no new run and no new occurrence (`incremental`).
    pub unsettled: Vec<usize>,
}

/// [`reconcile`] of the jobs of `scope`, from its runs.
pub(crate) async fn reconcile_in(
    sources: Sources<'_>,
    config: &Config,
    paused_now: &BTreeMap<JobName, Pause>,
    letters: &HashMap<String, String>,
    window: &Window,
    scope: &Scope<'_>,
) -> Result<Found, StoreError> {
    let runs = scope.runs;
    let runs_from = scope.runs_from;
    let wanted = |name: &JobName| window.job.as_ref().is_none_or(|j| j == name);
    // The jobs with versions: runtime jobs, and file jobs when the file's history is given.
    // The file jobs as the config defines them now (no history given) are not listed here
    // but borrowed from the config as they are accounted for.
    let mut versioned: BTreeMap<JobName, Vec<Definition<'_>>> = BTreeMap::new();
    let current = sources.file_history.is_empty();
    if !current {
        for (name, defs) in file_definitions(sources.file_history) {
            if config.runtime_since.contains_key(&name) {
                continue; // a runtime job now: its history says more
            }
            if defs
                .iter()
                .any(|d| d.until.is_none_or(|u| u >= window.from))
            {
                versioned.insert(name, defs);
            }
        }
    }
    // The audit log from the range's start: pauses, and the runtime jobs deleted since. A
    // pause made before and still in force is the control store's; one made before and
    // ended inside the range shows as a resume without its pause: paused from the start.
    let entries = sources
        .audit
        .list(&audit::Filter {
            job: window.job.as_ref().map(|j| j.as_str().to_owned()),
            since: Some(window.from),
            limit: audit::MAX_ENTRIES,
        })
        .await?;
    if config.runtime.jobs {
        let current: HashMap<String, Revision> = sources
            .jobs
            .list()
            .await?
            .into_iter()
            .map(|r| (r.name.clone(), r))
            .collect();
        let mut names: HashSet<String> = current.keys().cloned().collect();
        names.extend(
            entries
                .iter()
                .filter(|e| e.action.starts_with("job."))
                .filter_map(|e| e.job.clone()),
        );
        // Made only when there is a runtime job: a set of a million file jobs' names would
        // be the largest thing the leader's check makes.
        let file: HashSet<&str> = if names.is_empty() {
            HashSet::new()
        } else {
            config.jobs.iter().map(|j| j.name.as_str()).collect()
        };
        for name in names {
            if file.contains(name.as_str()) {
                continue;
            }
            let Ok(name) = JobName::new(&name) else {
                continue;
            };
            if !wanted(&name) {
                continue;
            }
            // A job unchanged since before the range is its current revision throughout:
            // no history to read (one read per job would not scale to many jobs).
            let defs = match current.get(name.as_str()) {
                Some(rev) if rev.at < window.from => {
                    runtime_definitions(config, std::slice::from_ref(rev))
                }
                _ => runtime_definitions(config, &sources.jobs.history(&name).await?),
            };
            if defs
                .iter()
                .any(|d| d.until.is_none_or(|u| u >= window.from))
            {
                versioned.insert(name, defs);
            }
        }
    }
    // The file jobs in force now, each its own definition over the whole range.
    let now_jobs = || {
        config
            .jobs
            .iter()
            .filter(move |_| current)
            .filter(|j| !config.runtime_since.contains_key(&j.name))
    };
    let mut by_job: HashMap<&str, Vec<audit::Entry>> = HashMap::new();
    for e in &entries {
        if let Some(job) = &e.job {
            by_job.entry(job.as_str()).or_default().push(e.clone());
        }
    }
    // Each job is judged by the dead letters of its own keys only.
    let mut letters_of: HashMap<String, HashMap<String, String>> = HashMap::new();
    for (key, reason) in letters {
        if let Ok(parsed) = key.parse::<OccurrenceKey>() {
            letters_of
                .entry(parsed.job().as_str().to_owned())
                .or_default()
                .insert(key.clone(), reason.clone());
        }
    }
    // The jobs some job runs after: only their expectations are kept for their children.
    let parents: HashSet<&JobName> = now_jobs()
        .chain(versioned.values().filter_map(|d| d.last().map(|d| &*d.job)))
        .flat_map(Job::parents)
        .collect();
    let parent_jobs: HashMap<&JobName, &Job> = if parents.is_empty() {
        HashMap::new()
    } else {
        now_jobs()
            .filter(|j| parents.contains(&j.name))
            .map(|j| (&j.name, j))
            .collect()
    };
    // Before the oldest run read nothing can be judged.
    let from = runs_from.map_or(window.from, |oldest| oldest.max(window.from));
    let expect = Expecting {
        versioned: &versioned,
        now: &parent_jobs,
        parents: &parents,
        by_job: &by_job,
        paused_now,
        range: (from, window.to),
        terms: sources.terms,
        quiet: std::cell::RefCell::new(Alike::new()),
    };
    let no_letters = HashMap::new();
    let mut memo = HashMap::new();
    let mut accounts = Vec::new();
    let mut account_of = |name: &JobName, defs: &[Definition<'_>]| -> bool {
        let expectation = expect.of_defs(name, defs, &mut memo, 0);
        let letters = letters_of.get(name.as_str()).unwrap_or(&no_letters);
        if window.only_gaps && expectation.occurrences.is_empty() && letters.is_empty() {
            return false;
        }
        let a = account(
            name,
            &expectation,
            runs,
            letters,
            (window.from, window.to),
            window.grace,
            window.now,
        );
        let unsettled = a.pending > 0 || !a.gaps.is_empty();
        if !window.only_gaps || !a.gaps.is_empty() {
            accounts.push(a);
        }
        unsettled
    };
    for (name, defs) in &versioned {
        if wanted(name) {
            account_of(name, defs);
        }
    }
    // The file jobs of the scope (all, or the sorted positions given), and those whose
    // account may change with the time alone: with parents, an audit entry, a pause.
    let mut dirty = scope.dirty.map(|d| d.iter().copied().peekable());
    let mut unsettled = Vec::new();
    for (i, job) in config.jobs.iter().enumerate() {
        if !current || config.runtime_since.contains_key(&job.name) {
            continue;
        }
        let listed = match &mut dirty {
            None => true,
            Some(d) => {
                while d.next_if(|&at| at < i).is_some() {}
                d.next_if_eq(&i).is_some()
            }
        };
        let special = (!by_job.is_empty() && by_job.contains_key(job.name.as_str()))
            || (!paused_now.is_empty() && paused_now.contains_key(&job.name));
        if !(listed || special || job.is_after()) || !wanted(&job.name) {
            continue;
        }
        if account_of(&job.name, std::slice::from_ref(&Definition::now(job))) || special {
            unsettled.push(i);
        }
    }
    accounts.sort_by(|a, b| a.job.cmp(&b.job));
    Ok(Found {
        report: Report {
            accounts,
            runs_from,
            terms: sources.terms.len(),
        },
        unsettled,
    })
}

/// What [`reconcile`] expects of each job, jobs with parents from their parents'.
struct Expecting<'a> {
    /// The definitions of the jobs with versions, by name.
    versioned: &'a BTreeMap<JobName, Vec<Definition<'a>>>,
    /// The file jobs in force now that some job runs after, by name.
    now: &'a HashMap<&'a JobName, &'a Job>,
    /// The names of the jobs some job runs after.
    parents: &'a HashSet<&'a JobName>,
    by_job: &'a HashMap<&'a str, Vec<audit::Entry>>,
    paused_now: &'a BTreeMap<JobName, Pause>,
    range: (DateTime<Utc>, DateTime<Utc>),
    terms: &'a [TermRecord],
    /// Whether a schedule shared by several jobs fires in the range, worked out once.
    quiet: std::cell::RefCell<Alike<Schedule, bool>>,
}

impl Expecting<'_> {
    /// The expectation of `name`, by its definitions wherever they are.
    fn of(
        &self,
        name: &JobName,
        memo: &mut HashMap<JobName, Expectation>,
        depth: usize,
    ) -> Expectation {
        if let Some(defs) = self.versioned.get(name) {
            return self.of_defs(name, defs, memo, depth);
        }
        match self.now.get(name) {
            Some(job) => self.of_defs(
                name,
                std::slice::from_ref(&Definition::now(job)),
                memo,
                depth,
            ),
            None => self.of_defs(name, &[], memo, depth),
        }
    }

    /// The expectation of `name`, defined by `defs`; a parent's is kept in `memo` (it is
    /// asked for by each child).
    fn of_defs(
        &self,
        name: &JobName,
        defs: &[Definition<'_>],
        memo: &mut HashMap<JobName, Expectation>,
        depth: usize,
    ) -> Expectation {
        if let Some(known) = memo.get(name) {
            return known.clone();
        }
        let current = defs.last().map(|d| &*d.job);
        if let ([only], Some(job)) = (defs, current)
            && only.since.is_none()
            && only.until.is_none()
            && !job.is_after()
            && self.is_quiet(&job.schedule)
        {
            // Nothing in the range: most jobs of a large config, most checks.
            return Expectation::default();
        }
        let stretches = paused(
            self.by_job
                .get(name.as_str())
                .map_or(&[][..], Vec::as_slice),
            self.paused_now.get(name),
        );
        let expectation = match current {
            Some(job) if job.is_after() && depth < chained::MAX_DEPTH => {
                let parents: Vec<(Expectation, Option<&Job>)> = job
                    .parents()
                    .iter()
                    .map(|p| {
                        let job = self
                            .versioned
                            .get(p)
                            .and_then(|d| d.last())
                            .map(|d| &*d.job)
                            .or_else(|| self.now.get(p).copied());
                        (self.of(p, memo, depth + 1), job)
                    })
                    .collect();
                let parents: Vec<chained::Parent<'_>> = parents
                    .iter()
                    .map(|(expected, job)| chained::Parent {
                        expected,
                        job: *job,
                    })
                    .collect();
                chained::expected(defs, &parents, &stretches)
            }
            _ => {
                let mut own = expected(defs, &stretches, self.range.0, self.range.1);
                leaderless::apply(&mut own, defs, self.terms);
                own
            }
        };
        if self.parents.contains(name) {
            memo.insert(name.clone(), expectation.clone());
        }
        expectation
    }

    /// Whether `schedule` has no instant in the range; worked out once for a schedule
    /// several jobs share (a config's schedules are shared by the jobs that write them
    /// alike).
    fn is_quiet(&self, schedule: &Schedule) -> bool {
        let (from, to) = self.range;
        self.quiet.borrow_mut().get(
            schedule,
            || schedule.clone(),
            || {
                schedule
                    .next_after(from - TimeDelta::nanoseconds(1))
                    .is_none_or(|at| at > to)
            },
        )
    }
}

fn delta(d: Duration) -> TimeDelta {
    TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX)
}

/// `at + d`, or the last instant there is.
fn plus(at: DateTime<Utc>, d: TimeDelta) -> DateTime<Utc> {
    at.checked_add_signed(d).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

mod chained;
pub mod incremental;
pub use incremental::Incremental;
#[cfg(test)]
mod tests;
