//! The Rust handler API: an embedding program registers a handler per job name, for jobs
//! whose config has no `command` or `http`.
//!
//! A handler is any `Fn(Occurrence, CancellationToken) -> impl Future<Output = Result<(),
//! E>>` with `E: Display`, or a type implementing [`JobHandler`]. The token is cancelled
//! when the attempt must stop (timeout, replaced, lost claim, shutdown); a handler that
//! ignores it is aborted after a short grace. A panic is a failed attempt, never a crash.

use std::collections::HashMap;
use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use cronq_shared::message::Occurrence;
use cronq_shared::names::JobName;
use tokio_util::sync::CancellationToken;

/// What a Rust handler returns: `Err` is a failed attempt, with its message as the error.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'static>>;

/// A job handler written in Rust.
pub trait JobHandler: Send + Sync + 'static {
    /// Runs one attempt of `occurrence`; stop soon after `token` is cancelled.
    fn call(&self, occurrence: Occurrence, token: CancellationToken) -> HandlerFuture;
}

impl<F, Fut, E> JobHandler for F
where
    F: Fn(Occurrence, CancellationToken) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Display,
{
    fn call(&self, occurrence: Occurrence, token: CancellationToken) -> HandlerFuture {
        let fut = self(occurrence, token);
        Box::pin(async move { fut.await.map_err(|e| e.to_string()) })
    }
}

/// Rust handlers by job name.
#[derive(Clone, Default)]
pub struct Handlers {
    map: HashMap<JobName, Arc<dyn JobHandler>>,
}

impl std::fmt::Debug for Handlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.map.keys()).finish()
    }
}

impl Handlers {
    /// No handlers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers an async closure or fn `handler(occurrence, token)` for `job`, replacing an
    /// earlier registration. A registered handler takes precedence over a `command` or
    /// `http` handler in the config.
    pub fn register<F, Fut, E>(&mut self, job: JobName, handler: F) -> &mut Self
    where
        F: Fn(Occurrence, CancellationToken) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display,
    {
        self.register_handler(job, handler)
    }

    /// Registers any [`JobHandler`] (e.g. a struct holding a connection pool) for `job`.
    pub fn register_handler(&mut self, job: JobName, handler: impl JobHandler) -> &mut Self {
        self.map.insert(job, Arc::new(handler));
        self
    }

    /// The handler registered for `job`.
    pub fn get(&self, job: &JobName) -> Option<Arc<dyn JobHandler>> {
        self.map.get(job).cloned()
    }

    /// Whether a handler is registered for `job`.
    pub fn contains(&self, job: &JobName) -> bool {
        self.map.contains_key(job)
    }
}
