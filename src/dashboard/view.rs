//! The jobs the dashboard lists: the config file's, then the runtime jobs of the job store
//! (`cronq_shared::jobs`) merged in as every producer and consumer merges them
//! (`cronq_shared::reload`). The merged view is kept and rebuilt only when
//! [`JobStore::version`] moved, so a listing of 100,000 jobs costs one version read, not a
//! parse of every runtime job.
//!
//! Invariant: a view's `by_name` and `revisions` describe its own `config`; a view is
//! replaced whole, never changed in place.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use cronq_shared::config::Config;
use cronq_shared::jobs::JobStore;
use cronq_shared::names::JobName;

use super::query;
use super::snapshot::within;

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
    /// The file's config with the runtime jobs added after its own.
    pub config: Arc<Config>,
    /// Every index of `config.jobs`, in job name order (`query::by_name`).
    pub by_name: Vec<usize>,
    /// The runtime jobs of `config`, with their revision.
    pub runtime: HashMap<JobName, Stamp>,
    /// The job store's version it was read at (`None`: only the file's jobs).
    pub version: Option<u64>,
}

impl View {
    fn of_file(file: Arc<Config>) -> Self {
        Self {
            by_name: query::by_name(&file),
            config: file,
            runtime: HashMap::new(),
            version: None,
        }
    }

    /// The revision of `job` when it is a runtime job.
    pub fn stamp(&self, job: &JobName) -> Option<&Stamp> {
        self.runtime.get(job)
    }
}

/// The current [`View`], rebuilt when the job store's version moves.
pub struct Views {
    file: Arc<Config>,
    store: Arc<dyn JobStore>,
    current: RwLock<Arc<View>>,
    rebuilding: tokio::sync::Mutex<()>,
}

impl Views {
    /// The views of `file`'s jobs and of `store`'s runtime jobs.
    pub fn new(file: Arc<Config>, store: Arc<dyn JobStore>) -> Self {
        let first = Arc::new(View::of_file(file.clone()));
        Self {
            file,
            store,
            current: RwLock::new(first),
            rebuilding: tokio::sync::Mutex::new(()),
        }
    }

    fn last(&self) -> Arc<View> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The view at the job store's current version: the kept one when the version has not
    /// moved, the kept one too when the store cannot be read (the snapshot reports the
    /// outage).
    pub async fn get(&self) -> Arc<View> {
        if !self.file.runtime.jobs {
            return self.last();
        }
        let Ok(version) = within(self.store.version()).await else {
            return self.last();
        };
        if self.last().version == Some(version) {
            return self.last();
        }
        let _one = self.rebuilding.lock().await;
        let last = self.last();
        if last.version == Some(version) {
            return last;
        }
        let Ok(revisions) = within(self.store.list()).await else {
            return last;
        };
        let file = self.file.clone();
        let built = tokio::task::spawn_blocking(move || {
            let (config, _) = file.with_runtime(&revisions);
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
                by_name: query::by_name(&config),
                config: Arc::new(config),
                runtime,
                version: Some(version),
            }
        })
        .await;
        let Ok(view) = built else {
            return last;
        };
        let view = Arc::new(view);
        *self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = view.clone();
        view
    }
}
