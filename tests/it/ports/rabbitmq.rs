//! What the queue port does on RabbitMQ beyond its contract: the properties a message is
//! published with, a connect error that names the URL without its password, and a delay
//! queue deleted behind the broker's back declared again.

use std::time::Duration;

use cronq_rabbitmq::AmqpBroker;
use cronq_rabbitmq::topology::quantize_delay;
use cronq_shared::broker::Broker;
use cronq_shared::names::{Names, Namespace};
use lapin::options::BasicGetOptions;
use lapin::types::AMQPValue;
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
