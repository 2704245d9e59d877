//! The jobs the dashboard lists: the config file's, then the runtime jobs of the job store
//! (`cronq_shared::jobs`) merged in as every producer and consumer merges them
//! (`cronq_shared::reload`). The merged view is kept and rebuilt only when
//! [`JobStore::version`] moved or another file config came in (a reload, a new recorded
//! config: [`super::Source::config`]), so a listing of 100,000 jobs costs one version read,
//! not a parse of every runtime job.
//!
//! Invariant: a view's `by_name` and `revisions` describe its own `config`, built from its
//! `file`; a view is replaced whole, never changed in place.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use cronq_shared::config::{Config, RuntimeCache};
use cronq_shared::jobs::JobStore;
use cronq_shared::names::JobName;
use tokio::sync::watch;

use super::read::within;

/// What a runtime job's row shows of its current revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    /// Its revision number.
    pub revision: u64,
    /// Who wrote it.
    pub by: String,
}

/// The file's jobs and the runtime jobs, at one version of the job store.
#[derive(Debug)]
pub struct View {
    /// The file's config it was built from (its jobs come first in `config`).
    pub file: Arc<Config>,
    /// The jobs of `file` in name order.
    file_by_name: Arc<Vec<usize>>,
    /// The file's config with the runtime jobs added after its own.
    pub config: Arc<Config>,
    /// Every index of `config.jobs`, in job name order ([`by_name`]).
    pub by_name: Vec<usize>,
    /// The runtime jobs of `config`, with their revision.
    pub runtime: HashMap<JobName, Stamp>,
    /// The job store's version it was read at (`None`: only the file's jobs).
    pub version: Option<u64>,
}

impl View {
    fn of_file(file: Arc<Config>) -> Self {
        let order = Arc::new(by_name(&file));
        Self {
            by_name: order.to_vec(),
            file_by_name: order,
            config: file.clone(),
            file,
            runtime: HashMap::new(),
            version: None,
        }
    }

    /// The revision of `job` when it is a runtime job.
    pub fn stamp(&self, job: &JobName) -> Option<&Stamp> {
        self.runtime.get(job)
    }
}

/// Every index of `config.jobs`, in the order of the job names.
pub fn by_name(config: &Config) -> Vec<usize> {
    let mut order: Vec<usize> = (0..config.jobs.len()).collect();
    order.sort_by(|a, b| {
        config.jobs[*a]
            .name
            .as_str()
            .cmp(config.jobs[*b].name.as_str())
    });
    order
}

/// Every index of `config.jobs` in job name order, from `file_by_name` (the order of its
/// first `file_len` jobs, the file's) and the runtime jobs after them: one merge, not a
/// sort of every job.
fn merged_by_name(config: &Config, file_by_name: &[usize], file_len: usize) -> Vec<usize> {
    let name = |i: &usize| config.jobs[*i].name.as_str();
    let mut runtime: Vec<usize> = (file_len..config.jobs.len()).collect();
    runtime.sort_by(|a, b| name(a).cmp(name(b)));
    let mut out = Vec::with_capacity(config.jobs.len());
    let (mut f, mut r) = (file_by_name.iter().peekable(), runtime.iter().peekable());
    loop {
        let next = match (f.peek(), r.peek()) {
            (Some(a), Some(b)) if name(a) <= name(b) => f.next(),
            (Some(_), Some(_)) | (None, Some(_)) => r.next(),
            (Some(_), None) => f.next(),
            (None, None) => break,
        };
        out.extend(next);
    }
    out
}

/// The current [`View`], rebuilt when the job store's version moves or the file's config
/// is another.
pub struct Views {
    file: watch::Receiver<Arc<Config>>,
    store: Arc<dyn JobStore>,
    current: RwLock<Arc<View>>,
    rebuilding: tokio::sync::Mutex<()>,
    /// The runtime jobs as resolved at their revisions against the file of the current
    /// view: a change of one among thousands resolves that one.
    cache: Arc<std::sync::Mutex<RuntimeCache>>,
}

impl Views {
    /// The views of the file's jobs, as `file` has them now, and of `store`'s runtime jobs.
    pub fn new(file: watch::Receiver<Arc<Config>>, store: Arc<dyn JobStore>) -> Self {
        let first = Arc::new(View::of_file(file.borrow().clone()));
        Self {
            file,
            store,
            current: RwLock::new(first),
            rebuilding: tokio::sync::Mutex::new(()),
            cache: Arc::default(),
        }
    }

    fn replace(&self, view: View) -> Arc<View> {
        let view = Arc::new(view);
        *self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = view.clone();
        view
    }

    fn last(&self) -> Arc<View> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The view of the file's config as it is now at the job store's current version: the
    /// kept one when neither moved, the kept one too when the store cannot be read (the
    /// snapshot reports the outage; another file's view waits for the store).
    pub async fn get(&self) -> Arc<View> {
        let file = self.file.borrow().clone();
        let same_file = |view: &View| Arc::ptr_eq(&view.file, &file);
        let last = self.last();
        if !file.runtime.jobs {
            if same_file(&last) && last.version.is_none() {
                return last;
            }
            let _one = self.rebuilding.lock().await;
            let last = self.last();
            if same_file(&last) && last.version.is_none() {
                return last;
            }
            let built = tokio::task::spawn_blocking(move || View::of_file(file)).await;
            return built.map_or(last, |view| self.replace(view));
        }
        let Ok(version) = within(self.store.version()).await else {
            return last;
        };
        if same_file(&last) && last.version == Some(version) {
            return last;
        }
        let _one = self.rebuilding.lock().await;
        let last = self.last();
        if same_file(&last) && last.version == Some(version) {
            return last;
        }
        let Ok(revisions) = within(self.store.list()).await else {
            return last;
        };
        // Another file: its jobs' order is made anew, and the runtime jobs resolve anew
        // against its defaults and handlers, as a reload does (`cronq_shared::reload`).
        let kept_order = same_file(&last).then(|| last.file_by_name.clone());
        let cache = self.cache.clone();
        let built = tokio::task::spawn_blocking(move || {
            let mut cache = cache
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let file_by_name = kept_order.unwrap_or_else(|| {
                *cache = RuntimeCache::default();
                Arc::new(by_name(&file))
            });
            let (config, _) = file.with_runtime_cached(&revisions, &mut cache);
            let runtime = revisions
                .iter()
                .filter_map(|r| {
                    let name = JobName::new(&r.name).ok()?;
                    config.runtime_since.contains_key(&name).then(|| {
                        (
                            name,
                            Stamp {
                                revision: r.revision,
                                by: r.by.clone(),
                            },
                        )
                    })
                })
                .collect();
            View {
                by_name: merged_by_name(&config, &file_by_name, file.jobs.len()),
                config: Arc::new(config),
                file,
                file_by_name,
                runtime,
                version: Some(version),
            }
        })
        .await;
        built.map_or(last, |view| self.replace(view))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_jobs_are_merged_in_name_order() {
        let file = Config::from_toml(
            "[handlers.ok]\ncommand = [\"true\"]\n[[job]]\nname = \"m\"\nschedule = \"@hourly\"\nhandler = \"ok\"\n[[job]]\nname = \"c\"\nschedule = \"@hourly\"\nhandler = \"ok\"\n",
            std::path::Path::new("cronq.toml"),
        )
        .unwrap();
        let at = chrono::Utc::now();
        let revisions: Vec<_> = ["z", "a", "n"]
            .iter()
            .map(|n| cronq_shared::jobs::Revision {
                name: (*n).to_owned(),
                revision: 1,
                spec: Some(format!(
                    "name = \"{n}\"\nschedule = \"@daily\"\nhandler = \"ok\"\n"
                )),
                by: "t".to_owned(),
                at,
            })
            .collect();
        let (config, _) = file.with_runtime(&revisions);
        let order = merged_by_name(&config, &by_name(&file), file.jobs.len());
        let names: Vec<&str> = order
            .iter()
            .map(|i| config.jobs[*i].name.as_str())
            .collect();
        assert_eq!(names, ["a", "c", "m", "n", "z"]);
        assert_eq!(order, by_name(&config));

        // A rebuild reuses the jobs at the same revision and reads the changed one.
        let mut cache = RuntimeCache::default();
        let _ = file.with_runtime_cached(&revisions, &mut cache);
        let mut changed = revisions.clone();
        changed[1].revision = 2;
        changed[1].spec = Some("name = \"a\"\nschedule = \"@weekly\"\nhandler = \"ok\"\n".into());
        changed.remove(0);
        let (merged, _) = file.with_runtime_cached(&changed, &mut cache);
        let names: Vec<&str> = merged.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names.len(), 4, "{names:?}");
        assert!(!names.contains(&"z"), "a deleted job stays: {names:?}");
        assert_eq!(merged.job("a").unwrap().schedule.as_str(), "@weekly");
        assert_eq!(merged.job("n").unwrap().schedule.as_str(), "@daily");
        assert_eq!(merged.runtime_since.len(), 2);
    }
}
