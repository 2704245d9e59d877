//! Shutdown helpers: one token tree, one `JoinSet` per owner, one deadline.

use std::time::Duration;

use tokio::task::JoinSet;

/// Waits up to `grace` for every task, then aborts the rest. Returns how many were aborted.
pub async fn drain<T: 'static>(tasks: &mut JoinSet<T>, grace: Duration) -> usize {
    let finished = async {
        while let Some(res) = tasks.join_next().await {
            if let Err(err) = res
                && !err.is_cancelled()
            {
                tracing::error!(error = %err, "task failed while draining");
            }
        }
    };
    if tokio::time::timeout(grace, finished).await.is_ok() {
        return 0;
    }
    let left = tasks.len();
    tasks.shutdown().await; // abort and wait, so nothing outlives its owner
    left
}
