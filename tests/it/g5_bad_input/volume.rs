//! Bad messages at volume against a live fleet (`cronq producer` ×2, one `cronq consumer`,
//! real RabbitMQ and Redis): N foreign bodies put straight into the job queue while two
//! `@every 1s` jobs run, of seven kinds in turn: random bytes, random JSON, well-formed
//! occurrences with a field of the wrong type, keys that do not match their job and time,
//! unknown jobs, huge AMQP headers around a bad body, and (one in a hundred) bodies just
//! over the size limit.
//!
//! Every one is dead-lettered with a reason (the dead-letter queue's listing), the consumer stays
//! up, the job queue drains, every tick of the normal jobs runs exactly once, and the
//! consumer's resident memory after the flood stays within a bound of what it was before.
//!
//! N is `CRONQ_BAD_MESSAGES` (default 1,000, about 30 s); `scripts/bad-messages` runs it
//! with 10,000 and prints the figures (docs/reliability.md). Seeded
//! (`CRONQ_BAD_MESSAGES_SEED`, default random, printed).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use cronq_shared::broker::Broker;
use cronq_shared::message::MAX_MESSAGE_BYTES;
use cronq_shared::names::{Names, Namespace};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use rand::{Rng, RngExt, SeedableRng};
use serde_json::{Value, json};

use crate::support::deployment::{Deployment, LEADER, Options, Running};
use crate::support::history;
use crate::support::occurrences::occurrence;
use crate::support::procfs::kb_field;
use crate::support::rabbitmq::passive;
use crate::support::{TestEnv, amqp_url, data_file, eventually, scoped};

/// The kinds of bad body, in the order they are sent.
const KINDS: [&str; 6] = [
    "random bytes",
    "random JSON",
    "wrong field type",
    "key mismatch",
    "unknown job",
    "huge headers",
];
/// One message in this many is a body just over the size limit (kept rare: each is 1 MiB).
const OVERSIZE_EVERY: usize = 100;
/// The size of the header table of a `huge headers` message (RabbitMQ's frame is 128 KiB).
const HEADER_BYTES: usize = 64 * 1024;
/// The growth of the consumer's resident memory the flood may cause.
const RSS_SLACK: u64 = 64 * 1024 * 1024;
/// Confirms awaited together.
const BATCH: usize = 200;

fn count() -> usize {
    std::env::var("CRONQ_BAD_MESSAGES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000)
}

/// The resident memory of process `pid`, in bytes (`VmRSS` of /proc/PID/status).
fn rss(pid: u32) -> u64 {
    kb_field(pid, "status", "VmRSS:")
}

fn alive(pid: u32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None).is_ok()
}

fn random_json(rng: &mut impl Rng, depth: u32) -> Value {
    match rng.random_range(0..if depth > 2 { 4 } else { 6 }) {
        0 => Value::Null,
        1 => json!(rng.random::<bool>()),
        2 => json!(rng.random::<i64>()),
        3 => json!(format!("{:x}", rng.random::<u64>())),
        4 => Value::Array(
            (0..rng.random_range(0..5))
                .map(|_| random_json(rng, depth + 1))
                .collect(),
        ),
        _ => {
            let mut map = serde_json::Map::new();
            for i in 0..rng.random_range(0..6) {
                let key = ["kind", "key", "job", "attempt", "x"][i % 5];
                map.insert(key.to_owned(), random_json(rng, depth + 1));
            }
            if rng.random::<bool>() {
                map.insert("kind".into(), json!("occurrence.v1"));
            }
            Value::Object(map)
        }
    }
}

/// A well-formed occurrence of `tick-a` as JSON, for the kinds that break one field.
fn tick_json(i: u32) -> Value {
    let mut occ = occurrence("tick-a", 0);
    // Far in the past, so that no key collides with a real tick's.
    let at = DateTime::<Utc>::from_timestamp(1_000_000_000 + i64::from(i), 0).unwrap();
    occ.scheduled_at = at;
    occ.scheduled_local = at.fixed_offset();
    occ.key = cronq_shared::key::OccurrenceKey::scheduled(occ.job.clone(), at);
    serde_json::from_slice(&occ.encode()).unwrap()
}

/// The `i`th bad message: its kind, body and headers.
fn bad_message(rng: &mut impl Rng, i: usize) -> (&'static str, Vec<u8>, FieldTable) {
    let n = i as u32;
    if i % OVERSIZE_EVERY == OVERSIZE_EVERY - 1 {
        let mut body = tick_json(n).to_string().into_bytes();
        body.resize(MAX_MESSAGE_BYTES + rng.random_range(1..64), b' ');
        return ("over the size limit", body, FieldTable::default());
    }
    let kind = KINDS[i % KINDS.len()];
    let mut headers = FieldTable::default();
    let body = match kind {
        "random bytes" => {
            let mut body = vec![0u8; rng.random_range(0..512)];
            rng.fill_bytes(&mut body);
            body
        }
        "random JSON" => random_json(rng, 0).to_string().into_bytes(),
        "wrong field type" => {
            let mut json = tick_json(n);
            let (field, value) = [
                ("attempt", json!("one")),
                ("scheduled_at", json!(12)),
                ("key", json!([1, 2])),
                ("job", json!({"name": "tick-a"})),
                ("trigger", json!("sometimes")),
                ("epoch", json!(-1)),
                ("deadline", json!("soon")),
                ("published_at", Value::Null),
            ][i % 8]
                .clone();
            json[field] = value;
            json.to_string().into_bytes()
        }
        "key mismatch" => {
            let mut json = tick_json(n);
            if i.is_multiple_of(2) {
                json["key"] = json!("tick-b@2001-09-09T01:46:40Z");
            } else {
                json["scheduled_at"] = json!("1999-01-01T00:00:00Z");
            }
            json.to_string().into_bytes()
        }
        "unknown job" => {
            let mut occ = occurrence(&format!("ghost-{}", i % 50), n);
            occ.attempt = 1 + n % 3;
            occ.encode()
        }
        _ => {
            for h in 0..4 {
                let value = "h".repeat(HEADER_BYTES / 4 - 64);
                headers.insert(
                    ShortString::from(format!("x-huge-{h}")),
                    AMQPValue::LongString(LongString::from(value)),
                );
            }
            headers.insert("x-death".into(), AMQPValue::LongString("garbage".into()));
            b"{\"kind\":\"occurrence.v1\"".to_vec()
        }
    };
    (kind, body, headers)
}

/// Publishes `count` bad messages to the logical queue `default` of `names`, with
/// confirms; returns how many of each kind.
async fn flood(names: &Names, count: usize, seed: u64) -> BTreeMap<&'static str, usize> {
    let mut rng = rand::rngs::Xoshiro256PlusPlus::seed_from_u64(seed);
    let conn = lapin::Connection::connect(&amqp_url(), Default::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(Default::default()).await.unwrap();
    let mut kinds = BTreeMap::new();
    let mut pending = Vec::with_capacity(BATCH);
    for i in 0..count {
        let (kind, body, headers) = bad_message(&mut rng, i);
        *kinds.entry(kind).or_insert(0) += 1;
        let confirm = ch
            .basic_publish(
                names.exchange().as_str().into(),
                "default".into(),
                lapin::options::BasicPublishOptions {
                    mandatory: true,
                    ..Default::default()
                },
                &body,
                lapin::BasicProperties::default()
                    .with_delivery_mode(2)
                    .with_headers(headers),
            )
            .await
            .unwrap_or_else(|e| panic!("publish of bad message {i} ({kind}): {e}"));
        pending.push((i, kind, confirm));
        if pending.len() == BATCH || i + 1 == count {
            for (i, kind, confirm) in pending.drain(..) {
                let confirmation = confirm.await.unwrap();
                assert!(
                    matches!(confirmation, lapin::Confirmation::Ack(None)),
                    "bad message {i} ({kind}) not routed: {confirmation:?}"
                );
            }
        }
    }
    let _ = conn.close(200, "done".into()).await;
    kinds
}

/// How many messages the broker queue `queue` holds.
async fn depth(queue: &str) -> u32 {
    let conn = lapin::Connection::connect(&amqp_url(), Default::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    let q = passive(&ch, queue)
        .await
        .unwrap_or_else(|e| panic!("queue {queue}: {e}"));
    let _ = conn.close(200, "done".into()).await;
    q.message_count()
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_messages_at_volume_are_dead_lettered_and_the_consumer_stays_up() {
    scoped("bad-volume", |env: TestEnv| async move {
        let count = count();
        let seed = std::env::var("CRONQ_BAD_MESSAGES_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(rand::random::<u64>);
        eprintln!("bad messages at volume: {count} messages, seed {seed}");
        let toml = format!(
            "{LEADER}{}{}",
            data_file::job(&env, "tick-a", "@every 1s", ""),
            data_file::job(&env, "tick-b", "@every 1s", ""),
        );
        let options = Options {
            consumers: 1,
            ..Options::default()
        };
        let running = Running::start_with(Deployment::Fleet, &env, &toml, options).await;
        let names = Names::new(&Namespace::new(&env.namespace).unwrap());
        let wait = Duration::from_secs(60);
        eventually(wait, "the normal jobs to run", || async {
            (data_file::ran(&env, "tick-a").len() >= 3 && data_file::ran(&env, "tick-b").len() >= 3)
                .then_some(())
        })
        .await;
        let consumer = running.consumers()[0];
        let rss_before = rss(consumer);

        let started = Instant::now();
        let kinds = flood(&names, count, seed).await;
        let published_in = started.elapsed();
        // Each bad message costs the consumer a dead-letter publish: allow 20 ms apiece.
        let within = wait + Duration::from_millis(20 * count as u64);
        let dlq = names.dead_letter_queue();
        let job_queue = names.queue(&crate::support::occurrences::queue("default"));
        eventually(within, "every bad message dead-lettered", || async {
            (depth(&dlq).await as usize >= count).then_some(())
        })
        .await;
        let dead_lettered_in = started.elapsed();
        eventually(wait, "the job queue drained", || async {
            (depth(&job_queue).await == 0).then_some(())
        })
        .await;
        assert!(alive(consumer), "the consumer died:\n{}", running.logs());
        let rss_after = rss(consumer);

        // Exactly the bad messages are dead letters, each with a reason: read through the
        // queue port, as `cronq dlq list` does, without the command's 30 s deadline (a
        // listing of 10,000 letters can take longer on a loaded machine).
        let broker = crate::support::rabbitmq::connect(&env).await;
        let letters = broker.dead_letters().await.expect("the dead letters");
        broker.close().await;
        assert_eq!(letters.len(), count, "dead letters");
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        for l in &letters {
            let reason = l.reason.as_str();
            assert!(!reason.is_empty(), "a dead letter without a reason: {l:?}");
            // One line per kind of reason: its first two parts, cut before the first
            // number, quote or key.
            let two = reason.splitn(3, ':').take(2).collect::<Vec<_>>().join(":");
            let head = two
                .split(|c: char| c.is_ascii_digit() || c == '"' || c == '@')
                .next()
                .unwrap_or(&two);
            *reasons.entry(head.trim().to_owned()).or_insert(0) += 1;
        }

        // The normal jobs: every tick exactly once.
        running.stop_producing().await;
        for job in ["tick-a", "tick-b"] {
            let published = running.published(job);
            let entries = eventually(wait, "every published tick settled", || async {
                let entries = running.entries(job).await;
                let settled = history::terminal(&entries);
                published
                    .iter()
                    .all(|k| settled.contains_key(k))
                    .then_some(entries)
            })
            .await;
            // Only the window the producers' logs fully cover: a producer stopped with a
            // publish in flight gives it up unconfirmed, and it may run all the same.
            let window = history::window(job, &published, 1, &entries);
            let problems = window.problems();
            assert!(problems.is_empty(), "{job}: {problems:#?}\n{}", running.logs());
            let ran = data_file::ran(&env, job);
            let mut once = ran.clone();
            once.sort();
            once.dedup();
            assert_eq!(once.len(), ran.len(), "{job} ran a key twice: {ran:?}");
            eprintln!("{job}: {} ticks, each exactly once", window.expected.len());
        }
        eprintln!(
            "bad messages at volume: {count} published in {:.1} s, all dead-lettered after {:.1} s ({:.0}/s); kinds {kinds:?}",
            published_in.as_secs_f64(),
            dead_lettered_in.as_secs_f64(),
            count as f64 / dead_lettered_in.as_secs_f64()
        );
        eprintln!("dead-letter reasons: {reasons:#?}");
        eprintln!(
            "consumer RSS: {:.1} MiB before, {:.1} MiB after",
            mib(rss_before),
            mib(rss_after)
        );
        assert!(
            rss_after <= rss_before + RSS_SLACK,
            "the consumer's memory grew from {:.1} MiB to {:.1} MiB",
            mib(rss_before),
            mib(rss_after)
        );
    })
    .await;
}
