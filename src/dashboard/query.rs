//! The query strings of the listings and how they are read: search, filters, sort and
//! pages of the jobs and runs, over the config and a [`Snapshot`] held in memory (pure: no
//! store is read here), so a page of 100,000 jobs is one pass over the config; and
//! [`ApiQuery`], which refuses a bad query string with the API's JSON error.

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use chrono::{DateTime, Utc};
use cronq_shared::config::{Config, Job};
use cronq_shared::runlog::{Outcome, Run};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::actions::ApiError;
use super::snapshot::Snapshot;

/// The most rows a page shows.
pub const MAX_PER_PAGE: usize = 500;

/// A query string, as axum's `Query`, whose refusal is the API's JSON error (400) naming
/// the parameter and the form it takes, instead of axum's plain-text one.
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(q)) => Ok(Self(q)),
            Err(rejection) => Err(ApiError::bad_request(query_problem(&rejection.body_text()))),
        }
    }
}

/// What is wrong with a query string, from axum's refusal text
/// (`Failed to deserialize query string: PARAM: WHY`): the parameter and the form it takes.
fn query_problem(refusal: &str) -> String {
    let detail = refusal
        .split_once(": ")
        .map_or(refusal, |(_, detail)| detail);
    match detail.split_once(": ") {
        Some((param, why)) => {
            let form = match param {
                "page" => "a whole number from 1".to_owned(),
                "per_page" => format!("a whole number from 1 to {MAX_PER_PAGE}"),
                _ => "the form the API document gives (/api/v1/openapi.json)".to_owned(),
            };
            format!("query parameter {param}: {why}: give {form}")
        }
        None => format!("bad query string: {detail}"),
    }
}

/// The rows a page shows when not told.
pub const PER_PAGE: usize = 50;

/// The jobs listing's parameters (query string of `/jobs` and `/api/v1/jobs`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct JobsQuery {
    /// Part of the name, any case.
    pub q: Option<String>,
    /// Only this queue.
    pub queue: Option<String>,
    /// Only jobs whose last outcome is this (`none`: no run in the window).
    pub outcome: Option<String>,
    /// `yes` or `no`.
    pub paused: Option<String>,
    /// `name` (default), `next`, `last`, `queue`.
    pub sort: Option<String>,
    /// `asc` (default) or `desc`.
    pub order: Option<String>,
    /// From 1.
    pub page: Option<usize>,
    /// Rows per page, at most [`MAX_PER_PAGE`].
    pub per_page: Option<usize>,
    /// The page's flash message after a change (the Jobs page only).
    pub msg: Option<String>,
}

/// One page of the listing.
#[derive(Debug)]
pub struct Page<T> {
    /// The rows of this page.
    pub rows: Vec<T>,
    /// How many matched in all.
    pub total: usize,
    /// This page, from 1.
    pub page: usize,
    /// Rows per page.
    pub per_page: usize,
}

impl<T> Page<T> {
    /// How many pages there are (at least 1).
    pub fn pages(&self) -> usize {
        self.total.div_ceil(self.per_page).max(1)
    }
}

/// A query value that is set and not blank.
fn given(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

impl JobsQuery {
    /// Checks the values that have a fixed set of forms.
    ///
    /// # Errors
    /// A message naming the parameter, the value and the allowed ones.
    pub fn check(&self) -> Result<(), String> {
        if let Some(o) = given(&self.outcome)
            && o != "none"
            && Outcome::parse(o).is_none()
        {
            return Err(format!(
                "outcome {o:?} is not one of none, succeeded, retrying, failed, skipped, cancelled, missed, interrupted, lost"
            ));
        }
        if let Some(p) = given(&self.paused)
            && p != "yes"
            && p != "no"
        {
            return Err(format!("paused {p:?} is not yes or no"));
        }
        if let Some(s) = given(&self.sort)
            && !["name", "next", "last", "queue"].contains(&s)
        {
            return Err(format!("sort {s:?} is not one of name, next, last, queue"));
        }
        if let Some(o) = given(&self.order)
            && o != "asc"
            && o != "desc"
        {
            return Err(format!("order {o:?} is not asc or desc"));
        }
        Ok(())
    }

    /// The page of jobs (their indices in the config) this query selects; `by_name` is every
    /// index of the config sorted by job name (`super::view::View::by_name`), so that the default order costs
    /// no sort.
    /// `next` is each job's next fire time by index, as far as known.
    pub fn select(
        &self,
        config: &Config,
        snap: &Snapshot,
        by_name: &[usize],
        next: &[Option<chrono::DateTime<chrono::Utc>>],
    ) -> Page<usize> {
        let needle = given(&self.q).map(str::to_lowercase);
        let queue = given(&self.queue);
        let outcome = given(&self.outcome);
        let paused = given(&self.paused).map(|p| p == "yes");
        let keep = |job: &Job| {
            needle
                .as_deref()
                .is_none_or(|n| contains_ignore_case(job.name.as_str(), n))
                && queue.is_none_or(|q| job.queue.as_str() == q)
                && paused.is_none_or(|p| snap.paused.contains_key(&job.name) == p)
                && outcome.is_none_or(|o| match snap.last(&job.name) {
                    None => o == "none",
                    Some(run) => run.outcome.as_str() == o,
                })
        };
        let mut hits: Vec<usize> = by_name
            .iter()
            .copied()
            .filter(|i| keep(&config.jobs[*i]))
            .collect();
        // Stable sorts of a list in name order: ties stay by name. "Never" and "no run"
        // sort last.
        match given(&self.sort).unwrap_or("name") {
            "next" => hits.sort_by_cached_key(|i| {
                let t = next.get(*i).copied().flatten();
                (t.is_none(), t)
            }),
            "last" => hits.sort_by_cached_key(|i| {
                let t = snap.last(&config.jobs[*i].name).map(|r| r.started_at);
                (t.is_none(), std::cmp::Reverse(t))
            }),
            "queue" => hits.sort_by_cached_key(|i| config.jobs[*i].queue.as_str()),
            _ => {}
        }
        if given(&self.order) == Some("desc") {
            hits.reverse();
        }
        paginate(hits, self.page, self.per_page)
    }
}

/// Whether `hay` contains the lowercase `needle`, ignoring ASCII case (job names are
/// ASCII).
fn contains_ignore_case(hay: &str, needle: &str) -> bool {
    hay.as_bytes()
        .windows(needle.len().max(1))
        .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
        || needle.is_empty()
}

/// Cuts `rows` to page `page` (from 1) of `per_page`.
pub fn paginate<T>(rows: Vec<T>, page: Option<usize>, per_page: Option<usize>) -> Page<T> {
    let per_page = per_page.unwrap_or(PER_PAGE).clamp(1, MAX_PER_PAGE);
    let total = rows.len();
    let pages = total.div_ceil(per_page).max(1);
    let page = page.unwrap_or(1).clamp(1, pages);
    let rows = rows
        .into_iter()
        .skip((page - 1) * per_page)
        .take(per_page)
        .collect();
    Page {
        rows,
        total,
        page,
        per_page,
    }
}

/// The runs listing's parameters (query string of `/runs` and `/api/v1/runs`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct RunsQuery {
    /// Only this job.
    pub job: Option<String>,
    /// Only this outcome.
    pub outcome: Option<String>,
    /// Only runs started at or after this instant (RFC 3339).
    pub from: Option<String>,
    /// Only runs started at or before this instant (RFC 3339).
    pub to: Option<String>,
    /// Only this occurrence key (`JOB@TIME`, `JOB@manual-ID`).
    pub key: Option<String>,
    /// From 1.
    pub page: Option<usize>,
    /// Rows per page, at most [`MAX_PER_PAGE`].
    pub per_page: Option<usize>,
}

/// A checked [`RunsQuery`].
#[derive(Debug, Clone, Default)]
pub struct RunsFilter {
    /// Only this job (from `job`, or from the job of `key`).
    pub job: Option<String>,
    outcome: Option<Outcome>,
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
    key: Option<String>,
}

impl RunsQuery {
    /// The filter, checked.
    ///
    /// # Errors
    /// A message naming the parameter, the value and the expected form.
    pub fn filter(&self) -> Result<RunsFilter, String> {
        let instant = |name: &str, v: &Option<String>| -> Result<Option<DateTime<Utc>>, String> {
            given(v)
                .map(|t| {
                    DateTime::parse_from_rfc3339(t)
                        .map(|t| t.with_timezone(&Utc))
                        .map_err(|e| {
                            format!("{name} {t:?} is not an RFC 3339 instant such as 2026-11-29T19:30:00Z: {e}")
                        })
                })
                .transpose()
        };
        let outcome = given(&self.outcome)
            .map(|o| {
                Outcome::parse(o).ok_or_else(|| {
                    format!("outcome {o:?} is not one of succeeded, retrying, failed, skipped, cancelled, missed, interrupted, lost")
                })
            })
            .transpose()?;
        let key = given(&self.key).map(str::to_owned);
        let job = given(&self.job).map(str::to_owned).or_else(|| {
            key.as_deref()
                .and_then(|k| k.split_once('@'))
                .map(|(j, _)| j.to_owned())
        });
        Ok(RunsFilter {
            job,
            outcome,
            from: instant("from", &self.from)?,
            to: instant("to", &self.to)?,
            key,
        })
    }
}

impl RunsFilter {
    /// Whether `run` passes the filter.
    pub fn keeps(&self, run: &Run) -> bool {
        self.job.as_deref().is_none_or(|j| run.job.as_str() == j)
            && self.outcome.is_none_or(|o| run.outcome == o)
            && self.from.is_none_or(|t| run.started_at >= t)
            && self.to.is_none_or(|t| run.started_at <= t)
            && self.key.as_deref().is_none_or(|k| run.key.to_string() == k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_clamped() {
        let p = paginate((0..120).collect(), Some(9), Some(50));
        assert_eq!(
            (p.page, p.pages(), p.rows.len(), p.rows[0]),
            (3, 3, 20, 100)
        );
        let p = paginate(Vec::<u8>::new(), Some(0), Some(0));
        assert_eq!((p.page, p.pages(), p.per_page), (1, 1, 1));
    }

    #[test]
    fn search_ignores_case() {
        assert!(contains_ignore_case("Nightly-Report", "report"));
        assert!(!contains_ignore_case("nightly", "daily"));
        assert!(contains_ignore_case("x", ""));
    }

    #[test]
    fn bad_values_are_named() {
        let q = JobsQuery {
            sort: Some("size".into()),
            ..JobsQuery::default()
        };
        assert_eq!(
            q.check().unwrap_err(),
            "sort \"size\" is not one of name, next, last, queue"
        );
        let r = RunsQuery {
            from: Some("yesterday".into()),
            ..RunsQuery::default()
        };
        assert!(
            r.filter()
                .unwrap_err()
                .starts_with("from \"yesterday\" is not an RFC 3339 instant")
        );
    }

    #[test]
    fn a_bad_query_names_its_parameter_and_form() {
        assert_eq!(
            query_problem(
                "Failed to deserialize query string: per_page: invalid digit found in string"
            ),
            "query parameter per_page: invalid digit found in string: give a whole number from 1 to 500"
        );
        assert_eq!(
            query_problem(
                "Failed to deserialize query string: page: invalid digit found in string"
            ),
            "query parameter page: invalid digit found in string: give a whole number from 1"
        );
        assert_eq!(
            query_problem("Failed to deserialize query string: odd"),
            "bad query string: odd"
        );
    }
}
