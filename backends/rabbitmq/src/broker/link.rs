//! A *link*: one live AMQP connection and its shared publish channel and [`RECONNECT`], the schedule the
//! broker reconnects and redoes an operation along.
//!
//! Invariant: the publish channel a link hands out is always in confirm mode.

use lapin::options::ConfirmSelectOptions;
use lapin::tcp::OwnedTLSConfig;
use lapin::types::{LongString, ShortString};
use lapin::uri::AMQPUri;
use lapin::{Channel, Connection, ConnectionProperties};

use std::time::Duration;

use super::failure::{Failure, broker_failure, lapin_failure};
use crate::topology::{Declare, Replication};
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
    /// Which node of the broker's list it is connected to.
    pub(super) node: usize,
    publisher: tokio::sync::Mutex<Option<Channel>>,
}

impl Link {
    /// Opens a connection to node `node` of the broker's list (with `tls` for `amqps://`);
    /// `redacted` is its URL as errors show it.
    ///
    /// # Errors
    /// [`BrokerError::Tls`] when the TLS handshake failed for a reason the operator must
    /// fix (retrying cannot help), else [`BrokerError::Connect`].
    pub(super) async fn open(
        uri: &AMQPUri,
        tls: &OwnedTLSConfig,
        redacted: &str,
        node: usize,
    ) -> Result<Self, BrokerError> {
        let properties =
            ConnectionProperties::default().with_connection_name(LongString::from("cronq"));
        let runtime = lapin::runtime::default_runtime()
            .map_err(|e| super::unreachable(redacted.to_owned(), Box::new(e)))?;
        let connection =
            Connection::connect_uri_with_config(uri.clone(), properties, tls.clone(), runtime)
                .await
                .map_err(|e| match cronq_tls::diagnose(&e) {
                    Some(refusal) => BrokerError::Tls {
                        broker: super::RABBITMQ,
                        url: redacted.to_owned(),
                        refusal,
                        source: Box::new(e),
                    },
                    None => super::unreachable(redacted.to_owned(), Box::new(e)),
                })?;
        Ok(Self {
            connection,
            node,
            publisher: tokio::sync::Mutex::new(None),
        })
    }

    /// Whether the connection is still up.
    pub(super) fn is_open(&self) -> bool {
        self.connection.status().connected()
    }

    /// Closes the connection after its node stopped answering for `after`: every operation
    /// on it fails (its unsettled deliveries return to their queues) and the broker opens
    /// a link to another node. Bounded: a node that does not answer does not answer the
    /// close either.
    pub(super) async fn abandon(&self, after: Duration) {
        let reason = format!(
            "no answer for {} s, moving to another node",
            after.as_secs()
        );
        let close = self.connection.close(320, ShortString::from(reason));
        let _ = tokio::time::timeout(Duration::from_secs(1), close).await;
    }

    /// A round of declarations on a channel of its own.
    pub(super) async fn declare<'a>(
        &'a self,
        replication: &'a Replication,
    ) -> Result<Declare<'a>, Failure> {
        Declare::open(&self.connection, replication)
            .await
            .map_err(broker_failure)
    }

    /// A new channel on the connection.
    pub(super) async fn channel(&self) -> Result<Channel, Failure> {
        self.connection
            .create_channel()
            .await
            .map_err(lapin_failure("open channel"))
    }

    /// Closes the shared publish channel: the next publish opens a new one.
    pub(super) async fn reset_publisher(&self) {
        let old = self.publisher.lock().await.take();
        if let Some(ch) = old {
            let _ = ch.close(200, ShortString::from("publishes nacked")).await;
        }
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
