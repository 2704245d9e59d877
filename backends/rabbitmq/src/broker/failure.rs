//! What went wrong in one broker operation, and whether a new link can fix it.
//!
//! Invariant: an error is *transient* only when the connection or channel went away (the
//! operation is retried on a new link); the broker refusing an operation (a soft,
//! channel-level AMQP error) is final.

use cronq_shared::broker::BrokerError;

/// A failure of one attempt: transient ones (connection lost) are retried on a new link.
pub(super) struct Failure {
    pub(super) error: BrokerError,
    pub(super) transient: bool,
}

impl Failure {
    pub(super) fn fatal(error: BrokerError) -> Self {
        Self {
            error,
            transient: false,
        }
    }

    /// As a try's result for `cronq_shared::retry::retry`: a transient failure is
    /// retried, any other is handed back at once (`Ok(Err(_))`).
    pub(super) fn retried<T>(self) -> Result<Result<T, BrokerError>, BrokerError> {
        if self.transient {
            Err(self.error)
        } else {
            Ok(Err(self.error))
        }
    }
}

/// Whether a lapin error is the connection or channel going away (retry on a new link),
/// rather than the broker refusing the operation (a soft, channel-level AMQP error).
fn is_transient(e: &lapin::Error) -> bool {
    !matches!(
        e.kind(),
        lapin::ErrorKind::ProtocolError(amqp)
            if matches!(amqp.kind(), lapin::protocol::AMQPErrorKind::Soft(_))
    )
}

/// Maps a lapin error of operation `op` to a [`Failure`], transient or not.
pub(super) fn lapin_failure(op: &'static str) -> impl Fn(lapin::Error) -> Failure {
    move |e| Failure {
        transient: is_transient(&e),
        error: BrokerError::Protocol {
            op,
            source: Box::new(e),
        },
    }
}

/// Classifies an error from [`crate::topology`] by its lapin source.
pub(super) fn broker_failure(error: BrokerError) -> Failure {
    let transient = match &error {
        BrokerError::Protocol { source, .. } => source
            .downcast_ref::<lapin::Error>()
            .is_some_and(is_transient),
        BrokerError::Connect { .. } => true,
        _ => false,
    };
    Failure { error, transient }
}

impl From<BrokerError> for Failure {
    fn from(error: BrokerError) -> Self {
        broker_failure(error)
    }
}

/// The channel of a delivery is gone.
#[derive(Debug, thiserror::Error)]
#[error("the channel this delivery came on is closed; the broker will redeliver it")]
struct ChannelGone;

/// The error of settling a delivery whose channel is gone.
pub(super) fn channel_gone(op: &'static str) -> BrokerError {
    BrokerError::Protocol {
        op,
        source: Box::new(ChannelGone),
    }
}

/// An error and its sources, `: `-separated, for log fields.
pub(super) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}
