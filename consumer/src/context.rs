//! The context of the attempt a Rust handler runs: what the consumer knows of the attempt
//! beyond its [`Occurrence`](cronq_shared::message::Occurrence), above all its fencing
//! token. A command handler gets the same as environment variables (`CRONQ_FENCE`), an
//! http handler as headers (`X-Cronq-Fence`); see docs/consumer.md "Fencing tokens".
//!
//! Invariant: [`Context::current`] answers inside the handler's own future (the task the
//! consumer runs it on), for exactly the attempt it runs; a task the handler spawns does
//! not inherit it (pass the value along).

tokio::task_local! {
    static CURRENT: Context;
}

/// The attempt a Rust handler runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Context {
    /// The attempt's fencing token: greater than that of every earlier attempt of the same
    /// job, fleet-wide. Guard each write to an outside system with it (keep the highest
    /// fence seen, refuse a write with a lower one), so that an attempt that was frozen
    /// past its execution lease, while another consumer ran the occurrence again, cannot
    /// overwrite the newer attempt's work.
    pub fence: u64,
}

impl Context {
    /// The context of the attempt being run, when called from inside a Rust handler's
    /// future; `None` anywhere else.
    pub fn current() -> Option<Self> {
        CURRENT.try_with(|c| *c).ok()
    }

    /// Runs `fut` (a handler's future) with `self` as its context.
    pub(crate) async fn scope<F: std::future::Future>(self, fut: F) -> F::Output {
        CURRENT.scope(self, fut).await
    }
}
