//! Runtime jobs (`docs/runtime-jobs.md`): `[[job]]` tables given to `cronq job apply` and
//! read back from the job store ([`crate::jobs`]), checked with the config's rules and
//! messages, resolved against the `[defaults]` and `[handlers.NAME]` of the config of the
//! process that reads them, and merged with the file's jobs.
//!
//! Invariant: a runtime job names its handler and carries nothing else of it: a command
//! line, a URL or a command's start fields are refused, so none travels through the store.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::path::Path;

use chrono::Utc;
use foldhash::HashMap;
use toml::{Table, Value};

use super::error::{ConfigError, Problem};
use super::raw;
use super::report::Report;
use super::share::Sharing;
use super::validate::{JobContext, resolve_job};
use super::{Config, Job};
use crate::jobs::Revision;
use crate::schedule::Interner;

/// A runtime job read from a file: its resolved form and its spec (its table as TOML
/// text, what the store keeps).
#[derive(Debug, Clone)]
pub struct RuntimeJob {
    /// The job, resolved against the reading config.
    pub job: Job,
    /// Its `[[job]]` table as TOML text.
    pub spec: String,
}

/// What merging runtime jobs keeps from one merge to the next: each job as resolved at its
/// revision, and the parsed schedules and settings the jobs share. A change of one job
/// among thousands resolves that one; jobs with one schedule share its parsed state (a
/// cron expression's is about 5 KiB), as the file's jobs do.
///
/// Invariant: it holds jobs resolved against one config: start a new one when the config
/// they resolve against (its `[defaults]`, `[handlers.NAME]`) changes.
#[derive(Debug)]
pub struct RuntimeCache {
    /// By name: the revision resolved, and the job or why it does not resolve.
    resolved: HashMap<String, (u64, Result<Job, String>)>,
    schedules: Interner,
    sharing: Sharing,
}

impl Default for RuntimeCache {
    fn default() -> Self {
        Self {
            resolved: HashMap::default(),
            schedules: Interner::new(Utc::now()),
            sharing: Sharing::default(),
        }
    }
}

/// Runtime jobs merged into a config: who was left out, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Merged {
    /// Runtime jobs whose name a file job has: the file job runs.
    pub shadowed: Vec<String>,
    /// Runtime jobs that do not resolve here, with the problems.
    pub invalid: Vec<(String, String)>,
    /// Runtime jobs left out because `[runtime] jobs = false`.
    pub refused: usize,
}

impl Config {
    /// Reads `text` (one or more `[[job]]` tables, as given to `cronq job apply`) as
    /// runtime jobs; `path` names it in messages.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] with every problem: those of a config file, plus any
    /// inline handler field (a runtime job names a handler), a missing `handler`, and
    /// anything besides `[[job]]` tables.
    pub fn runtime_jobs(&self, text: &str, path: &Path) -> Result<Vec<RuntimeJob>, ConfigError> {
        let mut out = Report::default();
        let mut jobs = Vec::new();
        let table = match text.parse::<Table>() {
            Ok(t) => t,
            Err(err) => {
                return Err(ConfigError::Invalid {
                    path: path.to_owned(),
                    problems: vec![Problem::new(
                        "",
                        "",
                        format!("not valid TOML: {}", err.message().trim()),
                    )],
                });
            }
        };
        let mut items = Vec::new();
        for (key, value) in table {
            match (key.as_str(), value) {
                ("job", Value::Array(list)) => items = list,
                (key, _) => out.problem(
                    "",
                    key,
                    "only [[job]] tables can be applied: [defaults], [leader], [handlers] and the rest belong in the config file",
                ),
            }
        }
        if items.is_empty() && out.problems.is_empty() {
            out.problem("", "job", "no [[job]] table: give at least one");
        }
        let mut seen = HashSet::new();
        for (i, item) in items.into_iter().enumerate() {
            if let Some(job) = self.read_runtime(i + 1, item, &mut out) {
                if !seen.insert(job.job.name.clone()) {
                    out.problem(
                        &format!("job {:?}", job.job.name.as_str()),
                        "name",
                        "is given twice in this file: job names must be unique",
                    );
                }
                jobs.push(job);
            }
        }
        if !out.problems.is_empty() {
            return Err(ConfigError::Invalid {
                path: path.to_owned(),
                problems: out.problems,
            });
        }
        Ok(jobs)
    }

    /// Reads `body`, one job's table without its `[[job]]` header (the body of `PUT
    /// /api/v1/jobs/NAME`), as the runtime job `name`: its `name` may be left out, and must
    /// be `name` when given.
    ///
    /// # Errors
    /// As [`Config::runtime_jobs`]; `name` differing from the table's.
    pub fn runtime_job_named(&self, name: &str, body: &str) -> Result<RuntimeJob, ConfigError> {
        let path = Path::new("request");
        let invalid = |message: String| ConfigError::Invalid {
            path: path.to_owned(),
            problems: vec![Problem::new("", "", message)],
        };
        let mut table: Table = body.parse().map_err(|e: toml::de::Error| {
            invalid(format!("not valid TOML: {}", e.message().trim()))
        })?;
        match table.get("name") {
            None => {
                table.insert("name".into(), Value::String(name.to_owned()));
            }
            Some(Value::String(n)) if n == name => {}
            Some(other) => {
                return Err(ConfigError::Invalid {
                    path: path.to_owned(),
                    problems: vec![Problem::new(
                        "",
                        "name",
                        format!(
                            "{other} differs from the job in the URL ({name:?}): leave it out or make them equal"
                        ),
                    )],
                });
            }
        }
        let mut doc = Table::new();
        doc.insert("job".into(), Value::Array(vec![Value::Table(table)]));
        let text = toml::to_string(&doc).unwrap_or_default();
        let mut jobs = self.runtime_jobs(&text, path)?;
        jobs.pop()
            .ok_or_else(|| invalid("no job in the body".to_owned()))
    }

    /// The runtime job stored as `spec`, resolved against this config.
    ///
    /// # Errors
    /// Every problem, one per line.
    pub fn runtime_job(&self, spec: &str) -> Result<Job, String> {
        self.runtime_job_in(spec, &mut RuntimeCache::default())
    }

    /// [`Config::runtime_job`], sharing schedules and settings through `cache`.
    fn runtime_job_in(&self, spec: &str, cache: &mut RuntimeCache) -> Result<Job, String> {
        let mut out = Report::default();
        let item = match spec.parse::<Table>() {
            Ok(t) => Value::Table(t),
            Err(err) => return Err(format!("not valid TOML: {}", err.message().trim())),
        };
        match self.read_runtime_in(1, item, &mut out, cache) {
            Some(job) if out.problems.is_empty() => Ok(job.job),
            _ => Err(out
                .problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")),
        }
    }

    /// This config with the runtime jobs of `revisions` added after the file's jobs (see
    /// [`Merged`] for those left out).
    pub fn with_runtime(&self, revisions: &[Revision]) -> (Config, Merged) {
        self.with_runtime_cached(revisions, &mut RuntimeCache::default())
    }

    /// [`Config::with_runtime`], taking from `cache` each job at the revision it resolved
    /// before, and keeping there what it resolves now (a deleted job leaves it).
    pub fn with_runtime_cached<R: Borrow<Revision>>(
        &self,
        revisions: &[R],
        cache: &mut RuntimeCache,
    ) -> (Config, Merged) {
        let mut merged = Merged::default();
        let mut config = self.clone();
        if !self.runtime.jobs {
            merged.refused = revisions.len();
            return (config, merged);
        }
        // Hashed with foldhash, and the runtime jobs' start times put in order once at the
        // end: at a million runtime jobs, SipHash and a million ordered inserts were most
        // of a merge's second.
        let file: foldhash::HashSet<&str> = self.jobs.iter().map(|j| j.name.as_str()).collect();
        let listed: foldhash::HashSet<&str> =
            revisions.iter().map(|r| r.borrow().name.as_str()).collect();
        cache
            .resolved
            .retain(|name, _| listed.contains(name.as_str()));
        let mut since = Vec::with_capacity(revisions.len());
        for rev in revisions {
            let rev = rev.borrow();
            let Some(spec) = &rev.spec else { continue };
            if file.contains(rev.name.as_str()) {
                merged.shadowed.push(rev.name.clone());
                continue;
            }
            let job = match cache.resolved.get(&rev.name) {
                Some((n, job)) if *n == rev.revision => job.clone(),
                _ => {
                    let job = self.runtime_job_in(spec, cache);
                    cache
                        .resolved
                        .insert(rev.name.clone(), (rev.revision, job.clone()));
                    job
                }
            };
            match job {
                Ok(job) => {
                    since.push((job.name.clone(), rev.at));
                    config.jobs.push(job);
                }
                Err(problems) => merged.invalid.push((rev.name.clone(), problems)),
            }
        }
        if config.runtime_since.is_empty() {
            // Built from the list in one go: one sort, a single pass when the jobs come in
            // name order (as the reloader gives them), then no ordered insert at all.
            config.runtime_since = since.into_iter().collect();
        } else {
            config.runtime_since.extend(since);
        }
        // A runtime job's parents are looked up among all the jobs now merged.
        let (config, broken) = config.without_broken_chains();
        merged.invalid.extend(broken);
        (config, merged)
    }

    fn read_runtime(&self, ordinal: usize, item: Value, out: &mut Report) -> Option<RuntimeJob> {
        self.read_runtime_in(ordinal, item, out, &mut RuntimeCache::default())
    }

    fn read_runtime_in(
        &self,
        ordinal: usize,
        item: Value,
        out: &mut Report,
        cache: &mut RuntimeCache,
    ) -> Option<RuntimeJob> {
        let spec = match &item {
            Value::Table(t) => toml::to_string(t).unwrap_or_default(),
            _ => String::new(),
        };
        let section = raw::job(ordinal, item);
        out.problems.extend(section.problems.iter().cloned());
        let raw = &section.value;
        let scope = raw.scope.as_str();
        let before = out.problems.len();
        let set = |field: &str| match field {
            "command" => raw.own.command.is_some(),
            "http" => raw.http.is_some(),
            "user" => raw.own.user.is_some(),
            "group" => raw.own.group.is_some(),
            "env" => raw.own.env.is_some(),
            "clear_env" => raw.own.clear_env.is_some(),
            _ => raw.own.cwd.is_some(),
        };
        // A runtime job may not have a handler's fields: what runs is defined only where
        // consumers run.
        for field in raw::HANDLER_FIELDS {
            if set(field) {
                out.problem(
                    scope,
                    field,
                    "a runtime job cannot carry its handler: name one with handler = \"NAME\" (a [handlers.NAME] of the consumers' config, or one registered in Rust)",
                );
            }
        }
        let inline = out.problems.len() > before;
        if raw.own.handler.is_none() && !raw.rejected.contains(&"handler") && !inline {
            out.problem(
                scope,
                "handler",
                "is required for a runtime job: name the handler that runs it, such as handler = \"report\"",
            );
        }
        if out.problems.len() > before {
            return None;
        }
        let context = JobContext {
            defaults: &self.defaults,
            handlers: &self.handlers,
            calendars: &self.calendars,
            pools: &self.pools,
        };
        let mut report = Report::default();
        let job = resolve_job(
            raw,
            &context,
            &mut cache.schedules,
            &mut cache.sharing,
            &mut report,
        );
        out.problems.extend(report.problems);
        job.map(|job| RuntimeJob { job, spec })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use chrono::Utc;

    use super::*;

    fn config(extra: &str) -> Config {
        let text = format!(
            "{extra}\n[handlers.report]\ncommand = [\"/bin/true\"]\n[[job]]\nname = \"file-job\"\nschedule = \"@hourly\"\nhandler = \"report\"\n"
        );
        Config::from_toml(&text, Path::new("cronq.toml")).unwrap()
    }

    fn rev(name: &str, spec: &str) -> Revision {
        Revision {
            name: name.to_owned(),
            revision: 1,
            spec: Some(spec.to_owned()),
            by: "t".to_owned(),
            at: Utc::now(),
        }
    }

    #[test]
    fn a_cached_merge_resolves_only_the_jobs_whose_revision_moved_and_shares_their_schedules() {
        let c = config("");
        let spec = |name: &str, schedule: &str| {
            format!("name = \"{name}\"\nschedule = \"{schedule}\"\nhandler = \"report\"\n")
        };
        let mut revs = vec![
            rev("a", &spec("a", "0 3 * * *")),
            rev("b", &spec("b", "0 3 * * *")),
            rev("c", &spec("c", "61 * * * *")),
        ];
        let mut cache = RuntimeCache::default();
        let (first, merged) = c.with_runtime_cached(&revs, &mut cache);
        let (plain, plain_merged) = c.with_runtime(&revs);
        assert_eq!(
            merged, plain_merged,
            "the cache changes nothing of the merge"
        );
        assert_eq!(merged.invalid.len(), 1, "{merged:?}");
        let names = |c: &Config| {
            c.jobs
                .iter()
                .map(|j| j.name.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&first), names(&plain));
        let schedule = |c: &Config, n: &str| c.job(n).unwrap().schedule.clone();
        assert!(
            schedule(&first, "a").shares_parsed(&schedule(&first, "b")),
            "one parsed schedule for the jobs that share it"
        );
        // b changes; a stays at its revision and is taken from the cache as it was.
        revs[1] = Revision {
            revision: 2,
            ..rev("b", &spec("b", "0 4 * * *"))
        };
        let (second, merged) = c.with_runtime_cached(&revs, &mut cache);
        assert_eq!(merged.invalid.len(), 1, "c is still refused: {merged:?}");
        assert!(schedule(&first, "a").shares_parsed(&schedule(&second, "a")));
        assert_eq!(second.job("b").unwrap().schedule.as_str(), "0 4 * * *");
        // Deleted: gone from the merge and from the cache.
        revs.remove(0);
        let (third, _) = c.with_runtime_cached(&revs, &mut cache);
        assert!(third.job("a").is_none());
        assert!(!cache.resolved.contains_key("a"));
    }

    #[test]
    fn a_runtime_job_names_its_handler_and_carries_nothing_else_of_it() {
        let c = config("");
        let err = c
            .runtime_jobs(
                "[[job]]\nname = \"a\"\nschedule = \"@hourly\"\ncommand = [\"/bin/rm\"]\n\n[[job]]\nname = \"b\"\nschedule = \"@hourly\"\n\n[defaults]\ntimeout = \"1m\"\n",
                Path::new("jobs.toml"),
            )
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "invalid config (3 problems):\njobs.toml: defaults: only [[job]] tables can be applied: [defaults], [leader], [handlers] and the rest belong in the config file\njobs.toml: job \"a\": command: a runtime job cannot carry its handler: name one with handler = \"NAME\" (a [handlers.NAME] of the consumers' config, or one registered in Rust)\njobs.toml: job \"b\": handler: is required for a runtime job: name the handler that runs it, such as handler = \"report\""
        );
        let ok = c
            .runtime_jobs(
                "[[job]]\nname = \"a\"\nschedule = \"@every 5s\"\nhandler = \"report\"\npayload = { n = 1 }\n",
                Path::new("jobs.toml"),
            )
            .unwrap();
        assert!(
            ok[0].job.handler.is_some(),
            "resolved against [handlers.report]"
        );
        assert_eq!(c.runtime_job(&ok[0].spec).unwrap().payload["n"], 1);
    }

    #[test]
    fn a_runtime_job_may_exclude_the_calendars_of_the_reading_config() {
        let c = config("[calendars.holidays]\ndates = [\"2026-12-25\"]\n");
        let ok = c
            .runtime_jobs(
                "[[job]]\nname = \"a\"\nschedules = [\"0 9 * * *\", \"0 11 * * *\"]\ncalendars = [\"holidays\"]\nexclude = [\"0 11 * * SAT\"]\nhandler = \"report\"\n",
                Path::new("jobs.toml"),
            )
            .unwrap();
        let from: chrono::DateTime<Utc> = "2026-12-24T10:00:00Z".parse().unwrap();
        let times: Vec<String> = ok[0]
            .job
            .schedule
            .iter_after(from)
            .take(3)
            .map(|t| t.to_rfc3339())
            .collect();
        // The 25th is a holiday, the 26th a Saturday.
        assert_eq!(
            times,
            [
                "2026-12-24T11:00:00+00:00",
                "2026-12-26T09:00:00+00:00",
                "2026-12-27T09:00:00+00:00"
            ]
        );
        let err = c
            .runtime_jobs(
                "[[job]]\nname = \"b\"\nschedule = \"@daily\"\ncalendars = [\"holiday\"]\nhandler = \"report\"\n",
                Path::new("jobs.toml"),
            )
            .unwrap_err()
            .to_string();
        assert!(
            err.ends_with("jobs.toml: job \"b\": calendars: \"holiday\" is not a [calendars.NAME] of this file; did you mean \"holidays\"?: define it, or remove it from the list"),
            "{err}"
        );
    }

    #[test]
    fn merging_leaves_out_shadowed_invalid_and_refused_jobs() {
        let runtime = [
            rev(
                "file-job",
                "name = \"file-job\"\nschedule = \"@hourly\"\nhandler = \"report\"\n",
            ),
            rev(
                "new",
                "name = \"new\"\nschedule = \"@hourly\"\nhandler = \"report\"\n",
            ),
            rev(
                "bad",
                "name = \"bad\"\nschedule = \"61 * * * *\"\nhandler = \"report\"\n",
            ),
        ];
        let (merged, report) = config("").with_runtime(&runtime);
        let names: Vec<&str> = merged.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["file-job", "new"]);
        assert_eq!(report.shadowed, ["file-job"]);
        assert_eq!(report.invalid.len(), 1);
        assert!(report.invalid[0].1.contains("schedule"), "{report:?}");

        let (merged, report) = config("[runtime]\njobs = false\n").with_runtime(&runtime);
        assert_eq!(merged.jobs.len(), 1);
        assert_eq!(report.refused, 3);
    }
}
