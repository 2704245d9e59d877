//! RabbitMQ for the tests of what the queue port does there beyond its contract: a broker
//! under the test's namespace, and a plain lapin channel for what the port does not show.

use std::time::Duration;

use cronq_rabbitmq::AmqpBroker;
use cronq_rabbitmq::topology::quantize_delay;
use cronq_shared::names::{Names, Namespace, QueueName};

use super::deliveries::WAIT;
use super::occurrences::queue;
use super::{TestEnv, amqp_url, eventually, scoped};

/// A RabbitMQ broker under the test's namespace.
pub async fn connect(env: &TestEnv) -> AmqpBroker {
    let names = Names::new(&Namespace::new(env.namespace.clone()).unwrap());
    AmqpBroker::connect(&amqp_url(), names)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `suite` against RabbitMQ on queue `a` under a fresh namespace named `test`.
pub async fn run<F, Fut>(test: &'static str, suite: F)
where
    F: FnOnce(AmqpBroker, QueueName) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    scoped(test, move |env| async move {
        env.track_queue("a");
        let broker = connect(&env).await;
        // The delay queue of the 1.5 s delays the tests publish with.
        let delay = quantize_delay(Duration::from_millis(1500));
        env.track_raw_queue(&broker.names().delay_queue(delay));
        suite(broker.clone(), queue("a")).await;
        broker.close().await;
    })
    .await;
}

/// Runs `op` on a channel of a fresh plain lapin connection until it succeeds with
/// `Some`: a concurrent `close_all_connections` (another test) may break any attempt.
pub async fn with_raw_channel<T, F, Fut>(what: &str, op: F) -> T
where
    F: Fn(lapin::Channel) -> Fut,
    Fut: std::future::Future<Output = lapin::Result<Option<T>>>,
{
    eventually(WAIT, what, || async {
        let conn = lapin::Connection::connect(&amqp_url(), Default::default())
            .await
            .ok()?;
        let result = match conn.create_channel().await {
            Ok(ch) => op(ch).await.ok().flatten(),
            Err(_) => None,
        };
        let _ = conn.close(200, "done".into()).await;
        result
    })
    .await
}

/// A passive declare of the broker queue `queue` (its counts).
pub async fn passive(ch: &lapin::Channel, queue: &str) -> lapin::Result<lapin::Queue> {
    ch.queue_declare(
        queue.into(),
        lapin::options::QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        Default::default(),
    )
    .await
}

/// The messages ready in the logical queue `queue` of `names`, and its consumers.
pub async fn queue_counts(names: &Names, queue: &str) -> (u32, u32) {
    let name = names.queue(&QueueName::new(queue).unwrap());
    with_raw_channel(&format!("the counts of {name}"), |ch| {
        let name = name.clone();
        async move {
            let q = passive(&ch, name.as_str()).await?;
            Ok(Some((q.message_count(), q.consumer_count())))
        }
    })
    .await
}

/// Puts `body` (not necessarily an occurrence) on the logical queue `queue` of `names`
/// with a plain lapin publish, as a foreign publisher could; confirmed by the broker.
pub async fn publish_raw(names: &Names, queue: &str, body: &[u8]) {
    let conn = lapin::Connection::connect(&amqp_url(), Default::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(Default::default()).await.unwrap();
    let confirm = ch
        .basic_publish(
            names.exchange().as_str().into(),
            queue.into(),
            lapin::options::BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            },
            body,
            lapin::BasicProperties::default().with_delivery_mode(2),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(
        matches!(confirm, lapin::Confirmation::Ack(None)),
        "raw publish to {queue} not routed"
    );
    let _ = conn.close(200, "done".into()).await;
}
