//! Dropped connections lose nothing: a leader whose RabbitMQ and Redis connections are
//! closed publishes every second once; a broker that closes every connection, or cancels a
//! subscription, loses no message; a consumer whose connections are closed while it runs
//! a held claim runs the job once and leaves nothing for the reaper.

use std::collections::{BTreeSet, HashMap};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cronq_rabbitmq::AmqpBroker;
use cronq_shared::broker::{Broker, Outgoing};
use cronq_shared::names::{Names, Namespace};
use tokio_util::sync::CancellationToken;

use crate::support::deliveries::{declare, key_of, next};
use crate::support::occurrences::{outgoing, queue};
use crate::support::producer_process::{
    WAIT, advance, mid_second, producer, stop_and_drain, tick_config, wait_leader,
};
use crate::support::published::{assert_contiguous, keys, seconds_once};
use crate::support::rabbitmq::{run, with_raw_channel};
use crate::support::{TestEnv, amqp_url, eventually, scoped};

/// RabbitMQ's names of the AMQP connections of process `pid` (only this test's, not the
/// whole broker's).
fn amqp_connections_of(pid: u32) -> Vec<String> {
    let ss = Command::new("ss")
        .args(["-tnpH", "( dport = :5672 )"])
        .output()
        .expect("run ss");
    let mark = format!("pid={pid},");
    let ports: Vec<String> = String::from_utf8_lossy(&ss.stdout)
        .lines()
        .filter(|l| l.contains(&mark))
        .filter_map(|l| {
            l.split_whitespace()
                .nth(3)?
                .rsplit(':')
                .next()
                .map(str::to_owned)
        })
        .collect();
    let list = Command::new("rabbitmqctl")
        .args(["list_connections", "pid", "peer_port", "-q"])
        .output()
        .expect("run rabbitmqctl (is RabbitMQ installed locally?)");
    String::from_utf8_lossy(&list.stdout)
        .lines()
        .filter_map(|line| {
            let mut cols = line.split('\t');
            let (conn, port) = (cols.next()?, cols.next()?);
            ports
                .iter()
                .any(|p| p == port.trim())
                .then(|| conn.to_owned())
        })
        .collect()
}

/// Closes the AMQP connection RabbitMQ names `conn`.
fn close_amqp_connection(conn: &str) {
    let out = Command::new("rabbitmqctl")
        .args(["close_connection", conn, "test: connection drop"])
        .output()
        .expect("run rabbitmqctl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The messages of broker queue `queue`, ready and unacked, as RabbitMQ counts them.
fn queue_messages(queue: &str) -> Option<u64> {
    let list = Command::new("rabbitmqctl")
        .args(["list_queues", "name", "messages", "-q"])
        .output()
        .expect("run rabbitmqctl");
    String::from_utf8_lossy(&list.stdout)
        .lines()
        .find_map(|line| {
            let (name, n) = line.split_once('\t')?;
            (name == queue).then(|| n.trim().parse().ok())?
        })
}

/// Closes the AMQP connections of process `pid`; how many.
fn close_amqp_connections_of(pid: u32) -> usize {
    let conns = amqp_connections_of(pid);
    conns.iter().for_each(|c| close_amqp_connection(c));
    conns.len()
}

/// Kills the Redis connections of this namespace's producers (found by client name).
async fn kill_redis_connections(env: &TestEnv) -> usize {
    let mut conn = env.redis().await;
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mark = format!("name=cronq-producer:{}:", env.namespace);
    let mut killed = 0;
    for line in list.lines().filter(|l| l.contains(&mark)) {
        let id = line
            .split(' ')
            .find_map(|f| f.strip_prefix("id="))
            .unwrap()
            .to_owned();
        let n: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(&id)
            .query_async(&mut conn)
            .await
            .unwrap_or(0);
        killed += usize::try_from(n).unwrap_or(0);
    }
    killed
}

#[tokio::test(flavor = "multi_thread")]
async fn dropped_connections_lose_nothing_and_duplicate_nothing() {
    scoped("prod-drops", |env| async move {
        let config = tick_config(&env, "all");
        let a = producer(&env, "a", &config);
        let b = producer(&env, "b", &config);
        let (_, pid) = wait_leader(&env, 0).await;
        advance(&env, "tick", 2).await;
        mid_second().await;
        let closed = tokio::task::spawn_blocking(move || close_amqp_connections_of(pid))
            .await
            .unwrap();
        assert!(closed >= 1, "the leader had an AMQP connection");
        advance(&env, "tick", 3).await;
        mid_second().await;
        let killed = eventually(WAIT, "a named producer connection", || async {
            let n = kill_redis_connections(&env).await;
            (n > 0).then_some(n)
        })
        .await;
        assert!(killed >= 1);
        advance(&env, "tick", 3).await;
        let msgs = stop_and_drain(&env, &[a, b]).await;
        let seconds = seconds_once(&msgs, "tick");
        assert_contiguous(&seconds, &msgs);
        assert!(seconds.len() >= 8, "{:?}", keys(&msgs));
    })
    .await;
}

#[tokio::test]
async fn consume_resubscribes_after_a_broker_side_cancel() {
    run("brk-resubscribe", |b, q| async move {
        declare(&b, &[&q]).await;
        let token = CancellationToken::new();
        let mut rx = b
            .consume(std::slice::from_ref(&q), 4, token.clone())
            .await
            .unwrap();
        b.publish(&[outgoing(&q, "resubscribe", 1)]).await.unwrap();
        let d = next(&mut rx).await;
        d.acker.ack().await.unwrap();
        // Deleting the queue cancels the consumer broker-side (the channel stays open).
        let queue_name = b.names().queue(&q);
        with_raw_channel("the queue deleted", |ch| {
            let queue_name = queue_name.clone();
            async move {
                ch.queue_delete(queue_name.as_str().into(), Default::default())
                    .await
                    .map(Some)
            }
        })
        .await;
        // The subscription declares the queue again and goes on feeding `rx`.
        // Publishing is refused until the queue exists again, so keep trying.
        let deadline = Instant::now() + WAIT;
        let mut n = 1;
        let d = loop {
            assert!(
                Instant::now() < deadline,
                "no delivery after re-subscribing"
            );
            n += 1;
            let _ = b.publish(&[outgoing(&q, "resubscribe", n)]).await;
            if let Ok(Some(d)) = tokio::time::timeout(Duration::from_millis(200), rx.recv()).await {
                break d;
            }
        };
        d.acker.ack().await.unwrap();
        token.cancel();
    })
    .await;
}

fn rabbitmqctl(args: &[&str]) {
    let out = std::process::Command::new("rabbitmqctl")
        .args(args)
        .output()
        .expect("run rabbitmqctl (is RabbitMQ installed locally?)");
    assert!(
        out.status.success(),
        "rabbitmqctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A private vhost for a test that closes every connection: `close_all_connections`
/// acts per vhost, so the other tests (on `/`) keep their connections. Deleting the
/// vhost deletes everything declared in it.
struct Vhost {
    name: String,
    url: String,
}

impl Vhost {
    fn create(name: &str) -> Self {
        let base = amqp_url();
        let uri: lapin::uri::AMQPUri = base.parse().unwrap();
        let user = uri.authority.userinfo.username.clone();
        rabbitmqctl(&["add_vhost", name]);
        rabbitmqctl(&["set_permissions", "-p", name, &user, ".*", ".*", ".*"]);
        let (prefix, _) = base.split_once('?').unwrap_or((&base, ""));
        let (root, _) = prefix.rsplit_once('/').unwrap();
        Self {
            name: name.to_owned(),
            url: format!("{root}/{name}"),
        }
    }

    /// What an operator does: close every connection (of this vhost).
    fn close_all_connections(&self) {
        rabbitmqctl(&["close_all_connections", "-p", &self.name, "test"]);
    }
}

impl Drop for Vhost {
    fn drop(&mut self) {
        let _ = std::process::Command::new("rabbitmqctl")
            .args(["delete_vhost", &self.name])
            .output();
    }
}

/// Of [`survives_closed_connections_without_loss`]: the consumer's prefetch, the messages
/// per publish (confirmed together), and how many times every connection is closed.
const PREFETCH: u16 = 20;
const BATCH: u32 = 5;
const ROUNDS: u32 = 2;

#[tokio::test]
async fn survives_closed_connections_without_loss() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("cronq_shared=debug,lapin=warn")
        .with_test_writer()
        .try_init();
    // Its own vhost and namespace: the connections it closes and the copies it counts are
    // this test's only.
    let scope = format!("t-brk-close-all-{:08x}", rand::random::<u32>());
    let vhost = Arc::new(Vhost::create(&scope));
    let v = vhost.clone();
    let body = tokio::spawn(async move {
        let names = Names::new(&Namespace::new(&scope).unwrap());
        let b = AmqpBroker::connect(&v.url, names).await.unwrap();
        let q = queue("a");
        declare(&b, &[&q]).await;
        // Per key: copies delivered fresh, and copies the broker flagged as redelivered.
        let seen: Arc<Mutex<HashMap<String, (u32, u32)>>> = Arc::default();
        let token = CancellationToken::new();
        let mut rx = b
            .consume(std::slice::from_ref(&q), PREFETCH, token.clone())
            .await
            .unwrap();
        let counter = seen.clone();
        let consumer = tokio::spawn(async move {
            while let Some(d) = rx.recv().await {
                {
                    let mut seen = counter.lock().unwrap();
                    let copies = seen.entry(key_of(&d)).or_default();
                    if d.redelivered {
                        copies.1 += 1;
                    } else {
                        copies.0 += 1;
                    }
                }
                // An ack on a channel that died is fine: the broker redelivers.
                let _ = d.acker.ack().await;
            }
        });
        let mut published = BTreeSet::new();
        for round in 0..ROUNDS {
            let v = v.clone();
            let closer = std::thread::spawn(move || v.close_all_connections());
            let mut i = 0;
            // Publish before, while and after the connections are closed.
            while !closer.is_finished() || i < 20 {
                let n = (round * 10_000 + i) * BATCH;
                let batch: Vec<Outgoing> =
                    (n..n + BATCH).map(|k| outgoing(&q, "close-all", k)).collect();
                b.publish(&batch)
                    .await
                    .unwrap_or_else(|e| panic!("publish: {e:?}"));
                published.extend(batch.iter().map(|o| o.occurrence.key.to_string()));
                i += 1;
            }
            closer.join().unwrap();
        }
        let total = published.len();
        eventually(
            Duration::from_secs(60),
            "every published message consumed",
            || {
                let seen = seen.lock().unwrap();
                let done = published.iter().all(|k| seen.contains_key(k));
                async move { done.then_some(()) }
            },
        )
        .await;
        token.cancel();
        consumer.await.unwrap();
        b.close().await;
        let seen = seen.lock().unwrap();
        assert!(seen.keys().all(|k| published.contains(k)));
        // Copies beyond the first are what at-least-once allows, and no more: a publish
        // sent again because its confirm was lost with the connection (at most the one
        // batch in flight at each close), and a delivery the broker requeued because its
        // ack was lost (at most the prefetch at each close, flagged redelivered).
        let (mut republished, mut redelivered) = (0, 0);
        for (fresh, again) in seen.values() {
            let extra_fresh = fresh.saturating_sub(1);
            republished += extra_fresh;
            redelivered += fresh + again - 1 - extra_fresh;
        }
        eprintln!(
            "close-all: {total} published, {} consumed, {republished} copies published again, \
             {redelivered} redelivered",
            seen.len()
        );
        let closes = ROUNDS;
        assert!(
            republished <= BATCH * closes,
            "{republished} copies published again: more than the batch in flight at each of {closes} closes"
        );
        assert!(
            redelivered <= u32::from(PREFETCH) * closes,
            "{redelivered} copies redelivered: more than the prefetch at each of {closes} closes"
        );
    })
    .await;
    drop(vhost); // deletes the vhost with everything in it, even after a panic
    if let Err(err) = body {
        std::panic::resume_unwind(err.into_panic());
    }
}

/// A consumer's AMQP connections closed right after an `allow` job started, while its claim
/// is held (its message only in the broker, the delivery unacked): the broker requeues the
/// delivery and the consumer, reconnected, gets it again while the run it still has goes
/// on. That run ends the occurrence: one start, one run, `succeeded`; and the ledger keeps
/// no message and no lease for the reaper to hand out later (however the redelivery and the
/// end interleaved: the redelivery keeping the message, or the end coming first).
#[tokio::test]
async fn a_consumer_s_connections_closed_while_its_claim_is_held_run_the_job_once() {
    use cronq_shared::runlog::Outcome;

    use crate::support::consumer_process::{
        consumer_args, first_runs, lines, publish, slow_job, started,
    };
    use crate::support::occurrences::occurrence;

    scoped("held_conn_closed", |env| async move {
        let (config, starts) = slow_job(&env, "allow", 4);
        let config = config.to_str().unwrap();
        let a = env.spawn("a", &consumer_args(config, "a", "20s"));
        started(&env, "a").await;
        // Named before the job starts: the first second of the run is its held window.
        let conns = eventually(WAIT, "consumer a's AMQP connections", || async move {
            let c = tokio::task::spawn_blocking(move || amqp_connections_of(a))
                .await
                .unwrap();
            (!c.is_empty()).then_some(c)
        })
        .await;
        let occ = occurrence("slow", 1);
        let (key, body) = (
            occ.key.clone(),
            env.names().redis_key(&["occbody", occ.key.as_str()]),
        );
        let leases = env.names().redis_key(&["leases"]);
        publish(&env, occ).await;
        eventually(WAIT, "consumer a to start the job", || async {
            (lines(&starts) == 1).then_some(())
        })
        .await;
        let mut redis = env.redis().await;
        let mut record = crate::support::ports::redis_ledger(&env)
            .await
            .fields(&key)
            .await
            .unwrap();
        assert_eq!(
            record.remove("held").as_deref(),
            Some("1"),
            "a's claim is held when its connections close"
        );
        tokio::task::spawn_blocking(move || conns.iter().for_each(|c| close_amqp_connection(c)))
            .await
            .unwrap();
        let done = first_runs(&env, "slow", "the run").await;
        assert_eq!(done.len(), 1, "{done:?}");
        assert_eq!((done[0].outcome, done[0].attempt), (Outcome::Succeeded, 1));
        // The requeued delivery is settled (acked as a duplicate), whenever it came back.
        let queue = env
            .names()
            .queue(&cronq_shared::names::QueueName::new("default").unwrap());
        eventually(
            WAIT,
            "the queue to hold no message, ready or unacked",
            || {
                let queue = queue.as_str().to_owned();
                async move {
                    tokio::task::spawn_blocking(move || queue_messages(&queue) == Some(0))
                        .await
                        .unwrap()
                        .then_some(())
                }
            },
        )
        .await;
        let kept: (bool, Option<f64>) = redis::pipe()
            .exists(&body)
            .zscore(&leases, occurrence("slow", 1).key.as_str())
            .query_async(&mut redis)
            .await
            .unwrap();
        assert_eq!(
            kept,
            (false, None),
            "no message and no lease left for the reaper"
        );
        assert_eq!(lines(&starts), 1, "the job started once");
    })
    .await;
}
