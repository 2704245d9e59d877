//! What a config change does to the occurrences of the next hours (`cronq plan`, and the
//! dashboard's job editor preview): per job added, removed or changed, the occurrences
//! that appear, disappear or move, the catch-up the reload publishes, and the
//! daylight-saving changes that skip or repeat a fire time.
//!
//! Both sides are computed with the schedule code the producer plans with
//! (`Schedule::iter_after`: exclusions, calendars, several schedules, bounds, `H`,
//! one-shots), so the preview is what the leader will publish. Pure: the instants are
//! given, no clock is read.
//!
//! Catch-up: a reload starts a new or changed job at the reload instant
//! (`cronq_producer`'s term: only a runtime job written in the seconds before the leader
//! read it starts at its revision), so a reload publishes no catch-up of a file job; the
//! occurrences of a changed job before the reload are not published again, and those of
//! the old schedule after it are not published at all.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use cronq_shared::config::{Config, Job};
use cronq_shared::registry::digest::job_digest;
use serde_json::{Value, json};

use crate::output::{self, Table};

/// How many occurrences of one side a plan looks at, per job, at most (an `@every 1s` job
/// has 86,400 a day).
pub const MAX_OCCURRENCES: usize = 100_000;

/// How a job changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Only in the new config.
    Added,
    /// Only in the old one.
    Removed,
    /// In both, defined differently.
    Changed,
}

impl Change {
    /// `added`, `removed` or `changed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "added",
            Self::Removed => "removed",
            Self::Changed => "changed",
        }
    }
}

/// One occurrence moved: the old schedule had `from`, the new one has `to` instead, with
/// no other occurrence of either between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    /// The old instant.
    pub from: DateTime<Utc>,
    /// The new instant.
    pub to: DateTime<Utc>,
}

/// One job's change and its effect on the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPlan {
    /// The job.
    pub job: String,
    /// How it changes.
    pub change: Change,
    /// Its schedule before (`None` when added).
    pub old_schedule: Option<String>,
    /// Its schedule after (`None` when removed).
    pub new_schedule: Option<String>,
    /// Its zone (the new one, else the old).
    pub timezone: chrono_tz::Tz,
    /// Occurrences only the new schedule has, that moved from none.
    pub appear: Vec<DateTime<Utc>>,
    /// Occurrences only the old schedule has, that moved to none.
    pub disappear: Vec<DateTime<Utc>>,
    /// Occurrences that moved.
    pub moved: Vec<Move>,
    /// What a reload publishes at once for this job (see the module docs).
    pub catchup: Vec<DateTime<Utc>>,
    /// Daylight-saving changes in the window that skip or repeat a fire time of the new
    /// schedule (of the old one when removed).
    pub dst: Vec<String>,
    /// A side had more than [`MAX_OCCURRENCES`] in the window: only those were compared.
    pub truncated: bool,
}

impl JobPlan {
    /// Whether the window's occurrences differ.
    pub fn moves_occurrences(&self) -> bool {
        !(self.appear.is_empty() && self.disappear.is_empty() && self.moved.is_empty())
    }
}

/// A config change over a window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The window's start (exclusive).
    pub from: DateTime<Utc>,
    /// Its end (inclusive).
    pub to: DateTime<Utc>,
    /// What the new config is compared with.
    pub against: String,
    /// Each job that changes, by name.
    pub jobs: Vec<JobPlan>,
}

impl Plan {
    /// Whether anything changes (exit 3 for `cronq plan`).
    pub fn changes(&self) -> bool {
        !self.jobs.is_empty()
    }
}

/// The plan of going from `old` to `new` over `(from, from + horizon]`. A job changes when
/// its definition does (its digest, `cronq_shared::registry::digest`); both configs
/// should be read alike (their runtime jobs merged the same way).
pub fn plan(
    old: &Config,
    new: &Config,
    against: &str,
    from: DateTime<Utc>,
    horizon: Duration,
) -> Plan {
    let to = from + chrono::TimeDelta::from_std(horizon).unwrap_or(chrono::TimeDelta::MAX);
    let by_name = |c: &Config| -> BTreeMap<String, Job> {
        c.jobs
            .iter()
            .map(|j| (j.name.as_str().to_owned(), j.clone()))
            .collect()
    };
    let (old_jobs, new_jobs) = (by_name(old), by_name(new));
    let names: BTreeSet<&String> = old_jobs.keys().chain(new_jobs.keys()).collect();
    let jobs = names
        .into_iter()
        .filter_map(|name| job_plan(old_jobs.get(name), new_jobs.get(name), from, to))
        .collect();
    Plan {
        from,
        to,
        against: against.to_owned(),
        jobs,
    }
}

/// One job's plan; `None` when it does not change.
pub fn job_plan(
    old: Option<&Job>,
    new: Option<&Job>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Option<JobPlan> {
    let change = match (old, new) {
        (None, None) => return None,
        (None, Some(_)) => Change::Added,
        (Some(_), None) => Change::Removed,
        (Some(o), Some(n)) if job_digest(o) == job_digest(n) => return None,
        (Some(_), Some(_)) => Change::Changed,
    };
    let (old_times, old_cut) = old.map_or((Vec::new(), false), |j| window(j, from, to));
    let (new_times, new_cut) = new.map_or((Vec::new(), false), |j| window(j, from, to));
    let (appear, disappear, moved) = diff(&old_times, &new_times);
    let shown = new.or(old).expect("one side exists");
    let horizon = (to - from).to_std().unwrap_or_default();
    // A union (`schedules`): each of its schedules, named as written (as `cronq check`).
    let dst = match shown.schedule.members() {
        Some(members) => members
            .flat_map(|m| {
                m.dst_warnings(from, horizon)
                    .into_iter()
                    .map(move |w| format!("{:?} {w}", m.as_str()))
            })
            .collect(),
        None => shown
            .schedule
            .dst_warnings(from, horizon)
            .iter()
            .map(ToString::to_string)
            .collect(),
    };
    Some(JobPlan {
        job: shown.name.as_str().to_owned(),
        change,
        old_schedule: old.map(|j| j.schedule.as_str().to_owned()),
        new_schedule: new.map(|j| j.schedule.as_str().to_owned()),
        timezone: shown.timezone,
        appear,
        disappear,
        moved,
        catchup: Vec::new(),
        dst,
        truncated: old_cut || new_cut,
    })
}

/// `job`'s occurrences in `(from, to]`, and whether there were more than
/// [`MAX_OCCURRENCES`].
fn window(job: &Job, from: DateTime<Utc>, to: DateTime<Utc>) -> (Vec<DateTime<Utc>>, bool) {
    let mut times: Vec<DateTime<Utc>> = job
        .schedule
        .iter_after(from)
        .take_while(|t| *t <= to)
        .take(MAX_OCCURRENCES + 1)
        .collect();
    let cut = times.len() > MAX_OCCURRENCES;
    times.truncate(MAX_OCCURRENCES);
    (times, cut)
}

/// The occurrences that appear, disappear and move between two sorted lists. An
/// occurrence only the old list has and one only the new list has, next to each other in
/// time (no occurrence of either list between them), are one that moved; the others
/// appear or disappear.
pub fn diff(
    old: &[DateTime<Utc>],
    new: &[DateTime<Utc>],
) -> (Vec<DateTime<Utc>>, Vec<DateTime<Utc>>, Vec<Move>) {
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Side {
        Both,
        Old,
        New,
    }
    let mut timeline: Vec<(DateTime<Utc>, Side)> = Vec::with_capacity(old.len() + new.len());
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        match (old.get(i), new.get(j)) {
            (Some(a), Some(b)) if a == b => {
                timeline.push((*a, Side::Both));
                i += 1;
                j += 1;
            }
            (Some(a), Some(b)) if a < b => {
                timeline.push((*a, Side::Old));
                i += 1;
            }
            (Some(a), None) => {
                timeline.push((*a, Side::Old));
                i += 1;
            }
            (_, Some(b)) => {
                timeline.push((*b, Side::New));
                j += 1;
            }
            (None, None) => break,
        }
    }
    let (mut appear, mut disappear, mut moved) = (Vec::new(), Vec::new(), Vec::new());
    let mut k = 0;
    while k < timeline.len() {
        let (t, side) = timeline[k];
        let next = timeline.get(k + 1).copied();
        match (side, next) {
            (Side::Old, Some((u, Side::New))) => {
                moved.push(Move { from: t, to: u });
                k += 2;
                continue;
            }
            (Side::New, Some((u, Side::Old))) => {
                moved.push(Move { from: u, to: t });
                k += 2;
                continue;
            }
            (Side::Old, _) => disappear.push(t),
            (Side::New, _) => appear.push(t),
            (Side::Both, _) => {}
        }
        k += 1;
    }
    (appear, disappear, moved)
}

fn utc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn local(t: DateTime<Utc>, tz: chrono_tz::Tz) -> String {
    t.with_timezone(&tz)
        .to_rfc3339_opts(SecondsFormat::Secs, false)
}

/// The plan as one JSON document (its shape is in `docs/operations.md`, "cronq plan").
pub fn json(plan: &Plan) -> Value {
    let jobs: Vec<Value> = plan
        .jobs
        .iter()
        .map(|j| {
            let tz = j.timezone;
            let at = |t: &DateTime<Utc>| json!({ "utc": utc(*t), "local": local(*t, tz) });
            json!({
                "job": j.job,
                "change": j.change.as_str(),
                "timezone": tz.name(),
                "schedule": { "old": j.old_schedule, "new": j.new_schedule },
                "appear": j.appear.iter().map(at).collect::<Vec<_>>(),
                "disappear": j.disappear.iter().map(at).collect::<Vec<_>>(),
                "move": j.moved.iter().map(|m| json!({ "from": at(&m.from), "to": at(&m.to) })).collect::<Vec<_>>(),
                "catchup": j.catchup.iter().map(at).collect::<Vec<_>>(),
                "dst": j.dst,
                "truncated": j.truncated,
            })
        })
        .collect();
    json!({
        "from": utc(plan.from),
        "to": utc(plan.to),
        "against": plan.against,
        "changed": plan.changes(),
        "jobs": jobs,
    })
}

/// How many occurrences a table lists per kind and job before "and N more".
const LISTED: usize = 5;

/// The plan as text: a table of the jobs that change, then each one's occurrences.
pub fn text(plan: &Plan) -> String {
    let window = format!("{} to {}", output::utc(plan.from), output::utc(plan.to));
    if !plan.changes() {
        return format!("no job changes against {} ({window})\n", plan.against);
    }
    let mut out = format!("against {} ({window}):\n", plan.against);
    let mut table = Table::new(&[
        "JOB",
        "CHANGE",
        "SCHEDULE",
        "APPEAR",
        "DISAPPEAR",
        "MOVE",
        "DST",
    ]);
    for j in &plan.jobs {
        let schedule = match (&j.old_schedule, &j.new_schedule) {
            (Some(o), Some(n)) if o != n => format!("{o} -> {n}"),
            (_, Some(n)) => n.clone(),
            (Some(o), None) => o.clone(),
            (None, None) => "-".to_owned(),
        };
        table.row(vec![
            j.job.clone(),
            j.change.as_str().to_owned(),
            schedule,
            j.appear.len().to_string(),
            j.disappear.len().to_string(),
            j.moved.len().to_string(),
            j.dst.len().to_string(),
        ]);
    }
    out.push_str(&table.render());
    for j in &plan.jobs {
        let lines = job_lines(j);
        if !lines.is_empty() {
            out.push_str(&format!(
                "{} ({}):\n  {}\n",
                j.job,
                j.change.as_str(),
                lines.join("\n  ")
            ));
        }
    }
    out.push_str("a reload publishes no catch-up: new and changed jobs start at the reload\n");
    out
}

/// One job's occurrences that appear, disappear and move (at most [`LISTED`] of each, then
/// "and N more"), its daylight-saving notes: a line each (the table of `cronq plan` and the
/// dashboard's job editor show them).
pub fn job_lines(j: &JobPlan) -> Vec<String> {
    let tz = j.timezone;
    let at = |t: &DateTime<Utc>| {
        format!(
            "{} ({} {})",
            output::utc(*t),
            output::local(&t.with_timezone(&tz)),
            tz.name()
        )
    };
    let mut lines = Vec::new();
    list(&mut lines, "appears", j.appear.iter().map(at));
    list(&mut lines, "disappears", j.disappear.iter().map(at));
    list(
        &mut lines,
        "moves",
        j.moved
            .iter()
            .map(|m| format!("{} -> {}", at(&m.from), at(&m.to))),
    );
    if !j.moves_occurrences() {
        lines.push("its occurrences in the window stay as they are".to_owned());
    }
    for d in &j.dst {
        lines.push(format!("daylight saving: {d}"));
    }
    if j.truncated {
        lines.push(format!(
            "only the first {MAX_OCCURRENCES} occurrences of a side were compared"
        ));
    }
    lines
}

fn list(lines: &mut Vec<String>, what: &str, items: impl ExactSizeIterator<Item = String>) {
    let n = items.len();
    for (i, item) in items.enumerate() {
        if i == LISTED {
            lines.push(format!("{what}: and {} more", n - LISTED));
            break;
        }
        lines.push(format!("{what}: {item}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn config(jobs: &str) -> Config {
        Config::from_toml_at(jobs, Path::new("c.toml"), t("2026-12-01T00:00:00Z")).unwrap()
    }

    #[test]
    fn a_moved_daily_job_moves_its_one_occurrence() {
        let old = config(
            "[[job]]\nname = \"a\"\nschedule = \"0 9 * * *\"\n[[job]]\nname = \"same\"\nschedule = \"0 * * * *\"\n",
        );
        let new = config(
            "[[job]]\nname = \"a\"\nschedule = \"0 10 * * *\"\n[[job]]\nname = \"same\"\nschedule = \"0 * * * *\"\n",
        );
        let p = plan(
            &old,
            &new,
            "old",
            t("2026-12-01T00:00:00Z"),
            Duration::from_secs(24 * 3600),
        );
        assert_eq!(p.jobs.len(), 1, "the unchanged job is not listed");
        let a = &p.jobs[0];
        assert_eq!(a.change, Change::Changed);
        assert_eq!(
            a.moved,
            [Move {
                from: t("2026-12-01T09:00:00Z"),
                to: t("2026-12-01T10:00:00Z")
            }]
        );
        assert!(a.appear.is_empty() && a.disappear.is_empty());
        let doc = json(&p);
        assert_eq!(doc["changed"], true);
        assert_eq!(
            doc["jobs"][0]["move"][0]["from"]["utc"],
            "2026-12-01T09:00:00Z"
        );
        assert_eq!(
            doc["jobs"][0]["move"][0]["to"]["utc"],
            "2026-12-01T10:00:00Z"
        );
    }

    #[test]
    fn occurrences_next_to_each_other_move_the_others_appear_or_disappear() {
        // Every 10 minutes becomes every 15: :00 and :30 stay, :10 -> :15, :40 -> :45, and
        // :20 and :50 disappear.
        let old = config("[[job]]\nname = \"a\"\nschedule = \"*/10 * * * *\"\n");
        let new = config("[[job]]\nname = \"a\"\nschedule = \"*/15 * * * *\"\n");
        let p = plan(
            &old,
            &new,
            "old",
            t("2026-12-01T00:00:00Z"),
            Duration::from_secs(3600),
        );
        let a = &p.jobs[0];
        let hm = |v: &[DateTime<Utc>]| {
            v.iter()
                .map(|t| t.format("%H:%M").to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(hm(&a.disappear), ["00:20", "00:50"]);
        assert!(a.appear.is_empty());
        let moves: Vec<(String, String)> = a
            .moved
            .iter()
            .map(|m| {
                (
                    m.from.format("%H:%M").to_string(),
                    m.to.format("%H:%M").to_string(),
                )
            })
            .collect();
        assert_eq!(
            moves,
            [
                ("00:10".into(), "00:15".into()),
                ("00:40".into(), "00:45".into())
            ]
        );
    }

    #[test]
    fn added_and_removed_jobs_list_their_occurrences_and_exclusions_count() {
        let old = config("[[job]]\nname = \"gone\"\nschedule = \"0 12 * * *\"\n");
        let new = config(
            "[[job]]\nname = \"new\"\nschedule = \"0 12 * * *\"\nexclude = [\"2026-12-02\"]\n",
        );
        let p = plan(
            &old,
            &new,
            "old",
            t("2026-12-01T00:00:00Z"),
            Duration::from_secs(3 * 24 * 3600),
        );
        let names: Vec<(&str, Change)> =
            p.jobs.iter().map(|j| (j.job.as_str(), j.change)).collect();
        assert_eq!(names, [("gone", Change::Removed), ("new", Change::Added)]);
        assert_eq!(p.jobs[0].disappear.len(), 3);
        assert_eq!(
            p.jobs[1].appear,
            [t("2026-12-01T12:00:00Z"), t("2026-12-03T12:00:00Z")],
            "the excluded date does not appear"
        );
    }

    #[test]
    fn a_change_that_keeps_the_occurrences_still_changes_and_the_same_config_does_not() {
        let old = config("[[job]]\nname = \"a\"\nschedule = \"0 9 * * *\"\n");
        let new = config("[[job]]\nname = \"a\"\nschedule = \"0 9 * * *\"\ntimeout = \"1m\"\n");
        let p = plan(
            &old,
            &new,
            "old",
            t("2026-12-01T00:00:00Z"),
            Duration::from_secs(3600),
        );
        assert!(p.changes());
        assert!(!p.jobs[0].moves_occurrences());
        let same = plan(
            &old,
            &old,
            "old",
            t("2026-12-01T00:00:00Z"),
            Duration::from_secs(3600),
        );
        assert!(!same.changes());
        assert!(text(&same).starts_with("no job changes"));
    }

    #[test]
    fn each_schedule_of_a_union_gets_its_daylight_saving_notes() {
        let old = config(
            "[[job]]\nname = \"a\"\nschedule = \"0 12 * * *\"\ntimezone = \"America/New_York\"\n",
        );
        let new = config(
            "[[job]]\nname = \"a\"\nschedules = [\"0 12 * * *\", \"30 2 * * *\"]\ntimezone = \"America/New_York\"\n",
        );
        let p = plan(
            &old,
            &new,
            "old",
            t("2027-03-13T12:00:00Z"),
            Duration::from_secs(2 * 24 * 3600),
        );
        let a = &p.jobs[0];
        assert_eq!(a.dst.len(), 1, "{:?}", a.dst);
        assert!(
            a.dst[0].starts_with("\"30 2 * * *\" fires at 02:30"),
            "{}",
            a.dst[0]
        );
        assert_eq!(
            a.appear,
            [t("2027-03-14T07:00:00Z"), t("2027-03-15T06:30:00Z")],
            "02:30 on 2027-03-14 runs at 03:00 EDT, the next day at 02:30 EDT: {a:?}"
        );
    }

    #[test]
    fn a_fire_time_in_a_daylight_saving_gap_is_named() {
        let old = config(
            "[[job]]\nname = \"a\"\nschedule = \"30 1 * * *\"\ntimezone = \"America/New_York\"\n",
        );
        let new = config(
            "[[job]]\nname = \"a\"\nschedule = \"30 2 * * *\"\ntimezone = \"America/New_York\"\n",
        );
        let p = plan(
            &old,
            &new,
            "old",
            t("2027-03-13T12:00:00Z"),
            Duration::from_secs(2 * 24 * 3600),
        );
        let a = &p.jobs[0];
        assert_eq!(a.dst.len(), 1, "{:?}", a.dst);
        assert!(
            a.dst[0].contains("does not exist on 2027-03-14"),
            "{}",
            a.dst[0]
        );
    }
}
