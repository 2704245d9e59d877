//! A file job's definitions over time, from the recorded loads of the config file
//! (`crate::recorded`): each version of the file is in force from when it was first
//! loaded until the next one was, so `cronq verify` expects the occurrences of the schedule
//! that ran then, not of the one that runs now.
//!
//! Invariant: consecutive versions that define a job alike (the same digest) are one
//! definition, so a reload that did not change a job adds no seam (and no optional
//! occurrences, see `super::SETTLE`) to it; a job absent from a version expects nothing
//! while that version was in force; before the oldest version known, its definition holds.

use std::borrow::Cow;
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::Definition;
use crate::config::Config;
use crate::names::JobName;
use crate::registry::digest::{JobDigest, job_digest};

/// One version of the config file: in force from `since` (when it was first loaded).
#[derive(Debug, Clone)]
pub struct FileVersion {
    /// When a leader first loaded it.
    pub since: DateTime<Utc>,
    /// The config, as recorded.
    pub config: Config,
}

/// The definitions of every file job of `versions` (oldest first): per job, one per
/// stretch of versions that define it alike.
pub fn file_definitions(versions: &[FileVersion]) -> BTreeMap<JobName, Vec<Definition<'static>>> {
    let mut out: BTreeMap<JobName, Vec<(Option<JobDigest>, Definition<'static>)>> = BTreeMap::new();
    for (i, version) in versions.iter().enumerate() {
        // The oldest version holds from before anything is known.
        let since = (i > 0).then_some(version.since);
        let until = versions.get(i + 1).map(|next| next.since);
        for job in &version.config.jobs {
            let digest = job_digest(job);
            let defs = out.entry(job.name.clone()).or_default();
            match defs.last_mut() {
                // The same definition, continued without a break: extend it.
                Some((Some(d), def)) if *d == digest && def.until == since => {
                    def.until = until;
                }
                _ => defs.push((
                    Some(digest),
                    Definition {
                        since,
                        until,
                        job: Cow::Owned(job.clone()),
                    },
                )),
            }
        }
    }
    out.into_iter()
        .map(|(name, defs)| (name, defs.into_iter().map(|(_, d)| d).collect()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn version(since: &str, jobs: &str) -> FileVersion {
        FileVersion {
            since: t(since),
            config: Config::from_toml_at(jobs, Path::new("c.toml"), t("2026-12-01T00:00:00Z"))
                .unwrap(),
        }
    }

    #[test]
    fn each_job_has_one_definition_per_stretch_it_was_defined_alike() {
        let a1 = "[[job]]\nname = \"a\"\nschedule = \"@every 2s\"\n";
        let a2 = "[[job]]\nname = \"a\"\nschedule = \"@every 1s\"\n";
        let b = "[[job]]\nname = \"b\"\nschedule = \"0 * * * *\"\n";
        let versions = [
            version("2026-12-01T10:00:00Z", &format!("{a1}{b}")),
            // A reload that changes `a` only.
            version("2026-12-01T11:00:00Z", &format!("{a2}{b}")),
            // `b` removed, then `a` unchanged.
            version("2026-12-01T12:00:00Z", a2),
        ];
        let defs = file_definitions(&versions);
        let a = &defs[&JobName::new("a").unwrap()];
        assert_eq!(a.len(), 2);
        assert_eq!(
            (a[0].since, a[0].until),
            (None, Some(t("2026-12-01T11:00:00Z")))
        );
        assert_eq!(a[0].job.schedule.as_str(), "@every 2s");
        assert_eq!(
            (a[1].since, a[1].until),
            (Some(t("2026-12-01T11:00:00Z")), None)
        );
        assert_eq!(a[1].job.schedule.as_str(), "@every 1s");
        let b = &defs[&JobName::new("b").unwrap()];
        assert_eq!(
            b.len(),
            1,
            "unchanged across the first reload: one definition"
        );
        assert_eq!(
            (b[0].since, b[0].until),
            (None, Some(t("2026-12-01T12:00:00Z")))
        );
    }

    #[test]
    fn a_job_that_comes_back_expects_nothing_while_it_was_gone() {
        let a = "[[job]]\nname = \"a\"\nschedule = \"@every 1s\"\n";
        let other = "[[job]]\nname = \"other\"\nschedule = \"@every 1s\"\n";
        let versions = [
            version("2026-12-01T10:00:00Z", a),
            version("2026-12-01T11:00:00Z", other),
            version("2026-12-01T12:00:00Z", a),
        ];
        let defs = file_definitions(&versions);
        let a = &defs[&JobName::new("a").unwrap()];
        assert_eq!(a.len(), 2);
        assert_eq!(a[0].until, Some(t("2026-12-01T11:00:00Z")));
        assert_eq!(a[1].since, Some(t("2026-12-01T12:00:00Z")));
    }
}
