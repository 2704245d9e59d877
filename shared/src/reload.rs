//! The config in force, published as an `Arc<Config>` on a `watch` channel that every part
//! of a process follows (the producer, the consumer, both halves of a standalone): the
//! config file, reloaded on SIGHUP, merged with the runtime jobs of the job store
//! ([`crate::jobs`]): its version read every [`FOLLOW`] (at once when the store gives
//! notice of a write), and when it moved only the jobs written since read
//! ([`JobStore::changes`]), or all of them when the store cannot tell which.
//!
//! An invalid file is rejected with every problem logged, and the old config stays in
//! force. The jobs a change retires are logged by name; a runtime job whose name a file
//! job has is left out and reported (the file job runs), as is one that does not resolve
//! here. Readers take a snapshot (`borrow().clone()`) per use and never hold a borrow
//! across an await.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::blocking::off_runtime;
use crate::config::{Config, RuntimeCache};
use crate::jobs::{JobStore, Revision};
use crate::names::JobName;
use crate::recorded::Load;

/// How often the job store's version is read (one small read: a Redis `GET`, an indexed
/// SQLite `max`): a runtime job change reaches every process within this plus the read
/// of the jobs written since and a merge (the contract says 2 s).
pub const FOLLOW: Duration = Duration::from_millis(100);

/// How long a deleted runtime job stays named in the configs published
/// ([`Config::deleted`]): the readers of the config take each new one within a merge
/// (well under a second), so a consumer's view has long dropped the job by then
/// (`cronq_consumer`'s view), and a process that lives for months with short-lived runtime
/// jobs does not carry every name it ever saw.
pub const FORGET_DELETED: Duration = Duration::from_secs(600);

/// Reloads the config file each time a hangup arrives, and follows the job store.
pub struct Reloader {
    path: PathBuf,
    hangups: mpsc::Receiver<()>,
    tx: watch::Sender<Arc<Config>>,
    /// The config file as last loaded (without runtime jobs).
    file: Arc<Config>,
    store: Option<Arc<dyn JobStore>>,
    /// The store's version and jobs (by name) as last read.
    seen: Option<(u64, BTreeMap<String, Revision>)>,
    /// Runtime jobs seen in the store, then gone from it (deleted) since, each with when
    /// this reloader saw it go; forgotten [`FORGET_DELETED`] after.
    deleted: BTreeMap<JobName, Instant>,
    /// The runtime jobs as resolved against `file`, by revision.
    cache: RuntimeCache,
    /// Each load of the file with its text, for a process that records it
    /// (`crate::recorded`); `None` until [`Reloader::with_text`] gives the first one's.
    loads: watch::Sender<Option<Arc<Load>>>,
}

impl Reloader {
    /// A reloader for the file `initial` came from, plus the receiver every reader uses.
    pub fn new(
        initial: Config,
        hangups: mpsc::Receiver<()>,
    ) -> (Self, watch::Receiver<Arc<Config>>) {
        let path = initial.path.clone();
        let file = Arc::new(initial);
        let (tx, rx) = watch::channel(file.clone());
        let reloader = Self {
            path,
            hangups,
            tx,
            file,
            store: None,
            seen: None,
            deleted: BTreeMap::new(),
            cache: RuntimeCache::default(),
            loads: watch::channel(None).0,
        };
        (reloader, rx)
    }

    /// Also follows the runtime jobs of `store` (unless the config says `[runtime] jobs =
    /// false`); the first poll runs as soon as [`Reloader::run`] starts.
    pub fn with_store(mut self, store: Arc<dyn JobStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Gives the text the first config was loaded from, so that [`Reloader::loads`]
    /// sends each load of the file with its text, this one first.
    pub fn with_text(self, text: Arc<str>) -> Self {
        let load = Load::new(self.file.clone(), text).lean();
        self.loads.send_replace(Some(Arc::new(load)));
        self
    }

    /// Each load of the config file with its text (the runtime jobs aside), from the first
    /// given to [`Reloader::with_text`]; `None` before that.
    pub fn loads(&self) -> watch::Receiver<Option<Arc<Load>>> {
        self.loads.subscribe()
    }

    /// Another receiver of the config this reloader publishes.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Config>> {
        self.tx.subscribe()
    }

    /// Reloads the file once: publishes the new config, or logs why it was rejected.
    /// Returns whether it was accepted. Parsing runs on the blocking pool: a config with a
    /// million jobs takes a while and must not stall the leader's timers.
    pub async fn reload(&mut self) -> bool {
        let path = self.path.clone();
        let loaded =
            match tokio::task::spawn_blocking(move || crate::recorded::load_file(&path)).await {
                Ok(loaded) => loaded,
                Err(err) => {
                    error!(
                        path = %self.path.display(),
                        error = %err,
                        "config reload failed, keeping the previous config",
                    );
                    return false;
                }
            };
        match loaded {
            Ok(load) => {
                let config = load.config.clone();
                for warning in &config.warnings {
                    warn!(warning = %warning, "config warning");
                }
                info!(path = %self.path.display(), jobs = config.jobs.len(), "config reloaded");
                self.file = config;
                self.loads.send_replace(Some(Arc::new(load.lean())));
                // The runtime jobs resolve anew against the new file's defaults and handlers.
                self.cache = RuntimeCache::default();
                self.publish().await;
                true
            }
            Err(err) => {
                error!(
                    path = %self.path.display(),
                    error = %err,
                    "config reload rejected, keeping the previous config",
                );
                false
            }
        }
    }

    /// Reads the job store once; publishes a new config when it changed. Returns whether
    /// it changed.
    pub async fn poll(&mut self) -> bool {
        let Some(store) = self.store.clone() else {
            return false;
        };
        let version = match store.version().await {
            Ok(v) => v,
            Err(err) => {
                warn!(error = %err, "cannot read the job store, keeping the runtime jobs as they were");
                return false;
            }
        };
        let since = match &self.seen {
            Some((v, _)) if *v == version => return false,
            Some((v, _)) => Some(*v),
            None => None,
        };
        // Only the jobs written since the version last read, when the store can tell.
        let changes = match since {
            Some(since) => match store.changes(since).await {
                Ok(changes) => changes,
                Err(err) => {
                    warn!(error = %err, "cannot read the job store, keeping the runtime jobs as they were");
                    return false;
                }
            },
            None => None,
        };
        if let (Some(changes), Some((seen, jobs))) = (changes, self.seen.as_mut()) {
            *seen = changes.version;
            for (name, now) in changes.jobs {
                match now {
                    Some(rev) => {
                        if let Ok(name) = JobName::new(&name) {
                            self.deleted.remove(&name);
                        }
                        jobs.insert(name, rev);
                    }
                    None => {
                        if jobs.remove(&name).is_some()
                            && let Ok(name) = JobName::new(&name)
                        {
                            self.deleted.insert(name, Instant::now());
                        }
                    }
                }
            }
            self.publish().await;
            return true;
        }
        if let Some(since) = since {
            info!(
                since,
                version,
                "the job store's change log does not reach back to the version last read: reading every runtime job"
            );
        }
        match store.list().await {
            Ok(jobs) => {
                let now: BTreeSet<&str> = jobs.iter().map(|r| r.name.as_str()).collect();
                if let Some((_, before)) = &self.seen {
                    for gone in before.keys().filter(|n| !now.contains(n.as_str())) {
                        if let Ok(name) = JobName::new(gone) {
                            self.deleted.insert(name, Instant::now());
                        }
                    }
                }
                self.deleted.retain(|n, _| !now.contains(n.as_str()));
                let jobs = jobs.into_iter().map(|r| (r.name.clone(), r)).collect();
                self.seen = Some((version, jobs));
                self.publish().await;
                true
            }
            Err(err) => {
                warn!(error = %err, "cannot read the job store, keeping the runtime jobs as they were");
                false
            }
        }
    }

    /// Publishes the file's config merged with the runtime jobs last read. The merge and
    /// the comparison with the config in force run on the blocking pool: at a million
    /// runtime jobs they take over half a second (`docs/runtime-jobs.md`), which must not hold
    /// a runtime thread that ticks or deliveries need.
    async fn publish(&mut self) {
        self.deleted.retain(|_, at| at.elapsed() < FORGET_DELETED);
        let merging = Merging {
            file: self.file.clone(),
            old: self.tx.borrow().clone(),
            seen: self.seen.take(),
            deleted: self.deleted.keys().cloned().collect(),
            cache: std::mem::take(&mut self.cache),
        };
        // Cancelled (the runtime shutting down): the store is read whole again should this
        // reloader go on.
        let Some((merging, config)) = off_runtime(|| merging.merge()).await else {
            return;
        };
        (self.seen, self.cache) = (merging.seen, merging.cache);
        if let Some(config) = config {
            self.tx.send_replace(config);
        }
    }

    /// Reloads on every hangup and polls the job store (at once on its notice of a
    /// write) until `token` is cancelled or the hangups end.
    pub async fn run(mut self, token: CancellationToken) {
        let mut tick = tokio::time::interval(FOLLOW);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let polling = self.store.is_some();
        let mut notices = self.store.as_ref().and_then(|s| s.notices());
        loop {
            let mut closed = false;
            let noticed = async {
                match notices.as_mut() {
                    Some(rx) => rx.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                () = token.cancelled() => return,
                hup = self.hangups.recv() => match hup {
                    Some(()) => {
                        info!(path = %self.path.display(), "SIGHUP: reloading config");
                        self.reload().await;
                    }
                    None => return,
                },
                _ = tick.tick(), if polling => {
                    self.poll().await;
                }
                open = noticed => {
                    if open {
                        self.poll().await;
                    } else {
                        closed = true;
                    }
                }
            }
            if closed {
                notices = None;
            }
        }
    }
}

/// What a merge of the runtime jobs reads and keeps, moved to the blocking pool and back.
struct Merging {
    file: Arc<Config>,
    /// The config in force.
    old: Arc<Config>,
    seen: Option<(u64, BTreeMap<String, Revision>)>,
    deleted: BTreeSet<JobName>,
    cache: RuntimeCache,
}

impl Merging {
    /// The file's config merged with the runtime jobs seen, logging what was left out and
    /// what retired; `None` when it is the config in force.
    fn merge(mut self) -> (Self, Option<Arc<Config>>) {
        let runtime: Vec<&Revision> = self
            .seen
            .as_ref()
            .map(|(_, jobs)| jobs.values().collect())
            .unwrap_or_default();
        let config = if runtime.is_empty() && self.deleted.is_empty() {
            self.file.clone()
        } else {
            let (config, merged) = self.file.with_runtime_cached(&runtime, &mut self.cache);
            for name in &merged.shadowed {
                warn!(job = %name, "runtime job shadowed by the config file's job of the same name: the file's job runs; delete the runtime job or rename one of them");
            }
            for (name, problems) in &merged.invalid {
                warn!(job = %name, error = %problems, "runtime job does not resolve against this config: it is left out here");
            }
            if merged.refused > 0 {
                info!(
                    jobs = merged.refused,
                    "runtime jobs refused: the config says [runtime] jobs = false"
                );
            }
            let mut config = config;
            // A deleted name is never a runtime job seen (the polls take it out of `deleted`
            // when the store has it again), so only a file job can have it: looked up in the
            // file's config, whose index lasts from one merge to the next, not in the merged
            // one, whose index would be built again at every merge.
            config.deleted = self
                .deleted
                .iter()
                .filter(|n| self.file.job(n.as_str()).is_none())
                .cloned()
                .collect();
            Arc::new(config)
        };
        drop(runtime);
        if Arc::ptr_eq(&self.old, &config) {
            // Nothing changed (the first poll of a store without runtime jobs): no reader
            // is woken, and a million names are not compared.
            return (self, None);
        }
        let retired = self.old.retired(&config);
        for job in &retired {
            info!(job = %job, "job retired: no more occurrences are published for it");
        }
        let added = config.jobs.len() + retired.len() - self.old.jobs.len();
        if added > 0 || !retired.is_empty() {
            info!(
                jobs = config.jobs.len(),
                retired = retired.len(),
                "jobs changed"
            );
        }
        (self, Some(config))
    }
}

/// Built for other crates' tests only (the `test-support` feature): a reloader following a
/// job store, and runtime jobs written to it.
#[cfg(feature = "test-support")]
pub mod testing {
    use std::sync::Arc;

    use tokio::sync::watch;

    use super::Reloader;
    use crate::config::Config;
    use crate::jobs::{Expect, JobStore};
    use crate::names::JobName;

    /// Writes the runtime job `name` (one that never fires, run by the handler `h`), or
    /// deletes it.
    pub async fn write(store: &dyn JobStore, name: &str, present: bool) {
        let spec = format!("name = \"{name}\"\nschedule = \"0 0 29 2 *\"\nhandler = \"h\"\n");
        let name = JobName::new(name).expect("a name");
        store
            .write(&name, present.then_some(spec.as_str()), "test", Expect::Any)
            .await
            .expect("written");
    }

    /// A reloader following `store`, of a file that defines the handler `h`, and the
    /// configs it publishes.
    pub fn following(store: Arc<dyn JobStore>) -> (Reloader, watch::Receiver<Arc<Config>>) {
        let file = Config::from_toml(
            "[handlers.h]\ncommand = [\"true\"]\n",
            std::path::Path::new("f.toml"),
        )
        .expect("valid");
        let (_hangups, rx) = tokio::sync::mpsc::channel(1);
        let (reloader, config) = Reloader::new(file, rx);
        (reloader.with_store(store), config)
    }
}
