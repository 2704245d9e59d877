//! Which instances run another config than a reference one (the leader's), and in which
//! jobs: their overall digests are compared first, and only for an instance whose overall
//! digest differs are the per-job digest maps read and compared, once per pair of digests.
//!
//! Invariant: what a difference names is bounded: at most [`NAMED`] job names, with the
//! count of them all.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use super::{Beat, Registry, Role};
use crate::names::JobName;
use crate::store::StoreError;

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

/// A reference config: its overall digest and per-job digests.
#[derive(Debug, Clone)]
pub struct Reference {
    /// Overall digest.
    pub overall: String,
    /// Per job.
    pub jobs: Arc<HashMap<JobName, String>>,
}

impl From<&super::digest::ConfigDigest> for Reference {
    fn from(d: &super::digest::ConfigDigest) -> Self {
        Self {
            overall: d.overall.clone(),
            jobs: Arc::new(d.jobs.iter().cloned().collect()),
        }
    }
}

/// Compares instances with a reference, remembering what it compared.
#[derive(Debug, Default)]
pub struct Comparer {
    /// Per-job maps read, by overall digest.
    maps: HashMap<String, Arc<HashMap<JobName, String>>>,
    /// Differing jobs (first [`NAMED`], count), by (reference digest, other digest).
    diffs: HashMap<(String, String), (Vec<JobName>, usize)>,
}

impl Comparer {
    /// The per-job map of `digest`, read once.
    ///
    /// # Errors
    /// [`StoreError`] when the registry cannot be read.
    pub async fn map(
        &mut self,
        registry: &dyn Registry,
        digest: &str,
    ) -> Result<Option<Arc<HashMap<JobName, String>>>, StoreError> {
        if let Some(m) = self.maps.get(digest) {
            return Ok(Some(Arc::clone(m)));
        }
        let Some(map) = registry.digests(digest).await? else {
            return Ok(None);
        };
        let map = Arc::new(map);
        self.maps.insert(digest.to_owned(), Arc::clone(&map));
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

/// The jobs that differ between two per-job maps: the first [`NAMED`] by name, and how
/// many in all.
pub fn differing(
    a: &HashMap<JobName, String>,
    b: &HashMap<JobName, String>,
) -> (Vec<JobName>, usize) {
    let mut names: Vec<&JobName> = a
        .iter()
        .filter(|(job, digest)| b.get(*job) != Some(*digest))
        .map(|(job, _)| job)
        .chain(b.keys().filter(|job| !a.contains_key(*job)))
        .collect();
    let count = names.len();
    names.sort();
    (names.into_iter().take(NAMED).cloned().collect(), count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HashMap<JobName, String> {
        pairs
            .iter()
            .map(|(j, d)| (JobName::new(*j).unwrap(), (*d).to_owned()))
            .collect()
    }

    #[test]
    fn changed_missing_and_extra_jobs_differ_and_the_names_are_capped() {
        let a = map(&[("a", "1"), ("b", "2"), ("c", "3")]);
        let b = map(&[("a", "1"), ("b", "9"), ("d", "4")]);
        let (names, n) = differing(&a, &b);
        let names: Vec<&str> = names.iter().map(JobName::as_str).collect();
        assert_eq!((names, n), (vec!["b", "c", "d"], 3));

        let many: Vec<(String, String)> =
            (0..25).map(|i| (format!("j{i:02}"), "x".into())).collect();
        let many = many
            .iter()
            .map(|(j, d)| (JobName::new(j.as_str()).unwrap(), d.clone()))
            .collect();
        let (names, n) = differing(&HashMap::new(), &many);
        assert_eq!((names.len(), n), (NAMED, 25));
        assert_eq!(names[0].as_str(), "j00");
    }
}
