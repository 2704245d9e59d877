//! Whether a runtime job may be written with the handler it names (`cronq job apply`, the
//! jobs API's PUT): only when a live consumer of its queue offers that handler, as the
//! fleet registry says (`cronq_shared::registry::serving`). While no consumer reports
//! itself (or the registry cannot be read) the writer's own config stands in for the
//! consumers': its `[handlers.NAME]`. Either way `--allow-unknown-handler` (the API's
//! `?allow_unknown_handler=true`) writes it anyway, for a handler consumers register in
//! Rust that are not running yet.

use cronq_shared::config::{Config, Job};
use cronq_shared::registry::Beat;
use cronq_shared::registry::serving::{Fleet, Service};

/// Why `job` (resolved against `config`) is refused, if it is: `beats` are the fleet
/// registry's live instances (`None` when they could not be read). The caller adds how to
/// allow it anyway.
pub fn refusal(config: &Config, job: &Job, beats: Option<&[Beat]>) -> Option<String> {
    let handler = job.handler_name.as_deref()?;
    let fleet = beats.map(Fleet::new);
    match fleet.as_ref().map(|f| f.assess(job)) {
        Some(Service::Served) => None,
        Some(Service::Unserved(why)) => Some(format!(
            "handler: {handler:?} is served by no live consumer ({why}): define [handlers.{handler}] in the config of the consumers of queue {:?} and reload them (SIGHUP)",
            job.queue.as_str()
        )),
        Some(Service::NoConsumer) | None if job.handler.is_none() => Some(format!(
            "handler: {handler:?} is not a [handlers.NAME] of {}, and no consumer is running to offer it: define it there and in the consumers' config",
            config.path.display()
        )),
        Some(Service::NoConsumer) | None => None,
    }
}
