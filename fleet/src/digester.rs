//! The digest of the config a process runs, computed once per config it loads and handed
//! to every reader (the reporter, the leader's config check): what a digest is, is the
//! contract's (`cronq_shared::registry::digest`).

use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use cronq_shared::config::Config;
use cronq_shared::registry::digest::ConfigDigest;

/// Computes the digest of each config a `watch` channel sends, once, and sends it on to
/// every reader: a config with 100,000 jobs takes a while to digest (docs/benchmarks-notebook.md),
/// so the reporter and the leader's config check must not each compute it.
pub struct Digester {
    config: watch::Receiver<Arc<Config>>,
    tx: watch::Sender<Arc<ConfigDigest>>,
}

impl Digester {
    /// The digest of the config `config` holds now (computed on a blocking thread), and a
    /// digester that follows the configs it sends next ([`Digester::run`]).
    pub async fn new(
        mut config: watch::Receiver<Arc<Config>>,
    ) -> (Self, watch::Receiver<Arc<ConfigDigest>>) {
        let first = ConfigDigest::of_shared(config.borrow_and_update().clone()).await;
        let (tx, rx) = watch::channel(Arc::new(first));
        (Self { config, tx }, rx)
    }

    /// Sends the digest of each new config until `token` is cancelled or the configs end
    /// (then the receivers keep the last digest). Configs sent while one is digested are
    /// coalesced: only the newest of them is digested next.
    pub async fn run(mut self, token: CancellationToken) {
        loop {
            tokio::select! {
                biased;
                () = token.cancelled() => return,
                changed = self.config.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
            let config = self.config.borrow_and_update().clone();
            let digest = tokio::select! {
                biased;
                () = token.cancelled() => return,
                d = ConfigDigest::of_shared(config) => d,
            };
            self.tx.send_replace(Arc::new(digest));
        }
    }
}
