//! [`Config::job`](super::Config::job)'s index: where each job is in the config's list, by
//! name, built at the first lookup of a config of more than a few jobs.
//!
//! A consumer looks its job up at every delivery, the leader at each request and each
//! run its alerts read, a reload once for each runtime job deleted: a scan of the list
//! took 7 ms at 100,000 jobs and 76 ms at a million on 2 cores (cold), far more than
//! everything else a delivery costs. The index, a position of 4 bytes a job in a table of
//! about twice as many slots, is built once per config (a reload makes a new config): 44
//! ms at a million jobs.
//!
//! Invariant: a position found is checked against the job there, and a name not found is
//! looked for by a scan unless the list still starts where, and is as long as, when the
//! index was built. So a list that grows or shrinks after a lookup (`Config::jobs` is
//! public: a merge pushes, a chain check retains) is still read right; one whose jobs are
//! swapped or renamed in place, or that shrinks and grows back to its length, after a
//! lookup is not, and no code does that.

use std::fmt;
use std::hash::BuildHasher;
use std::sync::OnceLock;

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use super::Job;

/// Up to this many jobs, a scan is as quick as a hash and builds nothing.
const SCANNED: usize = 32;

/// The index of one config's jobs; a clone starts without one, as the list of a clone is
/// about to change (runtime jobs merged in, retired jobs kept).
#[derive(Default)]
pub(super) struct ByName(OnceLock<Built>);

pub(super) struct Built {
    /// Where the list it was built from starts, and its length.
    of: (usize, usize),
    hasher: RandomState,
    /// Positions in the list, hashed by the name there.
    table: HashTable<u32>,
}

impl Built {
    fn new(jobs: &[Job]) -> Self {
        let hasher = RandomState::default();
        let hash = |job: &Job| hasher.hash_one(job.name.as_str());
        let mut table = HashTable::with_capacity(jobs.len());
        for (i, job) in jobs.iter().enumerate() {
            let at = u32::try_from(i).expect("fewer than 2^32 jobs (checked by the caller)");
            table.insert_unique(hash(job), at, |&at| hash(&jobs[at as usize]));
        }
        Self {
            of: (jobs.as_ptr().addr(), jobs.len()),
            hasher,
            table,
        }
    }
}

impl ByName {
    /// The index of `jobs`, built now if not yet; `None` when a scan is as good.
    pub(super) fn build(&self, jobs: &[Job]) -> Option<&Built> {
        if jobs.len() <= SCANNED || u32::try_from(jobs.len()).is_err() {
            return None;
        }
        Some(self.0.get_or_init(|| Built::new(jobs)))
    }

    /// The job of `jobs` called `name`.
    pub(super) fn find<'a>(&self, jobs: &'a [Job], name: &str) -> Option<&'a Job> {
        let Some(built) = self.build(jobs) else {
            return scan(jobs, name);
        };
        let named = |at: &u32| {
            jobs.get(*at as usize)
                .is_some_and(|j| j.name.as_str() == name)
        };
        if let Some(&at) = built.table.find(built.hasher.hash_one(name), named) {
            return jobs.get(at as usize);
        }
        if built.of == (jobs.as_ptr().addr(), jobs.len()) {
            None
        } else {
            scan(jobs, name)
        }
    }
}

fn scan<'a>(jobs: &'a [Job], name: &str) -> Option<&'a Job> {
    jobs.iter().find(|j| j.name.as_str() == name)
}

impl Clone for ByName {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl fmt::Debug for ByName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ByName")
            .field("built", &self.0.get().map(|b| b.table.len()))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;
    use std::path::Path;

    use super::super::Config;

    fn config(jobs: usize) -> Config {
        let mut text = String::new();
        for i in 0..jobs {
            let _ = writeln!(
                text,
                "[[job]]\nname = \"j{i}\"\nschedule = \"@every 1s\"\ncommand = [\"true\"]\n"
            );
        }
        Config::from_toml(&text, Path::new("by_name.toml")).expect("valid")
    }

    #[test]
    fn every_job_is_found_by_its_name_and_no_other() {
        for jobs in [1, 32, 33, 1_000] {
            let config = config(jobs);
            for (i, job) in config.jobs.iter().enumerate() {
                let found = config.job(&format!("j{i}")).map(|j| j.name.as_str());
                assert_eq!(found, Some(job.name.as_str()), "{jobs} jobs");
            }
            assert!(config.job(&format!("j{jobs}")).is_none(), "{jobs} jobs");
            assert!(config.job("").is_none());
        }
    }

    #[test]
    fn index_names_builds_the_index_of_a_config_of_more_than_a_few_jobs_only() {
        let small = config(32);
        small.index_names();
        assert!(small.by_name.0.get().is_none(), "32 jobs are scanned");
        let large = config(33);
        assert!(
            large.by_name.0.get().is_none(),
            "not before it is asked for"
        );
        large.index_names();
        assert_eq!(large.by_name.0.get().map(|b| b.table.len()), Some(33));
        assert!(
            large.clone().by_name.0.get().is_none(),
            "a clone builds its own"
        );
    }

    #[test]
    fn a_list_changed_under_a_built_index_is_still_read_right() {
        let mut config = config(100);
        assert!(config.job("j7").is_some(), "builds the index");
        let mut extra = config.job("j3").expect("j3").clone();
        extra.name = crate::names::JobName::new("extra").expect("name");
        config.jobs.push(extra);
        assert_eq!(config.job("extra").map(|j| j.name.as_str()), Some("extra"));
        config.jobs.retain(|j| j.name.as_str() != "j7");
        assert!(config.job("j7").is_none());
        for i in (0..100).filter(|i| *i != 7) {
            let name = format!("j{i}");
            assert_eq!(config.job(&name).map(|j| j.name.as_str()), Some(&*name));
        }
        // A clone builds its own index, of its own list.
        let mut clone = config.clone();
        clone.jobs.swap(0, 50);
        assert_eq!(clone.job("j0").map(|j| j.name.as_str()), Some("j0"));
        assert_eq!(clone.job("j50").map(|j| j.name.as_str()), Some("j50"));
        assert_eq!(config.job("j0").map(|j| j.name.as_str()), Some("j0"));
    }
}
