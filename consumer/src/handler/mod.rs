//! The three ways a job runs: a command, an HTTP request, or a registered Rust handler.
//!
//! Every handler gets the occurrence and a cancellation token, and returns `Err(text)` for a
//! failed attempt. Time limits, panics and classification belong to [`crate::executor`].

pub(crate) mod command;
pub(crate) mod http;
pub(crate) mod identity;

use std::sync::Arc;

use cronq_shared::config::{CommandHandler, Handler, Job};
use cronq_shared::message::Occurrence;
use tokio_util::sync::CancellationToken;

use crate::registry::{Handlers, JobHandler};

/// How long a handler may take to stop after its token is cancelled before it is killed
/// (SIGKILL for a command's process group, task abort for Rust).
pub(crate) const KILL_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

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

    /// Runs one attempt until it ends or `token` is cancelled.
    pub(crate) async fn run(
        self,
        occ: Occurrence,
        timeout: std::time::Duration,
        token: CancellationToken,
    ) -> Result<(), String> {
        // Each arm's future is boxed: inline, the http and command states would make this
        // future kilobytes large, copied on every spawn (half the consumer's own CPU per
        // message for a no-op handler, docs/benchmarks.md).
        match self {
            Self::Command(h) => Box::pin(command::run(&h, &occ, KILL_GRACE, token)).await,
            Self::Http(h, client) => Box::pin(http::run(&h, &client, &occ, timeout, token)).await,
            Self::Rust(h) => h.call(occ, token).await,
        }
    }
}
