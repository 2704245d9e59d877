//! A job's `after = ["a", "b"]`: it has no schedule of its own and runs once all its
//! parents' occurrences of one scheduled time succeeded (`docs/config.md`, "Jobs that run
//! after other jobs").
//!
//! Two checks. One job's field ([`resolve_after`]): the names are job names, none twice,
//! not the job itself, and no schedule field beside it. The jobs together
//! ([`check_graph`]): every parent is a job of the same config (a runtime job's, the union
//! of the file's jobs and the runtime ones), and no job runs after itself through others.
//!
//! Invariant: a [`Config`] whose jobs passed [`check_graph`] has no cycle and no unknown
//! parent, so following parents always ends (at scheduled jobs).

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::Tz;

use super::error::Problem;
use super::raw::RawJob;
use super::report::Report;
use super::suggest::did_you_mean;
use super::{Config, Job};
use crate::names::JobName;
use crate::schedule::Schedule;

/// The fields that give a job fire times of its own, which `after` excludes.
const OWN_TIMES: &[&str] = &[
    "schedule",
    "schedules",
    "at",
    "exclude",
    "calendars",
    "start_at",
    "end_at",
];

/// The schedule of a job with `after = […]` ([`Schedule::after`], which keeps its
/// parents); `None` without the field, or after reporting why not.
pub(super) fn resolve_after(
    raw: &RawJob,
    name: Option<&JobName>,
    tz: Tz,
    scope: &str,
    out: &mut Report,
) -> Option<Schedule> {
    let texts = raw.own.after.as_deref()?;
    let before = out.problems.len();
    let own = raw_fields_set(raw);
    for field in own {
        out.problem(
            scope,
            "after",
            format!(
                "is set together with {field}: a job that runs after other jobs has no times of its own, its occurrences are its parents' scheduled times; remove {field}, or remove after"
            ),
        );
    }
    if texts.is_empty() {
        out.problem(
            scope,
            "after",
            "is empty: name the jobs it runs after, such as after = [\"extract\"], or give it a schedule instead",
        );
    }
    let mut parents: Vec<JobName> = Vec::with_capacity(texts.len());
    for text in texts {
        match JobName::new(text) {
            Err(e) => out.problem(scope, "after", format!("{text:?}: {e}")),
            Ok(parent) if name == Some(&parent) => out.problem(
                scope,
                "after",
                format!(
                    "names the job itself ({text:?}): a job cannot run after itself; remove it from after"
                ),
            ),
            Ok(parent) if parents.contains(&parent) => out.problem(
                scope,
                "after",
                format!("names {text:?} twice: list each job once"),
            ),
            Ok(parent) => parents.push(parent),
        }
    }
    if out.problems.len() > before {
        return None;
    }
    Some(Schedule::after(&parents, tz))
}

/// Which of [`OWN_TIMES`] the job sets.
fn raw_fields_set(raw: &RawJob) -> Vec<&'static str> {
    let own = &raw.own;
    let set = [
        own.schedule.is_some(),
        own.schedules.is_some(),
        own.at.is_some(),
        own.exclude.is_some(),
        own.calendars.is_some(),
        own.start_at.is_some(),
        own.end_at.is_some(),
    ];
    OWN_TIMES
        .iter()
        .zip(set)
        .filter(|(_, set)| *set)
        .map(|(field, _)| *field)
        .collect()
}

/// A problem of the jobs' `after` fields taken together, and the jobs it involves.
pub(crate) struct Broken {
    /// The problem, at the job it is reported for.
    pub(crate) problem: Problem,
    /// The jobs involved: the one naming an unknown parent, or every job of a cycle.
    pub(crate) jobs: Vec<JobName>,
}

/// The problems of the `after` fields of `jobs` taken together: a parent that is not one
/// of `jobs` (with the closest name), and each cycle (once, at its first job in `jobs`'
/// order). Only problems involving a job `blame` accepts are returned (the others are
/// known good: the file's jobs when runtime jobs are checked).
pub(crate) fn check_graph(jobs: &[Job], blame: impl Fn(&JobName) -> bool) -> Vec<Broken> {
    // Most configs have no `after` at all: no index of a million names for nothing.
    if !jobs.iter().any(Job::is_after) {
        return Vec::new();
    }
    let by_name: HashMap<&str, &Job> = jobs.iter().map(|j| (j.name.as_str(), j)).collect();
    let mut found = Vec::new();
    for job in jobs.iter().filter(|j| blame(&j.name)) {
        for parent in job.parents() {
            if by_name.contains_key(parent.as_str()) {
                continue;
            }
            let hint = match did_you_mean(parent.as_str(), by_name.keys().copied()) {
                Some(s) => format!(" (did you mean \"{s}\"?)"),
                None => String::new(),
            };
            found.push(Broken {
                problem: Problem::new(
                    scope(&job.name),
                    "after",
                    format!(
                        "{:?} is not a job{hint}: name a job of this config, or remove it from after",
                        parent.as_str()
                    ),
                ),
                jobs: vec![job.name.clone()],
            });
        }
    }
    // Cycles: a depth-first walk along parents, each job finished once.
    let position: HashMap<&str, usize> = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| (j.name.as_str(), i))
        .collect();
    let mut done: HashSet<&str> = HashSet::new();
    for job in jobs.iter().filter(|j| j.is_after()) {
        let mut path: Vec<&str> = Vec::new();
        let Some(cycle) = find_cycle(job.name.as_str(), &by_name, &mut path, &mut done) else {
            continue;
        };
        // The walk finishes every job it met, so a cycle is found once.
        done.extend(cycle.iter().copied());
        let names: Vec<JobName> = cycle.iter().map(|n| by_name[n].name.clone()).collect();
        if !names.iter().any(&blame) {
            continue;
        }
        let start = (0..cycle.len())
            .min_by_key(|i| position.get(cycle[*i]).copied().unwrap_or(usize::MAX))
            .unwrap_or(0);
        let mut ring: Vec<&str> = cycle[start..].to_vec();
        ring.extend_from_slice(&cycle[..start]);
        ring.push(cycle[start]);
        found.push(Broken {
            problem: Problem::new(
                scope_str(cycle[start]),
                "after",
                format!(
                    "the jobs run after each other in a cycle ({}), so none of them could ever start: remove one of these after entries",
                    ring.join(" after ")
                ),
            ),
            jobs: names,
        });
    }
    found
}

/// Warns about each job with parents whose parents share no scheduled time from `now` on
/// (`"0 * * * *"` and `"30 * * * *"`): it would never run. Only for jobs that passed
/// [`check_graph`].
pub(super) fn warn_never_met(jobs: &[Job], now: DateTime<Utc>, out: &mut Report) {
    if !jobs.iter().any(Job::is_after) {
        return;
    }
    let index = JobIndex {
        by_name: jobs.iter().map(|j| (j.name.as_str(), j)).collect(),
    };
    for job in jobs.iter().filter(|j| j.is_after()) {
        let parents_fire = job
            .parents()
            .iter()
            .filter_map(|p| index.by_name.get(p.as_str()))
            .all(|p| index.next_time(p, now).is_some());
        if parents_fire && index.next_time(job, now).is_none() {
            let names: Vec<String> = job
                .parents()
                .iter()
                .map(|p| format!("{:?}", p.as_str()))
                .collect();
            out.warn(
                &scope(&job.name),
                "after",
                format!(
                    "its parents ({}) share no scheduled time from now on, so it would never run: give them a common time, or change after",
                    names.join(", ")
                ),
            );
        }
    }
}

/// The cycle reached from `name` along parents, as the jobs on it (each runs after the
/// next, the last after the first); `None` when none.
fn find_cycle<'a>(
    name: &'a str,
    by_name: &HashMap<&'a str, &'a Job>,
    path: &mut Vec<&'a str>,
    done: &mut HashSet<&'a str>,
) -> Option<Vec<&'a str>> {
    if let Some(at) = path.iter().position(|n| *n == name) {
        return Some(path[at..].to_vec());
    }
    if done.contains(name) {
        return None;
    }
    let job = by_name.get(name)?;
    path.push(name);
    for parent in job.parents() {
        if let Some(cycle) = find_cycle(parent.as_str(), by_name, path, done) {
            return Some(cycle);
        }
    }
    path.pop();
    done.insert(name);
    None
}

fn scope(name: &JobName) -> String {
    scope_str(name.as_str())
}

fn scope_str(name: &str) -> String {
    format!("job {name:?}")
}

impl Job {
    /// The jobs it runs after (`after`); empty for a job with a schedule of its own.
    pub fn parents(&self) -> &[JobName] {
        self.schedule.parents()
    }

    /// Whether it runs after other jobs (`after`) instead of on a schedule of its own.
    pub fn is_after(&self) -> bool {
        self.schedule.is_after()
    }
}

impl Config {
    /// The jobs that name `job` in their `after`, in config order.
    pub fn children(&self, job: &str) -> Vec<&Job> {
        self.jobs
            .iter()
            .filter(|j| j.parents().iter().any(|p| p.as_str() == job))
            .collect()
    }

    /// This config less the runtime jobs whose `after` does not hold among the jobs (an
    /// unknown parent, a cycle), with each one's problems: they are left out until fixed,
    /// as a runtime job that does not resolve is. A job left out can make another's
    /// parent unknown, so this repeats until nothing more is left out.
    pub(crate) fn without_broken_chains(mut self) -> (Config, Vec<(String, String)>) {
        let mut left_out: Vec<(String, String)> = Vec::new();
        loop {
            let runtime = |name: &JobName| self.runtime_since.contains_key(name);
            let found = check_graph(&self.jobs, runtime);
            let mut broken: HashMap<JobName, Vec<String>> = HashMap::new();
            for b in &found {
                for job in b.jobs.iter().filter(|j| runtime(j)) {
                    broken
                        .entry(job.clone())
                        .or_default()
                        .push(b.problem.to_string());
                }
            }
            if broken.is_empty() {
                return (self, left_out);
            }
            self.jobs.retain(|j| !broken.contains_key(&j.name));
            for (name, lines) in broken {
                self.runtime_since.remove(&name);
                left_out.push((name.as_str().to_owned(), lines.join("\n")));
            }
        }
    }

    /// Checks the `after` fields of runtime jobs about to be applied (`applied`, read from
    /// `path`) among the jobs they will join: this config's with the runtime jobs of
    /// `current` merged in, the applied ones replacing their namesakes.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`](super::ConfigError::Invalid) naming `path`, the job and `after`: an unknown parent, or
    /// a cycle through an applied job.
    pub fn check_applied(
        &self,
        current: &[crate::jobs::Revision],
        applied: &[super::RuntimeJob],
        path: &std::path::Path,
    ) -> Result<(), super::ConfigError> {
        let (merged, _) = self.with_runtime(current);
        let names: HashSet<&JobName> = applied.iter().map(|a| &a.job.name).collect();
        let mut jobs: Vec<Job> = merged
            .jobs
            .into_iter()
            .filter(|j| !names.contains(&j.name))
            .collect();
        jobs.extend(applied.iter().map(|a| a.job.clone()));
        let problems: Vec<Problem> = check_graph(&jobs, |n| names.contains(n))
            .into_iter()
            .map(|b| b.problem)
            .collect();
        if problems.is_empty() {
            return Ok(());
        }
        Err(super::ConfigError::Invalid {
            path: path.to_owned(),
            problems,
        })
    }

    /// The first occurrence time of `job` strictly after `after`: its schedule's, or for a
    /// job with parents, the first scheduled time all its parents share (followed up
    /// through parents that have parents). `None` when there is none, or none within
    /// a thousand rounds of search (parents whose times never meet). For many jobs, ask a
    /// [`Config::index`] instead: this looks the parents up one by one.
    pub fn next_time(&self, job: &Job, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if !job.is_after() {
            return job.schedule.next_after(after);
        }
        self.index().next_time(job, after)
    }

    /// The occurrence times of `job` strictly after `after`, in order ([`Config::next_time`]).
    pub fn times_after<'a>(
        &'a self,
        job: &'a Job,
        after: DateTime<Utc>,
    ) -> impl Iterator<Item = DateTime<Utc>> + 'a {
        let index = job.is_after().then(|| self.index());
        let next = move |t: DateTime<Utc>| match &index {
            Some(index) => index.next_time(job, t),
            None => job.schedule.next_after(t),
        };
        let first = next(after);
        std::iter::successors(first, move |t| next(*t))
    }

    /// The jobs by name, to follow parents quickly.
    pub fn index(&self) -> JobIndex<'_> {
        JobIndex {
            by_name: self.jobs.iter().map(|j| (j.name.as_str(), j)).collect(),
        }
    }
}

/// A config's jobs by name ([`Config::index`]).
pub struct JobIndex<'a> {
    by_name: HashMap<&'a str, &'a Job>,
}

impl JobIndex<'_> {
    /// [`Config::next_time`], the parents looked up by name.
    pub fn next_time(&self, job: &Job, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.next_time_at(job, after, 0)
    }

    fn next_time_at(&self, job: &Job, after: DateTime<Utc>, depth: usize) -> Option<DateTime<Utc>> {
        if !job.is_after() {
            return job.schedule.next_after(after);
        }
        // Acyclic once validated; the bound only guards a config built otherwise.
        if depth > MAX_DEPTH {
            return None;
        }
        let parents: Vec<&Job> = job
            .parents()
            .iter()
            .map(|p| self.by_name.get(p.as_str()).copied())
            .collect::<Option<_>>()?;
        let mut cursor = after;
        for _ in 0..COMMON_SEARCH {
            let mut times = Vec::with_capacity(parents.len());
            for parent in &parents {
                times.push(self.next_time_at(parent, cursor, depth + 1)?);
            }
            let latest = *times.iter().max()?;
            if times.iter().all(|t| *t == latest) {
                return Some(latest);
            }
            // Every parent's next time is at or past the latest: look from just before it.
            cursor = latest - TimeDelta::nanoseconds(1);
        }
        None
    }
}

/// How many rounds [`JobIndex::next_time`] tries to bring the parents' times together.
const COMMON_SEARCH: usize = 1000;

/// How deep [`Config::next_time`] follows parents of parents.
const MAX_DEPTH: usize = 64;

#[cfg(test)]
mod tests {
    use std::path::Path;

    use chrono::Utc;

    use super::*;
    use crate::jobs::Revision;

    fn rev(name: &str, spec: &str) -> Revision {
        Revision {
            name: name.to_owned(),
            revision: 1,
            spec: Some(spec.to_owned()),
            by: "test".to_owned(),
            at: Utc::now(),
        }
    }

    #[test]
    fn a_runtime_job_whose_parent_is_gone_is_left_out_with_its_children() {
        let file = Config::from_toml(
            "[handlers.h]\ncommand = [\"true\"]\n[[job]]\nname = \"tick\"\nschedule = \"@every 1s\"\nhandler = \"h\"\n",
            Path::new("cronq.toml"),
        )
        .expect("valid config");
        let revisions = [
            rev("ok", "name = \"ok\"\nafter = [\"tick\"]\nhandler = \"h\"\n"),
            rev(
                "orphan",
                "name = \"orphan\"\nafter = [\"gone\"]\nhandler = \"h\"\n",
            ),
            rev(
                "grandchild",
                "name = \"grandchild\"\nafter = [\"orphan\"]\nhandler = \"h\"\n",
            ),
        ];
        let (merged, report) = file.with_runtime(&revisions);
        let names: Vec<&str> = merged.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["tick", "ok"]);
        let mut left: Vec<&str> = report.invalid.iter().map(|(n, _)| n.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, ["grandchild", "orphan"], "{report:?}");
        assert!(
            !merged
                .runtime_since
                .contains_key(&JobName::new("orphan").unwrap())
        );
        assert_eq!(
            merged
                .children("tick")
                .iter()
                .map(|j| j.name.as_str())
                .collect::<Vec<_>>(),
            ["ok"]
        );
    }
}
