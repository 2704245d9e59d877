//! What the queue port does on RabbitMQ beyond its contract: the properties a message is
//! published with, a connect error that names the URL without its password, a list of node
//! URLs, a delay queue deleted behind the broker's back declared again, and queues declared
//! by an earlier cronq used as they are.

use std::time::Duration;

use cronq_rabbitmq::AmqpBroker;
use cronq_rabbitmq::topology::quantize_delay;
use cronq_shared::broker::Broker;
use cronq_shared::broker::DeadLetter;
use cronq_shared::names::{Names, Namespace};
use lapin::options::{BasicGetOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use tokio_util::sync::CancellationToken;

use crate::support::deliveries::{declare, key_of, next};
use crate::support::occurrences::{occurrence, outgoing};
use crate::support::rabbitmq::{run, with_raw_channel};

#[tokio::test]
async fn published_messages_carry_properties() {
    run("brk-props", |b, q| async move {
        declare(&b, &[&q]).await;
        let out = outgoing(&q, "props", 7);
        b.publish(std::slice::from_ref(&out)).await.unwrap();
        let queue_name = b.names().queue(&q);
        let msg = with_raw_channel("the message in its queue", |ch| {
            let queue_name = queue_name.clone();
            async move {
                // Without ack: closing the channel puts it back.
                ch.basic_get(
                    queue_name.as_str().into(),
                    BasicGetOptions { no_ack: false },
                )
                .await
                .map(|m| m.map(|m| m.delivery))
            }
        })
        .await;
        let props = &msg.properties;
        let key = out.occurrence.key.to_string();
        assert_eq!(*props.delivery_mode(), Some(2));
        assert_eq!(
            props.message_id().as_ref().map(|m| m.to_string()),
            Some(key)
        );
        assert_eq!(
            props
                .content_type()
                .as_ref()
                .map(|m| m.to_string())
                .as_deref(),
            Some("application/json")
        );
        let headers = props.headers().clone().unwrap();
        let text = |k: &str| match headers.inner().get(k) {
            Some(AMQPValue::LongString(s)) => s.to_string(),
            other => panic!("header {k}: {other:?}"),
        };
        assert_eq!(text("x-cronq-job"), "props");
        assert_eq!(text("x-cronq-scheduled-at"), "2026-11-29T00:00:07Z");
        assert_eq!(
            headers.inner().get("x-cronq-attempt"),
            Some(&AMQPValue::LongLongInt(1))
        );
    })
    .await;
}

#[tokio::test]
async fn connect_failure_names_the_redacted_url() {
    let names = Names::new(&Namespace::new("t-brk-unreachable").unwrap());
    let err = AmqpBroker::connect("amqp://guest:s3cret@127.0.0.1:1/%2f", names)
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("amqp://***@127.0.0.1:1/%2f"), "{text}");
    assert!(text.contains("rabbitmq-server"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
}

#[tokio::test]
async fn delay_queue_deleted_behind_the_cache_is_declared_again() {
    run("brk-delay-gone", |b, q| async move {
        declare(&b, &[&q]).await;
        let mut late = outgoing(&q, "delay-gone", 1);
        late.delay = Duration::from_millis(1500);
        b.publish(std::slice::from_ref(&late)).await.unwrap();
        let delay_queue = b.names().delay_queue(quantize_delay(late.delay));
        with_raw_channel("the delay queue deleted", |ch| {
            let delay_queue = delay_queue.clone();
            async move {
                ch.queue_delete(delay_queue.as_str().into(), Default::default())
                    .await
                    .map(Some)
            }
        })
        .await;
        late.occurrence = occurrence("delay-gone", 2);
        b.publish(std::slice::from_ref(&late)).await.unwrap();
        let token = CancellationToken::new();
        let mut rx = b
            .consume(std::slice::from_ref(&q), 4, token.clone())
            .await
            .unwrap();
        let d = next(&mut rx).await;
        assert_eq!(key_of(&d), late.occurrence.key.to_string());
        d.acker.ack().await.unwrap();
        token.cancel();
    })
    .await;
}

#[tokio::test]
async fn a_node_list_connects_to_a_live_node_and_names_every_url_when_none_is() {
    let names = Names::new(&Namespace::new("t-brk-node-list").unwrap());
    // Port 1 refuses at once: whichever order the list is taken in, the live node is found.
    let list = format!(
        "amqp://guest:s3cret@127.0.0.1:1/%2f,{}",
        crate::support::amqp_url()
    );
    for _ in 0..4 {
        let broker = AmqpBroker::connect(&list, names.clone()).await.unwrap();
        broker.close().await;
    }
    let err = AmqpBroker::connect(
        "amqp://guest:s3cret@127.0.0.1:1/%2f, amqp://other:s3cret2@127.0.0.1:2/%2f",
        names,
    )
    .await
    .unwrap_err();
    let mut text = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(e) = source {
        text += &format!(": {e}");
        source = e.source();
    }
    assert!(
        text.contains("amqp://***@127.0.0.1:1/%2f") && text.contains("amqp://***@127.0.0.1:2/%2f"),
        "{text}"
    );
    assert!(!text.contains("s3cret"), "{text}");
}

/// The arguments an earlier cronq declared a job queue with (no replication size).
fn earlier_queue_args(names: &Names) -> FieldTable {
    let mut args = FieldTable::default();
    for (k, v) in [
        ("x-queue-type", AMQPValue::LongString("quorum".into())),
        ("x-delivery-limit", AMQPValue::LongInt(10)),
        (
            "x-dead-letter-exchange",
            AMQPValue::LongString(names.dead_letter_exchange().into()),
        ),
        (
            "x-dead-letter-strategy",
            AMQPValue::LongString("at-least-once".into()),
        ),
        ("x-overflow", AMQPValue::LongString("reject-publish".into())),
    ] {
        args.insert(k.into(), v);
    }
    args
}

#[tokio::test]
async fn queues_declared_by_an_earlier_cronq_are_used_as_they_are() {
    run("brk-earlier", |b, q| async move {
        let names = b.names().clone();
        // As an earlier cronq left them: a classic dead-letter queue, a job queue without
        // a replication size. Declaring them again with other arguments is refused by
        // RabbitMQ (406): the broker must use them as they are.
        with_raw_channel("the earlier queues declared", |ch| {
            let names = names.clone();
            let q = q.clone();
            async move {
                let durable = QueueDeclareOptions {
                    durable: true,
                    ..QueueDeclareOptions::default()
                };
                ch.queue_declare(
                    names.dead_letter_queue().as_str().into(),
                    durable,
                    FieldTable::default(),
                )
                .await?;
                ch.queue_declare(
                    names.queue(&q).as_str().into(),
                    durable,
                    earlier_queue_args(&names),
                )
                .await?;
                Ok(Some(()))
            }
        })
        .await;
        declare(&b, &[&q]).await;
        let out = outgoing(&q, "earlier", 1);
        b.publish(std::slice::from_ref(&out)).await.unwrap();
        let token = CancellationToken::new();
        let mut rx = b
            .consume(std::slice::from_ref(&q), 4, token.clone())
            .await
            .unwrap();
        let d = next(&mut rx).await;
        assert_eq!(key_of(&d), out.occurrence.key.to_string());
        let letter = DeadLetter {
            key: Some(out.occurrence.key.to_string()),
            job: Some(out.occurrence.job.to_string()),
            queue: Some(q.clone()),
            attempts: 3,
            reason: "failed".to_owned(),
            last_error: Some("exit status 1".to_owned()),
            dead_lettered_at: chrono::Utc::now(),
            body: out.occurrence.encode(),
        };
        b.dead_letter(&letter).await.unwrap();
        d.acker.ack().await.unwrap();
        token.cancel();
        let letters = b.dead_letters().await.unwrap();
        assert_eq!(letters.len(), 1, "{letters:?}");
        assert_eq!(letters[0].key, Some(out.occurrence.key.to_string()));
    })
    .await;
}
