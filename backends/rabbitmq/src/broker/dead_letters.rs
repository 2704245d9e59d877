//! The dead-letter queue walk behind `dead_letters` and `replay`.
//!
//! Invariant: the walk consumes every letter without ack on a dedicated channel and closes
//! it at the end, so every letter not acked goes back to the queue (a quorum queue, which on
//! RabbitMQ 3.10 puts them back in another order: `dead_letters` sorts what it lists). A
//! letter is acked only after its replay was confirmed, so an interrupted replay loses
//! nothing. A walk returns once the letters it held back are ready again: a quorum queue
//! takes them back after the channel's close-ok (measured: a listing right after a replay
//! saw none of them), and the next walk counts only ready letters.
//!
//! The walk reads with a consumer whose prefetch window covers every letter it counted
//! (the letters it keeps stay unacked, so a smaller window would stall it), not one
//! `basic.get` round trip per letter: docs/benchmarks-notebook.md has the listing at 10,000 letters.

use std::future::Future;
use std::time::Duration;

use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicQosOptions, QueueDeclareOptions,
};
use lapin::types::{FieldTable, ShortString};

use super::failure::{Failure, broker_failure, channel_gone, lapin_failure};
use super::link::Link;
use crate::headers::read_dead_letter;
use crate::topology::{Replication, short};
use cronq_shared::broker::{Broker, BrokerError, DeadLetter, Pick};
use cronq_shared::names::Names;

/// One walk over the dead-letter queue on a dedicated channel: every message is consumed
/// without ack, so closing the channel puts every message not acked back.
/// The walk covers the letters present when it starts: letters arriving meanwhile
/// wait for the next walk, so a busy queue cannot keep it going forever.
pub(super) async fn walk(
    names: &Names,
    replication: &Replication,
    link: &Link,
    mut visit: impl AsyncVisit,
) -> Result<(), Failure> {
    let mut declare = link.declare(replication).await?;
    declare.base(names).await.map_err(broker_failure)?;
    declare.close().await;
    let ch = link.channel().await?;
    let dlq = short("read dead letters", names.dead_letter_queue())?;
    let mut held = 0;
    let result = async {
        let present = ready(&ch, &dlq).await?;
        if present == 0 {
            return Ok(());
        }
        // Prefetch 0 is "no limit" (more letters than a window can count).
        let window = u16::try_from(present).unwrap_or(0);
        ch.basic_qos(window, BasicQosOptions { global: false })
            .await
            .map_err(lapin_failure("read dead letters"))?;
        let tag = short(
            "read dead letters",
            format!("cronq-walk-{}", uuid::Uuid::new_v4().simple()),
        )?;
        let mut consumer = ch
            .basic_consume(
                dlq.clone(),
                tag.clone(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(lapin_failure("read dead letters"))?;
        let mut seen = 0;
        while seen < present {
            let Some(delivery) = next_letter(&ch, &dlq, &mut consumer).await? else {
                break;
            };
            seen += 1;
            let letter = read_dead_letter(names, &delivery.properties, &delivery.data);
            if visit.visit(letter, &delivery.acker).await? == Visited::Kept {
                held += 1;
            }
        }
        // Letters delivered past the count (they arrived meanwhile) go back at the close.
        let _ = ch.basic_cancel(tag, BasicCancelOptions::default()).await;
        Ok(())
    }
    .await;
    let _ = ch.close(200, ShortString::from("walked")).await;
    if result.is_ok() && held > 0 {
        settle(link, &dlq, held).await?;
    }
    result
}

/// How long the walk waits for its consumer's next letter before it asks whether any is
/// still ready (a concurrent walk may hold the ones it counted).
const IDLE: Duration = Duration::from_millis(500);

/// The consumer's next letter, or `None` once none is on its way and none is ready.
async fn next_letter(
    ch: &lapin::Channel,
    dlq: &ShortString,
    consumer: &mut lapin::Consumer,
) -> Result<Option<lapin::message::Delivery>, Failure> {
    loop {
        match tokio::time::timeout(IDLE, consumer.next()).await {
            Ok(Some(delivery)) => {
                return delivery
                    .map(Some)
                    .map_err(lapin_failure("read dead letters"));
            }
            // The channel closed under the walk: a new link may fix it.
            Ok(None) => {
                return Err(Failure {
                    error: channel_gone("read dead letters"),
                    transient: true,
                });
            }
            Err(_) if ready(ch, dlq).await? == 0 => return Ok(None),
            Err(_) => {}
        }
    }
}

/// How many letters are ready in the dead-letter queue (held ones are not counted).
async fn ready(ch: &lapin::Channel, dlq: &ShortString) -> Result<u32, Failure> {
    let passive = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    Ok(ch
        .queue_declare(dlq.clone(), passive, FieldTable::default())
        .await
        .map_err(lapin_failure("count dead letters"))?
        .message_count())
}

/// The longest a walk waits for the letters it held back to be ready again; past it (a
/// concurrent walk holds some) the walk returns anyway: nothing is lost, only the next
/// listing may come before they are back.
const SETTLE_WAIT: Duration = Duration::from_secs(5);

/// Waits until at least `held` letters are ready (letters only arrive meanwhile: walks
/// are the queue's only readers).
async fn settle(link: &Link, dlq: &ShortString, held: u32) -> Result<(), Failure> {
    let ch = link.channel().await?;
    let deadline = tokio::time::Instant::now() + SETTLE_WAIT;
    let result = async {
        while ready(&ch, dlq).await? < held && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }
    .await;
    let _ = ch.close(200, ShortString::from("settled")).await;
    result
}

/// Whether a visit took a letter out of the queue or left it there.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Visited {
    Acked,
    Kept,
}

/// What [`walk`] does with each letter.
pub(super) trait AsyncVisit {
    fn visit(
        &mut self,
        letter: DeadLetter,
        acker: &lapin::Acker,
    ) -> impl Future<Output = Result<Visited, Failure>> + Send;
}

pub(super) struct Collect<'a>(pub(super) &'a mut Vec<DeadLetter>);

impl AsyncVisit for Collect<'_> {
    async fn visit(&mut self, letter: DeadLetter, _: &lapin::Acker) -> Result<Visited, Failure> {
        self.0.push(letter);
        Ok(Visited::Kept)
    }
}

pub(super) struct Replay<'a> {
    pub(super) broker: &'a dyn Broker,
    pub(super) select: &'a (dyn for<'l> Fn(&'l DeadLetter) -> Pick + Send + Sync),
    pub(super) replayed: usize,
}

impl AsyncVisit for Replay<'_> {
    async fn visit(
        &mut self,
        letter: DeadLetter,
        acker: &lapin::Acker,
    ) -> Result<Visited, Failure> {
        let replay = match (self.select)(&letter) {
            Pick::Keep => return Ok(Visited::Kept),
            Pick::Remove => false,
            Pick::Replay(out) => {
                self.broker
                    .publish(std::slice::from_ref(&*out))
                    .await
                    .map_err(Failure::fatal)?;
                true
            }
        };
        // Only now, with the replay confirmed, may the letter leave the queue.
        match acker.ack(BasicAckOptions::default()).await {
            Ok(true) => {
                self.replayed += usize::from(replay);
                Ok(Visited::Acked)
            }
            Ok(false) => Err(Failure::fatal(channel_gone("ack replayed dead letter"))),
            Err(e) => Err(Failure::fatal(BrokerError::Protocol {
                op: "ack replayed dead letter",
                source: Box::new(e),
            })),
        }
    }
}

impl<T: AsyncVisit + Send> AsyncVisit for &mut T {
    fn visit(
        &mut self,
        letter: DeadLetter,
        acker: &lapin::Acker,
    ) -> impl Future<Output = Result<Visited, Failure>> + Send {
        (**self).visit(letter, acker)
    }
}
