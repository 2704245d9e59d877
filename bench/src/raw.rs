//! The baselines' broker loop: plain lapin with no cronq logic. Persistent publishes with
//! publisher confirms into a quorum queue on the default exchange, and consumers with
//! manual acks (or no acks, to keep a benchmark's queue from growing).
//!
//! Owns: nothing but these few calls, written the plainest way lapin allows, so the gap
//! between a cronq figure and its baseline is cronq's own cost.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context as _, bail};
use futures_util::StreamExt as _;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, Consumer};
use tokio_util::sync::CancellationToken;

/// Declares a durable quorum queue `name` (what cronq's job queues are too).
///
/// # Errors
/// When the broker refuses.
pub async fn declare_quorum(ch: &Channel, name: &str) -> anyhow::Result<()> {
    let mut args = FieldTable::default();
    args.insert(
        ShortString::from("x-queue-type"),
        AMQPValue::LongString("quorum".into()),
    );
    let options = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(name.into(), options, args)
        .await
        .with_context(|| format!("while declaring the baseline queue {name}"))?;
    Ok(())
}

/// A channel in confirm mode.
///
/// # Errors
/// When the channel cannot be opened.
pub async fn confirm_channel(conn: &Connection) -> anyhow::Result<Channel> {
    let ch = conn.create_channel().await?;
    ch.confirm_select(ConfirmSelectOptions::default()).await?;
    Ok(ch)
}

fn persistent() -> BasicProperties {
    BasicProperties::default().with_delivery_mode(2)
}

/// Publishes each body persistently to `queue`, all pipelined, then waits for every
/// confirm; fails on a nack or a returned message.
///
/// # Errors
/// When a publish fails or is not confirmed.
pub async fn publish_confirmed(
    ch: &Channel,
    queue: &str,
    bodies: &[Vec<u8>],
) -> anyhow::Result<()> {
    let mut confirms = Vec::with_capacity(bodies.len());
    for body in bodies {
        let confirm = ch
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                body,
                persistent(),
            )
            .await?;
        confirms.push(confirm);
    }
    for confirm in confirms {
        match confirm.await? {
            Confirmation::Ack(None) => {}
            other => bail!("baseline publish not confirmed: {other:?}"),
        }
    }
    Ok(())
}

/// Subscribes to `queue` with manual acks and prefetch `prefetch`.
///
/// # Errors
/// When the broker refuses.
pub async fn subscribe(ch: &Channel, queue: &str, prefetch: u16) -> anyhow::Result<Consumer> {
    ch.basic_qos(prefetch, BasicQosOptions::default()).await?;
    let consumer = ch
        .basic_consume(
            queue.into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    Ok(consumer)
}

/// Consumes `queue` with manual acks and prefetch `prefetch` until `count` reaches
/// `target` (counting across every consumer sharing it) or `token` is cancelled. With
/// `ack_every` 1 each delivery is acked alone; with more, one ack with `multiple` covers
/// every `ack_every` deliveries (and what is left when it stops), as a consumer that
/// coalesces its acks does.
///
/// # Errors
/// When the subscription fails.
pub async fn consume_acking(
    ch: Channel,
    queue: &str,
    prefetch: u16,
    ack_every: usize,
    count: Arc<AtomicUsize>,
    target: usize,
    token: CancellationToken,
) -> anyhow::Result<()> {
    let mut consumer = subscribe(&ch, queue, prefetch).await?;
    let (coalesce, mut pending) = (ack_every > 1, None);
    let mut unacked = 0;
    loop {
        let next = tokio::select! {
            biased;
            () = token.cancelled() => break,
            d = consumer.next() => d,
        };
        let Some(delivery) = next else { break };
        let delivery = delivery?;
        unacked += 1;
        let done = count.fetch_add(1, Ordering::AcqRel) + 1 >= target;
        if unacked >= ack_every.max(1) || done {
            let multiple = BasicAckOptions { multiple: coalesce };
            delivery.acker.ack(multiple).await?;
            unacked = 0;
            pending = None;
        } else {
            pending = Some(delivery.acker);
        }
        if done {
            token.cancel();
        }
    }
    if let Some(acker) = pending {
        acker.ack(BasicAckOptions { multiple: true }).await?;
    }
    let _ = ch.close(200, "baseline done".into()).await;
    Ok(())
}

/// Consumes `queue` without acks, calling `each` with every body, until `token` is
/// cancelled (keeps a benchmark's queue empty, or observes it).
///
/// # Errors
/// When the subscription fails.
pub async fn observe(
    ch: Channel,
    queue: &str,
    token: CancellationToken,
    mut each: impl FnMut(&[u8]),
) -> anyhow::Result<()> {
    let options = BasicConsumeOptions {
        no_ack: true,
        ..BasicConsumeOptions::default()
    };
    let mut consumer = ch
        .basic_consume(queue.into(), "".into(), options, FieldTable::default())
        .await?;
    loop {
        let next = tokio::select! {
            biased;
            () = token.cancelled() => break,
            d = consumer.next() => d,
        };
        match next {
            Some(Ok(d)) => each(&d.data),
            Some(Err(e)) => return Err(e).context("while observing the queue"),
            None => break,
        }
    }
    let _ = ch.close(200, "observer done".into()).await;
    Ok(())
}
