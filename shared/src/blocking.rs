//! Work that holds a core for long (planning a million jobs, merging a million runtime
//! jobs) run off the runtime's threads, so that the tasks sharing them (lease renewals,
//! ticks, deliveries, the admin server) go on meanwhile.

/// Runs `work` on the blocking pool and waits for it. A panic in `work` is raised again
/// here; `None` when the runtime cancelled it, which only a runtime shutting down does.
pub async fn off_runtime<T, F>(work: F) -> Option<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    match tokio::task::spawn_blocking(work).await {
        Ok(done) => Some(done),
        Err(err) => match err.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(_) => None,
        },
    }
}
