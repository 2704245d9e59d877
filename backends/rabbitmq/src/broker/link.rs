//! A *link*: one live AMQP connection and its shared publish channel and [`RECONNECT`], the schedule the
//! broker reconnects and redoes an operation along.
//!
//! Invariant: the publish channel a link hands out is always in confirm mode.

use lapin::options::ConfirmSelectOptions;
use lapin::types::LongString;
use lapin::uri::AMQPUri;
use lapin::{Channel, Connection, ConnectionProperties};

use std::time::Duration;

use super::failure::{Failure, lapin_failure};
use cronq_shared::broker::BrokerError;
use cronq_shared::retry::Backoff;

/// Reconnecting and redoing an operation: a broker restart or a cluster node failing over
/// takes seconds, so the first waits are short; the cap keeps a long outage from being
/// hammered.
pub const RECONNECT: Backoff =
    Backoff::exponential(Duration::from_millis(100), Duration::from_secs(5));

/// One live connection and its shared publish channel (in confirm mode).
pub(super) struct Link {
    pub(super) connection: Connection,
    publisher: tokio::sync::Mutex<Option<Channel>>,
}

impl Link {
    /// Opens a connection; `redacted` is the URL as errors show it.
    pub(super) async fn open(uri: &AMQPUri, redacted: &str) -> Result<Self, BrokerError> {
        let properties =
            ConnectionProperties::default().with_connection_name(LongString::from("cronq"));
        let connection = Connection::connect_uri(uri.clone(), properties)
            .await
            .map_err(|e| BrokerError::Connect {
                url: redacted.to_owned(),
                source: Box::new(e),
            })?;
        Ok(Self {
            connection,
            publisher: tokio::sync::Mutex::new(None),
        })
    }

    /// Whether the connection is still up.
    pub(super) fn is_open(&self) -> bool {
        self.connection.status().connected()
    }

    /// A new channel on the connection.
    pub(super) async fn channel(&self) -> Result<Channel, Failure> {
        self.connection
            .create_channel()
            .await
            .map_err(lapin_failure("open channel"))
    }

    /// The shared publish channel, reopened if a channel error closed it.
    pub(super) async fn publisher(&self) -> Result<Channel, Failure> {
        let mut slot = self.publisher.lock().await;
        if let Some(ch) = slot.as_ref().filter(|ch| ch.status().connected()) {
            return Ok(ch.clone());
        }
        let ch = self.channel().await?;
        // Without confirm mode every publish "succeeds" unconfirmed.
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(lapin_failure("enable publisher confirms"))?;
        *slot = Some(ch.clone());
        Ok(ch)
    }
}
