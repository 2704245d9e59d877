//! Which instances run another config than a reference one (the leader's), and in which
//! jobs: their overall digests are compared first, and only for an instance whose overall
//! digest differs are the per-job digests read and compared (two sorted lists, one merge),
//! once per pair of digests.
//!
//! Invariant: what a difference names is bounded: at most [`NAMED`] job names, with the
//! count of them all.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};

use cronq_shared::names::JobName;
use cronq_shared::registry::digest::{ConfigDigest, JobDigest, JobDigests};
use cronq_shared::registry::{Beat, Registry, Role};
use cronq_shared::store::StoreError;

/// How many differing jobs a difference names (the rest are counted).
pub const NAMED: usize = 10;

/// One instance that runs another config than the reference.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Difference {
    /// The instance.
    pub instance: String,
    /// What it is.
    pub role: Role,
    /// Its overall digest.
    pub digest: String,
    /// The jobs whose definition differs, that it lacks, or that only it has: the first
    /// [`NAMED`] by name; empty when its per-job digests are not known.
    pub jobs: Vec<JobName>,
    /// How many jobs differ in all; `None` when its per-job digests are not known (they
    /// lapsed, or it has not written them yet).
    pub count: Option<usize>,
}

impl Difference {
    /// `consumer-2 (consumer): jobs a, b (2)` for a log line or a page.
    pub fn describe(&self) -> String {
        match self.count {
            Some(n) => {
                let names: Vec<&str> = self.jobs.iter().map(JobName::as_str).collect();
                let more = if n > names.len() { ", …" } else { "" };
                format!(
                    "{} ({}): jobs {}{more} ({n} in all)",
                    self.instance,
                    self.role.as_str(),
                    names.join(", ")
                )
            }
            None => format!(
                "{} ({}): digest {}, jobs not known",
                self.instance,
                self.role.as_str(),
                self.digest
            ),
        }
    }
}

/// A reference config: its overall digest and per-job digests (the process's own
/// [`ConfigDigest`] shares its list, not a copy).
pub type Reference = ConfigDigest;

/// Compares instances with a reference, remembering what it compared.
#[derive(Debug, Default)]
pub struct Comparer {
    /// Per-job digests read, by overall digest.
    maps: HashMap<String, JobDigests>,
    /// Differing jobs (first [`NAMED`], count), by (reference digest, other digest).
    diffs: HashMap<(String, String), (Vec<JobName>, usize)>,
}

impl Comparer {
    /// The per-job digests of `digest`, read once.
    ///
    /// # Errors
    /// [`StoreError`] when the registry cannot be read.
    pub async fn map(
        &mut self,
        registry: &dyn Registry,
        digest: &str,
    ) -> Result<Option<JobDigests>, StoreError> {
        if let Some(m) = self.maps.get(digest) {
            return Ok(Some(m.clone()));
        }
        let Some(map) = registry.digests(digest).await? else {
            return Ok(None);
        };
        self.maps.insert(digest.to_owned(), map.clone());
        Ok(Some(map))
    }

    /// The instances of `beats` whose overall digest differs from `reference`'s, in
    /// instance order.
    ///
    /// # Errors
    /// [`StoreError`] when a per-job map cannot be read.
    pub async fn differences(
        &mut self,
        registry: &dyn Registry,
        reference: &Reference,
        beats: &[Beat],
    ) -> Result<Vec<Difference>, StoreError> {
        // Forget what no live instance runs any more.
        let live: BTreeSet<&str> = beats.iter().map(|b| b.digest.as_str()).collect();
        self.maps.retain(|d, _| live.contains(d.as_str()));
        self.diffs
            .retain(|(r, d), _| *r == reference.overall && live.contains(d.as_str()));
        let mut out = Vec::new();
        for beat in beats.iter().filter(|b| b.digest != reference.overall) {
            let pair = (reference.overall.clone(), beat.digest.clone());
            if !self.diffs.contains_key(&pair)
                && let Some(map) = self.map(registry, &beat.digest).await?
            {
                self.diffs
                    .insert(pair.clone(), differing(&reference.jobs, &map));
            }
            let (jobs, count) = match self.diffs.get(&pair) {
                Some((jobs, n)) => (jobs.clone(), Some(*n)),
                None => (Vec::new(), None),
            };
            out.push(Difference {
                instance: beat.instance.clone(),
                role: beat.role,
                digest: beat.digest.clone(),
                jobs,
                count,
            });
        }
        Ok(out)
    }
}

/// The jobs that differ between two per-job lists sorted by name ([`JobDigests`]): the
/// first [`NAMED`] by name, and how many in all.
pub fn differing(a: &[(JobName, JobDigest)], b: &[(JobName, JobDigest)]) -> (Vec<JobName>, usize) {
    let (mut i, mut j) = (0, 0);
    let mut names = Vec::new();
    let mut count = 0;
    let mut differs = |name: &JobName| {
        if names.len() < NAMED {
            names.push(name.clone());
        }
        count += 1;
    };
    while i < a.len() || j < b.len() {
        let order = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) => x.0.cmp(&y.0),
            (Some(_), None) => Ordering::Less,
            _ => Ordering::Greater,
        };
        match order {
            Ordering::Less => {
                differs(&a[i].0);
                i += 1;
            }
            Ordering::Greater => {
                differs(&b[j].0);
                j += 1;
            }
            Ordering::Equal => {
                if a[i].1 != b[j].1 {
                    differs(&a[i].0);
                }
                i += 1;
                j += 1;
            }
        }
    }
    (names, count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(d: u8) -> JobDigest {
        JobDigest::parse(&format!("{d:032x}")).unwrap()
    }

    fn map(pairs: &[(&str, u8)]) -> Vec<(JobName, JobDigest)> {
        pairs
            .iter()
            .map(|(j, d)| (JobName::new(*j).unwrap(), digest(*d)))
            .collect()
    }

    #[test]
    fn changed_missing_and_extra_jobs_differ_and_the_names_are_capped() {
        let a = map(&[("a", 1), ("b", 2), ("c", 3), ("e", 5)]);
        let b = map(&[("a", 1), ("b", 9), ("d", 4), ("e", 5), ("f", 6)]);
        let (names, n) = differing(&a, &b);
        let names: Vec<&str> = names.iter().map(JobName::as_str).collect();
        assert_eq!((names, n), (vec!["b", "c", "d", "f"], 4));

        let many: Vec<(String, u8)> = (0..25).map(|i| (format!("j{i:02}"), 0)).collect();
        let many: Vec<_> = many
            .iter()
            .map(|(j, d)| (JobName::new(j.as_str()).unwrap(), digest(*d)))
            .collect();
        let (names, n) = differing(&[], &many);
        assert_eq!((names.len(), n), (NAMED, 25));
        assert_eq!(names[0].as_str(), "j00");
    }
}
