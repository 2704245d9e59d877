//! The tasks a broker spawns (subscription feeders, settlements started from `Drop`), owned
//! by the broker: none is detached.
//!
//! Invariant: every task stops when the broker closes ([`Tasks::close`] cancels them and
//! waits until each has ended), so nothing a broker started outlives it.

use std::future::Future;

use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The broker's tasks and the token that stops them. Cheap to clone: clones share both.
#[derive(Clone, Default)]
pub(super) struct Tasks {
    tracker: TaskTracker,
    token: CancellationToken,
}

impl Tasks {
    /// Runs `task` on the current runtime until it ends or the broker closes. Outside a
    /// runtime (a value dropped after it shut down) the task is dropped unrun: its
    /// connection is gone by then, and the broker requeues whatever it held.
    pub(super) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let Ok(runtime) = Handle::try_current() else {
            return;
        };
        let token = self.token.clone();
        self.tracker.spawn_on(
            async move {
                token.run_until_cancelled(task).await;
            },
            &runtime,
        );
    }

    /// Runs the task `start` makes on the current runtime; it is given the token that
    /// asks it to stop when the broker closes, and is waited for (not dropped) then, so it
    /// can finish what it holds.
    pub(super) fn spawn_stoppable<F>(&self, start: impl FnOnce(CancellationToken) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let Ok(runtime) = Handle::try_current() else {
            return;
        };
        self.tracker.spawn_on(start(self.token.clone()), &runtime);
    }

    /// Stops every task and waits until each has ended.
    ///
    /// # Cancel safety
    /// Cancel safe: the tasks are stopped by the first poll; a later call waits again.
    pub(super) async fn close(&self) {
        self.token.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}
