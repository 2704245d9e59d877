//! The Rust handler API: an embedding program registers a handler per job name, for jobs
//! whose config has no `command` or `http`, or per handler name, for every job that says
//! `handler = "NAME"` (file jobs and runtime jobs alike).
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

use cronq_shared::config::Job;
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

/// Rust handlers by job name and by handler name.
#[derive(Clone, Default)]
pub struct Handlers {
    map: HashMap<JobName, Arc<dyn JobHandler>>,
    named: HashMap<Arc<str>, Arc<dyn JobHandler>>,
}

impl std::fmt::Debug for Handlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set()
            .entries(self.map.keys().map(JobName::as_str))
            .entries(self.named.keys().map(|n| format!("handler {n}")))
            .finish()
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

    /// Registers `handler` under the handler name `name`: it runs every job that says
    /// `handler = "NAME"` (and has no handler registered by its own job name), replacing
    /// an earlier registration and taking precedence over a `[handlers.NAME]` of the config.
    pub fn register_named<F, Fut, E>(&mut self, name: &str, handler: F) -> &mut Self
    where
        F: Fn(Occurrence, CancellationToken) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display,
    {
        self.register_named_handler(name, handler)
    }

    /// Registers any [`JobHandler`] under the handler name `name` (see
    /// [`Handlers::register_named`]).
    pub fn register_named_handler(&mut self, name: &str, handler: impl JobHandler) -> &mut Self {
        self.named.insert(Arc::from(name), Arc::new(handler));
        self
    }

    /// The Rust handler that runs `job`: registered by its name, else by its handler name.
    pub fn for_job(&self, job: &Job) -> Option<Arc<dyn JobHandler>> {
        self.get(&job.name).or_else(|| {
            let name = job.handler_name.as_ref()?;
            self.named.get(name).cloned()
        })
    }

    /// Whether a Rust handler runs `job`.
    pub fn serves(&self, job: &Job) -> bool {
        self.contains(&job.name)
            || job
                .handler_name
                .as_ref()
                .is_some_and(|n| self.named.contains_key(n))
    }

    /// Whether a handler is registered under the handler name `name`.
    pub fn contains_named(&self, name: &str) -> bool {
        self.named.contains_key(name)
    }

    /// The handler names registered, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.named.keys().map(|n| n.to_string()).collect();
        names.sort_unstable();
        names
    }

    /// The job names a handler is registered for, sorted.
    pub fn jobs(&self) -> Vec<String> {
        let mut jobs: Vec<String> = self.map.keys().map(|j| j.as_str().to_owned()).collect();
        jobs.sort_unstable();
        jobs
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
