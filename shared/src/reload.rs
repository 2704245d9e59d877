//! Config reload on SIGHUP: load the file again and publish it as an `Arc<Config>` on a
//! `watch` channel, the one every part of a process follows (the producer, the consumer,
//! both halves of a standalone). An invalid file is rejected with every problem logged,
//! and the old config stays in force; the jobs a reload retires are logged by name.
//!
//! Readers take a snapshot (`borrow().clone()`) per use and never hold a borrow across an
//! await.

use std::path::PathBuf;
use std::sync::Arc;

use crate::config::Config;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

/// Reloads the config file each time a hangup arrives.
pub struct Reloader {
    path: PathBuf,
    hangups: mpsc::Receiver<()>,
    tx: watch::Sender<Arc<Config>>,
}

impl Reloader {
    /// A reloader for the file `initial` came from, plus the receiver every reader uses.
    pub fn new(
        initial: Config,
        hangups: mpsc::Receiver<()>,
    ) -> (Self, watch::Receiver<Arc<Config>>) {
        let path = initial.path.clone();
        let (tx, rx) = watch::channel(Arc::new(initial));
        (Self { path, hangups, tx }, rx)
    }

    /// Reloads once: publishes the new config, or logs why it was rejected. Returns
    /// whether it was accepted. Parsing runs on the blocking pool: a config with a
    /// million jobs takes a while and must not stall the leader's timers.
    pub async fn reload(&self) -> bool {
        let path = self.path.clone();
        let loaded = match tokio::task::spawn_blocking(move || Config::load(&path)).await {
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
            Ok(config) => {
                for warning in &config.warnings {
                    tracing::warn!(warning = %warning, "config warning");
                }
                let old = self.tx.borrow().clone();
                let retired = old.retired(&config);
                for job in &retired {
                    info!(job = %job, "job retired by the reload: no more occurrences are published for it");
                }
                info!(
                    path = %self.path.display(),
                    jobs = config.jobs.len(),
                    retired = retired.len(),
                    "config reloaded"
                );
                self.tx.send_replace(Arc::new(config));
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

    /// Another receiver of the config this reloader publishes.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Config>> {
        self.tx.subscribe()
    }

    /// Reloads on every hangup until `token` is cancelled or the hangups end.
    pub async fn run(mut self, token: CancellationToken) {
        loop {
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
            }
        }
    }
}
