//! Building dead-letter records and putting them on the dead-letter queue, confirmed, with
//! a short explicit retry schedule.

use std::time::Duration;

use chrono::Utc;
use cronq_shared::broker::{Broker, BrokerError, DeadLetter, Outgoing};
use cronq_shared::message::Occurrence;
use cronq_shared::names::QueueName;

/// Delays between publish attempts (dead letters, retries, republished orphans).
pub(crate) const PUBLISH_BACKOFF: &[Duration] = &[
    Duration::from_millis(100),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
];

/// A letter for `body`; `occ` when the body decoded.
pub(crate) fn letter(
    body: &[u8],
    occ: Option<&Occurrence>,
    queue: &QueueName,
    attempts: u32,
    reason: String,
    last_error: Option<String>,
) -> DeadLetter {
    DeadLetter {
        key: occ.map(|o| o.key.to_string()),
        job: occ.map(|o| o.job.to_string()),
        queue: Some(queue.clone()),
        attempts,
        reason,
        last_error,
        dead_lettered_at: Utc::now(),
        body: body.to_vec(),
    }
}

/// Dead-letters `letter`, retrying along [`PUBLISH_BACKOFF`].
///
/// # Errors
/// The last [`BrokerError`] when every try failed.
pub(crate) async fn send(broker: &dyn Broker, letter: &DeadLetter) -> Result<(), BrokerError> {
    let mut delays = PUBLISH_BACKOFF.iter();
    loop {
        match broker.dead_letter(letter).await {
            Ok(()) => return Ok(()),
            Err(err) => match delays.next() {
                Some(d) => {
                    tracing::warn!(key = letter.key.as_deref().unwrap_or(""), error = %err, "dead-lettering failed, retrying");
                    tokio::time::sleep(*d).await;
                }
                None => return Err(err),
            },
        }
    }
}

/// Publishes `out`, retrying along [`PUBLISH_BACKOFF`].
///
/// # Errors
/// The last [`BrokerError`] when every try failed.
pub(crate) async fn publish(broker: &dyn Broker, out: Outgoing) -> Result<(), BrokerError> {
    let batch = [out];
    let mut delays = PUBLISH_BACKOFF.iter();
    loop {
        match broker.publish(&batch).await {
            Ok(()) => return Ok(()),
            Err(err) => match delays.next() {
                Some(d) => {
                    tracing::warn!(job = %batch[0].occurrence.job, key = %batch[0].occurrence.key, error = %err, "publish failed, retrying");
                    tokio::time::sleep(*d).await;
                }
                None => return Err(err),
            },
        }
    }
}
