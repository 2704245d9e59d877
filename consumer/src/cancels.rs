//! Watching for operators' cancels (`cronq cancel`): one poll per consumer of the ledger's
//! cancel count ([`Ledger::cancels`]), shared with every running attempt through a `watch`
//! channel. When the count moves, each attempt renews its claim at once instead of at its
//! next heartbeat, reads the cancel mark, and stops: a running attempt stops within about
//! [`CANCEL_POLL`] plus one store round trip, whatever the heartbeat period, at the cost of
//! one cheap read per consumer per poll while it runs attempts (not one per attempt; none
//! while it runs none).

use std::sync::Arc;
use std::time::Duration;

use cronq_shared::ledger::Ledger;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How often a consumer looks at the cancel count: with the kill that follows, a cancel
/// takes effect well within a second.
pub(crate) const CANCEL_POLL: Duration = Duration::from_millis(250);

/// The poller of one consumer: sends each new cancel count to its receivers.
pub(crate) struct CancelWatch {
    ledger: Arc<dyn Ledger>,
    tx: watch::Sender<u64>,
}

impl CancelWatch {
    /// A poller of `ledger` and the receiver every attempt clones.
    pub(crate) fn new(ledger: Arc<dyn Ledger>) -> (Self, watch::Receiver<u64>) {
        let (tx, rx) = watch::channel(0);
        (Self { ledger, tx }, rx)
    }

    /// Polls every [`CANCEL_POLL`] until `token` is cancelled. A store that does not answer
    /// is only logged at debug level: the heartbeats report it.
    pub(crate) async fn run(self, token: CancellationToken) {
        loop {
            if token
                .run_until_cancelled(tokio::time::sleep(CANCEL_POLL))
                .await
                .is_none()
            {
                return;
            }
            if self.tx.receiver_count() <= 1 {
                // Only the worker's own receiver: no attempt runs here, none to renew (an
                // attempt that starts later reads the count as it is then, on its first
                // poll).
                continue;
            }
            match self.ledger.cancels().await {
                Ok(n) => {
                    self.tx.send_if_modified(|seen| {
                        let moved = *seen != n;
                        *seen = n;
                        moved
                    });
                }
                Err(err) => tracing::debug!(error = %err, "cannot read the cancel count"),
            }
        }
    }
}
