//! Building dead-letter records and sending the consumer's own messages (dead letters,
//! retries, republished stored messages), confirmed.
//!
//! No retry loop here: the broker retries what may pass by itself (the table in
//! `cronq_shared::retry`); each send is only bounded ([`bounded`]), since the consumer has
//! a fallback for one that does not get through (requeue, the claim's lease lapsing, the
//! reaper).

use chrono::Utc;
use cronq_shared::broker::{Broker, BrokerError, DeadLetter, Outgoing, bounded};
use cronq_shared::message::Occurrence;
use cronq_shared::names::QueueName;

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

/// Dead-letters `letter`, confirmed, within the broker call deadline.
///
/// # Errors
/// The broker's [`BrokerError`], or [`BrokerError::GaveUp`] at the deadline.
pub(crate) async fn send(broker: &dyn Broker, letter: &DeadLetter) -> Result<(), BrokerError> {
    bounded("dead-letter", broker.dead_letter(letter)).await
}

/// Publishes `out`, confirmed, within the broker call deadline.
///
/// # Errors
/// As [`send`].
pub(crate) async fn publish(broker: &dyn Broker, out: Outgoing) -> Result<(), BrokerError> {
    bounded("publish", broker.publish(&[out])).await
}
