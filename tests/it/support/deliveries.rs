//! The queue port from a test's side: declare queues, wait for the next delivery, read the
//! key it carries.

use std::collections::BTreeSet;
use std::time::Duration;

use cronq_shared::broker::{Broker, Delivery};
use cronq_shared::message::Occurrence;
use cronq_shared::names::QueueName;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// How long to wait for a delivery.
pub const WAIT: Duration = Duration::from_secs(20);

/// Declares `queues` (and the exchange and dead-letter queue).
pub async fn declare<B: Broker>(broker: &B, queues: &[&QueueName]) {
    let set: BTreeSet<QueueName> = queues.iter().map(|q| (*q).clone()).collect();
    broker.declare(&set).await.unwrap();
}

/// A subscription to `q` with `prefetch`, and the token that ends it.
pub async fn subscribe<B: Broker>(
    broker: &B,
    q: &QueueName,
    prefetch: u16,
) -> (mpsc::Receiver<Delivery>, CancellationToken) {
    let token = CancellationToken::new();
    let rx = broker
        .consume(std::slice::from_ref(q), prefetch, token.clone())
        .await
        .unwrap();
    (rx, token)
}

/// The next delivery on `rx`, within [`WAIT`].
pub async fn next(rx: &mut mpsc::Receiver<Delivery>) -> Delivery {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("timed out waiting for a delivery")
        .expect("subscription ended while waiting for a delivery")
}

/// The occurrence key a delivery carries.
pub fn key_of(d: &Delivery) -> String {
    Occurrence::decode(&d.body).unwrap().key.to_string()
}
