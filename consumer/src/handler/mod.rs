//! The three ways a job runs: a command, an HTTP request, or a registered Rust handler
//! (`rust`: the [`Handlers`] an embedding program registers).
//!
//! Every handler gets the occurrence and a cancellation token, and returns `Err(text)` for a
//! failed attempt; a command or http handler also leaves what it printed or was answered
//! in the attempt's [`Capture`]. Time limits and panics belong to `crate::attempt`, what
//! an attempt's end is recorded as to [`crate::outcome`].

pub(crate) mod command;
pub(crate) mod http;
pub(crate) mod identity;
pub(crate) mod rust;

use std::sync::{Arc, Mutex, PoisonError};

use cronq_shared::config::{CommandHandler, Handler, Job};
use cronq_shared::message::Occurrence;
use cronq_shared::runlog::RunOutput;
use tokio_util::sync::CancellationToken;

pub(crate) use self::rust::{HandlerError, Handlers, JobHandler};
use crate::context::Context;

/// How long a handler may take to stop after its token is cancelled before it is killed
/// (SIGKILL for a command's process group, task abort for Rust).
pub(crate) const KILL_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// What one attempt's handler printed or was answered, left by the handler as it ends
/// (its own task may be aborted after), for the consumer to keep with the run.
#[derive(Debug, Default)]
pub(crate) struct Capture {
    /// How much of each output stream is kept (0: nothing is captured).
    limit: usize,
    kept: Mutex<Option<RunOutput>>,
}

impl Capture {
    /// A capture keeping `limit` bytes of each stream; 0 captures nothing.
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            kept: Mutex::default(),
        }
    }

    /// How much of each stream to keep; 0 when nothing is captured.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Leaves `output` (an empty one is not kept), its `secrets` masked.
    pub(crate) fn keep<'a>(&self, output: RunOutput, secrets: impl IntoIterator<Item = &'a str>) {
        if self.limit == 0 || output.is_empty() {
            return;
        }
        *self.kept.lock().unwrap_or_else(PoisonError::into_inner) = Some(output.masked(secrets));
    }

    /// What was left, once.
    pub(crate) fn take(&self) -> Option<RunOutput> {
        self.kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

/// A resolved handler, ready to run one attempt.
#[derive(Clone)]
pub(crate) enum Runner {
    Command(Arc<CommandHandler>),
    Http(Arc<cronq_shared::config::HttpHandler>, reqwest::Client),
    Rust(Arc<dyn JobHandler>),
}

impl Runner {
    /// The handler for `job`: a Rust handler registered for the job, then one registered
    /// under its handler name, then the config's (inline or `[handlers.NAME]`).
    pub(crate) fn resolve(job: &Job, handlers: &Handlers, http: &reqwest::Client) -> Option<Self> {
        if let Some(h) = handlers.for_job(job) {
            return Some(Self::Rust(h));
        }
        match &job.handler {
            Some(Handler::Command(h)) => Some(Self::Command(Arc::clone(h))),
            Some(Handler::Http(h)) => Some(Self::Http(Arc::clone(h), http.clone())),
            None => None,
        }
    }

    /// Runs one attempt, fenced by `fence`, until it ends or `token` is cancelled, leaving
    /// its output in `capture`.
    pub(crate) async fn run(
        self,
        occ: Occurrence,
        fence: u64,
        timeout: std::time::Duration,
        token: CancellationToken,
        capture: Arc<Capture>,
    ) -> Result<(), String> {
        // Each arm's future is boxed: inline, the http and command states would make this
        // future kilobytes large, copied on every spawn (half the consumer's own CPU per
        // message for a no-op handler, docs/benchmarks-notebook.md).
        match self {
            Self::Command(h) => {
                Box::pin(command::run(&h, &occ, fence, KILL_GRACE, token, &capture)).await
            }
            Self::Http(h, client) => {
                Box::pin(http::run(
                    &h, &client, &occ, fence, timeout, token, &capture,
                ))
                .await
            }
            Self::Rust(h) => Context { fence }
                .scope(h.call(occ, token))
                .await
                .map_err(HandlerError::into_message),
        }
    }
}
