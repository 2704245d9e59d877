//! One bounded read of a store or of the queue: every read the dashboard makes, by the
//! snapshot's refresher (`super::snapshot`), by a request (`super::api`, `super::actions`)
//! or of the queue's depths (`super::source`), waits at most [`READ_TIMEOUT`].
//!
//! Invariant: this module depends on no other of the dashboard, so each may use it.

use std::future::Future;
use std::time::Duration;

/// The longest one read of a store may take before it counts as an outage.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// `call` within [`READ_TIMEOUT`], its error as text.
pub async fn within<T, E: Into<anyhow::Error>>(
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(READ_TIMEOUT, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{:#}", e.into())),
        Err(_) => Err(format!("no answer within {}s", READ_TIMEOUT.as_secs())),
    }
}
