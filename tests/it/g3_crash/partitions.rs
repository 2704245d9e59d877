//! Network partitions: one process loses one link while everything else works. Each
//! process under test reaches Redis or RabbitMQ through a TCP proxy the test owns
//! (`support::proxy`), which cuts the link (drops its connections and refuses new ones) or
//! stalls it (keeps them open, passing nothing); the services themselves never notice, so
//! other tests are not disturbed.
//!
//! - A consumer cut from Redis, not from RabbitMQ, while its handler runs longer than its
//!   execution lease: for less than the lease (its heartbeats resume), for more (it stops
//!   the attempt, and the occurrence runs again elsewhere once the lease lapses), stalled.
//! - The leading producer cut from Redis, not from RabbitMQ: for less than its leader
//!   lease, for more (it stops publishing before another producer leads: its epoch fences
//!   it), stalled.
//! - A consumer cut from RabbitMQ, not from Redis, while it runs attempts.
//!
//! Each judges the run history: every occurrence of the window the producers' logs cover
//! ends exactly once, and succeeded exactly once; and `cronq verify` over that window
//! accounts for every one of them (0 gaps).

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::support::deployment::{Deployment, Options, Running};
use crate::support::history::{self, Window};
use crate::support::json_log::{lines_of, timestamp};
use crate::support::proxy::{Link, Proxy};
use crate::support::{TestEnv, scoped, until};

const JOB: &str = "tick";
/// How long anything the test waits for may take.
const WAIT: Duration = Duration::from_secs(60);
/// A consumer's execution lease (a heartbeat every third of it).
const CONSUMER_LEASE: &str = "2s";
/// [`CONSUMER_LEASE`] in seconds.
const LEASE_SECS: f64 = 2.0;
/// A handler that runs longer than [`CONSUMER_LEASE`].
const HANDLER_SECS: &str = "3";
/// The producers' leader lease: it steps down 3 s after its last confirmed renewal.
const LEADER: &str = "[leader]\nlease = \"4s\"\nrenew_deadline = \"3s\"\nretry = \"1s\"\n";

/// What the test does to the link.
#[derive(Debug, Clone, Copy)]
enum Fault {
    Cut,
    Stall,
}

/// A proxy on `link` for the process logged as `name`, and the environment that sends that
/// process through it.
async fn proxied(link: Link, name: &str) -> (Proxy, (String, &'static str, String)) {
    let (proxy, through) = Proxy::before(link).await;
    (proxy, (name.to_owned(), link.var(), through))
}

/// The config: one `@every 1s` job, runs allowed to overlap, whose command runs `secs`;
/// a new leader publishes every tick its predecessor did not (`catchup = "all"`: with
/// `latest` it publishes only the last one, as documented, and the window has gaps).
fn config(secs: &str) -> String {
    format!(
        "{LEADER}\n[[job]]\nname = \"{JOB}\"\nschedule = \"@every 1s\"\noverlap = \"allow\"\n\
         catchup = \"all\"\nmax_attempts = 1\ncommand = [\"sleep\", \"{secs}\"]\n"
    )
}

fn options(env_of: Vec<(String, &'static str, String)>) -> Options {
    Options {
        consumers: 2,
        lease: CONSUMER_LEASE,
        consumer_args: vec!["--concurrency", "8"],
        env_of,
        ..Options::default()
    }
}

/// The keys whose attempt had started and not ended at `at`, by a consumer's JSON log.
fn running_at(log: &str, at: DateTime<Utc>) -> Vec<String> {
    let key = |l: &serde_json::Value| l["key"].as_str().unwrap_or_default().to_owned();
    let before = |message: &str| -> Vec<String> {
        lines_of(log, message)
            .iter()
            .filter(|l| timestamp(l) < at)
            .map(key)
            .collect()
    };
    let ended: Vec<String> = [
        before("attempt succeeded"),
        before("attempt did not succeed"),
    ]
    .concat();
    before("attempt started")
        .into_iter()
        .filter(|k| !ended.contains(k))
        .collect()
}

/// Waits until the process logged as `name` has started `n` attempts.
async fn attempts_started(running: &Running, env: &TestEnv, name: &str, n: usize) {
    until(WAIT, &format!("{name} to start {n} attempts"), || async {
        let started = lines_of(&env.log(name), "attempt started").len();
        if started >= n {
            Ok(())
        } else {
            Err(running.logs())
        }
    })
    .await;
}

/// Applies `fault` to `proxy` for `secs`, then restores it.
async fn fault(proxy: &Proxy, fault: Fault, secs: f64) {
    match fault {
        Fault::Cut => proxy.cut(),
        Fault::Stall => proxy.stall(),
    }
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    proxy.restore();
}

/// Lets the fleet publish `after` more seconds, stops the producers, waits until every
/// tick of the window the producers' logs cover has ended, and asserts that each ended
/// exactly once, successfully, exactly once.
async fn exactly_once(running: &Running, after: Duration) -> Window {
    tokio::time::sleep(after).await;
    running.stop_producing().await;
    let published = running.published(JOB);
    assert!(
        published.len() >= 5,
        "too few ticks published: {published:?}\n{}",
        running.logs()
    );
    let gaps: Vec<String> = history::ticks(JOB, &published, 1)
        .into_iter()
        .filter(|k| !published.contains(k))
        .collect();
    assert!(
        gaps.is_empty(),
        "ticks never published: {gaps:?}\n{}",
        running.logs()
    );
    let window = until(WAIT, "every tick of the window to end", || async {
        let window = history::window(JOB, &published, 1, &running.entries(JOB).await);
        let problems = window.problems();
        if problems.iter().any(|p| p.ends_with("no terminal outcome")) {
            Err(format!("{problems:#?}\n{}", running.logs()))
        } else {
            Ok(window)
        }
    })
    .await;
    let problems = window.problems();
    let not_once = window.not_exactly_once();
    assert!(
        problems.is_empty() && not_once.is_empty(),
        "not exactly once: {problems:#?}\nsuccesses: {not_once:?}\n{}",
        running.logs()
    );
    verified(running, &window);
    window
}

/// `cronq verify` over the window: every tick expected, accounted for, no gap.
fn verified(running: &Running, window: &Window) {
    let at = |key: &String| {
        key.parse::<cronq_shared::key::OccurrenceKey>()
            .ok()
            .and_then(|k| k.scheduled_at())
            .expect("a scheduled key")
            .to_rfc3339()
    };
    let (from, to) = (
        at(window.expected.first().expect("a tick")),
        at(window.expected.last().expect("a tick")),
    );
    let out = running.cli(&[
        "verify", "--from", &from, "--to", &to, "--job", JOB, "--grace", "0s", "--json",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "cronq verify: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&text).expect("verify's JSON");
    assert_eq!(report["gaps"], 0, "{report}");
    let tick = report["jobs"]
        .as_array()
        .and_then(|jobs| jobs.iter().find(|j| j["job"] == JOB))
        .unwrap_or_else(|| panic!("no job {JOB} in {report}"));
    assert_eq!(
        tick["expected"].as_u64(),
        Some(window.expected.len() as u64),
        "verify expects the window's ticks: {report}"
    );
}

/// A consumer cut from Redis (not from RabbitMQ) while attempts run on it, longer than its
/// lease: `secs` of `fault`.
async fn consumer_without_redis(env: TestEnv, kind: Fault, secs: f64) {
    let (proxy, route) = proxied(Link::Redis, "consumer-1").await;
    let running = Running::start_with(
        Deployment::Fleet,
        &env,
        &config(HANDLER_SECS),
        options(vec![route]),
    )
    .await;
    attempts_started(&running, &env, "consumer-1", 2).await;
    let cut_at = Utc::now();
    fault(&proxy, kind, secs).await;
    let window = exactly_once(&running, Duration::from_secs(5)).await;
    let log = env.log("consumer-1");
    let met = running_at(&log, cut_at);
    assert!(
        !met.is_empty(),
        "no attempt ran on consumer-1 at the cut:\n{}",
        running.logs()
    );
    let stopped = lines_of(&log, "stopping attempt")
        .iter()
        .filter(|l| l["reason"].as_str() == Some("Lost"))
        .count();
    let missed = lines_of(&log, "cannot renew the execution lease").len();
    if secs > LEASE_SECS {
        // Longer than the lease: consumer-1 gave up what it ran (at once when its calls
        // fail; a stalled call returns when the link comes back and drops it).
        assert!(
            stopped > 0 || missed > 0,
            "consumer-1 never missed a heartbeat:\n{}",
            running.logs()
        );
    }
    eprintln!(
        "consumer cut from Redis ({kind:?} {secs} s): {} ticks exactly once; {} attempts ran at the cut; {missed} heartbeats failed, {stopped} attempts stopped as lost",
        window.expected.len(),
        met.len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn consumer_cut_from_redis_shorter_than_its_lease_runs_each_once() {
    scoped("part-cons-redis-1s", |env| {
        consumer_without_redis(env, Fault::Cut, 1.0)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn consumer_cut_from_redis_longer_than_its_lease_runs_each_once() {
    scoped("part-cons-redis-5s", |env| {
        consumer_without_redis(env, Fault::Cut, 5.0)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn consumer_stalled_on_redis_longer_than_its_lease_runs_each_once() {
    scoped("part-cons-redis-stall", |env| {
        consumer_without_redis(env, Fault::Stall, 5.0)
    })
    .await;
}

/// The leading producer cut from Redis (not from RabbitMQ) for `secs` of `fault`.
async fn leader_without_redis(env: TestEnv, kind: Fault, secs: f64, fails_over: bool) {
    let (proxy_1, route_1) = proxied(Link::Redis, "producer-1").await;
    let (proxy_2, route_2) = proxied(Link::Redis, "producer-2").await;
    let running = Running::start_with(
        Deployment::Fleet,
        &env,
        &config("0"),
        options(vec![route_1, route_2]),
    )
    .await;
    let (leader, _) = until(WAIT, "a leader that has published", || async {
        match running.leader() {
            Some(l) if running.published(JOB).len() >= 3 => Ok(l),
            _ => Err(running.logs()),
        }
    })
    .await;
    let (proxy, other) = if leader == "producer-1" {
        (&proxy_1, "producer-2")
    } else {
        (&proxy_2, "producer-1")
    };
    let cut_at = Utc::now();
    fault(proxy, kind, secs).await;
    exactly_once(&running, Duration::from_secs(5)).await;

    // Fencing: the old leader published nothing after the other producer began to lead.
    let took_over = lines_of(&env.log(other), "became leader")
        .iter()
        .map(timestamp)
        .find(|t| *t > cut_at);
    if fails_over {
        let took_over = took_over.unwrap_or_else(|| {
            panic!(
                "{other} never led after {leader} was cut off:\n{}",
                running.logs()
            )
        });
        let stepped_down = lines_of(&env.log(&leader), "lost leadership")
            .iter()
            .map(timestamp)
            .find(|t| *t > cut_at);
        let stepped_down = stepped_down
            .unwrap_or_else(|| panic!("{leader} never stepped down:\n{}", running.logs()));
        // Its last publish of the term that was cut (before it could lead again).
        let led_again = lines_of(&env.log(&leader), "became leader")
            .iter()
            .map(timestamp)
            .find(|t| *t > cut_at);
        let last_of_term = lines_of(&env.log(&leader), "published occurrence")
            .iter()
            .map(timestamp)
            .filter(|t| *t > cut_at && led_again.is_none_or(|again| *t < again))
            .max();
        if let Some(last) = last_of_term {
            assert!(
                last < took_over,
                "{leader} published at {last} after {other} took over at {took_over}:\n{}",
                running.logs()
            );
        }
        eprintln!(
            "leader cut from Redis ({kind:?} {secs} s): stepped down {} ms after the cut, \
             {other} led {} ms after the cut, last publish of the cut term {:?} ms after it",
            (stepped_down - cut_at).num_milliseconds(),
            (took_over - cut_at).num_milliseconds(),
            last_of_term.map(|t| (t - cut_at).num_milliseconds()),
        );
    } else {
        eprintln!(
            "leader cut from Redis ({kind:?} {secs} s): leadership moved: {}",
            took_over.is_some()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn leader_cut_from_redis_shorter_than_its_lease_publishes_each_once() {
    scoped("part-lead-redis-1s", |env| {
        leader_without_redis(env, Fault::Cut, 1.0, false)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn leader_cut_from_redis_longer_than_its_lease_stops_before_another_leads() {
    scoped("part-lead-redis-7s", |env| {
        leader_without_redis(env, Fault::Cut, 7.0, true)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn leader_stalled_on_redis_longer_than_its_lease_stops_before_another_leads() {
    scoped("part-lead-redis-stall", |env| {
        leader_without_redis(env, Fault::Stall, 7.0, true)
    })
    .await;
}

/// A consumer cut from RabbitMQ (not from Redis) while attempts run on it, `secs` of
/// `fault`: its running attempts keep their claims (heartbeats go to Redis) and end once;
/// its unacked deliveries go to the other consumer, which finds them claimed or done.
async fn consumer_without_rabbitmq(env: TestEnv, kind: Fault, secs: f64) {
    let (proxy, route) = proxied(Link::Amqp, "consumer-1").await;
    let running = Running::start_with(
        Deployment::Fleet,
        &env,
        &config(HANDLER_SECS),
        options(vec![route]),
    )
    .await;
    attempts_started(&running, &env, "consumer-1", 2).await;
    let cut_at = Utc::now();
    fault(&proxy, kind, secs).await;
    let window = exactly_once(&running, Duration::from_secs(5)).await;
    // The fault met consumer-1 while it ran attempts, and it noticed.
    let log = env.log("consumer-1");
    let running_at_cut = running_at(&log, cut_at).len();
    assert!(
        running_at_cut > 0,
        "no attempt ran on consumer-1 at the cut:\n{}",
        running.logs()
    );
    assert!(
        !lines_of(&log, "broker connection lost, reconnecting").is_empty(),
        "consumer-1 never lost its broker connection:\n{}",
        running.logs()
    );
    eprintln!(
        "consumer cut from RabbitMQ ({kind:?} {secs} s): {} ticks exactly once; consumer-1 ran {running_at_cut} attempts at the cut",
        window.expected.len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn consumer_cut_from_rabbitmq_mid_run_runs_each_once() {
    scoped("part-cons-amqp-6s", |env| {
        consumer_without_rabbitmq(env, Fault::Cut, 6.0)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn consumer_stalled_on_rabbitmq_mid_run_runs_each_once() {
    scoped("part-cons-amqp-stall", |env| {
        consumer_without_rabbitmq(env, Fault::Stall, 6.0)
    })
    .await;
}

/// The leading producer stopped (SIGTERM) while its link to RabbitMQ stalls, so that the
/// publish of the next second waits for its confirm: it logs that key as given up (the
/// message may have arrived), and the other producer publishes it again.
#[tokio::test(flavor = "multi_thread")]
async fn leader_stopped_with_a_publish_in_flight_logs_it_as_given_up() {
    scoped("part-lead-given-up", |env| async move {
        let (proxy_1, route_1) = proxied(Link::Amqp, "producer-1").await;
        let (proxy_2, route_2) = proxied(Link::Amqp, "producer-2").await;
        let running = Running::start_with(
            Deployment::Fleet,
            &env,
            &config("0"),
            options(vec![route_1, route_2]),
        )
        .await;
        let (leader, pid) = until(WAIT, "a leader that has published", || async {
            match running.leader() {
                Some(l) if running.published(JOB).len() >= 3 => Ok(l),
                _ => Err(running.logs()),
            }
        })
        .await;
        let proxy = if leader == "producer-1" {
            &proxy_1
        } else {
            &proxy_2
        };
        let published = running.published(JOB).len();
        proxy.stall();
        // The next second's publish goes out and waits for a confirm that cannot come.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        env.signal(pid, nix::sys::signal::Signal::SIGTERM);
        let code = env.wait(pid, WAIT);
        assert_eq!(code, Some(0), "{leader} exits cleanly:\n{}", running.logs());
        proxy.restore();
        let given_up: Vec<String> = lines_of(
            &env.log(&leader),
            "publish given up unconfirmed: it may have arrived",
        )
        .iter()
        .filter(|l| l["level"].as_str() == Some("WARN"))
        .filter_map(|l| l["key"].as_str().map(str::to_owned))
        .collect();
        assert!(
            !given_up.is_empty(),
            "{leader} logged no publish given up ({published} published before the stall):\n{}",
            running.logs()
        );
        let window = exactly_once(&running, Duration::from_secs(4)).await;
        for key in &given_up {
            assert!(
                window.expected.contains(key),
                "{key}, given up, lies inside the window judged:\n{}",
                running.logs()
            );
        }
        eprintln!(
            "leader stopped with a publish in flight: gave up {given_up:?}; {} ticks exactly once",
            window.expected.len()
        );
    })
    .await;
}
