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

#[cfg(feature = "test-support")]
pub use turns::TurnCounter;

/// Built for other crates' tests only (the `test-support` feature).
#[cfg(feature = "test-support")]
mod turns {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use tokio_util::task::AbortOnDropHandle;

    /// A task that only counts its turns and yields, on the runtime it is started on: what
    /// shows, in a test on a one-thread runtime, that work ran off the runtime's threads (the
    /// count moves while it runs) rather than on them (it does not). Stops when dropped.
    pub struct TurnCounter {
        turns: Arc<AtomicU64>,
        _task: AbortOnDropHandle<()>,
    }

    impl TurnCounter {
        /// Starts counting. Needs a tokio runtime.
        pub fn start() -> Self {
            let turns = Arc::<AtomicU64>::default();
            let counted = Arc::clone(&turns);
            let task = tokio::spawn(async move {
                loop {
                    counted.fetch_add(1, Ordering::Relaxed);
                    tokio::task::yield_now().await;
                }
            });
            Self {
                turns,
                _task: AbortOnDropHandle::new(task),
            }
        }

        /// The turns counted so far.
        pub fn turns(&self) -> u64 {
            self.turns.load(Ordering::Relaxed)
        }
    }
}
